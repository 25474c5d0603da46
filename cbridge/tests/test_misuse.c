/*
 * ABI misuse: NULL for every pointer parameter, wrong dtypes and shapes, bad variants and names,
 * and every function called with what a failed create leaves (NULL). Each call must return its
 * documented status with a message, crash nothing, and leave the counters and the cache as they
 * were.
 */
#include "check.h"
#include "deadline.h"
#include "jitbridge_sys.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

static jb_device *cpu;
static jb_counters before;

/* The call failed with `status` and left a message naming what was wrong. */
#define EXPECT(call, status)                                                                       \
    do {                                                                                           \
        int got_ = (call);                                                                         \
        CHECK(got_ == (status), "%s returned %s, expected %s", #call, jb_status_name(got_),       \
              jb_status_name(status));                                                             \
        CHECK(got_ == JB_OK || jb_last_error_message()[0] != '\0', "%s left no message", #call);  \
        CHECK(got_ == JB_OK || jb_last_error_status() == got_, "%s: last status differs", #call); \
    } while (0)

static void counters_unchanged(const char *after_what)
{
    jb_counters now;
    jb_counters_get(&now, sizeof now);
    CHECK(now.builds == before.builds && now.build_failures == before.build_failures &&
              now.misses == before.misses && now.disk_hits == before.disk_hits &&
              now.disk_misses == before.disk_misses,
          "counters changed after %s", after_what);
}

static void null_pointers(void)
{
    jb_array *array = NULL;
    jb_stream *stream = NULL;
    jb_custom_kernel *kernel = NULL;
    jb_device *device = NULL;
    int count;
    uint64_t a, b;
    double ns;
    const char *text;

    EXPECT(jb_device_count(NULL, JB_DEVICE_CPU), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_device_count(&count, (jb_device_kind)7), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_device_get(NULL, JB_DEVICE_CPU, 0), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_device_get(&device, JB_DEVICE_CPU, 1), JB_ERR_NO_DEVICE);
    CHECK(device == NULL, "a failed jb_device_get left a device");
    EXPECT(jb_device_get(&device, JB_DEVICE_CPU, -1), JB_ERR_NO_DEVICE);
    /* No GPU backend built: unsupported, as "cuda" is in a build without it; else no device. */
    EXPECT(jb_device_get(&device, JB_DEVICE_GPU, INT_MAX),
           strcmp(jb_gpu_backend_name(), "none") == 0 ? JB_ERR_UNSUPPORTED : JB_ERR_NO_DEVICE);
    EXPECT(jb_device_default(NULL), JB_ERR_INVALID_ARGUMENT);
    CHECK(jb_device_index(NULL) == -1, "index of NULL");
    CHECK(jb_device_ordinal(NULL) == -1, "ordinal of NULL");
    /* Device memory: a NULL device is refused and changes no cap. */
    uint64_t cap = jb_device_idle_cap(cpu), freed = 1;
    EXPECT(jb_device_trim(&freed, NULL), JB_ERR_INVALID_ARGUMENT);
    CHECK(freed == 0, "a failed trim reported %llu bytes freed", (unsigned long long)freed);
    EXPECT(jb_device_set_idle_cap(NULL, 1), JB_ERR_INVALID_ARGUMENT);
    CHECK(jb_device_idle_cap(NULL) == 0, "idle cap of NULL");
    CHECK(jb_device_idle_cap(cpu) == cap, "a refused call changed the cpu's idle cap");
    EXPECT(jb_device_trim(NULL, cpu), JB_OK);
    jb_memory_stats stats = {.live_bytes = 7};
    EXPECT(jb_device_memory_stats(NULL, sizeof stats, cpu), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_device_memory_stats(&stats, 0, cpu), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_device_memory_stats(&stats, sizeof stats + 1, cpu), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_device_memory_stats(&stats, sizeof stats, NULL), JB_ERR_INVALID_ARGUMENT);
    CHECK(stats.live_bytes == 7, "a refused jb_device_memory_stats wrote its output");
    /* The cpu is the only device of this build: its statistics are the counters' sums. */
    jb_array *held = NULL;
    CHECK_OK(jb_array_arange(&held, cpu, 1000, JB_F32));
    CHECK_OK(jb_array_eval(held));
    jb_counters sums;
    CHECK_OK(jb_device_memory_stats(&stats, sizeof stats, cpu));
    jb_counters_get(&sums, sizeof sums);
    CHECK(stats.live_bytes == sums.mem_live_bytes && stats.live_bytes >= 4000 &&
              stats.reserved_bytes == sums.mem_reserved_bytes &&
              stats.idle_bytes == sums.mem_idle_bytes &&
              stats.peak_live_bytes == sums.mem_peak_live_bytes &&
              stats.allocations == sums.mem_allocations && stats.frees == sums.mem_frees &&
              stats.reuses == sums.mem_reuses && stats.retries == sums.mem_retries,
          "the cpu's memory statistics differ from the counters (live %llu vs %llu)",
          (unsigned long long)stats.live_bytes, (unsigned long long)sums.mem_live_bytes);
    /* A caller built against an older, shorter struct gets only the fields it knows. */
    jb_memory_stats prefix = {.reserved_bytes = 9};
    CHECK_OK(jb_device_memory_stats(&prefix, 2 * sizeof(uint64_t), cpu));
    CHECK(prefix.live_bytes == stats.live_bytes && prefix.reserved_bytes == 9,
          "a short out_size wrote past its size");
    jb_array_free(held);

    /* Device names: malformed ones are invalid arguments and leave NULL behind. */
    EXPECT(jb_device_lookup(NULL, "cpu"), JB_ERR_INVALID_ARGUMENT);
    device = (jb_device *)&device;
    EXPECT(jb_device_lookup(&device, NULL), JB_ERR_INVALID_ARGUMENT);
    CHECK(device == NULL, "a failed jb_device_lookup left a device");
    const char *malformed[] = {"", "tpu", "cpu:", "cpu:-0", "cuda:-1", "rocm:+1", "gpu:1x",
                               "gpu:99999999999999999999", "a-name-longer-than-any-backend:0"};
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++)
        EXPECT(jb_device_lookup(&device, malformed[i]), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_device_lookup(&device, "cpu:1"), JB_ERR_NO_DEVICE);
    jb_device *cpu_by_name = NULL, *cpu_by_kind = NULL;
    EXPECT(jb_device_lookup(&cpu_by_name, "cpu"), JB_OK);
    EXPECT(jb_device_get(&cpu_by_kind, JB_DEVICE_CPU, 0), JB_OK);
    CHECK(cpu_by_name == cpu_by_kind && jb_device_ordinal(cpu_by_name) == 0, "cpu by name");
    count = -1;
    EXPECT(jb_backend_device_count(NULL, "cpu"), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_backend_device_count(&count, NULL), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_backend_device_count(&count, "tpu"), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_backend_device_count(&count, "cpu"), JB_OK);
    CHECK(count == 1, "one cpu device, not %d", count);
#if !defined(JB_WITH_CUDA)
    EXPECT(jb_device_lookup(&device, "cuda:0"), JB_ERR_UNSUPPORTED);
#endif
#if !defined(JB_WITH_ROCM)
    EXPECT(jb_backend_device_count(&count, "rocm"), JB_ERR_UNSUPPORTED);
    CHECK(count == 0, "a backend left out has no devices");
#endif
    CHECK(jb_device_name(NULL) != NULL && jb_device_arch(NULL) != NULL, "strings of NULL");
    CHECK(jb_device_backend_name(NULL) != NULL && jb_device_total_memory(NULL) == 0, "NULL dev");

    EXPECT(jb_stream_new(NULL, cpu), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_stream_new(&stream, NULL), JB_ERR_INVALID_ARGUMENT);
    CHECK(stream == NULL, "a failed jb_stream_new left a stream");
    EXPECT(jb_new_thread_local_generation_stream(&stream, NULL), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_stream_synchronize(NULL), JB_ERR_INVALID_ARGUMENT);
    CHECK(jb_stream_device(NULL) == NULL, "device of NULL stream");
    EXPECT(jb_install_thread_local_default_stream(NULL), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_uninstall_thread_local_default_stream(NULL), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_thread_local_default_stream(NULL, cpu), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_thread_local_default_stream(&stream, NULL), JB_ERR_INVALID_ARGUMENT);
    jb_stream_free(NULL);

    int64_t shape[] = {4};
    float data[4] = {0};
    EXPECT(jb_array_from_host(NULL, cpu, JB_F32, shape, 1, data), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_array_from_host(&array, NULL, JB_F32, shape, 1, data), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_array_from_host(&array, cpu, JB_F32, NULL, 1, data), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_array_from_host(&array, cpu, JB_F32, shape, 1, NULL), JB_ERR_INVALID_ARGUMENT);
    /* The first value past the last dtype (u64, 12), and the ones past bool that came later. */
    EXPECT(jb_array_from_host(&array, cpu, (jb_dtype)13, shape, 1, data), JB_ERR_INVALID_ARGUMENT);
    CHECK(strstr(jb_last_error_message(), "13") != NULL, "the bad dtype is named: %s",
          jb_last_error_message());
    EXPECT(jb_array_from_host(&array, cpu, JB_U16, shape, 1, data), JB_OK);
    jb_array_free(array);
    array = NULL;
    EXPECT(jb_array_from_host(&array, cpu, JB_F32, shape, -1, data), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_array_from_host(&array, cpu, JB_F32, shape, JB_MAX_NDIM + 1, data),
           JB_ERR_INVALID_ARGUMENT);
    int64_t negative[] = {-4};
    EXPECT(jb_array_from_host(&array, cpu, JB_F32, negative, 1, data), JB_ERR_INVALID_ARGUMENT);
    int64_t huge[] = {INT64_MAX, INT64_MAX};
    EXPECT(jb_array_from_host(&array, cpu, JB_F32, huge, 2, data), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_array_arange(NULL, cpu, 4, JB_F32), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_array_arange(&array, NULL, 4, JB_F32), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_array_arange(&array, cpu, -1, JB_F32), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_array_arange(&array, cpu, INT64_MAX, JB_F32), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_array_arange(&array, cpu, 4, (jb_dtype)-1), JB_ERR_INVALID_ARGUMENT);
    CHECK(array == NULL, "a failed create left an array");

    /* Everything after a failed create: the NULL it left. */
    EXPECT(jb_array_eval(array), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_array_read(array, data, sizeof data), JB_ERR_INVALID_ARGUMENT);
    CHECK(jb_array_device(array) == NULL && jb_array_ndim(array) == 0, "getters of NULL");
    CHECK(jb_array_dtype(array) == JB_DTYPE_INVALID && !jb_dtype_name(jb_array_dtype(array)),
          "the dtype of NULL is no dtype");
    CHECK(jb_array_shape(array) == NULL && jb_array_size(array) == 0, "getters of NULL");
    jb_array_free(array);
    jb_array *out = NULL;
    EXPECT(jb_jit_race_probe_array(&out, array, 0), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_jit_race_probe_array(NULL, array, 0), JB_ERR_INVALID_ARGUMENT);
#if defined(JB_WITH_ROCM) /* built in: the input is checked like any probe's */
    EXPECT(jb_rocm_jit_race_probe_array(&out, array, 0), JB_ERR_INVALID_ARGUMENT);
#else
    EXPECT(jb_rocm_jit_race_probe_array(&out, array, 0), JB_ERR_UNSUPPORTED);
#endif
    CHECK(out == NULL, "a failed probe left an output");

    EXPECT(jb_custom_kernel_new(NULL, NULL), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_custom_kernel_new(&kernel, NULL), JB_ERR_INVALID_ARGUMENT);
    CHECK(kernel == NULL, "a failed create left a kernel");
    CHECK(jb_custom_kernel_module_name(kernel) == NULL, "name of NULL kernel");
    CHECK(jb_custom_kernel_source(kernel, "cpu") == NULL, "source of NULL kernel");
    EXPECT(jb_custom_kernel_prepare(kernel, cpu), JB_ERR_INVALID_ARGUMENT);
    jb_launch_shape launch = {{1, 1, 1}, {1, 1, 1}, 0};
    EXPECT(jb_custom_kernel_launch(NULL, kernel, NULL, 0, NULL, NULL, &launch),
           JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_custom_kernel_launch(&out, kernel, NULL, 0, NULL, NULL, &launch),
           JB_ERR_INVALID_ARGUMENT);
    jb_custom_kernel_free(kernel);

    EXPECT(jb_counters_get(NULL, sizeof(jb_counters)), JB_ERR_INVALID_ARGUMENT);
    jb_counters too_big[2];
    EXPECT(jb_counters_get(too_big, sizeof too_big), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_disk_cache_dir(NULL), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_disk_cache_stats(NULL, &b), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_disk_cache_prune(0, NULL), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_disk_cache_verify(&a, NULL), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_disk_cache_check(NULL, &b, 0, NULL, NULL), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_bench_raw_probe_launches(NULL, NULL, 0, 1), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_bench_raw_probe_launches(&ns, NULL, 0, 1), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_bench_compile_only(&ns, NULL, cpu), JB_ERR_INVALID_ARGUMENT);
    (void)text;
    CHECK(strcmp(jb_status_name(12345), "JB_UNKNOWN_STATUS") == 0, "unknown status name");
    /* Frees report nothing, so they must leave the last error as it was. */
    jb_stream *spare = NULL;
    jb_array *spare_array = NULL;
    CHECK_OK(jb_stream_new(&spare, cpu));
    CHECK_OK(jb_array_arange(&spare_array, cpu, 4, JB_F32));
    EXPECT(jb_array_arange(&array, cpu, -7, JB_F32), JB_ERR_INVALID_ARGUMENT);
    char kept[256];
    snprintf(kept, sizeof kept, "%s", jb_last_error_message());
    jb_stream_free(spare);
    jb_array_free(spare_array);
    jb_custom_kernel_free(NULL);
    CHECK(strcmp(kept, jb_last_error_message()) == 0, "a free changed the last error to: %s",
          jb_last_error_message());
    CHECK(jb_dtype_name(77) == NULL && jb_dtype_size(77) == 0, "unknown dtype");
    counters_unchanged("NULL arguments");
}

static void bad_probe_inputs(void)
{
    jb_array *zero, *big, *ints, *fine, *two_d, *out = NULL;
    int64_t square[] = {4, 4};
    float data[16] = {0};
    CHECK_OK(jb_array_arange(&zero, cpu, 0, JB_F32));
    CHECK_OK(jb_array_arange(&big, cpu, 1025, JB_F32));
    CHECK_OK(jb_array_arange(&ints, cpu, 8, JB_I32));
    CHECK_OK(jb_array_arange(&fine, cpu, 8, JB_F32));
    CHECK_OK(jb_array_from_host(&two_d, cpu, JB_F32, square, 2, data));
    jb_counters_get(&before, sizeof before);
    EXPECT(jb_jit_race_probe_array(&out, zero, 1), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_jit_race_probe_array(&out, big, 1), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_jit_race_probe_array(&out, ints, 1), JB_ERR_SHAPE);
    EXPECT(jb_jit_race_probe_array(&out, fine, -1), JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_jit_race_probe_array(&out, fine, INT_MIN), JB_ERR_INVALID_ARGUMENT);
    CHECK(out == NULL, "a failed probe left an output");
    counters_unchanged("bad probe inputs");
    /* A huge variant and a two-dimensional input are fine: 16 elements, one block. */
    CHECK_OK(jb_jit_race_probe_array(&out, two_d, INT_MAX));
    jb_array_free(out);
    jb_array *made[] = {zero, big, ints, fine, two_d};
    for (size_t i = 0; i < sizeof made / sizeof *made; i++)
        jb_array_free(made[i]);
}

static void bad_names(void)
{
    char long_name[4097];
    memset(long_name, 'a', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    const char *bad[] = {"",       long_name, "caf\xc3\xa9", "\xff\xfe", "a/b",  "..",
                         "../etc", "x y",     "9lives",      "for",      "jb_x", "__x",
                         "thread_index", "a-b", "a\nb"};
    const char *good_in[] = {"inp"}, *good_out[] = {"out"};
    jb_dtype f32[] = {JB_F32};
    jb_counters_get(&before, sizeof before);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *names[] = {bad[i]};
        jb_custom_kernel *k = NULL;
        jb_kernel_spec as_kernel = {.struct_size = sizeof(jb_kernel_spec),
                                    .name = bad[i],
                                    .input_names = good_in,
                                    .input_dtypes = f32,
                                    .num_inputs = 1,
                                    .output_names = good_out,
                                    .output_dtypes = f32,
                                    .num_outputs = 1,
                                    .body = ""};
        jb_kernel_spec as_input = {.struct_size = sizeof(jb_kernel_spec),
                                   .name = "k",
                                   .input_names = names,
                                   .input_dtypes = f32,
                                   .num_inputs = 1,
                                   .output_names = good_out,
                                   .output_dtypes = f32,
                                   .num_outputs = 1,
                                   .body = ""};
        jb_kernel_spec as_output = {.struct_size = sizeof(jb_kernel_spec),
                                    .name = "k",
                                    .input_names = good_in,
                                    .input_dtypes = f32,
                                    .num_inputs = 1,
                                    .output_names = names,
                                    .output_dtypes = f32,
                                    .num_outputs = 1,
                                    .body = ""};
        EXPECT(jb_custom_kernel_new(&k, &as_kernel), JB_ERR_INVALID_ARGUMENT);
        EXPECT(jb_custom_kernel_new(&k, &as_input), JB_ERR_INVALID_ARGUMENT);
        EXPECT(jb_custom_kernel_new(&k, &as_output), JB_ERR_INVALID_ARGUMENT);
        CHECK(k == NULL, "bad name %zu made a kernel", i);
        /* The message never echoes the name: it may be huge or not text. */
        CHECK(strlen(jb_last_error_message()) < 300, "message of bad name %zu is too long", i);
    }
    jb_custom_kernel *k = NULL;
    const char *same[] = {"x", "x"};
    jb_dtype two[] = {JB_F32, JB_F32};
    jb_kernel_spec duplicate = {.struct_size = sizeof(jb_kernel_spec),
                                .name = "k",
                                .input_names = same,
                                .input_dtypes = two,
                                .num_inputs = 2,
                                .output_names = good_out,
                                .output_dtypes = f32,
                                .num_outputs = 1,
                                .body = ""};
    EXPECT(jb_custom_kernel_new(&k, &duplicate), JB_ERR_INVALID_ARGUMENT);
    const char *sized[] = {"x", "x_size"};
    jb_kernel_spec companion = {.struct_size = sizeof(jb_kernel_spec),
                                .name = "k",
                                .input_names = sized,
                                .input_dtypes = two,
                                .num_inputs = 2,
                                .output_names = good_out,
                                .output_dtypes = f32,
                                .num_outputs = 1,
                                .body = ""};
    EXPECT(jb_custom_kernel_new(&k, &companion), JB_ERR_INVALID_ARGUMENT);
    jb_dtype wrong[] = {(jb_dtype)42};
    jb_kernel_spec bad_dtype = {.struct_size = sizeof(jb_kernel_spec),
                                .name = "k",
                                .input_names = good_in,
                                .input_dtypes = wrong,
                                .num_inputs = 1,
                                .output_names = good_out,
                                .output_dtypes = f32,
                                .num_outputs = 1,
                                .body = ""};
    EXPECT(jb_custom_kernel_new(&k, &bad_dtype), JB_ERR_INVALID_ARGUMENT);
    wrong[0] = (jb_dtype)13; /* one past u64, the last dtype */
    EXPECT(jb_custom_kernel_new(&k, &bad_dtype), JB_ERR_INVALID_ARGUMENT);
    wrong[0] = JB_I16; /* the dtypes added last are dtypes, not one of the above */
    EXPECT(jb_custom_kernel_new(&k, &bad_dtype), JB_OK);
    jb_custom_kernel_free(k);
    k = NULL;
    jb_kernel_spec no_outputs = {.struct_size = sizeof(jb_kernel_spec),
                                 .name = "k",
                                 .input_names = good_in,
                                 .input_dtypes = f32,
                                 .num_inputs = 1,
                                 .output_names = good_out,
                                 .output_dtypes = f32,
                                 .num_outputs = 0,
                                 .body = ""};
    EXPECT(jb_custom_kernel_new(&k, &no_outputs), JB_ERR_INVALID_ARGUMENT);
    jb_kernel_spec no_body = {.struct_size = sizeof(jb_kernel_spec),
                              .name = "k",
                              .input_names = good_in,
                              .input_dtypes = f32,
                              .num_inputs = 1,
                              .output_names = good_out,
                              .output_dtypes = f32,
                              .num_outputs = 1};
    EXPECT(jb_custom_kernel_new(&k, &no_body), JB_ERR_INVALID_ARGUMENT);
    const char *null_name[] = {NULL};
    jb_kernel_spec null_input = {.struct_size = sizeof(jb_kernel_spec),
                                 .name = "k",
                                 .input_names = null_name,
                                 .input_dtypes = f32,
                                 .num_inputs = 1,
                                 .output_names = good_out,
                                 .output_dtypes = f32,
                                 .num_outputs = 1,
                                 .body = ""};
    EXPECT(jb_custom_kernel_new(&k, &null_input), JB_ERR_INVALID_ARGUMENT);
    jb_kernel_spec wrapping = no_body; /* SIZE_MAX + 2 inputs and outputs wraps to 1 */
    wrapping.body = "";
    wrapping.num_inputs = SIZE_MAX;
    wrapping.num_outputs = 2;
    EXPECT(jb_custom_kernel_new(&k, &wrapping), JB_ERR_INVALID_ARGUMENT);
    counters_unchanged("bad names");
}

static void bad_launches(void)
{
    const char *in[] = {"x"}, *outn[] = {"y"};
    jb_dtype f32[] = {JB_F32};
    jb_kernel_spec spec = {.struct_size = sizeof(jb_kernel_spec),
                           .name = "misuse_kernel",
                           .input_names = in,
                           .input_dtypes = f32,
                           .num_inputs = 1,
                           .output_names = outn,
                           .output_dtypes = f32,
                           .num_outputs = 1,
                           .body = "y[thread_index()] = x[thread_index()];"};
    jb_custom_kernel *k;
    CHECK_OK(jb_custom_kernel_new(&k, &spec));
    jb_array *x, *ints, *out[1] = {NULL};
    CHECK_OK(jb_array_arange(&x, cpu, 8, JB_F32));
    CHECK_OK(jb_array_arange(&ints, cpu, 8, JB_I32));
    int64_t n = 8, negative = -1, huge = INT64_MAX;
    const int64_t *shapes[] = {&n}, *bad_shape[] = {&negative}, *huge_shape[] = {&huge};
    const int64_t *null_shape[] = {NULL};
    int ndims[] = {1}, bad_ndims[] = {JB_MAX_NDIM + 1};
    jb_launch_shape threads = {{0, 0, 0}, {0, 0, 0}, 8};
    jb_launch_shape none = {{0, 0, 0}, {0, 0, 0}, 0}; /* an empty batch: no error */
    jb_launch_shape zero_block = {{1, 1, 1}, {0, 1, 1}, 0};
    jb_launch_shape too_wide = {{1, 1, 1}, {1025, 1, 1}, 0};
    /* Products that wrap: 2^31 * 2^31 * 4 threads per block is 0 mod 2^64; 2^96 blocks. */
    jb_launch_shape wrapping_block = {{1, 1, 1}, {1u << 31, 1u << 31, 4}, 0};
    jb_launch_shape wrapping_grid = {{UINT32_MAX, UINT32_MAX, UINT32_MAX}, {1, 1, 1}, 0};
    jb_array *inputs[] = {x}, *wrong_inputs[] = {ints}, *null_inputs[] = {NULL};
    jb_counters_get(&before, sizeof before);
    EXPECT(jb_custom_kernel_launch(out, k, inputs, 1, shapes, ndims, NULL),
           JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_custom_kernel_launch(out, k, inputs, 1, shapes, ndims, &zero_block),
           JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_custom_kernel_launch(out, k, inputs, 1, shapes, ndims, &too_wide),
           JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_custom_kernel_launch(out, k, inputs, 1, shapes, ndims, &wrapping_block),
           JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_custom_kernel_launch(out, k, inputs, 1, shapes, ndims, &wrapping_grid),
           JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_custom_kernel_launch(out, k, inputs, 2, shapes, ndims, &threads),
           JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_custom_kernel_launch(out, k, wrong_inputs, 1, shapes, ndims, &threads), JB_ERR_SHAPE);
    EXPECT(jb_custom_kernel_launch(out, k, null_inputs, 1, shapes, ndims, &threads),
           JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_custom_kernel_launch(out, k, inputs, 1, bad_shape, ndims, &threads),
           JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_custom_kernel_launch(out, k, inputs, 1, huge_shape, ndims, &threads),
           JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_custom_kernel_launch(out, k, inputs, 1, null_shape, ndims, &threads),
           JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_custom_kernel_launch(out, k, inputs, 1, shapes, bad_ndims, &threads),
           JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_custom_kernel_launch(out, k, inputs, 1, NULL, ndims, &threads),
           JB_ERR_INVALID_ARGUMENT);
    CHECK(out[0] == NULL, "a failed launch left an output");
    counters_unchanged("bad launches (nothing may be built)");
    float host[8];
    EXPECT(jb_array_read(x, host, sizeof host - 4), JB_ERR_SHAPE);
    EXPECT(jb_array_read(x, NULL, sizeof host), JB_ERR_INVALID_ARGUMENT);
    /* And the good launch still works after all of that. */
    CHECK_OK(jb_custom_kernel_launch(out, k, inputs, 1, shapes, ndims, &threads));
    CHECK_OK(jb_array_read(out[0], host, sizeof host));
    CHECK(host[7] == 7.0f, "the copy kernel computed %g", (double)host[7]);
    jb_array_free(out[0]);
    int64_t zero = 0;
    const int64_t *empty_shapes[] = {&zero};
    CHECK_OK(jb_custom_kernel_launch(out, k, inputs, 1, empty_shapes, ndims, &none));
    CHECK(jb_array_size(out[0]) == 0, "an empty batch made %zu elements",
          (size_t)jb_array_size(out[0]));
    jb_array_free(out[0]);
    jb_array_free(x);
    jb_array_free(ints);
    jb_custom_kernel_free(k);
}

/* Scalars of the wrong dtype, number or value: refused before anything is built or run. */
static void bad_scalars(void)
{
    const char *in[] = {"x"}, *outn[] = {"y"}, *scalar_names[] = {"scale", "negate"};
    jb_dtype f32[] = {JB_F32}, scalar_dtypes[] = {JB_F32, JB_BOOL};
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    spec.name = "misuse_scalars";
    spec.input_names = in, spec.input_dtypes = f32, spec.num_inputs = 1;
    spec.output_names = outn, spec.output_dtypes = f32, spec.num_outputs = 1;
    spec.scalar_names = scalar_names, spec.scalar_dtypes = scalar_dtypes, spec.num_scalars = 2;
    spec.body = "y[thread_index()] = (negate ? -scale : scale) * x[thread_index()];";
    jb_custom_kernel *k = NULL;
    CHECK_OK(jb_custom_kernel_new(&k, &spec));
    jb_array *x = NULL, *out[1] = {NULL};
    CHECK_OK(jb_array_arange(&x, cpu, 8, JB_F32));
    int64_t n = 8;
    const int64_t *shapes[] = {&n};
    int ndims[] = {1};
    jb_launch_shape threads = {{0, 0, 0}, {0, 0, 0}, 8};
    jb_scalar good[] = {{.dtype = JB_F32, .value.f32 = 2.0f}, {.dtype = JB_BOOL}};
    jb_scalar as_i32[] = {{.dtype = JB_I32, .value.i32 = 2}, {.dtype = JB_BOOL}};
    jb_scalar as_f64[] = {{.dtype = JB_F64, .value.f64 = 2.0}, {.dtype = JB_BOOL}};
    jb_scalar no_dtype[] = {{.dtype = (jb_dtype)999}, {.dtype = JB_BOOL}};
    jb_scalar bool_of_2[] = {{.dtype = JB_F32, .value.f32 = 2.0f},
                             {.dtype = JB_BOOL, .value.boolean = 2}};
    jb_counters_get(&before, sizeof before);
    const jb_scalar *wrong_dtypes[] = {as_i32, as_f64, no_dtype};
    for (size_t i = 0; i < sizeof wrong_dtypes / sizeof *wrong_dtypes; i++) {
        EXPECT(jb_custom_kernel_launch_on(out, k, NULL, &x, 1, wrong_dtypes[i], 2, shapes, ndims,
                                          &threads),
               JB_ERR_SHAPE);
        CHECK(strstr(jb_last_error_message(), "scalar 'scale'") != NULL,
              "a wrong scalar dtype's message does not name the scalar: %s",
              jb_last_error_message());
    }
    EXPECT(jb_custom_kernel_launch_on(out, k, NULL, &x, 1, bool_of_2, 2, shapes, ndims, &threads),
           JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_custom_kernel_launch_on(out, k, NULL, &x, 1, good, 1, shapes, ndims, &threads),
           JB_ERR_INVALID_ARGUMENT);
    EXPECT(jb_custom_kernel_launch_on(out, k, NULL, &x, 1, NULL, 2, shapes, ndims, &threads),
           JB_ERR_INVALID_ARGUMENT);
    CHECK(out[0] == NULL, "a launch with bad scalars left an output");
    counters_unchanged("launches with bad scalars (nothing may be built)");
    CHECK_OK(jb_custom_kernel_launch_on(out, k, NULL, &x, 1, good, 2, shapes, ndims, &threads));
    float host[8] = {0};
    if (out[0])
        CHECK_OK(jb_array_read(out[0], host, sizeof host));
    CHECK(host[7] == 14.0f, "the scaling kernel computed %g, not 14", (double)host[7]);
    jb_array_free(out[0]);
    jb_array_free(x);
    jb_custom_kernel_free(k);
}

/* Sizes whose arithmetic wraps: a thread count within a block of 2^64 (its block count
 * (total + per_block - 1) / per_block wrapped to 0, and the cpu worker looped for ever), and
 * output shapes whose element count wraps (2^40 x 2^40 read as 0 elements, a 0-byte output
 * the kernel then wrote into). Each is refused before anything is built or run. In a child
 * under a deadline: accepted, the first hangs and the second crashes. */
static bool sizes_that_wrap_in_a_child(void *arg)
{
    (void)arg;
    check_failed = check_passed = 0;
    {
        const char *in[] = {"x"}, *outn[] = {"y"};
        jb_dtype f32[] = {JB_F32};
        jb_kernel_spec spec = {.struct_size = sizeof(jb_kernel_spec),
                               .name = "misuse_wrapping",
                               .input_names = in,
                               .input_dtypes = f32,
                               .num_inputs = 1,
                               .output_names = outn,
                               .output_dtypes = f32,
                               .num_outputs = 1,
                               .body = "y[thread_index()] = x[thread_index()];"};
        jb_custom_kernel *k;
        CHECK_OK(jb_custom_kernel_new(&k, &spec));
        jb_array *x, *out[1] = {NULL}, *inputs[1];
        CHECK_OK(jb_array_arange(&x, cpu, 8, JB_F32));
        inputs[0] = x;
        int64_t n = 8, big = INT64_C(1) << 40, half = INT64_C(1) << 32, third = INT64_C(1) << 22;
        int64_t square[] = {big, big}, wraps_to_zero[] = {half, half}, cube[] = {third, third, third};
        const int64_t *shapes[] = {&n}, *square_shape[] = {square}, *zero_shape[] = {wraps_to_zero};
        const int64_t *cube_shape[] = {cube};
        int one[] = {1}, two[] = {2}, three[] = {3};
        uint64_t totals[] = {UINT64_MAX, UINT64_MAX - 1, UINT64_MAX - 255, UINT64_MAX - 256,
                             UINT64_MAX - 1024, (uint64_t)UINT32_MAX * 1024 + 1};
        for (size_t i = 0; i < sizeof totals / sizeof *totals; i++) {
            jb_launch_shape threads = {{0, 0, 0}, {0, 0, 0}, totals[i]};
            int got = jb_custom_kernel_launch(out, k, inputs, 1, shapes, one, &threads);
            CHECK(got == JB_ERR_INVALID_ARGUMENT && !out[0],
                  "%llu threads: %s (a launch of 2^64 threads was accepted)",
                  (unsigned long long)totals[i], jb_status_name(got));
        }
        jb_launch_shape eight = {{0, 0, 0}, {0, 0, 0}, 8};
        EXPECT(jb_custom_kernel_launch(out, k, inputs, 1, square_shape, two, &eight),
               JB_ERR_INVALID_ARGUMENT);
        EXPECT(jb_custom_kernel_launch(out, k, inputs, 1, zero_shape, two, &eight),
               JB_ERR_INVALID_ARGUMENT);
        EXPECT(jb_custom_kernel_launch(out, k, inputs, 1, cube_shape, three, &eight),
               JB_ERR_INVALID_ARGUMENT);
        CHECK(out[0] == NULL, "a failed launch left an output");
        jb_array_free(x);
        jb_custom_kernel_free(k);
    }
    return check_failed == 0;
}

static void sizes_that_wrap(void)
{
    CHECK(child_says_yes("sizes that wrap", 20, sizes_that_wrap_in_a_child, NULL),
          "sizes that wrap were accepted (the child's failed checks are above, or it crashed)");
}

int main(void)
{
    setenv("JITBRIDGE_DISK_CACHE", "0", 1); /* this test's kernels stay off the user's cache */
    CHECK(strcmp(jb_last_error_message(), "") == 0, "a fresh thread has an empty message");
    CHECK(jb_abi_version() == JB_ABI_VERSION, "ABI version");
    CHECK_OK(jb_device_get(&cpu, JB_DEVICE_CPU, 0));
    jb_counters_get(&before, sizeof before);
    null_pointers();
    bad_probe_inputs();
    bad_names();
    bad_launches();
    bad_scalars();
    sizes_that_wrap();
    return check_summary("test_misuse");
}
