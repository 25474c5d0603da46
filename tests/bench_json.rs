//! `jitbridge bench --json` is JSON a program can read (docs/JSON.md): the schema shared with the
//! soak, numbers as numbers, a met flag on every row that has a target, consistent with the
//! row's own numbers; and what a person at a terminal sees meanwhile.

mod common;

use common::json::{Json, Reader, check_schema, row};
use std::process::Command;
use std::time::Duration;

#[test]
fn the_reader_reads_what_it_should_and_refuses_the_rest() {
    common::json::check_the_reader();
}

/// One quick bench on the cpu, stderr on a terminal, with --check: a quick run judges no target,
/// so it passes.
#[test]
fn bench_json_follows_the_schema_and_progress_is_redrawn_on_a_terminal() {
    let mut command = Command::new(env!("CARGO_BIN_EXE_jitbridge"));
    command.args(["bench", "--json", "--quick", "--check", "--device", "cpu"]);
    command.env("JITBRIDGE_DISK_CACHE", "0");
    let run = common::pty::stderr_on_a_terminal(command, Duration::from_secs(300));
    assert!(run.status.success(), "bench failed: {}", run.stderr);
    let report = Reader::parse(&run.stdout).unwrap_or_else(|e| panic!("{e} in {}", run.stdout));
    let rows = check_schema(&report, "bench");
    assert_eq!(report.at(&["device", "backend"]).text(), "cpu");
    assert_eq!(report.at(&["options", "quick"]), &Json::Bool(true));
    assert_eq!(report.get("details"), &Json::Null);

    // Every target has its row (section 1's hits with an event callback, the short soak's
    // decode p99 and the captured graph's replay included); a quick run's numbers are noise, so
    // none is judged, each saying why.
    // A build with the cuda backend runs NVRTC without a GPU too: its own options' compile
    // cost is one more target (section 11).
    let targeted: Vec<&Json> = rows.iter().filter(|r| r.get("target") != &Json::Null).collect();
    let nvrtc = usize::from(cfg!(feature = "cuda"));
    assert_eq!(targeted.len(), 20 + nvrtc, "the twenty targets (+ NVRTC's) each have a row");
    row(rows, "4-kernel step, one graph replay (+ a scalar) vs one launch");
    // The compile options, the cpu compiler's with or without NVRTC's.
    for flags in ["-O2 -fPIC -shared -w,", "-O2 -fPIC -shared -w -pipe,", "its own flags,"] {
        let cpu = row(rows, &format!("cpu compiler, {flags} per compile"));
        assert!(cpu.get("value").number() > Some(0.0), "{cpu:?}");
    }
    if nvrtc == 1 {
        let own = row(rows, "NVRTC the library's own options, per compile");
        assert_eq!(own.at(&["target", "max_ratio"]).number(), Some(0.8));
        let same = row(rows, "NVRTC the library's own options: cubins not the same");
        assert_eq!(same.get("value").number(), Some(0.0), "{same:?}");
    }
    let redis = redis_server_found();
    for row in &targeted {
        assert!(!row.get("judged").flag(), "a --quick row was judged: {row:?}");
        let skipped = !redis && row.get("section").text() == "9 start warm";
        let note = row.get("note").text();
        assert!(note.contains(if skipped { "skipped: " } else { "--quick" }), "{row:?}");
        assert!(row.at(&["target", "set_for"]).text().contains("H200"), "{row:?}");
    }
    assert_eq!(report.get("judged").number(), Some(0.0));
    check_fleet_rows(rows, redis);

    // The cpu has no NVRTC (only section 11 runs it, in a build with the cuda backend); steps
    // timed inside the library are no fraction of the compiler; the rows say why the caller's
    // first launch and the steps' sum differ.
    for row in rows {
        let (section, measure) = (row.get("section").text(), row.get("measure").text());
        let compile_options = section == "11 compile options" && nvrtc == 1;
        assert!(
            compile_options || !measure.contains("NVRTC"),
            "{measure}: an NVRTC row on the cpu"
        );
        if measure.starts_with("step: ") {
            assert_eq!(row.get("baseline"), &Json::Null, "{section} / {measure}: a ratio");
        }
    }
    row(rows, "first launch, median of 1 (timed by the caller)");
    row(rows, "step: as a whole (median of 1 other first launches, timed inside the library)");

    // Progress: redrawn in place ("\r", the rest of the line cleared), one line per section,
    // the line ended before the time taken is said.
    let stderr = &run.stderr;
    let sections: usize = stderr
        .split("\rbench 1/")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no first section: {stderr:?}"));
    for section in 1..=sections {
        assert!(
            stderr.contains(&format!("\rbench {section}/{sections}: ")),
            "section {section}: {stderr:?}"
        );
    }
    assert!(stderr.contains("\x1b[K"), "{stderr:?}");
    let last = stderr.rsplit('\r').next().unwrap();
    assert!(last.starts_with(&format!("bench {sections}/{sections}: ")), "{stderr:?}");

    // Each row's section starts with the number its progress line showed, in the order they
    // ran, and every section has a row.
    let numbers: Vec<usize> = rows
        .iter()
        .map(|row| {
            let section = row.get("section").text();
            let number = section.split(' ').next().and_then(|n| n.parse().ok());
            number.unwrap_or_else(|| panic!("{section}: no section number"))
        })
        .collect();
    assert!(numbers.is_sorted(), "sections out of order: {numbers:?}");
    let mut seen = numbers.clone();
    seen.dedup();
    assert_eq!(seen, (1..=sections).collect::<Vec<_>>(), "a section without rows, or one too many");
    let took = last.lines().nth(1).unwrap_or_default();
    assert!(took.starts_with("bench: ") && took.ends_with(" s"), "the time taken: {stderr:?}");
}

