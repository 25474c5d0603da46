//! Whole-source modules (CuPy's RawModule): one source, two entry points launched by name with
//! arrays in place and scalars by value; options in the key; one module however many entries.
//! Runs on the cpu, and on GPU 0 in a GPU build.

mod common;

use jitbridge::{
    Arg, Array, Bf16, CompileOptions, Counters, DType, Device, ErrorCode, KernelSpec, Launch,
    LaunchShape, Output, Scalar, SourceModule, SourceModuleSpec, Stream, streams,
};

const CPU_SOURCE: &str = r#"
/* y[i] = a * x[i] in bf16, for i < n */
void scale(void **args, uint64_t threads) {
    const bf16 *x = *(const bf16 **)args[0];
    bf16 *y = *(bf16 **)args[1];
    float a = *(float *)args[2];
    int64_t n = *(int64_t *)args[3];
    for (uint64_t i = 0; i < threads && (int64_t)i < n; i++)
        y[i] = f32_to_bf16(a * bf16_to_f32(x[i]));
}
/* z[i] += x[i] * WEIGHT */
void accumulate(void **args, uint64_t threads) {
    const bf16 *x = *(const bf16 **)args[0];
    float *z = *(float **)args[1];
    for (uint64_t i = 0; i < threads; i++)
        z[i] += bf16_to_f32(x[i]) * WEIGHT;
}
/* z[i] = v, slowly: a later reader on another stream must wait for it */
void slow_fill(void **args, uint64_t threads) {
    float *z = *(float **)args[0];
    float v = *(float *)args[1];
    int64_t spins = *(int64_t *)args[2];
    for (uint64_t i = 0; i < threads; i++) {
        volatile float acc = 0.0f;
        for (int64_t s = 0; s < spins; s++)
            acc = acc + 1.0f;
        z[i] = v + (acc - (float)spins);
    }
}
"#;

const GPU_SOURCE: &str = r#"
extern "C" __global__ void scale(const bf16 *x, bf16 *y, float a, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = f32_to_bf16(a * bf16_to_f32(x[i]));
}
extern "C" __global__ void accumulate(const bf16 *x, float *z) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    z[i] += bf16_to_f32(x[i]) * WEIGHT;
}
extern "C" __global__ void slow_fill(float *z, float v, long long spins) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    volatile float acc = 0.0f;
    for (long long s = 0; s < spins; s++)
        acc = acc + 1.0f;
    z[i] = v + (acc - (float)spins);
}
"#;

fn module(weight: &str) -> SourceModule {
    let define = format!("WEIGHT={weight}");
    SourceModule::new(&SourceModuleSpec {
        name: "raw_pair",
        cpu_source: Some(CPU_SOURCE),
        gpu_source: Some(GPU_SOURCE),
        entries: &["scale", "accumulate", "slow_fill"],
        options: CompileOptions { defines: &[&define], ..Default::default() },
        dtypes: true,
        ..Default::default()
    })
    .unwrap()
}

