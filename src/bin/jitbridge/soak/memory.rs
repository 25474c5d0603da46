//! What the soak measures of memory: RSS, glibc's heap, device memory, and what one loaded
//! module costs in RSS.

use super::worker_loops::{EMBED_BODY, embed_want, exact_f32, worker_kernel};
use jitbridge::{Array, Counters, DType, Device, LaunchShape};

/// Resident bytes of this process (/proc/self/statm, second field, in pages).
pub fn rss_bytes() -> u64 {
    unsafe extern "C" {
        fn sysconf(name: i32) -> i64;
    }
    const SC_PAGESIZE: i32 = 30; // Linux
    // SAFETY: sysconf reads a constant.
    let page = unsafe { sysconf(SC_PAGESIZE) }.max(1) as u64;
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page)
}

/// glibc's heap now, for `JITBRIDGE_SOAK_MALLINFO=1` (tells an allocator high-water mark from a
/// leak): (bytes in use, bytes held by arenas and mmapped blocks).
pub fn heap_bytes() -> (u64, u64) {
    #[repr(C)]
    #[derive(Default)]
    struct Mallinfo2 {
        arena: usize,
        ordblks: usize,
        smblks: usize,
        hblks: usize,
        hblkhd: usize,
        usmblks: usize,
        fsmblks: usize,
        uordblks: usize,
        fordblks: usize,
        keepcost: usize,
    }
    unsafe extern "C" {
        fn mallinfo2() -> Mallinfo2;
    }
    // SAFETY: mallinfo2 (glibc >= 2.33) only reads the allocator's statistics.
    let m = unsafe { mallinfo2() };
    ((m.uordblks + m.hblkhd) as u64, (m.arena + m.hblkhd) as u64)
}

/// Device memory now, summed over devices (the soak uses one): (live, peak live, reserved).
pub fn device_memory() -> (u64, u64, u64) {
    let c = Counters::read();
    (c.mem_live_bytes, c.mem_peak_live_bytes, c.mem_reserved_bytes)
}

/// Keeps glibc's mmap threshold at its default: left dynamic, it rises to the largest block
/// freed (the read-back of a 4 MiB batch), after which such blocks come from per-thread heaps
/// whose high-water marks creep up for minutes and read as RSS growth that is no leak.
pub fn fixed_mmap_threshold() {
    unsafe extern "C" {
        fn mallopt(param: i32, value: i32) -> i32;
    }
    const M_MMAP_THRESHOLD: i32 = -3;
    // SAFETY: a plain setting of the C allocator; setting it turns its dynamic rise off.
    unsafe { mallopt(M_MMAP_THRESHOLD, 128 * 1024) };
}

/// Modules built and loaded before the run to measure what one costs in RSS.
const MODULE_PROBES: usize = 8;

/// RSS bytes one more loaded module costs: the cache keeps every module by design, so the RSS
/// target discounts the modules the workers load after warm-up at this price.
pub fn module_rss_cost(device: Device) -> Result<u64, jitbridge::Error> {
    let inp = Array::arange(device, 64, DType::F32)?;
    let one = |variant: usize| -> Result<(), jitbridge::Error> {
        let kernel = worker_kernel("soak_rss_probe", EMBED_BODY, 64, variant)?;
        // SAFETY: EMBED_BODY bounds its index by out_size; the input has 64 elements too.
        let out = unsafe { kernel.launch_unchecked(&[&inp], &[&[64]], LaunchShape::Threads(64))? };
        let v = out[0].to_vec::<f32>()?;
        if !exact_f32(&v, |i| embed_want(i as f32, 64, variant)) {
            return Err(jitbridge::Error::new_other("a module probe's output is not exact"));
        }
        Ok(())
    };
    one(0)?; // the first build's one-time set-up is no module's cost
    let before = rss_bytes();
    for variant in 1..=MODULE_PROBES {
        one(variant)?;
    }
    Ok(rss_bytes().saturating_sub(before) / MODULE_PROBES as u64)
}