/// redis-server as the bench finds it: `JITBRIDGE_REDIS_SERVER`, else on PATH.
fn redis_server_found() -> bool {
    if let Some(named) = std::env::var_os("JITBRIDGE_REDIS_SERVER").filter(|v| !v.is_empty()) {
        return std::path::Path::new(&named).is_file();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|d| d.join("redis-server").is_file())
}

/// Section 9's rows of a fleet sharing a Redis store (issue 36's targets), in a quick run (16
/// kernels, 4 new ones): measured against the bench's own redis-server where one is found (CI
/// installs it), each with its target and a met flag; otherwise skipped, saying why.
fn check_fleet_rows(rows: &[Json], redis: bool) {
    let fleet = [
        ("new process, empty folder, 16 kernels from the remote tier, 8 threads", None, Some(2.0)),
        ("  compiles in those (1 runs); remote hits, fewest ", Some(0.0), None),
        (
            "the same cold replica, its remote tier stopped (SIGSTOP) for the whole run",
            None,
            Some(1.1),
        ),
        ("8 replicas x 4 new kernels, each its own folder, one Redis: compiles", Some(4.0), None),
    ];
    for (measure, max_value, max_ratio) in fleet {
        let measure = if redis { measure } else { measure.split(';').next().unwrap() };
        let found = row(rows, measure);
        assert_eq!(found.get("section").text(), "9 start warm", "{found:?}");
        assert_eq!(found.at(&["target", "max_value"]).number(), max_value, "{found:?}");
        assert_eq!(found.at(&["target", "max_ratio"]).number(), max_ratio, "{found:?}");
        assert!(found.at(&["target", "set_for"]).text().contains("H200"), "{found:?}");
        let unit = if max_ratio.is_some() { "ns" } else { "count" };
        assert_eq!(found.get("unit").text(), unit, "{found:?}");
        if redis {
            assert!(found.get("value").number().is_some(), "not measured: {found:?}");
            assert!(matches!(found.get("met"), Json::Bool(_)), "{found:?}");
            if max_ratio.is_some() {
                assert!(found.get("ratio").number().is_some(), "no baseline: {found:?}");
            }
        } else {
            assert_eq!(found.get("value"), &Json::Null, "{found:?}");
            assert!(found.get("note").text().contains("no redis-server"), "{found:?}");
        }
    }
    // The remote rows' processes ran the tier: every kernel of the family a remote hit.
    if redis {
        row(rows, "  compiles in those (1 runs); remote hits, fewest 16 of 16");
    }
}

