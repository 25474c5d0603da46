//! Raw declarations of cbridge/include/jitbridge.h and jitbridge_sys.h. Everything here is
//! unsafe to call; the safe types of this crate are the supported way in. This module names no
//! other module of the crate but `counters`, a leaf of plain data: the raw layer sits below
//! everything else.
#![allow(non_camel_case_types, missing_docs)]

mod cache_files;
pub use cache_files::*;
mod farm;
pub use farm::*;
mod remote;
pub use remote::*;
mod source_modules;
pub use source_modules::*;

use std::os::raw::{c_char, c_int, c_void};

#[repr(C)]
pub struct jb_device {
    _private: [u8; 0],
}
#[repr(C)]
pub struct jb_stream {
    _private: [u8; 0],
}
#[repr(C)]
pub struct jb_array {
    _private: [u8; 0],
}
#[repr(C)]
pub struct jb_custom_kernel {
    _private: [u8; 0],
}
#[repr(C)]
pub struct jb_graph {
    _private: [u8; 0],
}
#[repr(C)]
pub struct jb_bench_raw_launcher {
    _private: [u8; 0],
}

pub const JB_ARG_IN: c_int = 1;
pub const JB_ARG_OUT: c_int = 2;
pub const JB_ARG_SCALAR: c_int = 3;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct jb_arg {
    pub array: *mut jb_array,
    pub written: c_int,
    pub scalar: jb_scalar,
}

pub const JB_OK: c_int = 0;
pub const JB_DTYPE_INVALID: c_int = -1;
pub const JB_DEVICE_CPU: c_int = 0;
pub const JB_DEVICE_GPU: c_int = 1;
pub const JB_F32: c_int = 0;
pub const JB_I32: c_int = 1;
pub const JB_F16: c_int = 2;
pub const JB_BF16: c_int = 3;
pub const JB_F64: c_int = 4;
pub const JB_I8: c_int = 5;
pub const JB_U8: c_int = 6;
pub const JB_U32: c_int = 7;
pub const JB_I64: c_int = 8;
pub const JB_BOOL: c_int = 9;
pub const JB_I16: c_int = 10;
pub const JB_U16: c_int = 11;
pub const JB_U64: c_int = 12;
pub const JB_PARAM_INT: c_int = 0;
pub const JB_PARAM_BOOL: c_int = 1;
pub const JB_PARAM_DTYPE: c_int = 2;
pub const JB_COMPILE_FAST_MATH: u32 = 1;
pub const JB_COMPILE_LINE_INFO: u32 = 2;
pub const JB_COMPILE_BOUNDS_CHECKS: u32 = 4;

/// `jb_counters` is laid out exactly as `Counters`, a leaf module of plain data.
pub type jb_counters = crate::counters::Counters;
/// `jb_memory_stats` is laid out exactly as `MemoryStats`.
pub type jb_memory_stats = crate::counters::MemoryStats;
/// Laid out as `jb_prewarm_result`; the crate's own type, re-exported by `disk_cache`.
pub type jb_prewarm_result = crate::counters::PrewarmResult;

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct jb_kernel_config {
    pub threads_per_block: u32,
    pub shared_memory_bytes: u32,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct jb_kernel_attributes {
    pub registers: c_int,
    pub max_threads_per_block: c_int,
    pub static_shared_bytes: usize,
    pub local_bytes: usize,
}

pub type jb_configure_hook = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        device: *const jb_device,
        config: *mut jb_kernel_config,
    ) -> c_int,
>;

#[repr(C)]
pub struct jb_kernel_spec {
    pub struct_size: usize,
    pub name: *const c_char,
    pub input_names: *const *const c_char,
    pub input_dtypes: *const c_int,
    pub num_inputs: usize,
    pub output_names: *const *const c_char,
    pub output_dtypes: *const c_int,
    pub num_outputs: usize,
    pub body: *const c_char,
    pub header: *const c_char,
    pub configure: jb_configure_hook,
    pub configure_user_data: *mut c_void,
    pub scalar_names: *const *const c_char,
    pub scalar_dtypes: *const c_int,
    pub num_scalars: usize,
    pub params: *const jb_kernel_param,
    pub num_params: usize,
    pub compile_flags: u32,
    pub defines: *const *const c_char,
    pub num_defines: usize,
    pub output_inits: *const jb_scalar,
    pub compiler_options: *const *const c_char,
    pub num_compiler_options: usize,
    pub include_dirs: *const *const c_char,
    pub num_include_dirs: usize,
    pub target_arch: *const c_char,
}

