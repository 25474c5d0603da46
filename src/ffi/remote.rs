//! Raw declarations of the remote tier's calls in cbridge/include/jitbridge.h (`ffi` re-exports
//! them).

use std::os::raw::{c_char, c_int};

unsafe extern "C" {
    pub fn jb_remote_cache_set(url: *const c_char, key_file: *const c_char) -> c_int;
}
