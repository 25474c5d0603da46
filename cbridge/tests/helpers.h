/*
 * What several C tests share: kernels of one f32 input `inp` and one f32 output `out`, their
 * one-dimensional launch, f32 arrays filled with one value, the check that every element holds
 * one value, the device the hook tests run on, and a compiler wrapper that counts its compiles.
 * static inline: a test that uses only some of them stays -Wall clean.
 */
#ifndef JB_TEST_HELPERS_H
#define JB_TEST_HELPERS_H

#include "check.h"
#include "jitbridge.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* `hook` and `user_data` go to the spec's configure fields (NULL: none). */
static inline jb_custom_kernel *f32_kernel_configured(const char *name, const char *body,
                                                      jb_configure_hook hook, void *user_data)
{
    const char *in[] = {"inp"}, *out[] = {"out"};
    jb_dtype f32[] = {JB_F32};
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    spec.name = name;
    spec.input_names = in, spec.input_dtypes = f32, spec.num_inputs = 1;
    spec.output_names = out, spec.output_dtypes = f32, spec.num_outputs = 1;
    spec.body = body;
    spec.configure = hook, spec.configure_user_data = user_data;
    jb_custom_kernel *k = NULL;
    CHECK_OK(jb_custom_kernel_new(&k, &spec));
    return k;
}

static inline jb_custom_kernel *f32_kernel(const char *name, const char *body)
{
    return f32_kernel_configured(name, body, NULL, NULL);
}

/* Launches `k` on the thread's default stream, n threads and one output of n elements. */
static inline jb_status f32_launch(jb_array **out, jb_custom_kernel *k, jb_array *const *inputs,
                                   size_t num_inputs, int64_t n)
{
    const int64_t *shapes[] = {&n};
    int ndims[] = {1};
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, (uint64_t)n};
    return jb_custom_kernel_launch(out, k, inputs, num_inputs, shapes, ndims, &shape);
}

/* n elements of `value` on `device`, not waited for. */
static inline jb_array *f32_filled(jb_device *device, int64_t n, float value)
{
    float *host = malloc((size_t)n * sizeof *host);
    for (int64_t i = 0; i < n; i++)
        host[i] = value;
    jb_array *a = NULL;
    CHECK_OK(jb_array_from_host(&a, device, JB_F32, &n, 1, host));
    free(host);
    return a;
}

/* Launches the one-input f32 kernel `k` on 4 elements of 1.0 on `dev` and waits for it: the
 * status. */
static inline jb_status launch_on_four_ones(jb_custom_kernel *k, jb_device *dev)
{
    jb_array *in = f32_filled(dev, 4, 1.0f), *out = NULL;
    jb_status status = f32_launch(&out, k, &in, 1, 4);
    if (status == JB_OK)
        status = jb_array_eval(out);
    jb_array_free(out);
    jb_array_free(in);
    return status;
}

/* A cpu source module named `name` whose one entry, "touch", `cpu_source` defines. */
static inline jb_source_module *touch_module(const char *name, const char *cpu_source)
{
    const char *entries[] = {"touch"};
    jb_source_module_spec spec = JB_SOURCE_MODULE_SPEC_INIT;
    spec.name = name;
    spec.cpu_source = cpu_source;
    spec.entry_names = entries;
    spec.num_entries = 1;
    jb_source_module *m = NULL;
    CHECK_OK(jb_source_module_new(&m, &spec));
    return m;
}

/* Launches `m`'s "touch" on one new f32 of `dev` and waits for it: the launch's status. */
static inline jb_status launch_touch(jb_source_module *m, jb_device *dev)
{
    jb_array *a = f32_filled(dev, 1, 0.0f);
    jb_arg arg = {.array = a, .written = 1};
    jb_launch_shape shape = {{1, 1, 1}, {1, 1, 1}, 0};
    jb_status status = jb_source_module_launch(m, NULL, "touch", &arg, 1, &shape);
    if (status == JB_OK)
        status = jb_array_eval(a);
    jb_array_free(a);
    return status;
}

/* Leaves `count` idle buffers of n f32 on `device`, made on the thread's default stream, which is
 * then synchronized: launches whose outputs take them allocate nothing, and so do not first let
 * go of the holds of quiet streams (what a test of the holds a stream keeps must not see). */
/* The three kinds of kernel a source record holds, `<prefix>_plain`, `<prefix>_opts` (a flag
 * and a compiler option) and `<prefix>_module` (a whole-source module), each launched once on
 * `dev` so that each writes its manifest line; the caller frees them (free_kernel_kinds). */
typedef struct {
    jb_custom_kernel *plain, *with_options;
    jb_source_module *module;
} kernel_kinds;

