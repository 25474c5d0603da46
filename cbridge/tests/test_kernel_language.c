/*
 * The kernel language, on the device JITBRIDGE_TEST_DEVICE names (cpu by default): `return` ends
 * one thread; outputs' initial values; shapes in a body; in-place outputs; kernels without
 * inputs; zeros and full; bounds-checked launches (an index out of range is an error at the
 * wait, naming kernel, array, index and thread, and is never an access outside the array);
 * atomics from the C API, checked and not.
 */
#include "helpers.h"

#include <stdio.h>

static jb_device *device;

/* A kernel of one f32 input `inp` and one f32 output `out`, with `flags` and optional inits. */
static jb_custom_kernel *kernel_with(const char *name, const char *body, unsigned flags,
                                     const jb_scalar *inits)
{
    const char *in[] = {"inp"}, *out[] = {"out"};
    jb_dtype f32[] = {JB_F32};
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    spec.name = name;
    spec.input_names = in, spec.input_dtypes = f32, spec.num_inputs = 1;
    spec.output_names = out, spec.output_dtypes = f32, spec.num_outputs = 1;
    spec.body = body;
    spec.compile_flags = flags;
    spec.output_inits = inits;
    jb_custom_kernel *k = NULL;
    CHECK_OK(jb_custom_kernel_new(&k, &spec));
    return k;
}

/* Reads n f32 values of `a` into `host`; false (with the error kept) when the read fails. */
static bool read_f32(jb_array *a, float *host, int64_t n)
{
    return a && jb_array_read(a, host, (size_t)n * sizeof *host) == JB_OK;
}

static void test_return_ends_one_thread(void)
{
    jb_scalar zero = {.dtype = JB_F32, .value.f32 = 0.0f};
    jb_custom_kernel *k = kernel_with(
        "early_return", "if (thread_index() == 0) return;\nout[thread_index()] = 1.0f;", 0, &zero);
    jb_array *x = f32_filled(device, 16, 0.0f), *y = NULL;
    CHECK_OK(f32_launch(&y, k, &x, 1, 16));
    float host[16];
    CHECK(read_f32(y, host, 16), "%s", jb_last_error_message());
    CHECK(host[0] == 0.0f, "thread 0 returned before writing, yet out[0] is %g", (double)host[0]);
    int written = 0;
    for (int i = 1; i < 16; i++)
        written += host[i] == 1.0f;
    CHECK(written == 15, "threads 1..15 run after thread 0's return: %d of 15 wrote", written);
    jb_array_free(x);
    jb_array_free(y);
    jb_custom_kernel_free(k);
}

static void test_output_inits(void)
{
    jb_scalar seven = {.dtype = JB_F32, .value.f32 = 7.0f};
    jb_custom_kernel *k =
        kernel_with("init_seven", "if (thread_index() % 2) out[thread_index()] = 1.0f;", 0, &seven);
    jb_array *x = f32_filled(device, 8, 0.0f), *y = NULL;
    CHECK_OK(f32_launch(&y, k, &x, 1, 8));
    float host[8];
    CHECK(read_f32(y, host, 8), "%s", jb_last_error_message());
    for (int i = 0; i < 8; i++)
        CHECK(host[i] == (i % 2 ? 1.0f : 7.0f), "out[%d] = %g", i, (double)host[i]);
    jb_array_free(y);
    jb_custom_kernel_free(k);

    /* An initial value of another dtype than its output's is refused at once. */
    jb_scalar wrong = {.dtype = JB_I32, .value.i32 = 7};
    const char *in[] = {"inp"}, *out[] = {"out"};
    jb_dtype f32[] = {JB_F32};
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    spec.name = "init_wrong";
    spec.input_names = in, spec.input_dtypes = f32, spec.num_inputs = 1;
    spec.output_names = out, spec.output_dtypes = f32, spec.num_outputs = 1;
    spec.body = "";
    spec.output_inits = &wrong;
    CHECK(jb_custom_kernel_new(&k, &spec) == JB_ERR_SHAPE, "an i32 init of an f32 output");
    jb_array_free(x);
}

