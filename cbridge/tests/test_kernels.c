/*
 * The kernel API from C: a spec from an older header (smaller struct_size) still works and the
 * bytes past it are never read; sizes the library cannot know are refused; every dtype has a
 * name and size; scalars, a compile-time parameter and an explicit stream in one launch; a
 * whole-source module with two entry points; an entry its source does not define refused (never
 * libc's function of that name); hostile inputs refused before anything is built; f16
 * arithmetic in a body.
 */
#include "check.h"
#include "jitbridge.h"

#include <link.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static jb_device *cpu;

/* Launches `k` on {0, 1, 2, 3} f32 with `scalars` on `stream`; the output's element 3. */
static float launch3(jb_custom_kernel *k, jb_stream *stream, const jb_scalar *scalars,
                     size_t num_scalars)
{
    jb_array *in = NULL, *out[1] = {NULL};
    int64_t n = 4;
    const int64_t *shapes[] = {&n};
    int ndims[] = {1};
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, 4};
    float values[4] = {-1, -1, -1, -1};
    CHECK_OK(jb_array_arange(&in, cpu, 4, JB_F32));
    CHECK_OK(jb_custom_kernel_launch_on(out, k, stream, &in, 1, scalars, num_scalars, shapes, ndims,
                                        &shape));
    if (out[0])
        CHECK_OK(jb_array_read(out[0], values, sizeof values));
    jb_array_free(in);
    jb_array_free(out[0]);
    return values[3];
}

static void spec_growth(void)
{
    const char *in[] = {"x"}, *outn[] = {"y"};
    jb_dtype f32[] = {JB_F32};
    /* An older caller's struct: what the first header had, followed by bytes it never set. */
    size_t v1_size = offsetof(jb_kernel_spec, scalar_names);
    jb_kernel_spec *old = malloc(sizeof *old);
    memset(old, 0xa5, sizeof *old);
    jb_kernel_spec fields = {.struct_size = v1_size,
                             .name = "grown_spec",
                             .input_names = in,
                             .input_dtypes = f32,
                             .num_inputs = 1,
                             .output_names = outn,
                             .output_dtypes = f32,
                             .num_outputs = 1,
                             .body = "y[thread_index()] = x[thread_index()] * 10.0f;"};
    memcpy(old, &fields, v1_size);
    jb_custom_kernel *k = NULL;
    CHECK_OK(jb_custom_kernel_new(&k, old));
    if (k)
        CHECK(launch3(k, NULL, NULL, 0) == 30.0f, "the old-size spec's kernel runs");
    jb_custom_kernel_free(k);

    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    CHECK(spec.struct_size == sizeof(jb_kernel_spec) && spec.name == NULL, "the init macro");
    memcpy(&spec, &fields, v1_size);
    spec.struct_size = 0;
    k = (jb_custom_kernel *)1;
    CHECK(jb_custom_kernel_new(&k, &spec) == JB_ERR_INVALID_ARGUMENT && k == NULL,
          "struct_size 0 (no init macro) is refused");
    CHECK(strstr(jb_last_error_message(), "JB_KERNEL_SPEC_INIT") != NULL, "%s",
          jb_last_error_message());
    spec.struct_size = sizeof spec + 8;
    CHECK(jb_custom_kernel_new(&k, &spec) == JB_ERR_UNSUPPORTED, "a newer header is refused");
    CHECK(strstr(jb_last_error_message(), "newer") != NULL, "%s", jb_last_error_message());
    free(old);
}

static void dtypes(void)
{
    const char *names[] = {"f32", "i32", "f16",  "bf16", "f64", "i8", "u8",
                           "u32", "i64", "bool", "i16",  "u16", "u64"};
    const size_t sizes[] = {4, 4, 2, 2, 8, 1, 1, 4, 8, 1, 2, 2, 8};
    for (int d = 0; d < 13; d++) {
        CHECK(jb_dtype_name(d) && strcmp(jb_dtype_name(d), names[d]) == 0, "name of %d", d);
        CHECK(jb_dtype_size(d) == sizes[d], "size of %s", names[d]);
    }
    CHECK(jb_dtype_name(13) == NULL && jb_dtype_size(-1) == 0, "out of range dtypes");
    CHECK(jb_f32_to_bf16_bits(1.0f) == 0x3f80 && jb_f32_to_f16_bits(1.0f) == 0x3c00, "one");
    /* 1 + 2^-8 is halfway between two bf16 values: ties go to the even one, 1.0. */
    CHECK(jb_f32_to_bf16_bits(1.00390625f) == 0x3f80, "bf16 tie to even");
    CHECK(jb_f32_to_bf16_bits(1.01171875f) == 0x3f82, "bf16 tie to even, upwards");
    CHECK(jb_f16_bits_to_f32(0x0001) == 5.9604644775390625e-8f, "smallest f16 subnormal");
    /* A signalling NaN comes out quiet, as _Float16 and the F16C instruction give it. */
    float nan = jb_f16_bits_to_f32(0xfc01);
    uint32_t nan_bits;
    memcpy(&nan_bits, &nan, sizeof nan_bits);
    CHECK(nan_bits == 0xffc02000u, "f16 sNaN to f32: %08x", (unsigned)nan_bits);
}

