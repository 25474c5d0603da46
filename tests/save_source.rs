//! JITBRIDGE_SAVE_SOURCE=DIR keeps every compiled source, and a compile error says where it is;
//! without it, the error says how to keep it. One test in this binary: it sets the environment.

// Keeps the kernels' compiled code off the user's disk cache (a folder of this process's own).
mod common;

use jitbridge::{
    Array, CompileOptions, CustomKernel, DType, Device, ErrorCode, KernelSpec, LaunchShape,
};

fn kernel(body: &str) -> CustomKernel {
    common::vouched_kernel(&KernelSpec {
        name: "saved_source",
        inputs: &[("x", DType::Bf16)],
        outputs: &[("y", DType::Bf16)],
        body,
        options: CompileOptions { bounds_checks: true, ..Default::default() },
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn saved_sources_and_errors_that_say_where() {
    let cpu = Device::cpu().unwrap();
    let x = Array::arange(cpu, 4, DType::Bf16).unwrap();
    // A unique body per process: compiled here, not found in a disk cache.
    let tag = format!("/* {} {:?} */", std::process::id(), std::time::SystemTime::now());

    let broken = kernel(&format!("y[thread_index()] = x[thread_index()] +; {tag}"));
    let err = broken.launch(&[&x], &[&[4]], LaunchShape::Threads(4)).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Compile);
    assert!(err.message().contains("set JITBRIDGE_SAVE_SOURCE=DIR"), "{err}");

    let dir = std::env::temp_dir().join(format!("jb-save-source-{}", std::process::id()));
    // SAFETY: the only test of this binary; the library reads the variable at each compile and
    // no launch runs on another thread now.
    unsafe { std::env::set_var("JITBRIDGE_SAVE_SOURCE", &dir) };

    let broken = kernel(&format!("y[thread_index()] = x[thread_index()] + ; {tag}"));
    let err = broken.launch(&[&x], &[&[4]], LaunchShape::Threads(4)).unwrap_err();
    let path = dir.join(format!("{}.c", broken.module_name()));
    let message = err.message();
    assert!(message.contains(&format!("source saved at {}", path.display())), "{message}");
    assert!(message.contains("saved_source.body:1"), "the log is still there: {message}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), broken.source("cpu").unwrap());

    let good = kernel(&format!("y[thread_index()] = x[thread_index()]; {tag}"));
    let y = good.launch(&[&x], &[&[4]], LaunchShape::Threads(4)).unwrap();
    assert_eq!(y[0].to_vec::<jitbridge::Bf16>().unwrap()[3].to_f32(), 3.0);
    let path = dir.join(format!("{}.c", good.module_name()));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), good.source("cpu").unwrap());

    // A FIFO where the source goes (planted in a shared folder, say): opening it for writing
    // waited for a reader forever, under the module cache's lock. Now: a warning, and the build.
    let piped = kernel(&format!("y[thread_index()] = x[thread_index()]; /* fifo */ {tag}"));
    let fifo = dir.join(format!("{}.c", piped.module_name()));
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let y = piped.launch(&[&x], &[&[4]], LaunchShape::Threads(4)).map(|y| y.len());
        sender.send(y.map_err(|e| e.to_string())).unwrap();
    });
    let launched = receiver.recv_timeout(std::time::Duration::from_secs(60));
    assert_eq!(launched.expect("the launch hangs on the FIFO"), Ok(1));
    std::fs::remove_dir_all(&dir).unwrap();
}
