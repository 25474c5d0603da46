//! A short `jitbridge soak` on the cpu: every output exact (the forked child's too), device
//! memory bounded by its peak live bytes. Latency and RSS targets are printed by the command,
//! not asserted here: a loaded CI box decides them.

mod common;

use std::process::Command;
use std::time::Duration;

/// Seconds of the short soak.
const SECONDS: &str = "10";

fn jitbridge(cache: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_jitbridge"));
    command.env("JITBRIDGE_CACHE_DIR", cache).env_remove("JITBRIDGE_DISK_CACHE");
    command
}

/// (exit status, stdout, stderr); a run still going after `limit` fails the test (a hang).
fn finish(command: Command, limit: Duration) -> (i32, String, String) {
    let output = common::finish(command, limit);
    let text = |b: Vec<u8>| String::from_utf8(b).expect("jitbridge writes UTF-8");
    (output.status.code().unwrap_or(-1), text(output.stdout), text(output.stderr))
}

/// The text right after `"key":` in the soak's one-line JSON (up to the next comma or brace).
fn field<'a>(json: &'a str, key: &str) -> &'a str {
    let tag = format!("\"{key}\":");
    let at = json.find(&tag).unwrap_or_else(|| panic!("no {key} in {json}")) + tag.len();
    let rest = &json[at..];
    if let Some(quoted) = rest.strip_prefix('"') {
        return &quoted[..quoted.find('"').unwrap()];
    }
    let end = rest.find([',', '}', ']']).unwrap_or(rest.len());
    &rest[..end]
}

fn number(json: &str, key: &str) -> f64 {
    let text = field(json, key);
    text.parse().unwrap_or_else(|_| panic!("{key} is {text:?}, not a number"))
}

/// Every sample's `key`, in order.
fn series(json: &str, key: &str) -> Vec<f64> {
    let tag = format!("\"{key}\":");
    json.match_indices(&tag)
        .map(|(at, _)| {
            let rest = &json[at + tag.len()..];
            rest[..rest.find([',', '}']).unwrap()].parse().unwrap()
        })
        .collect()
}

