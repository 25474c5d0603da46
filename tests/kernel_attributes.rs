//! Kernel attributes (CuPy's `RawKernel.attributes`): a custom kernel's and a whole-source
//! module entry's registers, block limit, static shared and local memory. On the cpu each has
//! its stated meaning (0 where not applicable, the launch's limit of 1024 threads per block);
//! on a GPU (a GPU build on a machine with one) the driver's values, checked as CuPy's
//! `test_get_attributes` checks them. An unknown entry and an unvouched module are refused.

mod common; // its temporary cache folder: the tests never write the user's

use jitbridge::*;

const CPU_SOURCE: &str = r#"
void tile(void **args, uint64_t threads) { (void)args; (void)threads; }
"#;

/// A block-wide tile of 256 floats: 1024 bytes of static shared memory.
const GPU_SOURCE: &str = r#"
extern "C" __global__ void tile(const float *x, float *y, unsigned long long x_n,
                                unsigned long long y_n) {
    __shared__ float t[256];
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    t[threadIdx.x % 256] = i < x_n ? x[i] : 0.0f;
    __syncthreads();
    if (i < y_n)
        y[i] = t[(threadIdx.x + 1) % 256];
}
"#;

fn module(declared: bool) -> SourceModule {
    let spec = SourceModuleSpec {
        name: "attributes_tile",
        cpu_source: Some(CPU_SOURCE),
        gpu_source: Some(GPU_SOURCE),
        entries: &["tile"],
        ..Default::default()
    };
    const ARGS: &[ArgDecl] = &[ArgDecl::In(DType::F32), ArgDecl::Out(DType::F32)];
    if declared {
        // SAFETY: both sources' `tile` take (x, y) and the two counts and keep every index below
        // both counts (the cpu's touches nothing).
        unsafe { SourceModule::new_declared(&spec, &[Signature::new("tile", ARGS)]) }.unwrap()
    } else {
        SourceModule::new(&spec).unwrap()
    }
}

fn kernel() -> CustomKernel {
    common::vouched_kernel(&KernelSpec {
        name: "attributes_copy",
        inputs: &[("x", DType::F32)],
        outputs: &[("y", DType::F32)],
        body: "y[thread_index()] = x[thread_index()] * 2.0f;",
        ..Default::default()
    })
    .unwrap()
}

const CPU_MEANING: KernelAttributes = KernelAttributes {
    registers: 0,
    max_threads_per_block: 1024,
    static_shared_bytes: 0,
    local_bytes: 0,
};

#[test]
fn the_cpu_says_what_each_attribute_means_there() {
    let cpu = Device::cpu().unwrap();
    assert_eq!(kernel().attributes(cpu).unwrap(), CPU_MEANING);
    assert_eq!(module(true).attributes(cpu, "tile").unwrap(), CPU_MEANING);
}

#[test]
fn an_unknown_entry_and_an_unvouched_module_are_refused() {
    let cpu = Device::cpu().unwrap();
    let err = module(true).attributes(cpu, "other").unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(err.message().contains("no entry point 'other'"), "{}", err.message());
    let err = module(false).attributes(cpu, "tile").unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(err.message().contains("nothing vouches"), "{}", err.message());
}

/// CuPy's test_get_attributes: registers counted, a block limit, no shared memory for a kernel
/// that declares none; here also the tile's 1024 bytes.
#[cfg(any(feature = "cuda", feature = "rocm"))]
#[test]
fn a_gpu_gives_the_drivers_attributes() {
    let Ok(gpu) = Device::lookup("gpu") else { return };
    let copy = kernel().attributes(gpu).unwrap();
    assert!(copy.registers > 0, "{copy:?}");
    assert!((1..=1024).contains(&copy.max_threads_per_block), "{copy:?}");
    assert_eq!(copy.static_shared_bytes, 0, "{copy:?}");
    let tile = module(true).attributes(gpu, "tile").unwrap();
    assert_eq!(tile.static_shared_bytes, 1024, "{tile:?}");
    assert!((1..=1024).contains(&tile.max_threads_per_block), "{tile:?}");
}
