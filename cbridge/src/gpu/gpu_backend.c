/*
 * The GPU backend, written once in the CUDA driver API and NVRTC spelling; vendor.h maps it onto
 * HIP and hiprtc for ROCm, and every vendor call goes through the table gpu_loader.c fills.
 * Compiles go straight to a code object for the device's architecture
 * (sm_XY, or gcnArchName with its features). Every entry point first makes the device current on
 * the calling thread: CUDA contexts and HIP devices are current per thread, and stream workers
 * and user threads arrive here with nothing set.
 */
#include "../internal.h"
#include "vendor.h"

#include <stdlib.h>

static jb_gpu_context contexts[JB_MAX_DEVICES];
/* Per device, the stream its buffers are allocated and freed on with the driver's stream-ordered
 * allocator, or NULL for cuMemAlloc/cuMemFree. Those two take a lock that every launch in the
 * process waits on: on an H200, another thread allocating and freeing took one thread's launch
 * from 3.6 to 17.6 us at the median (decode step p99 15 -> 53 us); with cuMemAllocAsync, 16 us. */
static CUstream alloc_streams[JB_MAX_DEVICES];
/* Per device, the driver's least urgent stream priority (the default, 0 on CUDA and HIP): the
 * portable priority p is the driver's least - p (the driver's scale counts down to urgent). */
static int least_priorities[JB_MAX_DEVICES];

/* JITBRIDGE_STREAM_ORDERED_ALLOC=0 keeps cuMemAlloc/cuMemFree (to compare, or for a driver that
 * misbehaves); 1 or unset uses the stream-ordered allocator where the device has one. */
static bool stream_ordered_wanted(void)
{
    const char *text = getenv("JITBRIDGE_STREAM_ORDERED_ALLOC");
    if (!text || strcmp(text, "1") == 0)
        return true;
    if (strcmp(text, "0") == 0)
        return false;
    jb__warn("JITBRIDGE_STREAM_ORDERED_ALLOC=\"%s\" is neither 0 nor 1: the stream-ordered "
             "allocator stays on where the device has one",
             text);
    return true;
}

static int gpu_fail(CUresult result, const char *call)
{
    return jb__fail(result == CUDA_ERROR_NO_DEVICE ? JB_ERR_NO_DEVICE : JB_ERR_BACKEND,
                    "%s failed: %s (%s)", call, jb_gpu_error_name(result),
                    jb_gpu_error_text(result));
}

/* Calls `fn` through the table; a failure's message names the symbol as built. */
#define GPU_CHECK(fn, ...)                                                                         \
    do {                                                                                           \
        CUresult gpu_check_result_ = JB_GPU(fn)(__VA_ARGS__);                                      \
        if (gpu_check_result_ != CUDA_SUCCESS)                                                     \
            return gpu_fail(gpu_check_result_, JB_GPU_STR(fn));                                    \
    } while (0)

/* jb__fork_generation when this backend was set up: a process forked after that (a child of the
 * one that set it up) holds the parent's driver state, on which every call is invalid. */
static unsigned setup_generation;

/* The context this thread last made current through make_current: the driver keeps the current
 * context per thread, and only another library's call on this thread changes it behind ours. */
static _Thread_local jb_gpu_context thread_context;
static _Thread_local bool thread_context_known;

/* Every driver call but the set-up's comes after this: in a forked child it refuses, so that the
 * child never calls the driver on its parent's contexts, streams, events or memory (a read, a
 * free, a trim, a thread's exit). */
static int refuse_forked(jb_device *dev)
{
    JB_RETURN_IF(setup_generation !=
                     atomic_load_explicit(&jb__fork_generation, memory_order_relaxed),
                 JB_ERR_UNSUPPORTED,
                 "%s: this process was forked from one that had set %s up, and a forked child "
                 "cannot use its parent's GPU state; use the cpu here (a process forked before "
                 "its first use of %s may use it)",
                 dev->name, JB_GPU_BACKEND_NAME, JB_GPU_BACKEND_NAME);
    return JB_OK;
}

static int make_current(jb_device *dev)
{
    JB_FORWARD_IF_ERROR(refuse_forked(dev));
    CUresult r = jb_gpu_context_make_current(contexts[dev->ordinal]);
    thread_context_known = r == CUDA_SUCCESS;
    thread_context = contexts[dev->ordinal];
    return r == CUDA_SUCCESS ? JB_OK : gpu_fail(r, JB_GPU_STR(JB_GPU_MAKE_CURRENT_CALL));
}

/* For a call that names only objects of the device's context (a launch on its stream, an event's
 * record or query), made in whatever context this thread last made current, asking the driver
 * nothing: made in another context (another library switched this thread's), such a call fails
 * rather than act there. */
static int trust_current(jb_device *dev, bool *trusted)
{
    JB_FORWARD_IF_ERROR(refuse_forked(dev));
    *trusted = thread_context_known && thread_context == contexts[dev->ordinal];
    return *trusted ? JB_OK : make_current(dev);
}

/* `result = call` in the context trust_current trusted; failed there, once more after the driver
 * was asked which context is current and ours made so: the failure may be another library's
 * switch. A call that failed queued nothing, so the second is no repeat. */
