//! The module cache's counters, and a prewarm's, as data. A leaf: it names no other module of
//! the crate, so the raw layer (`ffi`) can use them as `jb_counters` and `jb_prewarm_result`.
//! Reading and resetting the counters is in `cache.rs`.

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
    /// Entries found invalid, or refused by the loader for good, and replaced (a refusal for
    /// now, such as the loader's EMFILE, is a miss).
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
    /// The longest single build, in nanoseconds (of the same builds as `build_ns`).
    pub build_max_ns: u64,
    /// Compiles a sealed process refused ([`crate::seal`]); not counted as build failures.
    pub sealed_refusals: u64,
    /// Compiles a process sealed to warn warned about, then ran.
    pub sealed_warnings: u64,
    /// Builds served from a bundle: the compiler was skipped.
    pub bundle_hits: u64,
    /// Bundle entries that failed their checks or that the loader refused: skipped for the
    /// rest of the process.
    pub bundle_rejected: u64,
    /// Builds that waited for another process's compile of the kernel (its lease), then
    /// loaded its entry.
    pub lease_waits: u64,
    /// Waits that reached the compile timeout, then compiled alone.
    pub lease_timeouts: u64,
    /// Compiles without a lease: locks do not work in the cache folder.
    pub lease_fallbacks: u64,
    /// Leases taken over from a holder whose lease stopped moving (a stopped process), then
    /// compiled.
    pub lease_stale_takeovers: u64,
    /// Builds served from the remote tier, compiler skipped.
    pub remote_hits: u64,
    /// Remote lookups that found no entry.
    pub remote_misses: u64,
    /// Remote entries that failed their checks or that the loader refused: never loaded.
    pub remote_rejected: u64,
    /// Compiled modules written to the remote tier.
    pub remote_stores: u64,
    /// Failures of the remote store that paused the tier (its breaker).
    pub remote_breaker_trips: u64,
    /// Builds that found another host compiling the kernel (its fleet lease on the remote
    /// tier) and waited for its value.
    pub remote_lease_waits: u64,
    /// Fleet lease waits that reached the compile timeout, then compiled alone.
    pub remote_lease_timeouts: u64,
}

