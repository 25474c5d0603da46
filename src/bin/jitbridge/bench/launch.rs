//! Section 4 of the bench: the probe's launch path against a bare backend launch plus an event
//! record, both on one warm kernel.

use super::{Context, fresh_variant};
use crate::rows::{H200, Row, Target, Unit};
use jitbridge::{Array, DType, Stream, jit_race_probe_array, race, streams, sys_tools};
use std::time::Instant;

/// The raw and full loops alternate in this many blocks each.
const PROBE_BLOCKS: i32 = 10;

pub fn probe_launch_path(
    context: &mut Context<'_>,
    rows: &mut Vec<Row>,
) -> Result<(), jitbridge::Error> {
    let (device, launches) = (context.device, context.scale.probe_launches);
    // A stream of the section's own: what earlier sections did on the thread's default stream
    // (an older array read behind newer work makes a stream record every event for a while)
    // does not carry over.
    let probe_stream = Stream::new(device)?;
    let _installed = streams::install_thread_local_default_stream(&probe_stream)?;
    let input = Array::arange(device, race::PROBE_ELEMENTS, DType::F32)?;
    let variant = fresh_variant();
    let full_launches = |launches: i32| -> Result<f64, jitbridge::Error> {
        let start = Instant::now();
        let mut last = None;
        for _ in 0..launches {
            last = Some(jit_race_probe_array(&input, variant)?);
        }
        if let Some(last) = last {
            last.eval()?;
        }
        Ok(start.elapsed().as_nanos() as f64 / f64::from(launches))
    };
    // Warm: the buffer cache and event pool first fill up to the depth the loop keeps in
    // flight (a driver allocation each), as the raw path's one output is allocated untimed.
    let cold_pools_ns = full_launches(launches)?;
    // The two alternate in blocks, so that drift of the host (the raw loop alone moves by 8%
    // between runs a second apart on the H200 host) falls on both alike.
    let (mut raw_sum, mut full_sum) = (0.0, 0.0);
    let block = (launches / PROBE_BLOCKS).max(1);
    for _ in 0..PROBE_BLOCKS {
        raw_sum += sys_tools::raw_probe_launches(&input, variant, block)?;
        full_sum += full_launches(block)?;
    }
    let (raw_ns, full_ns) = (raw_sum / f64::from(PROBE_BLOCKS), full_sum / f64::from(PROBE_BLOCKS));
    let section = "probe launch";
    rows.push(
        Row::new(section, "per call, full path vs raw launch + event", full_ns, Unit::Ns)
            .against(raw_ns)
            .target(Target {
                max_value: None,
                max_ratio: Some(1.05),
                text: "<= 1.05x raw",
                set_for: H200,
            }),
    );
    rows.push(
        Row::new(section, "per call, the first loop (pools filling up)", cold_pools_ns, Unit::Ns)
            .against(raw_ns),
    );
    // The driver's calls per warm launch, where the backend counts them (cuda): the difference
    // of 1 + n launches and 1, so that each loop's own start and end cancel.
    // SAFETY: the sections run one at a time and the earlier ones joined their threads, so this
    // thread alone uses the backend while the table is switched.
    if unsafe { sys_tools::count_driver_calls(device, true) }.is_err() {
        return Ok(());
    }
    let raw_launches = |n| sys_tools::raw_probe_launches(&input, variant, n);
    let counts = calls_per_launch(device, block, &full_launches)
        .and_then(|full| Ok((full, calls_per_launch(device, block, &raw_launches)?)));
    // SAFETY: as above.
    unsafe { sys_tools::count_driver_calls(device, false) }?;
    let (full, raw) = counts?;
    let total = |calls: &[(String, f64)]| calls.iter().map(|(_, count)| count).sum::<f64>();
    rows.push(
        Row::new(
            section,
            "driver calls per warm launch, full path vs raw",
            total(&full),
            Unit::Count,
        )
        .against(total(&raw)),
    );
    for (path, calls) in [("full path", &full), ("raw", &raw)] {
        for (name, count) in calls {
            let measure = format!("driver calls per warm launch, {path}: {name}");
            rows.push(Row::new(section, measure, *count, Unit::Count));
        }
    }
    Ok(())
}

/// Each driver call per launch of `run` (which makes that many launches) on this thread: the
/// calls of 1 + `launches` launches less those of 1.
fn calls_per_launch(
    device: jitbridge::Device,
    launches: i32,
    run: &dyn Fn(i32) -> Result<f64, jitbridge::Error>,
) -> Result<Vec<(String, f64)>, jitbridge::Error> {
    sys_tools::take_thread_driver_calls(device)?;
    run(1)?;
    let one = sys_tools::take_thread_driver_calls(device)?;
    run(1 + launches)?;
    let many = sys_tools::take_thread_driver_calls(device)?;
    Ok(many
        .into_iter()
        .filter_map(|(name, count)| {
            let less = one.iter().find(|(n, _)| *n == name).map_or(0, |(_, c)| *c);
            let extra = count.saturating_sub(less);
            (extra > 0).then(|| (name, extra as f64 / f64::from(launches)))
        })
        .collect())
}