static inline jb_status launch_kernel_kinds(jb_device *dev, const char *prefix, kernel_kinds *k)
{
    char name[64];
    *k = (kernel_kinds){0};
    snprintf(name, sizeof name, "%s_plain", prefix);
    k->plain = f32_kernel(name, "out[thread_index()] = inp[thread_index()] + 1.0f;");
    jb_status status = launch_on_four_ones(k->plain, dev);
    if (status != JB_OK)
        return status;
    const char *in[] = {"inp"}, *out[] = {"out"}, *options[] = {"-fno-strict-aliasing"};
    jb_dtype f32[] = {JB_F32};
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    snprintf(name, sizeof name, "%s_opts", prefix);
    spec.name = name;
    spec.input_names = in, spec.input_dtypes = f32, spec.num_inputs = 1;
    spec.output_names = out, spec.output_dtypes = f32, spec.num_outputs = 1;
    spec.body = "out[thread_index()] = inp[thread_index()] * 3.0f;";
    spec.compile_flags = JB_COMPILE_FAST_MATH;
    spec.compiler_options = options, spec.num_compiler_options = 1;
    if ((status = jb_custom_kernel_new(&k->with_options, &spec)) != JB_OK ||
        (status = launch_on_four_ones(k->with_options, dev)) != JB_OK)
        return status;
    snprintf(name, sizeof name, "%s_module", prefix);
    k->module = touch_module(
        name, "void touch(void **args, unsigned long n) { (void)n; **(float **)args[0] = 5.0f; }");
    return launch_touch(k->module, dev);
}

static inline void free_kernel_kinds(kernel_kinds *k)
{
    jb_custom_kernel_free(k->plain);
    jb_custom_kernel_free(k->with_options);
    jb_source_module_free(k->module);
}

static inline void f32_idle_buffers(jb_device *device, int64_t n, int count)
{
    jb_array **arrays = calloc((size_t)count, sizeof *arrays);
    for (int i = 0; i < count; i++)
        arrays[i] = f32_filled(device, n, 0.0f);
    for (int i = 0; i < count; i++)
        jb_array_free(arrays[i]);
    free(arrays);
    jb_stream *stream = NULL;
    CHECK_OK(jb_thread_local_default_stream(&stream, device));
    CHECK_OK(jb_stream_synchronize(stream));
}

/* Whether `a` (of n elements) reads back as `want` everywhere; false for no array. */
static inline bool f32_all_equal(jb_array *a, int64_t n, float want)
{
    if (!a)
        return false;
    float *host = malloc((size_t)n * sizeof *host);
    bool same = jb_array_read(a, host, (size_t)n * sizeof *host) == JB_OK;
    for (int64_t i = 0; same && i < n; i++)
        same = host[i] == want;
    free(host);
    return same;
}

/* GPU 0 with JITBRIDGE_TEST_DEVICE=gpu, else the cpu; NULL when there is none. */
static inline jb_device *test_device(void)
{
    const char *which = getenv("JITBRIDGE_TEST_DEVICE");
    jb_device *device = NULL;
    if (which && strcmp(which, "gpu") == 0)
        CHECK_OK(jb_device_get(&device, JB_DEVICE_GPU, 0));
    else
        CHECK_OK(jb_device_get(&device, JB_DEVICE_CPU, 0));
    return device;
}

/* The thread's default stream first: memcheck then names its worker's block by the suppressed
 * path (tests/valgrind.supp) rather than by a stream made and freed before it. */
static inline void default_stream_first(jb_device *device)
{
    jb_array_free(f32_filled(device, 1, 0.0f));
}

/* Writes `text` to `path` (made anew, 0600 while written) and gives it `mode`: whether it all
 * went. */
static inline bool write_text_file(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    bool ok = fd >= 0;
    for (size_t done = 0, len = strlen(text); ok && done < len;) {
        ssize_t n = write(fd, text + done, len - done);
        ok = n > 0 || (n < 0 && errno == EINTR);
        done += n > 0 ? (size_t)n : 0;
    }
    ok = ok && fchmod(fd, mode) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* Writes `path`, a wrapper of the compiler `cc` for $CC (run by /bin/sh): each compile (any run
 * but the library's `--version` query) appends a line to `marks`, then runs the shell lines
 * `before` ("" for none: a pause, a kill while a flag file exists), then becomes `cc`. Paths
 * absolute: the compiler runs with an environment the library chose. Whether it was written. */
static inline bool write_compiler_wrapper(const char *path, const char *cc, const char *marks,
                                          const char *before)
{
    size_t len = 2 * strlen(cc) + strlen(marks) + strlen(before) + 128;
    char *script = malloc(len);
    bool ok = script &&
              (size_t)snprintf(script, len,
                               "#!/bin/sh\n[ \"$1\" = --version ] && exec '%s' \"$@\"\n"
                               "echo compile >> '%s'\n%sexec '%s' \"$@\"\n",
                               cc, marks, before, cc) < len &&
              write_text_file(path, script, 0700);
    free(script);
    return ok;
}

/* The lines of the file at `path` (the compiles a wrapper noted there); 0 when it is missing. */
static inline int lines_in(const char *path)
{
    FILE *f = fopen(path, "r");
    int lines = 0;
    for (int c; f && (c = fgetc(f)) != EOF;)
        lines += c == '\n';
    if (f)
        fclose(f);
    return lines;
}

#endif