#define TRUSTING_CURRENT(dev, result, call)                                                            do {                                                                                                   bool trusted_;                                                                                     JB_FORWARD_IF_ERROR(trust_current(dev, &trusted_));                                                result = (call);                                                                                   if (result != CUDA_SUCCESS && result != CUDA_ERROR_NOT_READY && trusted_) {                            JB_FORWARD_IF_ERROR(make_current(dev));                                                            result = (call);                                                                               }                                                                                              } while (0)

int JB_GPU_PREFIXED(enumerate)(jb_device *devices, int max, int *out_count, char *why,
                               size_t why_len)
{
    *out_count = 0;
    setup_generation = atomic_load_explicit(&jb__fork_generation, memory_order_relaxed);
    JB_FORWARD_IF_ERROR(JB_GPU_PREFIXED(load)(why, why_len));
    const char *failed = JB_GPU_STR(cuInit);
    CUresult r = JB_GPU(cuInit)(0);
    int count = 0;
    if (r == CUDA_SUCCESS) {
        failed = JB_GPU_STR(cuDeviceGetCount);
        r = JB_GPU(cuDeviceGetCount)(&count);
    }
    if (r != CUDA_SUCCESS) {
        const char *name = jb_gpu_error_name(r), *text = jb_gpu_error_text(r);
        snprintf(why, why_len, "%s: no device: %s failed: %s%s%s%s", JB_GPU_BACKEND_NAME, failed,
                 name, strcmp(name, text) ? " (" : "", strcmp(name, text) ? text : "",
                 strcmp(name, text) ? ")" : "");
        return JB_ERR_NO_DEVICE;
    }
    if (count == 0) {
        snprintf(why, why_len, "%s: no device: the driver reports none", JB_GPU_BACKEND_NAME);
        return JB_ERR_NO_DEVICE;
    }
    if (count > max)
        count = max;
    int found = 0;
    CUresult first_failure = CUDA_SUCCESS; /* said when no GPU opens */
    bool stream_ordered = stream_ordered_wanted();
    const char *first_failed = "";
    for (int ordinal = 0; ordinal < count; ordinal++) {
        jb_device *dev = &devices[found];
        CUdevice handle;
        size_t total = 0;
        failed = JB_GPU_STR(cuDeviceGet);
        r = JB_GPU(cuDeviceGet)(&handle, ordinal);
        if (r == CUDA_SUCCESS) {
            failed = "retaining its context";
            r = jb_gpu_context_retain(ordinal, &contexts[found]);
        }
        if (r != CUDA_SUCCESS) { /* a GPU we cannot open is not offered */
            if (first_failure == CUDA_SUCCESS) {
                first_failure = r;
                first_failed = failed;
            }
            continue;
        }
        JB_GPU(cuDeviceGetName)(dev->name, (int)sizeof dev->name, handle);
        int least = 0, greatest = 0;
        if (jb_gpu_context_make_current(contexts[found]) == CUDA_SUCCESS &&
            JB_GPU(cuCtxGetStreamPriorityRange)(&least, &greatest) == CUDA_SUCCESS &&
            greatest < least) {
            least_priorities[found] = least;
            dev->max_stream_priority = least - greatest;
        }
        jb_gpu_arch_name(ordinal, dev->arch, sizeof dev->arch);
        if (JB_GPU(cuDeviceTotalMem)(&total, handle) == CUDA_SUCCESS)
            dev->total_memory = total;
        /* Without it (an old driver, a device without pools), buffers use the plain calls. */
        if (stream_ordered && jb_gpu_memory_pools_supported(ordinal) &&
            (jb_gpu_context_make_current(contexts[found]) != CUDA_SUCCESS ||
             JB_GPU(cuStreamCreate)(&alloc_streams[found], CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS))
            alloc_streams[found] = NULL;
        dev->kind = JB_DEVICE_GPU;
        dev->backend = &JB_GPU_PREFIXED(backend);
        dev->ordinal = found;
        found++;
    }
    if (found == 0)
        snprintf(why, why_len, "%s: none of the %d GPU(s) could be opened: %s failed: %s (%s)",
                 JB_GPU_BACKEND_NAME, count, first_failed, jb_gpu_error_name(first_failure),
                 jb_gpu_error_text(first_failure));
    *out_count = found;
    thread_context_known = false; /* the set-up made contexts current without make_current */
    return found ? JB_OK : JB_ERR_NO_DEVICE;
}

static int gpu_compiler_identity(jb_device *dev, bool may_run, char *out, size_t len)
{
    (void)may_run; /* the runtime compiler's version is a library call, not a program */
    char version[64];
    jb_gpu_compiler_version(version, sizeof version);
    const char *lean = JB_GPU_LEAN_OPTION;
    snprintf(out, len, "%s; options %s%s%s%s", version, JB_GPU_ARCH_OPTION, dev->arch,
             lean ? " " : "", lean ? lean : "");
    return JB_OK;
}

/* What a source the compiler refused the first time returns when it may be tried again. */
#define REFUSED_ONCE (-1)

/* The program's log (the compiler's errors or warnings), NUL-ended, to be freed; NULL when it
 * has none or there is no memory for it. */
static char *program_log(nvrtcProgram program)
{
    size_t log_size = 0, log_bytes;
    char *log = NULL;
    if (JB_GPU(nvrtcGetProgramLogSize)(program, &log_size) == NVRTC_SUCCESS && log_size > 0 &&
        jb__add_size(log_size, 1, &log_bytes) && (log = malloc(log_bytes)) != NULL) {
        if (JB_GPU(nvrtcGetProgramLog)(program, log) != NVRTC_SUCCESS)
            log[0] = '\0';
        log[log_size] = '\0';
    }
    return log;
}

/* Runs the compiler on `source` with exactly `options` and takes its code (for a virtual
 * architecture, PTX with its NUL). JB_OK; on a refusal of the source, REFUSED_ONCE quietly
 * when `may_retry`, else JB_ERR_COMPILE with the log; other failures as they come. */
static int run_compiler(const char *module_name, const char *source, const char *target,
                        const char **options, int num_options, bool may_retry, jb_blob *out)
{
    nvrtcProgram program;
    nvrtcResult r = JB_GPU(nvrtcCreateProgram)(&program, source, module_name, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS)
        return jb__fail(JB_ERR_COMPILE, "creating the program '%s' failed: %s", module_name,
                        JB_GPU(nvrtcGetErrorString)(r));
    r = JB_GPU(nvrtcCompileProgram)(program, num_options, options);
    int status = JB_OK;
    if (r == NVRTC_ERROR_COMPILATION && may_retry) {
        status = REFUSED_ONCE;
    } else if (r != NVRTC_SUCCESS) {
        char *log = program_log(program);
        if (r == NVRTC_ERROR_COMPILATION) /* the source, not a resource: it fails again */
            jb__compile_rejected();
        status = jb__fail_with_log(JB_ERR_COMPILE, log, "compiling '%s' for %s: %s", module_name,
                                   target, JB_GPU(nvrtcGetErrorString)(r));
        free(log);
    } else {
        size_t size = 0;
        bool text = false;
        r = JB_GPU(jbGetCodeSize)(program, &size);
#if JB_GPU_HAS_PTX
        if (r != NVRTC_SUCCESS || size == 0) { /* compute_XY: no cubin, PTX */
            text = true;
            r = JB_GPU(nvrtcGetPTXSize)(program, &size);
        }
#endif
        void *code = r == NVRTC_SUCCESS && size > 0 ? malloc(size) : NULL;
        if (code) {
#if JB_GPU_HAS_PTX
            r = text ? JB_GPU(nvrtcGetPTX)(program, code) : JB_GPU(jbGetCode)(program, code);
#else
            r = JB_GPU(jbGetCode)(program, code);
#endif
        }
        (void)text;
        if (code && r == NVRTC_SUCCESS) {
            out->data = code;
            out->size = size;
            char *log = program_log(program); /* its warnings, if it gave any */
            jb__build_log_set(log);
            free(log);
        } else {
            free(code);
            status = jb__fail(JB_ERR_COMPILE, "reading the code of '%s' failed", module_name);
        }
    }
    JB_GPU(nvrtcDestroyProgram)(&program);
    return status;
}

/* Compiles for `arch` with the library's own options: the architecture, the lean option where
 * the vendor has one, the kernel's flags and options, then -I per include folder (each one
 * argument, checked already). A source the lean compile refuses (one that needs a default
 * header it leaves out) is compiled again without it: every source that compiled before the
 * lean option compiles now, to the same code. */
static int compile_for(const char *arch, const char *module_name, const char *source,
                       const jb_compile_options *o, jb_blob *out)
{
    size_t most = 4 + o->num_extra + o->num_include_dirs;
    const char **options = calloc(most, sizeof *options);
    char **includes = calloc(o->num_include_dirs + 1, sizeof *includes);
    char arch_option[sizeof((jb_device *)0)->arch + 96];
    snprintf(arch_option, sizeof arch_option, "%s%s", JB_GPU_ARCH_OPTION, arch);
    bool ok = options && includes;
    int num_options = 0;
    const char *lean = JB_GPU_LEAN_OPTION;
    if (ok) {
        options[num_options++] = arch_option;
        if (lean)
            options[num_options++] = lean;
        if (o->flags & JB_COMPILE_FAST_MATH)
            options[num_options++] = JB_GPU_FAST_MATH_OPTION;
        if (o->flags & JB_COMPILE_LINE_INFO)
            options[num_options++] = JB_GPU_LINE_INFO_OPTION;
        for (size_t i = 0; i < o->num_extra; i++)
            options[num_options++] = o->extra[i];
    }
    for (size_t i = 0; ok && i < o->num_include_dirs; i++) {
        size_t len = strlen(o->include_dirs[i]) + 3;
        ok = (includes[i] = malloc(len)) != NULL;
        if (ok) {
            snprintf(includes[i], len, "-I%s", o->include_dirs[i]);
            options[num_options++] = includes[i];
        }
    }
    int status = JB_ERR_OUT_OF_MEMORY;
    if (ok) {
        status = run_compiler(module_name, source, arch, options, num_options, lean != NULL, out);
        if (status == REFUSED_ONCE) { /* the arch stays first; the rest moves up over `lean` */
            memmove(options + 1, options + 2, (size_t)(num_options - 2) * sizeof *options);
            status = run_compiler(module_name, source, arch, options, num_options - 1, false, out);
        }
    }
    for (size_t i = 0; includes && i < o->num_include_dirs; i++)
        free(includes[i]);
    free(includes);
    free(options);
    if (!ok)
        return jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory for the compiler's options");
    return status;
}

static int gpu_compile(jb_device *dev, const char *module_name, const char *source,
                       const jb_compile_options *o, jb_blob *out)
{
    return compile_for(o->target_arch ? o->target_arch : dev->arch, module_name, source, o, out);
}

int JB_GPU_PREFIXED(bench_compile)(const char *arch, const char *const *options,
                                   size_t num_options, const char *module_name,
                                   const char *source, const jb_compile_options *own,
                                   jb_blob *out)
{
    char why[512];
    int status = JB_GPU_PREFIXED(load_compiler)(why, sizeof why);
    JB_RETURN_IF(status != JB_OK, status, "%s", why);
    if (!options) {
        JB_RETURN_IF(!arch, JB_ERR_INVALID_ARGUMENT,
                     "the library's own options need an architecture: name one or a device");
        return compile_for(arch, module_name, source, own, out);
    }
    const char *copy[64]; /* hiprtc's prototype takes them as not const */
    JB_RETURN_IF(num_options > sizeof copy / sizeof *copy, JB_ERR_INVALID_ARGUMENT,
                 "%zu compiler options: 64 at most", num_options);
    memcpy(copy, options, num_options * sizeof *options);
    return run_compiler(module_name, source, arch ? arch : "the options' architecture", copy,
                        (int)num_options, false, out);
}

static int gpu_module_load(jb_device *dev, const jb_blob *code, void **out_module)
{
    JB_FORWARD_IF_ERROR(make_current(dev));
    CUmodule module;
    CUresult r = JB_GPU(cuModuleLoadData)(&module, code->data);
    /* Out of memory is the device's state now, not a verdict on the code: not JB_ERR_LOAD, so a
     * bundle keeps the entry and a later load tries it again. */
    JB_RETURN_IF(r == CUDA_ERROR_OUT_OF_MEMORY, JB_ERR_OUT_OF_MEMORY,
                 "the device has no memory for the module now: %s: %s (%s)",
                 JB_GPU_STR(cuModuleLoadData), jb_gpu_error_name(r), jb_gpu_error_text(r));
    JB_RETURN_IF(r != CUDA_SUCCESS, JB_ERR_LOAD, "the driver rejected the module: %s: %s (%s)",
                 JB_GPU_STR(cuModuleLoadData), jb_gpu_error_name(r), jb_gpu_error_text(r));
    *out_module = (void *)module;
    return JB_OK;
}

/* Finds only the module's own kernels: a cubin or code object is loaded whole and searches no
 * other object (unlike dlsym on the cpu), and a variable is never a function. */
static int gpu_module_function(jb_device *dev, void *module, const char *name, void **out_fn)
{
    JB_FORWARD_IF_ERROR(make_current(dev));
    CUfunction fn;
    CUresult r = JB_GPU(cuModuleGetFunction)(&fn, (CUmodule)module, name);
    JB_RETURN_IF(r != CUDA_SUCCESS, JB_ERR_LOAD, "the module has no function '%s': %s", name,
                 jb_gpu_error_name(r));
    *out_fn = (void *)fn;
    return JB_OK;
}

static void gpu_module_unload(jb_device *dev, void *module)
{
    if (JB_GPU(cuModuleUnload) && make_current(dev) == JB_OK) /* a faulted device: it stays */
        JB_GPU(cuModuleUnload)((CUmodule)module);
}

static int gpu_stream_create(jb_device *dev, int priority, void **out_stream)
{
    JB_FORWARD_IF_ERROR(make_current(dev));
    CUstream stream;
    /* Non-blocking: per-thread streams must not serialise with the legacy default stream. */
    GPU_CHECK(cuStreamCreateWithPriority, &stream, CU_STREAM_NON_BLOCKING,
              least_priorities[dev->ordinal] - priority);
    *out_stream = (void *)stream;
    return JB_OK;
}

static int gpu_stream_priority(jb_device *dev, void *stream)
{
    int status = make_current(dev);
    if (status != JB_OK)
        return -status;
    int native = 0;
    CUresult r = JB_GPU(cuStreamGetPriority)((CUstream)stream, &native);
    if (r != CUDA_SUCCESS)
        return -gpu_fail(r, JB_GPU_STR(cuStreamGetPriority));
    return least_priorities[dev->ordinal] - native;
}

static void gpu_stream_destroy(jb_device *dev, void *stream)
{
    if (make_current(dev) == JB_OK)
        JB_GPU(cuStreamDestroy)((CUstream)stream);
}

static int gpu_stream_synchronize(jb_device *dev, void *stream)
{
    JB_FORWARD_IF_ERROR(make_current(dev));
    GPU_CHECK(cuStreamSynchronize, (CUstream)stream);
    return JB_OK;
}

/* A query's answer (a stream's, an event's): 1 done, 0 not yet, else a negative status. An error
 * is not "done": the work may still use its buffers (the caller keeps them). */
static int query_answer(CUresult r, const char *call)
{
    if (r == CUDA_ERROR_NOT_READY)
        return 0;
    return r == CUDA_SUCCESS ? 1 : -gpu_fail(r, call);
}

static int gpu_stream_query(jb_device *dev, void *stream)
{
    int status = make_current(dev);
    if (status != JB_OK)
        return -status;
    return query_answer(JB_GPU(cuStreamQuery)((CUstream)stream), JB_GPU_STR(cuStreamQuery));
}

static int gpu_stream_wait_event(jb_device *dev, void *stream, void *event)
{
    JB_FORWARD_IF_ERROR(make_current(dev));
    GPU_CHECK(cuStreamWaitEvent, (CUstream)stream, (CUevent)event, 0);
    return JB_OK;
}

static int gpu_event_create(jb_device *dev, void **out_event)
{
    JB_FORWARD_IF_ERROR(make_current(dev));
    CUevent event;
    GPU_CHECK(cuEventCreate, &event, CU_EVENT_DISABLE_TIMING);
    *out_event = (void *)event;
    return JB_OK;
}

static void gpu_event_destroy(jb_device *dev, void *event)
{
    if (make_current(dev) == JB_OK)
        JB_GPU(cuEventDestroy)((CUevent)event);
}

static int gpu_event_record(jb_device *dev, void *event, void *stream)
{
    CUresult r;
    TRUSTING_CURRENT(dev, r, JB_GPU(cuEventRecord)((CUevent)event, (CUstream)stream));
    return r == CUDA_SUCCESS ? JB_OK : gpu_fail(r, JB_GPU_STR(cuEventRecord));
}

static int gpu_event_synchronize(jb_device *dev, void *event)
{
    JB_FORWARD_IF_ERROR(make_current(dev));
    GPU_CHECK(cuEventSynchronize, (CUevent)event);
    return JB_OK;
}

/* A query's answer: the status as a negative number when the context could not be made. */
static int query_event(jb_device *dev, void *event, CUresult *out)
{
    TRUSTING_CURRENT(dev, *out, JB_GPU(cuEventQuery)((CUevent)event));
    return JB_OK;
}

static int gpu_event_query(jb_device *dev, void *event)
{
    CUresult r;
    int status = query_event(dev, event, &r);
    return status != JB_OK ? -status : query_answer(r, JB_GPU_STR(cuEventQuery));
}

static int gpu_mem_alloc(jb_device *dev, size_t bytes, void **out_ptr)
{
    JB_FORWARD_IF_ERROR(make_current(dev));
    CUstream stream = alloc_streams[dev->ordinal];
    CUdeviceptr ptr;
    const char *call = stream ? JB_GPU_STR(cuMemAllocAsync) : JB_GPU_STR(cuMemAlloc);
    CUresult r = stream ? JB_GPU(cuMemAllocAsync)(&ptr, bytes, stream)
                        : JB_GPU(cuMemAlloc)(&ptr, bytes);
    /* Every stream may use it once the allocation's place on `stream` is reached. */
    if (r == CUDA_SUCCESS && stream &&
        (r = JB_GPU(cuStreamSynchronize)(stream)) != CUDA_SUCCESS) {
        call = JB_GPU_STR(cuMemAllocAsync) ", then " JB_GPU_STR(cuStreamSynchronize);
        JB_GPU(cuMemFreeAsync)(ptr, stream);
    }
    /* Only the vendor's out-of-memory is JB_ERR_OUT_OF_MEMORY: the cache frees idle buffers and
     * retries on it, never on a fault. */
    JB_RETURN_IF(r != CUDA_SUCCESS,
                 r == CUDA_ERROR_OUT_OF_MEMORY ? JB_ERR_OUT_OF_MEMORY : JB_ERR_BACKEND,
                 "allocating %zu bytes on %s (%s): %s", bytes, dev->name, call,
                 jb_gpu_error_name(r));
    *out_ptr = (void *)(uintptr_t)ptr;
    return JB_OK;
}

/* Called once no work uses the buffer (the stream's holds saw to that). */
static void gpu_mem_free(jb_device *dev, void *ptr)
{
    if (make_current(dev) != JB_OK)
        return;
    CUstream stream = alloc_streams[dev->ordinal];
    if (!stream) {
        JB_GPU(cuMemFree)((CUdeviceptr)(uintptr_t)ptr);
        return;
    }
    /* The wait lets the driver give the memory back now, as cuMemFree does (the pool keeps
     * nothing past its release threshold, 0 by default). */
    if (JB_GPU(cuMemFreeAsync)((CUdeviceptr)(uintptr_t)ptr, stream) == CUDA_SUCCESS)
        JB_GPU(cuStreamSynchronize)(stream);
}

static int gpu_memcpy_htod(jb_device *dev, void *stream, void *dst, const void *src, size_t bytes)
{
    JB_FORWARD_IF_ERROR(make_current(dev));
    /* Not const: HIP's prototype takes void *, and it does not write through it. */
    GPU_CHECK(cuMemcpyHtoDAsync, (CUdeviceptr)(uintptr_t)dst, (void *)src, bytes,
              (CUstream)stream);
    if (JB_GPU_HTOD_SYNC)
        GPU_CHECK(cuStreamSynchronize, (CUstream)stream);
    return JB_OK;
}

static int gpu_fill(jb_device *dev, void *stream, void *dst, size_t count, const void *pattern,
                    size_t pattern_bytes)
{
    JB_FORWARD_IF_ERROR(make_current(dev));
    CUdeviceptr at = (CUdeviceptr)(uintptr_t)dst;
    uint64_t value = 0;
    memcpy(&value, pattern, pattern_bytes);
    if (pattern_bytes == 8 && (uint32_t)value == (uint32_t)(value >> 32)) {
        pattern_bytes = 4; /* zero, and any value whose halves match */
        count *= 2;
    }
    if (pattern_bytes == 1)
        GPU_CHECK(cuMemsetD8Async, at, (unsigned char)value, count, (CUstream)stream);
    else if (pattern_bytes == 2)
        GPU_CHECK(cuMemsetD16Async, at, (unsigned short)value, count, (CUstream)stream);
    else if (pattern_bytes == 4)
        GPU_CHECK(cuMemsetD32Async, at, (unsigned int)value, count, (CUstream)stream);
    else if (count) { /* no 64-bit memset: one element, then copies that double what is set */
        /* That element's copy reads host memory gone by the time a captured graph replays. */
        JB_RETURN_IF(jb_gpu_stream_capturing((CUstream)stream), JB_ERR_UNSUPPORTED,
                     "an initial value of 8 bytes whose halves differ cannot be captured in a "
                     "graph on %s (fill such an output outside the capture)",
                     dev->name);
        JB_FORWARD_IF_ERROR(gpu_memcpy_htod(dev, stream, dst, &value, 8));
        for (size_t set = 1; set < count; set *= 2) {
            size_t more = count - set < set ? count - set : set;
            GPU_CHECK(cuMemcpyDtoDAsync, at + set * 8, at, more * 8, (CUstream)stream);
        }
    }
    return JB_OK;
}

/* Per device, idle streams for reads (device-to-host copies), so that a thread that only reads
 * arrays makes no stream of its own. Not the driver's per-thread stream: once a process has used
 * one, the driver's exit handler crashes in a forked child that leaves through exit() (CUDA 13.0,
 * H200). Slots are taken and put back by atomic exchange, never under a lock a fork could catch. */
#define READ_STREAMS 16
static _Atomic(CUstream) read_streams[JB_MAX_DEVICES][READ_STREAMS];

static int take_read_stream(jb_device *dev, CUstream *out)
{
    for (int i = 0; i < READ_STREAMS; i++) {
        *out = atomic_exchange_explicit(&read_streams[dev->ordinal][i], NULL, memory_order_acquire);
        if (*out)
            return JB_OK;
    }
    GPU_CHECK(cuStreamCreate, out, CU_STREAM_NON_BLOCKING);
    return JB_OK;
}

/* Back into a free slot; with every slot full (more readers at once than slots), destroyed. */
static void put_read_stream(jb_device *dev, CUstream stream)
{
    for (int i = 0; i < READ_STREAMS; i++) {
        CUstream empty = NULL;
        if (atomic_compare_exchange_strong_explicit(&read_streams[dev->ordinal][i], &empty, stream,
                                                    memory_order_release, memory_order_relaxed))
            return;
    }
    JB_GPU(cuStreamDestroy)(stream);
}

static int gpu_memcpy_dtoh(jb_device *dev, void *dst, const void *src, size_t bytes)
{
    JB_FORWARD_IF_ERROR(make_current(dev));
    CUstream stream;
    JB_FORWARD_IF_ERROR(take_read_stream(dev, &stream));
    /* Non-blocking, so the copy waits for none of the library's streams (the caller has waited
     * for the array's writers). */
    CUresult r = JB_GPU(cuMemcpyDtoHAsync)(dst, (CUdeviceptr)(uintptr_t)src, bytes, stream);
    const char *call = JB_GPU_STR(cuMemcpyDtoHAsync);
    if (r == CUDA_SUCCESS) {
        r = JB_GPU(cuStreamSynchronize)(stream);
        call = JB_GPU_STR(cuStreamSynchronize);
    }
    if (r != CUDA_SUCCESS) {
        JB_GPU(cuStreamDestroy)(stream); /* it may hold the failure: not for the next reader */
        return gpu_fail(r, call);
    }
    put_read_stream(dev, stream);
    return JB_OK;
}

/* Room for a launch's kernel parameters. */
#define MAX_PARAMS (2 * (JB_KERNEL_MAX_ARRAYS + 1) + JB_KERNEL_MAX_SLOTS + 1)

/* The kernel parameters of a launch, as cuLaunchKernel takes them: pointers into `args`, and to
 * *total (the thread count, which the caller keeps alive for the call). The generated kernel
 * takes (pointer, element count) per array, the scalars by value, then the thread count. */
static int launch_params(const jb_launch_args *args, uint64_t *total, void **params)
{
    JB_RETURN_IF(args->count > JB_KERNEL_MAX_ARRAYS + 1 || args->num_scalars > JB_KERNEL_MAX_SLOTS,
                 JB_ERR_LAUNCH, "too many kernel arguments");
    *total = args->total_threads;
    size_t n = 0;
    for (size_t i = 0; i < args->count; i++) {
        params[n++] = &args->pointers[i];
        params[n++] = &args->sizes[i];
    }
    for (size_t i = 0; i < args->num_scalars; i++)
        params[n++] = (void *)(args->scalars + i * JB_SCALAR_SLOT);
    if (!args->raw) /* a whole-source entry takes exactly its own arguments */
        params[n] = total;
    return JB_OK;
}

static int gpu_launch(jb_device *dev, void *stream, void *fn, const uint32_t grid[3],
                      const uint32_t block[3], uint32_t shared_bytes, const jb_launch_args *args)
{
    void *params[MAX_PARAMS];
    uint64_t total;
    JB_FORWARD_IF_ERROR(launch_params(args, &total, params));
    CUresult r;
    TRUSTING_CURRENT(dev, r,
                     JB_GPU(cuLaunchKernel)((CUfunction)fn, grid[0], grid[1], grid[2], block[0],
                                            block[1], block[2], shared_bytes, (CUstream)stream,
                                            params, NULL));
    JB_RETURN_IF(r != CUDA_SUCCESS, JB_ERR_LAUNCH, "launching on %s: %s (%s)", dev->name,
                 jb_gpu_error_name(r), jb_gpu_error_text(r));
    return JB_OK;
}

static int gpu_kernel_set_shared_limit(jb_device *dev, void *fn, uint32_t bytes)
{
    JB_FORWARD_IF_ERROR(make_current(dev));
    GPU_CHECK(cuFuncSetAttribute, (CUfunction)fn,
              CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)bytes);
    return JB_OK;
}