static void test_shapes_in_a_body(void)
{
    jb_custom_kernel *k = kernel_with(
        "shapes_seen",
        "out[thread_index()] = (float)(inp_ndim * 1000 + inp_shape[0] * 100 + inp_shape[1] * 10 "
        "+ out_ndim);",
        0, NULL);
    int64_t shape[] = {3, 4}, n = 12;
    float zeros[12] = {0};
    jb_array *x = NULL, *y = NULL;
    CHECK_OK(jb_array_from_host(&x, device, JB_F32, shape, 2, zeros));
    CHECK_OK(f32_launch(&y, k, &x, 1, n));
    float host[12];
    CHECK(read_f32(y, host, 12), "%s", jb_last_error_message());
    CHECK(host[5] == 2341.0f, "a body saw ndim, shape[0], shape[1] of its input and its "
                              "output's ndim as %g, not 2341", (double)host[5]);
    jb_array_free(x);
    jb_array_free(y);
    jb_custom_kernel_free(k);
}

static void test_in_place_and_no_inputs(void)
{
    /* No inputs: the device comes from the launch. */
    const char *out[] = {"y"};
    jb_dtype f32[] = {JB_F32};
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    spec.name = "iota";
    spec.output_names = out, spec.output_dtypes = f32, spec.num_outputs = 1;
    spec.body = "y[thread_index()] = (float)thread_index();";
    jb_custom_kernel *iota = NULL;
    CHECK_OK(jb_custom_kernel_new(&iota, &spec));
    int64_t n = 8;
    const int64_t *shapes[] = {&n};
    int ndims[] = {1};
    jb_launch l = JB_LAUNCH_INIT;
    l.output_shapes = shapes, l.output_ndims = ndims;
    l.shape.total_threads = 8;
    jb_array *y = NULL;
    CHECK(jb_custom_kernel_run(&y, iota, &l) == JB_ERR_INVALID_ARGUMENT,
          "a launch without inputs, stream or device ran");
    l.device = device;
    CHECK_OK(jb_custom_kernel_run(&y, iota, &l));

    /* In place: y += x, written into y; the new-output slot stays NULL. */
    spec.name = "accumulate";
    const char *in[] = {"x"};
    spec.input_names = in, spec.input_dtypes = f32, spec.num_inputs = 1;
    spec.body = "y[thread_index()] += x[thread_index()];";
    jb_custom_kernel *acc = NULL;
    CHECK_OK(jb_custom_kernel_new(&acc, &spec));
    jb_array *x = f32_filled(device, 8, 0.5f);
    jb_array *in_place[] = {y}, *outputs[1] = {(jb_array *)&l};
    jb_launch a = JB_LAUNCH_INIT;
    a.inputs = &x, a.num_inputs = 1, a.in_place = in_place;
    a.shape.total_threads = 8;
    for (int step = 0; step < 3; step++)
        CHECK_OK(jb_custom_kernel_run(outputs, acc, &a));
    CHECK(outputs[0] == NULL, "an in-place output was handed back as a new array");
    float host[8];
    CHECK(read_f32(y, host, 8), "%s", jb_last_error_message());
    for (int i = 0; i < 8; i++)
        CHECK(host[i] == (float)i + 1.5f, "y[%d] = %g after three in-place steps", i,
              (double)host[i]);
    /* An array written in place may not also be an input. */
    a.inputs = &y;
    CHECK(jb_custom_kernel_run(NULL, acc, &a) == JB_ERR_INVALID_ARGUMENT,
          "one array as input and in-place output");
    jb_array_free(x);
    jb_array_free(y);
    jb_custom_kernel_free(iota);
    jb_custom_kernel_free(acc);
}

