//! The soak's report, as a table or as JSON.

use super::Workers;
use super::decode::Slow;
use super::report::{Latency, Report, Sample};
use crate::json::{json_number, json_string};
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

pub fn print_table(device: Device, r: &Report) {
    out!(
        "jitbridge soak: {} {} ({}), {} s, {} cores",
        device.backend(),
        device.name(),
        device.arch(),
        r.seconds,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    out!("decode mode  {} ({})", r.decode_mode.name(), r.decode_mode.parts());
    out!("workers      {}", workers_line(r.workers));
    for (part, label, l) in [
        ("decode step", "alone", &r.decode_alone),
        ("  launch", "alone", &r.alone_launch),
        ("  wait", "alone", &r.alone_wait),
        ("decode step", "with others", &r.decode_together),
        ("  launch", "with others", &r.together_launch),
        ("  wait", "with others", &r.together_wait),
    ] {
        out!(
            "{part:<12} {label:<12} p50 {:>10}  p99 {:>10}  max {:>10}  ({} steps)",
            us(l.p50_ns),
            us(l.p99_ns),
            us(l.max_ns),
            l.steps
        );
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
    out!(
        "memory       {:>7}  {:>12} {:>12} {:>12} {:>12}",
        "at",
        "live",
        "peak live",
        "reserved",
        "RSS"
    );
    for s in some_samples(&r.samples) {
        out!(
            "             {:>6.1}s  {:>12} {:>12} {:>12} {:>12}",
            s.at,
            mib(s.live),
            mib(s.peak_live),
            mib(s.reserved),
            mib(s.rss)
        );
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
    out!("{:<36} {:<52} {:<14} met", "target", "value", "target");
    for (name, value, target, met) in r.targets() {
        let met = match met {
            Some(true) => "met",
            Some(false) => "missed",
            None => "not measured",
        };
        out!("{name:<36} {value:<52} {target:<14} {met}");
    }
}

pub fn print_json(device: Device, r: &Report) {
    let latency = |l: &Latency| {
        format!(
            "{{\"steps\":{},\"p50_ns\":{},\"p99_ns\":{},\"max_ns\":{}}}",
            l.steps, l.p50_ns, l.p99_ns, l.max_ns
        )
    };
    let samples: Vec<String> = r
        .samples
        .iter()
        .map(|s| {
            format!(
                "{{\"at_s\":{},\"live\":{},\"peak_live\":{},\"reserved\":{},\"rss\":{},\"modules\":{}}}",
                s.at, s.live, s.peak_live, s.reserved, s.rss, s.modules
            )
        })
        .collect();
    let targets: Vec<String> = r
        .targets()
        .iter()
        .map(|(name, value, target, met)| {
            format!(
                "{{\"name\":{},\"value\":{},\"target\":{},\"met\":{}}}",
                json_string(name),
                json_string(value),
                json_string(target),
                met.map_or("null".into(), |m| m.to_string())
            )
        })
        .collect();
    let errors: Vec<String> = r.first_errors.iter().map(|e| json_string(e)).collect();
    let slow = |s: &Slow| {
        format!(
            "{{\"steps\":{},\"over\":{},\"launch_dominated\":{},\"wait_dominated\":{},\
             \"mean_launch_ns\":{},\"mean_wait_ns\":{}}}",
            s.steps,
            s.over,
            s.launch_dominated,
            s.wait_dominated,
            s.mean_launch_ns(),
            s.mean_wait_ns()
        )
    };
    let threshold = r.threshold.map_or("null".into(), |t| {
        format!(
            "{{\"total_p99_ns\":{},\"launch_p50_ns\":{},\"wait_p50_ns\":{}}}",
            t.total_p99_ns, t.launch_p50_ns, t.wait_p50_ns
        )
    });
    let names: Vec<String> = r.workers.names().iter().map(|n| json_string(n)).collect();
    let parts = format!(
        "\"decode_mode\":{},\"workers\":[{}],\"all_workers\":{},\"alone_launch\":{},\
         \"alone_wait\":{},\"together_launch\":{},\"together_wait\":{},\"slow_threshold\":{},\
         \"slow_alone\":{},\"slow_together\":{}",
        json_string(r.decode_mode.name()),
        names.join(","),
        r.workers == Workers::ALL,
        latency(&r.alone_launch),
        latency(&r.alone_wait),
        latency(&r.together_launch),
        latency(&r.together_wait),
        threshold,
        slow(&r.slow_alone),
        slow(&r.slow_together)
    );
    out!(
        "{{\"backend\":{},\"device\":{},\"seconds\":{},\"decode_alone\":{},\"decode_together\":{},\
         \"p99_ratio\":{},\"checked\":{},\"inexact\":{},\"errors\":{},\"first_errors\":[{}],\
         \"child\":{},\"child_ok\":{},\"exact\":{},\"first_launches\":{},\"builds\":{},\
         \"disk_hits\":{},\"hits\":{},\"driver_allocations\":{},\"driver_frees\":{},\
         \"reserved_ratio\":{},\"rss_warm\":{},\
         \"rss_late\":{},\"rss_end\":{},\"rss_growth\":{},\
         \"module_rss\":{},\"modules_after_warm\":{},\"rss_growth_net\":{},{},\"samples\":[{}],\
         \"targets\":[{}],\"passed\":{}}}",
        json_string(&device.backend()),
        json_string(&device.name()),
        r.seconds,
        latency(&r.decode_alone),
        latency(&r.decode_together),
        json_number(Some(r.p99_ratio())),
        r.checked,
        r.inexact,
        r.errors,
        errors.join(","),
        json_string(&r.child),
        r.child_ok,
        r.exact(),
        r.first_launches,
        r.builds,
        r.disk_hits,
        r.hits,
        r.driver_allocations,
        r.driver_frees,
        json_number(r.reserved_ratio()),
        r.rss_warm,
        r.rss_late,
        r.rss_end,
        json_number(Some(r.rss_growth())),
        r.module_rss,
        r.modules_after_warm,
        json_number(Some(r.rss_growth_net())),
        parts,
        samples.join(","),
        targets.join(","),
        r.passed()
    );
}