/* The driver's attributes of a loaded kernel; each query is a plain read of the loaded image. */
static int gpu_kernel_attributes(jb_device *dev, void *fn, jb_kernel_attributes *out)
{
    JB_RETURN_IF(!JB_GPU(cuFuncGetAttribute), JB_ERR_UNSUPPORTED,
                 "the %s driver has no %s: kernel attributes need a newer driver",
                 JB_GPU_BACKEND_NAME, JB_GPU_STR(cuFuncGetAttribute));
    JB_FORWARD_IF_ERROR(make_current(dev));
    int registers, max_threads, shared, local;
    GPU_CHECK(cuFuncGetAttribute, &registers, CU_FUNC_ATTRIBUTE_NUM_REGS, (CUfunction)fn);
    GPU_CHECK(cuFuncGetAttribute, &max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
              (CUfunction)fn);
    GPU_CHECK(cuFuncGetAttribute, &shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, (CUfunction)fn);
    GPU_CHECK(cuFuncGetAttribute, &local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, (CUfunction)fn);
    JB_RETURN_IF(registers < 0 || max_threads < 0 || shared < 0 || local < 0, JB_ERR_BACKEND,
                 "%s: %s gave a negative attribute", dev->name, JB_GPU_STR(cuFuncGetAttribute));
    *out = (jb_kernel_attributes){registers, max_threads, (size_t)shared, (size_t)local};
    return JB_OK;
}

