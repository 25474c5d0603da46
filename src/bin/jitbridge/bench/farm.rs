//! Rows of the section "start warm" for the compile farm: a manifest of new kernels with their
//! source records, built by `jitbridge` worker processes (jobs 1, then 2) into a cache folder
//! whose entries were removed, then first-launched from 8 threads in the process that ran the
//! farm, which must compile nothing. Then the same kernels as a bundle with their records, made
//! by another compiler (on the cpu: cc behind a script that names another version), rebuilt by
//! the farm for this one.

use super::fresh_variant;
use super::warm_start::{Runner, failed, report, spawn};
use crate::rows::{H200, Row, Target, Unit};
use std::path::Path;

const SECTION: &str = "start warm";
const THREADS: usize = 8;
/// The target on a 2-core machine: jobs 2 at most this share of jobs 1's time.
const SCALING_TARGET: f64 = 0.65;

/// Removes the cache folder's entries (`*.jbc`), keeping its source records.
fn remove_entries(cache: &Path) -> Result<(), jitbridge::Error> {
    for entry in std::fs::read_dir(cache).map_err(|e| failed(e.to_string()))? {
        let path = entry.map_err(|e| failed(e.to_string()))?.path();
        if path.extension().is_some_and(|x| x == "jbc") {
            std::fs::remove_file(&path).map_err(|e| failed(e.to_string()))?;
        }
    }
    Ok(())
}

pub(super) fn farm_rows(
    runner: &Runner,
    kernels: usize,
    dir: &Path,
    rows: &mut Vec<Row>,
) -> Result<(), jitbridge::Error> {
    let cache = dir.join("farm/cache");
    let manifest = dir.join("farm/kernels.manifest");
    let salt = format!("farm {}", fresh_variant());
    // One process compiles the family and writes its manifest, each line naming its record.
    let args = runner.launch(&salt, kernels, 1);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = runner.command(&args, &cache);
    cmd.env("JITBRIDGE_MANIFEST", &manifest);
    report(spawn(&mut cmd)?)?;
    let mut measured = Vec::new();
    for jobs in [1, 2] {
        remove_entries(&cache)?;
        let mut args = runner.launch(&salt, kernels, THREADS);
        args.push(format!("--farm={}", manifest.display()));
        args.push(format!("--jobs={jobs}"));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = report(spawn(&mut runner.command(&args, &cache))?)?;
        measured.push((r.prewarm_ns, r.ns, r.builds));
    }
    let [(one, _, _), (two, launches, compiles)] = measured[..] else {
        return Err(failed("the farm was measured twice".into()));
    };
    rows.push(Row::new(
        SECTION,
        format!("compile farm: cache build --jobs 1, {kernels} kernels from their records"),
        one,
        Unit::Ns,
    ));
    rows.push(
        Row::new(SECTION, "compile farm: cache build --jobs 2", two, Unit::Ns).against(one).target(
            Target {
                max_value: None,
                max_ratio: Some(SCALING_TARGET),
                text: "<= 0.65x of jobs 1 (the issue's figure for 2 cores; 16: 1.5x of ideal)",
                set_for: H200,
            },
        ),
    );
    rows.push(Row::new(
        SECTION,
        format!("  then {kernels} first launches from {THREADS} threads in that process"),
        launches,
        Unit::Ns,
    ));
    rows.push(
        Row::new(
            SECTION,
            "  compiles in the process that ran the farm",
            compiles as f64,
            Unit::Count,
        )
        .target(Target { max_value: Some(0.0), max_ratio: None, text: "0", set_for: H200 }),
    );
    bundle_rows(runner, kernels, &salt, dir, rows)
}

/// The cpu's compiler under another identity: cc behind a script whose version line differs.
fn another_compiler(dir: &Path) -> Result<std::path::PathBuf, jitbridge::Error> {
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join("farm/another-cc");
    let text = "#!/bin/sh\ncase \"$*\" in\n  *--version*) cc \"$@\" | sed '1s/$/ (another build)/';;\n  \
                *) exec cc \"$@\";;\nesac\n";
    std::fs::write(&script, text).map_err(|e| failed(e.to_string()))?;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| failed(e.to_string()))?;
    Ok(script)
}

/// The family exported with its records by a compiler of another identity (its keys are none
/// this process makes), then rebuilt by the farm (2 workers) into an empty cache folder and
/// first-launched: every kernel built there, 0 compiles here.
fn bundle_rows(
    runner: &Runner,
    kernels: usize,
    salt: &str,
    dir: &Path,
    rows: &mut Vec<Row>,
) -> Result<(), jitbridge::Error> {
    let (made, bundle) = (dir.join("farm/elsewhere"), dir.join("farm/elsewhere.jbb"));
    let manifest = dir.join("farm/elsewhere.manifest");
    let cc = another_compiler(dir)?;
    let args = runner.launch(salt, kernels, 1);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = runner.command(&args, &made);
    cmd.env("JITBRIDGE_MANIFEST", &manifest).env("CC", &cc);
    report(spawn(&mut cmd)?)?;
    let export = ["cache", "export", path_str(&bundle)?, "--manifest", path_str(&manifest)?];
    let mut cmd = runner.command(&export, &made);
    let out =
        cmd.arg("--with-sources").env("CC", &cc).output().map_err(|e| failed(e.to_string()))?;
    if !out.status.success() {
        return Err(failed(format!(
            "cache export --with-sources failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let mut args = runner.launch(salt, kernels, THREADS);
    args.push(format!("--farm={}", bundle.display()));
    args.push("--jobs=2".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = report(spawn(&mut runner.command(&args, &dir.join("farm/rebuilt")))?)?;
    rows.push(Row::new(
        SECTION,
        format!("compile farm: a bundle of another compiler, {kernels} kernels rebuilt, --jobs 2"),
        r.prewarm_ns,
        Unit::Ns,
    ));
    rows.push(
        Row::new(
            SECTION,
            "  compiles at first launch after the rebuild",
            r.builds as f64,
            Unit::Count,
        )
        .target(Target { max_value: Some(0.0), max_ratio: None, text: "0", set_for: H200 }),
    );
    Ok(())
}

fn path_str(path: &Path) -> Result<&str, jitbridge::Error> {
    path.to_str().ok_or_else(|| failed(format!("{} is not UTF-8", path.display())))
}
