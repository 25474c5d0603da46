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
    Ok(())
}
