//! What the soak saw beyond its targets: as lines before the targets' table, and as the JSON's
//! `details`.

use super::Workers;
use super::decode::Slow;
use super::report::{Latency, MAX_RISE_QUOTIENT, Report, Sample};
use crate::json::{Object, json_list, json_string};
use crate::table::{self, Align};
use jitbridge::Device;

/// The workers that ran, and a note when not all did.
fn workers_line(w: Workers) -> String {
    match w {
        Workers::ALL => format!("all: {}", Workers::NAMES.join(", ")),
        Workers::NONE => "none (--workers none: decode alone throughout)".into(),
        _ => format!("{} only (--workers: not all ran)", w.names().join(", ")),
    }
}

/// Slow steps of a phase, and which part dominated them.
fn slow_line(s: &Slow) -> String {
    if s.steps == 0 {
        // A short run: the others' last compiles took the time this phase had.
        return " no steps (the run ended while the others stopped)".into();
    }
    format!(
        " {} of {} steps ({:.2}%); launch dominated {}, wait dominated {}; mean launch {}, wait {}",
        s.over,
        s.steps,
        100.0 * s.over as f64 / s.steps.max(1) as f64,
        s.launch_dominated,
        s.wait_dominated,
        us(s.mean_launch_ns()),
        us(s.mean_wait_ns())
    )
}

/// The library's and the control's p99 rises and their quotient, against the target.
fn rise_line(r: &Report) -> String {
    match r.rise() {
        None => "no step measured in a phase: no rise to judge".into(),
        Some(rise) => format!(
            "p99 with the others / alone: {} {:.2}x, raw control {:.2}x (same run); quotient \
             {:.2}x (target <= {MAX_RISE_QUOTIENT}x: {})",
            r.decode_mode.name(),
            rise.library,
            rise.control,
            rise.quotient(),
            if rise.quotient() <= MAX_RISE_QUOTIENT { "met" } else { "missed" }
        ),
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / (1u64 << 20) as f64)
}

fn us(ns: u64) -> String {
    format!("{:.1} us", ns as f64 / 1e3)
}

/// About ten samples spread over the run, the first and last included.
fn some_samples(samples: &[Sample]) -> Vec<Sample> {
    let step = samples.len().div_ceil(10).max(1);
    let mut picked: Vec<Sample> = samples.iter().step_by(step).copied().collect();
    if let Some(last) = samples.last() {
        if picked.last().is_none_or(|p| p.at != last.at) {
            picked.push(*last);
        }
    }
    picked
}

/// What the soak saw, line by line, before its targets' table.
pub fn print_details(device: Device, r: &Report) {
    out!(
        "jitbridge soak: {} {} ({}), {} s, {} cores",
        device.backend(),
        device.name(),
        device.arch(),
        r.seconds,
        crate::host::cores()
    );
    out!("decode mode  {} ({})", r.decode_mode.name(), r.decode_mode.parts());
    out!(
        "decode prio  {} (0 normal; the device's most urgent: {})",
        r.decode_priority,
        device.max_stream_priority()
    );
    out!("workers      {}", workers_line(r.workers));
    let latencies: Vec<Vec<String>> = [
        ("decode step", "alone", &r.decode_alone),
        ("  launch", "alone", &r.alone_launch),
        ("  wait", "alone", &r.alone_wait),
        ("decode step", "with others", &r.decode_together),
        ("  launch", "with others", &r.together_launch),
        ("  wait", "with others", &r.together_wait),
    ]
    .into_iter()
    .map(|(part, phase, l)| {
        let (p50, p99, max) = (us(l.p50_ns), us(l.p99_ns), us(l.max_ns));
        vec![part.into(), phase.into(), p50, p99, max, l.steps.to_string()]
    })
    .collect();
    let columns = [
        ("latency", Align::Left),
        ("phase", Align::Left),
        ("p50", Align::Right),
        ("p99", Align::Right),
        ("max", Align::Right),
        ("steps", Align::Right),
    ];
    for line in table::lines(&columns, &latencies) {
        out!("{line}");
    }
    if r.control.is_some() {
        out!("decode rise  {}", rise_line(r));
    }
    match &r.threshold {
        None => out!("slow steps   none measured (no decode step alone before the others)"),
        Some(t) => {
            out!(
                "slow steps   above the alone p99 of {} (alone p50: launch {}, wait {}):",
                us(t.total_p99_ns),
                us(t.launch_p50_ns),
                us(t.wait_p50_ns)
            );
            for (label, slow) in [("alone again", &r.slow_alone), ("with others", &r.slow_together)]
            {
                out!("  {label:<11}{}", slow_line(slow));
            }
        }
    }
    out!(
        "outputs      {} checked, {} inexact, {} errors; forked child: {}",
        r.checked,
        r.inexact,
        r.errors,
        r.child
    );
    out!(
        "kernels      {} first launches by the workers; builds {}, disk loads {}, hits {}",
        r.first_launches,
        r.builds,
        r.disk_hits,
        r.hits
    );
    out!(
        "driver       {} device allocations, {} frees over the run",
        r.driver_allocations,
        r.driver_frees
    );
    let samples: Vec<Vec<String>> = some_samples(&r.samples)
        .iter()
        .map(|s| {
            let at = format!("{:.1} s", s.at);
            vec![at, mib(s.live), mib(s.peak_live), mib(s.reserved), mib(s.rss)]
        })
        .collect();
    let columns = [
        ("memory at", Align::Right),
        ("live", Align::Right),
        ("peak live", Align::Right),
        ("reserved", Align::Right),
        ("RSS", Align::Right),
    ];
    for line in table::lines(&columns, &samples) {
        out!("{line}");
    }
    out!(
        "RSS floor    {} early after warm-up, {} late, {} at the end",
        mib(r.rss_warm),
        mib(r.rss_late),
        mib(r.rss_end)
    );
    for e in &r.first_errors {
        out!("error        {e}");
    }
}

