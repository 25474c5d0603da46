//! Module globals (CuPy's `RawModule.get_global`): the host writes a module's global variable,
//! a later launch on the stream reads it, the host reads it back; every bad request (an unknown
//! name, a name that is not an identifier, a function, bytes past the end, a `const` on the
//! cpu, a module nothing vouches for) is a clear error with nothing copied.
//! Runs on the cpu, and on GPU 0 in a GPU build on a machine with a GPU.

mod common; // its temporary cache folder: the tests never write the user's

use jitbridge::*;

const CPU_SOURCE: &str = r#"
float coeffs[4] = {1, 1, 1, 1};
const int version = 3;
/* y[i] = x[i] * coeffs[i % 4] */
void weigh(void **args, uint64_t threads) {
    const float *x = *(const float **)args[0];
    float *y = *(float **)args[1];
    uint64_t x_n = *(uint64_t *)args[2], y_n = *(uint64_t *)args[3];
    for (uint64_t i = 0; i < threads && i < x_n && i < y_n; i++)
        y[i] = x[i] * coeffs[i % 4];
}
"#;

const GPU_SOURCE: &str = r#"
__constant__ float coeffs[4] = {1, 1, 1, 1};
__device__ int version = 3;
extern "C" __global__ void weigh(const float *x, float *y, unsigned long long x_n,
                                 unsigned long long y_n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < x_n && i < y_n)
        y[i] = x[i] * coeffs[i % 4] + 0 * version;
}
"#;

/// A module of its own per test: one source's globals are shared by every handle to it.
fn spec(name: &'static str) -> SourceModuleSpec<'static> {
    SourceModuleSpec {
        name,
        cpu_source: Some(CPU_SOURCE),
        gpu_source: Some(GPU_SOURCE),
        entries: &["weigh"],
        ..Default::default()
    }
}

fn declared(name: &'static str) -> SourceModule {
    const ARGS: &[ArgDecl] = &[ArgDecl::In(DType::F32), ArgDecl::Out(DType::F32)];
    // SAFETY: both sources' `weigh` take (x, y) and the two counts, keep every index below both
    // counts, read only x, y and coeffs, and write only y.
    unsafe { SourceModule::new_declared(&spec(name), &[Signature::new("weigh", ARGS)]) }.unwrap()
}

fn floats(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_ne_bytes()).collect()
}

#[test]
fn a_written_global_is_what_the_next_launch_reads() {
    let m = declared("globals_written");
    for device in common::cpu_and_gpu() {
        assert_eq!(m.global_size(device, "coeffs").unwrap(), 16);
        let stream = Stream::new(device).unwrap();
        // SAFETY: `weigh` uses coeffs as factors only: any bit pattern is a float it may use.
        unsafe { m.write_global_on(&stream, "coeffs", 0, &floats(&[2.0, 3.0, 4.0, 5.0])) }.unwrap();
        // SAFETY: as above.
        unsafe { m.write_global_on(&stream, "coeffs", 12, &floats(&[10.0])) }.unwrap();
        let x = Array::from_slice(device, &[1.0f32; 4], &[4]).unwrap();
        let mut y = Array::zeros(device, &[4], DType::F32).unwrap();
        let args = &mut [Arg::In(&x), Arg::Out(&mut y)];
        m.launch_on(&stream, "weigh", args, LaunchShape::Threads(4)).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), [2.0, 3.0, 4.0, 10.0], "on {device:?}");
        let mut back = [0u8; 8];
        m.read_global_on(&stream, "coeffs", 8, &mut back).unwrap();
        assert_eq!(back.to_vec(), floats(&[4.0, 10.0]));
        let mut version = [0u8; 4];
        m.read_global(device, "version", 0, &mut version).unwrap();
        assert_eq!(i32::from_ne_bytes(version), 3);
    }
}

#[test]
fn bad_requests_are_errors_and_copy_nothing() {
    let m = declared("globals_refused");
    let device = Device::cpu().unwrap();
    let invalid = |result: Result<(), Error>, text: &str| {
        let error = result.unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidArgument, "{error}");
        assert!(error.to_string().contains(text), "{error} lacks {text:?}");
    };
    let mut out = [0u8; 32];
    invalid(m.read_global(device, "coeffs", 0, &mut out[..17]), "outside global 'coeffs'");
    invalid(m.read_global(device, "coeffs", 13, &mut out[..4]), "outside global 'coeffs'");
    invalid(m.read_global(device, "coeffs", usize::MAX, &mut out[..1]), "outside global");
    invalid(m.read_global(device, "nowhere", 0, &mut out[..4]), "no global variable 'nowhere'");
    invalid(m.read_global(device, "weigh", 0, &mut out[..4]), "not a global variable");
    invalid(m.read_global(device, "coeffs[1]", 0, &mut out[..4]), "the global's name");
    invalid(m.read_global(device, "", 0, &mut out[..4]), "the global's name");
    // SAFETY: every write here is refused before a byte is copied.
    unsafe {
        invalid(m.write_global(device, "version", 0, &7i32.to_ne_bytes()), "is const");
        invalid(m.write_global(device, "coeffs", 4, &[0u8; 16]), "outside global 'coeffs'");
    }
    let mut coeffs = [0u8; 16];
    m.read_global(device, "coeffs", 0, &mut coeffs).unwrap();
    assert_eq!(coeffs.to_vec(), floats(&[1.0; 4]), "a refused write changed the global");

    // Undeclared: reading would load code that nothing vouches for.
    let undeclared = SourceModule::new(&spec("globals_unvouched")).unwrap();
    invalid(undeclared.read_global(device, "coeffs", 0, &mut out[..4]), "nothing vouches");
    invalid(undeclared.global_size(device, "coeffs").map(|_| ()), "nothing vouches");
}