static void scalars_params_stream(void)
{
    const char *in[] = {"x"}, *outn[] = {"y"}, *scalar_names[] = {"scale", "shift"};
    jb_dtype f32[] = {JB_F32}, scalar_dtypes[] = {JB_BF16, JB_I64};
    jb_kernel_param params[] = {{"WIDTH", JB_PARAM_INT, 100}, {"ACC", JB_PARAM_DTYPE, JB_F64}};
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    spec.name = "c_scalars";
    spec.input_names = in, spec.input_dtypes = f32, spec.num_inputs = 1;
    spec.output_names = outn, spec.output_dtypes = f32, spec.num_outputs = 1;
    spec.scalar_names = scalar_names, spec.scalar_dtypes = scalar_dtypes, spec.num_scalars = 2;
    spec.params = params, spec.num_params = 2;
    spec.body = "ACC v = (ACC)x[thread_index()] * bf16_to_f32(scale) + (ACC)shift + WIDTH;\n"
                "y[thread_index()] = (float)v;";
    jb_custom_kernel *k = NULL;
    CHECK_OK(jb_custom_kernel_new(&k, &spec));
    jb_stream *stream = NULL;
    CHECK_OK(jb_stream_new(&stream, cpu));
    jb_scalar scalars[2] = {{.dtype = JB_BF16}, {.dtype = JB_I64}};
    scalars[0].value.bf16_bits = jb_f32_to_bf16_bits(0.5f);
    scalars[1].value.i64 = -1000;
    if (k && stream)
        CHECK(launch3(k, stream, scalars, 2) == 3 * 0.5f - 1000 + 100, "scalars and params");
    jb_custom_kernel_free(k);
    jb_stream_free(stream);

    params[0].kind = JB_PARAM_BOOL; /* 100 is not a bool */
    CHECK(jb_custom_kernel_new(&k, &spec) == JB_ERR_INVALID_ARGUMENT, "bool parameter of 100");
    params[0] = (jb_kernel_param){"WIDTH", JB_PARAM_DTYPE, 77};
    CHECK(jb_custom_kernel_new(&k, &spec) == JB_ERR_INVALID_ARGUMENT, "dtype parameter of 77");
    params[0] = (jb_kernel_param){"shift", JB_PARAM_INT, 1};
    CHECK(jb_custom_kernel_new(&k, &spec) == JB_ERR_INVALID_ARGUMENT, "a parameter named as a "
                                                                      "scalar");
}

/* i16, u16 and u64 arrays and scalars: each its C type in the body (i16 sign-extends, u64
 * wraps modulo 2^64), and each an arange that wraps modulo its width. */