fn two_entry_points(device: Device) {
    let _turn = common::serial();
    let m = module("2.0f");
    let n = 1000usize;
    let xs: Vec<Bf16> = (0..n).map(|i| Bf16::from_f32(i as f32 * 0.5 - 100.0)).collect();
    let x = Array::from_slice(device, &xs, &[n]).unwrap();
    let mut y = Array::from_slice(device, &vec![Bf16::from_f32(-1.0); n], &[n]).unwrap();
    let mut z = Array::from_slice(device, &vec![1.0f32; n], &[n]).unwrap();
    Counters::reset();
    let live = 900i64; // elements past it stay untouched
    // SAFETY: every entry here indexes below the launch's thread count, which is each array's length, and takes these arguments
    unsafe {
        m.launch_unchecked(
            "scale",
            &mut [Arg::In(&x), Arg::Out(&mut y), 3.0f32.into(), Scalar::I64(live).into()],
            LaunchShape::Threads(n),
        )
    }
    .unwrap();
    // The second entry reads `y`, written by the first, on the same stream; then on another
    // stream, which must wait for the first write of `z`.
    // SAFETY: every entry here indexes below the launch's thread count, which is each array's length, and takes these arguments
    unsafe {
        m.launch_unchecked(
            "accumulate",
            &mut [Arg::In(&y), Arg::Out(&mut z)],
            LaunchShape::Threads(n),
        )
    }
    .unwrap();
    let side = Stream::new(device).unwrap();
    // SAFETY: every entry here indexes below the launch's thread count, which is each array's length, and takes these arguments
    unsafe {
        m.launch_on_unchecked(
            &side,
            "accumulate",
            &mut [Arg::In(&y), Arg::Out(&mut z)],
            LaunchShape::Threads(n),
        )
    }
    .unwrap();
    let c = Counters::read();
    assert_eq!(c.builds + c.disk_hits, 1, "several entries, one module");
    let ys = y.to_vec::<Bf16>().unwrap();
    let zs = z.to_vec::<f32>().unwrap();
    for i in 0..n {
        let want_y = if (i as i64) < live {
            Bf16::from_f32(3.0 * xs[i].to_f32())
        } else {
            Bf16::from_f32(-1.0)
        };
        assert_eq!(ys[i], want_y, "y[{i}]");
        assert_eq!(zs[i], 1.0 + 2.0 * (2.0 * want_y.to_f32()), "z[{i}]");
    }

    // A slow write on the default stream, then a read-modify-write on the side stream: the side
    // stream waits for the write.
    let spins =
        Scalar::I64(if device.kind() == jitbridge::DeviceKind::Cpu { 20_000 } else { 1_000_000 });
    for round in 0..3 {
        let v = 5.0f32 + round as f32;
        // SAFETY: every entry here indexes below the launch's thread count, which is each array's length, and takes these arguments
        unsafe {
            m.launch_unchecked(
                "slow_fill",
                &mut [Arg::Out(&mut z), v.into(), spins.into()],
                LaunchShape::Threads(n),
            )
        }
        .unwrap();
        // SAFETY: every entry here indexes below the launch's thread count, which is each array's length, and takes these arguments
        unsafe {
            m.launch_on_unchecked(
                &side,
                "accumulate",
                &mut [Arg::In(&y), Arg::Out(&mut z)],
                LaunchShape::Threads(n),
            )
        }
        .unwrap();
        let zs = z.to_vec::<f32>().unwrap();
        for i in 0..n {
            assert_eq!(
                zs[i],
                v + 2.0 * ys[i].to_f32(),
                "round {round}: z[{i}] read before written"
            );
        }
    }

    // Options are part of the key; the same source and options are the same module.
    assert_ne!(module("2.0f").module_name(), module("3.0f").module_name());
    assert_eq!(module("2.0f").module_name(), m.module_name());

    // Mistakes are refused before anything is built.
    let before = Counters::read();
    // SAFETY: every entry here indexes below the launch's thread count, which is each array's length, and takes these arguments
    let err = unsafe { m.launch_unchecked("missing", &mut [Arg::In(&x)], LaunchShape::Threads(1)) }
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    // SAFETY: every entry here indexes below the launch's thread count, which is each array's length, and takes these arguments
    let err = unsafe { m.launch_unchecked("scale", &mut [3.0f32.into()], LaunchShape::Threads(1)) }
        .unwrap_err();
    assert!(err.message().contains("no device"), "{err}");
    let after = Counters::read();
    assert_eq!((after.builds, after.misses), (before.builds, before.misses));
}

