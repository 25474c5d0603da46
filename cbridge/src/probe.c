/*
 * The race probe: kernel "mlxcel_jit_race_probe_v<variant>", a custom kernel that every process
 * compiles afresh (it skips the disk cache), so the window in which threads race to build it
 * stays open. Each thread keeps the probe kernels it made. Also the bench's entry points.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each thread keeps the probe kernels it made, so a warm probe launch generates no source. */
typedef struct probe_kernels {
    int *variants;
    jb_custom_kernel **kernels;
    size_t count, capacity; /* capacity: a power of two; open addressing on the variant */
} probe_kernels;

static _Thread_local probe_kernels *tls_probes;
static pthread_key_t probes_key;
static pthread_once_t probes_key_once = PTHREAD_ONCE_INIT;

static void probe_kernels_destroy(void *p)
{
    probe_kernels *probes = p;
    tls_probes = NULL;
    for (size_t i = 0; i < probes->capacity; i++)
        jb_custom_kernel_free(probes->kernels[i]);
    free(probes->variants);
    free(probes->kernels);
    free(probes);
}

static void probes_key_create(void)
{
    pthread_key_create(&probes_key, probe_kernels_destroy);
}

static size_t probe_slot(const probe_kernels *probes, int variant)
{
    size_t mask = probes->capacity - 1;
    size_t i = ((size_t)(unsigned)variant * 0x9e3779b97f4a7c15ULL) & mask;
    while (probes->kernels[i] && probes->variants[i] != variant)
        i = (i + 1) & mask;
    return i;
}

static int probe_kernels_grow(probe_kernels *probes)
{
    size_t capacity = probes->capacity ? probes->capacity * 2 : 16;
    probe_kernels grown = {calloc(capacity, sizeof(int)),
                           calloc(capacity, sizeof(jb_custom_kernel *)), probes->count, capacity};
    if (!grown.variants || !grown.kernels) {
        free(grown.variants);
        free(grown.kernels);
        return jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory for the probe kernels");
    }
    for (size_t i = 0; i < probes->capacity; i++) {
        if (!probes->kernels[i])
            continue;
        size_t j = probe_slot(&grown, probes->variants[i]);
        grown.variants[j] = probes->variants[i];
        grown.kernels[j] = probes->kernels[i];
    }
    free(probes->variants);
    free(probes->kernels);
    *probes = grown;
    return JB_OK;
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
    if (!tls_probes) {
        pthread_once(&probes_key_once, probes_key_create);
        tls_probes = calloc(1, sizeof *tls_probes);
        JB_RETURN_IF(!tls_probes, JB_ERR_OUT_OF_MEMORY, "no memory for the probe kernels");
        pthread_setspecific(probes_key, tls_probes);
    }
    probe_kernels *probes = tls_probes;
    if (probes->capacity) {
        size_t i = probe_slot(probes, variant);
        if (probes->kernels[i]) {
            *out = probes->kernels[i];
            return JB_OK;
        }
    }
    if ((probes->count + 1) * 2 > probes->capacity)
        JB_FORWARD_IF_ERROR(probe_kernels_grow(probes));
    char name[64];
    snprintf(name, sizeof name, "mlxcel_jit_race_probe_v%d", variant);
    const char *input_names[] = {"inp"}, *output_names[] = {"out"};
    const jb_dtype dtypes[] = {JB_F32};
    jb_kernel_spec spec = {
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
    size_t i = probe_slot(probes, variant);
    probes->variants[i] = variant;
    probes->kernels[i] = kernel;
    probes->count++;
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
    jb_launch_shape shape = {{1, 1, 1}, {(uint32_t)n, 1, 1}, 0};
    jb_array *inputs[] = {input};
    return jb__launch_begin(launch, kernel, inputs, 1, shapes, ndims, &shape);
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
    JB_RETURN_IF(input && jb_array_device(input)->kind != JB_DEVICE_GPU, JB_ERR_UNSUPPORTED,
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
    jb_device *dev = launch.dev;
    void *stream = launch.stream->native;
    int status = dev->backend->stream_synchronize(dev, stream);
    uint64_t start = jb__now_ns();
    for (int i = 0; status == JB_OK && i < launches; i++) {
        status = jb__launch_issue(&launch);
        if (status == JB_OK)
            status = dev->backend->event_record(dev, launch.ready[0]->native, stream);
    }
    if (status == JB_OK)
        status = dev->backend->stream_synchronize(dev, stream);
    *out_ns_per_launch = (double)(jb__now_ns() - start) / launches;
    jb_array *out = NULL;
    status = jb__launch_end(&launch, status, &out);
    jb_array_free(out);
    return status;
}

jb_status jb_bench_compile_only(double *out_ns, jb_custom_kernel *kernel, jb_device *device)
{
    JB_RETURN_IF(!out_ns || !kernel || !device, JB_ERR_INVALID_ARGUMENT,
                 "jb_bench_compile_only: bad arguments");
    jb_blob code = {0};
    uint64_t start = jb__now_ns();
    int status = device->backend->compile(device, kernel->module_name,
                                          kernel->sources[device->backend->dialect],
                                          &code);
    *out_ns = (double)(jb__now_ns() - start);
    free(code.data);
    return status;
}
