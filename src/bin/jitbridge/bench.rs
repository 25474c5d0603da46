//! `jitbridge bench`: the launch path's costs, each against its baseline, measured in one run.
//! Each section is a function in a module of bench/ that pushes rows; SECTIONS lists them.

mod bounds;
mod cold;
mod compile_options;
mod decode;
mod farm;
mod fleet;
mod graph;
mod launch;
mod lookups;
pub mod new_process;
pub mod warm_start;

use crate::args::{
    Command, DEVICE_OPT, Opt, device_or_default, no_positional, parse_args, parse_count, print_help,
};
use crate::json::{Object, json_list};
use crate::progress::Progress;
use crate::rows::{Results, Row};
use crate::{Failure, Outcome};
use jitbridge::{CustomKernel, Device};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Instant;

pub const BENCH: Command = Command {
    name: "bench",
    usage: "jitbridge bench [--json] [--quick] [--check] [--device cpu|gpu|cuda|rocm[:N]]
                       [--sections LIST]",
    about: "measure the launch path's costs, each against its baseline",
    details: "Measures, in one run: hit lookups (lookaside vs the plain locked protocol) at 1-16
threads, hit latency while other threads build, the probe launch path vs a raw launch, a cold
first launch vs the compiler alone, a new process's first launch with and without a disk cache
entry, decode steps while other threads first-launch kernels, a bounds-checked kernel's launch
against the same kernel unchecked, new processes starting warm (200 kernels from a bundle
made in another checkout, and with no cache at all; 32 processes first-launching 50 new kernels
on one cache folder; a fleet on a Redis remote tier, against a redis-server the bench starts:
JITBRIDGE_REDIS_SERVER, else the one on PATH; without one those rows are skipped),
a four-kernel step replayed as one captured graph against one launch, and a cold compile of the
library's own source with each compiler option set against the plain one (NVRTC's, in a build
with the cuda backend, GPU or not; the cpu compiler's). Each row with a target
says whether this run met it, and which host the target was set for (the H200 host); on other
hosts the row is judged against it all the same.

It takes about 3 minutes (--quick: about 35 s) on 2 cores with the cpu backend, and up to
twice that when other work keeps the cores busy; progress goes to stderr, one updating line on
a terminal, a line per section otherwise, and the time taken at the end.

options:
  --json        one JSON object on stdout instead of the table: the schema shared with
                `jitbridge soak --json`, described in docs/JSON.md
  --quick       every measure once and small: shows the bench works; its numbers are not
                comparable, so no target is judged
  --check       exit with status 1 when a judged target is missed (for CI)
  --device D    cpu, gpu, cuda or rocm, with an optional :N (default: as for run)
  --sections L  only these sections, a comma list of their numbers (1 to 11, as the table
                numbers them), to measure one again without the rest: a row keeps its
                section's number, and a target is judged as in a whole run

exit status: 0 when the bench ran (with --check: and met every judged target), 1 when --check
found a missed one, 2 on an error",
};

const OPTIONS: [Opt; 5] = [
    Opt { flag: "--json", value: None },
    Opt { flag: "--quick", value: None },
    Opt { flag: "--check", value: None },
    DEVICE_OPT,
    Opt { flag: "--sections", value: Some("a comma list of section numbers, 1 to 11") },
];

/// The sections `--sections` names (numbers from 1, in SECTIONS' order), each once, in order;
/// every section without it.
fn parse_sections(text: Option<&str>) -> Result<Vec<usize>, String> {
    let Some(text) = text else {
        return Ok((1..=SECTIONS.len()).collect());
    };
    let mut chosen = text
        .split(',')
        .map(|n| parse_count("--sections", n.trim(), SECTIONS.len() as u64))
        .collect::<Result<Vec<usize>, String>>()?;
    chosen.sort_unstable();
    chosen.dedup();
    Ok(chosen)
}

pub fn bench_command(args: &[String]) -> Outcome {
    let Some(args) = parse_args(&BENCH, args, &OPTIONS)? else {
        print_help(&BENCH);
        return Ok(true);
    };
    no_positional(&BENCH, &args)?;
    let sections = parse_sections(args.get("--sections")).map_err(|m| Failure::Usage(m, &BENCH))?;
    let device = device_or_default(args.get("--device"))?;
    let scale = if args.has("--quick") { &Scale::QUICK } else { &Scale::FULL };
    let date = crate::host::now_utc();
    let start = Instant::now();
    let mut rows = run(device, scale, &sections)?;
    if scale.quick {
        rows = rows
            .into_iter()
            .map(|row| match row.target {
                // A skipped row keeps its own note (why it was skipped).
                Some(_) if row.value.is_finite() => {
                    row.not_judged("--quick: numbers not comparable")
                }
                _ => row,
            })
            .collect();
    }
    let results = Results {
        command: "bench",
        device,
        options: Object::new()
            .flag("quick", scale.quick)
            .raw("sections", json_list(sections.iter().map(|n| n.to_string())))
            .build(),
        date,
        seconds: start.elapsed().as_secs_f64(),
        rows,
        details: "null".into(),
    };
    note!("bench: {:.0} s", results.seconds);
    if args.has("--json") {
        results.print_json();
    } else {
        let partial = if sections.len() == SECTIONS.len() {
            String::new()
        } else {
            let list: Vec<String> = sections.iter().map(usize::to_string).collect();
            format!(", sections {} only", list.join(","))
        };
        out!(
            "jitbridge bench: {} {} ({}), {} cores{partial}{}",
            device.backend(),
            device.name(),
            device.arch(),
            crate::host::cores(),
            if scale.quick { ", --quick: every measure small, no target judged" } else { "" }
        );
        results.print_table();
    }
    Ok(!args.has("--check") || results.missed() == 0)
}

