//! dtypes: every dtype round-trips through an array and runs through a kernel exactly; f16 and
//! bf16 round to nearest even on the host, in the library and inside kernels alike. Runs on the
//! cpu, and on GPU 0 in a GPU build.

mod common;

use jitbridge::{
    Array, Bf16, CustomKernel, DType, Device, Element, ErrorCode, F16, KernelSpec, LaunchShape,
    Scalar,
};

/// The f16 rounding rule checked from first principles: `got` is a nearest f16 to `x` (in exact
/// f64 arithmetic), and on a tie its last bit is even. Values past the largest finite f16 by at
/// least half an ulp must be infinite.
fn is_rne_f16(x: f32, got: F16) -> bool {
    if x.is_nan() {
        return got.to_f32().is_nan();
    }
    let x = x as f64;
    let (max, half_ulp_at_max) = (65504.0f64, 16.0f64);
    if x.abs() >= max + half_ulp_at_max {
        return got.to_f32().is_infinite() && (got.to_f32() > 0.0) == (x > 0.0);
    }
    let g = got.to_f32() as f64;
    if !g.is_finite() || (g == 0.0 && x != 0.0 && g.is_sign_negative() != x.is_sign_negative()) {
        return false;
    }
    // The neighbours one step either side (towards zero from g and away from it).
    let bits = got.to_bits();
    let neighbours = [bits.wrapping_add(1), bits.wrapping_sub(1), bits ^ 0x8000 | 1]
        .map(|b| F16::from_bits(b).to_f32() as f64);
    let d = (x - g).abs();
    for n in neighbours {
        if !n.is_finite() {
            continue;
        }
        let dn = (x - n).abs();
        if dn < d || (dn == d && bits & 1 == 1) {
            return false;
        }
    }
    true
}

fn is_rne_bf16(x: f32, got: Bf16) -> bool {
    if x.is_nan() {
        return got.to_f32().is_nan();
    }
    let (xd, g) = (x as f64, got.to_f32() as f64);
    if g.is_infinite() {
        // Overflow: only values at or past the midpoint above the largest finite bf16.
        let max = Bf16::from_bits(0x7f7f).to_f32() as f64;
        return xd.abs() >= max + (max - Bf16::from_bits(0x7f7e).to_f32() as f64) / 2.0;
    }
    let bits = got.to_bits();
    let d = (xd - g).abs();
    for b in [bits.wrapping_add(1), bits.wrapping_sub(1), bits ^ 0x8000 | 1] {
        let n = Bf16::from_bits(b).to_f32() as f64;
        if n.is_finite() && ((xd - n).abs() < d || ((xd - n).abs() == d && bits & 1 == 1)) {
            return false;
        }
    }
    true
}

/// f32 values that exercise rounding: every f16 midpoint and its neighbours, every bf16
/// midpoint near a spread of exponents, subnormals, overflow edges, and a stride through all
/// f32 bit patterns.
fn rounding_cases() -> Vec<f32> {
    let mut cases = Vec::new();
    for h in 0..0x7c00u16 {
        let (a, b) = (F16::from_bits(h).to_f32() as f64, F16::from_bits(h + 1).to_f32() as f64);
        let mid = ((a + b) / 2.0) as f32; // exact: f16 midpoints fit in an f32
        for x in [mid, f32::from_bits(mid.to_bits() + 1), f32::from_bits(mid.to_bits() - 1)] {
            cases.push(x);
            cases.push(-x);
        }
    }
    for bits in (0..=u32::MAX).step_by(65_537) {
        let x = f32::from_bits(bits);
        let mid = f32::from_bits((bits & 0xffff_0000) | 0x8000);
        cases.extend([
            x,
            mid,
            f32::from_bits(mid.to_bits() + 1),
            f32::from_bits(mid.to_bits() - 1),
        ]);
    }
    cases.extend([
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        65504.0,
        65519.99,
        65520.0,
    ]);
    cases.extend([f32::MAX, f32::MIN_POSITIVE, 5.960_464_5e-8, 2.980_232_2e-8, 2.980_233e-8]);
    cases
}