/* ---- graphs: stream capture, in relaxed mode (other threads' allocations and this one's stay
 * allowed; the library never waits on or queries the capturing stream meanwhile) ---- */

typedef struct gpu_graph {
    CUgraph graph; /* the captured one: its nodes are what updates name */
    CUgraphExec exec;
} gpu_graph;

static bool graphs_supported(void)
{
#define JB_GPU_PRESENT(fn) &&JB_GPU(fn)
    return true JB_GPU_GRAPH_CALLS(JB_GPU_PRESENT);
#undef JB_GPU_PRESENT
}

static int gpu_capture_begin(jb_device *dev, void *stream)
{
    JB_RETURN_IF(!graphs_supported(), JB_ERR_UNSUPPORTED,
                 "%s: the driver has no graphs (" JB_GPU_STR(cuStreamBeginCapture) " or another "
                 "graph call is missing)",
                 dev->name);
    JB_FORWARD_IF_ERROR(make_current(dev));
    GPU_CHECK(cuStreamBeginCapture, (CUstream)stream, CU_STREAM_CAPTURE_MODE_RELAXED);
    return JB_OK;
}

static int gpu_capture_node(jb_device *dev, void *stream, void **out_node)
{
    JB_FORWARD_IF_ERROR(make_current(dev));
    CUgraphNode node = NULL;
    size_t count = 0;
    CUresult r = jb_gpu_capture_last_node((CUstream)stream, &node, &count);
    if (r != CUDA_SUCCESS)
        return gpu_fail(r, JB_GPU_STR(cuStreamGetCaptureInfo));
    JB_RETURN_IF(count != 1 || !node, JB_ERR_BACKEND,
                 "the capture's last work is not one launch (%zu nodes lead to it)", count);
    *out_node = (void *)node;
    return JB_OK;
}