#[repr(C)]
pub struct jb_kernel_param {
    pub name: *const c_char,
    pub kind: c_int,
    pub value: i64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union jb_scalar_value {
    pub f32: f32,
    pub f64: f64,
    pub i8: i8,
    pub u8: u8,
    pub i32: i32,
    pub u32: u32,
    pub i64: i64,
    pub bits16: u16,
    pub i16: i16,
    pub u64: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct jb_scalar {
    pub dtype: c_int,
    pub value: jb_scalar_value,
}

impl jb_scalar {
    /// No value: JB_DTYPE_INVALID (an output without an initial value).
    pub fn none() -> jb_scalar {
        jb_scalar { dtype: JB_DTYPE_INVALID, value: jb_scalar_value { i64: 0 } }
    }
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct jb_launch_shape {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub total_threads: u64,
}

#[repr(C)]
pub struct jb_launch {
    pub struct_size: usize,
    pub device: *mut jb_device,
    pub stream: *mut jb_stream,
    pub inputs: *const *mut jb_array,
    pub num_inputs: usize,
    pub scalars: *const jb_scalar,
    pub num_scalars: usize,
    pub output_shapes: *const *const i64,
    pub output_ndims: *const c_int,
    pub in_place: *const *mut jb_array,
    pub shape: jb_launch_shape,
}

/// `jb_bench_compile_cost`: what one compile cost with a set of options, and what it made.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct jb_bench_compile_cost {
    pub compile_ns: f64,
    pub load_ns: f64,
    pub code_bytes: usize,
    pub code_sha256: [u8; 32],
}

/// `jb_driver_call_count`: one driver call and how many times the calling thread made it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct jb_driver_call_count {
    pub name: *const c_char,
    pub count: u64,
}

/// `jb_bench_cold_steps`: where one cold first launch of the probe spent its time, in
/// nanoseconds.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct jb_bench_cold_steps {
    pub compile_ns: f64,
    pub load_ns: f64,
    pub get_function_ns: f64,
    pub disk_store_ns: f64,
    pub configure_ns: f64,
    pub stage_ns: f64,
    pub launch_ns: f64,
    pub record_ns: f64,
    pub sync_ns: f64,
    pub total_ns: f64,
    /// The compiler alone, right after, on the very same source and options: NVRTC answers it
    /// from its compute cache, so it is no baseline for a first compile.
    pub compile_again_ns: f64,
}

/// `jb_cache_event`: one slow-path event, its strings valid during the callback only.
#[repr(C)]
pub struct jb_cache_event {
    pub struct_size: usize,
    pub kind: c_int,
    pub name: *const c_char,
    pub key: *const c_char,
    pub content_key: *const c_char,
    pub device: *mut jb_device,
    pub thread_id: u64,
    pub tag: *const c_char,
    pub time_ns: u64,
    pub duration_ns: u64,
    pub status: c_int,
    pub message: *const c_char,
}

/// `jb_cache_event_fn`: called with the user data and the event.
pub type jb_cache_event_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, event: *const jb_cache_event)>;

pub const JB_SEAL_OFF: c_int = 0;
pub const JB_SEAL_WARN: c_int = 1;
pub const JB_SEAL_ERROR: c_int = 2;

/// `jb_log_fn`: called with the user data, a `jb_log_level` and the message.
pub type jb_log_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, level: c_int, message: *const c_char)>;

