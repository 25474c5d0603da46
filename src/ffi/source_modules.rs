//! Raw declarations of whole-source modules' types, in cbridge/include/jitbridge.h
//! (`ffi` re-exports them all).

use std::os::raw::{c_char, c_int, c_void};

#[repr(C)]
pub struct jb_source_module {
    _private: [u8; 0],
}

#[repr(C)]
pub struct jb_source_module_spec {
    pub struct_size: usize,
    pub name: *const c_char,
    pub cpu_source: *const c_char,
    pub gpu_source: *const c_char,
    pub entry_names: *const *const c_char,
    pub num_entries: usize,
    pub compile_flags: u32,
    pub defines: *const *const c_char,
    pub num_defines: usize,
    pub dtypes: c_int,
    pub signatures: *const jb_entry_signature,
    pub compiler_options: *const *const c_char,
    pub num_compiler_options: usize,
    pub include_dirs: *const *const c_char,
    pub num_include_dirs: usize,
    pub target_arch: *const c_char,
    pub cpu_code: jb_module_code,
    pub gpu_code: jb_module_code,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct jb_module_code {
    pub bytes: *const c_void,
    pub size: usize,
    pub path: *const c_char,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct jb_arg_decl {
    pub role: c_int,
    pub dtype: c_int,
}

#[repr(C)]
pub struct jb_entry_signature {
    pub declared: c_int,
    pub args: *const jb_arg_decl,
    pub num_args: usize,
}