static int gpu_capture_end(jb_device *dev, void *stream, size_t ops, bool discard,
                           void **out_graph)
{
    *out_graph = NULL;
    JB_FORWARD_IF_ERROR(make_current(dev));
    CUgraph graph = NULL;
    CUresult r = JB_GPU(cuStreamEndCapture)((CUstream)stream, &graph);
    if (r != CUDA_SUCCESS) {
        if (graph)
            JB_GPU(cuGraphDestroy)(graph);
        return gpu_fail(r, JB_GPU_STR(cuStreamEndCapture));
    }
    size_t nodes = 0;
    if (!discard && (r = JB_GPU(cuGraphGetNodes)(graph, NULL, &nodes)) != CUDA_SUCCESS) {
        JB_GPU(cuGraphDestroy)(graph);
        return gpu_fail(r, JB_GPU_STR(cuGraphGetNodes));
    }
    if (discard || nodes != ops) {
        JB_GPU(cuGraphDestroy)(graph);
        JB_RETURN_IF(!discard, JB_ERR_INVALID_ARGUMENT,
                     "the captured graph holds %zu operations, the capturing thread's launches "
                     "and fills %zu: another thread's work got into the capture (a launch on a "
                     "capturing stream from another thread)",
                     nodes, ops);
        return JB_OK;
    }
    gpu_graph *g = calloc(1, sizeof *g);
    if (!g) {
        JB_GPU(cuGraphDestroy)(graph);
        return jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory for a graph");
    }
    g->graph = graph;
    r = JB_GPU(cuGraphInstantiateWithFlags)(&g->exec, graph, 0);
    if (r != CUDA_SUCCESS) {
        JB_GPU(cuGraphDestroy)(graph);
        free(g);
        return gpu_fail(r, JB_GPU_STR(cuGraphInstantiateWithFlags));
    }
    *out_graph = g;
    return JB_OK;
}