unsafe extern "C" {
    pub fn jb_status_name(status: c_int) -> *const c_char;
    pub fn jb_last_error_message() -> *const c_char;
    pub fn jb_version() -> *const c_char;
    pub fn jb_abi_version() -> c_int;
    pub fn jb_set_log_callback(callback: jb_log_fn, user_data: *mut c_void) -> c_int;
    pub fn jb_set_event_callback(callback: jb_cache_event_fn, user_data: *mut c_void) -> c_int;
    pub fn jb_exchange_log_callback(
        old_callback: *mut jb_log_fn,
        old_user_data: *mut *mut c_void,
        callback: jb_log_fn,
        user_data: *mut c_void,
    ) -> c_int;
    pub fn jb_exchange_event_callback(
        old_callback: *mut jb_cache_event_fn,
        old_user_data: *mut *mut c_void,
        callback: jb_cache_event_fn,
        user_data: *mut c_void,
    ) -> c_int;
    pub fn jb_cache_event_kind_name(kind: c_int) -> *const c_char;
    pub fn jb_set_thread_tag(tag: *const c_char) -> c_int;
    pub fn jb_thread_tag() -> *const c_char;
    pub fn jb_seal(mode: c_int) -> c_int;
    pub fn jb_seal_mode_get() -> c_int;

    pub fn jb_gpu_backend_name() -> *const c_char;
    pub fn jb_device_count(out: *mut c_int, kind: c_int) -> c_int;
    pub fn jb_device_get(out: *mut *mut jb_device, kind: c_int, ordinal: c_int) -> c_int;
    pub fn jb_device_lookup(out: *mut *mut jb_device, name: *const c_char) -> c_int;
    pub fn jb_backend_device_count(out: *mut c_int, backend: *const c_char) -> c_int;
    pub fn jb_device_default(out: *mut *mut jb_device) -> c_int;
    pub fn jb_device_index(device: *const jb_device) -> c_int;
    pub fn jb_device_ordinal(device: *const jb_device) -> c_int;
    pub fn jb_device_get_kind(device: *const jb_device) -> c_int;
    pub fn jb_device_name(device: *const jb_device) -> *const c_char;
    pub fn jb_device_arch(device: *const jb_device) -> *const c_char;
    pub fn jb_device_backend_name(device: *const jb_device) -> *const c_char;
    pub fn jb_device_total_memory(device: *const jb_device) -> u64;
    pub fn jb_device_trim(out_freed: *mut u64, device: *mut jb_device) -> c_int;
    pub fn jb_device_set_idle_cap(device: *mut jb_device, bytes: u64) -> c_int;
    pub fn jb_device_idle_cap(device: *const jb_device) -> u64;
    pub fn jb_device_memory_stats(
        out: *mut jb_memory_stats,
        out_size: usize,
        device: *mut jb_device,
    ) -> c_int;
    pub fn jb_cpu_compiler() -> *const c_char;

    pub fn jb_stream_new(out: *mut *mut jb_stream, device: *mut jb_device) -> c_int;
    pub fn jb_stream_new_with_priority(
        out: *mut *mut jb_stream,
        device: *mut jb_device,
        priority: c_int,
    ) -> c_int;
    pub fn jb_device_max_stream_priority(device: *const jb_device) -> c_int;
    pub fn jb_stream_priority(out: *mut c_int, stream: *const jb_stream) -> c_int;
    pub fn jb_stream_installations(stream: *const jb_stream) -> c_int;

    pub fn jb_graph_begin_capture(stream: *mut jb_stream) -> c_int;
    pub fn jb_graph_end_capture(out: *mut *mut jb_graph, stream: *mut jb_stream) -> c_int;
    pub fn jb_graph_launch(graph: *mut jb_graph, stream: *mut jb_stream) -> c_int;
    pub fn jb_graph_launch_count(graph: *const jb_graph) -> usize;
    pub fn jb_graph_bounds_checked(graph: *const jb_graph) -> c_int;
    pub fn jb_graph_set_scalar(
        graph: *mut jb_graph,
        launch: usize,
        scalar: usize,
        value: *const jb_scalar,
    ) -> c_int;
    pub fn jb_graph_free(graph: *mut jb_graph);
    pub fn jb_stream_free(stream: *mut jb_stream);
    pub fn jb_stream_synchronize(stream: *mut jb_stream) -> c_int;
    pub fn jb_stream_device(stream: *const jb_stream) -> *mut jb_device;
    pub fn jb_new_thread_local_generation_stream(
        out: *mut *mut jb_stream,
        device: *mut jb_device,
    ) -> c_int;
    pub fn jb_install_thread_local_default_stream(stream: *mut jb_stream) -> c_int;
    pub fn jb_uninstall_thread_local_default_stream(stream: *mut jb_stream) -> c_int;
    pub fn jb_thread_local_default_stream(
        out: *mut *mut jb_stream,
        device: *mut jb_device,
    ) -> c_int;
    pub fn jb_thread_local_default_stream_retain(
        out: *mut *mut jb_stream,
        device: *mut jb_device,
    ) -> c_int;

    pub fn jb_array_from_host(
        out: *mut *mut jb_array,
        device: *mut jb_device,
        dtype: c_int,
        shape: *const i64,
        ndim: c_int,
        data: *const c_void,
    ) -> c_int;
    pub fn jb_array_arange(
        out: *mut *mut jb_array,
        device: *mut jb_device,
        n: i64,
        dtype: c_int,
    ) -> c_int;
    pub fn jb_array_zeros(
        out: *mut *mut jb_array,
        device: *mut jb_device,
        dtype: c_int,
        shape: *const i64,
        ndim: c_int,
    ) -> c_int;
    pub fn jb_array_full(
        out: *mut *mut jb_array,
        device: *mut jb_device,
        shape: *const i64,
        ndim: c_int,
        value: *const jb_scalar,
    ) -> c_int;
    pub fn jb_array_free(array: *mut jb_array);
    pub fn jb_array_eval(array: *mut jb_array) -> c_int;
    pub fn jb_array_read(array: *const jb_array, dst: *mut c_void, dst_bytes: usize) -> c_int;
    pub fn jb_array_device(array: *const jb_array) -> *mut jb_device;
    pub fn jb_array_dtype(array: *const jb_array) -> c_int;
    pub fn jb_array_ndim(array: *const jb_array) -> c_int;
    pub fn jb_array_shape(array: *const jb_array) -> *const i64;
    pub fn jb_array_size(array: *const jb_array) -> i64;

    pub fn jb_custom_kernel_new(
        out: *mut *mut jb_custom_kernel,
        spec: *const jb_kernel_spec,
    ) -> c_int;
    pub fn jb_custom_kernel_free(kernel: *mut jb_custom_kernel);
    pub fn jb_custom_kernel_module_name(kernel: *const jb_custom_kernel) -> *const c_char;
    pub fn jb_custom_kernel_bounds_checked(kernel: *const jb_custom_kernel) -> c_int;
    pub fn jb_custom_kernel_run(
        outputs: *mut *mut jb_array,
        kernel: *mut jb_custom_kernel,
        launch: *const jb_launch,
    ) -> c_int;
    pub fn jb_custom_kernel_source(
        kernel: *const jb_custom_kernel,
        backend: *const c_char,
    ) -> *const c_char;
    pub fn jb_custom_kernel_launch(
        outputs: *mut *mut jb_array,
        kernel: *mut jb_custom_kernel,
        inputs: *const *mut jb_array,
        num_inputs: usize,
        output_shapes: *const *const i64,
        output_ndims: *const c_int,
        shape: *const jb_launch_shape,
    ) -> c_int;

    pub fn jb_custom_kernel_launch_on(
        outputs: *mut *mut jb_array,
        kernel: *mut jb_custom_kernel,
        stream: *mut jb_stream,
        inputs: *const *mut jb_array,
        num_inputs: usize,
        scalars: *const jb_scalar,
        num_scalars: usize,
        output_shapes: *const *const i64,
        output_ndims: *const c_int,
        shape: *const jb_launch_shape,
    ) -> c_int;
    pub fn jb_source_module_new(
        out: *mut *mut jb_source_module,
        spec: *const jb_source_module_spec,
    ) -> c_int;
    pub fn jb_source_module_free(module: *mut jb_source_module);
    pub fn jb_source_module_name(module: *const jb_source_module) -> *const c_char;
    pub fn jb_source_module_prepare(module: *mut jb_source_module, device: *mut jb_device)
    -> c_int;
    pub fn jb_source_module_launch(
        module: *mut jb_source_module,
        stream: *mut jb_stream,
        entry: *const c_char,
        args: *const jb_arg,
        num_args: usize,
        shape: *const jb_launch_shape,
    ) -> c_int;
    pub fn jb_source_module_global_size(
        module: *mut jb_source_module,
        device: *mut jb_device,
        name: *const c_char,
        out_size: *mut usize,
    ) -> c_int;
    pub fn jb_source_module_global_write(
        module: *mut jb_source_module,
        device: *mut jb_device,
        stream: *mut jb_stream,
        name: *const c_char,
        offset: usize,
        src: *const c_void,
        bytes: usize,
    ) -> c_int;
    pub fn jb_source_module_global_read(
        module: *mut jb_source_module,
        device: *mut jb_device,
        stream: *mut jb_stream,
        name: *const c_char,
        offset: usize,
        dst: *mut c_void,
        bytes: usize,
    ) -> c_int;
    pub fn jb_f32_to_f16_bits(value: f32) -> u16;
    pub fn jb_f16_bits_to_f32(bits: u16) -> f32;
    pub fn jb_f32_to_bf16_bits(value: f32) -> u16;
    pub fn jb_bf16_bits_to_f32(bits: u16) -> f32;

    pub fn jb_jit_race_probe_array(
        out: *mut *mut jb_array,
        input: *mut jb_array,
        variant: c_int,
    ) -> c_int;
    pub fn jb_rocm_jit_race_probe_array(
        out: *mut *mut jb_array,
        input: *mut jb_array,
        variant: c_int,
    ) -> c_int;

    pub fn jb_race_probe_body() -> *const c_char;
    pub fn jb_custom_kernel_prepare(kernel: *mut jb_custom_kernel, device: *mut jb_device)
    -> c_int;
    pub fn jb_custom_kernel_attributes(
        kernel: *mut jb_custom_kernel,
        device: *mut jb_device,
        out: *mut jb_kernel_attributes,
    ) -> c_int;
    pub fn jb_source_module_attributes(
        module: *mut jb_source_module,
        device: *mut jb_device,
        entry: *const c_char,
        out: *mut jb_kernel_attributes,
    ) -> c_int;
    pub fn jb_set_lookaside_enabled(enabled: c_int) -> c_int;
    pub fn jb_lookaside_enabled() -> c_int;
    pub fn jb_bench_raw_probe_launches(
        out_ns_per_launch: *mut f64,
        input: *mut jb_array,
        variant: c_int,
        launches: c_int,
    ) -> c_int;
    pub fn jb_bench_compile_only(
        out_ns: *mut f64,
        kernel: *mut jb_custom_kernel,
        device: *mut jb_device,
    ) -> c_int;
    pub fn jb_bench_compile_with(
        out: *mut jb_bench_compile_cost,
        kernel: *mut jb_custom_kernel,
        backend: *const c_char,
        arch: *const c_char,
        options: *const *const c_char,
        num_options: usize,
        load_on: *mut jb_device,
    ) -> c_int;
    pub fn jb_bench_cold_probe_steps(
        out: *mut jb_bench_cold_steps,
        input: *mut jb_array,
        variant: c_int,
    ) -> c_int;
    pub fn jb_bench_raw_launcher_new(
        out: *mut *mut jb_bench_raw_launcher,
        kernel: *mut jb_custom_kernel,
        inputs: *const *mut jb_array,
        num_inputs: usize,
        scalars: *const jb_scalar,
        num_scalars: usize,
        output_shapes: *const *const i64,
        output_ndims: *const c_int,
        shape: *const jb_launch_shape,
    ) -> c_int;
    pub fn jb_bench_raw_launcher_step(
        launcher: *mut jb_bench_raw_launcher,
        scalars: *const jb_scalar,
        num_scalars: usize,
        out_launch_ns: *mut u64,
        out_wait_ns: *mut u64,
    ) -> c_int;
    pub fn jb_bench_raw_launcher_read(
        launcher: *const jb_bench_raw_launcher,
        output: usize,
        dst: *mut c_void,
        dst_bytes: usize,
    ) -> c_int;
    pub fn jb_bench_raw_launcher_free(launcher: *mut jb_bench_raw_launcher);

    pub fn jb_cache_coverage(
        out: *mut jb_coverage_result,
        device: *mut jb_device,
        manifest: *const c_char,
        callback: jb_coverage_fn,
        user_data: *mut c_void,
    ) -> c_int;
    pub fn jb_prewarm(
        out: *mut jb_prewarm_result,
        device: *mut jb_device,
        path: *const c_char,
    ) -> c_int;
    pub fn jb_prewarm_build(
        out: *mut jb_prewarm_build_result,
        device: *mut jb_device,
        path: *const c_char,
        jobs: std::ffi::c_uint,
        worker: *const c_char,
    ) -> c_int;
    pub fn jb_prewarm_build_start(
        out: *mut *mut jb_prewarm_build_job,
        device: *mut jb_device,
        path: *const c_char,
        jobs: std::ffi::c_uint,
        worker: *const c_char,
    ) -> c_int;
    pub fn jb_manifest_sources_check(
        checked: *mut u64,
        keyed: *mut u64,
        path: *const c_char,
    ) -> c_int;

    pub fn jb_counters_get(out: *mut jb_counters, out_size: usize) -> c_int;
    pub fn jb_counters_reset();
    pub fn jb_forget_build_failures() -> c_int;
    pub fn jb_removed_locks() -> c_int;
    pub fn jb_driver_call_counting(device: *mut jb_device, enabled: c_int) -> c_int;
    pub fn jb_thread_driver_calls(
        device: *mut jb_device,
        out: *mut jb_driver_call_count,
        capacity: usize,
        out_count: *mut usize,
        reset: c_int,
    ) -> c_int;
}
