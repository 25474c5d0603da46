/* Precompiled modules (jb_module_code): a cpu shared object built ahead of time, given as a file
 * and as bytes, launched through its declared entry; a file the disk cache would not trust (a
 * link, writable by others, two links, a relative path, missing) refused when the module is
 * made, as are source and code for one dialect; an entry the object lacks refused at prepare. */
#include "check.h"
#include "jitbridge.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char object_source[] =
    "#include <stdint.h>\n"
    "float bias = 0.5f;\n"
    "void shift(void **args, uint64_t threads) {\n"
    "  float *y = *(float **)args[0];\n"
    "  uint64_t n = *(uint64_t *)args[1];\n"
    "  for (uint64_t i = 0; i < threads && i < n; i++) y[i] += bias;\n"
    "}\n";

static jb_device *cpu;
static char dir[] = "/tmp/jb-test-precompiled-XXXXXX";

static void path_of(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", dir, name);
}

/* A module of `code` whose entry "shift" is declared (y written, f32). */
static int make(jb_source_module **out, const jb_module_code *code, const char *entry)
{
    static const jb_arg_decl args[] = {{JB_ARG_OUT, JB_F32}};
    const jb_entry_signature signatures[] = {{1, args, 1}};
    const char *entries[] = {entry};
    jb_source_module_spec spec = JB_SOURCE_MODULE_SPEC_INIT;
    spec.name = "precompiled", spec.cpu_code = *code;
    spec.entry_names = entries, spec.num_entries = 1, spec.signatures = signatures;
    return jb_source_module_new(out, &spec);
}

/* Launches "shift" on [0, 1, 2, 3]; the first result. */
static float shifted(jb_source_module *m)
{
    jb_array *y = NULL;
    CHECK_OK(jb_array_arange(&y, cpu, 4, JB_F32));
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, 4};
    jb_arg args[] = {{.array = y, .written = 1}};
    CHECK_OK(jb_source_module_launch(m, NULL, "shift", args, 1, &shape));
    float got[4] = {-1, -1, -1, -1};
    CHECK_OK(jb_array_read(y, got, sizeof got));
    CHECK(got[3] == got[0] + 3, "shift: %g %g", got[0], got[3]);
    jb_array_free(y);
    return got[0];
}

static void refused(const char *path, const char *text)
{
    jb_source_module *m = NULL;
    int status = make(&m, &(jb_module_code){.path = path}, "shift");
    CHECK(status == JB_ERR_INVALID_ARGUMENT && m == NULL && strstr(jb_last_error_message(), text),
          "%s: status %d: %s", path, status, jb_last_error_message());
}

int main(void)
{
    CHECK_OK(jb_device_get(&cpu, JB_DEVICE_CPU, 0));
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char source[256], object[256], command[1024];
    path_of(source, sizeof source, "shift.c");
    path_of(object, sizeof object, "shift.so");
    FILE *file = fopen(source, "w");
    CHECK(file != NULL, "%s", source);
    fputs(object_source, file);
    fclose(file);
    snprintf(command, sizeof command, "cc -O2 -fPIC -shared -o %s %s && chmod 600 %s", object,
             source, object);
    CHECK(system(command) == 0, "%s", command);

    jb_source_module *m = NULL;
    CHECK_OK(make(&m, &(jb_module_code){.path = object}, "shift"));
    CHECK(shifted(m) == 0.5f, "the file's module");
    float bias = 2;
    CHECK_OK(jb_source_module_global_write(m, cpu, NULL, "bias", 0, &bias, sizeof bias));
    CHECK(shifted(m) == 2.0f, "its global written");
    jb_source_module_free(m);

    /* The same code as bytes: the same module, whose global still holds 2. */
    file = fopen(object, "rb");
    static unsigned char bytes[1 << 20];
    size_t size = file ? fread(bytes, 1, sizeof bytes, file) : 0;
    if (file)
        fclose(file);
    CHECK_OK(make(&m, &(jb_module_code){.bytes = bytes, .size = size}, "shift"));
    CHECK(shifted(m) == 2.0f, "the bytes' module is the file's");
    jb_source_module_free(m);
    CHECK(make(&m, &(jb_module_code){.bytes = bytes, .size = 0}, "shift") ==
              JB_ERR_INVALID_ARGUMENT,
          "no bytes");

    CHECK_OK(make(&m, &(jb_module_code){.path = object}, "absent"));
    int status = jb_source_module_prepare(m, cpu);
    CHECK(status == JB_ERR_LOAD && strstr(jb_last_error_message(), "'absent'"),
          "an entry the object lacks: %d: %s", status, jb_last_error_message());
    jb_source_module_free(m);

    const char *entries[] = {"shift"};
    jb_source_module_spec both = JB_SOURCE_MODULE_SPEC_INIT;
    both.name = "both", both.cpu_source = object_source, both.cpu_code.path = object;
    both.entry_names = entries, both.num_entries = 1;
    CHECK(jb_source_module_new(&m, &both) == JB_ERR_INVALID_ARGUMENT &&
              strstr(jb_last_error_message(), "both a source and precompiled code"),
          "source and code: %s", jb_last_error_message());

    char link_path[256], second[256];
    path_of(link_path, sizeof link_path, "link.so");
    path_of(second, sizeof second, "second.so");
    CHECK(symlink(object, link_path) == 0, "symlink");
    refused(link_path, "is a symbolic link");
    CHECK(link(object, second) == 0, "link");
    refused(object, "has more than one link");
    CHECK(unlink(second) == 0, "unlink");
    CHECK(chmod(object, 0620) == 0, "chmod");
    refused(object, "writable by group or others");
    CHECK(chmod(object, 0600) == 0, "chmod");
    refused("precompiled/shift.so", "is not absolute");
    path_of(second, sizeof second, "missing.so");
    refused(second, "does not exist");
    refused(dir, "is a directory");

    snprintf(command, sizeof command, "rm -rf %s", dir);
    CHECK(system(command) == 0, "%s", command);
    return check_summary("test_precompiled");
}
