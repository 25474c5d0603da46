//! What a soak saw, and its targets.

use super::decode::{Slow, Threshold};
use super::{DecodeMode, Workers};
use crate::histogram::Histogram;

/// The targets, from the server-life issue.
pub const MAX_P99_RATIO: f64 = 1.1;
pub const MAX_RESERVED_RATIO: f64 = 1.25;
pub const MAX_RSS_GROWTH: f64 = 0.01;

/// Device memory and RSS at one moment, `at` seconds into the run.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub at: f64,
    pub live: u64,
    pub peak_live: u64,
    pub reserved: u64,
    pub rss: u64,
    /// Modules built or loaded from disk so far.
    pub modules: u64,
}

/// What a soak saw.
pub struct Report {
    pub seconds: f64,
    pub decode_mode: DecodeMode,
    /// The other workers that ran.
    pub workers: Workers,
    /// Whole decode steps in each phase.
    pub decode_alone: Latency,
    pub decode_together: Latency,
    /// Their parts: the launch call, and the wait for the output.
    pub alone_launch: Latency,
    pub alone_wait: Latency,
    pub together_launch: Latency,
    pub together_wait: Latency,
    /// What a slow step was (None when no step was measured alone before the others), and the
    /// slow steps in the second alone phase and with the others.
    pub threshold: Option<Threshold>,
    pub slow_alone: Slow,
    pub slow_together: Slow,
    /// Outputs checked, and how many of them were not exact.
    pub checked: u64,
    pub inexact: u64,
    /// Errors met (the first few kept as text).
    pub errors: u64,
    pub first_errors: Vec<String>,
    /// New kernels the first-launch workers launched.
    pub first_launches: u64,
    pub builds: u64,
    pub hits: u64,
    pub disk_hits: u64,
    /// Device memory the allocator took from and gave back to the driver over the run: each is a
    /// driver call that other threads' launches may wait on.
    pub driver_allocations: u64,
    pub driver_frees: u64,
    /// Samples after warm-up, in order.
    pub samples: Vec<Sample>,
    /// RSS floors of the third and last quarter of the samples with the others (the first half
    /// is the allocator's warm-up, see `run`), and RSS at the very end.
    pub rss_warm: u64,
    pub rss_late: u64,
    pub rss_end: u64,
    /// RSS one loaded module costs (measured before the run), and the modules loaded between
    /// the two RSS floors.
    pub module_rss: u64,
    pub modules_after_warm: u64,
    /// The forked child: "exact", or what went wrong.
    pub child: String,
    pub child_ok: bool,
}

/// Decode-step latencies (launch and wait) in one phase.
pub struct Latency {
    pub steps: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

impl Latency {
    pub fn of(histogram: &Histogram) -> Latency {
        Latency {
            steps: histogram.total(),
            p50_ns: histogram.quantile(0.5),
            p99_ns: histogram.quantile(0.99),
            max_ns: histogram.max,
        }
    }
}

impl Report {
    pub fn exact(&self) -> bool {
        self.inexact == 0 && self.errors == 0 && self.child_ok
    }
    pub fn p99_ratio(&self) -> f64 {
        self.decode_together.p99_ns as f64 / self.decode_alone.p99_ns.max(1) as f64
    }
    /// The most reserved / peak live seen after warm-up (None without a sample).
    pub fn reserved_ratio(&self) -> Option<f64> {
        self.samples
            .iter()
            .filter(|s| s.peak_live > 0)
            .map(|s| s.reserved as f64 / s.peak_live as f64)
            .max_by(f64::total_cmp)
    }
    /// RSS growth after warm-up: from the first floor to the last, as a fraction of the first.
    pub fn rss_growth(&self) -> f64 {
        self.rss_late.saturating_sub(self.rss_warm) as f64 / self.rss_warm.max(1) as f64
    }
    /// The same, less the modules loaded after warm-up at their measured price: what the
    /// target judges.
    pub fn rss_growth_net(&self) -> f64 {
        let modules = self.modules_after_warm * self.module_rss;
        self.rss_late.saturating_sub(self.rss_warm + modules) as f64 / self.rss_warm.max(1) as f64
    }
    /// Each target: name, measured text, target text, met (None: not measurable here).
    pub fn targets(&self) -> Vec<(&'static str, String, String, Option<bool>)> {
        let reserved = self.reserved_ratio();
        vec![
            (
                "every output exact",
                format!(
                    "{} checked, {} inexact, {} errors, child {}",
                    self.checked, self.inexact, self.errors, self.child
                ),
                "all exact, no error".into(),
                Some(self.exact()),
            ),
            (
                "decode p99 with others vs alone",
                format!(
                    "{:.2}x (workers {}, decode {})",
                    self.p99_ratio(),
                    self.workers.describe(),
                    self.decode_mode.name()
                ),
                format!("<= {MAX_P99_RATIO}x"),
                Some(self.p99_ratio() <= MAX_P99_RATIO),
            ),
            (
                "reserved vs peak live device bytes",
                reserved.map_or("no sample".into(), |r| format!("{r:.3}x")),
                format!("<= {MAX_RESERVED_RATIO}x"),
                reserved.map(|r| r <= MAX_RESERVED_RATIO),
            ),
            (
                "RSS growth after warm-up, less modules",
                format!(
                    "{:.3}% ({:.3}% less {} modules at {} KiB)",
                    self.rss_growth_net() * 100.0,
                    self.rss_growth() * 100.0,
                    self.modules_after_warm,
                    self.module_rss / 1024
                ),
                format!("< {}%", MAX_RSS_GROWTH * 100.0),
                Some(self.rss_growth_net() < MAX_RSS_GROWTH),
            ),
        ]
    }
}

impl Report {
    /// What the exit status judges: exactness and the memory targets, not latency.
    pub fn passed(&self) -> bool {
        self.exact()
            && self.reserved_ratio().is_none_or(|r| r <= MAX_RESERVED_RATIO)
            && self.rss_growth_net() < MAX_RSS_GROWTH
    }
}