static void wide_and_narrow_integers(void)
{
    const char *in[] = {"x", "h"}, *outn[] = {"y"}, *scalar_names[] = {"a", "b", "c"};
    jb_dtype in_dtypes[] = {JB_U64, JB_I16}, u64[] = {JB_U64};
    jb_dtype scalar_dtypes[] = {JB_I16, JB_U16, JB_U64};
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    spec.name = "c_integer_widths";
    spec.input_names = in, spec.input_dtypes = in_dtypes, spec.num_inputs = 2;
    spec.output_names = outn, spec.output_dtypes = u64, spec.num_outputs = 1;
    spec.scalar_names = scalar_names, spec.scalar_dtypes = scalar_dtypes, spec.num_scalars = 3;
    spec.body = "const uint64_t i = thread_index();\n"
                "y[i] = x[i] * c + (u64)(i64)a + b + (u64)(i64)h[i];";
    jb_custom_kernel *k = NULL;
    CHECK_OK(jb_custom_kernel_new(&k, &spec));
    enum { N = 70000 };
    jb_array *args[2] = {NULL, NULL}, *out[1] = {NULL};
    CHECK_OK(jb_array_arange(&args[0], cpu, N, JB_U64));
    CHECK_OK(jb_array_arange(&args[1], cpu, N, JB_I16));
    jb_scalar scalars[3] = {{.dtype = JB_I16}, {.dtype = JB_U16}, {.dtype = JB_U64}};
    scalars[0].value.i16 = -3;
    scalars[1].value.u16 = 0xfff0;
    scalars[2].value.u64 = UINT64_MAX - 1; /* x * c wraps to -2x modulo 2^64 */
    int64_t n = N;
    const int64_t *shapes[] = {&n};
    int ndims[] = {1};
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, N};
    static uint64_t got[N];
    if (k && args[0] && args[1] &&
        jb_custom_kernel_launch_on(out, k, NULL, args, 2, scalars, 3, shapes, ndims, &shape) ==
            JB_OK &&
        jb_array_read(out[0], got, sizeof got) == JB_OK) {
        int wrong = 0;
        for (uint64_t i = 0; i < N; i++)
            wrong += got[i] != 0 - 2 * i - 3 + 0xfff0u + (uint64_t)(int64_t)(int16_t)i;
        CHECK(wrong == 0, "%d of %d u64 results wrong (y[40000] = %llu)", wrong, N,
              (unsigned long long)got[40000]);
    } else
        CHECK(0, "the integer-width kernel did not run: %s", jb_last_error_message());
    static uint16_t narrow[65538];
    jb_array *u16s = NULL;
    CHECK_OK(jb_array_arange(&u16s, cpu, 65538, JB_U16));
    if (u16s && jb_array_read(u16s, narrow, sizeof narrow) == JB_OK)
        CHECK(narrow[65535] == 65535 && narrow[65536] == 0 && narrow[65537] == 1,
              "u16 arange wraps modulo 2^16: %u %u %u", narrow[65535], narrow[65536],
              narrow[65537]);
    jb_array_free(u16s);
    jb_array_free(args[0]);
    jb_array_free(args[1]);
    jb_array_free(out[0]);
    jb_custom_kernel_free(k);
}

/* f16 is arithmetic in a body: computed in f32 and rounded to nearest even where stored, so
 * v * v may pass 65504 (f16's largest) on the way and still give a finite result. */
static void half_arithmetic(void)
{
    const char *in[] = {"x"}, *outn[] = {"y"};
    jb_dtype f16[] = {JB_F16};
    jb_kernel_param params[] = {{"T", JB_PARAM_DTYPE, JB_F16}};
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    spec.name = "c_half_arithmetic";
    spec.input_names = in, spec.input_dtypes = f16, spec.num_inputs = 1;
    spec.output_names = outn, spec.output_dtypes = f16, spec.num_outputs = 1;
    spec.params = params, spec.num_params = 1;
    spec.body = "const uint64_t i = thread_index(); T v = x[i]; y[i] = v * v / (T)7 - (T)0.5;";
    jb_custom_kernel *k = NULL;
    CHECK_OK(jb_custom_kernel_new(&k, &spec));
    const char *gpu_source = k ? jb_custom_kernel_source(k, "cuda") : NULL;
    CHECK(gpu_source && strstr(gpu_source, "operator float()"), "the GPU's f16 converts to float");
    enum { N = 700 };
    jb_array *x = NULL, *out[1] = {NULL};
    CHECK_OK(jb_array_arange(&x, cpu, N, JB_F16));
    int64_t n = N;
    const int64_t *shapes[] = {&n};
    int ndims[] = {1};
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, N};
    uint16_t got[N];
    if (k && x && jb_custom_kernel_launch_on(out, k, NULL, &x, 1, NULL, 0, shapes, ndims, &shape) ==
                      JB_OK &&
        jb_array_read(out[0], got, sizeof got) == JB_OK) {
        int wrong = 0;
        for (int i = 0; i < N; i++)
            wrong += got[i] != jb_f32_to_f16_bits((float)i * (float)i / 7.0f - 0.5f);
        CHECK(wrong == 0, "%d of %d f16 results wrong (y[600] = 0x%04x)", wrong, N, got[600]);
    } else
        CHECK(0, "the f16 kernel did not run: %s", jb_last_error_message());
    jb_array_free(x);
    jb_array_free(out[0]);
    jb_custom_kernel_free(k);
}

static const char raw_source[] =
    "void fill(void **args, uint64_t threads) {\n"
    "    float *y = *(float **)args[0]; float v = *(float *)args[1];\n"
    "    for (uint64_t i = 0; i < threads; i++) y[i] = v + (float)i;\n"
    "}\n"
    "void twice(void **args, uint64_t threads) {\n"
    "    const float *x = *(const float **)args[0]; float *y = *(float **)args[1];\n"
    "    for (uint64_t i = 0; i < threads; i++) y[i] = 2.0f * x[i] + BIAS;\n"
    "}\n";

