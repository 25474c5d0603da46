//! The driver-call counter (`jb_driver_call_counting`) on a device without a driver: refused
//! with `Unsupported`, switched on or off, and no counts to read.

use jitbridge::{Device, ErrorCode, sys_tools};

#[test]
fn the_cpu_has_no_driver_calls_to_count() {
    let cpu = Device::cpu().unwrap();
    for enabled in [true, false] {
        // SAFETY: the cpu has no driver table to switch; this test's thread is its only one.
        let refused = unsafe { sys_tools::count_driver_calls(cpu, enabled) }.unwrap_err();
        assert_eq!(refused.code(), ErrorCode::Unsupported, "{refused}");
        assert!(refused.to_string().contains("no driver to count"), "{refused}");
    }
    let refused = sys_tools::take_thread_driver_calls(cpu).unwrap_err();
    assert_eq!(refused.code(), ErrorCode::Unsupported, "{refused}");
}
