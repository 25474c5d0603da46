//! The disk cache of compiled code: a new process loads what an earlier one compiled.
//!
//! Folder: `$JITBRIDGE_CACHE_DIR`, else `$XDG_CACHE_HOME/jitbridge`, else
//! `~/.cache/jitbridge`, created 0700; `JITBRIDGE_DISK_CACHE=0` turns it off. A folder owned by
//! another user or writable by group or others is refused, and a read-only or full disk turns
//! the cache off, each with one warning; kernels still run.

use crate::error::{Error, c_str, check};
use crate::ffi;

/// The folder ("" when none could be chosen).
pub fn dir() -> String {
    let mut ptr = std::ptr::null();
    // SAFETY: valid out pointer; the string lives for the process.
    match check(unsafe { ffi::jb_disk_cache_dir(&mut ptr) }) {
        Ok(()) => c_str(ptr),
        Err(_) => String::new(),
    }
}

/// "on", or why the cache is off.
pub fn state() -> String {
    // SAFETY: returns a library-owned string, copied at once.
    c_str(unsafe { ffi::jb_disk_cache_state() })
}

/// Entries and their total bytes.
pub fn stats() -> Result<(u64, u64), Error> {
    let (mut entries, mut bytes) = (0, 0);
    // SAFETY: valid out pointers.
    check(unsafe { ffi::jb_disk_cache_stats(&mut entries, &mut bytes) })?;
    Ok((entries, bytes))
}

/// Removes entries, oldest first, until at most `max_bytes` remain; returns how many went.
pub fn prune(max_bytes: u64) -> Result<u64, Error> {
    let mut removed = 0;
    // SAFETY: valid out pointer.
    check(unsafe { ffi::jb_disk_cache_prune(max_bytes, &mut removed) })?;
    Ok(removed)
}

/// Reads every entry: (well-formed, malformed).
pub fn verify() -> Result<(u64, u64), Error> {
    let (mut valid, mut invalid) = (0, 0);
    // SAFETY: valid out pointers.
    check(unsafe { ffi::jb_disk_cache_verify(&mut valid, &mut invalid) })?;
    Ok((valid, invalid))
}
