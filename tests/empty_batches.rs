//! An empty batch is a launch, not an error: a custom kernel, a whole-source module and a graph
//! launched with no threads (`LaunchShape::Threads(0)`, or a grid with no blocks) return their
//! outputs (empty, or in place and unchanged) after checking every argument as any launch does.
//! Runs on the cpu, and on GPU 0 in a GPU build on a machine with a GPU.

mod common; // its temporary cache folder: the tests never write the user's

use jitbridge::*;

fn add_one() -> CustomKernel {
    common::vouched_kernel(&KernelSpec {
        name: "empty_batch_add_one",
        inputs: &[("x", DType::F32)],
        outputs: &[("y", DType::F32)],
        body: "y[thread_index()] = x[thread_index()] + 1.0f;",
        options: CompileOptions { bounds_checks: true, ..Default::default() },
        ..Default::default()
    })
    .unwrap()
}

const NO_BLOCKS: [LaunchShape; 3] = [
    LaunchShape::Threads(0),
    LaunchShape::Grid { grid: [0, 1, 1], block: [256, 1, 1] },
    LaunchShape::Grid { grid: [4, 0, 1], block: [32, 1, 1] },
];

#[test]
fn a_custom_kernel_with_no_threads_returns_empty_outputs() {
    let _turn = common::serial();
    let kernel = add_one();
    for device in common::cpu_and_gpu() {
        let x = Array::from_slice::<f32>(device, &[], &[0]).unwrap();
        for shape in NO_BLOCKS {
            let y = kernel.launch(&[&x], &[&[0]], shape).unwrap();
            assert_eq!(y.len(), 1);
            assert_eq!(y[0].shape(), [0], "{device:?} {shape:?}");
            assert!(y[0].to_vec::<f32>().unwrap().is_empty());
        }
        // A batch of zero rows of 64 keeps its shape.
        let rows = Array::from_slice::<f32>(device, &[], &[0, 64]).unwrap();
        let y = kernel.launch(&[&rows], &[&[0, 64]], LaunchShape::Threads(0)).unwrap();
        assert_eq!(y[0].shape(), [0, 64]);
        // And the kernel still works for a real batch afterwards.
        let x = Array::from_slice(device, &[1.0f32, 2.0], &[2]).unwrap();
        let y = kernel.launch(&[&x], &[&[2]], LaunchShape::Threads(2)).unwrap();
        assert_eq!(y[0].to_vec::<f32>().unwrap(), [2.0, 3.0]);
    }
}

#[test]
fn an_empty_launch_still_checks_its_arguments() {
    let _turn = common::serial();
    let kernel = add_one();
    for device in common::cpu_and_gpu() {
        let wrong = Array::from_slice::<i32>(device, &[], &[0]).unwrap();
        let err = kernel.launch(&[&wrong], &[&[0]], LaunchShape::Threads(0)).unwrap_err();
        assert_eq!(err.code(), ErrorCode::Shape, "{err}");
        let x = Array::from_slice::<f32>(device, &[], &[0]).unwrap();
        let err = kernel.launch(&[&x, &x], &[&[0]], LaunchShape::Threads(0)).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
        // A block of no threads is no shape at all.
        let no_threads_per_block = LaunchShape::Grid { grid: [1, 1, 1], block: [0, 1, 1] };
        let err = kernel.launch(&[&x], &[&[0]], no_threads_per_block).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
        assert!(err.message().contains("block dimensions must be at least 1"), "{err}");
    }
}

