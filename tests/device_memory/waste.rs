//! How much a buffer wastes: the bound buffer.c documents, asserted directly.

use super::{common, output_of, warm_up};
use jitbridge::{Device, streams};

/// A fresh buffer wastes under 1/16 of its request (16 size steps per doubling, as PyTorch's
/// roundup_power2_divisions): the reserved bytes it adds are under 17/16 of the request, here
/// for requests just past a power of two, where rounding wastes the most.
#[test]
fn a_fresh_buffer_wastes_under_a_sixteenth_of_its_request() {
    let _turn = common::serial();
    for device in Device::all().unwrap() {
        let stream = streams::new_thread_local_generation_stream(device).unwrap();
        let _guard = streams::install_thread_local_default_stream(&stream).unwrap();
        let warm = warm_up(device, &stream);
        let old_cap = device.idle_cap();
        device.set_idle_cap(0).unwrap(); // nothing idle to reuse: every request is a fresh buffer
        for log2 in 10..=26 {
            let bytes = (1u64 << log2) + 4;
            let before = device.memory_stats();
            let array = output_of(&warm.kernel, &warm.x, bytes).unwrap();
            let after = device.memory_stats();
            assert_eq!(after.since(&before).allocations, 1, "{device:?}: {bytes} bytes");
            let capacity = after.reserved_bytes - before.reserved_bytes;
            assert!(
                capacity >= bytes && capacity * 16 < bytes * 17,
                "{device:?}: a fresh buffer for {bytes} bytes holds {capacity} ({:.4} of the \
                 request; the bound is under 17/16 = 1.0625)",
                capacity as f64 / bytes as f64
            );
            drop(array);
            stream.synchronize().unwrap(); // lets go of the buffer: freed, under a cap of 0
        }
        device.set_idle_cap(old_cap).unwrap();
    }
}
