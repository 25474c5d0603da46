/*
 * jitbridge.h - the public header of the jitbridge C library. Tools, tests and benchmarks also
 * have jitbridge_sys.h, which declares their entry points (not for production paths).
 *
 * jitbridge compiles kernels at run time, keeps the compiled modules in a process-global cache
 * that many threads may use at once, and launches them on per-thread streams.
 *
 * Threading: every function may be called from any thread at any time unless its comment says
 * otherwise. The module cache, the event pool and the counters lock internally; a jb_array or
 * jb_stream may be used by several threads, but freeing one while another thread still calls a
 * function on it is the caller's bug.
 *
 * Conventions: functions return a jb_status (JB_OK is 0); results come back through an `out`
 * parameter, which is first and is set to NULL when the call fails. Every object that is created
 * has a `_free` that accepts NULL. After a failure, jb_last_error_message() describes it. A call
 * refused for a bad argument changes no cache, counter or object; a build that fails counts one
 * build failure and inserts nothing.
 */
#ifndef JITBRIDGE_H
#define JITBRIDGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define JB_API __attribute__((visibility("default")))
#else
#define JB_API
#endif

/*
 * Versions. JB_VERSION_* is the release (the Rust crate's version; semantic versioning).
 * JB_ABI_VERSION is the shared library's: libjitbridge.so.<JB_ABI_VERSION> is its SONAME. It goes
 * up when a change breaks a program built against an older header: a function removed or its
 * signature changed, a struct's existing fields moved or retyped, an enum value renumbered, or a
 * documented behaviour changed. Additions (new functions, new enum values, fields appended to a
 * struct read through a size argument, as jb_counters) keep it. The header's macros say what a
 * program was built against; jb_version() and jb_abi_version() say what it runs with.
 */
#define JB_VERSION_MAJOR 0
#define JB_VERSION_MINOR 1
#define JB_VERSION_PATCH 0
#define JB_VERSION_STRING "0.1.0"
#define JB_ABI_VERSION 2

/* Status codes: stable numbers, one table. */
#define JB_STATUS_TABLE(X)                                                                         \
    X(JB_OK, 0, "ok")                                                                              \
    X(JB_ERR_INVALID_ARGUMENT, 1, "invalid argument")                                              \
    X(JB_ERR_OUT_OF_MEMORY, 2, "out of memory")                                                    \
    X(JB_ERR_UNSUPPORTED, 3, "unsupported")                                                        \
    X(JB_ERR_NO_DEVICE, 4, "no such device")                                                       \
    X(JB_ERR_COMPILE, 5, "kernel compilation failed")                                              \
    X(JB_ERR_LOAD, 6, "module load failed")                                                        \
    X(JB_ERR_LAUNCH, 7, "kernel launch failed")                                                    \
    X(JB_ERR_BACKEND, 8, "backend call failed")                                                    \
    X(JB_ERR_SYSTEM, 9, "operating system call failed")                                            \
    X(JB_ERR_SHAPE, 10, "shape or dtype mismatch")                                               \
    X(JB_ERR_BOUNDS, 11, "index out of bounds")                                                  \
    X(JB_ERR_SEALED, 12, "compiling is sealed off")

typedef enum jb_status {
#define JB_STATUS_ENUM_(name, value, text) name = value,
    JB_STATUS_TABLE(JB_STATUS_ENUM_)
#undef JB_STATUS_ENUM_
} jb_status;

/* The constant name of a status ("JB_ERR_COMPILE"); "JB_UNKNOWN_STATUS" for other values. */
JB_API const char *jb_status_name(int status);

/*
 * The message of the last failed call on this thread. Never NULL; "" if nothing failed yet.
 * Owned by the library; valid until the next jitbridge call on this thread.
 */
JB_API const char *jb_last_error_message(void);
/* The status of the last failed call on this thread (JB_OK if none). */
JB_API int jb_last_error_status(void);

/* The loaded library's release, "MAJOR.MINOR.PATCH": a static string. */
JB_API const char *jb_version(void);
/* The JB_ABI_VERSION the library was built with: a caller compares it with the one it was
 * compiled against to catch a mismatched library at run time. */
JB_API int jb_abi_version(void);

/*
 * Warnings (the disk cache turned off, a cache folder refused): the library never fails a call
 * for them, and by default prints each on stderr as "jitbridge: warning: <message>".
 * jb_set_log_callback(fn, user_data) sends each to fn(user_data, level, message) instead, with
 * `message` valid only during the call; fn NULL goes back to stderr. fn may be called from any
 * thread, from several at once, so it must be thread-safe. jb_set_log_callback waits for calls
 * in progress to return, so that once it returns the previous user_data is no longer used. From
 * inside fn, jb_set_log_callback fails (JB_ERR_INVALID_ARGUMENT) and a warning fn causes goes to
 * stderr. fn may call the library, fork, and wait for threads that do either: it never runs
 * under a library lock, and the calling thread's jb_last_error_message is kept across it (but a
 * thread it waits for must not replace the callback: that waits for fn to return). May be
 * called from any thread.
 */
typedef enum jb_log_level {
    JB_LOG_WARNING = 1,
} jb_log_level;
typedef void (*jb_log_fn)(void *user_data, jb_log_level level, const char *message);
JB_API jb_status jb_set_log_callback(jb_log_fn fn, void *user_data);
/* jb_set_log_callback, and the callback it replaced into *old_fn and *old_user_data (NULL, NULL
 * when none or on an error; each may be NULL): that callback has returned from every call and
 * is not called again, so its user_data may be freed now. A wrapper that allocates user_data
 * frees what this gives back, and so needs no lock of its own around the exchange (a lock held
 * across it would be held while calls in progress end, and stay held in a child forked then). */
JB_API jb_status jb_exchange_log_callback(jb_log_fn *old_fn, void **old_user_data, jb_log_fn fn,
                                          void *user_data);

/* ---------------------------------------------------------------------------------------------
 * Devices. Process-global and never freed: a jb_device pointer stays valid for the process.
 * Each backend is set up when one of its devices is first asked for: a GPU backend's libraries
 * (libcuda and NVRTC; libamdhip64 and hiprtc) are loaded then, never linked, and never for a
 * backend nobody asks for ("gpu" and the default device set up the GPU backends in order, cuda
 * then rocm, until one has devices). Without its libraries a backend has no devices, and asking
 * for one says what was not found. Device indices are process-wide, given in the order backends
 * were set up (each backend's devices in its vendor's order).
 * Devices are named "cpu", "cuda:N", "rocm:N"; "gpu:N" is GPU N of the first GPU backend that
 * has devices, and that backend is what JB_DEVICE_GPU means below. Every function here may be
 * called from any thread.
 * In a process forked after a GPU backend was set up, that backend's devices are the parent's:
 * every call that would reach the driver fails with JB_ERR_UNSUPPORTED (freeing the parent's
 * arrays makes none), since a driver call on the parent's state is invalid in a child.
 */
typedef struct jb_device jb_device;

typedef enum jb_device_kind {
    JB_DEVICE_CPU = 0,
    JB_DEVICE_GPU = 1,
} jb_device_kind;

/* The GPU backends the library was built with, in device order: "cuda", "rocm", "cuda,rocm"
 * or "none". A static string. */
JB_API const char *jb_gpu_backend_name(void);
/* Number of devices of `kind`. For GPUs: those of the first GPU backend that has devices (0 when
 * none has). */
JB_API jb_status jb_device_count(int *out, jb_device_kind kind);
/* The `ordinal`-th device of `kind`. JB_ERR_NO_DEVICE (with the driver's reason) if absent;
 * JB_ERR_UNSUPPORTED for a GPU in a library built without a GPU backend. */
JB_API jb_status jb_device_get(jb_device **out, jb_device_kind kind, int ordinal);
/* The device called `name`: "cpu", "gpu", "cuda", "rocm", each optionally ":N" (default 0).
 * JB_ERR_INVALID_ARGUMENT for a malformed name; JB_ERR_UNSUPPORTED for a backend this library
 * was built without ("gpu": without any GPU backend), naming the build option that adds it;
 * JB_ERR_NO_DEVICE when the backend has no such device, with the reason
 * (what was not found and which variable to set, or what the driver said). */
JB_API jb_status jb_device_lookup(jb_device **out, const char *name);
/* How many devices `backend` ("cpu", "gpu", "cuda", "rocm") has: JB_OK with at least 1, or the
 * status and message jb_device_lookup gives for "<backend>:0" (its state, for tools). */
JB_API jb_status jb_backend_device_count(int *out, const char *backend);
/* The default device: GPU 0 of the first GPU backend that has devices, else the cpu. */
JB_API jb_status jb_device_default(jb_device **out);
/* The device's process-wide index (the prefix of its module cache keys); -1 for NULL. */
JB_API int jb_device_index(const jb_device *device);
/* The device's number among its backend's devices: the N of "cuda:N" (-1 for NULL). */
JB_API int jb_device_ordinal(const jb_device *device);
/* Whether the device is the cpu or a GPU; JB_DEVICE_CPU for NULL. */
JB_API jb_device_kind jb_device_get_kind(const jb_device *device);
/* Strings owned by the device; valid for the life of the process. */
JB_API const char *jb_device_name(const jb_device *device);
JB_API const char *jb_device_arch(const jb_device *device);
JB_API const char *jb_device_backend_name(const jb_device *device);
/* Device memory in bytes (0 where unknown). */
JB_API uint64_t jb_device_total_memory(const jb_device *device);
/*
 * Device memory. A freed array's buffer stays idle on its device for reuse by a request of
 * close size (at most 1/8 larger); a device keeps at most its idle cap of idle bytes, oldest
 * freed first, and keeps its reserved memory within 5/4 of the most live bytes (since the last
 * jb_counters_reset) where idle buffers allow. An allocation the driver refuses for lack of
 * memory frees the device's idle buffers and tries once more. A buffer that queued work still
 * uses is not idle before that work is done and its stream has let go of it: a stream looks once
 * per 64 launches on it (or once its new work holds 64 MiB); jb_stream_synchronize lets go at
 * once; an allocation that no idle buffer serves first has every stream of the device that went
 * quiet (no launch since the previous such allocation) and whose work is all done let go (so
 * memory freed on a thread that then went quiet serves the others);
 * and a refused allocation and jb_device_trim have every stream let go of its finished work's.
 * The idle cap defaults to 1/16 of the device's memory (1 GiB where unknown);
 * JITBRIDGE_IDLE_CAP (bytes, optionally with K, M, G or T, binary: "512M", "2GiB") sets every
 * device's at start.
 */
/* Frees every idle buffer of `device`; *out_freed (if not NULL) gets the bytes given back. Also
 * gives back the device's spare events: each stream keeps up to 128 that its finished work gave
 * back, for its next launches (no thread keeps any), and the device's pool keeps those no stream
 * has; a trim takes every stream's and destroys all but a few (32) of the pool's. */
JB_API jb_status jb_device_trim(uint64_t *out_freed, jb_device *device);
/* Sets the device's idle cap; idle buffers past the new cap are freed at once. */
JB_API jb_status jb_device_set_idle_cap(jb_device *device, uint64_t bytes);
/* The device's idle cap in bytes; 0 for NULL. */
JB_API uint64_t jb_device_idle_cap(const jb_device *device);
/* One device's memory statistics: the same quantities as the mem_ fields of jb_counters (which
 * sum them over the devices), for this device alone. */