#[test]
fn an_empty_launch_leaves_an_in_place_output_as_it_was() {
    let _turn = common::serial();
    let kernel = add_one();
    for device in common::cpu_and_gpu() {
        let x = Array::from_slice::<f32>(device, &[], &[0]).unwrap();
        let mut kept = Array::from_slice(device, &[7.0f32, 8.0, 9.0], &[3]).unwrap();
        kernel
            .launch_with(Launch {
                inputs: &[&x],
                outputs: &mut [Output::InPlace(&mut kept)],
                shape: LaunchShape::Threads(0),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(kept.to_vec::<f32>().unwrap(), [7.0, 8.0, 9.0]);
    }
}

const CPU_SOURCE: &str = r#"
void scale(void **args, uint64_t threads) {
    const float *x = *(const float **)args[0];
    float *y = *(float **)args[1];
    uint64_t n = *(uint64_t *)args[2] < *(uint64_t *)args[3] ? *(uint64_t *)args[2]
                                                              : *(uint64_t *)args[3];
    for (uint64_t i = 0; i < threads && i < n; i++)
        y[i] = 3.0f * x[i];
}
"#;

const GPU_SOURCE: &str = r#"
extern "C" __global__ void scale(const float *x, float *y, unsigned long long x_n,
                                 unsigned long long y_n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < x_n && i < y_n)
        y[i] = 3.0f * x[i];
}
"#;

#[test]
fn a_source_module_entry_with_no_threads_runs_nothing() {
    let _turn = common::serial();
    let spec = SourceModuleSpec {
        name: "empty_batch_scale",
        cpu_source: Some(CPU_SOURCE),
        gpu_source: Some(GPU_SOURCE),
        entries: &["scale"],
        ..Default::default()
    };
    const ARGS: &[ArgDecl] = &[ArgDecl::In(DType::F32), ArgDecl::Out(DType::F32)];
    // SAFETY: both sources' `scale` take (x, y) and then the two arrays' counts, and keep every
    // index below both counts whatever the thread count; only y is written.
    let m = unsafe { SourceModule::new_declared(&spec, &[Signature::new("scale", ARGS)]) }.unwrap();
    for device in common::cpu_and_gpu() {
        let x = Array::from_slice(device, &[1.0f32, 2.0], &[2]).unwrap();
        let mut y = Array::from_slice(device, &[5.0f32, 6.0], &[2]).unwrap();
        for shape in NO_BLOCKS {
            m.launch("scale", &mut [Arg::In(&x), Arg::Out(&mut y)], shape).unwrap();
            assert_eq!(y.to_vec::<f32>().unwrap(), [5.0, 6.0], "{device:?} {shape:?}");
        }
        let err = m.launch("scale", &mut [Arg::In(&x)], LaunchShape::Threads(0)).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
        m.launch("scale", &mut [Arg::In(&x), Arg::Out(&mut y)], LaunchShape::Threads(2)).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), [3.0, 6.0]);
    }
}

#[test]
fn a_graph_replays_empty_launches_as_nothing() {
    let _turn = common::serial();
    let kernel = common::vouched_kernel(&KernelSpec {
        name: "empty_batch_add_s",
        inputs: &[("x", DType::F32)],
        outputs: &[("y", DType::F32)],
        scalars: &[("s", DType::F32)],
        body: "y[thread_index()] = x[thread_index()] + s;",
        options: CompileOptions { bounds_checks: true, ..Default::default() },
        ..Default::default()
    })
    .unwrap();
    for device in common::cpu_and_gpu() {
        let empty = Array::from_slice::<f32>(device, &[], &[0]).unwrap();
        let x = Array::from_slice(device, &[1.0f32, 2.0], &[2]).unwrap();
        let mut stream = Stream::new(device).unwrap();
        // An empty launch between two real ones.
        let mut capture = stream.begin_capture().unwrap();
        let a = capture
            .launch(
                &kernel,
                GraphLaunch {
                    inputs: vec![(&x).into()],
                    scalars: vec![1.0f32.into()],
                    outputs: vec![GraphOutput::New(vec![2])],
                    shape: LaunchShape::Threads(2),
                },
            )
            .unwrap()[0];
        let nothing = capture
            .launch(
                &kernel,
                GraphLaunch {
                    inputs: vec![(&empty).into()],
                    scalars: vec![1.0f32.into()],
                    outputs: vec![GraphOutput::New(vec![0])],
                    shape: LaunchShape::Threads(0),
                },
            )
            .unwrap()[0];
        let b = capture
            .launch(
                &kernel,
                GraphLaunch {
                    inputs: vec![a.into()],
                    scalars: vec![1.0f32.into()],
                    outputs: vec![GraphOutput::New(vec![2])],
                    shape: LaunchShape::Threads(2),
                },
            )
            .unwrap()[0];
        let mut graph = capture.end().unwrap();
        assert_eq!(graph.launches(), 3, "the empty launch keeps its index");
        for s in [1.0f32, 10.0, 100.0] {
            // The empty launch's scalar changes nothing; the last launch's is seen.
            graph.set_scalar(1, 0, s).unwrap();
            graph.set_scalar(2, 0, s).unwrap();
            graph.launch(&stream).unwrap();
            assert_eq!(graph.array(b).to_vec::<f32>().unwrap(), [2.0 + s, 3.0 + s], "{device:?}");
            assert!(graph.array(nothing).to_vec::<f32>().unwrap().is_empty());
        }
        // A graph of empty launches only: a step whose batch is empty replays as nothing.
        let mut capture = stream.begin_capture().unwrap();
        let only = capture
            .launch(
                &kernel,
                GraphLaunch {
                    inputs: vec![(&empty).into()],
                    scalars: vec![1.0f32.into()],
                    outputs: vec![GraphOutput::New(vec![0])],
                    shape: LaunchShape::Threads(0),
                },
            )
            .unwrap()[0];
        let mut graph = capture.end().unwrap();
        graph.launch(&stream).unwrap();
        assert!(graph.array(only).to_vec::<f32>().unwrap().is_empty(), "{device:?}");
    }
}
