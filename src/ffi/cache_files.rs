//! Raw declarations of the cache folder's and bundles' calls and of coverage's types, in
//! cbridge/include/jitbridge.h (`ffi` re-exports them all).

use std::os::raw::{c_char, c_int, c_void};

pub const JB_COVERAGE_MEMORY: c_int = 1;
pub const JB_COVERAGE_DISK: c_int = 2;
pub const JB_COVERAGE_BUNDLE: c_int = 3;
pub const JB_COVERAGE_COMPILE: c_int = 4;
pub const JB_COVERAGE_OTHER: c_int = 5;

/// `jb_coverage_kernel`: one kernel of a manifest, its strings valid during the callback only.
#[repr(C)]
pub struct jb_coverage_kernel {
    pub struct_size: usize,
    pub source: c_int,
    pub key: *const c_char,
    pub backend: *const c_char,
    pub target: *const c_char,
    pub module: *const c_char,
    pub entries: *const c_char,
    pub why: *const c_char,
    pub device: *const c_char,
}

/// `jb_coverage_fn`: called with the user data and the kernel.
pub type jb_coverage_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, kernel: *const jb_coverage_kernel)>;

/// `jb_coverage_result`: kernels by where a launch would get them.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct jb_coverage_result {
    pub memory: u64,
    pub disk: u64,
    pub bundle: u64,
    pub compile: u64,
    pub other: u64,
}

unsafe extern "C" {
    pub fn jb_disk_cache_dir(out: *mut *const c_char) -> c_int;
    pub fn jb_disk_cache_state() -> *const c_char;
    pub fn jb_disk_cache_stats(entries: *mut u64, bytes: *mut u64) -> c_int;
    pub fn jb_disk_cache_prune(max_bytes: u64, removed: *mut u64) -> c_int;
    pub fn jb_disk_cache_verify(valid: *mut u64, invalid: *mut u64) -> c_int;
    pub fn jb_disk_cache_check(
        valid: *mut u64,
        invalid: *mut u64,
        fix: c_int,
        report: Option<unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char)>,
        user_data: *mut c_void,
    ) -> c_int;

    pub fn jb_disk_cache_export(
        exported: *mut u64,
        skipped: *mut u64,
        path: *const c_char,
        manifest: *const c_char,
    ) -> c_int;
    pub fn jb_disk_cache_import(
        imported: *mut u64,
        skipped: *mut u64,
        path: *const c_char,
    ) -> c_int;
    pub fn jb_disk_cache_export_sources(
        exported: *mut u64,
        skipped: *mut u64,
        records: *mut u64,
        path: *const c_char,
        manifest: *const c_char,
    ) -> c_int;
    pub fn jb_disk_cache_import_sources(
        imported: *mut u64,
        skipped: *mut u64,
        records: *mut u64,
        refused: *mut u64,
        path: *const c_char,
    ) -> c_int;
    pub fn jb_disk_cache_add_bundle(path: *const c_char) -> c_int;
    pub fn jb_coverage_source_name(source: c_int) -> *const c_char;
}
