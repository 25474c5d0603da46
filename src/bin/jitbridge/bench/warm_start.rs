//! The bench's section "start warm": new processes first-launch many kernels from a bundle made
//! in another checkout (on a read-only folder), from the same machine's cache folder, and after
//! a prewarm; and many processes first-launch the same new kernels on one cache folder.
//! The bench runs `jitbridge __warm-start` (below) and `jitbridge cache export` as its children.

use super::{Context, Scale, fleet, fresh_variant, median};
use crate::args::{Command, device_or_default, parse_args, print_help};
use crate::rows::{H200, Row, Target, Unit};
use crate::{Failure, Outcome};
use jitbridge::{
    Array, Counters, CustomKernel, DType, Device, KernelSpec, LaunchShape, disk_cache,
};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const SECTION: &str = "start warm";
const THREADS: usize = 8;
const ELEMENTS: usize = 64;

/// Kernel `k` of the family `salt`: its own source (and so its own key) and its own output.
/// The salt is in the code as well as in a comment: NVRTC answers a source that differs from an
/// earlier one only in comments from its own cache, which would make a cold compile warm.
fn family_kernel(salt: &str, k: usize) -> Result<CustomKernel, jitbridge::Error> {
    let salt_code = salt.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3) // FNV-1a
    });
    let salt = super::salt_comment(salt)?;
    let body = format!(
        "out[thread_index()] = inp[thread_index()] * 2.0f + {k}.0f; (void){salt_code}ull; {salt}"
    );
    // SAFETY: the body scales one element and subscripts its arrays; the salt, from the command
    // line, is a comment (checked).
    unsafe {
        CustomKernel::new(&KernelSpec {
            name: &format!("warm_start_{k}"),
            inputs: &[("inp", DType::F32)],
            outputs: &[("out", DType::F32)],
            body: &body,
            ..Default::default()
        })
    }
}

fn launch_exact(input: &Array, salt: &str, k: usize) -> Result<bool, jitbridge::Error> {
    let kernel = family_kernel(salt, k)?;
    // SAFETY: ELEMENTS threads, each its own element of two arrays of ELEMENTS.
    let out = unsafe {
        kernel.launch_unchecked(&[input], &[&[ELEMENTS]], LaunchShape::Threads(ELEMENTS))?
    };
    let values = out[0].to_vec::<f32>()?;
    Ok(values.iter().enumerate().all(|(i, &v)| v == i as f32 * 2.0 + k as f32))
}

/// What one child process reported.
#[derive(Debug, Default)]
pub(super) struct Report {
    pub ns: f64,
    pub prewarm_ns: f64,
    pub builds: u64,
    pub disk_hits: u64,
    bundle_hits: u64,
    pub waits: u64,
    pub remote_hits: u64,
    pub remote_waits: u64,
    pub breaker_trips: u64,
}

pub(super) struct Runner<'a> {
    exe: PathBuf,
    device: &'a str,
}