static void test_zeros_and_full(void)
{
    int64_t shape[] = {3, 5};
    jb_array *z = NULL, *f = NULL, *d = NULL;
    CHECK_OK(jb_array_zeros(&z, device, JB_F32, shape, 2));
    float host[15];
    CHECK(read_f32(z, host, 15), "%s", jb_last_error_message());
    for (int i = 0; i < 15; i++)
        CHECK(host[i] == 0.0f, "zeros[%d] = %g", i, (double)host[i]);
    jb_scalar v = {.dtype = JB_F32, .value.f32 = -2.5f};
    CHECK_OK(jb_array_full(&f, device, shape, 2, &v));
    CHECK(read_f32(f, host, 15), "%s", jb_last_error_message());
    for (int i = 0; i < 15; i++)
        CHECK(host[i] == -2.5f, "full[%d] = %g", i, (double)host[i]);
    /* Eight-byte values whose halves differ, over a count that is not a power of two. */
    jb_scalar w = {.dtype = JB_F64, .value.f64 = 1.0 / 3.0};
    int64_t odd = 37;
    CHECK_OK(jb_array_full(&d, device, &odd, 1, &w));
    double host64[37];
    CHECK_OK(jb_array_read(d, host64, sizeof host64));
    for (int i = 0; i < 37; i++)
        CHECK(host64[i] == 1.0 / 3.0, "full f64[%d] = %g", i, host64[i]);
    jb_scalar bad = {.dtype = JB_BOOL, .value.boolean = 2};
    jb_array *none = NULL;
    CHECK(jb_array_full(&none, device, shape, 2, &bad) == JB_ERR_INVALID_ARGUMENT && !none,
          "a bool of 2 filled an array");
    jb_array_free(z);
    jb_array_free(f);
    jb_array_free(d);
}

