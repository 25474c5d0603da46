//! Captured graphs through the Rust API, on the cpu and, in a GPU build on a machine with a
//! GPU, on it too: a four-kernel decode step replayed exactly with its scalars updated, the
//! buffers a graph uses kept alive after their arrays are freed (through the raw API: safe Rust
//! cannot free them), another stream's work ordered around replays, and what a safe caller
//! cannot do refused.

mod common; // its temporary cache folder: the tests never write the user's

use jitbridge::*;

const N: usize = 4096;

fn kernel(name: &str, inputs: &[&str], scalars: &[&str], body: &str) -> CustomKernel {
    let inputs: Vec<(&str, DType)> = inputs.iter().map(|n| (*n, DType::F32)).collect();
    let scalars: Vec<(&str, DType)> = scalars.iter().map(|n| (*n, DType::F32)).collect();
    common::vouched_kernel(&KernelSpec {
        name,
        inputs: &inputs,
        outputs: &[("out", DType::F32)],
        scalars: &scalars,
        body,
        options: CompileOptions { bounds_checks: true, ..Default::default() },
        ..Default::default()
    })
    .unwrap()
}

/// The decode step: ((2x + s) + 1) * t - x, four launches.
struct Step {
    scale: CustomKernel,
    add_one: CustomKernel,
    mul: CustomKernel,
    sub: CustomKernel,
}

impl Step {
    fn new() -> Step {
        const I: &str = "const uint64_t i = thread_index();";
        Step {
            scale: kernel(
                "rgraph_scale",
                &["x"],
                &["s"],
                &format!("{I} out[i] = x[i] * 2.0f + s;"),
            ),
            add_one: kernel("rgraph_add_one", &["x"], &[], &format!("{I} out[i] = x[i] + 1.0f;")),
            mul: kernel("rgraph_mul", &["x"], &["t"], &format!("{I} out[i] = x[i] * t;")),
            sub: kernel("rgraph_sub", &["c", "x"], &[], &format!("{I} out[i] = c[i] - x[i];")),
        }
    }

    fn want(s: f32, t: f32) -> Vec<f32> {
        (0..N).map(|i| (i as f32 * 2.0 + s + 1.0) * t - i as f32).collect()
    }

    /// Captures the step on `stream` reading `x`; the graph and its output.
    fn capture<'a>(&self, stream: &mut Stream, x: &'a Array) -> (Graph<'a>, GraphArray) {
        let launch = |inputs: Vec<GraphInput<'a>>, scalars: Vec<Scalar>| GraphLaunch {
            inputs,
            scalars,
            outputs: vec![GraphOutput::New(vec![N])],
            shape: LaunchShape::Threads(N),
        };
        let mut capture = stream.begin_capture().unwrap();
        let a = capture.launch(&self.scale, launch(vec![x.into()], vec![0.0f32.into()])).unwrap();
        let b = capture.launch(&self.add_one, launch(vec![a[0].into()], vec![])).unwrap();
        let c = capture.launch(&self.mul, launch(vec![b[0].into()], vec![1.0f32.into()])).unwrap();
        let out = capture.launch(&self.sub, launch(vec![c[0].into(), x.into()], vec![])).unwrap();
        let graph = capture.end().unwrap();
        assert_eq!(graph.launches(), 4);
        (graph, out[0])
    }
}

#[test]
fn a_decode_step_replays_exactly_with_new_scalars() {
    let step = Step::new();
    for device in common::cpu_and_gpu() {
        let x = Array::arange(device, N, DType::F32).unwrap();
        let mut stream = Stream::new(device).unwrap();
        let (mut graph, out) = step.capture(&mut stream, &x);
        let other = Stream::with_priority(device, device.max_stream_priority()).unwrap();
        for n in 0..50 {
            let (s, t) = (n as f32, if n % 2 == 0 { 0.5 } else { 3.0 });
            graph.set_scalar(0, 0, s).unwrap();
            graph.set_scalar(2, 0, t).unwrap();
            graph.launch(if n % 3 == 0 { &other } else { &stream }).unwrap();
            let got = graph.array(out).to_vec::<f32>().unwrap();
            assert_eq!(got, Step::want(s, t), "{} replay {n}", device.spec());
        }
    }
}

