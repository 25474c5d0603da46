//! Atomics in kernel bodies: `atomic_add`, `atomic_exchange`, `atomic_min` and `atomic_max` on
//! f32, i32, u32, i64 and u64 outputs, each returning the element's old value, with one meaning
//! on every backend. Many threads meet in a few cells and every result is exact: integer sums,
//! f32 sums of values whose every partial sum is representable, the old values handed out, the
//! minimum and maximum, exchanges that lose no value. A bounds-checked atomic out of range is
//! reported like any subscript; an atomic on a dtype without atomics, or on an input, is a
//! compile error that says so. Runs on the cpu, and on GPU 0 in a GPU build.

mod common;

use jitbridge::{
    Array, CompileOptions, CustomKernel, DType, Device, ErrorCode, KernelSpec, Launch, LaunchShape,
    Output, Scalar,
};

const CELLS: usize = 7;

fn kernel(
    name: &str,
    dtype: DType,
    outputs: &[(&str, DType)],
    inits: &[(&str, Scalar)],
    body: &str,
    bounds_checks: bool,
) -> Result<CustomKernel, jitbridge::Error> {
    common::vouched_kernel(&KernelSpec {
        name,
        inputs: &[("x", dtype)],
        outputs,
        output_inits: inits,
        body,
        options: CompileOptions { bounds_checks, ..Default::default() },
        ..Default::default()
    })
}

/// Launches `k` with one thread per element of `x`; output shapes as given.
fn launch(k: &CustomKernel, x: &Array, shapes: &[&[usize]]) -> Vec<Array> {
    let n = x.size();
    if k.bounds_checked() {
        return k.launch(&[x], shapes, LaunchShape::Threads(n)).unwrap();
    }
    // SAFETY: the unchecked bodies here index cells below CELLS and their own thread's element
    // of arrays with one element per thread.
    unsafe { k.launch_unchecked(&[x], shapes, LaunchShape::Threads(n)).unwrap() }
}

