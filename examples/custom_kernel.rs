//! A custom kernel on the default device: the library writes the kernel around the body,
//! compiles it on first launch, and keeps the module in the process-global cache. Making a
//! kernel is `unsafe` (its maker vouches for the body), and so is launching one that is not
//! bounds-checked: the comment on each says why it is sound.
//!
//!     cargo run --example custom_kernel

use jitbridge::{Array, Counters, CustomKernel, DType, Device, KernelSpec, LaunchShape};

fn main() -> Result<(), jitbridge::Error> {
    let device = Device::default_device()?;
    // SAFETY: the body multiplies and adds floats, and subscripts its arrays.
    let saxpy = unsafe {
        CustomKernel::new(&KernelSpec {
            name: "saxpy",
            inputs: &[("x", DType::F32), ("y", DType::F32)],
            outputs: &[("out", DType::F32)],
            // `x_size` is the element count of input `x`; threads past it do nothing.
            body: "size_t i = thread_index();\n\
                   if (i < x_size) out[i] = 2.5f * x[i] + y[i];",
            ..Default::default()
        })?
    };
    println!("device {} ({}), module {}", device.name(), device.backend(), saxpy.module_name());

    let n = 1000;
    let x = Array::arange(device, n, DType::F32)?;
    let y = Array::from_slice(device, &vec![1.0f32; n], &[n])?;
    for launch in 0..3 {
        // SAFETY: thread i touches element i of x, y and out only when i < x_size = n, and y
        // and out have n elements too.
        let out = unsafe { saxpy.launch_unchecked(&[&x, &y], &[&[n]], LaunchShape::Threads(n))? };
        let values = out[0].to_vec::<f32>()?;
        let counters = Counters::read();
        println!(
            "launch {launch}: out[0..3] = {:?}, out[999] = {}; builds {}, hits {}",
            &values[..3],
            values[999],
            counters.builds,
            counters.hits
        );
        assert!(values.iter().enumerate().all(|(i, &v)| v == 2.5 * i as f32 + 1.0));
    }
    Ok(())
}