/// Through the C API (safe Rust cannot free what a graph borrows): the input and the kernel of
/// a captured launch are freed; the graph keeps the buffer, which no array made after takes
/// over, and replays exactly.
#[test]
fn buffers_of_freed_arrays_stay_with_the_graph() {
    use std::ffi::CString;
    use std::ptr::null_mut;
    let ok = |status: i32| assert_eq!(status, 0, "{}", last_error());
    for device in common::cpu_and_gpu() {
        let spec_name = CString::new(device.spec()).unwrap();
        let (name, x_name, out_name) = (c"rgraph_raw_times_three", c"x", c"out");
        let body = c"out[thread_index()] = x[thread_index()] * 3.0f + 1.0f;";
        let names_in = [x_name.as_ptr()];
        let names_out = [out_name.as_ptr()];
        let f32 = [DType::F32 as i32];
        // SAFETY: every pointer below is valid for its call; each object is freed once.
        unsafe {
            let mut dev = null_mut();
            ok(ffi::jb_device_lookup(&mut dev, spec_name.as_ptr()));
            let mut spec: ffi::jb_kernel_spec = std::mem::zeroed();
            spec.struct_size = std::mem::size_of::<ffi::jb_kernel_spec>();
            spec.name = name.as_ptr();
            spec.input_names = names_in.as_ptr();
            spec.input_dtypes = f32.as_ptr();
            spec.num_inputs = 1;
            spec.output_names = names_out.as_ptr();
            spec.output_dtypes = f32.as_ptr();
            spec.num_outputs = 1;
            spec.body = body.as_ptr();
            let mut kernel = null_mut();
            ok(ffi::jb_custom_kernel_new(&mut kernel, &spec));
            let (mut x, mut y, mut stream, mut graph) =
                (null_mut(), null_mut(), null_mut(), null_mut());
            ok(ffi::jb_array_arange(&mut x, dev, N as i64, DType::F32 as i32));
            ok(ffi::jb_stream_new(&mut stream, dev));
            ok(ffi::jb_graph_begin_capture(stream));
            let n = N as i64;
            let shapes = [&n as *const i64];
            let ndims = [1];
            let launch = ffi::jb_launch {
                struct_size: std::mem::size_of::<ffi::jb_launch>(),
                device: null_mut(),
                stream,
                inputs: &x,
                num_inputs: 1,
                scalars: std::ptr::null(),
                num_scalars: 0,
                output_shapes: shapes.as_ptr(),
                output_ndims: ndims.as_ptr(),
                in_place: std::ptr::null(),
                shape: ffi::jb_launch_shape {
                    grid: [0; 3],
                    block: [0; 3],
                    total_threads: n as u64,
                },
            };
            ok(ffi::jb_custom_kernel_run(&mut y, kernel, &launch));
            ok(ffi::jb_graph_end_capture(&mut graph, stream));
            ffi::jb_array_free(x);
            ffi::jb_custom_kernel_free(kernel);
            let garbage: Vec<Array> =
                (0..16).map(|_| Array::full(device, &[N], -7.0f32).unwrap()).collect();
            for g in &garbage {
                g.eval().unwrap();
            }
            ok(ffi::jb_graph_launch(graph, stream));
            let mut got = vec![0f32; N];
            ok(ffi::jb_array_read(y, got.as_mut_ptr().cast(), N * 4));
            let want: Vec<f32> = (0..N).map(|i| i as f32 * 3.0 + 1.0).collect();
            assert_eq!(
                got,
                want,
                "{}: a replay after its input and kernel were freed",
                device.spec()
            );
            ffi::jb_graph_free(graph);
            ffi::jb_array_free(y);
            ffi::jb_stream_free(stream);
        }
    }
}

fn last_error() -> String {
    // SAFETY: the library's thread-local message, valid until the next call on this thread.
    unsafe { std::ffi::CStr::from_ptr(ffi::jb_last_error_message()) }.to_string_lossy().into()
}