fn cpu_only_module_is_refused_on_gpu_and_vice_versa() {
    let gpu_only = SourceModule::new(&SourceModuleSpec {
        name: "raw_gpu_only",
        gpu_source: Some(GPU_SOURCE),
        entries: &["scale"],
        ..Default::default()
    })
    .unwrap();
    let x = Array::arange(Device::cpu().unwrap(), 4, DType::F32).unwrap();
    // SAFETY: refused before it runs (no cpu source)
    let err =
        unsafe { gpu_only.launch_unchecked("scale", &mut [Arg::In(&x)], LaunchShape::Threads(4)) }
            .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Unsupported, "{err}");
    assert!(err.message().contains("no source for the cpu backend"), "{err}");
    for (name, entries) in [("1bad", &["scale"][..]), ("ok", &["dup", "dup"][..]), ("ok", &[][..])]
    {
        let err = SourceModule::new(&SourceModuleSpec {
            name,
            cpu_source: Some(CPU_SOURCE),
            entries,
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    }
}

/// 16 threads, each on its own stream, first-launch one module behind a barrier: one build,
/// every result right.
fn first_launch_from_many_threads(device: Device) {
    let _turn = common::serial();
    let m = module("4.0f");
    Counters::reset();
    let barrier = std::sync::Barrier::new(16);
    std::thread::scope(|s| {
        for t in 0..16 {
            let (m, barrier) = (&m, &barrier);
            s.spawn(move || {
                let stream = streams::new_thread_local_generation_stream(device).unwrap();
                let _default = streams::install_thread_local_default_stream(&stream).unwrap();
                let x = Array::from_slice(device, &[Bf16::from_f32(t as f32); 32], &[32]).unwrap();
                let mut z = Array::from_slice(device, &[1.0f32; 32], &[32]).unwrap();
                barrier.wait();
                // SAFETY: every entry here indexes below the launch's thread count, which is each array's length, and takes these arguments
                unsafe {
                    m.launch_unchecked(
                        "accumulate",
                        &mut [Arg::In(&x), Arg::Out(&mut z)],
                        LaunchShape::Threads(32),
                    )
                }
                .unwrap();
                assert_eq!(z.to_vec::<f32>().unwrap(), [1.0 + 4.0 * t as f32; 32], "thread {t}");
            });
        }
    });
    let c = Counters::read();
    assert_eq!(c.builds + c.disk_hits, 1, "16 first launches, {} modules", c.builds + c.disk_hits);
}

#[test]
fn cpu_first_launch_from_many_threads() {
    first_launch_from_many_threads(Device::cpu().unwrap());
}

#[cfg(any(feature = "cuda", feature = "rocm"))]
#[test]
fn gpu_first_launch_from_many_threads() {
    first_launch_from_many_threads(Device::gpu(0).unwrap());
}

/// A slow kernel reads `x` on stream A, then a module entry writes `x` in place on stream B: the
/// write waits for the reader (write after read), which sees `x` as it was. The reader's spin
/// comes before its read, so without that wait the write lands while it still spins.
fn write_waits_for_a_reader_on_another_stream(device: Device) {
    let _turn = common::serial();
    // A weight no other test uses: two_entry_points (2.0f) and first_launch_from_many_threads
    // (4.0f) count their one build, whichever test runs first.
    let m = module("6.0f");
    let reader = common::vouched_kernel(&KernelSpec {
        name: "slow_read_then_copy",
        inputs: &[("x", DType::F32)],
        outputs: &[("y", DType::F32)],
        scalars: &[("spins", DType::I64)],
        body: "volatile float acc = 0.0f; \
               for (i64 s = 0; s < spins; s++) acc = acc + 1.0f; \
               y[thread_index()] = x[thread_index()] + (acc - (float)spins);",
        options: CompileOptions { bounds_checks: true, ..Default::default() },
        ..Default::default()
    })
    .unwrap();
    let cpu = device.kind() == jitbridge::DeviceKind::Cpu;
    let (n, spins) = if cpu { (2048usize, 20_000i64) } else { (1 << 16, 2_000_000) };
    let (a, b) = (Stream::new(device).unwrap(), Stream::new(device).unwrap());
    for round in 0..3 {
        // Made on the default stream (round 0), on the reader's (1), on the writer's (2).
        let maker = [None, Some(&a), Some(&b)][round];
        let _made_on = maker.map(|s| streams::install_thread_local_default_stream(s).unwrap());
        let mut x = Array::from_slice(device, &vec![1.0f32; n], &[n]).unwrap();
        drop(_made_on);
        let y = reader
            .launch_with(Launch {
                inputs: &[&x],
                scalars: &[Scalar::I64(spins)],
                outputs: &mut [Output::New(&[n])],
                shape: LaunchShape::Threads(n),
                stream: Some(&a),
                ..Default::default()
            })
            .unwrap()
            .remove(0);
        // SAFETY: every entry here indexes below the launch's thread count, which is each array's length, and takes these arguments
        unsafe {
            m.launch_on_unchecked(
                &b,
                "slow_fill",
                &mut [Arg::Out(&mut x), 7.0f32.into(), Scalar::I64(0).into()],
                LaunchShape::Threads(n),
            )
        }
        .unwrap();
        let ys = y.to_vec::<f32>().unwrap();
        let late = ys.iter().filter(|&&v| v != 1.0).count();
        assert_eq!(late, 0, "round {round}: {late} of {n} reads saw the later write");
        assert!(x.to_vec::<f32>().unwrap().iter().all(|&v| v == 7.0), "round {round}: the write");
    }
}

#[test]
fn cpu_write_waits_for_a_reader_on_another_stream() {
    write_waits_for_a_reader_on_another_stream(Device::cpu().unwrap());
}

#[cfg(any(feature = "cuda", feature = "rocm"))]
#[test]
fn gpu_write_waits_for_a_reader_on_another_stream() {
    write_waits_for_a_reader_on_another_stream(Device::gpu(0).unwrap());
}

#[test]
fn cpu_two_entry_points() {
    two_entry_points(Device::cpu().unwrap());
}

#[test]
fn a_module_without_the_devices_source_is_refused() {
    cpu_only_module_is_refused_on_gpu_and_vice_versa();
}

#[cfg(any(feature = "cuda", feature = "rocm"))]
#[test]
fn gpu_two_entry_points() {
    two_entry_points(Device::gpu(0).unwrap());
}

/// An entry the source does not define is an error naming it, never another object's function:
/// on the cpu, dlsym on the module also searched libc and libm, so `abort` (the source calls
/// memcpy) bound to libc's and the launch ran it. The module's own entry is then not built either.
fn entries_the_source_lacks_are_refused(device: Device) {
    let cpu_source = "#include <string.h>\n\
        void copy(void **args, uint64_t threads) {\n\
            memcpy(*(float **)args[1], *(float **)args[0], threads * sizeof(float));\n\
        }\n";
    let gpu_source = "extern \"C\" __global__ void copy(const float *x, float *y) {\n\
            y[threadIdx.x] = x[threadIdx.x];\n\
        }\n";
    let x = Array::arange(device, 4, DType::F32).unwrap();
    for lacking in ["abort", "exit", "puts", "memcpy", "sqrtf"] {
        let m = SourceModule::new(&SourceModuleSpec {
            name: "lacking_entry",
            cpu_source: Some(cpu_source),
            gpu_source: Some(gpu_source),
            entries: &["copy", lacking],
            ..Default::default()
        })
        .unwrap();
        let mut y = Array::from_slice(device, &[0.0f32; 4], &[4]).unwrap();
        // SAFETY: `copy` takes (x, y) and copies `threads` = 4 elements, each array's length.
        let launched = unsafe {
            m.launch_unchecked(
                "copy",
                &mut [Arg::In(&x), Arg::Out(&mut y)],
                LaunchShape::Threads(4),
            )
        };
        let err = launched.expect_err(lacking);
        assert_eq!(err.code(), ErrorCode::Load, "{lacking}: {err}");
        assert!(err.message().contains(&format!("'{lacking}'")), "{lacking}: {err}");
    }
}

#[test]
fn cpu_entries_the_source_lacks_are_refused() {
    entries_the_source_lacks_are_refused(Device::cpu().unwrap());
}

#[cfg(any(feature = "cuda", feature = "rocm"))]
#[test]
fn gpu_entries_the_source_lacks_are_refused() {
    entries_the_source_lacks_are_refused(Device::gpu(0).unwrap());
}

const CHILD: &str = "JB_SOURCE_MODULE_CHILD";

/// In a child process: builds a source module and a kernel with a parameter and options, runs
/// both, prints the counters.
#[test]
fn child_entry() {
    if std::env::var(CHILD).is_err() {
        return;
    }
    let device = Device::cpu().unwrap();
    let m = module("5.0f");
    let x = Array::from_slice(device, &[Bf16::from_f32(1.0); 8], &[8]).unwrap();
    let mut z = Array::from_slice(device, &[0.0f32; 8], &[8]).unwrap();
    // SAFETY: every entry here indexes below the launch's thread count, which is each array's length, and takes these arguments
    unsafe {
        m.launch_unchecked(
            "accumulate",
            &mut [Arg::In(&x), Arg::Out(&mut z)],
            LaunchShape::Threads(8),
        )
    }
    .unwrap();
    let k = common::vouched_kernel(&jitbridge::KernelSpec {
        name: "disk_param",
        inputs: &[("x", DType::Bf16)],
        outputs: &[("y", DType::F32)],
        params: &[("N", jitbridge::Param::Int(3))],
        options: CompileOptions { fast_math: true, bounds_checks: true, ..Default::default() },
        body: "y[thread_index()] = bf16_to_f32(x[thread_index()]) * N;",
        ..Default::default()
    })
    .unwrap();
    let y = k.launch(&[&x], &[&[8]], LaunchShape::Threads(8)).unwrap();
    let exact = z.to_vec::<f32>().unwrap() == [5.0; 8] && y[0].to_vec::<f32>().unwrap() == [3.0; 8];
    let c = Counters::read();
    println!("RESULT builds={} disk_hits={} exact={exact}", c.builds, c.disk_hits);
}

/// Source modules and kernels with parameters and options go through the disk cache: a second
/// process compiles nothing.
#[test]
fn a_second_process_loads_source_modules_from_disk() {
    let dir = std::env::temp_dir().join(format!("jb-source-module-disk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let run = || {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .env("JITBRIDGE_CACHE_DIR", &dir)
            .env_remove("JITBRIDGE_DISK_CACHE")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        let line = stdout.lines().find_map(|l| l.find("RESULT ").map(|at| l[at..].to_string()));
        line.unwrap_or_else(|| panic!("no RESULT in {stdout}"))
    };
    assert_eq!(run(), "RESULT builds=2 disk_hits=0 exact=true");
    assert_eq!(run(), "RESULT builds=0 disk_hits=2 exact=true", "the compiler ran again");
    std::fs::remove_dir_all(&dir).unwrap();
}