impl Runner<'_> {
    /// A child on the cache folder `cache`, with no bundle, manifest or remote tier of the
    /// caller's (a row that wants a tier sets its own).
    pub fn command(&self, args: &[&str], cache: &Path) -> std::process::Command {
        let mut cmd = std::process::Command::new(&self.exe);
        cmd.args(args)
            .env("JITBRIDGE_CACHE_DIR", cache)
            .env_remove("JITBRIDGE_DISK_CACHE")
            .env_remove("JITBRIDGE_CACHE_BUNDLE")
            .env_remove("JITBRIDGE_MANIFEST")
            .env_remove("JITBRIDGE_REMOTE_CACHE")
            .env_remove("JITBRIDGE_REMOTE_KEY_FILE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// A `__warm-start` child (`args` from `launch`) on `cache`, with `env` set.
    pub(super) fn warm_start(
        &self,
        args: &[String],
        cache: &Path,
        env: &[(&str, &OsStr)],
    ) -> std::process::Command {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut cmd = self.command(&args, cache);
        cmd.envs(env.iter().copied());
        cmd
    }

    /// Runs a `__warm-start` child to its end: its report.
    pub(super) fn run(
        &self,
        args: &[String],
        cache: &Path,
        env: &[(&str, &OsStr)],
    ) -> Result<Report, jitbridge::Error> {
        report(spawn(&mut self.warm_start(args, cache, env))?)
    }

    pub fn launch(&self, salt: &str, count: usize, threads: usize) -> Vec<String> {
        vec![
            "__warm-start".into(),
            self.device.into(),
            salt.into(),
            count.to_string(),
            threads.to_string(),
        ]
    }
}

pub(super) fn failed(what: String) -> jitbridge::Error {
    jitbridge::Error::new_other(what)
}

/// Waits for a child and reads its report line; it must have ended well, every output exact.
pub(super) fn report(child: Child) -> Result<Report, jitbridge::Error> {
    let out = child.wait_with_output().map_err(|e| failed(e.to_string()))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let field = |name: &str| {
        text.split_whitespace().find_map(|kv| kv.strip_prefix(name)?.parse::<f64>().ok())
    };
    if !out.status.success() || !text.contains("exact=true") {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(failed(format!("a warm-start child failed: {text} {stderr}")));
    }
    let number = |name: &str| field(name).unwrap_or(0.0);
    Ok(Report {
        ns: number("ns="),
        prewarm_ns: number("prewarm_ns="),
        builds: number("builds=") as u64,
        disk_hits: number("disk_hits=") as u64,
        bundle_hits: number("bundle_hits=") as u64,
        waits: number("lease_waits=") as u64,
        remote_hits: number("remote_hits=") as u64,
        remote_waits: number("remote_lease_waits=") as u64,
        breaker_trips: number("remote_breaker_trips=") as u64,
    })
}

pub(super) fn spawn(cmd: &mut std::process::Command) -> Result<Child, jitbridge::Error> {
    cmd.spawn().map_err(|e| failed(e.to_string()))
}

/// The cpu's compiler by its real path, so that the process using the bundle names it other
/// than the one that made it did ("cc" there, "/usr/bin/x86_64-linux-gnu-gcc-12" here).
fn compiler_by_another_name() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("cc")).find(|p| p.exists())?.canonicalize().ok()
}

