//! The process-global module cache, as far as a caller sees it: its counters and the switch of
//! the per-thread lookaside in front of it.

use crate::counters::Counters;
use crate::ffi;

impl Counters {
    /// The counters now.
    pub fn read() -> Counters {
        let mut counters = Counters::default();
        // SAFETY: `counters` is a valid out pointer of the size passed, laid out as jb_counters.
        let status =
            unsafe { ffi::jb_counters_get(&mut counters, std::mem::size_of::<Counters>()) };
        debug_assert_eq!(status, ffi::JB_OK, "the C library's jb_counters is smaller than ours");
        counters
    }

    /// Sets every counter to zero (for tests and benchmarks).
    pub fn reset() {
        // SAFETY: no arguments; resets atomics.
        unsafe { ffi::jb_counters_reset() }
    }
}

/// Turns the per-thread lookaside in front of the module cache on or off (on by default). Off,
/// every lookup follows the locked protocol: for benchmarks of that protocol.
pub fn set_lookaside_enabled(enabled: bool) {
    // SAFETY: sets an atomic flag.
    unsafe { ffi::jb_set_lookaside_enabled(i32::from(enabled)) };
}

/// Whether the per-thread lookaside is on.
pub fn lookaside_enabled() -> bool {
    // SAFETY: reads an atomic flag.
    unsafe { ffi::jb_lookaside_enabled() != 0 }
}

/// Forgets every remembered compile failure. A kernel whose source the compiler rejected is not
/// compiled again in this process: its later launches return the same `Compile` error at once,
/// without the compiler (timeouts, a killed compiler and other "not now" failures are never
/// remembered). After fixing what made the compiler fail (a header, `$CC`), call this so the
/// next launch of each such kernel compiles again.
pub fn forget_build_failures() {
    // SAFETY: no arguments; empties a list under its own lock.
    unsafe { ffi::jb_forget_build_failures() };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Counters` is the C `jb_counters` whole: the library takes exactly its size, not a word
    /// more (a field appended in C only, or in Rust only, fails here).
    #[test]
    fn counters_are_the_c_struct_size() {
        let mut words = [0u64; std::mem::size_of::<Counters>() / 8 + 1];
        let size = std::mem::size_of::<Counters>();
        // SAFETY: `words` is a valid out buffer of at least each size passed.
        let exact = unsafe { ffi::jb_counters_get(words.as_mut_ptr().cast(), size) };
        // SAFETY: as above; a size the library does not know is refused, nothing written.
        let larger = unsafe { ffi::jb_counters_get(words.as_mut_ptr().cast(), size + 8) };
        assert_eq!(exact, ffi::JB_OK);
        assert_ne!(larger, ffi::JB_OK, "the C jb_counters is larger than Counters");
    }
}
