/*
 * jitbridge from C: a device, a stream of this thread's own, the race probe, a custom kernel,
 * the counters, warnings routed to a callback, and an error handled (a kernel that does not
 * compile). Build against an installed copy: make -C examples/c (see its Makefile).
 * Exits 0 when every output is exact.
 */
#include <jitbridge.h>

#include <stdio.h>
#include <string.h>

static void on_warning(void *user_data, jb_log_level level, const char *message)
{
    (void)level;
    fprintf(stderr, "%s: jitbridge warned: %s\n", (const char *)user_data, message);
}

/* A kernel whose body does not compile: the error carries the compiler's log. */
static int shows_a_compile_error(jb_device *device)
{
    const char *in[] = {"x"}, *out[] = {"y"};
    jb_dtype f32[] = {JB_F32};
    jb_kernel_spec spec = {.struct_size = sizeof(jb_kernel_spec),
                           .name = "broken",
                           .input_names = in,
                           .input_dtypes = f32,
                           .num_inputs = 1,
                           .output_names = out,
                           .output_dtypes = f32,
                           .num_outputs = 1,
                           .body = "y[thread_index()] = x[thread_index()] +;"};
    jb_custom_kernel *kernel = NULL;
    if (jb_custom_kernel_new(&kernel, &spec) != JB_OK)
        return -1;
    int status = jb_custom_kernel_prepare(kernel, device);
    if (status == JB_ERR_COMPILE)
        printf("expected error   %s: %.60s...\n", jb_status_name(status), jb_last_error_message());
    jb_custom_kernel_free(kernel);
    return status == JB_ERR_COMPILE ? 0 : -1;
}

int main(void)
{
    enum { N = 256 };
    jb_device *device = NULL;
    jb_stream *stream = NULL;
    jb_array *x = NULL, *probed = NULL, *saxpy_out = NULL;
    jb_custom_kernel *saxpy = NULL;
    int installed = 0, failed = 1;
    float values[N];

    printf("jitbridge        %s (ABI %d; built against %s)\n", jb_version(), jb_abi_version(),
           JB_VERSION_STRING);
    if (jb_set_log_callback(on_warning, "demo") != JB_OK)
        goto done;
    if (jb_device_default(&device) != JB_OK)
        goto done;
    printf("device           %s (%s, %s)\n", jb_device_name(device),
           jb_device_backend_name(device), jb_device_arch(device));

    /* A stream of this thread's own, installed as its default: launches below go there. */
    if (jb_new_thread_local_generation_stream(&stream, device) != JB_OK ||
        jb_install_thread_local_default_stream(stream) != JB_OK)
        goto done;
    installed = 1;

    if (jb_array_arange(&x, device, N, JB_F32) != JB_OK ||
        jb_jit_race_probe_array(&probed, x, 7) != JB_OK ||
        jb_array_read(probed, values, sizeof values) != JB_OK)
        goto done;
    for (int i = 0; i < N; i++)
        if (values[i] != 2.0f * (float)i + 1.0f) {
            fprintf(stderr, "probe: out[%d] = %g\n", i, values[i]);
            goto done;
        }
    printf("probe            out[i] = 2i + 1 for all %d elements\n", N);

    const char *in[] = {"x"}, *out[] = {"y"};
    jb_dtype f32[] = {JB_F32};
    jb_kernel_spec spec = {.struct_size = sizeof(jb_kernel_spec),
                           .name = "saxpy_demo",
                           .input_names = in,
                           .input_dtypes = f32,
                           .num_inputs = 1,
                           .output_names = out,
                           .output_dtypes = f32,
                           .num_outputs = 1,
                           .body = "size_t i = thread_index();\n"
                                   "if (i < x_size) y[i] = 2.5f * x[i] + 1.0f;"};
    const int64_t shape[] = {N};
    const int64_t *shapes[] = {shape};
    const int ndims[] = {1};
    jb_launch_shape threads = {.total_threads = N};
    if (jb_custom_kernel_new(&saxpy, &spec) != JB_OK)
        goto done;
    for (int launch = 0; launch < 2; launch++) {
        jb_array_free(saxpy_out); /* NULL the first time: accepted */
        saxpy_out = NULL;
        if (jb_custom_kernel_launch(&saxpy_out, saxpy, &x, 1, shapes, ndims, &threads) != JB_OK ||
            jb_array_read(saxpy_out, values, sizeof values) != JB_OK)
            goto done;
    }
    for (int i = 0; i < N; i++)
        if (values[i] != 2.5f * (float)i + 1.0f) {
            fprintf(stderr, "saxpy: out[%d] = %g\n", i, values[i]);
            goto done;
        }
    printf("custom kernel    %s: out[i] = 2.5i + 1 for all %d elements\n",
           jb_custom_kernel_module_name(saxpy), N);

    if (shows_a_compile_error(device) != 0)
        goto done;

    jb_counters counters;
    if (jb_counters_get(&counters, sizeof counters) != JB_OK)
        goto done;
    printf("counters         builds %llu, failures %llu, hits %llu, misses %llu\n",
           (unsigned long long)counters.builds, (unsigned long long)counters.build_failures,
           (unsigned long long)counters.hits, (unsigned long long)counters.misses);
    failed = 0;

done:
    if (failed)
        fprintf(stderr, "demo failed: %s\n", jb_last_error_message());
    /* Every handle starts NULL and every free accepts NULL, so one cleanup serves all exits. */
    jb_array_free(saxpy_out);
    jb_custom_kernel_free(saxpy);
    jb_array_free(probed);
    jb_array_free(x);
    if (installed)
        jb_uninstall_thread_local_default_stream(stream);
    jb_stream_free(stream);
    jb_set_log_callback(NULL, NULL);
    return failed;
}