static void test_bounds_checks(void)
{
    const char *body = "out[thread_index()] = inp[thread_index() % 4] + 1.0f;";
    jb_custom_kernel *checked = kernel_with("checked_writer", body, JB_COMPILE_BOUNDS_CHECKS, NULL);
    CHECK(jb_custom_kernel_bounds_checked(checked) == 1, "the flag is not reported");
    jb_array *x = f32_filled(device, 4, 1.0f), *y = NULL;
    int64_t n = 16;
    const int64_t *shapes[] = {&n};
    int ndims[] = {1};
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, 1000};
    /* 1000 threads over 16 outputs: an unchecked kernel writes 984 elements past the end. */
    CHECK_OK(jb_custom_kernel_launch(&y, checked, &x, 1, shapes, ndims, &shape));
    float host[16];
    CHECK(jb_array_read(y, host, sizeof host) == JB_ERR_BOUNDS, "the read of a launch that went "
                                                                "out of bounds succeeded");
    const char *message = jb_last_error_message();
    CHECK(strstr(message, "checked_writer") && strstr(message, "'out'") &&
              strstr(message, "at 16") && strstr(message, "thread 16") &&
              strstr(message, "16 elements"),
          "the message names kernel, array, index and thread: %s", message);
    CHECK(jb_array_eval(y) == JB_ERR_BOUNDS, "a second wait forgot it");
    /* An array made from it reports it too, through a kernel that is not checked. */
    jb_custom_kernel *plain = kernel_with("plain_reader", "out[thread_index()] = inp[thread_index()];",
                                          0, NULL);
    jb_array *z = NULL;
    CHECK_OK(f32_launch(&z, plain, &y, 1, 16));
    CHECK(jb_array_eval(z) == JB_ERR_BOUNDS, "the report was not passed on");
    jb_array_free(z);
    jb_array_free(y);

    /* In range: no error, and the values are right. */
    CHECK_OK(f32_launch(&y, checked, &x, 1, 16));
    CHECK(read_f32(y, host, 16), "%s", jb_last_error_message());
    CHECK(host[15] == 2.0f, "out[15] = %g", (double)host[15]);
    jb_array_free(y);

    /* A read past an input, and a shape index past ndim. */
    jb_custom_kernel *reader = kernel_with(
        "checked_reader", "out[thread_index()] = inp[thread_index() + 2];", JB_COMPILE_BOUNDS_CHECKS,
        NULL);
    CHECK_OK(f32_launch(&y, reader, &x, 1, 4));
    CHECK(jb_array_eval(y) == JB_ERR_BOUNDS && strstr(jb_last_error_message(), "'inp' at 4"),
          "%s", jb_last_error_message());
    jb_array_free(y);
    jb_custom_kernel *shaped = kernel_with(
        "checked_shape", "out[thread_index()] = (float)inp_shape[thread_index()];",
        JB_COMPILE_BOUNDS_CHECKS, NULL);
    CHECK_OK(f32_launch(&y, shaped, &x, 1, 4));
    CHECK(jb_array_eval(y) == JB_ERR_BOUNDS && strstr(jb_last_error_message(), "'inp_shape'"),
          "%s", jb_last_error_message());
    jb_array_free(y);

    /* A checked body reaches arrays only through subscripts, and names nothing of jb_'s. */
    jb_custom_kernel *refused = NULL;
    const char *in[] = {"inp"}, *out[] = {"out"};
    jb_dtype f32[] = {JB_F32};
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    spec.name = "pointer_walk";
    spec.input_names = in, spec.input_dtypes = f32, spec.num_inputs = 1;
    spec.output_names = out, spec.output_dtypes = f32, spec.num_outputs = 1;
    spec.compile_flags = JB_COMPILE_BOUNDS_CHECKS;
    spec.body = "float *p = out + 1000; *p = 1.0f;";
    CHECK(jb_custom_kernel_new(&refused, &spec) == JB_ERR_INVALID_ARGUMENT &&
              strstr(jb_last_error_message(), "array 'out'"),
          "%s", jb_last_error_message());
    spec.body = "((float *)jb_pointers)[0] = 1.0f;";
    CHECK(jb_custom_kernel_new(&refused, &spec) == JB_ERR_INVALID_ARGUMENT,
          "a checked body named the generated code's own variables");
    /* Comments, strings and member names are not uses of an array. */
    spec.body = "/* out + 1 */ const char *s = \"out\"; (void)s;\n"
                "out[thread_index()] = inp[thread_index()]; // out\n";
    CHECK_OK(jb_custom_kernel_new(&refused, &spec));
    jb_custom_kernel_free(refused);
    jb_custom_kernel_free(checked);
    jb_custom_kernel_free(reader);
    jb_custom_kernel_free(shaped);
    jb_custom_kernel_free(plain);
    jb_array_free(x);
}

/* A checked kernel of `body` and `header` (and `define`, or NULL): JB_OK or why it is refused. */
static jb_status checked_new(jb_custom_kernel **k, const char *body, const char *header,
                             const char *define)
{
    const char *in[] = {"inp"}, *out[] = {"out"}, *defines[] = {define};
    jb_dtype f32[] = {JB_F32};
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    spec.name = "checked_text";
    spec.input_names = in, spec.input_dtypes = f32, spec.num_inputs = 1;
    spec.output_names = out, spec.output_dtypes = f32, spec.num_outputs = 1;
    spec.compile_flags = JB_COMPILE_BOUNDS_CHECKS;
    spec.body = body, spec.header = header;
    spec.defines = defines, spec.num_defines = define != NULL;
    *k = NULL;
    return jb_custom_kernel_new(k, &spec);
}

/* Texts that would reach an array past the checks are refused when the kernel is made: each
 * was accepted before, and each launch below would then have written past the output. */