#[test]
fn a_short_soak_is_exact_and_its_memory_bounded() {
    let cache = std::env::temp_dir().join(format!("jitbridge-soak-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let mut command = jitbridge(&cache);
    command.args(["soak", "--seconds", SECONDS, "--device", "cpu", "--json"]);
    let (code, json, stderr) = finish(command, Duration::from_secs(180));
    let _ = std::fs::remove_dir_all(&cache);
    assert!(code == 0 || code == 1, "exit status {code}: {stderr}");
    let json = json.trim();
    eprintln!("{json}");

    // Exactness: outputs were checked, none wrong, no error, the forked child exact.
    assert!(number(json, "checked") > 1000.0, "too few outputs checked: {json}");
    assert_eq!(number(json, "inexact"), 0.0, "inexact outputs: {}", field(json, "first_errors"));
    assert_eq!(number(json, "errors"), 0.0, "errors: {}", field(json, "first_errors"));
    assert!(number(json, "first_launches") >= 2.0, "the workers first-launched nothing");
    assert!(number(json, "steps") > 0.0, "no decode step measured");

    // Device memory: reserved within 1.25x of peak live at every sample after warm-up.
    let (reserved, peak) = (series(json, "reserved"), series(json, "peak_live"));
    assert!(reserved.len() >= 5 && reserved.len() == peak.len(), "too few samples: {json}");
    for (r, p) in reserved.iter().zip(&peak) {
        assert!(*p > 0.0 && r / p <= 1.25, "reserved {r} bytes vs peak live {p}: {json}");
    }

    // RSS: printed, not asserted. On this loaded 2-core box a 10-30 s run's floor moves by 1-2%
    // with glibc's arena warm-up and the fork (valgrind finds no leak); the 1% target is judged
    // by the command on longer runs (the H200's 5-minute run: 0.34%).
    let (warm, late) = (number(json, "rss_warm"), number(json, "rss_late"));
    assert!(warm > 0.0 && late > 0.0, "no RSS: {json}");
    eprintln!("RSS floor {warm} -> {late} bytes, net growth {}", field(json, "rss_growth_net"));

    // The child forked midway compiled, launched exactly and exited; the parent went on.
    assert_eq!(field(json, "child"), "exact", "the forked child");
    assert_eq!(field(json, "exact"), "true");
}

#[test]
fn soak_arguments_are_checked() {
    let cache = std::env::temp_dir().join("jitbridge-soak-args-test");
    for (args, says) in [
        (&["soak", "--seconds", "0"][..], "--seconds takes a whole number from 1 to 86400"),
        (&["soak", "--seconds", "1.5"], "--seconds takes a whole number"),
        (&["soak", "--seconds", "86401"], "out of range"),
        (&["soak", "--seconds"], "--seconds needs a value"),
        (&["soak", "--bogus"], "unknown option '--bogus'"),
        (&["soak", "extra"], "unexpected argument 'extra'"),
        (&["soak", "--json=yes"], "--json takes no value"),
        (&["soak", "--device", "tpu"], "tpu"),
        (&["soak", "--workers", "embed,bogus"], "--workers: no worker 'bogus' in 'embed,bogus'"),
        (&["soak", "--workers", ""], "--workers: an empty name"),
        (&["soak", "--workers", "embed,embed"], "'embed' is listed twice"),
        (&["soak", "--workers", "none,fork"], "'none' stands alone"),
        (&["soak", "--workers"], "--workers needs a value"),
        (&["soak", "--decode", "fast"], "--decode takes 'library' or 'raw', not 'fast'"),
    ] {
        let (code, stdout, stderr) = finish(
            {
                let mut c = jitbridge(&cache);
                c.args(args);
                c
            },
            Duration::from_secs(60),
        );
        assert_eq!(code, 2, "{args:?} exits 2: {stderr}");
        assert!(stdout.is_empty(), "{args:?} printed {stdout}");
        assert!(stderr.contains(says), "{args:?}: {stderr:?} does not say {says:?}");
    }
    let (code, stdout, _) = finish(
        {
            let mut c = jitbridge(&cache);
            c.args(["soak", "--help"]);
            c
        },
        Duration::from_secs(60),
    );
    assert_eq!(code, 0);
    assert!(stdout.starts_with("usage: jitbridge soak [--seconds N]"), "{stdout}");
    for documented in ["--workers L", "embed", "rerank", "shared", "batch", "fork", "--decode M"] {
        assert!(stdout.contains(documented), "help does not document {documented}: {stdout}");
    }
}

/// The whole object after `"key":` (up to its matching brace).
fn object<'a>(json: &'a str, key: &str) -> &'a str {
    let tag = format!("\"{key}\":{{");
    let at = json.find(&tag).unwrap_or_else(|| panic!("no {key} in {json}")) + tag.len() - 1;
    let end = json[at..].find('}').unwrap_or_else(|| panic!("{key} is not closed"));
    &json[at..=at + end]
}