/// Another stream reads what a replay wrote (after the replay: the array's event), slowly;
/// the next replay, which rewrites it, waits for that read. On the cpu each stream's worker
/// runs one after another's events as a GPU does (cbridge/tests/test_graphs.c holds such
/// readers with a gate instead of a slow loop).
#[test]
fn replays_order_with_other_streams_reads() {
    const I: &str = "const uint64_t i = thread_index();";
    for device in common::cpu_and_gpu() {
        let plus = kernel("rgraph_plus", &["x"], &["s"], &format!("{I} out[i] = x[i] + s;"));
        // Many steps of arithmetic the result does not depend on, then a copy.
        let slow_copy = common::vouched_kernel(&KernelSpec {
            name: "rgraph_slow_copy",
            inputs: &[("x", DType::F32)],
            outputs: &[("out", DType::F32)],
            scalars: &[("reps", DType::I32)],
            body: &format!(
                "{I} float acc = 1.0f; for (i32 k = 0; k < reps; k++) acc = acc * 1.0000001f;\n\
                 out[i] = x[i] + (acc > 1e30f ? 1.0f : 0.0f);"
            ),
            options: CompileOptions { bounds_checks: true, ..Default::default() },
            ..Default::default()
        })
        .unwrap();
        let reps = if device.kind() == DeviceKind::Gpu { 400_000 } else { 2_000 };
        let x = Array::arange(device, N, DType::F32).unwrap();
        let mut stream = Stream::new(device).unwrap();
        let other = Stream::new(device).unwrap();
        let mut capture = stream.begin_capture().unwrap();
        let y = capture
            .launch(
                &plus,
                GraphLaunch {
                    inputs: vec![(&x).into()],
                    scalars: vec![0.0f32.into()],
                    outputs: vec![GraphOutput::New(vec![N])],
                    shape: LaunchShape::Threads(N),
                },
            )
            .unwrap()[0];
        let mut graph = capture.end().unwrap();
        let plus_of = |s: f32| (0..N).map(|i| i as f32 + s).collect::<Vec<f32>>();
        for round in 1..6 {
            let s = round as f32;
            graph.set_scalar(0, 0, s).unwrap();
            graph.launch(&stream).unwrap();
            let z = slow_copy
                .launch_with(Launch {
                    inputs: &[graph.array(y)],
                    scalars: &[Scalar::I32(reps)],
                    outputs: &mut [Output::New(&[N])],
                    shape: LaunchShape::Threads(N),
                    stream: Some(&other),
                    ..Default::default()
                })
                .unwrap()
                .remove(0);
            graph.set_scalar(0, 0, 100.0 + s).unwrap();
            graph.launch(&stream).unwrap();
            assert_eq!(z.to_vec::<f32>().unwrap(), plus_of(s), "{} round {round}", device.spec());
            assert_eq!(graph.array(y).to_vec::<f32>().unwrap(), plus_of(100.0 + s));
        }
    }
}

