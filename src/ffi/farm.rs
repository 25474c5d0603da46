//! Raw declarations of the compile farm's types and of its background job's calls in
//! cbridge/include/jitbridge.h (`ffi` re-exports them; the calls that take a device are there).

use std::os::raw::{c_char, c_int, c_uint};

#[repr(C)]
pub struct jb_prewarm_build_job {
    _private: [u8; 0],
}
/// Laid out as `jb_prewarm_build_result`; re-exported by `disk_cache`.
pub type jb_prewarm_build_result = crate::counters::PrewarmBuildResult;
/// Laid out as `jb_prewarm_build_progress`; re-exported by `disk_cache`.
pub type jb_prewarm_build_progress = crate::counters::PrewarmBuildProgress;

unsafe extern "C" {
    pub fn jb_prewarm_build_poll(
        job: *const jb_prewarm_build_job,
        out: *mut jb_prewarm_build_progress,
    ) -> c_int;
    pub fn jb_prewarm_build_wait(
        job: *mut jb_prewarm_build_job,
        out: *mut jb_prewarm_build_result,
    ) -> c_int;
    pub fn jb_prewarm_build_detach(job: *mut jb_prewarm_build_job);
    pub fn jb_usable_processors() -> c_uint;
    pub fn jb_prewarm_build_worker_main(argc: c_int, argv: *mut *mut c_char) -> c_int;
}