typedef struct jb_memory_stats {
    uint64_t live_bytes;      /* asked for by buffers in use (arrays, and work queued on them) */
    uint64_t peak_live_bytes; /* most live bytes since the last jb_counters_reset */
    uint64_t reserved_bytes;  /* taken from the driver: buffers in use and idle */
    uint64_t idle_bytes;      /* of those, idle buffers kept for reuse */
    uint64_t allocations;     /* driver allocations, since the last jb_counters_reset */
    uint64_t frees;           /* driver frees, since then */
    uint64_t reuses;          /* requests served by an idle buffer, since then */
    uint64_t retries;         /* driver allocations that failed, freed the idle buffers and
                               * tried again, since then */
} jb_memory_stats;
/* Fills *out with `device`'s statistics, all read at one instant under the device's lock (safe
 * from any thread, while other threads allocate and free). Pass sizeof(jb_memory_stats): a
 * caller built against an older header gets the fields it knows. */
JB_API jb_status jb_device_memory_stats(jb_memory_stats *out, size_t out_size, jb_device *device);
/* The command the cpu backend compiles with ($CC, else "cc"); owned by the library. The compiler
 * and its `--version` query run with an environment the library chooses, not the host's: PATH,
 * HOME, LANG, LANGUAGE, LC_* and the names JITBRIDGE_COMPILER_ENV lists, with TMPDIR set to the
 * library's private folder, and run in that folder, not the caller's current one (a relative
 * $CC still names a program there). A setuid (AT_SECURE) host ignores $CC and passes none of its
 * caller's variables: the compiler gets PATH=/usr/bin:/bin and TMPDIR only. */
JB_API const char *jb_cpu_compiler(void);

/* ---------------------------------------------------------------------------------------------
 * Streams. Work launched on one stream runs in launch order, asynchronously to the caller.
 * Every thread has a default stream per device, created on its first launch or copy there; a
 * thread that only waits for and reads arrays makes none. A thread may install a stream of its
 * own as that default.
 *
 * A thread's exit lets go of its default stream (and its installations) without waiting for the
 * stream's work, and without hanging on a faulted device: a stream still busy stays with its
 * device, its buffers held, and is destroyed once its work is done (seen by a later
 * jb_device_trim, a new stream on the device, another thread's exit, or an allocation that no
 * idle buffer serves), or once its device is seen faulted (a query of the stream fails) by one of
 * those but an exit.
 *
 * Streams are reference-counted. jb_stream_new, jb_new_thread_local_generation_stream and
 * jb_thread_local_default_stream_retain give the caller a reference of its own, which any thread
 * may use and which jb_stream_free lets go of; each installation holds another. What takes a
 * jb_stream * argument borrows it for the call. jb_thread_local_default_stream borrows: its
 * stream is valid only on that thread and only while it stays the thread's default (an
 * uninstall or the thread's exit may destroy it); to hand a thread's default stream to other
 * threads, retain it.
 */
typedef struct jb_stream jb_stream;
/* On the cpu, each stream runs its work on a thread of its own, which has this name (top -H,
 * a debugger, /proc/PID/task/TID/comm) from its start until the stream is destroyed. */
#define JB_CPU_STREAM_THREAD_NAME "jb cpu stream"

/* A new stream on `device`, owned by the caller (jb_stream_free). */
JB_API jb_status jb_stream_new(jb_stream **out, jb_device *device);
/*
 * Stream priorities, one scale on every device: 0 is normal (what jb_stream_new makes), higher
 * is more urgent, up to jb_device_max_stream_priority(device); a priority outside that range is
 * clamped into it (a negative one to 0). Where work of several streams waits to run, the device
 * runs the more urgent stream's first: a decode stream above its workers' streams.
 *  - CUDA and HIP: the device's own priorities (cuCtxGetStreamPriorityRange,
 *    hipDeviceGetStreamPriorityRange): priority p is the driver's default priority minus p.
 *  - cpu: the stream's worker thread runs at a nice value 5 below its creator's per level (0..4,
 *    at most -20), where the system permits it (CAP_SYS_NICE, or room under RLIMIT_NICE); where
 *    it does not, the stream gets the most urgent level it may, 0 at worst: the call still
 *    succeeds (jb_stream_priority says what was got).
 */
JB_API jb_status jb_stream_new_with_priority(jb_stream **out, jb_device *device, int priority);
/* The most urgent stream priority `device` offers (0: none above normal; 0 for NULL). */
JB_API int jb_device_max_stream_priority(const jb_device *device);
/* The priority `stream` has, on the scale above, as the driver (cpu: the system) reports it. */
JB_API jb_status jb_stream_priority(int *out, const jb_stream *stream);
/* Lets go of the caller's reference (from jb_stream_new or a retain); if the calling thread has
 * the stream installed, it is uninstalled first. A thread that still has it installed keeps it
 * alive, and its launches keep working, until it uninstalls it or exits. The last one to let go
 * waits for the stream's work, then destroys it (a thread's exit is the exception: see
 * "Streams" above). Accepts NULL. */
JB_API void jb_stream_free(jb_stream *stream);
/* Blocks until the work queued on the stream so far is done, then lets go of the buffers that
 * work held. A backend's failure to wait is returned. */
JB_API jb_status jb_stream_synchronize(jb_stream *stream);
/* The device the stream belongs to; NULL for NULL. */
JB_API jb_device *jb_stream_device(const jb_stream *stream);

/* Same as jb_stream_new: the stream a generation (decode) thread makes for itself. */
JB_API jb_status jb_new_thread_local_generation_stream(jb_stream **out, jb_device *device);
/*
 * Makes `stream` the calling thread's default stream for its device, until it is uninstalled.
 * Installs nest: the latest installed stream that is still installed is the default, and with
 * none the thread's own stream is. Each installation holds a reference to the stream until it
 * is uninstalled or the thread exits, so jb_stream_free by its owner, on any thread, never leaves
 * a thread with a freed default. Affects the calling thread only.
 */
JB_API jb_status jb_install_thread_local_default_stream(jb_stream *stream);
/* Removes the latest installation of `stream` on this thread, wherever it is in the nesting
 * (out-of-order removal is safe). JB_ERR_INVALID_ARGUMENT if it is not installed here. */
JB_API jb_status jb_uninstall_thread_local_default_stream(jb_stream *stream);
/* How many installations of `stream` (jb_install_thread_local_default_stream) are in place, on
 * every thread together (0 for NULL). */
JB_API int jb_stream_installations(const jb_stream *stream);
/* The calling thread's default stream for `device`, borrowed: do not free it, and use it only on
 * this thread while it stays the default (see "Streams" above). */
JB_API jb_status jb_thread_local_default_stream(jb_stream **out, jb_device *device);
/* The calling thread's default stream for `device`, with a reference for the caller: usable by
 * any thread, also after this one exits, until the caller lets go of it with jb_stream_free
 * (whose last reference waits for the stream's work). */
JB_API jb_status jb_thread_local_default_stream_retain(jb_stream **out, jb_device *device);

/* ---------------------------------------------------------------------------------------------
 * Arrays: a device buffer with a dtype and a shape, plus the event that marks the end of the
 * work that produces it. Freeing an array while launched work still uses it is safe: the buffer
 * lives until that work is done.
 *
 * A launch does not record that event (a driver call costing about a tenth of the launch): it is
 * recorded when something waits for the array (jb_array_eval, jb_array_read, a launch on another
 * stream) or when the stream looks at which work finished. A wait for an array with newer work
 * queued behind it on its stream then waits for that work too: that stream then records each
 * launch's event at once for its next 4096 launches, so a program that keeps waiting for older
 * arrays pays such waits again each time those 4096 run out (its waits in between extend
 * nothing), and a one-off such wait is not paid for ever.
 */
typedef struct jb_array jb_array;
struct jb_scalar; /* a scalar value with its dtype, defined with custom kernels below */

/* Element types. f16 is IEEE binary16 and bf16 the top half of an f32; both are stored as their
 * 16 bits, and every conversion to them rounds to nearest, ties to even, on every backend. bool
 * is one byte holding 0 or 1. */
typedef enum jb_dtype {
    JB_DTYPE_INVALID = -1, /* not a dtype: what jb_array_dtype returns for NULL */
    JB_F32 = 0,
    JB_I32 = 1,
    JB_F16 = 2,
    JB_BF16 = 3,
    JB_F64 = 4,
    JB_I8 = 5,
    JB_U8 = 6,
    JB_U32 = 7,
    JB_I64 = 8,
    JB_BOOL = 9,
    JB_I16 = 10,
    JB_U16 = 11,
    JB_U64 = 12,
} jb_dtype;

#define JB_MAX_NDIM 8

/* "f32", "i32", "f16", "bf16", "f64", "i8", "u8", "u32", "i64", "bool", "i16", "u16", "u64";
 * NULL for other values.
 * The name is also the type's spelling inside kernel source. */
JB_API const char *jb_dtype_name(int dtype);
/* Bytes per element; 0 for other values. */
JB_API size_t jb_dtype_size(int dtype);

/* Host conversions between f32 and the 16-bit float formats (bits), rounding to nearest even:
 * the same results as the conversions inside kernels (f32_to_f16, f32_to_bf16). */
JB_API uint16_t jb_f32_to_f16_bits(float value);
JB_API float jb_f16_bits_to_f32(uint16_t bits);
JB_API uint16_t jb_f32_to_bf16_bits(float value);
JB_API float jb_bf16_bits_to_f32(uint16_t bits);

/* An array on `device` holding a copy of `data` (element count = product of shape). The copy
 * is taken before return; the work runs on the thread's default stream of `device`. bool data
 * holding a byte other than 0 or 1 is refused (JB_ERR_INVALID_ARGUMENT). */
JB_API jb_status jb_array_from_host(jb_array **out, jb_device *device, jb_dtype dtype,
                                    const int64_t *shape, int ndim, const void *data);
/* A one-dimensional array 0, 1, ..., n-1 (n >= 0) of `dtype` on `device`: f16 and bf16 round to
 * nearest even, i8 and u8 wrap modulo 256, bool is i != 0. */
JB_API jb_status jb_array_arange(jb_array **out, jb_device *device, int64_t n, jb_dtype dtype);
/* An array of `shape` (`ndim` dimensions) on `device` whose every element is zero (every bit 0:
 * 0, 0.0, false), filled on the device: no host data is copied. The fill is queued on the
 * thread's default stream of `device`, like a copy from the host. */
JB_API jb_status jb_array_zeros(jb_array **out, jb_device *device, jb_dtype dtype,
                                const int64_t *shape, int ndim);
/* The same, every element `*value` (a jb_scalar, below; the array's dtype is its dtype). */
JB_API jb_status jb_array_full(jb_array **out, jb_device *device, const int64_t *shape, int ndim,
                               const struct jb_scalar *value);
/* Frees the caller's array (its buffer lives on while queued work uses it). Accepts NULL. Freeing
 * an array twice, or using it after this call, is undefined behaviour, as with free(): its memory
 * may already belong to a new array, which a second free would then free. As a help against that
 * bug, a second free is caught (a warning, nothing freed) as long as the memory was not reused:
 * until 16 more arrays were freed on the thread that freed it, if that thread also makes arrays
 * (and is still running). AddressSanitizer builds of the library report every second free. */
JB_API void jb_array_free(jb_array *array);
/* Blocks until the work that produces the array is done (see "Arrays" above: now and then
 * it also waits for newer work on that stream). */
JB_API jb_status jb_array_eval(jb_array *array);
/* Waits for the array, then copies its contents to `dst` (`dst_bytes` must equal its size). Like
 * jb_array_eval it needs no stream of the calling thread's: a thread that only waits for and
 * reads results makes none. */
JB_API jb_status jb_array_read(const jb_array *array, void *dst, size_t dst_bytes);
JB_API jb_device *jb_array_device(const jb_array *array);
/* The array's dtype; JB_DTYPE_INVALID for NULL. */
JB_API jb_dtype jb_array_dtype(const jb_array *array);
JB_API int jb_array_ndim(const jb_array *array);
/* Pointer to the array's `ndim` dimensions; valid while the array lives. */
JB_API const int64_t *jb_array_shape(const jb_array *array);
JB_API int64_t jb_array_size(const jb_array *array);

