/*
 * jitbridge_sys.h - entry points for tools, tests and benchmarks of the jitbridge C library, kept
 * out of jitbridge.h (as libgit2 keeps git2/sys/): no production path needs them. They are no
 * stable API: JB_ABI_VERSION covers jitbridge.h only, and these may change in any release.
 * `make install` leaves this header out; `make install-sys` installs it. The conventions of
 * jitbridge.h apply.
 */
#ifndef JITBRIDGE_SYS_H
#define JITBRIDGE_SYS_H

#include "jitbridge.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The race probe's kernel body (see jb_jit_race_probe_array): a static string, valid for the
 * process. Tools and tests that build the probe's kernel themselves use this one text. */
JB_API const char *jb_race_probe_body(void);

/*
 * The per-thread lookaside in front of the cache: once a thread has found a module, its later
 * lookups take no lock. On by default; switching it off (for benchmarks of the plain protocol)
 * affects lookups that start afterwards, in every thread.
 */
JB_API jb_status jb_set_lookaside_enabled(int enabled);
JB_API int jb_lookaside_enabled(void);

/* Which locks this build carries: 0 for a normal build. Test builds that remove a lock (to show
 * that the tests catch the race) return a bit per removed lock: 1 jit cache, 2 event pool,
 * 4 kernel configure. */
JB_API int jb_removed_locks(void);

/* ---- driver-call counting (jitbridge bench, tests) ---- */
/* One driver call and how many times the calling thread made it, in the CUDA spelling. */
typedef struct jb_driver_call_count {
    const char *name;   /* "cuLaunchKernel": a static string */
    uint64_t count;
} jb_driver_call_count;
/* Switches the counting of `device`'s driver calls on (nonzero) or off, for every thread of the
 * process; off by default, when the driver's entries are called directly, at no cost. Switch it
 * while no other thread calls into that backend. JB_ERR_UNSUPPORTED for the cpu and for ROCm. */
JB_API jb_status jb_driver_call_counting(jb_device *device, int enabled);
/* The calls the calling thread made into `device`'s driver while counting was on, since its last
 * reset: writes at most `capacity` (name, count) pairs in a fixed order, and in *out_count how
 * many calls were made at all (more than `capacity` means some were left out). `reset` nonzero:
 * the thread's counts start again from zero. */
JB_API jb_status jb_thread_driver_calls(jb_device *device, jb_driver_call_count *out,
                                        size_t capacity, size_t *out_count, int reset);

/* ---- benchmark support (jitbridge bench) ---- */
/* The probe's module is prepared, then `launches` bare backend launches of it, each followed by
 * an event record, run on the thread's default stream into one preallocated output; writes the
 * nanoseconds per launch, the stream drained. The baseline for the full probe launch path. */
JB_API jb_status jb_bench_raw_probe_launches(double *out_ns_per_launch, jb_array *input,
                                             int variant, int launches);
/* Runs only the backend's compiler on the kernel's source for `device` (no cache, no load) and
 * writes the nanoseconds it took. */
JB_API jb_status jb_bench_compile_only(double *out_ns, jb_custom_kernel *kernel,
                                       jb_device *device);

/* What one compile cost with a set of options, and what it made (jb_bench_compile_with). */
typedef struct jb_bench_compile_cost {
    double compile_ns;               /* the compiler alone */
    double load_ns;                  /* loading the code on the device given and finding the
                                      * kernel in it (PTX: the driver's JIT compile), 0 without
                                      * one */
    size_t code_bytes;               /* the code it made: a cubin, PTX, a code object, a .so */
    unsigned char code_sha256[32];   /* of that code: equal for the same code */
} jb_bench_compile_cost;
/* Compiles the kernel's own generated source for `backend` ("cpu", "cuda" or "rocm"; the
 * library must be built with it, but no device of it is needed), nothing cached, and writes what
 * it cost. `options` NULL (num_options 0): the library's own options, as a build runs them (a
 * GPU needs `arch`, "sm_90", or `load_on`'s). Otherwise these in place of the library's own: a
 * GPU compiler gets exactly these (the caller names the architecture:
 * "--gpu-architecture=compute_90" makes PTX), the cpu compiler these in place of its fixed flags
 * ("-O2", "-fPIC", "-shared", ...), then the kernel's options and its files; these are the
 * tool's own, not checked as a kernel's options are. With `load_on` (a device of that backend,
 * or NULL) the code is loaded there, its kernel found, timed, and unloaded. A sealed process
 * refuses, as for a build. A cpu .so names its temporary source file, so its checksum differs
 * from one compile to the next; a GPU's does not. */