/// What the soak saw beyond its rows, for the JSON's `details` (docs/JSON.md).
pub fn details_json(r: &Report) -> String {
    let latency = |l: &Latency| {
        Object::new()
            .count("steps", l.steps)
            .count("p50_ns", l.p50_ns)
            .count("p99_ns", l.p99_ns)
            .count("max_ns", l.max_ns)
            .build()
    };
    let slow = |s: &Slow| {
        Object::new()
            .count("steps", s.steps)
            .count("over", s.over)
            .count("launch_dominated", s.launch_dominated)
            .count("wait_dominated", s.wait_dominated)
            .count("mean_launch_ns", s.mean_launch_ns())
            .count("mean_wait_ns", s.mean_wait_ns())
            .build()
    };
    let threshold = r.threshold.map_or("null".into(), |t| {
        Object::new()
            .count("total_p99_ns", t.total_p99_ns)
            .count("launch_p50_ns", t.launch_p50_ns)
            .count("wait_p50_ns", t.wait_p50_ns)
            .build()
    });
    let samples = r.samples.iter().map(|s| {
        Object::new()
            .number("at_s", s.at)
            .count("live", s.live)
            .count("peak_live", s.peak_live)
            .count("reserved", s.reserved)
            .count("rss", s.rss)
            .count("modules", s.modules)
            .build()
    });
    let control = |pick: fn(&(Latency, Latency)) -> &Latency| {
        r.control.as_ref().map_or("null".into(), |c| latency(pick(c)))
    };
    let rise = r.rise().map_or("null".into(), |rise| {
        Object::new()
            .number("library", rise.library)
            .number("control", rise.control)
            .number("quotient", rise.quotient())
            .build()
    });
    Object::new()
        .raw("decode_alone", latency(&r.decode_alone))
        .raw("decode_together", latency(&r.decode_together))
        .raw("alone_launch", latency(&r.alone_launch))
        .raw("alone_wait", latency(&r.alone_wait))
        .raw("together_launch", latency(&r.together_launch))
        .raw("together_wait", latency(&r.together_wait))
        .raw("control_alone", control(|c| &c.0))
        .raw("control_together", control(|c| &c.1))
        .raw("rise", rise)
        .raw("slow_threshold", threshold)
        .raw("slow_alone", slow(&r.slow_alone))
        .raw("slow_together", slow(&r.slow_together))
        .count("checked", r.checked)
        .count("inexact", r.inexact)
        .count("errors", r.errors)
        .raw("first_errors", json_list(r.first_errors.iter().map(|e| json_string(e))))
        .text("child", &r.child)
        .flag("child_ok", r.child_ok)
        .flag("exact", r.exact())
        .count("first_launches", r.first_launches)
        .count("builds", r.builds)
        .count("disk_hits", r.disk_hits)
        .count("hits", r.hits)
        .count("driver_allocations", r.driver_allocations)
        .count("driver_frees", r.driver_frees)
        .raw("samples", json_list(samples))
        .count("rss_warm", r.rss_warm)
        .count("rss_late", r.rss_late)
        .count("rss_end", r.rss_end)
        .count("module_rss", r.module_rss)
        .count("modules_after_warm", r.modules_after_warm)
        .build()
}

#[cfg(test)]
mod tests {
    use super::slow_line;
    use crate::soak::decode::Slow;

    /// A phase a short run left no time for says so, not "0 of 0 steps (0.00%)".
    #[test]
    fn a_phase_without_steps_says_why() {
        let none = Slow {
            steps: 0,
            over: 0,
            launch_dominated: 0,
            wait_dominated: 0,
            launch_ns: 0,
            wait_ns: 0,
        };
        assert_eq!(slow_line(&none), " no steps (the run ended while the others stopped)");
        let some = Slow {
            steps: 4,
            over: 1,
            launch_dominated: 1,
            wait_dominated: 0,
            launch_ns: 2000,
            wait_ns: 0,
        };
        assert!(slow_line(&some).starts_with(" 1 of 4 steps (25.00%)"), "{}", slow_line(&some));
    }
}
