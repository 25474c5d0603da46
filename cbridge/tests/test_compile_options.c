/*
 * A kernel's own compiler options on the cpu: more options for $CC (each one argument, never
 * split by a shell), include folders (ours alone, never on disk), the target architecture;
 * options that would move the output, run or link something are refused, and so is every
 * option in a setuid program (a setuid-nobody copy of this test, made when run as root).
 */
#include "helpers.h"

#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static jb_device *cpu;

static jb_status make(jb_custom_kernel **k, const char *body, const char *header,
                      const char *const *options, size_t num_options, const char *const *dirs,
                      size_t num_dirs, const char *arch)
{
    const char *in[] = {"inp"}, *out[] = {"out"};
    jb_dtype f32[] = {JB_F32};
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    spec.name = "optioned";
    spec.input_names = in, spec.input_dtypes = f32, spec.num_inputs = 1;
    spec.output_names = out, spec.output_dtypes = f32, spec.num_outputs = 1;
    spec.body = body, spec.header = header;
    spec.compiler_options = options, spec.num_compiler_options = num_options;
    spec.include_dirs = dirs, spec.num_include_dirs = num_dirs;
    spec.target_arch = arch;
    *k = NULL;
    return jb_custom_kernel_new(k, &spec);
}

/* out[0] after one launch of `k` on one element. */
static float run_one(jb_custom_kernel *k)
{
    jb_array *x = f32_filled(cpu, 1, 0.0f), *y = NULL;
    float value = -1.0f;
    CHECK_OK(f32_launch(&y, k, &x, 1, 1));
    if (y)
        CHECK_OK(jb_array_read(y, &value, sizeof value));
    jb_array_free(x);
    jb_array_free(y);
    return value;
}

static void test_options(void)
{
    /* x86's char is signed: (char)200 is -56, unless -funsigned-char reaches the compiler. */
    const char *body = "out[0] = (float)(char)(unsigned char)200; /* test_compile_options */";
    jb_custom_kernel *plain, *unsigned_char;
    CHECK_OK(make(&plain, body, NULL, NULL, 0, NULL, 0, NULL));
    const char *options[] = {"-funsigned-char"};
    CHECK_OK(make(&unsigned_char, body, NULL, options, 1, NULL, 0, NULL));
    CHECK(strcmp(jb_custom_kernel_module_name(plain), jb_custom_kernel_module_name(unsigned_char)),
          "an option is not part of the module name");
    float signed_value = run_one(plain), option_value = run_one(unsigned_char);
    CHECK(option_value == 200.0f, "-funsigned-char did not reach the compiler: %g",
          (double)option_value);
#if defined(__x86_64__)
    CHECK(signed_value == -56.0f, "without it char is signed on x86: %g", (double)signed_value);
#endif
    jb_custom_kernel_free(plain);
    jb_custom_kernel_free(unsigned_char);

    static const char *const refused[] = {
        "-o/tmp/elsewhere.so", "-B/tmp", "-fplugin=/tmp/p.so", "-DFOO=1", "-UFOO", "-I/tmp",
        "-include/tmp/x.h", "-march=native", "-lm", "-L/tmp", "-Wl,-rpath,/tmp", "-c", "-E",
        "-specs=/tmp/s", "funsigned-char", "-x c++", "-O2 */ evil", "-",
        /* What the refusals above refuse, passed on through the driver. */
        "-Wp,-DFOO=1", "-Wp,-MD,/tmp/elsewhere.d", "-Xpreprocessor", "-Wa,-adhln=/tmp/x.lst",
        "-Xassembler", "-Xclang",
        /* Source read otherwise than the bounds checks read it (tests/kernel_features.rs). */
        "-finput-charset=GBK", "-trigraphs", "-traditional-cpp", "-traditional",
        /* Code the library would call or read past its ABI (-mabi=ms: a segfault at the first
         * launch of an innocent body), or a runtime loaded into this process. */
        "-mabi=ms", "-fcall-used-rbx", "-fcall-saved-r11", "-ffixed-r12", "-fpack-struct=1",
        "-fshort-enums", "-freg-struct-return", "-m32", "-mregparm=3", "-malign-double",
        "-fsanitize=address",
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        jb_custom_kernel *k;
        const char *one[] = {refused[i]};
        CHECK(make(&k, body, NULL, one, 1, NULL, 0, NULL) == JB_ERR_INVALID_ARGUMENT && !k,
              "compiler option '%s' was taken", refused[i]);
    }

    /* The target architecture: the cpu's -march. */
    jb_custom_kernel *native, *bad;
    CHECK_OK(make(&native, body, NULL, NULL, 0, NULL, 0, "native"));
    CHECK(run_one(native) == signed_value, "a kernel for -march=native");
    CHECK(make(&bad, body, NULL, NULL, 0, NULL, 0, "x86-64; rm -rf") == JB_ERR_INVALID_ARGUMENT,
          "a target_arch with a space and a semicolon was taken");
    jb_custom_kernel_free(native);
}

