/* What every part above base/ shares: the backend table (struct jb_backend) that exec/, cache/
 * and kernels/ call the backends through, and the compiled-code and launch types it takes.
 * Nothing here is exported: the library is built with hidden visibility and only JB_API names
 * leave it. */
#ifndef JB_INTERNAL_H
#define JB_INTERNAL_H

#include "base/base.h"

/* ---- backends ---- */
typedef struct jb_backend jb_backend;
typedef struct jb_event jb_event;

/* Compiled code as bytes: a shared object, a cubin or a code object. */
typedef struct jb_blob {
    void *data;
    size_t size;
} jb_blob;

/* The limits of one custom kernel's launch. */
#define JB_KERNEL_MAX_ARRAYS 64 /* inputs and outputs together; also the most scalars */
#define JB_KERNEL_MAX_PARAMS 64  /* compile-time parameters; also the most defines */
#define JB_KERNEL_MAX_SHAPED 8   /* arrays whose shape a body sees */
/* A launch's scalar slots: the kernel's scalars, then nine per shaped array (ndim, dims). */
#define JB_KERNEL_MAX_SLOTS (JB_KERNEL_MAX_ARRAYS + JB_KERNEL_MAX_SHAPED * (1 + JB_MAX_NDIM))

/* Bytes per scalar argument in a launch: each value sits at the start of its own slot. */
#define JB_SCALAR_SLOT 8

/* Arguments of one launch: each array's device pointer and element count, inputs first, then
 * the scalars by value, one JB_SCALAR_SLOT each. */
typedef struct jb_launch_args {
    size_t count;
    void **pointers;
    uint64_t *sizes;
    uint64_t total_threads;
    size_t num_scalars;
    const unsigned char *scalars;
    /* A whole-source entry point: no arrays, every argument (a device pointer or a scalar) is a
     * slot, in order, and no thread count follows. */
    bool raw;
} jb_launch_args;

/* How a module is compiled: its JB_COMPILE_* flags and its caller's own compiler options
 * (compile_options.c), copied and checked; every array NULL when empty. */
typedef struct jb_compile_options {
    unsigned flags;
    const char *const *extra; /* more options for the backend's compiler, one argument each */
    size_t num_extra;
    const char *const *include_dirs; /* absolute folders, each searched for #include */
    size_t num_include_dirs;
    const char *target_arch; /* NULL: the device's */
} jb_compile_options;
/* Checks the options a caller gave (not the flags: jb__compile_options_check); `owner` names
 * the kernel or module. */
int jb__compiler_options_check(const char *owner, const jb_compile_options *options);
/* Copies `options` (the strings too) into *out; jb__compile_options_free lets them go. */
int jb__compile_options_copy(jb_compile_options *out, const jb_compile_options *options);
void jb__compile_options_free(jb_compile_options *options);
/* "compile flags F; options ...; include ...; target ..." for a source's first line. */
void jb__compile_options_describe(jb_strbuf *sb, const jb_compile_options *options);


/* The declarations every generated kernel source starts with: the dtypes as types and the
 * f32 <-> f16/bf16 conversions (dtype.c). */
const char *jb__dtype_prelude(jb_source_dialect dialect);
/* JB_OK when `scalar` has a dtype and, for bool, holds 0 or 1; `what` names the caller. */
int jb__scalar_check(const char *what, const jb_scalar *scalar);