static int gpu_graph_set_launch(jb_device *dev, void *graph, void *node, void *fn,
                                const uint32_t grid[3], const uint32_t block[3],
                                uint32_t shared_bytes, const jb_launch_args *args)
{
    JB_FORWARD_IF_ERROR(make_current(dev));
    gpu_graph *g = graph;
    void *params[MAX_PARAMS];
    uint64_t total;
    JB_FORWARD_IF_ERROR(launch_params(args, &total, params));
    CUresult r = jb_gpu_graph_set_kernel(g->exec, (CUgraphNode)node, (CUfunction)fn, grid, block,
                                         shared_bytes, params);
    return r == CUDA_SUCCESS ? JB_OK : gpu_fail(r, JB_GPU_STR(cuGraphExecKernelNodeSetParams));
}

static int gpu_graph_launch(jb_device *dev, void *graph, void *stream)
{
    JB_FORWARD_IF_ERROR(make_current(dev));
    GPU_CHECK(cuGraphLaunch, ((gpu_graph *)graph)->exec, (CUstream)stream);
    return JB_OK;
}

static void gpu_graph_destroy(jb_device *dev, void *graph)
{
    gpu_graph *g = graph;
    if (!g)
        return;
    if (make_current(dev) == JB_OK) {
        JB_GPU(cuGraphExecDestroy)(g->exec);
        JB_GPU(cuGraphDestroy)(g->graph);
    }
    free(g);
}

