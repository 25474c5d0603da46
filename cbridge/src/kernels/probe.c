/*
 * The race probe: kernel "mlxcel_jit_race_probe_v<variant>", a custom kernel that every process
 * compiles afresh (it skips the disk cache), so the window in which threads race to build it
 * stays open. Each thread keeps the probe kernels it made. Also the bench's entry points.
 */
#include "kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each thread keeps the probe kernels it made, keyed by variant, so a warm probe launch
 * generates no source. */
static jb_table *probe_table_create(void)
{
    return calloc(1, sizeof(jb_table));
}

static void probe_table_destroy(jb_table *probes)
{
    for (size_t i = 0; i < probes->capacity; i++)
        jb_custom_kernel_free(probes->slots[i].value);
    free(probes->slots);
    free(probes);
}

JB_THREAD_LOCAL(jb_table, thread_probes, probe_table_create, probe_table_destroy)

/* Variants are their own keys, stored in the key pointer. */
static bool same_variant(const void *stored, const void *key)
{
    return stored == key;
}

/* The probe's body: the one place it is written (tools and tests read jb_race_probe_body). */
static const char probe_body[] = "out[thread_index()] = inp[thread_index()] * 2.0f + 1.0f;";

const char *jb_race_probe_body(void)
{
    return probe_body;
}

/* The calling thread's probe kernel for `variant`, made on first use. */
static int probe_kernel(int variant, jb_custom_kernel **out)
{
    jb_table *probes = thread_probes();
    JB_RETURN_IF(!probes, JB_ERR_OUT_OF_MEMORY, "no memory for the probe kernels");
    const void *key = (const void *)(uintptr_t)(unsigned)variant;
    uint64_t hash = (uint64_t)(unsigned)variant * 0x9e3779b97f4a7c15ULL;
    if ((*out = jb__table_find(probes, hash, key, same_variant)))
        return JB_OK;
    JB_RETURN_IF(!jb__table_reserve(probes), JB_ERR_OUT_OF_MEMORY,
                 "no memory for the probe kernels");
    char name[64];
    snprintf(name, sizeof name, "mlxcel_jit_race_probe_v%d", variant);
    const char *input_names[] = {"inp"}, *output_names[] = {"out"};
    const jb_dtype dtypes[] = {JB_F32};
    jb_kernel_spec spec = {
        .struct_size = sizeof spec,
        .name = name,
        .input_names = input_names,
        .input_dtypes = dtypes,
        .num_inputs = 1,
        .output_names = output_names,
        .output_dtypes = dtypes,
        .num_outputs = 1,
        .body = probe_body,
    };
    jb_custom_kernel *kernel;
    JB_FORWARD_IF_ERROR(jb_custom_kernel_new(&kernel, &spec));
    kernel->disk_cacheable = false; /* every process compiles probes: the race window stays */
    jb__table_add(probes, hash, key, kernel);
    *out = kernel;
    return JB_OK;
}

/* Checks the probe's input and stages its launch: one block of n threads, n = input size. */
static int probe_launch_begin(jb_staged_launch *launch, jb_array *input, int variant)
{
    JB_RETURN_IF(!input, JB_ERR_INVALID_ARGUMENT, "jit race probe: input is NULL");
    JB_RETURN_IF(variant < 0, JB_ERR_INVALID_ARGUMENT,
                 "jit race probe: variant must be >= 0, got %d", variant);
    JB_RETURN_IF(jb_array_dtype(input) != JB_F32, JB_ERR_SHAPE,
                 "jit race probe: the input must be f32, got %s",
                 jb_dtype_name(jb_array_dtype(input)));
    int64_t n = jb_array_size(input);
    JB_RETURN_IF(n < 1 || n > JB_PROBE_MAX_THREADS, JB_ERR_INVALID_ARGUMENT,
                 "jit race probe: the input has %lld elements; one block holds 1 to %d threads",
                 (long long)n, JB_PROBE_MAX_THREADS);
    jb_custom_kernel *kernel = NULL;
    JB_FORWARD_IF_ERROR(probe_kernel(variant, &kernel));
    const int64_t *shapes[] = {&n};
    const int ndims[] = {1};
    jb_array *inputs[] = {input};
    jb_launch l = {.struct_size = sizeof l, .inputs = inputs, .num_inputs = 1,
                   .output_shapes = shapes, .output_ndims = ndims,
                   .shape = {{1, 1, 1}, {(uint32_t)n, 1, 1}, 0}};
    return jb__launch_begin(launch, kernel, &l);
}

