//! Raw declarations of the remote tier's calls in cbridge/include/jitbridge.h (`ffi` re-exports
//! them).

use std::os::raw::{c_char, c_int};

/// `jb_remote_check`: what `jb_remote_cache_check` found.
#[repr(C)]
pub struct jb_remote_check {
    pub configured: c_int,
    pub read_only: c_int,
    pub client_loaded: c_int,
    pub reachable: c_int,
    pub pings: u64,
    pub round_trip_ms: f64,
    pub connect_ms: f64,
    pub url: [c_char; 512],
    pub why: [c_char; 768],
}

/// `jb_remote_transfer`: what an export to or an import from the remote tier did.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct jb_remote_transfer {
    pub stored: u64,
    pub skipped: u64,
    pub rejected: u64,
    pub missing: u64,
}

unsafe extern "C" {
    pub fn jb_remote_cache_set(url: *const c_char, key_file: *const c_char) -> c_int;
    pub fn jb_remote_cache_check(out: *mut jb_remote_check, pings: c_int) -> c_int;
    pub fn jb_remote_cache_export(out: *mut jb_remote_transfer, bundle: *const c_char) -> c_int;
    pub fn jb_remote_cache_import(out: *mut jb_remote_transfer, manifest: *const c_char) -> c_int;
}