/// The integer types: many threads add into 7 cells (exact sums, wrapping where the type
/// wraps), and each thread's old value of one shared counter is handed out exactly once.
fn integer_sums_are_exact(device: Device) {
    let _turn = common::serial();
    let n = 20_000usize;
    macro_rules! case {
        ($t:ty, $d:expr, $value:expr) => {{
            let xs: Vec<$t> = (0..n).map($value).collect();
            let x = Array::from_slice(device, &xs, &[n]).unwrap();
            for checked in [false, true] {
                let k = kernel(
                    &format!("atomic_sum_{}", $d.name()),
                    $d,
                    &[("sums", $d), ("counter", $d), ("olds", $d)],
                    &[
                        ("sums", Scalar::from(<$t>::default())),
                        ("counter", Scalar::from(<$t>::default())),
                    ],
                    "const uint64_t i = thread_index();\n\
                     atomic_add(sums, i % 7, x[i]);\n\
                     olds[i] = atomic_add(counter, 0, 1);",
                    checked,
                )
                .unwrap();
                let out = launch(&k, &x, &[&[CELLS], &[1], &[n]]);
                let mut want = [<$t>::default(); CELLS];
                for (i, v) in xs.iter().enumerate() {
                    want[i % CELLS] = want[i % CELLS].wrapping_add(*v);
                }
                assert_eq!(out[0].to_vec::<$t>().unwrap(), want, "{:?} sums", $d);
                assert_eq!(out[1].to_vec::<$t>().unwrap(), [n as $t], "{:?} counter", $d);
                let mut olds = out[2].to_vec::<$t>().unwrap();
                olds.sort();
                let each: Vec<$t> = (0..n).map(|i| i as $t).collect();
                let wrong = olds.iter().zip(&each).filter(|(a, b)| a != b).count();
                assert_eq!(wrong, 0, "{:?}: each old value exactly once", $d);
            }
        }};
    }
    case!(i32, DType::I32, |i| (i as i32 - 9_000) * 100_003);
    case!(u32, DType::U32, |i| (i as u32).wrapping_mul(2_654_435_761));
    case!(i64, DType::I64, |i| (i as i64 - 7_000) * 1_000_000_000_007);
    case!(u64, DType::U64, |i| (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
}

/// f32 adds of quarters into 4 cells: every partial sum is a multiple of 0.25 below 2^21, so
/// any order of the adds gives the same exact sum.
fn f32_sums_are_exact(device: Device) {
    let _turn = common::serial();
    let n = 65_536usize;
    let xs: Vec<f32> = (0..n).map(|i| (i % 16) as f32 * 0.25 - 1.0).collect();
    let x = Array::from_slice(device, &xs, &[n]).unwrap();
    for checked in [false, true] {
        let k = kernel(
            "atomic_sum_f32",
            DType::F32,
            &[("sums", DType::F32)],
            &[("sums", Scalar::F32(0.5))],
            "atomic_add(sums, thread_index() % 4, x[thread_index()]);",
            checked,
        )
        .unwrap();
        let out = launch(&k, &x, &[&[4]]);
        let mut want = [0.5f32; 4];
        for (i, v) in xs.iter().enumerate() {
            want[i % 4] += v;
        }
        assert_eq!(out[0].to_vec::<f32>().unwrap(), want);
    }
}

/// min and max into 3 cells, and exchanges into one: the cells end at the extremes, and the
/// values the exchanges hand back plus the one left are exactly the values put in plus the
/// initial one.
fn min_max_exchange(device: Device) {
    let _turn = common::serial();
    let n = 10_000usize;
    macro_rules! case {
        ($t:ty, $d:expr, $value:expr, $lowest:expr, $highest:expr) => {{
            let xs: Vec<$t> = (0..n).map($value).collect();
            let x = Array::from_slice(device, &xs, &[n]).unwrap();
            for checked in [false, true] {
                let k = kernel(
                    &format!("atomic_extremes_{}", $d.name()),
                    $d,
                    &[("lo", $d), ("hi", $d), ("cell", $d), ("olds", $d)],
                    &[
                        ("lo", Scalar::from($highest)),
                        ("hi", Scalar::from($lowest)),
                        ("cell", Scalar::from(<$t>::default())),
                    ],
                    "const uint64_t i = thread_index();\n\
                     atomic_min(lo, i % 3, x[i]);\n\
                     atomic_max(hi, i % 3, x[i]);\n\
                     olds[i] = atomic_exchange(cell, 0, x[i]);",
                    checked,
                )
                .unwrap();
                let out = launch(&k, &x, &[&[3], &[3], &[1], &[n]]);
                let (mut lo, mut hi) = ([$highest; 3], [$lowest; 3]);
                for (i, &v) in xs.iter().enumerate() {
                    lo[i % 3] = if v < lo[i % 3] { v } else { lo[i % 3] };
                    hi[i % 3] = if v > hi[i % 3] { v } else { hi[i % 3] };
                }
                assert_eq!(out[0].to_vec::<$t>().unwrap(), lo, "{:?} min", $d);
                assert_eq!(out[1].to_vec::<$t>().unwrap(), hi, "{:?} max", $d);
                let mut seen = out[3].to_vec::<$t>().unwrap();
                seen.extend(out[2].to_vec::<$t>().unwrap());
                let mut want = xs.clone();
                want.push(<$t>::default());
                seen.sort_by(|a, b| a.partial_cmp(b).unwrap());
                want.sort_by(|a, b| a.partial_cmp(b).unwrap());
                let wrong = seen.iter().zip(&want).filter(|(a, b)| a != b).count();
                assert_eq!(wrong, 0, "{:?}: every exchanged value comes back once", $d);
            }
        }};
    }
    // Distinct values of both signs, not in order, so that each cell's extreme is one thread's.
    let spread = |i: usize| ((i * 7919) % 10_007) as i64 - 5_003;
    case!(f32, DType::F32, |i| spread(i) as f32 * 0.5 + 0.25, f32::MIN, f32::MAX);
    case!(i32, DType::I32, |i| spread(i) as i32 * 400_009, i32::MIN, i32::MAX);
    case!(u32, DType::U32, |i| (spread(i) + 5_003) as u32 * 400_009, 0u32, u32::MAX);
    case!(i64, DType::I64, |i| spread(i) * 1_000_000_000_007, i64::MIN, i64::MAX);
    case!(u64, DType::U64, |i| (spread(i) + 5_003) as u64 * 0x0001_0000_0000_0001, 0u64, u64::MAX);
}

/// A bounds-checked atomic past its output is reported at the wait, naming the array and the
/// index as any subscript's report does, and changes nothing; in range the same kernel counts.
fn out_of_range_is_caught(device: Device) {
    let _turn = common::serial();
    let k = kernel(
        "atomic_past_the_end",
        DType::I32,
        &[("counts", DType::I32)],
        &[("counts", Scalar::I32(0))],
        "atomic_add(counts, (i64)x[thread_index()], 1);",
        true,
    )
    .unwrap();
    let good: Vec<i32> = (0..1000).map(|i| i % 5).collect();
    let x = Array::from_slice(device, &good, &[1000]).unwrap();
    let out = k.launch(&[&x], &[&[5]], LaunchShape::Threads(1000)).unwrap();
    assert_eq!(out[0].to_vec::<i32>().unwrap(), [200; 5]);
    for past in [5, -1, 1_000_000] {
        let mut bad = good.clone();
        bad[617] = past;
        let x = Array::from_slice(device, &bad, &[1000]).unwrap();
        let out = k.launch(&[&x], &[&[5]], LaunchShape::Threads(1000)).unwrap();
        let err = out[0].to_vec::<i32>().unwrap_err();
        assert_eq!(err.code(), ErrorCode::Bounds, "{err}");
        let message = err.message();
        for part in ["atomic_past_the_end", "array 'counts'", &format!("at {past},"), "thread 617"]
        {
            assert!(message.contains(part), "no {part:?} in: {message}");
        }
    }
    // An in-place accumulator: a checked atomic adds to what is there, launch after launch.
    let mut acc = Array::from_slice(device, &[10i32; 5], &[5]).unwrap();
    let x = Array::from_slice(device, &good, &[1000]).unwrap();
    for _ in 0..3 {
        k.launch_with(Launch {
            inputs: &[&x],
            outputs: &mut [Output::InPlace(&mut acc)],
            shape: LaunchShape::Threads(1000),
            ..Default::default()
        })
        .unwrap();
    }
    assert_eq!(acc.to_vec::<i32>().unwrap(), [610; 5]);
}

/// An atomic on an output of a dtype without atomics, or on an input, does not compile, and the
/// error names the array and why.
fn unsupported_atomics_do_not_compile(device: Device) {
    let _turn = common::serial();
    let cases: [(&str, DType, DType, &str, &str); 6] = [
        ("atomic_on_f16", DType::F16, DType::F16, "atomic_add(y, 0, x[0]);", "y_is_f16"),
        ("atomic_on_bf16", DType::Bf16, DType::Bf16, "atomic_max(y, 0, x[0]);", "y_is_bf16"),
        ("atomic_on_f64", DType::F64, DType::F64, "atomic_min(y, 0, 1.0);", "y_is_f64"),
        ("atomic_on_input", DType::I32, DType::I32, "y[0] = atomic_add(x, 0, 1);", "x_is_an_input"),
        (
            "atomic_on_scalar",
            DType::I32,
            DType::I32,
            "y[0] = atomic_add(s, 0, 1);",
            "s_is_a_scalar",
        ),
        (
            "atomic_on_shape",
            DType::I32,
            DType::I32,
            "y[0] = atomic_max(x_shape, 0, 1);",
            "x_shape_is_a_shape",
        ),
    ];
    for (name, input, output, body, why) in cases {
        for checked in [false, true] {
            let err = common::vouched_kernel(&KernelSpec {
                name,
                inputs: &[("x", input)],
                outputs: &[("y", output)],
                scalars: &[("s", DType::I32)],
                body,
                options: CompileOptions { bounds_checks: checked, ..Default::default() },
                ..Default::default()
            })
            .and_then(|k| k.prepare(device))
            .unwrap_err();
            assert_eq!(err.code(), ErrorCode::Compile, "{name}: {err}");
            let log = err.message();
            assert!(log.contains(why), "{name} (checked: {checked}): no {why:?} in: {log}");
            assert!(log.contains(&format!("{name}.body")), "{name}: the body's line: {log}");
        }
    }
}

/// The atomics are the language's own words: a name of that spelling is refused, and a
/// bounds-checked body still may not use an array other than subscripted or as an atomic's
/// first argument.
#[test]
fn atomic_names_are_reserved_and_checked_bodies_stay_closed() {
    let err =
        kernel("atomic_add", DType::F32, &[("y", DType::F32)], &[], "(void)x;", false).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    let err =
        kernel("k", DType::F32, &[("atomic_max", DType::F32)], &[], "(void)x;", false).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    for body in [
        "f32 *p = y; atomic_add(y, 0, 1.0f); p[9] = 1;",
        "atomic_add((y), 0, 1.0f);",
        "atomic_add(y + 1, 0, 1.0f);",
        "#define atomic_add(a, i, v) (a[i] = v)\natomic_add(y, 9, 1.0f);",
    ] {
        let err = kernel("closed", DType::F32, &[("y", DType::F32)], &[], body, true)
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{body}: {err}");
    }
}

macro_rules! atomics_tests {
    ($module:ident, $device:expr) => {
        mod $module {
            use super::*;

            #[test]
            fn integer_sums_are_exact() {
                super::integer_sums_are_exact($device);
            }

            #[test]
            fn f32_sums_are_exact() {
                super::f32_sums_are_exact($device);
            }

            #[test]
            fn min_max_exchange() {
                super::min_max_exchange($device);
            }

            #[test]
            fn out_of_range_is_caught() {
                super::out_of_range_is_caught($device);
            }

            #[test]
            fn unsupported_atomics_do_not_compile() {
                super::unsupported_atomics_do_not_compile($device);
            }
        }
    };
}

atomics_tests!(cpu, Device::cpu().unwrap());
#[cfg(any(feature = "cuda", feature = "rocm"))]
atomics_tests!(gpu, Device::gpu(0).unwrap());