struct jb_backend {
    const char *name; /* "cpu", "cuda", "rocm" */
    jb_source_dialect dialect;
    /* Names the compiler, its version and its options: part of every disk cache key. With
     * `may_run` false (a sealed process), starts no program, and fails where that leaves it
     * unknown. */
    int (*compiler_identity)(jb_device *dev, bool may_run, char *out, size_t len);
    /* Compiles `source` for the device with `options` (checked already); on failure returns
     * JB_ERR_COMPILE with the log. */
    int (*compile)(jb_device *dev, const char *module_name, const char *source,
                   const jb_compile_options *options, jb_blob *out);
    int (*module_load)(jb_device *dev, const jb_blob *code, void **out_module);
    int (*module_function)(jb_device *dev, void *module, const char *name, void **out_fn);
    /* Unloads a module no thread has used: one whose entries did not all resolve, never
     * published. A module in the cache is never unloaded. */
    void (*module_unload)(jb_device *dev, void *module);
    /* A stream of `priority` on the portable scale (0 normal, up to the device's
     * max_stream_priority; the caller clamps). */
    int (*stream_create)(jb_device *dev, int priority, void **out_stream);
    /* The stream's priority on the portable scale, as the device or system reports it now; a
     * negative status (the error set) when the query fails. */
    int (*stream_priority)(jb_device *dev, void *stream);
    void (*stream_destroy)(jb_device *dev, void *stream);
    int (*stream_synchronize)(jb_device *dev, void *stream);
    /* 1 once every piece of work queued on the stream so far is done, 0 while some runs; a
     * negative status (the error set) when the query fails. */
    int (*stream_query)(jb_device *dev, void *stream);
    int (*stream_wait_event)(jb_device *dev, void *stream, void *event);
    int (*event_create)(jb_device *dev, void **out_event);
    void (*event_destroy)(jb_device *dev, void *event);
    int (*event_record)(jb_device *dev, void *event, void *stream);
    int (*event_synchronize)(jb_device *dev, void *event);
    /* 1 once the work before the event's last record is done, 0 while it runs; a negative
     * status (the error set) when the query fails (a faulted device): the end is unknown. */
    int (*event_query)(jb_device *dev, void *event);
    int (*mem_alloc)(jb_device *dev, size_t bytes, void **out_ptr);
    void (*mem_free)(jb_device *dev, void *ptr);
    /* Returns once `src` may be reused. */
    int (*memcpy_htod)(jb_device *dev, void *stream, void *dst, const void *src, size_t bytes);
    /* Returns once `dst` holds the data; the caller waited for the work that writes `src`. On
     * no stream of the library's: a thread that only reads makes none. */
    int (*memcpy_dtoh)(jb_device *dev, void *dst, const void *src, size_t bytes);
    /* Fills `count` elements of `pattern_bytes` (1, 2, 4 or 8) at `dst` with `pattern`, before
     * the stream's later work; `dst` is a buffer no queued work uses. */
    int (*fill)(jb_device *dev, void *stream, void *dst, size_t count, const void *pattern,
                size_t pattern_bytes);
    int (*launch)(jb_device *dev, void *stream, void *fn, const uint32_t grid[3],
                  const uint32_t block[3], uint32_t shared_bytes, const jb_launch_args *args);
    /* A loaded kernel's attributes; max_threads_per_block 0 where the backend sets no limit
     * of its own (the cpu: the launch's limit stands, jb__kernel_attributes). */
    int (*kernel_attributes)(jb_device *dev, void *fn, jb_kernel_attributes *out);
    /* Applies a kernel's configured dynamic shared memory limit (NULL where meaningless). */
    int (*kernel_set_shared_limit)(jb_device *dev, void *fn, uint32_t bytes);
    /* Graphs (graph.c). capture_begin is NULL where there are none (a driver without them).
     * Between begin and end the calling thread's launches and fills on `stream` are recorded,
     * not run; another thread's work on it is not recorded (the cpu runs it) or, where the
     * driver captures it anyway, found at the end by the count of what was recorded. */
    int (*capture_begin)(jb_device *dev, void *stream);
    /* The handle of the launch the calling thread captured last on `stream`. */
    int (*capture_node)(jb_device *dev, void *stream, void **out_node);
    /* Ends the capture: the executable graph in *out_graph, unless `discard` (then nothing is
     * kept). `ops`: the launches and fills the library captured; a graph holding other work
     * is refused (an error, nothing kept). */
    int (*capture_end)(jb_device *dev, void *stream, size_t ops, bool discard, void **out_graph);
    /* Gives a launch of the graph new arguments, for its replays from the next on. */
    int (*graph_set_launch)(jb_device *dev, void *graph, void *node, void *fn,
                            const uint32_t grid[3], const uint32_t block[3],
                            uint32_t shared_bytes, const jb_launch_args *args);
    /* Queues one replay of the graph on `stream`. */
    int (*graph_launch)(jb_device *dev, void *graph, void *stream);
    void (*graph_destroy)(jb_device *dev, void *graph);
    /* The driver-call counter (gpu/driver_counts.c): on or off for the process; the calling
     * thread's counts (see jb_thread_driver_calls). NULL where there is no driver (the cpu). */
    int (*count_driver_calls)(bool on);
    size_t (*thread_driver_calls)(jb_driver_call_count *out, size_t capacity, bool reset);
    /* A global variable the module itself defines (not a function, not another object's):
     * its address on the device, its size in bytes, and whether the host may write it (a cpu
     * `const` object sits in read-only pages). JB_ERR_INVALID_ARGUMENT when it has none. */
    int (*module_global)(jb_device *dev, void *module, const char *name, void **out_ptr,
                         size_t *out_size, bool *out_writable);
};