static void source_modules(void)
{
    const char *entries[] = {"fill", "twice"}, *defines[] = {"BIAS=0.5f"};
    jb_source_module_spec spec = JB_SOURCE_MODULE_SPEC_INIT;
    spec.name = "c_raw", spec.cpu_source = raw_source;
    spec.entry_names = entries, spec.num_entries = 2;
    spec.defines = defines, spec.num_defines = 1;
    jb_source_module *m = NULL;
    CHECK_OK(jb_source_module_new(&m, &spec));
    jb_array *x = NULL, *y = NULL;
    CHECK_OK(jb_array_arange(&x, cpu, 4, JB_F32));
    CHECK_OK(jb_array_arange(&y, cpu, 4, JB_F32));
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, 4};
    jb_arg fill[] = {{.array = x, .written = 1}, {.scalar = {.dtype = JB_F32, .value.f32 = 10}}};
    jb_arg twice[] = {{.array = x}, {.array = y, .written = 1}};
    CHECK_OK(jb_source_module_launch(m, NULL, "fill", fill, 2, &shape));
    CHECK_OK(jb_source_module_launch(m, NULL, "twice", twice, 2, &shape));
    float got[4] = {0};
    CHECK_OK(jb_array_read(y, got, sizeof got));
    CHECK(got[0] == 20.5f && got[3] == 26.5f, "two entries: %g %g", got[0], got[3]);

    jb_counters before, after;
    jb_counters_get(&before, sizeof before);
    CHECK(jb_source_module_launch(m, NULL, "thrice", twice, 2, &shape) == JB_ERR_INVALID_ARGUMENT,
          "an unknown entry");
    CHECK(jb_source_module_launch(m, NULL, "fill", fill + 1, 1, &shape) == JB_ERR_INVALID_ARGUMENT,
          "no array and no stream: no device");
    jb_counters_get(&after, sizeof after);
    CHECK(after.builds == before.builds && after.misses == before.misses, "nothing built");
    jb_source_module_free(m);

    spec.cpu_source = NULL, spec.gpu_source = "extern \"C\" __global__ void fill() {}";
    CHECK_OK(jb_source_module_new(&m, &spec));
    CHECK(jb_source_module_launch(m, NULL, "fill", fill, 2, &shape) == JB_ERR_UNSUPPORTED,
          "no cpu source: %s", jb_last_error_message());
    jb_source_module_free(m);
    spec.struct_size = 8;
    CHECK(jb_source_module_new(&m, &spec) == JB_ERR_INVALID_ARGUMENT, "struct_size too small");
    jb_array_free(x);
    jb_array_free(y);
}

static int count_object(struct dl_phdr_info *info, size_t size, void *count)
{
    (void)info, (void)size;
    ++*(int *)count;
    return 0;
}

/* Shared objects loaded in this process now. */
static int loaded_objects(void)
{
    int count = 0;
    dl_iterate_phdr(count_object, &count);
    return count;
}

/* An entry the source does not define: dlsym on the module's handle also searches its
 * dependencies, so "abort" bound to libc's (the source calls memcpy) and the launch ran it. Each
 * is JB_ERR_LOAD naming the entry, and so is a name that is data, not a function; each such
 * module is unloaded again (a server retrying it would otherwise keep one per launch). */