jb_status jb_jit_race_probe_array(jb_array **out, jb_array *input, int variant)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jit race probe: out is NULL");
    *out = NULL;
    jb_staged_launch launch;
    JB_FORWARD_IF_ERROR(probe_launch_begin(&launch, input, variant));
    return jb__launch_end(&launch, jb__launch_issue(&launch), out);
}

jb_status jb_rocm_jit_race_probe_array(jb_array **out, jb_array *input, int variant)
{
#ifdef JB_WITH_ROCM
    JB_RETURN_IF(input && jb_array_device(input)->backend != &jb__rocm_backend,
                 JB_ERR_UNSUPPORTED,
                 "jb_rocm_jit_race_probe_array runs on a ROCm GPU; the input is on the %s device",
                 jb_array_device(input)->backend->name);
    return jb_jit_race_probe_array(out, input, variant);
#else
    (void)out, (void)input, (void)variant;
    return jb__fail(JB_ERR_UNSUPPORTED,
                    "jb_rocm_jit_race_probe_array needs a ROCm build of jitbridge (cargo feature "
                    "'rocm'); this build's GPU backend is '%s'",
                    jb_gpu_backend_name());
#endif
}

/* ---- benchmark support ---- */

/* A bench's staged launch is issued again and again by hand: never into a capture. */
static int refuse_captured(jb_staged_launch *launch, const char *what)
{
    if (!launch->capture)
        return JB_OK;
    return jb__launch_end(launch,
                          jb__fail(JB_ERR_INVALID_ARGUMENT,
                                   "%s: the thread's default stream is capturing a graph", what),
                          NULL);
}

jb_status jb_bench_raw_probe_launches(double *out_ns_per_launch, jb_array *input, int variant,
                                      int launches)
{
    JB_RETURN_IF(!out_ns_per_launch || !input || launches < 1, JB_ERR_INVALID_ARGUMENT,
                 "jb_bench_raw_probe_launches: bad arguments");
    jb_array *warm = NULL;
    /* One checked launch builds the module and validates the input as the probe does. */
    JB_FORWARD_IF_ERROR(jb_jit_race_probe_array(&warm, input, variant));
    jb_array_free(warm);
    /* Staged once; then only the backend's launch and event record are timed. */
    jb_staged_launch launch;
    JB_FORWARD_IF_ERROR(probe_launch_begin(&launch, input, variant));
    JB_FORWARD_IF_ERROR(refuse_captured(&launch, "jb_bench_raw_probe_launches"));
    jb_device *dev = launch.dev;
    void *stream = launch.stream->native;
    void *event = NULL; /* the backend's own, as the launch path's event would be */
    int status = dev->backend->event_create(dev, &event);
    if (status == JB_OK)
        status = dev->backend->stream_synchronize(dev, stream);
    uint64_t start = jb__now_ns();
    for (int i = 0; status == JB_OK && i < launches; i++) {
        status = jb__launch_issue(&launch);
        if (status == JB_OK)
            status = dev->backend->event_record(dev, event, stream);
    }
    if (status == JB_OK)
        status = dev->backend->stream_synchronize(dev, stream);
    *out_ns_per_launch = (double)(jb__now_ns() - start) / launches;
    if (event)
        dev->backend->event_destroy(dev, event);
    jb_array *out = NULL;
    status = jb__launch_end(&launch, status, &out);
    jb_array_free(out);
    return status;
}