#[test]
fn what_a_safe_caller_cannot_do_is_refused() {
    let cpu = Device::cpu().unwrap();
    let x = Array::arange(cpu, N, DType::F32).unwrap();
    let unchecked = common::vouched_kernel(&KernelSpec {
        name: "rgraph_unchecked",
        inputs: &[("x", DType::F32)],
        outputs: &[("out", DType::F32)],
        body: "out[thread_index()] = x[thread_index()];",
        ..Default::default()
    })
    .unwrap();
    let new_output = || GraphLaunch {
        inputs: vec![(&x).into()],
        outputs: vec![GraphOutput::New(vec![N])],
        shape: LaunchShape::Threads(N),
        ..Default::default()
    };
    let mut stream = Stream::new(cpu).unwrap();
    // An installed stream (here through a leaked guard) could be reached around the capture.
    {
        let leaked = streams::install_thread_local_default_stream(&stream).unwrap();
        std::mem::forget(leaked);
    }
    let err = stream.begin_capture().map(|_| ()).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    assert!(err.message().contains("installed"), "{err}");
    let mut stream = Stream::new(cpu).unwrap();
    // Nothing launched: no graph.
    let err = stream.begin_capture().unwrap().end().unwrap_err();
    assert!(err.message().contains("nothing was launched"), "{err}");
    // A kernel that is not bounds-checked: refused by the safe launch, recorded by the unsafe.
    let mut capture = stream.begin_capture().unwrap();
    let err = capture.launch(&unchecked, new_output()).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    // SAFETY: the body copies element thread_index() of N, N threads.
    let y = unsafe { capture.launch_unchecked(&unchecked, new_output()) }.unwrap()[0];
    let mut graph = capture.end().unwrap();
    let err = graph.launch(&stream).unwrap_err();
    assert!(err.message().contains("not bounds-checked"), "{err}");
    // SAFETY: as above, at every replay.
    unsafe { graph.launch_unchecked(&stream) }.unwrap();
    assert_eq!(graph.array(y).to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    // Another graph's array, and a scalar the launch does not have.
    let mut capture = stream.begin_capture().unwrap();
    // SAFETY: as above.
    let other = unsafe { capture.launch_unchecked(&unchecked, new_output()) }.unwrap()[0];
    drop(capture); // dropped without end: ended and freed
    assert!(graph.get(other).is_none());
    let err = graph.set_scalar(0, 0, 1.0f32).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    let mut capture = stream.begin_capture().unwrap();
    let err = capture
        .launch(
            &Step::new().add_one,
            GraphLaunch {
                inputs: vec![y.into()],
                outputs: vec![GraphOutput::New(vec![N])],
                shape: LaunchShape::Threads(N),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(err.message().contains("another capture"), "{err}");
}

#[test]
fn a_launch_that_reaches_the_capture_around_it_fails_the_graph() {
    let cpu = Device::cpu().unwrap();
    let fill = kernel("rgraph_fill", &[], &["v"], "out[thread_index()] = v;");
    // The thread's own default stream, as a handle: not an installation, so begin_capture let
    // it through, and this thread's default-stream launches then reached the capture without
    // going through it. The graph wrote `y` at every replay while `y` was no borrow of the
    // graph's: another thread's to_vec read it half-written.
    let mut own = Stream::thread_default(cpu).unwrap();
    let mut y = Array::zeros(cpu, &[N], DType::F32).unwrap();
    let capture = own.begin_capture().unwrap();
    fill.launch_with(Launch {
        scalars: &[1.0f32.into()],
        outputs: &mut [Output::InPlace(&mut y)],
        shape: LaunchShape::Threads(N),
        ..Default::default()
    })
    .unwrap();
    let err = capture.end().map(|_| ()).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    assert!(err.message().contains("outside the capture"), "{err}");
    // The same through the safe probe, which launches on the default stream.
    let x = Array::arange(cpu, 256, DType::F32).unwrap();
    let capture = own.begin_capture().unwrap();
    let _probed = jit_race_probe_array(&x, 0).unwrap();
    let err = capture.end().map(|_| ()).unwrap_err();
    assert!(err.message().contains("outside the capture"), "{err}");
    // What went through the capture alone makes a graph, on the same stream.
    let mut capture = own.begin_capture().unwrap();
    let made = capture
        .launch(
            &fill,
            GraphLaunch {
                scalars: vec![2.0f32.into()],
                outputs: vec![GraphOutput::InPlace(&mut y)],
                shape: LaunchShape::Threads(N),
                ..Default::default()
            },
        )
        .unwrap()[0];
    let mut graph = capture.end().unwrap();
    graph.launch(&own).unwrap();
    assert_eq!(graph.array(made).to_vec::<f32>().unwrap(), vec![2.0f32; N]);
}

#[test]
fn what_a_graph_made_is_out_of_reach_until_its_first_replay() {
    let cpu = Device::cpu().unwrap();
    let flags = common::vouched_kernel(&KernelSpec {
        name: "rgraph_flags",
        outputs: &[("out", DType::Bool)],
        body: "out[thread_index()] = thread_index() % 3 == 0;",
        options: CompileOptions { bounds_checks: true, ..Default::default() },
        ..Default::default()
    })
    .unwrap();
    let mut stream = Stream::new(cpu).unwrap();
    let mut capture = stream.begin_capture().unwrap();
    let made = capture
        .launch(
            &flags,
            GraphLaunch {
                outputs: vec![GraphOutput::New(vec![N])],
                shape: LaunchShape::Threads(N),
                ..Default::default()
            },
        )
        .unwrap()[0];
    let mut graph = capture.end().unwrap();
    // Never written yet: its bytes were the memory's (a bool kernel input read them before).
    assert!(graph.get(made).is_none());
    graph.launch(&stream).unwrap();
    let got = graph.array(made).to_vec::<bool>().unwrap();
    assert!(got.iter().enumerate().all(|(i, &b)| b == (i % 3 == 0)));
}