/* ---------------------------------------------------------------------------------------------
 * Custom kernels. The caller gives a body; the library writes the whole kernel around it for
 * the device's backend (docs/KERNELS.md describes the language). In the body, thread_index() is
 * this thread's global index (0-based), each input `x` is a const pointer of its dtype and
 * `x_size` its element count, each output `y` is a writable pointer with `y_size`, and each
 * scalar `s` a value of its dtype. A body that names `x_shape` or `x_ndim` also sees that
 * array's dimensions (x_shape[0..x_ndim-1], int64; at most 8 arrays per kernel). The body runs
 * once per thread and means the same on every backend: `return` ends that thread only, an
 * assignment to a scalar is that thread's own, and no order of threads may be assumed (the cpu
 * runs them one after another, a GPU at once). New outputs are not initialised unless the spec
 * gives them an initial value (output_inits), but for bool outputs, which start false. The dtype names (f32, bf16, ...) are types in the
 * body; f16 and bf16 are arithmetic (computed in f32, rounded to nearest even where stored or
 * cast) on GPUs and where the cpu compiler has _Float16/__bf16, else 16-bit storage types, and
 * convert with f16_to_f32, f32_to_f16, bf16_to_f32, f32_to_bf16 everywhere. Threads that meet
 * in one element use atomic_add(y, i, v), atomic_exchange, atomic_min or atomic_max (f32, i32,
 * u32, i64, u64 outputs; each returns the old value; bounds-checked like a subscript). The
 * module is named after the kernel plus a hash of the generated source, which holds
 * everything that changes the code: body, dtypes, compile-time parameters and compile options.
 * So two kernels under one name differing in any of them are two modules.
 */
typedef struct jb_custom_kernel jb_custom_kernel;

/* What a configure hook decides for a kernel on one device, before its first launch there. */
typedef struct jb_kernel_config {
    uint32_t threads_per_block;   /* used when a launch gives a thread count; 0 keeps the default */
    uint32_t shared_memory_bytes; /* dynamic shared memory per block (GPU only) */
} jb_kernel_config;

/*
 * Runs once per kernel object per device (two kernels with one source share a module, yet each
 * runs its own hook and launches with its own result), before the first launch; `config` holds
 * the defaults on entry. One thread runs it while the others launching that kernel wait; it
 * runs under no library lock, so it may call the library or fork (a child forked while another
 * thread is inside the hook runs the hook again itself at its first launch), but launching the
 * kernel it configures fails with JB_ERR_LAUNCH. Non-zero return fails the launch, and the next
 * launch calls the hook again. May be called from any thread.
 */
typedef int (*jb_configure_hook)(void *user_data, const jb_device *device,
                                 jb_kernel_config *config);

/* A compile-time parameter's kind: its value is an integer, 0 or 1, or a jb_dtype. */
typedef enum jb_param_kind {
    JB_PARAM_INT = 0,   /* #define NAME value */
    JB_PARAM_BOOL = 1,  /* #define NAME 1 (or 0) */
    JB_PARAM_DTYPE = 2, /* typedef <dtype> NAME; */
} jb_param_kind;

/* A compile-time parameter: substituted into the source before the header and body. */
typedef struct jb_kernel_param {
    const char *name; /* identifier, distinct from the kernel's other names */
    jb_param_kind kind;
    int64_t value;
} jb_kernel_param;

/* Compile flags of a kernel (or module): each backend passes its own spelling of them. */
#define JB_COMPILE_FAST_MATH 1u /* cpu -ffast-math; cuda --use_fast_math; rocm -ffast-math */
#define JB_COMPILE_LINE_INFO 2u /* cpu -g; cuda -lineinfo; rocm -g */
/* Custom kernels only: every subscript of an array (and of a shape) in the body and header is
 * checked. An index out of range reads 0 and writes nowhere, and the first one of a launch is
 * reported by the next wait for an array the launch wrote, or one made from it (jb_array_eval,
 * jb_array_read: JB_ERR_BOUNDS naming the kernel, the array, the index and the thread). The
 * body and header may name an array only to subscript it, and no name starting with jb_; they
 * may not hold ##, #include, asm, a trigraph, a line continuation inside a name, or a #define
 * or #undef of a reserved word, a dtype, an array's _size, _shape or _ndim, or a type the
 * generated code uses;
 * a define's value may not name an array (JB_ERR_INVALID_ARGUMENT when the kernel is made).
 * What no check covers is C that makes pointers of its own (an integer cast to a pointer): the
 * caller of jb_custom_kernel_new answers for that, as for the rest of the code.
 * Every kernel made while JITBRIDGE_BOUNDS_CHECKS=1 (or true, yes, on) is in the environment
 * has this flag. */
#define JB_COMPILE_BOUNDS_CHECKS 4u

/*
 * A kernel's description. It can grow: set struct_size to sizeof(jb_kernel_spec), which
 * JB_KERNEL_SPEC_INIT does, and the library reads only the fields the caller's header had
 * (the rest count as zero). Start from JB_KERNEL_SPEC_INIT and set what is needed:
 *     jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
 *     spec.name = "scale"; ...
 */
typedef struct jb_kernel_spec {
    size_t struct_size;              /* sizeof(jb_kernel_spec) of the caller's header */
    const char *name;                /* C identifier, not a keyword */
    const char *const *input_names;  /* identifiers, distinct */
    const jb_dtype *input_dtypes;
    size_t num_inputs;
    const char *const *output_names; /* identifiers, distinct from each other and the inputs */
    const jb_dtype *output_dtypes;
    size_t num_outputs;
    const char *body;                /* statements run by every thread */
    const char *header;              /* optional: pasted before the kernel (helpers), or NULL */
    jb_configure_hook configure;     /* optional */
    void *configure_user_data;
    const char *const *scalar_names; /* scalar arguments passed by value, identifiers */
    const jb_dtype *scalar_dtypes;
    size_t num_scalars;
    const jb_kernel_param *params;   /* compile-time parameters */
    size_t num_params;
    unsigned compile_flags;          /* JB_COMPILE_* bits */
    const char *const *defines;      /* "NAME" or "NAME=VALUE": #define lines at the top; each
                                      * NAME once and none of the kernel's names; VALUE one line
                                      * without a comment opening or a trailing backslash */
    size_t num_defines;
    /* Optional: NULL, or one per output: the value every element of a new output holds before
     * the body runs (dtype the output's; JB_DTYPE_INVALID leaves that output uninitialised).
     * Without it a new output's elements hold whatever the memory held (not zeros); a bool
     * output's start false. */
    const struct jb_scalar *output_inits;
    /* Optional: the caller's own compiler options, each part of the kernel's identity.
     * compiler_options: more options for the backend's compiler ($CC; NVRTC or hiprtc), each
     * one argument starting with '-', passed as it is, never through a shell; an option that
     * moves the output, runs or links something, passes options on (-Wp, -Wa, -Xpreprocessor,
     * -Xclang), reads the source otherwise than the bounds checks (-finput-charset, -trigraphs,
     * -traditional), leaves the ABI the library calls the code with (-mabi, -fcall-used-,
     * -ffixed-, -fpack-struct, -m32, ...; -fsanitize), or has its own field (-o, -c, -B,
     * -fplugin, -l, -D: defines, -I: include_dirs, -march: target_arch, ...) is refused.
     * include_dirs: absolute folders searched for #include, each (with every folder above it)
     * writable by this user and root alone; with include folders the compiled code is never
     * kept on disk (the key cannot hold their headers' contents).
     * target_arch: the architecture to compile for instead of the device's (GPUs: "sm_90",
     * "compute_90", "gfx90a"; cpu: -march's value, "native", "x86-64-v3").
     * Compiler options and include folders are refused in a setuid, setgid or capability-
     * raised program: its caller must not choose what the compiler reads or runs. */
    const char *const *compiler_options;
    size_t num_compiler_options;
    const char *const *include_dirs;
    size_t num_include_dirs;
    const char *target_arch;
} jb_kernel_spec;

#define JB_KERNEL_SPEC_INIT {.struct_size = sizeof(jb_kernel_spec)}

/* A scalar argument of a launch: the member of `value` that matches `dtype` is set (f16 and
 * bf16 as their bits, bool as 0 or 1). */
typedef struct jb_scalar {
    jb_dtype dtype;
    union {
        float f32;
        double f64;
        int8_t i8;
        uint8_t u8;
        int32_t i32;
        uint32_t u32;
        int64_t i64;
        uint16_t f16_bits;
        uint16_t bf16_bits;
        uint8_t boolean;
        int16_t i16;
        uint16_t u16;
        uint64_t u64;
    } value;
} jb_scalar;

/* A compile error's message names the saved source when $JITBRIDGE_SAVE_SOURCE is a folder: the
 * library then writes each source it compiles there, as <module name>.c (cpu) or .cu (GPUs). */

/* Validates the spec and generates the source; nothing is compiled until the first launch.
 * Every string is copied. The library checks the spec, and with JB_COMPILE_BOUNDS_CHECKS every
 * subscript of an array, never the rest of what the code does: the caller answers for the body,
 * header, defines and compiler options doing nothing undefined in any launch, and in a cpu
 * module's constructors, which loading it (at jb_custom_kernel_prepare or the first launch on a
 * device) runs, and for the compiler options keeping the platform's C ABI, which the library
 * calls the code with (those known to leave it are refused). (Rust: the unsafe
 * CustomKernel::new.) */
JB_API jb_status jb_custom_kernel_new(jb_custom_kernel **out, const jb_kernel_spec *spec);
JB_API void jb_custom_kernel_free(jb_custom_kernel *kernel);
/* "<name>_<16 hex digits of the source hash>"; owned by the kernel. */
JB_API const char *jb_custom_kernel_module_name(const jb_custom_kernel *kernel);
/* 1 when the kernel was made with JB_COMPILE_BOUNDS_CHECKS (its spec, or JITBRIDGE_BOUNDS_CHECKS),
 * else 0 (also for NULL). */
JB_API int jb_custom_kernel_bounds_checked(const jb_custom_kernel *kernel);
/* The generated source for a backend ("cpu", "cuda", "rocm"); owned by the kernel. NULL for
 * an unknown backend. */
JB_API const char *jb_custom_kernel_source(const jb_custom_kernel *kernel, const char *backend);

/* Builds (or finds) the kernel's module on `device` and runs its configure hook, without
 * launching: a warm-up, so that the first real launch does not wait for the compiler. */
JB_API jb_status jb_custom_kernel_prepare(jb_custom_kernel *kernel, jb_device *device);

/* A compiled kernel's attributes on one device (CuPy's RawKernel.attributes). On a GPU the
 * driver's values (cuFuncGetAttribute, hipFuncGetAttribute; a driver without that call:
 * JB_ERR_UNSUPPORTED). On the cpu, where a kernel is a C function run by the stream's worker:
 * registers, static shared and local bytes 0 (not applicable: it has no registers of its own to
 * count, no shared memory, and its locals are on the worker's stack), and the most threads per
 * block the launch limit, 1024 (docs/KERNELS.md). */
typedef struct jb_kernel_attributes {
    int registers;              /* per thread */
    int max_threads_per_block;  /* the most a launch of this kernel may put in one block */
    size_t static_shared_bytes; /* the __shared__ memory the kernel declares */
    size_t local_bytes;         /* local memory per thread (spilled registers, local arrays) */
} jb_kernel_attributes;
/* The kernel's attributes on `device`, its module built and loaded there first, as by
 * jb_custom_kernel_prepare. */
JB_API jb_status jb_custom_kernel_attributes(jb_custom_kernel *kernel, jb_device *device,
                                             jb_kernel_attributes *out);