/// A short soak with no other worker and the raw control decode loop: every raw step's output
/// read back exact, both parts of each step timed, and the report says which workers ran.
#[test]
fn a_raw_decode_soak_alone_is_exact() {
    let cache = std::env::temp_dir().join(format!("jitbridge-soak-raw-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let mut command = jitbridge(&cache);
    command.args(["soak", "--seconds", "2", "--device", "cpu", "--json"]);
    command.args(["--workers", "none", "--decode", "raw"]);
    let (code, json, stderr) = finish(command, Duration::from_secs(120));
    let _ = std::fs::remove_dir_all(&cache);
    assert!(code == 0 || code == 1, "exit status {code}: {stderr}");
    let json = json.trim();
    eprintln!("{json}");
    assert_eq!(field(json, "decode_mode"), "raw");
    assert!(json.contains("\"workers\":[],"), "--workers none runs no other worker: {json}");
    assert_eq!(field(json, "all_workers"), "false");
    assert_eq!(number(json, "first_launches"), 0.0, "a first-launch worker ran");
    assert_eq!(field(json, "child"), "none (not asked for)", "the fork ran");

    assert!(number(json, "checked") > 100.0, "too few outputs checked: {json}");
    assert_eq!(number(json, "inexact"), 0.0, "inexact outputs: {}", field(json, "first_errors"));
    assert_eq!(number(json, "errors"), 0.0, "errors: {}", field(json, "first_errors"));
    assert_eq!(field(json, "exact"), "true");

    // Each phase's steps are timed whole and in their two parts, one record per step.
    for (whole, launch, wait) in [
        ("decode_alone", "alone_launch", "alone_wait"),
        ("decode_together", "together_launch", "together_wait"),
    ] {
        let steps = number(object(json, whole), "steps");
        assert!(steps > 0.0, "no {whole} step: {json}");
        for part in [launch, wait] {
            assert_eq!(number(object(json, part), "steps"), steps, "{part}: {json}");
        }
        let (l, w) = (number(object(json, launch), "p50_ns"), number(object(json, wait), "p50_ns"));
        assert!(l > 0.0, "{launch} p50 is 0: {json}");
        assert!(number(object(json, whole), "max_ns") >= l.max(w), "{whole} max below a part's");
    }
    // The slow steps are counted against the first alone phase's p99, and each slow one is put
    // down to one part.
    assert!(number(object(json, "slow_threshold"), "total_p99_ns") > 0.0, "{json}");
    let slow = object(json, "slow_together");
    assert_eq!(number(slow, "steps"), number(object(json, "decode_together"), "steps"));
    assert_eq!(
        number(slow, "over"),
        number(slow, "launch_dominated") + number(slow, "wait_dominated"),
        "{slow}"
    );
}

/// The raw control's launcher refuses bad steps and reads with a clear status and message, and
/// stays usable after them: the next good step's output is exact.
#[test]
fn raw_launcher_refuses_bad_input_and_stays_usable() {
    use jitbridge::sys_tools::RawLauncher;
    use jitbridge::{
        Array, CustomKernel, DType, Device, ErrorCode, KernelSpec, LaunchShape, Scalar,
    };
    let cpu = Device::cpu().unwrap();
    let kernel = CustomKernel::new(&KernelSpec {
        name: "raw_launcher_test",
        inputs: &[("x", DType::F32)],
        outputs: &[("out", DType::F32)],
        scalars: &[("add", DType::F32)],
        body: "const uint64_t i = thread_index(); if (i < out_size) out[i] = x[i] + add;",
        ..Default::default()
    })
    .unwrap();
    let x = Array::arange(cpu, 64, DType::F32).unwrap();
    let shape = LaunchShape::Threads(64);
    let new = |scalars: &[Scalar], shapes: &[&[usize]]| {
        RawLauncher::new(&kernel, &[&x], scalars, shapes, shape)
    };
    let e =
        new(&[Scalar::F32(0.0)], &[&[64], &[64]]).err().expect("two output shapes for one output");
    assert!(e.message().contains("1 outputs, 2 shapes"), "{e}");
    let e = new(&[], &[&[64]]).err().expect("no scalar");
    assert!(e.message().contains("takes 1 scalars, not 0"), "{e}");

    let mut raw = new(&[Scalar::F32(1.0)], &[&[64]]).unwrap();
    let mut host = vec![0f32; 64];
    raw.read_f32(0, &mut host).unwrap();
    assert!(host.iter().enumerate().all(|(i, &v)| v == i as f32 + 1.0), "staged launch: {host:?}");

    let (result, _, _) = raw.step(&[]);
    let e = result.expect_err("a step without its scalar");
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    assert!(e.message().contains("takes 1 scalars, not 0"), "{e}");
    let (result, _, _) = raw.step(&[Scalar::I32(2)]);
    let e = result.expect_err("an i32 for an f32 scalar");
    assert_eq!(e.code(), ErrorCode::Shape);
    assert!(e.message().contains("scalar 'add' of kernel 'raw_launcher_test' is not a valid f32"));
    let e = raw.read_f32(1, &mut host).expect_err("output 1 of 1");
    assert!(e.message().contains("has 1 outputs, no output 1"), "{e}");
    let e = raw.read_f32(0, &mut host[..10]).expect_err("a short destination");
    assert_eq!(e.code(), ErrorCode::Shape);

    for add in [5.0f32, -3.5] {
        let (result, launch_ns, wait_ns) = raw.step(&[Scalar::F32(add)]);
        result.unwrap();
        assert!(launch_ns > 0 && launch_ns + wait_ns > 0, "untimed step");
        raw.read_f32(0, &mut host).unwrap();
        assert!(host.iter().enumerate().all(|(i, &v)| v == i as f32 + add), "{add}: {host:?}");
    }
}