extern const jb_backend jb__cpu_backend;
/* The cpu's stream priorities: each level lowers the worker thread's nice value by 5, from its
 * creator's, as far as the system permits (raising a thread's priority needs CAP_SYS_NICE or
 * RLIMIT_NICE room; without them a stream is made at the level it could get, 0 at worst). */
#define JB_CPU_MAX_STREAM_PRIORITY 4
/* The GPU backends: gpu/ compiled once per vendor (JB_VENDOR_CUDA, JB_VENDOR_HIP). Each
 * enumerate loads its vendor's libraries, then lists its GPUs into `devices` (at most `max`):
 * JB_OK with the count, or JB_ERR_NO_DEVICE with the reason ("cuda: libcuda.so.1 not found
 * ...") in `why`. */
/* bench_compile (jb_bench_compile_with) runs the vendor's compiler alone, loaded without a
 * driver if need be: with `options`, exactly those (the caller names the architecture); with
 * NULL, the library's own for `arch` and the kernel's options `own`, as a build compiles. */
#if defined(JB_WITH_CUDA)
extern const jb_backend jb__cuda_backend;
int jb__cuda_enumerate(jb_device *devices, int max, int *out_count, char *why, size_t why_len);
int jb__cuda_bench_compile(const char *arch, const char *const *options, size_t num_options,
                           const char *module_name, const char *source,
                           const jb_compile_options *own, jb_blob *out);
#endif
#if defined(JB_WITH_ROCM)
extern const jb_backend jb__rocm_backend;
int jb__rocm_enumerate(jb_device *devices, int max, int *out_count, char *why, size_t why_len);
int jb__rocm_bench_compile(const char *arch, const char *const *options, size_t num_options,
                           const char *module_name, const char *source,
                           const jb_compile_options *own, jb_blob *out);
#endif


/* ---- devices (exec/device.c sets them up; every backend call takes one) ---- */
typedef struct jb_event_pool {
    pthread_mutex_t mutex;
    jb_event **free_events;
    size_t count, capacity;
    atomic_size_t alive; /* the device's events: pooled, spare and in use */
} jb_event_pool;

/* A device's caching allocator (buffer.c): idle buffers by capacity bucket, 16 per doubling
 * from 512 bytes to 2^JB_BUFFER_MAX_LOG2, and the device's memory statistics. A warm launch
 * allocates nothing from the driver; every field is under `mutex`. */
#define JB_BUFFER_MAX_LOG2 47
#define JB_BUFFER_BUCKETS ((JB_BUFFER_MAX_LOG2 - 9) * 16 + 1)
typedef struct jb_buffer_cache {
    pthread_mutex_t mutex;
    struct jb_buffer *buckets[JB_BUFFER_BUCKETS]; /* idle buffers of one capacity, newest first */
    struct jb_buffer *oldest, *newest;            /* every idle buffer, in the order it went idle */
    uint64_t idle_cap;        /* idle bytes kept at most; the oldest go first */
    uint64_t live_bytes;      /* asked for by buffers in use */
    uint64_t peak_live_bytes; /* the most live bytes since the last counters reset */
    uint64_t reserved_bytes;  /* capacity taken from the driver: in use and idle */
    uint64_t idle_bytes;
    uint64_t allocations, frees, reuses, retries;
} jb_buffer_cache;

struct jb_device {
    int index; /* process-wide, the prefix of every cache key, in the order set up */
    jb_device_kind kind;
    const jb_backend *backend;
    int ordinal; /* among its backend's devices: the N of "cuda:N" */
    char name[256];
    char arch[160];
    uint64_t total_memory;
    int max_stream_priority; /* the most urgent stream priority, on the portable scale */
    jb_event_pool event_pool;
    jb_buffer_cache buffers;
    /* Every live stream of the device: a failed allocation or a trim lets go of their fired
     * holds, so finished work nobody synchronized does not keep its memory. */
    pthread_mutex_t streams_mutex;
    struct jb_stream *streams;
    atomic_bool walking_streams; /* an allocation lets go of idle streams' holds (stream.c) */
    atomic_uint retired_streams; /* streams left to the device by exiting threads */
};

#endif /* JB_INTERNAL_H */