/// Without a redis-server (`JITBRIDGE_REDIS_SERVER` naming none), the fleet's rows are
/// reported as skipped with the reason: no value, no met flag, not judged; the rest still run.
#[test]
fn bench_without_redis_server_skips_the_fleet_rows() {
    let out = Command::new(env!("CARGO_BIN_EXE_jitbridge"))
        .args(["bench", "--json", "--quick", "--check", "--device", "cpu", "--sections", "9"])
        .env("JITBRIDGE_DISK_CACHE", "0")
        .env("JITBRIDGE_REDIS_SERVER", "/nonexistent/redis-server")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    let report = Reader::parse(&stdout).unwrap_or_else(|e| panic!("{e} in {stdout}"));
    let rows = check_schema(&report, "bench");
    let skipped: Vec<&Json> = rows.iter().filter(|r| r.get("value") == &Json::Null).collect();
    assert_eq!(skipped.len(), 4, "{skipped:?}");
    for row in skipped {
        let note = row.get("note").text();
        assert!(note.contains("JITBRIDGE_REDIS_SERVER=/nonexistent/redis-server"), "{note}");
    }
    row(rows, "new replica, 16 kernels, 8 threads, cold (no cache, no bundle)");
}

/// --help states how long a bench takes, both ways, and where the JSON is described.
#[test]
fn bench_help_states_its_time_and_its_check() {
    let out = Command::new(env!("CARGO_BIN_EXE_jitbridge")).args(["bench", "--help"]).output();
    let text = String::from_utf8(out.unwrap().stdout).unwrap();
    assert!(text.contains("It takes about 3 minutes (--quick: about 35 s)"), "{text}");
    assert!(text.contains("--check       exit with status 1 when a judged target is missed"));
    assert!(text.contains("docs/JSON.md"), "{text}");
}

/// `--sections 10,4` runs sections 4 and 10 alone: their rows keep the numbers a whole run gives
/// them, the options (and the table's first line) say which ran, and a number past the last
/// section is a usage error.
#[test]
fn bench_sections_runs_only_those() {
    let out = Command::new(env!("CARGO_BIN_EXE_jitbridge"))
        .args(["bench", "--json", "--quick", "--device", "cpu", "--sections", "10,4"])
        .env("JITBRIDGE_DISK_CACHE", "0")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    let report = Reader::parse(&stdout).unwrap_or_else(|e| panic!("{e} in {stdout}"));
    let rows = check_schema(&report, "bench");
    let sections: Vec<&str> = rows.iter().map(|r| r.get("section").text()).collect();
    assert!(
        sections.iter().all(|s| *s == "4 probe launch" || *s == "10 captured graph"),
        "{sections:?}"
    );
    assert!(sections.contains(&"4 probe launch") && sections.contains(&"10 captured graph"));
    let chosen = report.at(&["options", "sections"]);
    assert_eq!(chosen, &Json::List(vec![Json::Number(4.0), Json::Number(10.0)]), "{chosen:?}");

    let out = Command::new(env!("CARGO_BIN_EXE_jitbridge"))
        .args(["bench", "--quick", "--device", "cpu", "--sections", "4"])
        .env("JITBRIDGE_DISK_CACHE", "0")
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.lines().next().unwrap_or_default().contains(", sections 4 only"), "{table}");

    let out = Command::new(env!("CARGO_BIN_EXE_jitbridge"))
        .args(["bench", "--sections", "12"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--sections takes a whole number from 1 to 11"), "{stderr}");
}