/* A launch's threads: grid x block, or total_threads in blocks of the configured size. A shape
 * whose thread or block count does not fit (past 2^32 - 1 blocks, or a product past 2^64) is
 * JB_ERR_INVALID_ARGUMENT, as is a block dimension of 0 or an output with more than 2^40
 * elements. No threads (total_threads 0 with the grid all zero, or a grid dimension of 0) is an
 * empty batch: the launch checks every argument and makes its outputs as any launch does, and
 * runs nothing (in a graph too: each replay runs nothing for it). */
typedef struct jb_launch_shape {
    uint32_t grid[3];  /* blocks; all zero means: derive from total_threads */
    uint32_t block[3]; /* threads per block */
    uint64_t total_threads; /* used when grid is all zero */
} jb_launch_shape;

/*
 * One launch of a custom kernel, every argument in one place: start from JB_LAUNCH_INIT (it
 * sets struct_size, so the struct can grow) and set what is needed.
 *  - The device: the stream's, else the inputs', else the in-place arrays', else `device`; every
 *    array must be on it. A kernel without inputs needs a stream, an in-place array or `device`.
 *  - stream NULL: the calling thread's default stream of that device.
 *  - inputs and scalars in the spec's order (scalar dtypes matching).
 *  - Per output, either a new array of output_shapes[i] (output_ndims[i] dimensions), or, where
 *    in_place is not NULL and in_place[i] is, that array, written in place: its dtype must be
 *    the output's, it must not also be an input or another output, and it keeps its contents
 *    where the body does not write (output_inits apply to new outputs only). The write is
 *    queued after the work that made the array and after every kernel on another stream that
 *    reads it (launched before this call), as for a whole-source module's written argument; the
 *    array is ready once the kernel has run. An array written by a launch must not be used by
 *    another thread during that call.
 */
typedef struct jb_launch {
    size_t struct_size;                 /* sizeof(jb_launch) of the caller's header */
    jb_device *device;                  /* used when nothing else says the device */
    jb_stream *stream;
    jb_array *const *inputs;
    size_t num_inputs;
    const jb_scalar *scalars;
    size_t num_scalars;
    const int64_t *const *output_shapes; /* per output; an in-place output's entry is unused */
    const int *output_ndims;
    jb_array *const *in_place;          /* NULL, or per output: an array, or NULL for a new one */
    jb_launch_shape shape;
} jb_launch;

#define JB_LAUNCH_INIT {.struct_size = sizeof(jb_launch)}

/*
 * Launches `kernel` as `launch` describes, building its module on first use. outputs[i] receives
 * each new output (an array owned by the caller) and NULL for an in-place one; `outputs` may be
 * NULL when every output is in place. Arguments are checked before anything is built or queued,
 * so a bad argument leaves the module cache and every array unchanged; on failure every
 * outputs[i] is NULL. Safe from any thread.
 */
JB_API jb_status jb_custom_kernel_run(jb_array **outputs, jb_custom_kernel *kernel,
                                      const jb_launch *launch);

/*
 * Launches `kernel` on the device of the inputs (all inputs on one device, at least one input),
 * on that device's default stream of the calling thread, building its module on first use.
 * outputs[i] receives a new array of output_shapes[i] (output_ndims[i] dimensions) owned by the
 * caller; on failure every outputs[i] is NULL. Arguments are checked before anything is built, so
 * a bad argument leaves the module cache unchanged (a launch that fails later keeps the module
 * it built: that module is valid). A kernel with scalars needs jb_custom_kernel_launch_on.
 */
JB_API jb_status jb_custom_kernel_launch(jb_array **outputs, jb_custom_kernel *kernel,
                                         jb_array *const *inputs, size_t num_inputs,
                                         const int64_t *const *output_shapes,
                                         const int *output_ndims, const jb_launch_shape *shape);

/*
 * jb_custom_kernel_launch with the scalars (in the spec's order, dtypes matching) and on
 * `stream`, which must belong to the inputs' device; NULL means the calling thread's default
 * stream. Inputs produced on other streams are waited for on `stream`, and the outputs are
 * ready once `stream` passes the kernel: any stream or thread may use them after that.
 */
JB_API jb_status jb_custom_kernel_launch_on(jb_array **outputs, jb_custom_kernel *kernel,
                                            jb_stream *stream, jb_array *const *inputs,
                                            size_t num_inputs, const jb_scalar *scalars,
                                            size_t num_scalars,
                                            const int64_t *const *output_shapes,
                                            const int *output_ndims, const jb_launch_shape *shape);

/* ---------------------------------------------------------------------------------------------
 * Captured graphs: a step's launches recorded once on a stream and replayed with one call (CUDA
 * and HIP graphs; on the cpu, a recorded list the stream's worker replays). A decode step that
 * launches the same kernels on the same arrays thousands of times pays one call per step:
 *
 *     jb_graph_begin_capture(stream);
 *     jb_custom_kernel_run(...) on `stream` (or on the calling thread's default stream, when
 *                          that is `stream`), as usual, as many as the step has;
 *     jb_graph_end_capture(&graph, stream);
 *     for each step: jb_graph_set_scalar(graph, ...) where a scalar changes;
 *                    jb_graph_launch(graph, any stream of the device);
 *
 * Between begin and end, the calling thread's custom kernel launches on `stream` run nothing:
 * each is checked as usual and recorded, and its new outputs are made (arrays whose contents are
 * undefined until the graph's first launch). Every replay writes the same arrays: each new
 * output made in the capture and each array written in place. A replay does what those
 * launches would have done around their work: it waits for the work that made the arrays the
 * graph reads and, for those it writes, for kernels on other streams still reading them; it
 * holds every buffer until it is done, and the arrays it writes are ready once it is. The graph
 * keeps a reference on every array and buffer it uses: freeing one (or the kernel) while the
 * graph exists is safe, and the graph keeps using it.
 *
 * Not captured, refused while `stream` captures (JB_ERR_INVALID_ARGUMENT unless said): another
 * thread's work on `stream` (a capture belongs to the thread that began it), a second
 * jb_graph_begin_capture on it (captures do not nest), making an array or reading one through
 * it (jb_array_from_host, _arange, _zeros, _full and jb_array_read on the thread's default
 * stream when that is `stream`), jb_stream_synchronize of it, and whole-source module launches
 * on it (JB_ERR_UNSUPPORTED). On a GPU, an output initial value of 8 bytes whose halves differ
 * (JB_ERR_UNSUPPORTED). A capture begins only after the stream's earlier work is done (it
 * waits). A launch that fails during the capture fails the capture: jb_graph_end_capture then
 * returns the error and nothing is kept, as it does for a capture another thread's launch
 * raced into. Freeing a stream that captures discards the capture.
 *
 * A graph may be launched from any thread, on any stream of its device that is not capturing;
 * launches and scalar updates of one graph are serialized by the graph. As with in-place
 * writes, no other thread may use an array the graph writes during jb_graph_launch.
 */
typedef struct jb_graph jb_graph;

/* Begins capturing the calling thread's launches on `stream`: waits for its work so far, then
 * records instead of running (see above). JB_ERR_UNSUPPORTED where the driver has no graphs. */
JB_API jb_status jb_graph_begin_capture(jb_stream *stream);
/* Ends the capture the calling thread began on `stream`: *out gets the graph (owned by the
 * caller, jb_graph_free), to launch with jb_graph_launch. JB_ERR_INVALID_ARGUMENT when the
 * stream is not capturing, when another thread began the capture, or when nothing was launched
 * in it; a capture that failed returns its error. The stream runs its work again either way. */
JB_API jb_status jb_graph_end_capture(jb_graph **out, jb_stream *stream);
/* Queues one replay of the graph on `stream` (its device's), with its scalars as set now. */
JB_API jb_status jb_graph_launch(jb_graph *graph, jb_stream *stream);
/* How many kernel launches the graph holds (0 for NULL): launch i is the i-th captured. */
JB_API size_t jb_graph_launch_count(const jb_graph *graph);
/* 1 when every launch of the graph is of a bounds-checked kernel, else 0 (also for NULL). */
JB_API int jb_graph_bounds_checked(const jb_graph *graph);
/* Sets scalar `scalar` of launch `launch` (the kernel's order, its dtype) for the replays that
 * jb_graph_launch queues from now on; a replay already queued keeps the value it had. */
JB_API jb_status jb_graph_set_scalar(jb_graph *graph, size_t launch, size_t scalar,
                                     const jb_scalar *value);
/* Waits for the graph's replays to finish, then frees it; its arrays live on with their other
 * owners. Accepts NULL. */
JB_API void jb_graph_free(jb_graph *graph);

/* ---------------------------------------------------------------------------------------------
 * Whole-source modules (CuPy's RawModule): the caller's complete source, with several entry
 * points launched by name. Its module is named after `name` plus a hash of the sources, flags
 * and defines, and goes through the same module cache and disk cache as custom kernels.
 *
 * GPU source is CUDA C++: each entry is `extern "C" __global__ void name(...)`, its parameters
 * the launch's arguments in order (an array as its device pointer, a scalar by value). cpu
 * source is C11: each entry is `void name(void **args, uint64_t threads)`, where args[i] points
 * at argument i's value, as in cuLaunchKernel (an array: `*(float **)args[0]`), and the entry
 * runs every thread itself (threads = the launch's total). With `dtypes` set, the source starts
 * with the dtype declarations custom kernels get (f16, bf16, f32_to_bf16, ...). Each entry must
 * be a function the source itself defines: a name it only uses or declares (memcpy, abort) fails
 * the first launch with JB_ERR_LOAD naming it, never binding to another library's function.
 *
 * The library cannot see an entry's parameters, so each entry may declare them (signatures):
 * a declared entry's launches are checked against its declaration (count, array or scalar,
 * read or written, dtype) before anything is built or queued, and after its declared arguments
 * it is given each array argument's element count, in order, as an unsigned 64-bit value (GPU:
 * more `unsigned long long` parameters; cpu: more args[i]), so that it can keep its indexes
 * inside its arrays. An undeclared entry takes what it is given: arguments that do not match its
 * parameters, and an entry that indexes past an array, are the caller's bugs (on the cpu,
 * memory corruption of the host process), as with cuLaunchKernel.
 */
typedef struct jb_source_module jb_source_module;

/* One declared argument of an entry point. */
typedef enum jb_arg_role {
    JB_ARG_IN = 1,     /* an array the entry only reads */
    JB_ARG_OUT = 2,    /* an array the entry writes (and may read): passed with `written` */
    JB_ARG_SCALAR = 3, /* a scalar by value */
} jb_arg_role;
typedef struct jb_arg_decl {
    jb_arg_role role;
    jb_dtype dtype;
} jb_arg_decl;
/* An entry's declaration: `declared` non-zero, and its arguments in order. */
typedef struct jb_entry_signature {
    int declared;
    const jb_arg_decl *args;
    size_t num_args;
} jb_entry_signature;

/* A module's code built ahead of time (CuPy's RawModule(path=...)), for one dialect instead of
 * its source: `bytes` (`size` of them), or, with `bytes` NULL, the file at absolute `path`, read
 * whole when the module is made and trusted as the disk cache trusts its entries: a regular
 * file (not a link) of this user's, writable by no group or other user, one link, 1 byte to
 * 64 MiB, in a folder that no one but this user and root can change (each folder from "/" on).
 * cpu: a shared object for this machine (loaded as a compiled module is, with dlopen); a GPU:
 * what the driver loads (cuModuleLoadData: a cubin, a fatbin or PTX text; hipModuleLoadData: a
 * code object), refused at the first load with JB_ERR_LOAD where the driver rejects it. */
typedef struct jb_module_code {
    const void *bytes;
    size_t size;
    const char *path;
} jb_module_code;