/// What the sections share: the device, how much work each measure does, and the warm kernels
/// sections 1 to 3 look up (built once, by the first that asks).
pub struct Context<'a> {
    pub device: Device,
    pub scale: &'a Scale,
    warm: Option<Vec<CustomKernel>>,
}

impl Context<'_> {
    pub fn warm_kernels(&mut self) -> Result<&[CustomKernel], jitbridge::Error> {
        if self.warm.is_none() {
            self.warm = Some(lookups::warm_kernels(self.device, "lookup")?);
        }
        Ok(self.warm.as_deref().unwrap_or_default())
    }
}

/// A part of the bench: its title on the progress line, about how many seconds it takes (full,
/// --quick) on 2 cores with the cpu backend (release build, 2026-12-01), and the function that
/// measures it.
pub struct Section {
    pub title: &'static str,
    pub seconds: [u32; 2],
    pub measure: fn(&mut Context<'_>, &mut Vec<Row>) -> Result<(), jitbridge::Error>,
}

/// The bench, in the order it runs; a section's number is its place here, which `run` puts
/// before the section name of each row it pushes. A new measure is a function in a module of
/// bench/ that pushes its rows (`Row::new(section, measure, value, unit)` with a section name
/// and no number, then `.against(baseline)` and `.target(..)` where it has them, as the others
/// do) and one line here; docs/JSON.md says what a row holds.
pub const SECTIONS: [Section; 11] = [
    Section { title: "hit lookups", seconds: [15, 1], measure: lookups::hit_lookups },
    Section {
        title: "hit latency during builds",
        seconds: [17, 4],
        measure: lookups::hits_during_builds,
    },
    Section {
        title: "new threads' first launches during builds",
        seconds: [22, 2],
        measure: lookups::new_thread_launches,
    },
    Section { title: "probe launch path", seconds: [1, 1], measure: launch::probe_launch_path },
    Section { title: "cold first launch", seconds: [7, 1], measure: cold::cold_first_launch },
    Section {
        title: "first launch in a new process",
        seconds: [2, 1],
        measure: new_process::new_process_first_launch,
    },
    Section {
        title: "decode steps during first launches (a short soak)",
        seconds: [26, 3],
        measure: decode::decode_under_load,
    },
    Section { title: "bounds checks", seconds: [3, 1], measure: bounds::bounds_check_cost },
    Section {
        title: "new processes starting warm",
        seconds: [85, 20],
        measure: warm_start::start_warm,
    },
    Section { title: "captured graph", seconds: [3, 1], measure: graph::graph_replay },
    Section {
        title: "compile options",
        seconds: [12, 2],
        measure: compile_options::compile_options,
    },
];

/// Probe variants the bench builds come from here up, clear of the run scenario's.
static NEXT_VARIANT: AtomicI32 = AtomicI32::new(900_000_000);

/// How much work each measure does.
pub struct Scale {
    pub lookups_per_thread: usize,
    pub probe_launches: i32,
    pub cold_samples: usize,
    pub builds_each: usize,
    pub new_process_rounds: usize,
    pub new_threads: usize,
    pub soak_seconds: f64,
    /// Starting warm: kernels in the bundle; processes and new kernels on one cache folder.
    pub warm_kernels: usize,
    pub warm_processes: usize,
    pub warm_new_kernels: usize,
    /// Compiles per option set (compile options).
    pub compile_samples: usize,
    pub quick: bool,
}

impl Scale {
    /// The full run, whose numbers the targets are about.
    pub const FULL: Scale = Scale {
        lookups_per_thread: 200_000,
        probe_launches: 20_000,
        cold_samples: 5,
        builds_each: 4,
        new_process_rounds: 3,
        new_threads: 200,
        soak_seconds: 20.0,
        warm_kernels: 200,
        warm_processes: 32,
        warm_new_kernels: 50,
        compile_samples: 8,
        quick: false,
    };
    /// Every measure once and small (seconds): checks the bench works, its numbers are noise.
    pub const QUICK: Scale = Scale {
        lookups_per_thread: 2_000,
        probe_launches: 100,
        cold_samples: 1,
        builds_each: 1,
        new_process_rounds: 1,
        new_threads: 4,
        soak_seconds: 2.0,
        warm_kernels: 16,
        warm_processes: 4,
        warm_new_kernels: 4,
        compile_samples: 1,
        quick: true,
    };
}

/// Starts the bench's variants at a place no earlier run on this host used, so no source the
/// bench compiles is in NVRTC's compute cache (a rerun would otherwise compile from it).
fn seed_variants() {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mixed =
        (nanos ^ u64::from(std::process::id()).rotate_left(32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // Up to 1.9e9, leaving 2.4e8 variants before i32::MAX.
    NEXT_VARIANT.store(900_000_000 + (mixed >> 34) as i32 % 1_000_000_000, Ordering::Relaxed);
}

/// `salt` as a comment for a kernel's source (`/* salt */`), which makes the source, and so its
/// key, one of its own. Letters, digits, spaces, `_` and `-` only: a salt from the command line
/// (a hidden subcommand's argument) stays a comment and never becomes code.
pub fn salt_comment(salt: &str) -> Result<String, jitbridge::Error> {
    if salt.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, ' ' | '_' | '-')) {
        return Ok(format!("/* {salt} */"));
    }
    Err(jitbridge::Error::new_other(format!(
        "a salt is letters, digits, spaces, '_' and '-', not {salt:?}"
    )))
}

fn fresh_variant() -> i32 {
    NEXT_VARIANT.fetch_add(1, Ordering::Relaxed)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Runs the sections numbered in `chosen` (from 1) on `device`, showing progress on stderr.
pub fn run(device: Device, scale: &Scale, chosen: &[usize]) -> Result<Vec<Row>, jitbridge::Error> {
    seed_variants();
    let mut context = Context { device, scale, warm: None };
    let mut rows = Vec::new();
    let start = Instant::now();
    let numbered = || SECTIONS.iter().enumerate().filter(|(i, _)| chosen.contains(&(i + 1)));
    let about: u32 = numbered().map(|(_, s)| s.seconds[usize::from(scale.quick)]).sum();
    let mut progress = Progress::new();
    for (done, (i, section)) in numbered().enumerate() {
        // A partial run names the section by its number, and counts the ones it runs apart.
        let place = if chosen.len() == SECTIONS.len() {
            format!("{}/{}", i + 1, SECTIONS.len())
        } else {
            format!("section {} ({} of {})", i + 1, done + 1, chosen.len())
        };
        progress.show(&format!(
            "bench {place}: {} ({:.0} s of about {about} s)",
            section.title,
            start.elapsed().as_secs_f64()
        ));
        let first_row = rows.len();
        let measured = (section.measure)(&mut context, &mut rows);
        if measured.is_err() {
            progress.finish();
        }
        measured?;
        for row in &mut rows[first_row..] {
            debug_assert!(
                !row.section.starts_with(|c: char| c.is_ascii_digit()),
                "{}",
                row.section
            );
            row.section = format!("{} {}", i + 1, row.section);
        }
    }
    progress.finish();
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::{BENCH, SECTIONS, parse_sections, salt_comment};

    /// `--sections` takes section numbers as the table shows them, each once and in order;
    /// anything else is a usage error that names the range.
    #[test]
    fn sections_are_numbers_from_one() {
        assert_eq!(parse_sections(None).unwrap(), (1..=SECTIONS.len()).collect::<Vec<_>>());
        assert_eq!(parse_sections(Some("10,4,4")).unwrap(), vec![4, 10]);
        assert_eq!(parse_sections(Some(" 11")).unwrap(), vec![11]);
        for bad in ["", "0", "12", "4,", "x", "-1", "4;5", "99999999999999999999"] {
            let message = parse_sections(Some(bad)).expect_err(bad);
            assert!(message.contains("from 1 to 11"), "{bad}: {message}");
        }
    }

    /// A salt from the command line becomes a comment, never code: one that would close the
    /// comment (or start a directive, or a string) is refused.
    #[test]
    fn a_salt_stays_a_comment() {
        assert_eq!(salt_comment("warm 901234567").unwrap(), "/* warm 901234567 */");
        assert_eq!(salt_comment("salt_-1").unwrap(), "/* salt_-1 */");
        for bad in ["x */ free((void *)16); /* y", "*/", "a\nb", "#include", "\"q\"", "a\u{e9}"] {
            assert!(salt_comment(bad).is_err(), "{bad:?} was allowed");
        }
    }

    /// `bench --help` states the time the sections' own estimates add up to (within a quarter),
    /// the full run in minutes and --quick in seconds: a new section changes both.
    #[test]
    fn the_help_states_the_time_the_sections_add_up_to() {
        let stated = |before: &str, after: &str| -> f64 {
            let rest = BENCH.details.split(before).nth(1).expect(before);
            rest.split(after).next().and_then(|n| n.parse().ok()).expect(after)
        };
        let stated =
            [stated("It takes about ", " minutes") * 60.0, stated("(--quick: about ", " s)")];
        for (i, stated) in stated.into_iter().enumerate() {
            let sum: f64 = SECTIONS.iter().map(|s| f64::from(s.seconds[i])).sum();
            assert!(
                (sum / stated - 1.0).abs() <= 0.25,
                "the sections add up to {sum} s, the help says {stated} s"
            );
        }
    }
}
