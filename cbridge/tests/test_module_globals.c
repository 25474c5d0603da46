/* Module globals (jb_source_module_global_*): a write that a later launch on the stream reads,
 * a read-back, and every bad request refused with nothing copied: an unknown name, a name that is
 * not an identifier, a function or another object's symbol, bytes past the end (offset overflow
 * included), a write to a const, a symbol whose size wraps the address space. */
#include "check.h"
#include "jitbridge.h"
#include <stdint.h>
#include <string.h>

static const char source[] =
    "#include <stdlib.h>\n"
    "float scale[4] = {1, 1, 1, 1};\n"
    "const int fixed = 7;\n"
    "float *const scale_at = scale;\n" /* relocated, then made read-only (RELRO) */
    "int calls;\n"
    "void apply(void **args, uint64_t n) {\n"
    "  float *y = *(float **)args[0];\n"
    "  for (uint64_t i = 0; i < n; i++) y[i] *= scale[i % 4];\n"
    "  if (++calls < 0) abort();\n" /* links libc, whose `environ` dlsym then finds */
    "}\n";

/* A global whose symbol table size (2^64 - 16) wraps its end round to below its start. */
static const char wrapping_source[] =
    "__asm__(\".pushsection .data\\n.globl huge\\n.type huge,@object\\n"
    ".size huge, 0xfffffffffffffff0\\nhuge: .quad 1\\n.popsection\");\n"
    "void apply(void **args, uint64_t n) { (void)args, (void)n; }\n";

static jb_device *cpu;

/* `call` failed with `status` and a message holding `text`. */
static void refused(int got, int status, const char *text, const char *what)
{
    CHECK(got == status && strstr(jb_last_error_message(), text), "%s: status %d: %s", what,
          got, jb_last_error_message());
}