jb_status jb_bench_compile_only(double *out_ns, jb_custom_kernel *kernel, jb_device *device)
{
    JB_RETURN_IF(!out_ns || !kernel || !device, JB_ERR_INVALID_ARGUMENT,
                 "jb_bench_compile_only: bad arguments");
    jb__event_build_begin(device, kernel->module_name, ""); /* what a seal violation names */
    int sealed = jb__seal_check(device, kernel->module_name, false);
    jb__event_build_end();
    JB_FORWARD_IF_ERROR(sealed);
    jb_blob code = {0};
    uint64_t start = jb__now_ns();
    int status = device->backend->compile(device, kernel->module_name,
                                          kernel->sources[device->backend->dialect],
                                          &kernel->options, &code);
    *out_ns = (double)(jb__now_ns() - start);
    free(code.data);
    return status;
}

jb_status jb_bench_cold_probe_steps(jb_bench_cold_steps *out, jb_array *input, int variant)
{
    JB_RETURN_IF(!out || !input, JB_ERR_INVALID_ARGUMENT,
                 "jb_bench_cold_probe_steps: bad arguments");
    memset(out, 0, sizeof *out);
    jb__build_steps = (jb_build_steps){0};
    uint64_t t0 = jb__now_ns();
    jb_staged_launch launch;
    JB_FORWARD_IF_ERROR(probe_launch_begin(&launch, input, variant));
    JB_FORWARD_IF_ERROR(refuse_captured(&launch, "jb_bench_cold_probe_steps"));
    uint64_t t1 = jb__now_ns();
    int status = jb__launch_issue(&launch);
    uint64_t t2 = jb__now_ns();
    jb_array *result = NULL;
    status = jb__launch_end(&launch, status, &result);
    uint64_t t3 = jb__now_ns();
    if (status == JB_OK)
        status = launch.dev->backend->stream_synchronize(launch.dev, launch.stream->native);
    uint64_t t4 = jb__now_ns();
    jb_array_free(result);
    JB_FORWARD_IF_ERROR(status);
    jb_build_steps steps = jb__build_steps;
    JB_RETURN_IF(!steps.compile_ns, JB_ERR_INVALID_ARGUMENT,
                 "jb_bench_cold_probe_steps: variant %d was built already", variant);
    *out = (jb_bench_cold_steps){
        .compile_ns = (double)steps.compile_ns,
        .load_ns = (double)steps.load_ns,
        .get_function_ns = (double)steps.get_function_ns,
        .disk_store_ns = (double)steps.disk_store_ns,
        .configure_ns = (double)steps.configure_ns,
        .stage_ns = (double)(t1 - t0),
        .launch_ns = (double)(t2 - t1),
        .record_ns = (double)(t3 - t2),
        .sync_ns = (double)(t4 - t3),
        .total_ns = (double)(t4 - t0),
    };
    jb_custom_kernel *kernel;
    JB_FORWARD_IF_ERROR(probe_kernel(variant, &kernel));
    return jb_bench_compile_only(&out->compile_again_ns, kernel, launch.dev);
}

/* ---- the raw decode control (jitbridge soak --decode raw) ---- */

struct jb_bench_raw_launcher {
    /* Staged once; its args point into it, so it never moves. The launcher holds a reference
     * on its stream and on every buffer the steps use: a caller who frees the inputs or the
     * stream (or drops the guard that installed it) leaves the steps nothing freed to use. */
    jb_staged_launch launch;
    const jb_custom_kernel *kernel;
    jb_array *outputs[JB_KERNEL_MAX_ARRAYS]; /* fixed: every step writes them again */
    void *done;                              /* the backend event each step records and waits on */
};