static void test_include_dirs(void)
{
    char dir[] = "/tmp/jb-include-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char header_path[128];
    snprintf(header_path, sizeof header_path, "%s/jb_test_value.h", dir);
    FILE *f = fopen(header_path, "w");
    fputs("#define JB_TEST_INCLUDED_VALUE 7.0f\n", f);
    fclose(f);
    const char *dirs[] = {dir};
    uint64_t entries_before = 0, entries_after = 0, bytes;
    jb_disk_cache_stats(&entries_before, &bytes);
    jb_custom_kernel *k;
    CHECK_OK(make(&k, "out[0] = JB_TEST_INCLUDED_VALUE;", "#include \"jb_test_value.h\"", NULL, 0,
                  dirs, 1, NULL));
    CHECK(run_one(k) == 7.0f, "the include folder was not searched");
    jb_disk_cache_stats(&entries_after, &bytes);
    CHECK(entries_after == entries_before, "a kernel with include folders was kept on disk");
    jb_custom_kernel_free(k);

    /* Relative, or writable by others: refused. */
    const char *relative[] = {"include"};
    CHECK(make(&k, "out[0] = 1.0f;", NULL, NULL, 0, relative, 1, NULL) == JB_ERR_INVALID_ARGUMENT,
          "a relative include folder was taken");
    chmod(dir, 0777);
    CHECK(make(&k, "out[0] = 1.0f;", NULL, NULL, 0, dirs, 1, NULL) == JB_ERR_INVALID_ARGUMENT &&
              strstr(jb_last_error_message(), "not ours alone"),
          "an include folder others can write was taken: %s", jb_last_error_message());
    unlink(header_path);
    rmdir(dir);
}

/* In the setuid copy: every compiler option and include folder is refused. */
static int setuid_child(void)
{
    jb_custom_kernel *k;
    const char *options[] = {"-funsigned-char"}, *dirs[] = {"/usr/include"};
    int refused = make(&k, "out[0] = 1.0f;", NULL, options, 1, NULL, 0, NULL) ==
                      JB_ERR_INVALID_ARGUMENT &&
                  strstr(jb_last_error_message(), "setuid") &&
                  make(&k, "out[0] = 1.0f;", NULL, NULL, 0, dirs, 1, NULL) ==
                      JB_ERR_INVALID_ARGUMENT;
    printf("EUID %d, refused %d\n", (int)geteuid(), refused);
    return refused ? 0 : 1;
}

static void test_setuid(const char *self)
{
    if (geteuid() != 0) {
        printf("skipped: a setuid copy needs root to make\n");
        return;
    }
    char dir[] = "/tmp/jb-setuid-XXXXXX", host[64], command[512];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    chmod(dir, 0755);
    snprintf(host, sizeof host, "%s/host", dir);
    snprintf(command, sizeof command, "cp '%s' '%s' && chown 65534:65534 '%s' && chmod 4755 '%s'",
             self, host, host, host);
    CHECK(system(command) == 0, "cannot make the setuid copy");
    snprintf(command, sizeof command, "'%s' setuid", host);
    FILE *child = popen(command, "r");
    char said[128] = "";
    if (child && !fgets(said, sizeof said, child))
        said[0] = '\0';
    int status = child ? pclose(child) : -1;
    if (!strstr(said, "EUID 65534"))
        printf("skipped: setuid does not take effect here (%s)\n", said);
    else
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the setuid copy took a compiler option or an include folder: %s", said);
    unlink(host);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "setuid") == 0)
        return setuid_child();
    CHECK_OK(jb_device_get(&cpu, JB_DEVICE_CPU, 0)); /* the options here are the cpu's */
    default_stream_first(cpu);
    test_options();
    test_include_dirs();
    test_setuid(argv[0]);
    return check_summary("test_compile_options");
}
