//! What a soak saw, and its targets as rows.

use super::decode::{Slow, Threshold};
use super::{DecodeMode, Workers};
use crate::histogram::Histogram;
use crate::rows::{ANY_HOST, H200, Row, Target, Unit, counted};

/// The targets, from the server-life issue. The decode step's p99 rises with the others as
/// much for a loop of bare driver calls (the raw control) as for the library's (1.50x and 1.47x
/// on the H200): the library's rise is judged against the control's in the same run.
pub const MAX_RISE_QUOTIENT: f64 = 1.05;
pub const MAX_RESERVED_RATIO: f64 = 1.25;
pub const MAX_RSS_GROWTH: f64 = 0.01;
/// The shortest soak whose RSS growth is judged. The floors compared are the least RSS of a
/// tenth of the run each (the third and last quarter of the phase with the others, after the
/// allocator's warm-up in its first half). On 2 busy cores (2026-12-01) runs of 10 to 30 s moved
/// them by 0.2 to 1.35% with no leak (arena warm-up, the fork), runs of 60 s by 0.53 to 0.57%.
pub const MIN_RSS_SECONDS: u64 = 60;

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
    /// The decode stream's priority, as the device reports it.
    pub decode_priority: i32,
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
    /// The raw control's whole steps, interleaved with the mode's, alone and with the others
    /// (None in raw mode, whose own steps are the control's).
    pub control: Option<(Latency, Latency)>,
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
#[derive(Clone, Copy, Debug)]
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

/// How the library's decode p99 rose with the others against the raw control's in one run.
#[derive(Clone, Copy, Debug)]
pub struct Rise {
    /// p99 with the others / alone, of the mode's steps and of the control's.
    pub library: f64,
    pub control: f64,
}

impl Rise {
    /// The library's rise over the control's: what MAX_RISE_QUOTIENT judges.
    pub fn quotient(&self) -> f64 {
        self.library / self.control
    }
}

impl Report {
    /// The library's and the control's rises; None in raw mode or when a phase has no step.
    pub fn rise(&self) -> Option<Rise> {
        let (alone, together) = self.control?;
        let ratio = |alone: &Latency, together: &Latency| {
            (alone.steps > 0 && together.steps > 0 && alone.p99_ns > 0)
                .then(|| together.p99_ns as f64 / alone.p99_ns as f64)
        };
        Some(Rise {
            library: ratio(&self.decode_alone, &self.decode_together)?,
            control: ratio(&alone, &together).filter(|r| *r > 0.0)?,
        })
    }

    /// The decode rows: the mode's rise and, outside raw mode, the control's and the judged
    /// quotient of the two. The quotient's row compares the mode's p99 with the others against
    /// its alone p99 times the control's rise (what it would be if the library added nothing),
    /// so that its ratio is the quotient.
    pub fn decode_rows(&self, section: &str, workers: &str) -> Vec<Row> {
        let mode = self.decode_mode.name();
        let (alone, together) = (&self.decode_alone, &self.decode_together);
        let mut rows = vec![
            Row::new(
                section,
                format!("step p99, with the others vs alone (workers {workers}, decode {mode})"),
                together.p99_ns as f64,
                Unit::Ns,
            )
            .against(alone.p99_ns as f64),
        ];
        let Some((control_alone, control_together)) = self.control else {
            return rows;
        };
        rows.push(
            Row::new(
                section,
                "raw control step p99, with the others vs alone (same run, interleaved)",
                control_together.p99_ns as f64,
                Unit::Ns,
            )
            .against(control_alone.p99_ns as f64),
        );
        let expected = self.rise().map_or(0.0, |r| alone.p99_ns as f64 * r.control);
        rows.push(
            Row::new(
                section,
                format!(
                    "{mode}'s rise vs the control's: p99 with the others vs alone p99 x the \
                     control's rise"
                ),
                together.p99_ns as f64,
                Unit::Ns,
            )
            .against(expected)
            .target(Target {
                max_value: None,
                max_ratio: Some(MAX_RISE_QUOTIENT),
                text: "<= 1.05x",
                set_for: H200,
            }),
        );
        rows
    }

    pub fn exact(&self) -> bool {
        self.inexact == 0 && self.errors == 0 && self.child_ok
    }
    /// RSS growth after warm-up, from the first floor to the last, less the modules loaded
    /// meanwhile at their measured price: what the target judges, against the first floor.
    pub fn rss_growth_net_bytes(&self) -> u64 {
        let modules = self.modules_after_warm * self.module_rss;
        self.rss_late.saturating_sub(self.rss_warm + modules)
    }
    /// The worst sample after warm-up by reserved / peak live (None without a sample).
    fn worst_reserved(&self) -> Option<&Sample> {
        self.samples.iter().filter(|s| s.peak_live > 0).max_by(|a, b| {
            (a.reserved as f64 / a.peak_live as f64)
                .total_cmp(&(b.reserved as f64 / b.peak_live as f64))
        })
    }

    /// The targets as rows. Exactness and device memory are judged on every run; the decode
    /// p99's rise against the control's too (its target was set for the H200 host; none in raw
    /// mode); RSS growth only on a run of at least MIN_RSS_SECONDS.
    pub fn rows(&self) -> Vec<Row> {
        let wrong = self.inexact + self.errors + u64::from(!self.child_ok);
        let outputs = format!(
            "wrong outputs and errors ({} checked; forked child: {})",
            self.checked, self.child
        );
        let (reserved, peak) = self
            .worst_reserved()
            .map_or((0.0, None), |s| (s.reserved as f64, Some(s.peak_live as f64)));
        let rss = format!(
            "RSS growth after warm-up, less {} at {} KiB",
            counted(self.modules_after_warm, "module"),
            self.module_rss / 1024
        );
        let rss_row = Row::new("memory", rss, self.rss_growth_net_bytes() as f64, Unit::Bytes)
            .against(self.rss_warm as f64)
            .target(Target {
                max_value: None,
                max_ratio: Some(MAX_RSS_GROWTH),
                text: "<= 1%",
                set_for: ANY_HOST,
            });
        let reserved_row = Row::new(
            "memory",
            "reserved vs peak live device bytes, the worst sample",
            reserved,
            Unit::Bytes,
        );
        let reserved_row = match peak {
            Some(peak) => reserved_row.against(peak),
            None => reserved_row,
        };
        let mut rows =
            vec![Row::new("outputs", outputs, wrong as f64, Unit::Outputs).target(Target {
                max_value: Some(0.0),
                max_ratio: None,
                text: "none",
                set_for: ANY_HOST,
            })];
        rows.extend(self.decode_rows("decode", &self.workers.describe()));
        rows.extend([
            reserved_row.target(Target {
                max_value: None,
                max_ratio: Some(MAX_RESERVED_RATIO),
                text: "<= 1.25x",
                set_for: ANY_HOST,
            }),
            if self.seconds < MIN_RSS_SECONDS as f64 {
                rss_row.not_judged(format!(
                    "too short to judge RSS growth: needs {MIN_RSS_SECONDS} s (this run: {} s)",
                    self.seconds
                ))
            } else {
                rss_row
            },
        ]);
        rows
    }
}