typedef struct jb_source_module_spec {
    size_t struct_size;             /* sizeof(jb_source_module_spec): JB_SOURCE_MODULE_SPEC_INIT */
    const char *name;               /* identifier */
    const char *cpu_source;         /* C for the cpu device, or NULL */
    const char *gpu_source;         /* CUDA C++ for cuda and rocm devices, or NULL */
    const char *const *entry_names; /* identifiers, distinct, at least one */
    size_t num_entries;
    unsigned compile_flags;         /* JB_COMPILE_* */
    const char *const *defines;     /* "NAME" or "NAME=VALUE" */
    size_t num_defines;
    int dtypes;                     /* non-zero: the dtype declarations come first */
    const jb_entry_signature *signatures; /* NULL, or one per entry (see above) */
    /* Optional: the caller's own compiler options, each part of the module's identity.
     * compiler_options: more options for the backend's compiler ($CC; NVRTC or hiprtc), each
     * one argument starting with '-', passed as it is, never through a shell; an option that
     * moves the output, runs or links something, passes options on (-Wp, -Wa, -Xpreprocessor,
     * -Xclang), reads the source otherwise than the bounds checks (-finput-charset, -trigraphs,
     * -traditional), leaves the ABI the library calls the code with (-mabi, -fcall-used-,
     * -ffixed-, -fpack-struct, -m32, ...; -fsanitize), or has its own field (-o, -c, -B,
     * -fplugin, -l, -D: defines, -I: include_dirs, -march: target_arch, ...) is refused.
     * include_dirs: absolute folders searched for #include, each (with every folder above it)
     * writable by this user and root alone; with include folders the compiled code is never
     * kept on disk (the key cannot hold their headers' contents).
     * target_arch: the architecture to compile for instead of the device's (GPUs: "sm_90",
     * "compute_90", "gfx90a"; cpu: -march's value, "native", "x86-64-v3").
     * Compiler options and include folders are refused in a setuid, setgid or capability-
     * raised program: its caller must not choose what the compiler reads or runs. */
    const char *const *compiler_options;
    size_t num_compiler_options;
    const char *const *include_dirs;
    size_t num_include_dirs;
    const char *target_arch;
    /* Optional: precompiled code instead of cpu_source or gpu_source (one of the two per
     * dialect); the module's identity is the code's bytes. Defines, dtypes and compiler options
     * apply to sources only. */
    jb_module_code cpu_code;
    jb_module_code gpu_code;
} jb_source_module_spec;

#define JB_SOURCE_MODULE_SPEC_INIT {.struct_size = sizeof(jb_source_module_spec)}

/* One argument of a whole-source launch: `array` when not NULL, else `scalar`. An array the
 * entry writes must say so (`written`): the write is then queued after the work that made the
 * array and after every kernel on another stream that reads it (launched before this call as a
 * custom kernel's input or a module's unwritten argument), and its contents are ready once the
 * entry has run. Only streams that read it are waited for, however many: those that read it
 * since it was last made or written (past 4 of them, also one whose older read of it that stream
 * has not yet let go of). */
typedef struct jb_arg {
    jb_array *array;
    int written;
    jb_scalar scalar;
} jb_arg;

/* Validates the spec and copies it (a code file is read now); nothing is compiled or loaded
 * until the first launch. */
JB_API jb_status jb_source_module_new(jb_source_module **out, const jb_source_module_spec *spec);
JB_API void jb_source_module_free(jb_source_module *module);
/* "<name>_<16 hex digits of the hash>"; owned by the module. */
JB_API const char *jb_source_module_name(const jb_source_module *module);
/* Builds (or finds) the module on `device` and finds every entry point, without launching: a
 * warm-up, and where a compile error or a missing entry shows up before the first launch
 * (JB_ERR_COMPILE with the compiler's log, JB_ERR_LOAD). Loading runs the module's load-time
 * code (a cpu module's constructors), as a first launch would. May be called from any thread. */
JB_API jb_status jb_source_module_prepare(jb_source_module *module, jb_device *device);
/* Entry point `entry`'s attributes on `device` (jb_kernel_attributes), the module built there
 * first; an entry the module does not declare is JB_ERR_INVALID_ARGUMENT. */
JB_API jb_status jb_source_module_attributes(jb_source_module *module, jb_device *device,
                                             const char *entry, jb_kernel_attributes *out);

/*
 * Launches entry point `entry` with `args` on `stream` (NULL: the calling thread's default
 * stream of the arrays' device), building the module on first use. At least one array, or a
 * stream, says the device; every array must be on it. Arrays are used in place: the launch
 * waits for the work that produces each array, and, for each array marked `written`, for the
 * kernels already launched on other streams that read it (write after read); that array is
 * ready once the entry has run. The waits are queued on `stream`: the call does not block.
 * Several threads may launch one module at once; an array written by a launch must not be used
 * by another thread during that call. A declared entry's arguments are checked against its
 * declaration (JB_ERR_INVALID_ARGUMENT, or JB_ERR_SHAPE for a dtype) and followed by the
 * arrays' element counts.
 */
JB_API jb_status jb_source_module_launch(jb_source_module *module, jb_stream *stream,
                                         const char *entry, const jb_arg *args, size_t num_args,
                                         const jb_launch_shape *shape);

/*
 * Module globals (CuPy's RawModule.get_global): a variable the module's own source defines at
 * file scope, by name, on one device (the module is built there first, as by
 * jb_source_module_prepare): on a GPU a `__device__` or `__constant__` variable, on the cpu one
 * with external linkage (not `static`, not `_Thread_local`; a `const` one is read, never
 * written). A name that is not a C identifier, a name the module does not define as a variable
 * (a function, another object's symbol), and bytes past the variable's end are
 * JB_ERR_INVALID_ARGUMENT, with nothing copied. The size is the variable's in bytes.
 * A read or write copies `bytes` bytes at byte `offset` of the variable after the work queued on
 * `stream` so far (NULL: the calling thread's default stream of `device`; with both, the stream
 * must be on `device`) and before its later work: it returns once the copy is done. Work on
 * other streams is not waited for: order it with events. Refused while `stream` captures.
 */
JB_API jb_status jb_source_module_global_size(jb_source_module *module, jb_device *device,
                                              const char *name, size_t *out_size);
JB_API jb_status jb_source_module_global_write(jb_source_module *module, jb_device *device,
                                               jb_stream *stream, const char *name,
                                               size_t offset, const void *src, size_t bytes);
JB_API jb_status jb_source_module_global_read(jb_source_module *module, jb_device *device,
                                              jb_stream *stream, const char *name,
                                              size_t offset, void *dst, size_t bytes);

/* ---------------------------------------------------------------------------------------------
 * The race probe: kernel "mlxcel_jit_race_probe_v<variant>", out[i] = inp[i] * 2 + 1, one block
 * of n threads where n is the element count of the f32 input (1 <= n <= 1024), variant >= 0.
 * Output: a new f32 array of shape {n} owned by the caller. Probe modules never use a disk cache.
 */
JB_API jb_status jb_jit_race_probe_array(jb_array **out, jb_array *input, int variant);
/* The same probe, but only on a ROCm GPU of a ROCm build: elsewhere JB_ERR_UNSUPPORTED, with a
 * message that names what is missing. */
JB_API jb_status jb_rocm_jit_race_probe_array(jb_array **out, jb_array *input, int variant);

/* ---------------------------------------------------------------------------------------------
 * Counters of the process-global module cache. Read and reset from any thread.
 */
typedef struct jb_counters {
    uint64_t builds;         /* modules compiled and loaded (disk cache hits not included) */
    uint64_t build_failures; /* builds that failed (nothing inserted) */
    uint64_t hits;           /* lookups that found the module under the read lock */
    uint64_t misses;         /* lookups that did not, and went on to the write lock */
    uint64_t build_ns;       /* time spent building, in nanoseconds */
    uint64_t configures;     /* configure hooks that ran and succeeded */
    uint64_t peak_concurrent_builds; /* most builds ever in progress at once: 1 when locked */
    uint64_t disk_hits;      /* builds served from the disk cache, compiler skipped */
    uint64_t disk_misses;    /* disk lookups that found no entry */
    uint64_t disk_rejected;  /* entries found invalid, or refused by the loader for good
                              * (JB_ERR_LOAD), and replaced; a refusal for now is a miss */
    /* Device memory, summed over the devices (see jb_device_trim). Bytes: */
    uint64_t mem_live_bytes;      /* asked for by buffers in use (arrays, and work queued on them) */
    uint64_t mem_peak_live_bytes; /* each device's most live bytes since the last reset, summed */
    uint64_t mem_reserved_bytes;  /* taken from the drivers: buffers in use and idle */
    uint64_t mem_idle_bytes;      /* of those, idle buffers kept for reuse */
    /* Events: */
    uint64_t mem_allocations;     /* driver allocations */
    uint64_t mem_frees;           /* driver frees */
    uint64_t mem_reuses;          /* requests served by an idle buffer, no driver call */
    uint64_t mem_retries;         /* driver allocations that failed, freed the idle buffers and
                                   * tried again */
    /* The slow path, for a dashboard (see jb_seal and jb_set_event_callback): */
    uint64_t build_max_ns;    /* the longest single build (the same builds as build_ns) */
    uint64_t sealed_refusals; /* compiles refused with JB_ERR_SEALED (not build failures) */
    uint64_t sealed_warnings; /* compiles a sealed process warned about, then ran */
    /* Bundles (read-only tiers behind the disk cache): */
    uint64_t bundle_hits;     /* builds served from a bundle, compiler skipped */
    uint64_t bundle_rejected; /* bundle entries that failed their checks or that the loader
                               * refused: skipped for the rest of the process */
    /* Leases (one compile per kernel across the processes of one cache folder): */
    uint64_t lease_waits;     /* builds that waited for another process's compile of the
                               * kernel, then loaded its entry */
    uint64_t lease_timeouts;  /* waits that reached the compile timeout, then compiled alone */
    uint64_t lease_fallbacks; /* compiles without a lease: locks do not work in the folder */
    uint64_t lease_stale_takeovers; /* leases taken over from a holder whose lease stopped
                                     * moving (a stopped process), then compiled */
    /* The remote tier (see jb_remote_cache_set): */
    uint64_t remote_hits;     /* builds served from the remote tier, compiler skipped */
    uint64_t remote_misses;   /* remote lookups that found no entry */
    uint64_t remote_rejected; /* remote entries that failed their checks or that the loader
                               * refused: never loaded */
    uint64_t remote_stores;   /* compiled modules written to the remote tier */
    uint64_t remote_breaker_trips; /* failures of the store that paused the tier */
    uint64_t remote_lease_waits;    /* builds that found another host compiling the kernel
                                     * (its fleet lease) and waited for its value */
    uint64_t remote_lease_timeouts; /* fleet lease waits that reached the compile timeout, then
                                     * compiled alone */
} jb_counters;

/*
 * Failure memory. A kernel (or whole-source module) whose source the compiler rejected is not
 * compiled again: later launches on that device return the same error (JB_ERR_COMPILE, the
 * compiler's log included) at once, without the compiler and without holding up other threads'
 * first launches. Each failure is remembered with the source and the compiler's identity, so
 * another source or another compiler compiles afresh. Only rejections are remembered: a
 * compile that timed out, was killed, could not start or ran out of memory is tried again by
 * the next launch. Each recalled failure counts as a build failure (jb_counters). At most 1024
 * failures (16 MiB with their logs) are kept, the oldest forgotten first. Nothing is ever
 * inserted into the module cache for a failure.
 */
/* Forgets every remembered failure (after the compiler or its environment was fixed): the next
 * launch of each such kernel compiles again. */
JB_API jb_status jb_forget_build_failures(void);

/* Pass sizeof(jb_counters): a caller built against an older header gets the fields it knows. */
JB_API jb_status jb_counters_get(jb_counters *out, size_t out_size);
/* Sets every counter to zero (the live, reserved and idle bytes stay: they are states; the
 * peak becomes the live bytes now); for tests. */