int main(void)
{
    CHECK_OK(jb_device_get(&cpu, JB_DEVICE_CPU, 0));
    const char *entries[] = {"apply"};
    jb_source_module_spec spec = JB_SOURCE_MODULE_SPEC_INIT;
    spec.name = "globals", spec.cpu_source = source;
    spec.entry_names = entries, spec.num_entries = 1;
    jb_source_module *m = NULL;
    CHECK_OK(jb_source_module_new(&m, &spec));
    jb_stream *stream = NULL;
    CHECK_OK(jb_stream_new(&stream, cpu));

    size_t size = 0;
    CHECK_OK(jb_source_module_global_size(m, cpu, "scale", &size));
    CHECK(size == 4 * sizeof(float), "scale has %zu bytes", size);
    const float scale[4] = {2, 3, 4, 5};
    CHECK_OK(jb_source_module_global_write(m, NULL, stream, "scale", 0, scale, sizeof scale));
    const float last = 10;
    CHECK_OK(jb_source_module_global_write(m, cpu, stream, "scale", 3 * sizeof(float), &last,
                                           sizeof last));
    jb_array *y = NULL;
    CHECK_OK(jb_array_arange(&y, cpu, 4, JB_F32));
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, 4};
    jb_arg args[] = {{.array = y, .written = 1}};
    CHECK_OK(jb_source_module_launch(m, stream, "apply", args, 1, &shape));
    float got[4] = {0};
    CHECK_OK(jb_array_read(y, got, sizeof got));
    CHECK(got[0] == 0 && got[1] == 3 && got[2] == 8 && got[3] == 30, "the launch saw %g %g %g %g",
          got[0], got[1], got[2], got[3]);
    /* A read comes after the launch queued before it: the count it wrote. */
    int calls = 0;
    CHECK_OK(jb_source_module_global_read(m, NULL, stream, "calls", 0, &calls, sizeof calls));
    CHECK(calls == 1, "calls reads %d", calls);
    /* A launch long enough to be running still when the read is called. */
    jb_array *big = NULL;
    CHECK_OK(jb_array_arange(&big, cpu, 1 << 24, JB_F32));
    jb_launch_shape big_shape = {{0, 0, 0}, {0, 0, 0}, 1 << 24};
    jb_arg big_args[] = {{.array = big, .written = 1}};
    CHECK_OK(jb_source_module_launch(m, stream, "apply", big_args, 1, &big_shape));
    CHECK_OK(jb_source_module_global_read(m, NULL, stream, "calls", 0, &calls, sizeof calls));
    CHECK(calls == 2, "calls reads %d before the second launch ended", calls);
    jb_array_free(big);
    float back[4] = {0};
    CHECK_OK(jb_source_module_global_read(m, cpu, NULL, "scale", 0, back, sizeof back));
    CHECK(back[1] == 3 && back[3] == 10, "scale reads back %g %g", back[1], back[3]);
    int fixed = 0;
    CHECK_OK(jb_source_module_global_read(m, cpu, NULL, "fixed", 0, &fixed, sizeof fixed));
    CHECK(fixed == 7, "fixed reads %d", fixed);

    float junk[8] = {99, 99, 99, 99, 99, 99, 99, 99};
    refused(jb_source_module_global_write(m, cpu, NULL, "scale", 0, junk, sizeof junk),
            JB_ERR_INVALID_ARGUMENT, "outside global 'scale' of 16 bytes", "too many bytes");
    refused(jb_source_module_global_write(m, cpu, NULL, "scale", 4, junk, 16),
            JB_ERR_INVALID_ARGUMENT, "outside global", "past the end from an offset");
    refused(jb_source_module_global_read(m, cpu, NULL, "scale", SIZE_MAX, junk, 2),
            JB_ERR_INVALID_ARGUMENT, "outside global", "an offset past the end");
    refused(jb_source_module_global_read(m, cpu, NULL, "scale", 8, junk, SIZE_MAX - 4),
            JB_ERR_INVALID_ARGUMENT, "outside global", "offset + bytes overflowing");
    refused(jb_source_module_global_write(m, cpu, NULL, "fixed", 0, junk, sizeof(int)),
            JB_ERR_INVALID_ARGUMENT, "is const", "a const global");
    refused(jb_source_module_global_write(m, cpu, NULL, "scale_at", 0, junk, sizeof(void *)),
            JB_ERR_INVALID_ARGUMENT, "is const", "a relocated const global");
    refused(jb_source_module_global_read(m, cpu, NULL, "missing", 0, junk, 4),
            JB_ERR_INVALID_ARGUMENT, "no global variable 'missing'", "an unknown name");
    refused(jb_source_module_global_read(m, cpu, NULL, "apply", 0, junk, 4),
            JB_ERR_INVALID_ARGUMENT, "not a global variable", "a function");
    /* dlsym on the module also finds its dependencies' symbols: libc's `environ` is not its. */
    refused(jb_source_module_global_read(m, cpu, NULL, "environ", 0, junk, 4),
            JB_ERR_INVALID_ARGUMENT, "does not define 'environ'", "another object's variable");
    refused(jb_source_module_global_read(m, cpu, NULL, "scale[1]", 0, junk, 4),
            JB_ERR_INVALID_ARGUMENT, "the global's name", "a name that is not an identifier");
    refused(jb_source_module_global_size(m, cpu, NULL, &size), JB_ERR_INVALID_ARGUMENT,
            "the global's name", "no name");
    refused(jb_source_module_global_read(m, NULL, NULL, "scale", 0, junk, 4),
            JB_ERR_INVALID_ARGUMENT, "no device and no stream", "no device");
    CHECK_OK(jb_source_module_global_read(m, cpu, NULL, "scale", 0, back, sizeof back));
    CHECK(back[0] == 2 && back[3] == 10, "a refused write changed scale: %g %g", back[0],
          back[3]);

    jb_array_free(y);
    jb_stream_free(stream);
    jb_source_module_free(m);

    spec.name = "globals_wrapping", spec.cpu_source = wrapping_source;
    CHECK_OK(jb_source_module_new(&m, &spec));
    /* The loader's dladdr finds no symbol holding its address: refused before its size counts. */
    refused(jb_source_module_global_size(m, cpu, "huge", &size), JB_ERR_INVALID_ARGUMENT,
            "not the start of a symbol", "a size that wraps");
    refused(jb_source_module_global_read(m, cpu, NULL, "huge", (size_t)1 << 40, junk, 4),
            JB_ERR_INVALID_ARGUMENT, "not the start of a symbol",
            "a read far past a wrapping global");
    jb_source_module_free(m);
    return check_summary("test_module_globals");
}