/// The section: new processes starting warm.
pub fn start_warm(context: &mut Context<'_>, rows: &mut Vec<Row>) -> Result<(), jitbridge::Error> {
    let (device, scale) = (context.device, context.scale);
    let exe = std::env::current_exe().map_err(|e| failed(e.to_string()))?;
    let spec = device.spec();
    let runner = Runner { exe, device: &spec };
    let dir = std::env::temp_dir().join(format!("jb-bench-warm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let outcome = super::farm::farm_rows(&runner, scale.warm_kernels, &dir, rows)
        .and_then(|()| measure(&runner, device, scale, &dir, rows));
    let _ = std::fs::set_permissions(
        dir.join("image"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    );
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

fn measure(
    runner: &Runner,
    device: Device,
    scale: &Scale,
    dir: &Path,
    rows: &mut Vec<Row>,
) -> Result<(), jitbridge::Error> {
    use std::os::unix::fs::PermissionsExt;
    let kernels = scale.warm_kernels;
    let salt = format!("warm {}", fresh_variant());
    // The fleet's rows' store, when a redis-server is found.
    let store = fleet::Store::start_if_found(dir)?;
    // Checkout A compiles the family: several processes on one folder, each starting at its own
    // place, so that the leases spread the compiles over them; they fill the store as well.
    let made = dir.join("checkout-a/cache");
    let served = fleet::env_if_any(&store);
    let builders: Vec<Child> = (0..THREADS)
        .map(|p| {
            let mut args = runner.launch(&salt, kernels, 1);
            args.push(format!("--from={}", p * kernels / THREADS));
            spawn(&mut runner.warm_start(&args, &made, &served))
        })
        .collect::<Result<_, _>>()?;
    let built: u64 =
        builders.into_iter().map(|c| report(c).map(|r| r.builds)).sum::<Result<_, _>>()?;
    if built != kernels as u64 {
        return Err(failed(format!("{built} compiles made {kernels} kernels")));
    }
    let image = dir.join("image");
    std::fs::create_dir_all(&image).map_err(|e| failed(e.to_string()))?;
    let bundle = image.join("fleet.jbb");
    let export = runner
        .command(&["cache", "export", bundle.to_str().unwrap()], &made)
        .output()
        .map_err(|e| failed(e.to_string()))?;
    if !export.status.success() {
        return Err(failed(format!("export: {}", String::from_utf8_lossy(&export.stdout))));
    }
    let read_only = |mode| std::fs::set_permissions(&image, std::fs::Permissions::from_mode(mode));
    std::fs::set_permissions(&bundle, std::fs::Permissions::from_mode(0o444))
        .and_then(|()| read_only(0o555))
        .map_err(|e| failed(e.to_string()))?;

    // Checkout B: another folder, working directory and (cpu) spelling of the compiler.
    let other = dir.join("checkout-b");
    let launch_args = runner.launch(&salt, kernels, THREADS);
    let cc = compiler_by_another_name().filter(|_| device.backend() == "cpu");
    let (mut from_bundle, mut from_disk) = (Vec::new(), Vec::new());
    let (mut prewarms, mut prewarmed) = (Vec::new(), Vec::new());
    let mut hits_min = u64::MAX;
    let mut compiles = 0;
    for round in 0..scale.new_process_rounds {
        let cache = other.join(format!("cache-{round}"));
        let mut env = vec![("JITBRIDGE_CACHE_BUNDLE", bundle.as_os_str())];
        env.extend(cc.as_ref().map(|cc| ("CC", cc.as_os_str())));
        let r = report(spawn(runner.warm_start(&launch_args, &cache, &env).current_dir(dir))?)?;
        hits_min = hits_min.min(r.bundle_hits);
        compiles += r.builds;
        from_bundle.push(r.ns);
        from_disk.push(runner.run(&launch_args, &made, &[])?.ns);
        let mut args = launch_args.clone();
        args.push(format!("--prewarm={}", bundle.display()));
        let r = runner.run(&args, &other.join(format!("prewarm-{round}")), &[])?;
        compiles += r.builds;
        prewarms.push(r.prewarm_ns);
        prewarmed.push(r.ns);
    }
    let within =
        |ms: f64, text| Target { max_value: Some(ms * 1e6), max_ratio: None, text, set_for: H200 };
    let in_place = median(from_bundle);
    rows.push(
        Row::new(
            SECTION,
            format!(
                "new process, {kernels}-kernel bundle on a read-only folder, {THREADS} threads"
            ),
            in_place,
            Unit::Ns,
        )
        .against(median(from_disk))
        .target(within(40.0, "<= 40 ms (baseline: this machine's cache folder)")),
    );
    rows.push(Row::new(
        SECTION,
        format!("the same after jb_prewarm of the bundle at start: {THREADS} threads"),
        median(prewarmed),
        Unit::Ns,
    ));
    rows.push(Row::new(
        SECTION,
        format!("  the prewarm itself ({kernels} kernels, before the threads)"),
        median(prewarms),
        Unit::Ns,
    ));
    rows.push(
        Row::new(
            SECTION,
            format!("compiles in those new processes ({} runs)", 2 * scale.new_process_rounds),
            compiles as f64,
            Unit::Count,
        )
        .target(Target { max_value: Some(0.0), max_ratio: None, text: "0", set_for: H200 }),
    );
    rows.push(
        Row::new(
            SECTION,
            format!("kernels of {kernels} not from a bundle made in another checkout"),
            (kernels as u64 - hits_min.min(kernels as u64)) as f64,
            Unit::Count,
        )
        .target(Target {
            max_value: Some(0.0),
            max_ratio: None,
            text: "0: every kernel a bundle hit",
            set_for: H200,
        }),
    );

    // A new replica with nothing to start from: every kernel compiled, one at a time under the
    // cache's write lock, while its threads wait.
    let cold_salt = format!("cold {}", fresh_variant());
    let cold_args = runner.launch(&cold_salt, kernels, THREADS);
    let cold = runner.run(&cold_args, &dir.join("cold/cache"), &[])?;
    if cold.builds != kernels as u64 {
        return Err(failed(format!("a cold replica made {} compiles of {kernels}", cold.builds)));
    }
    rows.push(Row::new(
        SECTION,
        format!("new replica, {kernels} kernels, {THREADS} threads, cold (no cache, no bundle)"),
        cold.ns,
        Unit::Ns,
    ));
    rows.push(Row::new(SECTION, "  per kernel", cold.ns / kernels as f64, Unit::Ns));
    fleet::warm_from_store(runner, &store, scale, (&salt, kernels), in_place, dir, rows)?;
    fleet::cold_with_store_stopped(runner, &store, kernels, cold.ns, dir, rows)?;

    // Many processes, one cache folder, the same new kernels: each compiled once.
    let (processes, new) = (scale.warm_processes, scale.warm_new_kernels);
    let shared = dir.join("shared/cache");
    let go = dir.join("shared/go");
    let salt = format!("warm {}", fresh_variant());
    let mut args = runner.launch(&salt, new, 1);
    args.push(format!("--go={}", go.display()));
    std::fs::create_dir_all(dir.join("shared")).map_err(|e| failed(e.to_string()))?;
    let children: Vec<Child> = (0..processes)
        .map(|_| spawn(&mut runner.warm_start(&args, &shared, &[])))
        .collect::<Result<_, _>>()?;
    let (reports, wall) = together(children, &go)?;
    let total = |f: fn(&Report) -> u64| reports.iter().map(f).sum::<u64>();
    rows.push(
        Row::new(
            SECTION,
            format!("{processes} processes x {new} new kernels, one folder: compiles"),
            total(|r| r.builds) as f64,
            Unit::Count,
        )
        .target(Target {
            max_value: Some(new as f64),
            max_ratio: None,
            text: "exactly one per kernel",
            set_for: H200,
        }),
    );
    rows.push(Row::new(
        SECTION,
        format!(
            "  of the others: waited for a lease {}, loaded {}",
            total(|r| r.waits),
            total(|r| r.disk_hits)
        ),
        wall,
        Unit::Ns,
    ));
    fleet::replicas_through_one_store(runner, &store, new, dir, rows)
}

/// Waits until every child (each started with `--go=GO`) is ready, then creates GO, so that
/// they first-launch at once; their reports and the time from GO to the last one's end.
pub(super) fn together(
    mut children: Vec<Child>,
    go: &Path,
) -> Result<(Vec<Report>, f64), jitbridge::Error> {
    let folder = go.parent().unwrap_or(Path::new("."));
    let mark = format!("{}.", go.file_name().unwrap_or_default().to_string_lossy());
    let ready = |n: usize| {
        std::fs::read_dir(folder)
            .map(|d| {
                d.filter(|e| {
                    e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().starts_with(&mark))
                })
                .count()
                    >= n
            })
            .unwrap_or(false)
    };
    let start = Instant::now();
    while !ready(children.len()) {
        let ended = children.iter_mut().position(|c| !matches!(c.try_wait(), Ok(None)));
        if ended.is_some() || start.elapsed() > Duration::from_secs(300) {
            for c in &mut children {
                let _ = c.kill();
            }
            let why = ended.and_then(|i| report(children.remove(i)).err());
            return Err(failed(format!(
                "the processes never got ready: {}",
                why.map(|e| e.to_string()).unwrap_or_default()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::fs::write(go, b"").map_err(|e| failed(e.to_string()))?;
    let started = Instant::now();
    let reports: Vec<Report> = children.into_iter().map(report).collect::<Result<_, _>>()?;
    Ok((reports, started.elapsed().as_nanos() as f64))
}

/// The compile farm's build of `file` with `jobs` workers (this program): its time; every
/// kernel must be built and loaded.
fn farm(device: Device, file: &Path, jobs: Option<&str>, count: usize) -> Result<u128, Failure> {
    let jobs = crate::cache_build::parse_jobs(jobs).map_err(Failure::Error)?;
    let exe = std::env::current_exe().map_err(|e| Failure::Error(e.to_string()))?;
    let start = Instant::now();
    let r = disk_cache::prewarm_build(device, file, jobs, Some(&exe))?;
    if r.built != count as u64 || r.load.loaded != count as u64 {
        return Err(Failure::Error(format!(
            "the farm built {} and loaded {} of {count}",
            r.built, r.load.loaded
        )));
    }
    Ok(start.elapsed().as_nanos())
}

/// For `jitbridge bench`: in a fresh process, first-launch COUNT kernels of the family SALT from
/// THREADS threads (kernel k on thread k % THREADS; with --from=F, one thread from kernel F on,
/// round), after a prewarm of FILE (--prewarm=FILE, timed apart) or a compile farm's build of
/// the manifest FILE with N workers (--farm=FILE --jobs=N, timed apart, every kernel built and
/// loaded) and once the file GO exists (--go=GO); print the time to the last output, the
/// prewarm's or farm's, and the counters.
pub fn child(args: &[String]) -> Outcome {
    const HIDDEN: Command = Command {
        name: "__warm-start",
        usage: "jitbridge __warm-start DEVICE SALT COUNT THREADS [--from=F] [--prewarm=FILE] \
                [--farm=FILE --jobs=N] [--go=GO]",
        about: "(internal, for bench) first-launch a family of kernels in this process",
        details: "",
    };
    let opts = [
        crate::args::Opt { flag: "--from", value: Some("the first kernel") },
        crate::args::Opt { flag: "--prewarm", value: Some("a bundle or manifest") },
        crate::args::Opt { flag: "--go", value: Some("a file to wait for") },
        crate::args::Opt { flag: "--farm", value: Some("a manifest with source records") },
        crate::args::Opt { flag: "--jobs", value: Some("the farm's workers") },
    ];
    let Some(args) = parse_args(&HIDDEN, args, &opts)? else {
        print_help(&HIDDEN);
        return Ok(true);
    };
    let [device, salt, count, threads] = &args.positional[..] else {
        return Err(Failure::Usage("DEVICE SALT COUNT THREADS".into(), &HIDDEN));
    };
    let number =
        |text: &str| text.parse::<usize>().map_err(|e| Failure::Usage(e.to_string(), &HIDDEN));
    let (count, threads, from) =
        (number(count)?, number(threads)?.max(1), number(args.get("--from").unwrap_or("0"))?);
    let device = device_or_default(Some(device))?;
    let input = Array::arange(device, ELEMENTS, DType::F32)?;
    input.eval()?;
    if let Some(go) = args.get("--go") {
        std::fs::write(format!("{}.{}", go, std::process::id()), b"")
            .map_err(|e| Failure::Error(e.to_string()))?;
        while !Path::new(go).exists() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let prewarm_ns = match args.get("--prewarm") {
        Some(file) => {
            let start = Instant::now();
            let r = disk_cache::prewarm(device, Path::new(file))?;
            if r.loaded != count as u64 {
                return Err(Failure::Error(format!("the prewarm loaded {} of {count}", r.loaded)));
            }
            start.elapsed().as_nanos()
        }
        None => match args.get("--farm") {
            Some(file) => farm(device, Path::new(file), args.get("--jobs"), count)?,
            None => 0,
        },
    };
    let start = Instant::now();
    let exact = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (input, salt) = (&input, salt.as_str());
                s.spawn(move || -> Result<bool, jitbridge::Error> {
                    let mut exact = true;
                    for i in (t..count).step_by(threads) {
                        exact &= launch_exact(input, salt, (from + i) % count)?;
                    }
                    Ok(exact)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect::<Result<Vec<bool>, _>>()
    })?;
    let ns = start.elapsed().as_nanos();
    let exact = exact.into_iter().all(|e| e);
    let c = Counters::read();
    out!(
        "ns={ns} prewarm_ns={prewarm_ns} builds={} disk_hits={} bundle_hits={} lease_waits={} \
         remote_hits={} remote_lease_waits={} remote_breaker_trips={} exact={exact}",
        c.builds,
        c.disk_hits,
        c.bundle_hits,
        c.lease_waits,
        c.remote_hits,
        c.remote_lease_waits,
        c.remote_breaker_trips
    );
    Ok(exact)
}