JB_API void jb_counters_reset(void);

/*
 * The disk cache of compiled code. Folder: $JITBRIDGE_CACHE_DIR (a relative one is made
 * absolute against the directory the process started in), else $XDG_CACHE_HOME/jitbridge (an
 * absolute one only), else ~/.cache/jitbridge, created 0700 at the first compile;
 * JITBRIDGE_DISK_CACHE=0 (or false, no, off) turns it off. The folder is opened once and every
 * entry is read through that handle, each checked first (a regular file, ours, not writable by
 * others, one link, at most 64 MiB). A folder owned by another user or writable by group or
 * others, or under a parent its group (ours too) or others can write (without the sticky bit)
 * or another user owns, is refused (the cache is off); a read-only disk stops new entries, and
 * a full one (ENOSPC, EDQUOT) pauses them for 30 s, doubling to 10 min while it stays full, while
 * those there are still served: each with one warning (see jb_set_log_callback), never an error
 * (a paused disk warns again when a store lands after the pause). A transient failure (out of descriptors or memory, an interrupted call, a
 * network disk's I/O error) is "not now": it evicts no entry, stops nothing, and while setting up leaves the cache off only
 * until a later build tries again (after 50 ms, doubling up to 30 s).
 * The library removes or replaces only what it made, and only in a folder marked as its own
 * with CACHEDIR.TAG (the Cache Directory Tagging convention; backup tools skip such a folder).
 * It marks a folder it creates or finds empty, and one holding nothing but its kinds of files
 * (entries, and a tmp/ of its temporaries: an older version's cache). Any other folder
 * ($HOME, ".") is shared: entries are stored and served there, beside the user's files, but
 * nothing is swept or removed, no tmp/ is made, and clear, prune and fix are refused.
 * Probe kernels never use it. None of these functions creates the folder; each applies the
 * same trust rules and fails (naming the folder and the fix) on a folder the library refuses.
 */
/* The folder (owned by the library, valid for the process; "" when none could be chosen). */
JB_API jb_status jb_disk_cache_dir(const char **out);
/* "on"; "on, shared: <why>" (a folder not marked as the cache's own: nothing removed);
 * "on, read-only: <why>" (entries are served, none stored); "off for now: <why>" (a transient
 * failure while setting up: tried again at a later build); "off: <why>" (refused for the life
 * of the process) or "off (JITBRIDGE_DISK_CACHE=...)". Before the first build: what would
 * happen, creating nothing. Owned by the library; valid until the next call on this thread. */
JB_API const char *jb_disk_cache_state(void);
/* Entries (regular files at entry names) and their total bytes; 0 and 0 with no folder yet. */
JB_API jb_status jb_disk_cache_stats(uint64_t *entries, uint64_t *bytes);
/* Removes whatever is not an entry at an entry's name, then entries, oldest first, until at
 * most `max_bytes` remain (0 clears the cache). *removed counts what went, also on failure.
 * A folder that does not exist yet is an empty cache (0 removed); a shared folder (not marked
 * as the cache's own) is refused with JB_ERR_UNSUPPORTED, nothing removed. */
JB_API jb_status jb_disk_cache_prune(uint64_t max_bytes, uint64_t *removed);
/* Called once per bad entry: its file name and what is wrong; both valid during the call. */
typedef void (*jb_disk_cache_report_fn)(void *user_data, const char *entry, const char *problem);
/* Checks every entry as the library would before loading it (type, owner, mode, links, size),
 * then its contents (magic, version, lengths, checksum). Reports each bad one to `report` (may
 * be NULL) and, when `fix` is nonzero, removes it (a shared folder is refused, as by prune).
 * An entry that cannot be read now (a transient failure) stops the check with JB_ERR_SYSTEM,
 * never counted bad or removed. */
JB_API jb_status jb_disk_cache_check(uint64_t *valid, uint64_t *invalid, int fix,
                                     jb_disk_cache_report_fn report, void *user_data);
/* jb_disk_cache_check without a report or fix: counts good and bad entries. */
JB_API jb_status jb_disk_cache_verify(uint64_t *valid, uint64_t *invalid);

/*
 * The remote tier: compiled code on a Redis server a fleet of hosts shares, so that a kernel one
 * host compiled loads on the others. On a miss the tiers are tried in order: memory, the cache
 * folder, bundles, the remote tier, the compiler. A remote hit is written to the cache folder
 * (the next process on the host reads the disk) and loaded as a disk entry is; a compile's code
 * is written to the remote tier unless the tier is read-only. Each value is signed with the
 * fleet's key (HMAC-SHA256 over its header, key and code, besides a SHA-256 of the code): one
 * whose MAC, checksum or lengths fail, that names another key (another kernel, target or
 * compiler), or that is larger than a disk entry may be (64 MiB) is a miss, counted
 * (jb_counters.remote_rejected) and raised (JB_CACHE_EVENT_REMOTE_REJECTED), never loaded: a
 * store others can write must not be a way to run code in this process. Without a key nothing
 * could be verified, so there is no tier without one.
 * The client, hiredis (0.13, 0.14 or 1.x), is loaded at run time, never linked. A connect waits
 * 100 ms at most, a host name's lookup 2 s, and each command 2 s in all (sent and answered,
 * however slowly the store answers); a reply longer than a value may be is refused unread.
 * After a failure (a timeout, a closed connection, an error reply such as a full server's, a
 * reply of the wrong type or not RESP) the tier is skipped for 15 s with one warning and
 * counted (remote_breaker_trips), then tried again. No SIGPIPE reaches the process; a forked
 * child never uses its parent's connection; messages show the URL with passwords masked.
 * The hosts compile each kernel once: before compiling, a host takes the kernel's fleet lease
 * in the store (SET NX PX, renewed while it compiles, expiring 10 s after its holder died or
 * lost the store); a host that finds it held waits with no lock of the library held, asking
 * every 75 ms, for the value (then loads it), for the lease to go (then takes it and compiles)
 * or until the compile timeout (then compiles alone): remote_lease_waits and
 * remote_lease_timeouts count them. A read-only tier takes no lease.
 * Set by $JITBRIDGE_REMOTE_CACHE and $JITBRIDGE_REMOTE_KEY_FILE, read at the first build (a
 * bad value is one warning and no tier), or by jb_remote_cache_set.
 */
/* Sets the remote tier: `url` is redis://HOST:PORT[/DB] or unix:///PATH (an absolute socket
 * path), either followed by ?mode=read-only (entries are loaded, none written) or
 * ?mode=read-write (the default); NULL or "" turns the tier off. `key_file` names the fleet's
 * key: a regular file of 32 to 4096 bytes owned by this user and neither readable nor writable
 * by group or others, read now. Errors, with the tier left as it was: JB_ERR_INVALID_ARGUMENT
 * (a malformed URL, credentials in it, no key file, or a key file refused: the message says
 * why, with any password in the URL masked), JB_ERR_SYSTEM (the key file cannot be opened), JB_ERR_UNSUPPORTED (hiredis cannot be
 * loaded). Nothing connects until a build needs the tier. May be called from any thread;
 * builds already under way use the tier they started with. */
JB_API jb_status jb_remote_cache_set(const char *url, const char *key_file);

/* What jb_remote_cache_check found: the tier in force and whether its store answers. */
typedef struct jb_remote_check {
    int configured;       /* 1: a tier is set (by the variables or jb_remote_cache_set) */
    int read_only;        /* 1: ?mode=read-only (values loaded, none written) */
    int client_loaded;    /* 1: hiredis was loaded */
    int reachable;        /* 1: every PING was answered +PONG */
    uint64_t pings;       /* PINGs answered */
    double round_trip_ms; /* the fastest PING's round trip (connect excluded), else 0 */
    double connect_ms;    /* the connect (and SELECT) before the first PING, else 0 */
    char url[512];        /* the URL with its password and option values masked, or "" */
    char why[768];        /* when not configured or not reachable: why, else "" */
} jb_remote_check;
/* Looks at the remote tier without building anything: the tier in force (read from the
 * variables first, as a build would), whether hiredis loads, and `pings` PINGs (1 to 100) on a
 * connection of the library's own client, each under the command deadline. A failure here never
 * trips the breaker nor changes a counter. JB_OK whatever it found (see out); JB_ERR_INVALID_
 * ARGUMENT for a NULL out or pings out of range. */
JB_API jb_status jb_remote_cache_check(jb_remote_check *out, int pings);

/* What an export to or an import from the remote tier did, entry by entry. */
typedef struct jb_remote_transfer {
    uint64_t stored;   /* written: to the store (export), into the cache folder (import) */
    uint64_t skipped;  /* export: too large for a remote value; import: in the cache folder */
    uint64_t rejected; /* export: bad entries of the folder or bundle; import: store values that
                        * failed their checks (counted as remote_rejected too) */
    uint64_t missing;  /* import: named by the manifest but not in the store; export: 0 */
} jb_remote_transfer;
/* Seeds the remote tier: every good entry of the bundle at `bundle`, or of the cache folder when
 * `bundle` is NULL, signed and written as a compile's store writes it (an existing value is
 * replaced). Errors: no tier, a read-only one (JB_ERR_INVALID_ARGUMENT: nothing written), a
 * refused folder or bundle, or a store that fails (JB_ERR_SYSTEM, after out->stored entries). */
JB_API jb_status jb_remote_cache_export(jb_remote_transfer *out, const char *bundle);
/* Fills the cache folder (created if needed) from the remote tier with the kernels the manifest
 * at `manifest` names, each value checked as a build's remote load checks it; those already in
 * the folder are not asked for. Errors: no tier, a manifest or folder that cannot be used, or a
 * store that fails (JB_ERR_SYSTEM, after out->stored entries). */
JB_API jb_status jb_remote_cache_import(jb_remote_transfer *out, const char *manifest);

/* ---------------------------------------------------------------------------------------------
 * Seeing compiles. A module found in memory (the hit path, every launch) is never an event and
 * costs nothing more with a callback installed. What happens on a miss is: each event below is
 * one call of the event callback, made on the thread whose launch missed.
 */
typedef enum jb_cache_event_kind {
    JB_CACHE_EVENT_DISK_HIT = 1,       /* loaded from the cache folder, no compiler; duration:
                                        * reading and loading it */
    JB_CACHE_EVENT_BUNDLE_HIT = 2,     /* loaded from a bundle, no compiler */
    JB_CACHE_EVENT_BUILD_START = 3,    /* the compiler starts */
    JB_CACHE_EVENT_BUILD_END = 4,      /* compiled and loaded; duration: since BUILD_START */
    JB_CACHE_EVENT_BUILD_FAIL = 5,     /* the compile or the load failed; status and message say
                                        * why (the compiler's log too); duration as BUILD_END */
    JB_CACHE_EVENT_DISK_STORE = 6,     /* compiled code written to the cache folder; duration:
                                        * the write (a failed write warns, see jb_set_log_callback,
                                        * and is no event) */
    JB_CACHE_EVENT_ENTRY_REJECTED = 7, /* an entry found for the module failed its checks and was
                                        * not loaded; message says why */
    JB_CACHE_EVENT_ENTRY_EVICTED = 8,  /* an entry that passed its checks was refused by the
                                        * loader for good (JB_ERR_LOAD): not used, not removed,
                                        * the compile that follows replaces it; status and
                                        * message: the loader's. A refusal for now (its EMFILE
                                        * or ENOMEM) is a warning and a miss, no event */
    JB_CACHE_EVENT_SEAL_VIOLATION = 9, /* a sealed process met a module that would compile:
                                        * status JB_ERR_SEALED when refused (no compiler runs),
                                        * JB_OK when it warns and compiles (once per module) */
    JB_CACHE_EVENT_REMOTE_HIT = 10,    /* loaded from the remote tier (see jb_remote_cache_set),
                                        * no compiler; duration: fetching, storing in the cache
                                        * folder and loading */
    JB_CACHE_EVENT_REMOTE_REJECTED = 11, /* a remote entry failed its checks (MAC, checksum,
                                          * lengths, key, size) or was refused by the loader:
                                          * not loaded; message says why */
    JB_CACHE_EVENT_REMOTE_STORE = 12,  /* compiled code written to the remote tier; duration:
                                        * the write */
    JB_CACHE_EVENT_FARM_BUILT = 13,    /* a compile farm worker reported the kernel built and
                                        * stored (jb_prewarm_build); on the farm's thread;
                                        * content_key: its cache folder entry */
    JB_CACHE_EVENT_FARM_FAILED = 14,   /* a compile farm worker failed the kernel, or was lost
                                        * (crashed, killed, hung) on it; message says why */
} jb_cache_event_kind;