#[test]
fn host_conversions_round_to_nearest_even_and_match_the_library() {
    for x in rounding_cases() {
        let (h, b) = (F16::from_f32(x), Bf16::from_f32(x));
        assert!(is_rne_f16(x, h), "f16 of {x:e} ({:#010x}) is {:#06x}", x.to_bits(), h.to_bits());
        assert!(is_rne_bf16(x, b), "bf16 of {x:e} ({:#010x}) is {:#06x}", x.to_bits(), b.to_bits());
        // SAFETY: plain functions of values.
        let (ch, cb) = unsafe {
            (jitbridge::ffi::jb_f32_to_f16_bits(x), jitbridge::ffi::jb_f32_to_bf16_bits(x))
        };
        assert_eq!((ch, cb), (h.to_bits(), b.to_bits()), "C and Rust disagree on {x:e}");
    }
    for bits in 0..=u16::MAX {
        let (h, b) = (F16::from_bits(bits), Bf16::from_bits(bits));
        // SAFETY: plain functions of values.
        let (ch, cb) = unsafe {
            (jitbridge::ffi::jb_f16_bits_to_f32(bits), jitbridge::ffi::jb_bf16_bits_to_f32(bits))
        };
        assert_eq!(ch.to_bits(), h.to_f32().to_bits(), "f16 {bits:#06x} widens differently");
        assert_eq!(cb.to_bits(), b.to_f32().to_bits(), "bf16 {bits:#06x} widens differently");
        if !h.to_f32().is_nan() {
            assert_eq!(F16::from_f32(h.to_f32()), h, "f16 {bits:#06x} does not round-trip");
        }
        if !b.to_f32().is_nan() {
            assert_eq!(Bf16::from_f32(b.to_f32()), b, "bf16 {bits:#06x} does not round-trip");
        }
    }
}

fn round_trip<T: Element + PartialEq + std::fmt::Debug>(device: Device, data: &[T]) {
    let a = Array::from_slice(device, data, &[data.len()]).unwrap();
    assert_eq!(a.dtype(), T::DTYPE);
    assert_eq!(a.to_vec::<T>().unwrap(), data, "{:?} does not round-trip", T::DTYPE);
}

fn every_dtype_round_trips(device: Device) {
    round_trip(device, &[1.5f32, -0.0, f32::MAX, f32::MIN_POSITIVE]);
    round_trip(device, &[i32::MIN, -1, 0, i32::MAX]);
    round_trip(device, &(0..=u16::MAX).map(F16::from_bits).collect::<Vec<_>>());
    round_trip(device, &(0..=u16::MAX).map(Bf16::from_bits).collect::<Vec<_>>());
    round_trip(device, &[f64::MIN, -0.5, 1e300, f64::EPSILON]);
    round_trip(device, &(i8::MIN..=i8::MAX).collect::<Vec<_>>());
    round_trip(device, &(0..=u8::MAX).collect::<Vec<_>>());
    round_trip(device, &[0u32, 1, u32::MAX, 0x8000_0000]);
    round_trip(device, &[i64::MIN, -1, 0, i64::MAX]);
    round_trip(device, &[true, false, false, true]);
    round_trip(device, &(i16::MIN..=i16::MAX).step_by(7).collect::<Vec<_>>());
    round_trip(device, &(0..=u16::MAX).step_by(5).collect::<Vec<_>>());
    round_trip(device, &[0u64, 1, u64::MAX, 1 << 63, 0x0123_4567_89ab_cdef]);
    // arange in every dtype: the value i, rounded, wrapped or compared with zero.
    for dtype in DType::ALL {
        let a = Array::arange(device, 300, dtype).unwrap();
        assert_eq!((a.dtype(), a.size()), (dtype, 300));
    }
    let h = Array::arange(device, 4097, DType::F16).unwrap().to_vec::<F16>().unwrap();
    assert_eq!(h[4097 - 1].to_f32(), 4096.0, "4096 is an f16");
    assert!(h.iter().enumerate().all(|(i, v)| v.to_bits() == F16::from_f32(i as f32).to_bits()));
    let u = Array::arange(device, 300, DType::U8).unwrap().to_vec::<u8>().unwrap();
    assert_eq!(u[299], (299 % 256) as u8);
    let n = 70_000;
    let s = Array::arange(device, n, DType::I16).unwrap().to_vec::<i16>().unwrap();
    assert!(s.iter().enumerate().all(|(i, &v)| v == i as i16), "i16 arange wraps modulo 2^16");
    let u = Array::arange(device, n, DType::U16).unwrap().to_vec::<u16>().unwrap();
    assert!(u.iter().enumerate().all(|(i, &v)| v == i as u16), "u16 arange wraps modulo 2^16");
    let u = Array::arange(device, n, DType::U64).unwrap().to_vec::<u64>().unwrap();
    assert!(u.iter().enumerate().all(|(i, &v)| v == i as u64));
    // Reading as the wrong type is refused.
    let err = Array::arange(device, 3, DType::Bf16).unwrap().to_vec::<F16>().unwrap_err();
    assert_eq!(err.code(), ErrorCode::Shape);
}

