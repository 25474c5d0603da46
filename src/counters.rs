//! The module cache's counters as data. A leaf: it names no other module of the crate, so the
//! raw layer (`ffi`) can use it as `jb_counters`. Reading and resetting them is in `cache.rs`.

/// Per-process counters of the module cache. Laid out as the C `jb_counters`, field for field.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Modules compiled and loaded (disk cache hits are counted apart).
    pub builds: u64,
    /// Builds that failed; nothing was inserted for them.
    pub build_failures: u64,
    /// Lookups that found their module under the shared lock.
    pub hits: u64,
    /// Lookups that did not, and went on to the exclusive lock.
    pub misses: u64,
    /// Time spent building, in nanoseconds.
    pub build_ns: u64,
    /// Configure hooks that ran and succeeded.
    pub configures: u64,
    /// The most builds ever in progress at once since the last reset: 1 while the cache's
    /// exclusive lock serialises them, as it must.
    pub peak_concurrent_builds: u64,
    /// Builds served from the disk cache: the compiler was skipped.
    pub disk_hits: u64,
    /// Disk lookups that found no entry.
    pub disk_misses: u64,
    /// Entries found invalid, or refused by the loader, and replaced.
    pub disk_rejected: u64,
    /// Device memory, summed over devices: bytes asked for by buffers in use (arrays, and work
    /// queued on them).
    pub mem_live_bytes: u64,
    /// Each device's most live bytes since the last reset, summed.
    pub mem_peak_live_bytes: u64,
    /// Bytes taken from the drivers: buffers in use and idle.
    pub mem_reserved_bytes: u64,
    /// Of those, idle buffers kept for reuse.
    pub mem_idle_bytes: u64,
    /// Driver allocations.
    pub mem_allocations: u64,
    /// Driver frees.
    pub mem_frees: u64,
    /// Requests served by an idle buffer, without a driver call.
    pub mem_reuses: u64,
    /// Driver allocations that failed, freed the idle buffers and tried again.
    pub mem_retries: u64,
}

impl Counters {
    /// The change from `earlier` to `self`. Peaks and the memory byte counts are states, kept
    /// as they are now.
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters {
            builds: self.builds - earlier.builds,
            build_failures: self.build_failures - earlier.build_failures,
            hits: self.hits - earlier.hits,
            misses: self.misses - earlier.misses,
            build_ns: self.build_ns - earlier.build_ns,
            configures: self.configures - earlier.configures,
            peak_concurrent_builds: self.peak_concurrent_builds,
            disk_hits: self.disk_hits - earlier.disk_hits,
            disk_misses: self.disk_misses - earlier.disk_misses,
            disk_rejected: self.disk_rejected - earlier.disk_rejected,
            mem_live_bytes: self.mem_live_bytes,
            mem_peak_live_bytes: self.mem_peak_live_bytes,
            mem_reserved_bytes: self.mem_reserved_bytes,
            mem_idle_bytes: self.mem_idle_bytes,
            mem_allocations: self.mem_allocations - earlier.mem_allocations,
            mem_frees: self.mem_frees - earlier.mem_frees,
            mem_reuses: self.mem_reuses - earlier.mem_reuses,
            mem_retries: self.mem_retries - earlier.mem_retries,
        }
    }
}

/// One device's memory statistics ([`Device::memory_stats`](crate::Device::memory_stats)): the
/// quantities whose sums over the devices are the `mem_` fields of [`Counters`]. Laid out as the
/// C `jb_memory_stats`, field for field.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes asked for by buffers in use (arrays, and work queued on them).
    pub live_bytes: u64,
    /// The most live bytes since the last [`Counters::reset`].
    pub peak_live_bytes: u64,
    /// Bytes taken from the driver: buffers in use and idle.
    pub reserved_bytes: u64,
    /// Of those, idle buffers kept for reuse.
    pub idle_bytes: u64,
    /// Driver allocations since the last reset.
    pub allocations: u64,
    /// Driver frees since the last reset.
    pub frees: u64,
    /// Requests served by an idle buffer, without a driver call, since the last reset.
    pub reuses: u64,
    /// Driver allocations that failed, freed the idle buffers and tried again, since the last
    /// reset.
    pub retries: u64,
}

impl MemoryStats {
    /// The change from `earlier` to `self`: the event counts as differences, the byte counts
    /// (states) as they are now.
    pub fn since(&self, earlier: &MemoryStats) -> MemoryStats {
        MemoryStats {
            allocations: self.allocations - earlier.allocations,
            frees: self.frees - earlier.frees,
            reuses: self.reuses - earlier.reuses,
            retries: self.retries - earlier.retries,
            ..*self
        }
    }
}