impl Counters {
    /// Every counter with its field name, in the struct's order: for a dashboard or an export
    /// (`jitbridge info --json` prints these).
    pub fn fields(&self) -> [(&'static str, u64); 34] {
        [
            ("builds", self.builds),
            ("build_failures", self.build_failures),
            ("hits", self.hits),
            ("misses", self.misses),
            ("build_ns", self.build_ns),
            ("configures", self.configures),
            ("peak_concurrent_builds", self.peak_concurrent_builds),
            ("disk_hits", self.disk_hits),
            ("disk_misses", self.disk_misses),
            ("disk_rejected", self.disk_rejected),
            ("mem_live_bytes", self.mem_live_bytes),
            ("mem_peak_live_bytes", self.mem_peak_live_bytes),
            ("mem_reserved_bytes", self.mem_reserved_bytes),
            ("mem_idle_bytes", self.mem_idle_bytes),
            ("mem_allocations", self.mem_allocations),
            ("mem_frees", self.mem_frees),
            ("mem_reuses", self.mem_reuses),
            ("mem_retries", self.mem_retries),
            ("build_max_ns", self.build_max_ns),
            ("sealed_refusals", self.sealed_refusals),
            ("sealed_warnings", self.sealed_warnings),
            ("bundle_hits", self.bundle_hits),
            ("bundle_rejected", self.bundle_rejected),
            ("lease_waits", self.lease_waits),
            ("lease_timeouts", self.lease_timeouts),
            ("lease_fallbacks", self.lease_fallbacks),
            ("lease_stale_takeovers", self.lease_stale_takeovers),
            ("remote_hits", self.remote_hits),
            ("remote_misses", self.remote_misses),
            ("remote_rejected", self.remote_rejected),
            ("remote_stores", self.remote_stores),
            ("remote_breaker_trips", self.remote_breaker_trips),
            ("remote_lease_waits", self.remote_lease_waits),
            ("remote_lease_timeouts", self.remote_lease_timeouts),
        ]
    }

    /// The change from `earlier` to `self`. Peaks, the longest build and the memory byte counts
    /// are states, kept as they are now.
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
            build_max_ns: self.build_max_ns,
            sealed_refusals: self.sealed_refusals - earlier.sealed_refusals,
            sealed_warnings: self.sealed_warnings - earlier.sealed_warnings,
            bundle_hits: self.bundle_hits - earlier.bundle_hits,
            bundle_rejected: self.bundle_rejected - earlier.bundle_rejected,
            lease_waits: self.lease_waits - earlier.lease_waits,
            lease_timeouts: self.lease_timeouts - earlier.lease_timeouts,
            lease_fallbacks: self.lease_fallbacks - earlier.lease_fallbacks,
            lease_stale_takeovers: self.lease_stale_takeovers - earlier.lease_stale_takeovers,
            remote_hits: self.remote_hits - earlier.remote_hits,
            remote_misses: self.remote_misses - earlier.remote_misses,
            remote_rejected: self.remote_rejected - earlier.remote_rejected,
            remote_stores: self.remote_stores - earlier.remote_stores,
            remote_breaker_trips: self.remote_breaker_trips - earlier.remote_breaker_trips,
            remote_lease_waits: self.remote_lease_waits - earlier.remote_lease_waits,
            remote_lease_timeouts: self.remote_lease_timeouts - earlier.remote_lease_timeouts,
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

/// What [`prewarm`](crate::disk_cache::prewarm) did with the kernels it was given. Laid out as
/// the C `jb_prewarm_result`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PrewarmResult {
    /// Loaded into the module cache now.
    pub loaded: u64,
    /// In the module cache already.
    pub present: u64,
    /// Named by the manifest, but in neither the cache folder nor a bundle: compiled at their
    /// first use.
    pub missing: u64,
    /// For another device, compiler or library ABI: left alone.
    pub other: u64,
    /// Bad, or refused by the loader: each with a warning.
    pub failed: u64,
}

/// What [`prewarm_build`](crate::disk_cache::prewarm_build) did with a manifest's kernels. Laid
/// out as the C `jb_prewarm_build_result`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PrewarmBuildResult {
    /// Compiled by a worker process and stored in the cache folder.
    pub built: u64,
    /// In the module cache or the cache folder already: not built again.
    pub present: u64,
    /// Not built by a worker (a failed compile, a crash, a hang past the compile timeout, a
    /// kill): compiled in this process at its first use, with a warning each.
    pub failed: u64,
    /// A bad source record: never reaches a compiler; a warning each.
    pub refused: u64,
    /// Lines naming no source record: compiled at their first use.
    pub without_source: u64,
    /// Lines of another backend or architecture: left alone.
    pub other: u64,
    /// Worker processes started.
    pub workers: u64,
    /// The prewarm that followed the builds.
    pub load: PrewarmResult,
}

/// A background build's counters so far ([`PrewarmBuild::progress`](crate::disk_cache::PrewarmBuild::progress)).
/// Laid out as the C `jb_prewarm_build_progress`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PrewarmBuildProgress {
    /// Kernels given to workers (0 until the file is read).
    pub total: u64,
    /// Reported built by their worker.
    pub built: u64,
    /// Reported failed, or lost with their worker.
    pub failed: u64,
    /// Being built or waiting for a worker.
    pub pending: u64,
    /// 1 once the build and the load after it are over.
    pub done: u64,
}

impl PrewarmBuildProgress {
    /// Whether the build and the load after it are over.
    pub fn is_done(&self) -> bool {
        self.done != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_name_every_counter_once_in_order() {
        let mut c = Counters::default();
        // SAFETY: Counters is repr(C) of u64 fields only: a slice of them is its whole memory.
        let words = unsafe {
            std::slice::from_raw_parts_mut(
                &mut c as *mut Counters as *mut u64,
                std::mem::size_of::<Counters>() / 8,
            )
        };
        for (i, w) in words.iter_mut().enumerate() {
            *w = i as u64 + 1;
        }
        let fields = c.fields();
        assert_eq!(fields.len(), std::mem::size_of::<Counters>() / 8, "a counter is missing");
        for (i, (name, value)) in fields.iter().enumerate() {
            assert_eq!(*value, i as u64 + 1, "{name} is out of order");
        }
    }
}
