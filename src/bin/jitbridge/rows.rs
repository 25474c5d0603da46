//! What `bench` and `soak` report: rows, each a measure with its value, baseline and target,
//! printed as one aligned table or as the JSON document both commands share (docs/JSON.md,
//! `"schema": 1`).

use crate::host;
use crate::json::{Object, json_list, json_string};
use crate::table::{self, Align};
use jitbridge::Device;

/// The JSON document's version: raised when a field changes meaning or goes away (a new field
/// does not raise it).
pub const SCHEMA: u32 = 1;

/// The bench's targets were set for, and measured on, the lent H200 host.
pub const H200: &str = "H200 host, 16 cores";
pub const H200_CUDA: &str = "H200 host, cuda backend";
/// A target every host must meet: exact outputs, bounded memory.
pub const ANY_HOST: &str = "any host";

/// A row's unit, as the JSON spells it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Unit {
    /// Nanoseconds.
    Ns,
    /// Samples in a latency bucket.
    Samples,
    Bytes,
    /// Outputs (wrong outputs and errors).
    Outputs,
    /// A number of things the measure names (compiles, kernels).
    Count,
}

impl Unit {
    pub fn name(self) -> &'static str {
        match self {
            Unit::Ns => "ns",
            Unit::Samples => "samples",
            Unit::Bytes => "bytes",
            Unit::Outputs => "outputs",
            Unit::Count => "count",
        }
    }

    /// `value` in this unit as a person reads it.
    fn show(self, value: f64) -> String {
        match self {
            Unit::Ns => pretty_ns(value),
            Unit::Bytes => format!("{:.2} MiB", value / f64::from(1u32 << 20)),
            Unit::Samples => format!("{value} samples"),
            Unit::Outputs | Unit::Count => format!("{value}"),
        }
    }
}

/// Nanoseconds as ns, us or ms.
/// A count and its noun, plural unless the count is 1: "1 thread", "16 threads".
pub fn counted(count: u64, noun: &str) -> String {
    if count == 1 { format!("1 {noun}") } else { format!("{count} {noun}s") }
}

pub fn pretty_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} us", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

/// What a row should reach, and for which host that was asked.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// Ceiling of the value, in the row's unit.
    pub max_value: Option<f64>,
    /// Ceiling of value / baseline.
    pub max_ratio: Option<f64>,
    pub text: &'static str,
    pub set_for: &'static str,
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

/// One measure: `Row::new(section, measure, value, unit)`, then `.against(baseline)` and
/// `.target(..)` where it has them.
#[derive(Debug)]
pub struct Row {
    /// The group it belongs to; a bench row's starts with its section's number (`bench::run`).
    pub section: String,
    pub measure: String,
    pub value: f64,
    pub unit: Unit,
    pub baseline: Option<f64>,
    pub target: Option<Target>,
    /// Whether `--check` counts this row's target; `note` says why not where it has one.
    pub judged: bool,
    pub note: Option<String>,
}

impl Row {
    pub fn new(section: &str, measure: impl Into<String>, value: f64, unit: Unit) -> Row {
        Row {
            section: section.to_string(),
            measure: measure.into(),
            value,
            unit,
            baseline: None,
            target: None,
            judged: false,
            note: None,
        }
    }

    /// A row that could not be measured here (its tool is missing): no value (JSON null), its
    /// target shown but neither met nor judged, and `why` as its note.
    pub fn skipped(
        section: &str,
        measure: impl Into<String>,
        unit: Unit,
        target: Target,
        why: String,
    ) -> Row {
        Row::new(section, measure, f64::NAN, unit).target(target).not_judged(why)
    }

    /// The value this one is compared with, in the same unit: the ratio is value / baseline.
    pub fn against(mut self, baseline: f64) -> Row {
        self.baseline = Some(baseline);
        self
    }

    /// A target, judged unless [`Row::not_judged`] says why not.
    pub fn target(mut self, target: Target) -> Row {
        self.target = Some(target);
        self.judged = true;
        self
    }

    /// The target is shown with met or missed, but `--check` does not count it.
    pub fn not_judged(mut self, why: impl Into<String>) -> Row {
        self.judged = false;
        self.note = Some(why.into());
        self
    }

    pub fn ratio(&self) -> Option<f64> {
        self.baseline.filter(|b| *b > 0.0).map(|b| self.value / b).filter(|r| r.is_finite())
    }

    pub fn met(&self) -> Option<bool> {
        // A skipped row has no value to judge.
        self.target.filter(|_| self.value.is_finite()).map(|t| t.met(self.value, self.ratio()))
    }

    /// A judged target this run missed: what `--check` fails on.
    pub fn missed(&self) -> bool {
        self.judged && self.met() == Some(false)
    }

    fn json(&self) -> String {
        let target = self.target.map_or("null".into(), |t| {
            Object::new()
                .text("text", t.text)
                .number("max_value", t.max_value)
                .number("max_ratio", t.max_ratio)
                .text("set_for", t.set_for)
                .build()
        });
        Object::new()
            .text("section", &self.section)
            .text("measure", &self.measure)
            .number("value", self.value)
            .text("unit", self.unit.name())
            .number("baseline", self.baseline)
            .number("ratio", self.ratio())
            .raw("target", target)
            .raw("met", self.met().map_or("null".into(), |m| m.to_string()))
            .flag("judged", self.judged)
            .raw("note", self.note.as_deref().map_or("null".into(), json_string))
            .build()
    }
}

/// A ratio with the digits it needs: 1.05x, 0.0055x.
fn pretty_ratio(ratio: f64) -> String {
    if ratio >= 0.1 { format!("{ratio:.2}x") } else { format!("{ratio:.4}x") }
}

