//! The soak's other workers: the embedding and rerank workers that first-launch new kernels, the
//! two threads sharing one stream, and the batch worker of varying array sizes.

use super::Tally;
use jitbridge::{
    Array, CustomKernel, DType, Device, KernelSpec, LaunchShape, Param, Stream, streams,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Kernels (hidden sizes x variants) each first-launch worker has: a server's are bounded,
/// and the cache keeps every module loaded, so an unbounded set would grow RSS by design.
pub const HIDDEN: [usize; 4] = [64, 128, 256, 512];
pub const VARIANTS: usize = 4;
/// Most arrays the batch worker keeps alive at once.
const BATCH_LIVE: usize = 8;

/// A small deterministic generator for sizes (xorshift).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

pub fn exact_f32(got: &[f32], want: impl Fn(usize) -> f32) -> bool {
    got.iter().enumerate().all(|(i, &v)| v == want(i))
}

/// A first-launch worker's body: one of this module's constants (the field is private), so
/// that a safe `worker_kernel` makes kernels only of bodies vouched for here.
#[derive(Debug, Clone, Copy)]
pub struct WorkerBody(&'static str);

/// A first-launch worker's kernel for a hidden size and variant: a new module for each pair.
pub fn worker_kernel(
    name: &str,
    body: WorkerBody,
    hidden: usize,
    variant: usize,
) -> Result<CustomKernel, jitbridge::Error> {
    // SAFETY: every `WorkerBody` is a constant below, which computes on one element and
    // subscripts its arrays.
    unsafe {
        CustomKernel::new(&KernelSpec {
            name,
            inputs: &[("inp", DType::F32)],
            outputs: &[("out", DType::F32)],
            params: &[
                ("HIDDEN", Param::Int(hidden as i64)),
                ("VARIANT", Param::Int(variant as i64)),
            ],
            body: body.0,
            ..Default::default()
        })
    }
}

/// The embedding or rerank worker: launches its recent kernels on batches of varying sizes,
/// and first-launches a new kernel (next hidden size, next variant) every `every`, until its
/// HIDDEN x VARIANTS kernels are all built.
#[allow(clippy::too_many_arguments)]
pub fn first_launch_worker(
    device: Device,
    every: Duration,
    role: &'static str,
    body: WorkerBody,
    want: fn(f32, usize, usize) -> f32,
    seed: u64,
    stop: &AtomicBool,
    tally: &Tally,
) -> Result<(), jitbridge::Error> {
    let stream = streams::new_thread_local_generation_stream(device)?;
    let _guard = streams::install_thread_local_default_stream(&stream)?;
    let mut rng = Rng(seed);
    let mut kernels: Vec<(CustomKernel, usize, usize)> = Vec::new();
    let mut next = 0usize;
    let mut last_new: Option<Instant> = None;
    while !stop.load(Ordering::Acquire) {
        let more = next < HIDDEN.len() * VARIANTS;
        if more && last_new.is_none_or(|t| t.elapsed() >= every) {
            let hidden = HIDDEN[next % HIDDEN.len()];
            match worker_kernel(role, body, hidden, next) {
                Ok(kernel) => kernels.push((kernel, hidden, next)),
                Err(e) => tally.error(role, &e),
            }
            if kernels.len() > 4 {
                kernels.remove(0);
            }
            next += 1;
            last_new = Some(Instant::now());
            tally.first_launches.fetch_add(1, Ordering::Relaxed);
        }
        // The newest kernel's first launch, then the others' warm launches.
        for (kernel, hidden, variant) in kernels.iter().rev() {
            let batch = 1 + rng.below(16) as usize;
            let n = batch * hidden;
            let result = Array::arange(device, n, DType::F32).and_then(|inp| {
                // SAFETY: the body bounds its index by out_size; the input has n elements too.
                let out = unsafe {
                    kernel.launch_unchecked(
                        &[&inp],
                        &[&[batch, *hidden]],
                        LaunchShape::Threads(n),
                    )?
                };
                out[0].to_vec::<f32>()
            });
            match result {
                Ok(v) => tally.check(exact_f32(&v, |i| want(i as f32, *hidden, *variant)), role),
                Err(e) => tally.error(role, &e),
            }
        }
    }
    Ok(())
}

pub const EMBED_BODY: WorkerBody = WorkerBody(
    "const uint64_t i = thread_index(); \
    if (i < out_size) out[i] = inp[i] * 2.0f + (f32)(HIDDEN / 64) + (f32)(VARIANT % 7);",
);
pub fn embed_want(x: f32, hidden: usize, variant: usize) -> f32 {
    x * 2.0 + (hidden / 64) as f32 + (variant % 7) as f32
}
pub const RERANK_BODY: WorkerBody = WorkerBody(
    "const uint64_t i = thread_index(); \
    if (i < out_size) out[i] = inp[i] * 0.5f - (f32)(VARIANT % 5) - (f32)(HIDDEN % 3);",
);
pub fn rerank_want(x: f32, hidden: usize, variant: usize) -> f32 {
    x * 0.5 - (variant % 5) as f32 - (hidden % 3) as f32
}

pub fn add_kernel() -> Result<CustomKernel, jitbridge::Error> {
    // SAFETY: the body adds to one element and subscripts its arrays.
    unsafe {
        CustomKernel::new(&KernelSpec {
            name: "soak_add",
            inputs: &[("inp", DType::F32)],
            outputs: &[("out", DType::F32)],
            body: "const uint64_t i = thread_index(); if (i < out_size) out[i] = inp[i] + 1.0f;",
            ..Default::default()
        })
    }
}

/// One of the two threads sharing `stream` (installed as each one's default): arrays from host
/// data of varying sizes, a warm kernel, every output read back.
pub fn shared_stream_worker(
    stream: &Stream,
    kernel: &CustomKernel,
    who: u64,
    stop: &AtomicBool,
    tally: &Tally,
) -> Result<(), jitbridge::Error> {
    let device = stream.device();
    let _guard = streams::install_thread_local_default_stream(stream)?;
    let mut rng = Rng(0x5eed ^ ((who + 1) * 0x9e37_79b9));
    let mut round = 0u64;
    while !stop.load(Ordering::Acquire) {
        let n = 256 * (1 + rng.below(32) as usize);
        let base = (who * 1000 + round % 1000) as f32;
        round += 1;
        let data = vec![base; n];
        let result = Array::from_slice(device, &data, &[n]).and_then(|inp| {
            // SAFETY: add_kernel bounds its index by out_size; the input has n elements too.
            let out =
                unsafe { kernel.launch_unchecked(&[&inp], &[&[n]], LaunchShape::Threads(n))? };
            // A new array while the launch may still run: the case where holds went wrong.
            let other = Array::from_slice(device, &data, &[n])?;
            let (a, b) = (out[0].to_vec::<f32>()?, other.to_vec::<f32>()?);
            Ok((a, b))
        });
        match result {
            Ok((a, b)) => {
                tally.check(a.iter().all(|&v| v == base + 1.0), "shared stream");
                tally.check(b.iter().all(|&v| v == base), "shared stream, new array");
            }
            Err(e) => tally.error("shared stream", &e),
        }
    }
    Ok(())
}

/// Array sizes of the batch worker, in KiB-sized units of 256 f32: from 1 KiB to 4 MiB, most
/// not powers of two, in a fixed cycle (so that the warm-up sees the cycle's largest live set).
const BATCH_SIZES: [usize; 16] =
    [1, 37, 5, 300, 12, 1024, 64, 3, 700, 150, 9, 512, 20, 80, 1000, 2];

/// Keeps the last BATCH_LIVE arrays of the cycle of sizes alive, freeing the oldest for each
/// new one: live device bytes rise and fall as a server's batches do.
pub fn batch_worker(
    device: Device,
    stop: &AtomicBool,
    tally: &Tally,
) -> Result<(), jitbridge::Error> {
    let stream = streams::new_thread_local_generation_stream(device)?;
    let _guard = streams::install_thread_local_default_stream(&stream)?;
    let kernel = add_kernel()?;
    let mut live: std::collections::VecDeque<(Array, usize)> = Default::default();
    let check = |array: Array, n: usize| match array.to_vec::<f32>() {
        Ok(v) => tally.check(v.len() == n && exact_f32(&v, |i| i as f32 + 1.0), "batches"),
        Err(e) => tally.error("batches", &e),
    };
    for &units in BATCH_SIZES.iter().cycle() {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let n = 256 * units;
        let result = Array::arange(device, n, DType::F32)
            // SAFETY: add_kernel bounds its index by out_size; the input has n elements too.
            .and_then(|inp| unsafe {
                kernel.launch_unchecked(&[&inp], &[&[n]], LaunchShape::Threads(n))
            });
        match result {
            Ok(mut out) => live.push_back((out.remove(0), n)),
            Err(e) => tally.error("batches", &e),
        }
        if live.len() > BATCH_LIVE {
            if let Some((array, n)) = live.pop_front() {
                check(array, n);
            }
        }
    }
    for (array, n) in live {
        check(array, n);
    }
    Ok(())
}