static void foreign_entries(void)
{
    static const char source[] =
        "#include <string.h>\n"
        "#include <math.h>\n"
        "int not_code = 3;\n"
        "extern void declared_only(void **args, uint64_t threads) __attribute__((weak));\n"
        "void copy(void **args, uint64_t threads) {\n"
        "    if (declared_only) declared_only(args, threads);\n"
        "    float *y = *(float **)args[1];\n"
        "    memcpy(y, *(float **)args[0], threads * sizeof(float));\n"
        "    y[0] = sqrtf(y[0]);\n"
        "}\n";
    /* libc's, libm's (the module links -lm), a weak declaration, a global variable */
    const char *foreign[] = {"abort", "exit", "puts", "memcpy", "sqrtf", "declared_only",
                             "not_code"};
    jb_array *x = NULL, *y = NULL;
    CHECK_OK(jb_array_arange(&x, cpu, 4, JB_F32));
    CHECK_OK(jb_array_arange(&y, cpu, 4, JB_F32));
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, 4};
    jb_arg args[] = {{.array = x}, {.array = y, .written = 1}};
    int loaded_before = loaded_objects();
    for (size_t i = 0; i <= sizeof foreign / sizeof *foreign; i++) {
        const char *entries[] = {"copy", i < sizeof foreign / sizeof *foreign ? foreign[i] : NULL};
        if (!entries[1])
            CHECK(loaded_objects() == loaded_before, "%d shared objects loaded, not %d: a module "
                  "whose entries did not resolve stayed loaded", loaded_objects(), loaded_before);
        jb_source_module_spec spec = JB_SOURCE_MODULE_SPEC_INIT;
        spec.name = "foreign_entry", spec.cpu_source = source;
        spec.entry_names = entries, spec.num_entries = entries[1] ? 2 : 1;
        jb_source_module *m = NULL;
        CHECK_OK(jb_source_module_new(&m, &spec));
        int status = jb_source_module_launch(m, NULL, "copy", args, 2, &shape);
        if (!entries[1]) { /* the control: the module alone builds and runs */
            float got[4] = {0};
            CHECK(status == JB_OK, "the module's own entry: %s", jb_last_error_message());
            CHECK_OK(jb_array_read(y, got, sizeof got));
            CHECK(got[0] == 0.0f && got[3] == 3.0f, "copy: %g %g", got[0], got[3]);
        } else {
            char quoted[64];
            snprintf(quoted, sizeof quoted, "'%s'", entries[1]);
            CHECK(status == JB_ERR_LOAD && strstr(jb_last_error_message(), quoted),
                  "entry %s, which the source does not define: status %d: %s", entries[1], status,
                  jb_last_error_message());
        }
        jb_source_module_free(m);
    }
    jb_array_free(x);
    jb_array_free(y);
}

/* Inputs that would reach the compiler or a kernel malformed: each refused, nothing built. */
static void hostile_inputs(void)
{
    jb_counters before, after;
    jb_counters_get(&before, sizeof before);
    unsigned char flags[3] = {0, 1, 2};
    int64_t n = 3;
    jb_array *a = NULL;
    CHECK(jb_array_from_host(&a, cpu, JB_BOOL, &n, 1, flags) == JB_ERR_INVALID_ARGUMENT && !a,
          "a bool byte 2 from the host");
    flags[2] = 1;
    CHECK_OK(jb_array_from_host(&a, cpu, JB_BOOL, &n, 1, flags));
    jb_array_free(a);

    const char *in[] = {"x"}, *outn[] = {"y"};
    jb_dtype f32[] = {JB_F32};
    jb_kernel_param param = {"N", JB_PARAM_INT, 2};
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    spec.name = "hostile", spec.body = "y[thread_index()] = x[thread_index()] * N;";
    spec.input_names = in, spec.input_dtypes = f32, spec.num_inputs = 1;
    spec.output_names = outn, spec.output_dtypes = f32, spec.num_outputs = 1;
    spec.params = &param, spec.num_params = 1;
    /* A trailing backslash joins the next line (the parameter's #define) to the define; an open
     * comment swallows what follows; a second definition of a name silently wins, as does one
     * of the kernel's name or an array's <name>_size. */
    const char *bad[][2] = {{"A=1 \\", NULL}, {"A=1 /* x", NULL}, {"N=5", NULL},
                            {"A=1", "A=2"},   {"x=3", NULL},      {"hostile=1", NULL},
                            {"y_size=0", NULL}};
    jb_source_module_spec ms = JB_SOURCE_MODULE_SPEC_INIT;
    const char *entries[] = {"fill"};
    ms.name = "hostile_module", ms.cpu_source = raw_source;
    ms.entry_names = entries, ms.num_entries = 1;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        spec.defines = bad[i], spec.num_defines = bad[i][1] ? 2 : 1;
        jb_custom_kernel *k = NULL;
        CHECK(jb_custom_kernel_new(&k, &spec) == JB_ERR_INVALID_ARGUMENT && !k,
              "kernel define '%s' refused", bad[i][0]);
        jb_custom_kernel_free(k);
        if (i >= 2 && i != 3)
            continue; /* names of a kernel: a module has none but its entries */
        ms.defines = bad[i], ms.num_defines = bad[i][1] ? 2 : 1;
        jb_source_module *m = NULL;
        CHECK(jb_source_module_new(&m, &ms) == JB_ERR_INVALID_ARGUMENT && !m,
              "module define '%s' refused", bad[i][0]);
        jb_source_module_free(m);
    }
    jb_counters_get(&after, sizeof after);
    CHECK(after.builds == before.builds && after.misses == before.misses, "nothing built");
}

int main(void)
{
    CHECK_OK(jb_device_get(&cpu, JB_DEVICE_CPU, 0));
    spec_growth();
    dtypes();
    scalars_params_stream();
    wide_and_narrow_integers();
    half_arithmetic();
    source_modules();
    foreign_entries();
    hostile_inputs();
    return check_summary("test_kernels");
}