/// A whole bench or soak run, as both print it.
pub struct Results {
    pub command: &'static str,
    pub device: Device,
    /// The options that shaped the run, a JSON object.
    pub options: String,
    /// When the run started (UTC) and how long it took.
    pub date: String,
    pub seconds: f64,
    pub rows: Vec<Row>,
    /// What the command saw beyond its rows, a JSON object (`null` for none).
    pub details: String,
}

impl Results {
    pub fn judged(&self) -> usize {
        self.rows.iter().filter(|r| r.judged).count()
    }

    pub fn missed(&self) -> usize {
        self.rows.iter().filter(|r| r.missed()).count()
    }

    /// The rows as one table, the notes of targets not judged, and what `--check` would say.
    pub fn print_table(&self) {
        let columns = [
            ("section", Align::Left),
            ("measure", Align::Left),
            ("value", Align::Right),
            ("baseline", Align::Right),
            ("ratio", Align::Right),
            ("met", Align::Left),
            ("target (set for)", Align::Left),
        ];
        let cells: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|row| {
                let met = match (row.met(), row.judged) {
                    (None, _) => "",
                    (Some(true), true) => "met",
                    (Some(false), true) => "MISSED",
                    (Some(true), false) => "(met)",
                    (Some(false), false) => "(missed)",
                };
                let target =
                    row.target.map_or(String::new(), |t| format!("{} ({})", t.text, t.set_for));
                vec![
                    row.section.clone(),
                    row.measure.clone(),
                    if row.value.is_finite() { row.unit.show(row.value) } else { "skipped".into() },
                    row.baseline.map_or(String::new(), |b| row.unit.show(b)),
                    row.ratio().map_or(String::new(), pretty_ratio),
                    met.to_string(),
                    target,
                ]
            })
            .collect();
        for line in table::lines(&columns, &cells) {
            out!("{line}");
        }
        // A note many rows share (--quick's) is said once.
        let mut notes: Vec<(&str, Vec<&Row>)> = Vec::new();
        for row in &self.rows {
            if let Some(note) = row.note.as_deref() {
                match notes.iter_mut().find(|(n, _)| *n == note) {
                    Some((_, rows)) => rows.push(row),
                    None => notes.push((note, vec![row])),
                }
            }
        }
        for (note, rows) in notes {
            match rows[..] {
                [row] => out!("note: {}, {}: {note}", row.section, row.measure),
                _ => out!("note: {note} ({} rows)", rows.len()),
            }
        }
        let (judged, missed) = (self.judged(), self.missed());
        let judged = match judged {
            0 => "no target".to_string(),
            n => counted(n as u64, "target"),
        };
        out!("judged: {judged}, {missed} missed (with --check, a missed one fails the run)");
        out!("ratio = value / baseline; (met) and (missed): a target shown, not judged");
    }

    pub fn print_json(&self) {
        let device = Object::new()
            .text("spec", &self.device.spec())
            .text("backend", &self.device.backend())
            .text("name", &self.device.name())
            .text("arch", &self.device.arch())
            .count("memory_bytes", self.device.total_memory())
            .build();
        let json = Object::new()
            .count("schema", u64::from(SCHEMA))
            .text("command", self.command)
            .text("jitbridge", crate::VERSION)
            .text("date", &self.date)
            .number("seconds", self.seconds)
            .raw("host", host::json())
            .raw("device", device)
            .raw("options", self.options.clone())
            .raw("rows", json_list(self.rows.iter().map(Row::json)))
            .count("judged", self.judged() as u64)
            .count("missed", self.missed() as u64)
            .flag("passed", self.missed() == 0)
            .raw("details", self.details.clone())
            .build();
        out!("{json}");
    }
}

#[cfg(test)]
mod tests {
    use super::{ANY_HOST, Row, Target, Unit, counted};

    const AT_MOST_ONE: Target =
        Target { max_value: Some(1.0), max_ratio: None, text: "<= 1", set_for: ANY_HOST };
    const HALF: Target =
        Target { max_value: None, max_ratio: Some(0.5), text: "<= 0.5x", set_for: ANY_HOST };

    #[test]
    fn a_target_not_judged_is_never_missed() {
        let missed = Row::new("s", "m", 2.0, Unit::Outputs).target(AT_MOST_ONE);
        assert_eq!((missed.met(), missed.missed()), (Some(false), true));
        let excused = Row::new("s", "m", 2.0, Unit::Outputs).target(AT_MOST_ONE).not_judged("why");
        assert_eq!((excused.met(), excused.missed()), (Some(false), false));
        assert_eq!(excused.note.as_deref(), Some("why"));
        let plain = Row::new("s", "m", 2.0, Unit::Ns);
        assert_eq!((plain.met(), plain.missed(), plain.judged), (None, false, false));
        let skipped = Row::skipped("s", "m", Unit::Ns, AT_MOST_ONE, "no tool".into());
        assert_eq!((skipped.met(), skipped.missed(), skipped.judged), (None, false, false));
        assert_eq!((skipped.note.as_deref(), skipped.ratio()), (Some("no tool"), None));
    }

    #[test]
    fn a_ratio_target_needs_a_baseline() {
        let row = Row::new("s", "m", 1.0, Unit::Ns).target(HALF);
        assert!(row.missed(), "no baseline, no ratio: the target cannot be met");
        assert!(!Row::new("s", "m", 1.0, Unit::Ns).against(4.0).target(HALF).missed());
        assert!(Row::new("s", "m", 3.0, Unit::Ns).against(4.0).target(HALF).missed());
    }

    #[test]
    fn one_of_a_thing_is_singular() {
        assert_eq!(counted(1, "thread"), "1 thread");
        assert_eq!(counted(0, "module"), "0 modules");
        assert_eq!(counted(16, "thread"), "16 threads");
    }
}