fn unary(name: &str, input: DType, output: DType, body: &str) -> CustomKernel {
    common::vouched_kernel(&KernelSpec {
        name,
        inputs: &[("x", input)],
        outputs: &[("y", output)],
        body,
        ..Default::default()
    })
    .unwrap()
}

fn run<T: Element, U: Element>(kernel: &CustomKernel, device: Device, data: &[T]) -> Vec<U> {
    let n = data.len();
    let x = Array::from_slice(device, data, &[n]).unwrap();
    // SAFETY: every body here reads x[i] and writes y[i] for its own i < n, n threads.
    let y = unsafe { kernel.launch_unchecked(&[&x], &[&[n]], LaunchShape::Threads(n)).unwrap() };
    assert_eq!(y[0].dtype(), U::DTYPE);
    y[0].to_vec::<U>().unwrap()
}

/// One kernel per dtype, each output checked exactly against the same arithmetic on the host.
fn a_kernel_per_dtype_is_exact(device: Device) {
    let _turn = common::serial();
    const I: &str = "const uint64_t i = thread_index();";
    let f32s: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) * 0.37).collect();
    let k = unary("dt_f32", DType::F32, DType::F32, &format!("{I} y[i] = x[i] * 2.0f + 1.0f;"));
    let got: Vec<f32> = run(&k, device, &f32s);
    assert_eq!(got, f32s.iter().map(|v| v * 2.0 + 1.0).collect::<Vec<_>>());

    let f64s: Vec<f64> = (0..1000).map(|i| (i as f64 - 500.0) * 1e-3 + 1e200).collect();
    let k = unary("dt_f64", DType::F64, DType::F64, &format!("{I} y[i] = x[i] * 0.5 - 3.0;"));
    let got: Vec<f64> = run(&k, device, &f64s);
    assert_eq!(got, f64s.iter().map(|v| v * 0.5 - 3.0).collect::<Vec<_>>());

    let i32s: Vec<i32> = (-500..500).map(|i| i * 1_000_003).collect();
    let k = unary("dt_i32", DType::I32, DType::I32, &format!("{I} y[i] = x[i] / 7 - 3;"));
    let got: Vec<i32> = run(&k, device, &i32s);
    assert_eq!(got, i32s.iter().map(|v| v / 7 - 3).collect::<Vec<_>>());

    let i64s: Vec<i64> = (-500..500).map(|i| i * 1_000_000_000_007).collect();
    let k = unary("dt_i64", DType::I64, DType::I64, &format!("{I} y[i] = x[i] * 3 + 1;"));
    let got: Vec<i64> = run(&k, device, &i64s);
    assert_eq!(got, i64s.iter().map(|v| v * 3 + 1).collect::<Vec<_>>());

    let u32s: Vec<u32> = (0..1000).map(|i| i * 4_294_967).collect();
    let k = unary("dt_u32", DType::U32, DType::U32, &format!("{I} y[i] = x[i] * 3u + 7u;"));
    let got: Vec<u32> = run(&k, device, &u32s);
    assert_eq!(got, u32s.iter().map(|v| v.wrapping_mul(3).wrapping_add(7)).collect::<Vec<_>>());

    let u8s: Vec<u8> = (0..=255).collect();
    let k = unary("dt_u8", DType::U8, DType::U8, &format!("{I} y[i] = (u8)(x[i] * 3 + 7);"));
    let got: Vec<u8> = run(&k, device, &u8s);
    assert_eq!(got, u8s.iter().map(|v| v.wrapping_mul(3).wrapping_add(7)).collect::<Vec<_>>());

    let i8s: Vec<i8> = (-42..=42).collect();
    let k = unary("dt_i8", DType::I8, DType::I8, &format!("{I} y[i] = (i8)(x[i] * 3 - 1);"));
    let got: Vec<i8> = run(&k, device, &i8s);
    assert_eq!(got, i8s.iter().map(|v| v * 3 - 1).collect::<Vec<_>>());

    let i16s: Vec<i16> = (i16::MIN..=i16::MAX).step_by(3).collect();
    let k = unary("dt_i16", DType::I16, DType::I16, &format!("{I} y[i] = (i16)(x[i] * 3 - 1);"));
    let got: Vec<i16> = run(&k, device, &i16s);
    assert_eq!(got, i16s.iter().map(|v| v.wrapping_mul(3).wrapping_sub(1)).collect::<Vec<_>>());

    let u16s: Vec<u16> = (0..=u16::MAX).step_by(3).collect();
    let k = unary("dt_u16", DType::U16, DType::U16, &format!("{I} y[i] = (u16)(x[i] * 5 + 9);"));
    let got: Vec<u16> = run(&k, device, &u16s);
    assert_eq!(got, u16s.iter().map(|v| v.wrapping_mul(5).wrapping_add(9)).collect::<Vec<_>>());

    // u64 above i64's range: a kernel that took it for i64 would divide a negative number.
    let u64s: Vec<u64> = (0..1000).map(|i| u64::MAX - i * 1_000_000_000_007).collect();
    let k =
        unary("dt_u64", DType::U64, DType::U64, &format!("{I} y[i] = x[i] / 3u + (x[i] >> 63);"));
    let got: Vec<u64> = run(&k, device, &u64s);
    assert_eq!(got, u64s.iter().map(|v| v / 3 + (v >> 63)).collect::<Vec<_>>());

    let bools: Vec<bool> = (0..100).map(|i| i % 3 == 0).collect();
    let k = unary("dt_bool", DType::Bool, DType::Bool, &format!("{I} y[i] = !x[i];"));
    let got: Vec<bool> = run(&k, device, &bools);
    assert_eq!(got, bools.iter().map(|v| !v).collect::<Vec<_>>());

    // f16 and bf16: arithmetic in f32 that is exact there, then one rounding back, which must
    // be round-to-nearest-even on every f16 input.
    let halves: Vec<F16> = (0..0x7c00u16).chain(0x8000..0xfc00).map(F16::from_bits).collect();
    let k = unary(
        "dt_f16",
        DType::F16,
        DType::F16,
        &format!("{I} y[i] = f32_to_f16(f16_to_f32(x[i]) * 3.0f + 0.25f);"),
    );
    let got: Vec<F16> = run(&k, device, &halves);
    for (x, y) in halves.iter().zip(&got) {
        let want = F16::from_f32(x.to_f32() * 3.0 + 0.25);
        assert_eq!(y.to_bits(), want.to_bits(), "f16 {:#06x} * 3 + 0.25", x.to_bits());
    }
    let bhalves: Vec<Bf16> = (0..0x7f80u16).step_by(7).map(Bf16::from_bits).collect();
    let k = unary(
        "dt_bf16",
        DType::Bf16,
        DType::Bf16,
        &format!("{I} y[i] = f32_to_bf16(bf16_to_f32(x[i]) * 3.0f);"),
    );
    let got: Vec<Bf16> = run(&k, device, &bhalves);
    for (x, y) in bhalves.iter().zip(&got) {
        let want = Bf16::from_f32(x.to_f32() * 3.0);
        assert_eq!(y.to_bits(), want.to_bits(), "bf16 {:#06x} * 3", x.to_bits());
    }

    // The device's own f32 -> f16/bf16 conversions on every rounding case.
    let cases = rounding_cases();
    let to_f16 =
        unary("dt_to_f16", DType::F32, DType::F16, &format!("{I} y[i] = f32_to_f16(x[i]);"));
    let to_bf16 =
        unary("dt_to_bf16", DType::F32, DType::Bf16, &format!("{I} y[i] = f32_to_bf16(x[i]);"));
    let h: Vec<F16> = run(&to_f16, device, &cases);
    let b: Vec<Bf16> = run(&to_bf16, device, &cases);
    for (i, &x) in cases.iter().enumerate() {
        if x.is_nan() {
            assert!(h[i].to_f32().is_nan() && b[i].to_f32().is_nan(), "NaN stays NaN");
            continue;
        }
        assert_eq!(h[i], F16::from_f32(x), "device f16 of {x:e} ({:#010x})", x.to_bits());
        assert_eq!(b[i], Bf16::from_f32(x), "device bf16 of {x:e} ({:#010x})", x.to_bits());
    }
    // And back: widening is exact.
    let widen = unary("dt_widen", DType::F16, DType::F32, &format!("{I} y[i] = f16_to_f32(x[i]);"));
    let all: Vec<F16> = (0..=u16::MAX).map(F16::from_bits).collect();
    let w: Vec<f32> = run(&widen, device, &all);
    for (x, y) in all.iter().zip(&w) {
        assert!(
            y.to_bits() == x.to_f32().to_bits() || (y.is_nan() && x.to_f32().is_nan()),
            "f16 {:#06x} widened to {y:e}",
            x.to_bits()
        );
    }
}