static void test_checked_texts(void)
{
    static const struct {
        const char *body, *header, *define, *why;
    } refused[] = {
        {"P[thread_index() + 1000] = 1.0f;", "#define P out", NULL, "array 'out'"},
        {"#define CAT(a, b) a##b\nCAT(o, ut)[thread_index() + 1000] = 1.0f;", NULL, NULL, "##"},
        {"out[0] = 1.0f;", "#include \"/dev/null\"", NULL, "#include"},
        {"out[0] = (f32)1;", "#define f32 double", NULL, "defines 'f32'"},
        {"out[0] = 1.0f;", "#define out_size 100000", NULL, "defines 'out_size'"},
        {"#undef uint64_t\nout[0] = 1.0f;", NULL, NULL, "defines 'uint64_t'"},
        {"P[thread_index() + 1000] = 1.0f;", NULL, "P=out", "names array 'out'"},
        {"P(o,ut)[0] = 1.0f;", NULL, "P=o##ut", "##"},
        {"asm(\"\"); out[0] = 1.0f;", NULL, NULL, "asm"},
        /* The compiler reads these differently from a scan that knows only # and ##. */
        {"%:define CAT(a, b) a %:%: b\nCAT(o, ut)[thread_index() + 1000] = 1.0f;", NULL, NULL,
         "%:"},
        {"out[0] = 1.0f;", "/* a comment is a blank */ #include \"/dev/null\"", NULL,
         "directive"},
        {"out[0] = 1.0f;", "/**/ #define out_size 100000", NULL, "defines 'out_size'"},
        {"#include_next <stdint.h>\nout[0] = 1.0f;", NULL, NULL, "directive"},
        {"#import \"/dev/null\"\nout[0] = 1.0f;", NULL, NULL, "directive"},
        {"const char *s = R\"(\")\"; out[thread_index() + 1000] = 1.0f; const char *t = \"\";",
         NULL, NULL, "raw string"},
        {"#define DROP(x)\nDROP(1'0') out[thread_index() + 1000] = 1.0f; DROP('a')", NULL, NULL,
         "digit separator"},
        /* Where trigraphs are on (-std=c11, -ansi, -trigraphs), ? ? ' (no blanks) is ^: a
         * character literal ends there for the compiler, one character later for the scan. */
        {"char c = '?\?''; out[thread_index() + 1000] = 1.0f; //'\n(void)c;", NULL, NULL,
         "trigraph"},
        {"out[0] = 1.0f;", "// ?\?/\n#define out_size 100000", NULL, "trigraph"},
        {"out[0] = 1.0f;", NULL, "X='?\?''", "trigraph"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        jb_custom_kernel *k;
        jb_status status = checked_new(&k, refused[i].body, refused[i].header, refused[i].define);
        CHECK(status == JB_ERR_INVALID_ARGUMENT &&
                  strstr(jb_last_error_message(), refused[i].why),
              "text %zu was not refused for %s: %s", i, refused[i].why,
              status == JB_OK ? "made" : jb_last_error_message());
        jb_custom_kernel_free(k);
    }

    /* A body may shadow `out_size`: the checks use the array's own size all the same. */
    jb_custom_kernel *k;
    CHECK_OK(checked_new(&k, "{ const uint64_t out_size = 1u << 30; (void)out_size;\n"
                             "out[thread_index() + 100] = 1.0f; }",
                         NULL, NULL));
    jb_array *x = f32_filled(device, 16, 0.0f), *y = NULL;
    CHECK_OK(f32_launch(&y, k, &x, 1, 16));
    CHECK(jb_array_eval(y) == JB_ERR_BOUNDS && strstr(jb_last_error_message(), "at 100"),
          "a shadowed out_size let an index of 100 through: %s", jb_last_error_message());
    jb_array_free(y);
    jb_array_free(x);
    jb_custom_kernel_free(k);

    /* Lines are joined as the compiler joins them before the scan: a name split by a line
     * continuation, a comment ended by `*\<newline>/` and a string ended after `\\<newline>`
     * hide no subscript from the checks (the last two hid it before, and wrote past out). */
    static const char *const joined[] = {
        "o\\\nut[thread_index() + 1000] = 1.0f;",
        "/* *\\\n/ out[thread_index() + 1000] = 1.0f; /* */",
        "/* *\\ \t\n/ out[thread_index() + 1000] = 1.0f; /* */",
        "const char *s = \"a\\\\\nb\"; out[thread_index() + 1000] = 1.0f; const char *t = \"\";",
        /* Nor are these member names: `a-->x` is `a -- > x`, and a directive's last `.`
         * is followed by the next line (both hid the subscript before). */
        "int a = 0; out[0] = (float)(a-->out[thread_index() + 1000]);",
        "#define D(s) s.\nout[thread_index() + 1000] = 1.0f;",
    };
    for (size_t i = 0; i < sizeof joined / sizeof *joined; i++) {
        CHECK_OK(checked_new(&k, joined[i], NULL, NULL));
        const char *cpu = k ? jb_custom_kernel_source(k, "cpu") : NULL;
        CHECK(cpu && strstr(cpu, "jb_at_1(thread_index() + 1000)") &&
                  !strstr(cpu, "out[thread_index() + 1000]"),
              "text %zu: the subscript of out was not checked", i);
        jb_custom_kernel_free(k);
    }
    CHECK_OK(checked_new(&k, joined[1], NULL, NULL));
    x = f32_filled(device, 16, 0.0f), y = NULL;
    CHECK_OK(f32_launch(&y, k, &x, 1, 16));
    CHECK(jb_array_eval(y) == JB_ERR_BOUNDS && strstr(jb_last_error_message(), "at 1000"),
          "a comment ended by a line continuation hid a write at 1000: %s",
          jb_last_error_message());
    jb_array_free(y);
    jb_array_free(x);
    jb_custom_kernel_free(k);
}

/* 4096 threads add halves into 4 cells (exact in f32), unchecked and checked; a checked atomic
 * past the end is reported as a subscript is, and changes nothing. */
static void test_atomics(void)
{
    jb_scalar one = {.dtype = JB_F32, .value.f32 = 1.0f};
    int64_t cells = 4, threads = 4096;
    const int64_t *shapes[] = {&cells};
    int ndims[] = {1};
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, (uint64_t)threads};
    jb_array *x = f32_filled(device, threads, 0.5f);
    const char *body = "atomic_add(out, thread_index() % 4, inp[thread_index()]);";
    for (int checked = 0; checked <= 1; checked++) {
        jb_custom_kernel *k =
            kernel_with("c_atomic_sum", body, checked ? JB_COMPILE_BOUNDS_CHECKS : 0, &one);
        jb_array *y = NULL;
        float host[4] = {0};
        CHECK_OK(jb_custom_kernel_launch(&y, k, &x, 1, shapes, ndims, &shape));
        CHECK(read_f32(y, host, 4), "%s", jb_last_error_message());
        for (int i = 0; i < 4; i++)
            CHECK(host[i] == 513.0f, "checked %d: cell %d holds %g, not 1 + 1024 * 0.5", checked,
                  i, (double)host[i]);
        jb_array_free(y);
        jb_custom_kernel_free(k);
    }
    jb_custom_kernel *past = kernel_with(
        "c_atomic_past", "atomic_max(out, thread_index() == 3000 ? 4 : 0, 2.0f);",
        JB_COMPILE_BOUNDS_CHECKS, &one);
    jb_array *y = NULL;
    float host[4];
    CHECK_OK(jb_custom_kernel_launch(&y, past, &x, 1, shapes, ndims, &shape));
    CHECK(y && jb_array_read(y, host, sizeof host) == JB_ERR_BOUNDS,
          "an atomic past the end was not reported");
    const char *message = jb_last_error_message();
    CHECK(strstr(message, "c_atomic_past") && strstr(message, "'out'") &&
              strstr(message, "at 4,") && strstr(message, "thread 3000"),
          "the message names kernel, array, index and thread: %s", message);
    jb_array_free(y);
    jb_custom_kernel_free(past);
    jb_array_free(x);
}

int main(void)
{
    device = test_device();
    default_stream_first(device);
    test_return_ends_one_thread();
    test_output_inits();
    test_shapes_in_a_body();
    test_in_place_and_no_inputs();
    test_zeros_and_full();
    test_bounds_checks();
    test_checked_texts();
    test_atomics();
    return check_summary("test_kernel_language");
}
