//! Device names on every build: `cpu`, `gpu`, `cuda`, `rocm`, each with an optional `:N`.

mod common;

use jitbridge::{Array, DType, Device, ErrorCode, gpu_backends};

#[test]
fn the_cpu_has_names() {
    for name in ["cpu", "cpu:0"] {
        let device = Device::lookup(name).unwrap();
        assert_eq!(device, Device::cpu().unwrap(), "{name}");
        assert_eq!(device.spec(), "cpu:0");
    }
    assert_eq!("cpu".parse::<Device>().unwrap(), Device::cpu().unwrap());
    let err = Device::lookup("cpu:1").unwrap_err();
    assert_eq!(err.code(), ErrorCode::NoDevice, "{err}");
}

#[test]
fn malformed_names_are_invalid_arguments() {
    for name in [
        "",
        "tpu",
        "tpu:0",
        "cuda:",
        "cuda:x",
        "cuda:-1",
        "cuda:0x",
        "gpu:1:2",
        "cpu:+0",
        "a-very-long-backend-name:0",
        "cuda:99999999999999999999",
        "cuda\0",
    ] {
        let err = Device::lookup(name).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{name:?}: {err}");
    }
}

#[test]
fn every_device_is_found_again_by_its_name() {
    for device in Device::all().unwrap() {
        assert_eq!(Device::lookup(&device.spec()).unwrap(), device, "{}", device.spec());
    }
}

#[test]
fn each_gpu_backend_has_devices_or_says_why() {
    let backends = gpu_backends();
    assert_eq!(backends.iter().map(|b| b.name).collect::<Vec<_>>(), ["cuda", "rocm"]);
    for backend in backends {
        assert_eq!(
            backend.built,
            cfg!(feature = "cuda") && backend.name == "cuda"
                || cfg!(feature = "rocm") && backend.name == "rocm",
            "{backend:?}"
        );
        let asked = Device::lookup(&format!("{}:0", backend.name));
        match (&backend.devices, asked) {
            (Ok(n), Ok(device)) => {
                assert!(*n > 0);
                assert_eq!(device.backend(), backend.name);
                assert_eq!(device.ordinal(), 0);
            }
            (Err(why), Err(err)) => {
                assert_eq!(why.code(), err.code());
                let expected =
                    if backend.built { ErrorCode::NoDevice } else { ErrorCode::Unsupported };
                assert_eq!(err.code(), expected, "{err}");
                // A backend left out names the feature that builds it.
                if !backend.built {
                    assert!(
                        err.message().contains(&format!("feature '{}'", backend.name)),
                        "{err}"
                    );
                }
            }
            (devices, asked) => panic!("{}: state {devices:?} but lookup {asked:?}", backend.name),
        }
    }
}

/// In a build without a GPU backend, asking for `gpu` is what asking for `cuda` is: one code
/// (unsupported) and one message, naming the build option that adds a backend.
#[cfg(not(any(feature = "cuda", feature = "rocm")))]
#[test]
fn gpu_in_a_build_without_one_is_unsupported_like_cuda() {
    for name in ["gpu", "gpu:0", "gpu:3", "cuda", "cuda:0", "rocm:1"] {
        let err = Device::lookup(name).unwrap_err();
        assert_eq!(err.code(), ErrorCode::Unsupported, "{name}: {err}");
        assert!(
            err.message().starts_with(&format!(
                "unsupported: no device {name}: jitbridge was built without "
            )),
            "{name}: {err}"
        );
        assert!(err.message().contains("(cargo feature '"), "{name}: {err}");
    }
    for ordinal in [0, 5] {
        let err = Device::gpu(ordinal).unwrap_err();
        assert_eq!(err.code(), ErrorCode::Unsupported, "gpu({ordinal}): {err}");
        assert!(err.message().contains("built without a GPU backend"), "{err}");
    }
}

/// Whether a library whose file name contains `name` is mapped into this process.
fn mapped(name: &str) -> bool {
    std::fs::read_to_string("/proc/self/maps").unwrap().lines().any(|line| line.contains(name))
}

/// A GPU backend's libraries are loaded only when one of its devices is asked for: a process
/// that uses the cpu loads none, and asking for cuda loads nothing of ROCm's (a build with both
/// backends starts like a build with one). In a child: the libraries mapped are its own.
#[test]
fn a_gpu_backend_is_set_up_only_when_asked_for() {
    const NAME: &str = "a_gpu_backend_is_set_up_only_when_asked_for";
    if common::run_in_child(NAME, &[]).is_some() {
        return;
    }
    let cpu = Device::cpu().unwrap();
    let x = Array::arange(cpu, 4, DType::F32).unwrap();
    assert_eq!(x.to_vec::<f32>().unwrap(), [0.0, 1.0, 2.0, 3.0]);
    assert_eq!(Device::count(jitbridge::DeviceKind::Cpu).unwrap(), 1);
    for library in ["libcuda.so", "libnvrtc", "libamdhip64", "libhiprtc"] {
        assert!(!mapped(library), "{library} was loaded for the cpu alone");
    }
    if cfg!(feature = "cuda") {
        let _ = Device::lookup("cuda:0");
        assert!(!mapped("libamdhip64"), "asking for cuda loaded ROCm's driver");
    }
    if cfg!(feature = "rocm") {
        match Device::lookup("rocm:0") {
            // Not installed: nothing to load (no assertion possible).
            Err(e) if e.message().contains("not found") => println!("no ROCm here: {e}"),
            _ => assert!(mapped("libamdhip64"), "asking for rocm loaded no ROCm driver"),
        }
    }
}