/// Array::zeros and Array::full fill on the device, every dtype, odd counts and 8-byte values
/// whose halves differ included.
fn zeros_and_full(device: Device) {
    for dtype in DType::ALL {
        // Bytes that are not zero, freed first: a zeros that wrote nothing would hand back their
        // memory (a fresh allocation is often zero already, and could not tell).
        let bytes = 21 * dtype.size();
        let junk: Vec<Array> = (0..64)
            .map(|_| Array::from_slice(device, &vec![0xa5u8; bytes], &[bytes]).unwrap())
            .collect();
        junk.iter().for_each(|a| a.eval().unwrap());
        drop(junk);
        let zeros = Array::zeros(device, &[3, 7], dtype).unwrap();
        assert_eq!((zeros.dtype(), zeros.shape()), (dtype, vec![3, 7]));
        fn all_zero<T: Element + PartialEq + std::fmt::Debug>(a: &Array) {
            assert_eq!(a.to_vec::<T>().unwrap(), vec![T::default(); a.size()], "{:?}", a.dtype());
        }
        match dtype {
            DType::F32 => all_zero::<f32>(&zeros),
            DType::I32 => all_zero::<i32>(&zeros),
            DType::F16 => all_zero::<F16>(&zeros),
            DType::Bf16 => all_zero::<Bf16>(&zeros),
            DType::F64 => all_zero::<f64>(&zeros),
            DType::I8 => all_zero::<i8>(&zeros),
            DType::U8 => all_zero::<u8>(&zeros),
            DType::U32 => all_zero::<u32>(&zeros),
            DType::I64 => all_zero::<i64>(&zeros),
            DType::Bool => all_zero::<bool>(&zeros),
            DType::I16 => all_zero::<i16>(&zeros),
            DType::U16 => all_zero::<u16>(&zeros),
            DType::U64 => all_zero::<u64>(&zeros),
        }
    }
    let third = 1.0f64 / 3.0;
    assert_eq!(
        Array::full(device, &[37], Scalar::F64(third)).unwrap().to_vec::<f64>().unwrap(),
        [third; 37]
    );
    assert_eq!(Array::full(device, &[5], -2.5).unwrap().to_vec::<f32>().unwrap(), [-2.5; 5]);
    assert_eq!(Array::full(device, &[3], -7i64).unwrap().to_vec::<i64>().unwrap(), [-7; 3]);
    assert_eq!(Array::full(device, &[4], 9u8).unwrap().to_vec::<u8>().unwrap(), [9; 4]);
    assert_eq!(Array::full(device, &[2], true).unwrap().to_vec::<bool>().unwrap(), [true; 2]);
    assert_eq!(Array::full(device, &[3], -9i16).unwrap().to_vec::<i16>().unwrap(), [-9; 3]);
    assert_eq!(Array::full(device, &[5], 0xa55au16).unwrap().to_vec::<u16>().unwrap(), [0xa55a; 5]);
    let big = u64::MAX - 0x1234;
    assert_eq!(Array::full(device, &[7], big).unwrap().to_vec::<u64>().unwrap(), [big; 7]);
    let h = Bf16::from(1.5f32);
    assert_eq!(Array::full(device, &[6], h).unwrap().to_vec::<Bf16>().unwrap(), [h; 6]);
    let h = F16::from(-0.25f32);
    assert_eq!(Array::full(device, &[6], h).unwrap().to_vec::<F16>().unwrap(), [h; 6]);
}

