//! The section "start warm"'s rows of a fleet sharing a remote tier (issue 36): a new replica
//! on an empty cache folder warm from a Redis store that earlier processes filled, 8 replicas
//! (each its own folder, standing in for 8 hosts) first-launching the same new kernels through
//! one store, and a cold replica whose store is stopped (SIGSTOP) for the whole run.
//! The bench starts its own redis-server on a Unix socket in a private folder and stops it at
//! the end; without one these rows say they were skipped, and why.

use super::warm_start::{Report, Runner, failed, report, spawn, together};
use super::{Scale, fresh_variant, median};
use crate::rows::{H200, Row, Target, Unit};
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const SECTION: &str = "start warm";
const THREADS: usize = 8;
/// Replica processes sharing one store.
const REPLICAS: usize = 8;

/// A redis-server of the bench's own: stopped (killed) and its folder removed when dropped,
/// on an error too.
pub struct Store {
    process: Child,
    folder: PathBuf,
    socket: PathBuf,
    /// `unix://` and the socket's path: the remote tier's URL.
    url: OsString,
    key: PathBuf,
}

/// redis-server as `JITBRIDGE_REDIS_SERVER` names it, else the first on PATH; the error is why
/// there is none.
fn find_server() -> Result<PathBuf, String> {
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if let Some(named) = std::env::var_os("JITBRIDGE_REDIS_SERVER").filter(|v| !v.is_empty()) {
        let named = PathBuf::from(named);
        return if executable(&named) {
            Ok(named)
        } else {
            Err(format!("JITBRIDGE_REDIS_SERVER={} is no executable file", named.display()))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("redis-server"))
        .find(|p| executable(p))
        .ok_or_else(|| "no redis-server on PATH (or JITBRIDGE_REDIS_SERVER)".to_string())
}

impl Store {
    /// Starts a store in `dir`/redis when a redis-server is found: `Ok(Err(why))` when none is.
    pub fn start_if_found(dir: &Path) -> Result<Result<Store, String>, jitbridge::Error> {
        match find_server() {
            Ok(server) => Store::start(&server, dir).map(Ok),
            Err(why) => Ok(Err(why)),
        }
    }

    fn start(server: &Path, dir: &Path) -> Result<Store, jitbridge::Error> {
        let io = |e: std::io::Error| failed(format!("the bench's redis-server: {e}"));
        std::fs::create_dir_all(dir).map_err(io)?;
        // Only this user may reach the socket or read the key.
        let folder = dir.join("redis");
        std::fs::DirBuilder::new().mode(0o700).create(&folder).map_err(io)?;
        let key = folder.join("fleet.key");
        let mut secret = [0u8; 32];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut r| r.read_exact(&mut secret))
            .map_err(io)?;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&key)
            .and_then(|mut f| std::io::Write::write_all(&mut f, &secret))
            .map_err(io)?;
        let socket = folder.join("redis.sock");
        let log = std::fs::File::create(folder.join("redis.log")).map_err(io)?;
        let process = std::process::Command::new(server)
            .args(["--port", "0", "--save", "", "--appendonly", "no", "--unixsocketperm", "700"])
            .arg("--unixsocket")
            .arg(&socket)
            .arg("--dir")
            .arg(&folder)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(io)?)
            .stderr(log)
            .spawn()
            .map_err(|e| failed(format!("{}: {e}", server.display())))?;
        let mut url = OsString::from("unix://");
        url.push(&socket);
        let mut store = Store { process, folder, socket, url, key };
        let start = Instant::now();
        while std::os::unix::net::UnixStream::connect(&store.socket).is_err() {
            let ended = !matches!(store.process.try_wait(), Ok(None));
            if ended || start.elapsed() > Duration::from_secs(10) {
                let log = std::fs::read_to_string(store.folder.join("redis.log"));
                return Err(failed(format!(
                    "the bench's redis-server {} listening: {}",
                    if ended { "ended before" } else { "was not" },
                    log.unwrap_or_default().trim()
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(store)
    }

    /// The variables that give a child this store as its remote tier.
    fn env(&self) -> [(&'static str, &OsStr); 2] {
        [
            ("JITBRIDGE_REMOTE_CACHE", self.url.as_os_str()),
            ("JITBRIDGE_REMOTE_KEY_FILE", self.key.as_os_str()),
        ]
    }

    /// Sends the server STOP or CONT.
    fn signal(&self, name: &str) -> Result<(), jitbridge::Error> {
        let status = std::process::Command::new("kill")
            .args(["-s", name, &self.process.id().to_string()])
            .status()
            .map_err(|e| failed(format!("kill -s {name}: {e}")))?;
        if status.success() { Ok(()) } else { Err(failed(format!("kill -s {name}: {status}"))) }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.process.kill(); // SIGKILL ends a stopped server too
        let _ = self.process.wait();
        let _ = std::fs::remove_dir_all(&self.folder);
    }
}

/// The variables that give children the store, when there is one (the builders of the
/// section's family fill it).
pub fn env_if_any(store: &Result<Store, String>) -> Vec<(&'static str, &OsStr)> {
    store.as_ref().map(|s| s.env().to_vec()).unwrap_or_default()
}

fn skipped(rows: &mut Vec<Row>, measure: String, unit: Unit, target: Target, why: &str) {
    rows.push(Row::skipped(SECTION, measure, unit, target, format!("skipped: {why}")));
}

/// New processes on empty cache folders, with the family `salt` in the store (put there by
/// the processes that built it), against `in_place`, the bundle-in-place row's time.
pub fn warm_from_store(
    runner: &Runner,
    store: &Result<Store, String>,
    scale: &Scale,
    (salt, kernels): (&str, usize),
    in_place: f64,
    dir: &Path,
    rows: &mut Vec<Row>,
) -> Result<(), jitbridge::Error> {
    let measure = format!(
        "new process, empty folder, {kernels} kernels from the remote tier, {THREADS} threads"
    );
    let ratio = Target {
        max_value: None,
        max_ratio: Some(2.0),
        text: "<= 2x the bundle in place (baseline)",
        set_for: H200,
    };
    let rounds = scale.new_process_rounds;
    let compiles = format!("  compiles in those ({rounds} runs)");
    let none = Target { max_value: Some(0.0), max_ratio: None, text: "0", set_for: H200 };
    let store = match store {
        Ok(store) => store,
        Err(why) => {
            skipped(rows, measure, Unit::Ns, ratio, why);
            skipped(rows, compiles, Unit::Count, none, why);
            return Ok(());
        }
    };
    let args = runner.launch(salt, kernels, THREADS);
    let (mut times, mut builds, mut fewest_hits) = (Vec::new(), 0, u64::MAX);
    for round in 0..rounds {
        let cache = dir.join(format!("remote-warm/cache-{round}"));
        let r = runner.run(&args, &cache, &store.env())?;
        times.push(r.ns);
        builds += r.builds;
        fewest_hits = fewest_hits.min(r.remote_hits);
    }
    rows.push(Row::new(SECTION, measure, median(times), Unit::Ns).against(in_place).target(ratio));
    rows.push(
        Row::new(
            SECTION,
            format!("{compiles}; remote hits, fewest {fewest_hits} of {kernels}"),
            builds as f64,
            Unit::Count,
        )
        .target(none),
    );
    Ok(())
}

/// A cold replica (a new family, an empty folder) whose store is stopped for the whole run,
/// against `cold`, the same replica's time with no store.
pub fn cold_with_store_stopped(
    runner: &Runner,
    store: &Result<Store, String>,
    kernels: usize,
    cold: f64,
    dir: &Path,
    rows: &mut Vec<Row>,
) -> Result<(), jitbridge::Error> {
    let measure = "the same cold replica, its remote tier stopped (SIGSTOP) for the whole run";
    let target = Target {
        max_value: None,
        max_ratio: Some(1.1),
        text: "<= 1.1x cold with no store (baseline)",
        set_for: H200,
    };
    let store = match store {
        Ok(store) => store,
        Err(why) => {
            skipped(rows, measure.into(), Unit::Ns, target, why);
            return Ok(());
        }
    };
    let args = runner.launch(&format!("cold {}", fresh_variant()), kernels, THREADS);
    let mut cmd = runner.warm_start(&args, &dir.join("cold-stopped/cache"), &store.env());
    store.signal("STOP")?;
    let child = spawn(&mut cmd);
    let ended = child.and_then(report);
    store.signal("CONT")?;
    let r = ended?;
    if r.builds != kernels as u64 {
        return Err(failed(format!("a cold replica made {} compiles of {kernels}", r.builds)));
    }
    let measure = format!("{measure}: breaker trips {}", r.breaker_trips);
    rows.push(Row::new(SECTION, measure, r.ns, Unit::Ns).against(cold).target(target));
    Ok(())
}

/// REPLICAS processes, each its own empty folder, first-launching the same `new` kernels at
/// once through the store: the fleet lease makes one compile of each.
pub fn replicas_through_one_store(
    runner: &Runner,
    store: &Result<Store, String>,
    new: usize,
    dir: &Path,
    rows: &mut Vec<Row>,
) -> Result<(), jitbridge::Error> {
    let measure = format!(
        "{REPLICAS} replicas x {new} new kernels, each its own folder, one Redis: compiles"
    );
    let target = Target {
        max_value: Some(new as f64),
        max_ratio: None,
        text: "exactly one per kernel",
        set_for: H200,
    };
    let store = match store {
        Ok(store) => store,
        Err(why) => {
            skipped(rows, measure, Unit::Count, target, why);
            return Ok(());
        }
    };
    let fleet = dir.join("fleet");
    std::fs::create_dir_all(&fleet).map_err(|e| failed(e.to_string()))?;
    let go = fleet.join("go");
    let mut args = runner.launch(&format!("fleet {}", fresh_variant()), new, 1);
    args.push(format!("--go={}", go.display()));
    let children: Vec<Child> = (0..REPLICAS)
        .map(|p| {
            spawn(&mut runner.warm_start(&args, &fleet.join(format!("cache-{p}")), &store.env()))
        })
        .collect::<Result<_, _>>()?;
    let (reports, wall) = together(children, &go)?;
    let total = |f: fn(&Report) -> u64| reports.iter().map(f).sum::<u64>();
    rows.push(Row::new(SECTION, measure, total(|r| r.builds) as f64, Unit::Count).target(target));
    rows.push(Row::new(
        SECTION,
        format!(
            "  of the others: waited for a fleet lease {}, remote hits {}",
            total(|r| r.remote_waits),
            total(|r| r.remote_hits)
        ),
        wall,
        Unit::Ns,
    ));
    Ok(())
}
