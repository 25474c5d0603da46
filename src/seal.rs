//! Sealed mode: once warm-up is over, a server forbids compiles.

use crate::error::{Error, check};
use crate::ffi;

/// What a sealed process does when a module would compile (it is in neither memory, the cache
/// folder nor a bundle).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SealMode {
    /// Not sealed: compile.
    Off,
    /// Warn once per module and device (a log warning and a seal violation event), then
    /// compile.
    Warn,
    /// Fail with [`ErrorCode::Sealed`](crate::ErrorCode::Sealed) naming the kernel; no compiler
    /// starts. Nothing is remembered: unsealed, the next launch compiles.
    Error,
}

/// Seals the process (or unseals it with [`SealMode::Off`]). Modules in memory, in the cache
/// folder or in a bundle still load. `JITBRIDGE_SEAL=warn|error|off`, read once at the first
/// use of the seal, seals worker processes from the start; this overrides it. Only an unset
/// variable or exactly `off`, `0`, `false` or `no` leaves the process unsealed: any other value
/// (empty, a stray space, a typo) seals it to refuse, with one warning.
///
/// ```
/// use jitbridge::SealMode;
/// jitbridge::seal(SealMode::Warn)?;
/// assert_eq!(jitbridge::seal_mode(), SealMode::Warn);
/// jitbridge::seal(SealMode::Off)?;
/// # Ok::<(), jitbridge::Error>(())
/// ```
pub fn seal(mode: SealMode) -> Result<(), Error> {
    let raw = match mode {
        SealMode::Off => ffi::JB_SEAL_OFF,
        SealMode::Warn => ffi::JB_SEAL_WARN,
        SealMode::Error => ffi::JB_SEAL_ERROR,
    };
    // SAFETY: takes any int; refuses what is not a mode.
    check(unsafe { ffi::jb_seal(raw) })
}

/// The process's seal mode now.
pub fn seal_mode() -> SealMode {
    // SAFETY: no arguments.
    match unsafe { ffi::jb_seal_mode_get() } {
        ffi::JB_SEAL_OFF => SealMode::Off,
        ffi::JB_SEAL_WARN => SealMode::Warn,
        // A mode this crate does not know is reported as the strictest: a seal fails closed.
        _ => SealMode::Error,
    }
}