/// f16 and bf16 convert from and to f32 with From, and whole slices both ways.
#[test]
fn half_floats_convert_with_from_and_by_slice() {
    let values = [0.0f32, 1.0, -2.5, 65504.0, 1e-3];
    for &v in &values {
        assert_eq!(F16::from(v), F16::from_f32(v));
        assert_eq!(Bf16::from(v), Bf16::from_f32(v));
        assert_eq!(f32::from(Bf16::from(v)), Bf16::from_f32(v).to_f32());
    }
    let halves = F16::from_f32_slice(&values);
    assert_eq!(F16::to_f32_vec(&halves), values.map(|v| F16::from_f32(v).to_f32()));
    let brains = Bf16::from_f32_slice(&values);
    assert_eq!(Bf16::to_f32_vec(&brains), values.map(|v| Bf16::from_f32(v).to_f32()));
}

/// A float literal converts to an f32 scalar, what kernels take: it became an f64 (no kernel's
/// dtype) and failed only at the launch.
/// A new bool output is a C `bool` array: an element that is neither 0 nor 1 is undefined to
/// read, so outputs the body does not write start false (other dtypes' new outputs are
/// uninitialised). Before, an output left unwritten held a freed array's bytes (here 7s), and
/// a kernel reading it as an input read undefined `bool`s.
#[test]
fn a_new_bool_output_holds_only_bools() {
    let cpu = Device::cpu().unwrap();
    let n = 4096;
    let skip = common::vouched_kernel(&KernelSpec {
        name: "bool_skip_odd",
        inputs: &[("x", DType::U8)],
        outputs: &[("y", DType::Bool)],
        body: "const uint64_t i = thread_index(); if (i % 2) return; y[i] = x[i] != 0;",
        options: jitbridge::CompileOptions { bounds_checks: true, ..Default::default() },
        ..Default::default()
    })
    .unwrap();
    let x = Array::full(cpu, &[n], Scalar::U8(1)).unwrap();
    for _ in 0..4 {
        // Freed bytes of 7 for the next output to find in the buffer pool.
        let garbage = Array::full(cpu, &[n], Scalar::U8(7)).unwrap();
        garbage.eval().unwrap();
        drop(garbage);
        let y = skip.launch(&[&x], &[&[n]], LaunchShape::Threads(n)).unwrap();
        let got = y[0].to_vec::<bool>().unwrap();
        assert!(got.iter().enumerate().all(|(i, &b)| b == (i % 2 == 0)));
    }
}

#[test]
fn a_float_literal_is_an_f32_scalar() {
    let s: Scalar = 2.0.into();
    assert_eq!(s, Scalar::F32(2.0));
    let s: Scalar = 3.into();
    assert_eq!(s, Scalar::I32(3));
}

macro_rules! dtype_tests {
    ($module:ident, $device:expr) => {
        mod $module {
            use super::*;

            #[test]
            fn every_dtype_round_trips() {
                super::every_dtype_round_trips($device);
            }

            #[test]
            fn a_kernel_per_dtype_is_exact() {
                super::a_kernel_per_dtype_is_exact($device);
            }

            #[test]
            fn zeros_and_full() {
                super::zeros_and_full($device);
            }
        }
    };
}

dtype_tests!(cpu, Device::cpu().unwrap());
#[cfg(any(feature = "cuda", feature = "rocm"))]
dtype_tests!(gpu, Device::gpu(0).unwrap());