jb_status jb_bench_raw_launcher_new(jb_bench_raw_launcher **out, jb_custom_kernel *kernel,
                                    jb_array *const *inputs, size_t num_inputs,
                                    const jb_scalar *scalars, size_t num_scalars,
                                    const int64_t *const *output_shapes, const int *output_ndims,
                                    const jb_launch_shape *shape)
{
    JB_RETURN_IF(!out || !kernel, JB_ERR_INVALID_ARGUMENT,
                 "jb_bench_raw_launcher_new: out or kernel is NULL");
    *out = NULL;
    JB_RETURN_IF(!shape, JB_ERR_INVALID_ARGUMENT, "the launch shape is NULL");
    jb_launch l = {.struct_size = sizeof l, .inputs = inputs, .num_inputs = num_inputs,
                   .scalars = scalars, .num_scalars = num_scalars, .output_shapes = output_shapes,
                   .output_ndims = output_ndims, .shape = *shape};
    jb_bench_raw_launcher *r = calloc(1, sizeof *r);
    JB_RETURN_IF(!r, JB_ERR_OUT_OF_MEMORY, "no memory for a raw launcher");
    r->kernel = kernel;
    /* The library's own first launch: lookup, build, outputs, holds; the steps reuse its staging. */
    int status = jb__launch_begin(&r->launch, kernel, &l);
    if (status == JB_OK)
        status = refuse_captured(&r->launch, "jb_bench_raw_launcher_new");
    if (status != JB_OK) {
        free(r);
        return status;
    }
    status = jb__launch_end(&r->launch, jb__launch_issue(&r->launch), r->outputs);
    if (status != JB_OK) {
        free(r);
        return status;
    }
    jb__stream_retain(r->launch.stream);
    for (size_t i = 0; i < r->launch.args.count; i++)
        jb__buffer_retain(r->launch.buffers[i]);
    jb_device *dev = r->launch.dev;
    status = dev->backend->event_create(dev, &r->done);
    if (status == JB_OK)
        status = dev->backend->stream_synchronize(dev, r->launch.stream->native);
    if (status != JB_OK) {
        jb_bench_raw_launcher_free(r);
        return status;
    }
    *out = r;
    return JB_OK;
}

jb_status jb_bench_raw_launcher_step(jb_bench_raw_launcher *r, const jb_scalar *scalars,
                                     size_t num_scalars, uint64_t *out_launch_ns,
                                     uint64_t *out_wait_ns)
{
    JB_RETURN_IF(!r || !out_launch_ns || !out_wait_ns, JB_ERR_INVALID_ARGUMENT,
                 "jb_bench_raw_launcher_step: bad arguments");
    *out_launch_ns = *out_wait_ns = 0;
    /* Checked and laid out as the library's launch does it (kernel.c). */
    JB_FORWARD_IF_ERROR(jb__stage_scalars(r->kernel, scalars, num_scalars, r->launch.scalars));
    jb_device *dev = r->launch.dev;
    void *stream = r->launch.stream->native;
    uint64_t start = jb__now_ns();
    int status = jb__launch_issue(&r->launch);
    if (status == JB_OK)
        status = dev->backend->event_record(dev, r->done, stream);
    uint64_t launched = jb__now_ns();
    if (status == JB_OK)
        status = dev->backend->event_synchronize(dev, r->done);
    *out_launch_ns = launched - start;
    *out_wait_ns = jb__now_ns() - launched;
    return status;
}

jb_status jb_bench_raw_launcher_read(const jb_bench_raw_launcher *r, size_t output, void *dst,
                                     size_t dst_bytes)
{
    JB_RETURN_IF(!r, JB_ERR_INVALID_ARGUMENT, "jb_bench_raw_launcher_read: launcher is NULL");
    JB_RETURN_IF(output >= r->launch.num_outputs, JB_ERR_INVALID_ARGUMENT,
                 "raw launcher: kernel '%s' has %zu outputs, no output %zu", r->kernel->name,
                 r->launch.num_outputs, output);
    return jb_array_read(r->outputs[output], dst, dst_bytes);
}

void jb_bench_raw_launcher_free(jb_bench_raw_launcher *r)
{
    if (!r)
        return;
    jb_device *dev = r->launch.dev;
    /* A failed step may have left a launch queued that writes the outputs. */
    dev->backend->stream_synchronize(dev, r->launch.stream->native);
    if (r->done)
        dev->backend->event_destroy(dev, r->done);
    for (size_t i = 0; i < r->launch.num_outputs; i++)
        jb_array_free(r->outputs[i]);
    for (size_t i = 0; i < r->launch.args.count; i++)
        jb__buffer_release(r->launch.buffers[i]);
    jb__stream_release(r->launch.stream);
    free(r);
}