JB_API jb_status jb_bench_compile_with(jb_bench_compile_cost *out, jb_custom_kernel *kernel,
                                       const char *backend, const char *arch,
                                       const char *const *options, size_t num_options,
                                       jb_device *load_on);

/* Where one cold first launch of the probe spends its time, step by step, in nanoseconds. */
typedef struct jb_bench_cold_steps {
    double compile_ns;       /* the compiler, inside the build */
    double load_ns;          /* loading the code object (cuModuleLoadData, dlopen) */
    double get_function_ns;  /* finding the kernel in it (cuModuleGetFunction, dlsym) */
    double disk_store_ns;    /* storing the code for later processes (0: probes skip the disk) */
    double configure_ns;     /* the kernel's one-time configure step */
    double stage_ns;         /* all of the staging: lookup, build, configure, output, event */
    double launch_ns;        /* the first launch call */
    double record_ns;        /* the buffer holds (the output's event is recorded lazily) */
    double sync_ns;          /* waiting for the kernel to finish */
    double total_ns;         /* the first launch as a caller sees it: staging to finished */
    double compile_again_ns; /* the compiler alone, right after, on the very same source and
                              * options: NVRTC's compute-cache hit, not a fair baseline */
} jb_bench_cold_steps;
/* One first launch of the probe `variant` (which must not be built yet) on the thread's default
 * stream, timed per step; the stream is drained. */
JB_API jb_status jb_bench_cold_probe_steps(jb_bench_cold_steps *out, jb_array *input,
                                           int variant);

/*
 * The raw decode control (jitbridge soak --decode raw): a kernel's launch staged once by the
 * library (lookup, build, outputs, holds, as jb_custom_kernel_launch_on on the thread's default
 * stream), after which each step is only the backend's launch of it, an event record and a wait
 * for that event, into the same fixed outputs: no lookup, no array, no hold, no allocation.
 * A launcher is used on the thread that made it, while that thread's default stream stays the
 * one it had then; the kernel and the inputs must outlive it. Not thread-safe.
 */
typedef struct jb_bench_raw_launcher jb_bench_raw_launcher;
/* Stages and runs one launch (arguments as for jb_custom_kernel_launch_on), and waits for it.
 * The launcher holds a reference on the stream and on the inputs' buffers until it is freed;
 * the kernel must outlive it. */
JB_API jb_status jb_bench_raw_launcher_new(jb_bench_raw_launcher **out, jb_custom_kernel *kernel,
                                           jb_array *const *inputs, size_t num_inputs,
                                           const jb_scalar *scalars, size_t num_scalars,
                                           const int64_t *const *output_shapes,
                                           const int *output_ndims,
                                           const jb_launch_shape *shape);
/* One step with these scalars (the kernel's count and dtypes): writes the nanoseconds of the
 * launch and event record, and of the wait for the event (both, also when the step fails). */
JB_API jb_status jb_bench_raw_launcher_step(jb_bench_raw_launcher *launcher,
                                            const jb_scalar *scalars, size_t num_scalars,
                                            uint64_t *out_launch_ns, uint64_t *out_wait_ns);
/* Copies output `output` to `dst` as jb_array_read does (`dst_bytes` must equal its size). */
JB_API jb_status jb_bench_raw_launcher_read(const jb_bench_raw_launcher *launcher, size_t output,
                                            void *dst, size_t dst_bytes);
/* Waits for the stream, then frees the launcher and its outputs; NULL is allowed. */
JB_API void jb_bench_raw_launcher_free(jb_bench_raw_launcher *launcher);

#ifdef __cplusplus
}
#endif

#endif /* JITBRIDGE_SYS_H */