/* One event. Every string is valid during the callback only, never NULL ("" when absent). Fields
 * are only ever appended: read those past the ones you know only when struct_size covers them. */
typedef struct jb_cache_event {
    size_t struct_size;          /* sizeof(jb_cache_event) of the library that made it */
    jb_cache_event_kind kind;
    const char *name;            /* the module's name: a custom kernel's name and source hash
                                  * ("scale_1f2e..."), a source module's name, the probe's */
    const char *key;             /* the module cache's key, "<device index>:<name>" */
    const char *content_key;     /* the hash of everything that makes the code (the cache
                                  * folder's entry name without suffix); "" for modules that skip
                                  * the disk cache (the probe) or while the disk cache is off */
    jb_device *device;
    uint64_t thread_id;          /* the calling thread's id (Linux: gettid()) */
    const char *tag;             /* the calling thread's tag (jb_set_thread_tag) when it happened */
    uint64_t time_ns;            /* when it happened (CLOCK_MONOTONIC): delivery may be later */
    uint64_t duration_ns;        /* for the kinds that say so above; else 0 */
    int status;                  /* JB_OK, or the failure's status */
    const char *message;         /* for a failure, a rejection or a seal violation; for a
                                  * build end, the compiler's warnings (at most 4 KiB); else "" */
} jb_cache_event;

typedef void (*jb_cache_event_fn)(void *user_data, const jb_cache_event *event);

/*
 * Sends each event to fn(user_data, event), replacing any earlier callback; fn NULL stops them.
 * Rules as the log callback's: fn runs on the thread the event happened on, on several at once,
 * so it must be thread-safe; it never runs under a library lock (events of a build, which runs
 * under the module cache's lock, are delivered in order once that lock is let go: time_ns says
 * when each happened), so it may call the library, launch, fork or wait for threads that do;
 * the calling thread's jb_last_error_message is kept across it. Events that fn's own calls cause
 * (a kernel it launches compiles) are not delivered to it (they would recurse); the counters
 * count them. jb_set_event_callback waits for calls in progress to return, so that once it
 * returns the previous user_data is no longer used; from inside fn it fails
 * (JB_ERR_INVALID_ARGUMENT), and so it must not be called from a thread fn waits for. May be
 * called from any thread.
 */
JB_API jb_status jb_set_event_callback(jb_cache_event_fn fn, void *user_data);
/* jb_set_event_callback, and the callback it replaced, as jb_exchange_log_callback does. */
JB_API jb_status jb_exchange_event_callback(jb_cache_event_fn *old_fn, void **old_user_data,
                                            jb_cache_event_fn fn, void *user_data);
/* "disk hit", "bundle hit", "build start", "build end", "build fail", "disk store",
 * "entry rejected", "entry evicted", "seal violation", "remote hit", "remote rejected",
 * "remote store"; NULL for other values. */
JB_API const char *jb_cache_event_kind_name(int kind);

/* The calling thread's tag, carried by the events it causes ("request 1234"): copied, at most
 * JB_THREAD_TAG_MAX bytes (longer: JB_ERR_INVALID_ARGUMENT, the tag unchanged); NULL or "" clears
 * it. Cheap enough to set per request: no allocation, no lock. Affects the calling thread only. */
#define JB_THREAD_TAG_MAX 255
JB_API jb_status jb_set_thread_tag(const char *tag);
/* The calling thread's tag; "" when none. Valid until the thread sets another. */
JB_API const char *jb_thread_tag(void);

/*
 * Sealed mode: once warm-up is over, a server forbids compiles. Sealed, a miss whose module is
 * not in the cache folder (or a bundle) would start the compiler; instead:
 *   JB_SEAL_WARN   one warning (see jb_set_log_callback) and one JB_CACHE_EVENT_SEAL_VIOLATION
 *                  per module and device, then it compiles as usual;
 *   JB_SEAL_ERROR  the launch fails with JB_ERR_SEALED naming the kernel, after a
 *                  JB_CACHE_EVENT_SEAL_VIOLATION event. No program starts at all, the cpu
 *                  compiler's version query included: its version comes from the cache
 *                  folder's record, which an unsealed process writes, or from a bundle's
 *                  entries built by that compiler (without either, nothing stored is found
 *                  for the cpu backend, and each cold kernel is refused).
 *                  Nothing is remembered: unsealed, the next launch compiles.
 * Modules in memory, in the cache folder or in a bundle load as usual. JB_SEAL_OFF unseals.
 * JITBRIDGE_SEAL=warn|error|off is read once, at the first call of jb_seal, jb_seal_mode_get or
 * the first compile, for worker processes; jb_seal overrides it. A security switch fails
 * closed: only an unset variable or exactly off, 0, false or no (any case) leaves the process
 * unsealed; any other value that is not warn or error (empty, as JITBRIDGE_SEAL=$MODE gives
 * with MODE unset, a stray space or \r, a typo) seals to refuse (JB_SEAL_ERROR), with one
 * warning that shows it (escaped, at most 64 bytes). Any thread, any time: the mode is read
 * right before the compiler would start, so a compile already running finishes.
 */
typedef enum jb_seal_mode {
    JB_SEAL_OFF = 0,
    JB_SEAL_WARN = 1,
    JB_SEAL_ERROR = 2,
} jb_seal_mode;
JB_API jb_status jb_seal(jb_seal_mode mode);
JB_API jb_seal_mode jb_seal_mode_get(void);

/*
 * Bundles: many entries in one file, to start a new replica with the code its fleet compiled.
 * A bundle is trusted as the cache folder is (a regular file owned by us or by root, writable by
 * no one else, under folders only we or root may change, or sticky ones); it is opened once
 * and read through that handle, and each entry is checked (SHA-256 of its key and of its key
 * and payload, the whole key compared) in memory before use. A bad entry, or one the loader
 * refuses, is skipped for the rest of the process with one warning, never loaded.
 */
/* Writes the cache folder's entries, or only those the manifest at `manifest` names (NULL: all),
 * into a new bundle at `path`, replaced whole once written (mode 0600, as entries are: chmod
 * it to share it). It is written as an unnamed file in the folder of `path` (O_TMPFILE) and
 * named only once whole: linked at `path` in one step where nothing is there, else linked under
 * a temporary name there (32 hex digits, .export.tmp) and renamed over what is at `path`. So a
 * failed export leaves what was at `path`, and one killed while it writes leaves nothing; one
 * killed between the temporary's link and the rename leaves the temporary. Where the kernel or
 * file system has no unnamed files, or /proc is not mounted, the file has its temporary name
 * from the start, which a killed export leaves. Each export first removes from the folder of
 * `path` the temporaries killed exports left: of that name, ours, regular, of one link, and
 * not locked (an export holds its file's lock while it has a temporary name, so a live one's
 * is never removed). A `path` whose last part is "." or "..", or of that temporary name, is
 * refused (JB_ERR_INVALID_ARGUMENT)
 * before anything is written. Entries that fail their checks, are of another key format or that
 * the manifest names but the cache lacks are left out and counted in *skipped. A bundle holds at
 * most 2^20 entries: past that, JB_ERR_UNSUPPORTED and nothing written (export those a manifest
 * names). */
JB_API jb_status jb_disk_cache_export(uint64_t *exported, uint64_t *skipped, const char *path,
                                      const char *manifest);
/* jb_disk_cache_export, and the bundle also carries each exported entry's source record
 * (README.md, "Source records"): the record in the cache folder's sources/ of that very kernel
 * (backend, module, entry names, source), read and held to the API's rules as
 * jb_manifest_sources_check holds it; a record that fails is left out (its entry is not).
 * *records counts the records carried (each content once). A bundle with records opens in
 * every reader: those that predate records pass them by. */
JB_API jb_status jb_disk_cache_export_sources(uint64_t *exported, uint64_t *skipped,
                                              uint64_t *records, const char *path,
                                              const char *manifest);
/* Checks every entry of the bundle at `path` and stores each good one in the cache folder
 * (created if needed); bad ones are counted in *skipped, each with a warning. A bundle that
 * carries source records has each imported entry's record checked (at most 4 MiB, hashed
 * against its name, parsed, held to the API's rules and of that entry's very key; never run)
 * and put into the cache folder's sources/, where later manifest lines name it. An error when
 * the bundle is refused or the cache folder cannot take the entries. */
JB_API jb_status jb_disk_cache_import(uint64_t *imported, uint64_t *skipped, const char *path);
/* jb_disk_cache_import, counting the source records put into sources/ (*records) and those
 * refused or not put there: a full disk, sources/ not a folder of ours (*refused; each with a
 * warning saying why, and its entry imported all the same). */
JB_API jb_status jb_disk_cache_import_sources(uint64_t *imported, uint64_t *skipped,
                                              uint64_t *records, uint64_t *refused,
                                              const char *path);
/* Adds the bundle at `path` as a read-only tier: a module not in memory nor in the cache folder
 * is loaded from the first bundle that holds its key, before any compile, and nothing is
 * copied. JITBRIDGE_CACHE_BUNDLE=FILE[:FILE...] adds bundles the same way at the first build
 * (one that cannot be used is a warning; a relative FILE is from the directory the process
 * started in, as for JITBRIDGE_CACHE_DIR). At most 64; the same file twice is added once. An
 * error when the bundle is refused (untrusted, malformed, of another key format). */
JB_API jb_status jb_disk_cache_add_bundle(const char *path);

/* What jb_prewarm did with the kernels it was given. */
typedef struct jb_prewarm_result {
    uint64_t loaded;  /* loaded into the module cache now */
    uint64_t present; /* in the module cache already */
    uint64_t missing; /* named by the manifest, but in neither the cache folder nor a bundle:
                       * compiled at their first use */
    uint64_t other;   /* for another device, compiler or library ABI: left alone */
    uint64_t failed;  /* bad, or refused by the loader: each with a warning */
} jb_prewarm_result;
/* Loads every kernel of the manifest or bundle at `path` (told apart by the bundle's magic)
 * that `device` can use into the module cache, compiling nothing, so that the first launch of
 * each finds its module in memory. A manifest's kernels come from the cache folder, else from
 * the bundles in use (jb_disk_cache_add_bundle, JITBRIDGE_CACHE_BUNDLE); a bundle given here
 * is trusted and checked as those are, and is not kept as a tier. Only code this process would
 * load under its own key is loaded (the same compiler, architecture and library ABI). With a
 * manifest written, each line prewarm writes names the kernel's source record where one passes
 * the API's rules and is of the kernel's key: the record the given manifest's line names (in the
 * cache folder), or the one the given bundle carries (put into the cache folder's sources/).
 * An error when the file cannot be read or the bundle is refused. */
JB_API jb_status jb_prewarm(jb_prewarm_result *out, jb_device *device, const char *path);