/* A `__device__` or `__constant__` variable of the module: a device address the copies reach.
 * A driver without the call (it is optional) refuses every global. */
static int gpu_module_global(jb_device *dev, void *module, const char *name, void **out_ptr,
                             size_t *out_size, bool *out_writable)
{
    JB_RETURN_IF(!JB_GPU(cuModuleGetGlobal), JB_ERR_UNSUPPORTED,
                 "the %s driver has no %s: module globals need a newer driver",
                 JB_GPU_BACKEND_NAME, JB_GPU_STR(cuModuleGetGlobal));
    JB_FORWARD_IF_ERROR(make_current(dev));
    CUdeviceptr ptr;
    size_t bytes = 0;
    CUresult r = JB_GPU(cuModuleGetGlobal)(&ptr, &bytes, (CUmodule)module, name);
    JB_RETURN_IF(r != CUDA_SUCCESS, JB_ERR_INVALID_ARGUMENT,
                 "the module has no global variable '%s': %s: %s", name,
                 JB_GPU_STR(cuModuleGetGlobal), jb_gpu_error_name(r));
    *out_ptr = (void *)ptr;
    *out_size = bytes;
    *out_writable = true; /* __constant__ is read-only to kernels, not to the host's copies */
    return JB_OK;
}

const jb_backend JB_GPU_PREFIXED(backend) = {
    .name = JB_GPU_BACKEND_NAME,
    .dialect = JB_DIALECT_CUDA,
    .compiler_identity = gpu_compiler_identity,
    .compile = gpu_compile,
    .module_load = gpu_module_load,
    .module_function = gpu_module_function,
    .module_unload = gpu_module_unload,
    .stream_create = gpu_stream_create,
    .stream_priority = gpu_stream_priority,
    .stream_destroy = gpu_stream_destroy,
    .stream_synchronize = gpu_stream_synchronize,
    .stream_query = gpu_stream_query,
    .stream_wait_event = gpu_stream_wait_event,
    .event_create = gpu_event_create,
    .event_destroy = gpu_event_destroy,
    .event_record = gpu_event_record,
    .event_synchronize = gpu_event_synchronize,
    .event_query = gpu_event_query,
    .mem_alloc = gpu_mem_alloc,
    .mem_free = gpu_mem_free,
    .memcpy_htod = gpu_memcpy_htod,
    .memcpy_dtoh = gpu_memcpy_dtoh,
    .fill = gpu_fill,
    .launch = gpu_launch,
    .kernel_attributes = gpu_kernel_attributes,
    .kernel_set_shared_limit = gpu_kernel_set_shared_limit,
    .capture_begin = gpu_capture_begin,
    .capture_node = gpu_capture_node,
    .capture_end = gpu_capture_end,
    .graph_set_launch = gpu_graph_set_launch,
    .graph_launch = gpu_graph_launch,
    .graph_destroy = gpu_graph_destroy,
    .count_driver_calls = JB_GPU_PREFIXED(count_driver_calls),
    .thread_driver_calls = JB_GPU_PREFIXED(thread_driver_calls),
    .module_global = gpu_module_global,
};
