/*
 * Compiler faults on the cpu backend. $CC points at a script this test rewrites: missing, one
 * that exits non-zero, one killed by a signal, one that hangs past the timeout, one whose shared
 * object dlopen rejects. Each must be a clear error that inserts nothing, and once the fault is
 * gone the very same kernel must build.
 */
#include "check.h"
#include "jitbridge.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char dir[] = "/tmp/jb-faults-XXXXXX";
static char fake_cc[64];
static jb_device *cpu;

static void write_compiler(const char *script)
{
    unlink(fake_cc);
    if (!script)
        return; /* the missing compiler */
    FILE *f = fopen(fake_cc, "w");
    fputs(script, f);
    fclose(f);
    chmod(fake_cc, 0755);
}

static const char good_compiler[] = "#!/bin/sh\nexec cc \"$@\"\n";

static int launch(jb_custom_kernel *kernel, float *first)
{
    jb_array *in = NULL, *out[1] = {NULL};
    int64_t n = 4;
    const int64_t *shapes[] = {&n};
    int ndims[] = {1};
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, 4};
    int status = jb_array_arange(&in, cpu, 4, JB_F32);
    if (status == JB_OK)
        status = jb_custom_kernel_launch(out, kernel, &in, 1, shapes, ndims, &shape);
    float values[4] = {0};
    if (status == JB_OK)
        status = jb_array_read(out[0], values, sizeof values);
    *first = values[1];
    jb_array_free(in);
    jb_array_free(out[0]);
    return status;
}

static void fault(const char *what, const char *script, int expected, const char *needle)
{
    static int serial;
    char body[128];
    snprintf(body, sizeof body, "out[thread_index()] = inp[thread_index()] + %d.0f;", ++serial);
    const char *in[] = {"inp"}, *outn[] = {"out"};
    jb_dtype f32[] = {JB_F32};
    jb_kernel_spec spec = {.struct_size = sizeof(jb_kernel_spec),
                           .name = "faulty",
                           .input_names = in,
                           .input_dtypes = f32,
                           .num_inputs = 1,
                           .output_names = outn,
                           .output_dtypes = f32,
                           .num_outputs = 1,
                           .body = body};
    jb_custom_kernel *kernel;
    CHECK_OK(jb_custom_kernel_new(&kernel, &spec));

    write_compiler(script);
    jb_counters before, after;
    jb_counters_get(&before, sizeof before);
    float value = 0;
    time_t start = time(NULL);
    int status = launch(kernel, &value);
    CHECK(status == expected, "%s: got %s, expected %s: %s", what, jb_status_name(status),
          jb_status_name(expected), jb_last_error_message());
    CHECK(strstr(jb_last_error_message(), needle) != NULL, "%s: '%s' not in: %s", what, needle,
          jb_last_error_message());
    CHECK(time(NULL) - start < 10, "%s: took %ld s", what, (long)(time(NULL) - start));
    jb_counters_get(&after, sizeof after);
    CHECK(after.builds == before.builds && after.build_failures == before.build_failures + 1,
          "%s: a failure must count once and build nothing", what);

    /* The recovery compile runs with the real compiler: a loaded machine may need seconds. */
    setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", "60000", 1);
    write_compiler(good_compiler);
    status = launch(kernel, &value);
    CHECK(status == JB_OK, "%s: the next call after the fault failed: %s", what,
          jb_last_error_message());
    CHECK(value == 1.0f + (float)serial, "%s: wrong result %g", what, (double)value);
    jb_custom_kernel_free(kernel);
}

int main(void)
{
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(fake_cc, sizeof fake_cc, "%s/cc", dir);
    /* Before the library reads them: the compiler, no disk cache, a timeout only a hang meets
     * (the hang's case shortens it). */
    setenv("CC", fake_cc, 1);
    setenv("JITBRIDGE_DISK_CACHE", "0", 1);
    setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", "60000", 1);
    CHECK_OK(jb_device_get(&cpu, JB_DEVICE_CPU, 0));
    write_compiler(good_compiler); /* the first use asks it for its version */

    fault("missing compiler", NULL, JB_ERR_COMPILE, "cannot start the compiler");
    fault("exit status", "#!/bin/sh\necho 'fake compiler refuses' >&2\nexit 3\n", JB_ERR_COMPILE,
          "fake compiler refuses");
    fault("killed by a signal", "#!/bin/sh\nkill -9 $$\n", JB_ERR_COMPILE, "signal 9");
    setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", "500", 1);
    fault("hangs", "#!/bin/sh\nsleep 30\n", JB_ERR_COMPILE, "did not finish within 500 ms");
    fault("dlopen rejects its output",
          "#!/bin/sh\nwhile [ $# -gt 0 ]; do\n  if [ \"$1\" = -o ]; then echo garbage > \"$2\"; "
          "fi\n  shift\ndone\n",
          JB_ERR_LOAD, "dlopen rejected");

    unlink(fake_cc);
    rmdir(dir);
    return check_summary("test_faults");
}