/* The compile farm. What jb_prewarm_build did with a manifest's or bundle's kernels. */
typedef struct jb_prewarm_build_result {
    uint64_t built;   /* compiled by a worker process and stored in the cache folder */
    uint64_t present; /* in the module cache or the cache folder already: not built again */
    uint64_t failed;  /* a worker's compile failed, or the worker crashed, hung (killed past
                       * the compile timeout) or was killed first: compiled in this process at
                       * its first use, with a warning each */
    uint64_t refused; /* a bad source record (hash, size, names, options, another kernel's,
                       * another key): never reaches a compiler; a warning each */
    uint64_t without_source; /* lines naming no source record: compiled at their first use */
    uint64_t other;   /* lines of another backend or architecture: left alone */
    uint64_t workers; /* worker processes started */
    jb_prewarm_result load; /* the jb_prewarm that followed the builds */
} jb_prewarm_build_result;
/* The most worker processes jb_prewarm_build runs at once. */
#define JB_PREWARM_BUILD_MAX_JOBS 1024
/* The first argument that makes a worker program's main call jb_prewarm_build_worker_main. */
#define JB_BUILD_WORKER_ARG "__build-worker"
/* Builds every kernel of the manifest or bundle at `path` that `device` lacks (in neither the
 * module cache nor the cache folder) from its source record (README.md, "The compile farm"), in
 * up to `jobs` (1 to JB_PREWARM_BUILD_MAX_JOBS) worker processes at once, each storing into the
 * cache folder under the host's leases; then loads the file's kernels as jb_prewarm does, so
 * that this process compiles nothing for the kernels the workers built. A bundle made under
 * other keys (another architecture, compiler or library ABI) is rebuilt from the records it
 * carries under this device's keys; its kernels without a record are counted in
 * without_source, with a warning. The workers are the program
 * `worker` (an absolute path; NULL: $JITBRIDGE_BUILD_WORKER), whose main hands its arguments to
 * jb_prewarm_build_worker_main; each is started with posix_spawn (never a fork of this
 * process), with only its result pipe (stdin and stderr on /dev/null), an empty signal mask,
 * default signal actions and this environment less JITBRIDGE_MANIFEST (JITBRIDGE_CACHE_DIR set
 * to the cache folder this process uses); is killed when a kernel takes it past the compile
 * timeout (JITBRIDGE_COMPILE_TIMEOUT_MS); and is reaped through its pidfd (by its pid where
 * pidfds are missing), also in a host that ignores SIGCHLD or reaps children itself: results
 * come over the pipe, never from an exit status. JB_ERR_INVALID_ARGUMENT for a NULL, a jobs count out of range or a worker that is
 * not an absolute path; JB_ERR_UNSUPPORTED in a setuid or setgid program (its
 * caller must not choose what is compiled or run) or with the cache folder off; JB_ERR_SEALED
 * in a process sealed to refuse (jb_seal: no compiler starts, in workers neither); JB_ERR_SYSTEM
 * when the manifest cannot be read or no worker can be started. A kernel a worker could not
 * build costs one compile at its first use, nothing else. May be called from any thread;
 * blocks the calling thread until the workers are done. */
JB_API jb_status jb_prewarm_build(jb_prewarm_build_result *out, jb_device *device,
                                  const char *path, unsigned jobs, const char *worker);
/* jb_prewarm_build in the background: a handle to a build under way. */
typedef struct jb_prewarm_build_job jb_prewarm_build_job;
/* A background build's counters so far. */
typedef struct jb_prewarm_build_progress {
    uint64_t total;   /* kernels given to workers (0 until the file is read) */
    uint64_t built;   /* reported built by their worker */
    uint64_t failed;  /* reported failed, or lost with their worker */
    uint64_t pending; /* total - built - failed: being built or waiting for a worker */
    uint64_t done;    /* 1 once the build and the load after it are over: wait returns at once */
} jb_prewarm_build_progress;
/* jb_prewarm_build on a thread of its own: the same refusals are returned here at once (before
 * anything is read), then *out is a handle and the build goes on while the caller serves.
 * A launch that misses a kernel a worker is building waits for that worker's lease on the
 * kernel (as another process's build is waited for) and loads what it stored: the kernel is
 * compiled once. The thread blocks every signal (no handler of the host runs on it) and holds
 * no library lock while its workers run. End it with jb_prewarm_build_wait or
 * jb_prewarm_build_detach (exactly one of them). JB_ERR_SYSTEM when no thread can start. */
JB_API jb_status jb_prewarm_build_start(jb_prewarm_build_job **out, jb_device *device,
                                        const char *path, unsigned jobs, const char *worker);
/* The job's counters now (any thread, while the job is not yet waited for or detached). */
JB_API jb_status jb_prewarm_build_poll(const jb_prewarm_build_job *job,
                                       jb_prewarm_build_progress *out);
/* Waits for the build and the load after it, fills *out (unless NULL) as jb_prewarm_build does
 * and returns its status (its message on the calling thread); the job is freed. */
JB_API jb_status jb_prewarm_build_wait(jb_prewarm_build_job *job, jb_prewarm_build_result *out);
/* Lets the build go on without a waiter: the job frees itself when it is over. */
JB_API void jb_prewarm_build_detach(jb_prewarm_build_job *job);
/* The number of processors this process may run on (sched_getaffinity), at least 1: the
 * command's default jobs count. */
JB_API unsigned jb_usable_processors(void);
/* A worker's whole main, for a program whose argv[1] is JB_BUILD_WORKER_ARG: argv[2] names the
 * device, each later argument a kernel ("<key's 64 hex>:<record's 64 hex>"); each record is
 * read and checked again, built (cache folder, leases, compiler) and reported on stdout, one
 * line per kernel. Returns the exit status (0; 2 for arguments it cannot use). */
JB_API int jb_prewarm_build_worker_main(int argc, char **argv);
/* Reads and checks every source record the manifest at `path` names (its lines' "source="
 * fields; README.md, "Manifests"), compiling and loading nothing: each record is read from the
 * cache folder without following a link or blocking, hashed against its name, held to at most
 * 4 MiB, parsed, and held to the rules of a kernel made through the API (names, flags, compiler
 * options, the options its source states); it must be of its line's backend, module and entry
 * names and, where this host has a device of the line's backend and architecture, make the
 * line's key again there. *checked counts the lines whose record passed, *keyed those whose
 * key was made again here. JB_ERR_INVALID_ARGUMENT with a message naming the record and what is wrong
 * at the first bad one (nothing on disk is changed); JB_ERR_UNSUPPORTED when the cache folder
 * is off; JB_ERR_SYSTEM when the manifest or a record cannot be read. May be called from any
 * thread. */
JB_API jb_status jb_manifest_sources_check(uint64_t *checked, uint64_t *keyed, const char *path);

/*
 * Keys. A disk cache entry (and a bundle's) is found by a key made of content only: the key
 * format, the library's ABI, the backend, the device's architecture, the compiler's identity
 * (its version and a hash of its program file, never the path it was named by: CC=gcc,
 * CC=/usr/bin/gcc and a link to it share entries), the module name, its entry points and the
 * source. Another compiler, option, define, dtype or architecture is another key; another cache
 * folder path or working directory is the same one. Stored code the loader refuses is removed
 * and compiled again, once, with a warning.
 *
 * Manifests. With JITBRIDGE_MANIFEST=FILE, a process appends to FILE (a relative one: from the
 * directory the process started in) one line for each kernel it builds or loads (once per
 * kernel and process): a regular file of ours that others may not write (else one warning and
 * no manifest), opened once for reading and appending, each line one write on an O_APPEND
 * handle, so that several processes may share it; a line another writer left cut (a full disk)
 * is ended by the next writer before its own line, where that writer can look (a local file it
 * may read, whose lock it gets within about a millisecond; a forked child opens the file anew
 * through /proc for a lock of its own). The descriptor is the library's: where the application
 * closes it and reuses its number, no more lines are written there (one warning), in that
 * process or a child it forks. A line is at most 16384 bytes; its
 * fields, separated by TABs: "jbm1", the key (64 lowercase hex digits: the SHA-256 of the key text; its
 * first 32 name the disk cache entry <those 32>.jbc), the backend, the device's architecture,
 * the module name, the entry names separated by commas, and how the process got it ("compiled",
 * "disk", "bundle", "remote" or "prewarm"). An eighth field, "source=" and 64 lowercase hex
 * digits, names the kernel's source record where one was kept (a cache folder marked as the
 * library's own; not on "prewarm" lines): the file sources/<those 64>.jbs in the cache folder,
 * the SHA-256 of its content, holding what builds the kernel again (README.md, "Manifests").
 * Readers skip lines of another first field and lines starting with '#', empty lines and lines
 * of fewer than seven fields, ignore fields past the seventh they do not know, and deduplicate
 * by key.
 */

/*
 * Coverage: which kernels of a manifest (JITBRIDGE_MANIFEST's file, the kernels a fleet's
 * processes built or loaded) this process would find without compiling, so that a deployment
 * knows before jb_seal whether sealing is safe. Nothing is compiled or loaded.
 */
typedef enum jb_coverage_source {
    JB_COVERAGE_MEMORY = 1,  /* in this process's module cache */
    JB_COVERAGE_DISK = 2,    /* in the cache folder, under the key this process makes */
    JB_COVERAGE_BUNDLE = 3,  /* in a bundle in use (jb_disk_cache_add_bundle,
                              * JITBRIDGE_CACHE_BUNDLE), under the key this process makes */
    JB_COVERAGE_COMPILE = 4, /* would compile: stored nowhere, or only for another compiler or
                              * library ABI (why says which) */
    JB_COVERAGE_OTHER = 5,   /* for another backend or architecture than the device's (with
                              * no device given: than any device of this host's) */
} jb_coverage_source;

/* One kernel; every string valid during the callback only, never NULL. Fields are only ever
 * appended (struct_size). */
typedef struct jb_coverage_kernel {
    size_t struct_size;
    jb_coverage_source source;
    const char *key;     /* 64 hex digits: the manifest's key */
    const char *backend; /* "cpu", "cuda", "rocm" */
    const char *target;  /* "x86_64-Linux", "sm_90", ... */
    const char *module;  /* the module's name */
    const char *entries; /* its entry points, separated by commas */
    const char *why;     /* for JB_COVERAGE_COMPILE and _OTHER, why; else "" */
    const char *device;  /* the device it was checked on ("cpu:0", "cuda:1"); "" for _OTHER */
} jb_coverage_kernel;
typedef void (*jb_coverage_fn)(void *user_data, const jb_coverage_kernel *kernel);

typedef struct jb_coverage_result {
    uint64_t memory, disk, bundle, compile, other; /* kernels, each counted once */
} jb_coverage_result;

/* Reads the manifest at `manifest` and, for each kernel it names (once per key, in the
 * manifest's order), says where a launch would get it from: counted in *out, and
 * passed to fn(user_data, kernel) unless fn is NULL (called under no library lock; it may call
 * the library). A stored entry is read and checked, and counts only when its key is the very
 * key this process makes for the module (same compiler, architecture and library ABI).
 * With `device` NULL, each kernel is checked on this host's device of the backend and
 * architecture its line names (the first such, set up if it was not: a cpu line on the cpu, a
 * cuda sm_90 line on a cuda device of sm_90), where a worker would launch it; it is
 * JB_COVERAGE_OTHER only when this host has no such device. With a device, only that device's
 * kernels are checked, and every other one is JB_COVERAGE_OTHER. Lines of another format, or
 * starting with '#', are skipped. An error (and *out all 0) when the manifest cannot be read or
 * memory runs out. May be called from any thread. */
JB_API jb_status jb_cache_coverage(jb_coverage_result *out, jb_device *device,
                                   const char *manifest, jb_coverage_fn fn, void *user_data);
/* "memory", "disk", "bundle", "compile", "other"; NULL for other values. */
JB_API const char *jb_coverage_source_name(int source);

#ifdef __cplusplus
}
#endif

#endif /* JITBRIDGE_H */
