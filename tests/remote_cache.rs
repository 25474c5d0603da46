//! The remote tier from Rust, against a real redis-server that each test starts on a Unix
//! socket in a temporary folder of its own (no port, nothing saved) and stops at its end. Each
//! host is a child process (this test binary again, running `launch_with_remote_tier`) with a
//! cache folder of its own, which sets the tier with `disk_cache::set_remote`.
//! Without redis-server the tests fail: CI installs it.

mod common;

use jitbridge::disk_cache::{clear_remote, set_remote};
use jitbridge::{Array, Counters, DType, Device, ErrorCode, LaunchShape};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_TEST: &str = "launch_with_remote_tier";
const URL: &str = "JB_REMOTE_TEST_URL";
const KEY: &str = "JB_REMOTE_TEST_KEY";
const CLEAR: &str = "JB_REMOTE_TEST_CLEAR";

/// A redis-server of the test's own, killed and its folder removed when dropped.
struct Server {
    dir: PathBuf,
    socket: PathBuf,
    process: Child,
}

impl Server {
    fn start(name: &str) -> Server {
        // Short: a socket's path must fit in 108 bytes.
        let dir = PathBuf::from(format!("/tmp/jb-rr-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("redis.sock");
        let log = std::fs::File::create(dir.join("redis.log")).unwrap();
        let process = Command::new("redis-server")
            .args(["--port", "0", "--save", "", "--appendonly", "no", "--unixsocketperm", "700"])
            .arg("--unixsocket")
            .arg(&socket)
            .arg("--dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("redis-server cannot be started: install it (apt-get install redis-server)");
        let server = Server { dir, socket, process };
        let start = Instant::now();
        while std::os::unix::net::UnixStream::connect(&server.socket).is_err() {
            assert!(start.elapsed() < Duration::from_secs(10), "redis-server never listened");
            std::thread::sleep(Duration::from_millis(10));
        }
        server
    }

    fn url(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// A key file of `bytes` bytes with permissions `mode`.
    fn key_file(&self, name: &str, bytes: usize, mode: u32) -> PathBuf {
        key_file_at(&self.dir.join(name), bytes, mode)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn key_file_at(path: &Path, bytes: usize, mode: u32) -> PathBuf {
    use std::io::Write;
    let mut file =
        std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(path).unwrap();
    let key: Vec<u8> = (0..bytes).map(|i| b'a' + (i % 26) as u8).collect();
    file.write_all(&key).unwrap();
    path.to_path_buf()
}

/// In a child: sets the tier from the variables (and clears it again when CLEAR is set),
/// launches one kernel, prints the counters. Inert in the parent.
#[test]
fn launch_with_remote_tier() {
    if std::env::var(common::CHILD).as_deref() != Ok(CHILD_TEST) {
        return;
    }
    set_remote(&std::env::var(URL).unwrap(), Path::new(&std::env::var_os(KEY).unwrap())).unwrap();
    if std::env::var_os(CLEAR).is_some() {
        clear_remote();
    }
    let input = Array::arange(Device::cpu().unwrap(), 32, DType::F32).unwrap();
    let kernel = common::salted_kernel("remote_rs", 3, 7);
    // SAFETY: 32 threads, each its own element of two 32-element arrays.
    let out = unsafe { kernel.launch_unchecked(&[&input], &[&[32]], LaunchShape::Threads(32)) };
    let values = out.unwrap()[0].to_vec::<f32>().unwrap();
    let exact = values.iter().enumerate().all(|(i, &v)| v == i as f32 * 3.0 + 7.0);
    let c = Counters::read();
    println!(
        "RESULT builds={} disk_hits={} remote_hits={} remote_stores={} exact={exact}",
        c.builds, c.disk_hits, c.remote_hits, c.remote_stores
    );
}

/// A host with an empty cache folder of its own: the counters its launch reports.
fn host(cache: &Path, url: &str, key: &Path, clear: bool) -> [u64; 4] {
    host_with(cache, url, key, clear, &[])
}

/// `host`, with more variables set in the child.
fn host_with(cache: &Path, url: &str, key: &Path, clear: bool, more: &[(&str, &str)]) -> [u64; 4] {
    let cache = cache.to_str().unwrap();
    let key = key.to_str().unwrap();
    let mut env = vec![("JITBRIDGE_CACHE_DIR", cache), (URL, url), (KEY, key)];
    env.extend_from_slice(more);
    if clear {
        env.push((CLEAR, "1"));
    }
    let text = common::run_in_child(CHILD_TEST, &env).unwrap();
    let line = text.lines().find_map(|l| l.find("RESULT ").map(|at| &l[at..])).unwrap();
    assert!(line.ends_with("exact=true"), "a wrong output: {line}");
    let number = |name: &str| -> u64 {
        let prefix = format!("{name}=");
        line.split_whitespace().find_map(|kv| kv.strip_prefix(&prefix)).unwrap().parse().unwrap()
    };
    ["builds", "disk_hits", "remote_hits", "remote_stores"].map(number)
}

/// A compile is stored in the remote tier; a second host with a fresh cache folder loads it
/// with no compile; a host that cleared the tier compiles.
#[test]
fn a_compile_is_stored_remotely_and_a_fresh_host_loads_it() {
    let server = Server::start("store");
    let key = server.key_file("fleet.key", 48, 0o600);
    let url = server.url();
    let [builds, _, hits, stores] = host(&server.dir.join("cache1"), &url, &key, false);
    assert_eq!((builds, hits, stores), (1, 0, 1), "the first host did not store its compile");
    let [builds, disk_hits, hits, stores] = host(&server.dir.join("cache2"), &url, &key, false);
    assert_eq!((builds, disk_hits, hits, stores), (0, 0, 1, 0), "the fresh host compiled");
    let [builds, _, hits, _] = host(&server.dir.join("cache3"), &url, &key, true);
    assert_eq!((builds, hits), (1, 0), "a host that cleared the tier still used it");
}

/// Refused arguments are clear errors (the code, and a message that says why), never a panic:
/// key files others could read, short or missing; NUL bytes; malformed URLs. A path that is not
/// UTF-8 is used as its bytes.
#[test]
fn bad_key_files_and_arguments_are_refused() {
    let dir = PathBuf::from(format!("/tmp/jb-rr-args-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("unix://{}/redis.sock", dir.display()); // nothing connects when it is set
    let good = key_file_at(&dir.join("fleet.key"), 48, 0o600);
    let refused = |url: &str, key: &Path, code: ErrorCode, words: &str| {
        let err = set_remote(url, key).expect_err(&format!("{url} with {key:?} was accepted"));
        assert_eq!(err.code(), code, "{url} with {key:?}: {err}");
        assert!(err.message().contains(words), "{url} with {key:?}: {err} (wanted {words:?})");
    };
    let invalid = ErrorCode::InvalidArgument;
    let group = key_file_at(&dir.join("group.key"), 48, 0o640);
    refused(&url, &group, invalid, "group or others");
    let short = key_file_at(&dir.join("short.key"), 16, 0o600);
    refused(&url, &short, invalid, "fewer than 32");
    refused(&url, &dir.join("missing.key"), ErrorCode::System, "cannot be opened");
    refused(&url, Path::new("/tmp/a\0key"), invalid, "NUL");
    refused("unix:///tmp/a\0.sock", &good, invalid, "NUL");
    refused("", &good, invalid, "empty");
    refused("http://localhost:6379", &good, invalid, "expected redis://");
    refused("redis://user:pw@localhost:6379", &good, invalid, "credentials");
    let mut name = dir.as_os_str().as_bytes().to_vec();
    name.extend_from_slice(b"/fleet-\xff.key");
    let not_utf8 = PathBuf::from(OsStr::from_bytes(&name));
    refused(&url, &not_utf8, ErrorCode::System, "cannot be opened");
    key_file_at(&not_utf8, 48, 0o600);
    set_remote(&url, &not_utf8).unwrap();
    set_remote(&url, &good).unwrap();
    clear_remote();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs `jitbridge cache ARGS` with the cache folder `cache` and the tier's variables `url` and
/// `key` (unset when None): (exit status, stdout, stderr).
fn command(
    cache: &Path,
    url: Option<&str>,
    key: Option<&Path>,
    args: &[&str],
) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_jitbridge"));
    command.arg("cache").args(args).env("JITBRIDGE_CACHE_DIR", cache);
    command.env_remove("JITBRIDGE_REMOTE_CACHE").env_remove("JITBRIDGE_REMOTE_KEY_FILE");
    if let Some(url) = url {
        command.env("JITBRIDGE_REMOTE_CACHE", url);
    }
    if let Some(key) = key {
        command.env("JITBRIDGE_REMOTE_KEY_FILE", key);
    }
    let output = command.output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (output.status.code().unwrap_or(-1), text(&output.stdout), text(&output.stderr))
}

/// `cache remote` names the tier, its mode and client, and times PINGs of a live store; no
/// tier, a refused one (its password masked) and a store that is gone are errors.
#[test]
fn cache_remote_shows_the_tier_and_fails_without_a_live_one() {
    let server = Server::start("show");
    let key = server.key_file("fleet.key", 48, 0o600);
    let cache = server.dir.join("cache");
    let url = server.url();
    let (status, out, err) = command(&cache, Some(&url), Some(&key), &["remote"]);
    assert_eq!(status, 0, "{out}{err}");
    assert!(out.contains(&format!("url        {url}\n")), "{out}");
    assert!(out.contains("mode       read-write\n"), "{out}");
    assert!(out.contains("client     hiredis loaded\n"), "{out}");
    assert!(out.contains("reachable  yes: 5 PINGs, fastest round trip "), "{out}");
    assert!(out.contains("counters   remote_hits 0 remote_misses 0"), "{out}");
    let read_only = format!("{url}?mode=read-only");
    let (status, out, _) = command(&cache, Some(&read_only), Some(&key), &["remote"]);
    assert_eq!(status, 0, "{out}");
    assert!(out.contains("mode       read-only\n"), "{out}");

    let (status, out, err) = command(&cache, None, None, &["remote"]);
    assert_eq!(status, 2, "{out}{err}");
    assert!(err.contains("no remote tier: JITBRIDGE_REMOTE_CACHE is not set"), "{err}");
    let (status, _, err) = command(&cache, Some(&url), None, &["remote"]);
    assert_eq!(status, 2, "{err}");
    assert!(err.contains("no remote tier: a remote tier needs the fleet's key file"), "{err}");
    let secret = "redis://alice:hunter22@localhost:6379/0";
    let (status, out, err) = command(&cache, Some(secret), Some(&key), &["remote"]);
    assert_eq!(status, 2, "{out}{err}");
    assert!(out.contains("url        redis://alice:***@localhost:6379/0"), "{out}");
    assert!(!out.contains("hunter22") && !err.contains("hunter22"), "{out}{err}");

    let usage_errors = [
        (&["remote", "bogus"][..], "unknown cache remote action 'bogus'"),
        (&["remote", "import"][..], "cache remote import needs a MANIFEST"),
        (
            &["remote", "export", "a", "b"][..],
            "unexpected argument 'b' after `cache remote export`",
        ),
    ];
    for (args, words) in usage_errors {
        let (status, out, err) = command(&cache, Some(&url), Some(&key), args);
        assert_eq!(status, 2, "{args:?}: {out}{err}");
        assert!(err.contains(words) && err.contains("usage: jitbridge cache"), "{args:?}: {err}");
    }
    assert!(!cache.exists(), "looking at the tier created the cache folder");

    let mut server = server;
    server.process.kill().unwrap();
    server.process.wait().unwrap();
    let (status, out, err) = command(&cache, Some(&url), Some(&key), &["remote"]);
    assert_eq!(status, 2, "{out}{err}");
    assert!(out.contains("reachable  no: "), "{out}");
    assert!(err.contains(&format!("the remote cache {url} is unreachable")), "{err}");
}

/// `cache remote export` seeds the store from a cache folder, so that a fresh host loads the
/// kernel with no compile; a read-only tier refuses it and nothing reaches the store.
#[test]
fn cache_remote_export_seeds_the_store_and_read_only_refuses() {
    let server = Server::start("export");
    let key = server.key_file("fleet.key", 48, 0o600);
    let (url, seed) = (server.url(), server.dir.join("seed"));
    let read_only = format!("{url}?mode=read-only");
    let [builds, _, _, stores] = host(&seed, &url, &key, true);
    assert_eq!((builds, stores), (1, 0), "the seeding host did not compile without the tier");

    let (status, out, err) = command(&seed, Some(&read_only), Some(&key), &["remote", "export"]);
    assert_eq!(status, 2, "{out}{err}");
    assert!(err.contains("is read-only: nothing is written to it"), "{err}");
    let [builds, _, hits, _] = host(&server.dir.join("refused"), &read_only, &key, false);
    assert_eq!((builds, hits), (1, 0), "a read-only export reached the store");

    let (status, out, err) = command(&seed, Some(&url), Some(&key), &["remote", "export"]);
    assert_eq!(status, 0, "{out}{err}");
    assert!(out.contains("stored   1 entries from "), "{out}");
    assert!(out.contains("rejected 0 "), "{out}");
    let [builds, disk_hits, hits, stores] =
        host(&server.dir.join("fresh"), &read_only, &key, false);
    assert_eq!((builds, disk_hits, hits, stores), (0, 0, 1, 0), "the fresh host compiled");

    // From a bundle, with an empty cache folder: the bundle's entry is what is stored.
    let bundle = server.dir.join("seed.bundle");
    let bundle_arg = bundle.to_str().unwrap();
    assert_eq!(command(&seed, None, None, &["export", bundle_arg]).0, 0);
    let other_key = server.key_file("other.key", 64, 0o600); // other bytes: a key file is a-z repeated
    let empty = server.dir.join("empty");
    let (status, out, err) =
        command(&empty, Some(&url), Some(&other_key), &["remote", "export", bundle_arg]);
    assert_eq!(status, 0, "{out}{err}");
    assert!(out.contains(&format!("stored   1 entries from {bundle_arg} ")), "{out}");
    let [builds, _, hits, _] = host(&server.dir.join("other"), &read_only, &other_key, false);
    assert_eq!((builds, hits), (0, 1), "the bundle's entry was not signed with the given key");
    let [builds, _, hits, _] = host(&server.dir.join("old-key"), &read_only, &key, false);
    assert_eq!((builds, hits), (1, 0), "a value signed with another key was loaded");
}

/// The check's arguments are checked: 1 to 100 PINGs.
#[test]
fn check_remote_refuses_a_ping_count_out_of_range() {
    for pings in [0, 101] {
        let err = jitbridge::disk_cache::check_remote(pings).expect_err("accepted");
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
        assert!(err.message().contains("not 1 to 100"), "{err}");
    }
}

/// `cache remote import MANIFEST` fills a fresh cache folder from the store, so that a host
/// without the tier loads from disk; a forged value is rejected and never written.
#[test]
fn cache_remote_import_fills_a_folder_and_rejects_a_forged_value() {
    let server = Server::start("import");
    let key = server.key_file("fleet.key", 48, 0o600);
    let url = server.url();
    let manifest = server.dir.join("kernels.manifest");
    let more = [("JITBRIDGE_MANIFEST", manifest.to_str().unwrap())];
    let [builds, _, _, stores] = host_with(&server.dir.join("seed"), &url, &key, false, &more);
    assert_eq!((builds, stores), (1, 1), "the seeding host did not store its compile");

    let filled = server.dir.join("filled");
    let manifest_arg = manifest.to_str().unwrap();
    let (status, out, err) =
        command(&filled, Some(&url), Some(&key), &["remote", "import", manifest_arg]);
    assert_eq!(status, 0, "{out}{err}");
    assert!(out.contains("stored   1 entries from the remote tier"), "{out}");
    assert!(out.contains("missing  0 ") && out.contains("rejected 0 "), "{out}");
    let [builds, disk_hits, hits, _] = host(&filled, &url, &key, true);
    assert_eq!((builds, disk_hits, hits), (0, 1, 0), "the filled folder did not serve the kernel");
    let (status, out, _) =
        command(&filled, Some(&url), Some(&key), &["remote", "import", manifest_arg]);
    assert_eq!(status, 0, "{out}");
    assert!(out.contains("stored   0 ") && out.contains("skipped  1 "), "{out}");

    // One byte of the value's MAC changed (after the 24-byte header, the key text and the
    // code's SHA-256): well formed, the code's checksum intact, not signed with the fleet's key.
    let [name] = redis(&server.socket, &[b"KEYS", b"jitbridge:v1:*"]).try_into().unwrap();
    let [mut value] = redis(&server.socket, &[b"GET", &name]).try_into().unwrap();
    let key_bytes = u32::from_le_bytes(value[12..16].try_into().unwrap()) as usize;
    value[24 + key_bytes + 32] ^= 1;
    redis(&server.socket, &[b"SET", &name, &value]);
    let forged = server.dir.join("forged");
    let (status, out, _) =
        command(&forged, Some(&url), Some(&key), &["remote", "import", manifest_arg]);
    assert_eq!(status, 1, "{out}");
    assert!(out.contains("stored   0 ") && out.contains("rejected 1 "), "{out}");
    let entries = std::fs::read_dir(&forged).map_or(0, |d| {
        d.filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "jbc")).count()
    });
    assert_eq!(entries, 0, "a forged value reached the cache folder");
}

/// Sends one command to the store at `socket` and reads its reply: a bulk string, or an array
/// of them (enough for KEYS, GET and SET here; `+OK` reads as no strings).
fn redis(socket: &Path, args: &[&[u8]]) -> Vec<Vec<u8>> {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
    let mut command = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        command.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        command.extend_from_slice(arg);
        command.extend_from_slice(b"\r\n");
    }
    stream.write_all(&command).unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    let bulk = |reader: &mut BufReader<_>, line: &str| -> Vec<u8> {
        let len: usize = line.trim_end().strip_prefix('$').unwrap().parse().unwrap();
        let mut bytes = vec![0; len + 2];
        reader.read_exact(&mut bytes).unwrap();
        bytes.truncate(len);
        bytes
    };
    reader.read_line(&mut line).unwrap();
    match line.as_bytes()[0] {
        b'+' => Vec::new(),
        b'$' => vec![bulk(&mut reader, &line)],
        b'*' => {
            let count: usize = line.trim_end()[1..].parse().unwrap();
            (0..count)
                .map(|_| {
                    let mut item = String::new();
                    reader.read_line(&mut item).unwrap();
                    bulk(&mut reader, &item)
                })
                .collect()
        }
        _ => panic!("the store answered {line:?}"),
    }
}
