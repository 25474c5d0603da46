//! The bench's rows: a measure, its baseline, and the target it is judged against; printed as a
//! table or as JSON.

use super::Scale;
use crate::histogram::Histogram;
use crate::json::{json_number, json_string};
use jitbridge::Device;

/// The targets were set for, and measured on, the lent H200 host.
pub const H200: &str = "H200 host, 16 cores";
pub const H200_CUDA: &str = "H200 host, cuda backend";

/// What a row should reach, and on which hardware that was asked for.
#[derive(Clone, Copy)]
pub struct Target {
    /// Ceiling of the value, in the row's unit.
    pub max_value: Option<f64>,
    /// Ceiling of value / baseline.
    pub max_ratio: Option<f64>,
    pub text: &'static str,
    pub hardware: &'static str,
}

impl Target {
    fn met(&self, value: f64, ratio: Option<f64>) -> bool {
        let value_ok = self.max_value.is_none_or(|max| value <= max);
        let ratio_ok = match self.max_ratio {
            None => true,
            Some(max) => ratio.is_some_and(|r| r <= max),
        };
        value_ok && ratio_ok
    }
}

pub struct Row {
    pub section: &'static str,
    pub name: String,
    pub value: f64,
    pub unit: &'static str,
    pub baseline: Option<f64>,
    pub target: Option<Target>,
}

impl Row {
    pub fn ratio(&self) -> Option<f64> {
        self.baseline.filter(|b| *b > 0.0).map(|b| self.value / b).filter(|r| r.is_finite())
    }
    pub fn met(&self) -> Option<bool> {
        self.target.map(|t| t.met(self.value, self.ratio()))
    }
}

/// One row per power-of-two latency bucket of `histogram`.
pub fn histogram_rows(
    rows: &mut Vec<Row>,
    section: &'static str,
    label: &str,
    histogram: &Histogram,
) {
    for (lower, count) in histogram.log2_buckets() {
        let upper = if lower == 0 { 1 } else { lower * 2 };
        rows.push(Row {
            section,
            name: format!("{label}: [{}, {})", pretty(lower as f64), pretty(upper as f64)),
            value: count as f64,
            unit: "samples",
            baseline: None,
            target: None,
        });
    }
}

fn pretty(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} us", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

pub fn print_table(device: Device, scale: &Scale, rows: &[Row]) {
    out!(
        "jitbridge bench: {} {} ({}), {} cores{}",
        device.backend(),
        device.name(),
        device.arch(),
        cores(),
        if scale.quick {
            ", --quick: every measure small, the numbers are not comparable"
        } else {
            ""
        }
    );
    out!(
        "{:<20} {:<48} {:>11} {:>11} {:>9}  {:<6}  target (set for)",
        "section",
        "measure",
        "value",
        "baseline",
        "ratio",
        "met"
    );
    for row in rows {
        let value = if row.unit == "ns" {
            pretty(row.value)
        } else {
            format!("{} {}", row.value, row.unit)
        };
        let baseline = row.baseline.map(pretty).unwrap_or_default();
        let ratio = row.ratio().map(|r| format!("{r:.2}x")).unwrap_or_default();
        let (met, target) = match (row.met(), row.target) {
            (Some(met), Some(t)) => {
                (if met { "met" } else { "missed" }, format!("{} ({})", t.text, t.hardware))
            }
            _ => ("", String::new()),
        };
        out!(
            "{:<20} {:<48} {:>11} {:>11} {:>9}  {:<6}  {}",
            row.section,
            row.name,
            value,
            baseline,
            ratio,
            met,
            target
        );
    }
    out!("ratio = value / baseline; for lookups the baseline is the plain read-lock protocol");
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn json_target(target: Option<Target>) -> String {
    match target {
        None => "null".into(),
        Some(t) => format!(
            "{{\"text\":{},\"max_value\":{},\"max_ratio\":{},\"hardware\":{}}}",
            json_string(t.text),
            json_number(t.max_value),
            json_number(t.max_ratio),
            json_string(t.hardware)
        ),
    }
}

pub fn print_json(device: Device, scale: &Scale, rows: &[Row]) {
    let items: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{{\"section\":{},\"measure\":{},\"value\":{},\"unit\":{},\"baseline\":{},\"ratio\":{},\"target\":{},\"met\":{}}}",
                json_string(r.section),
                json_string(&r.name),
                json_number(Some(r.value)),
                json_string(r.unit),
                json_number(r.baseline),
                json_number(r.ratio()),
                json_target(r.target),
                r.met().map_or("null".to_string(), |m| m.to_string())
            )
        })
        .collect();
    out!(
        "{{\"backend\":{},\"device\":{},\"arch\":{},\"cores\":{},\"quick\":{},\"rows\":[{}]}}",
        json_string(&device.backend()),
        json_string(&device.name()),
        json_string(&device.arch()),
        cores(),
        scale.quick,
        items.join(",")
    );
}
