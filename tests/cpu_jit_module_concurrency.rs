//! The mission's concurrency scenarios on the cpu backend, in every plain `cargo test`.

mod common;

jit_module_concurrency_tests!(jitbridge::Device::cpu().unwrap(), jitbridge::jit_race_probe_array);
