/*
 * Content keys, perturbed one input at a time. A child process (this program, run again with
 * "child") launches one kernel with the disk cache on and reports whether it compiled or loaded
 * it; the first child fills the cache. Each line of the table then changes one thing: a change
 * of meaning (another compiler or version, option, define, dtype, parameter, header, body,
 * architecture, library ABI) must compile anew; a change of no meaning (the same compiler by
 * another path, link, copy or PATH entry, the cache folder at another path, another working
 * directory, mtimes, CUDA_PATH through a link, TMPDIR, the locale) must load the stored code.
 * Built with JB_TEST_HOOKS (the key's ABI is set through a hook; the device's architecture is
 * changed in the child). Device: JITBRIDGE_TEST_DEVICE (cases about CC are the cpu's).
 */
#include "../src/kernels/kernels.h"
#include "helpers.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef JB_TEST_HOOKS
#error "test_keys needs a JB_TEST_HOOKS build of the library"
#endif

#define N 64

/* ---- the child: one launch, then what it took ---- */

static int child(void)
{
    jb_device *device = test_device();
    if (!device)
        return 2;
    const char *variant = getenv("TEST_KEY_VARIANT"), *arch = getenv("TEST_KEY_ARCH"),
               *abi = getenv("TEST_KEY_ABI");
    variant = variant ? variant : "";
    if (arch)
        snprintf(device->arch, sizeof device->arch, "%s", arch);
    if (abi)
        jb__test_set_key_abi(atoi(abi));

    const char *in[] = {"inp"}, *out[] = {"out"}, *name = "keyed";
    jb_dtype in_dtype[] = {JB_F32}, out_dtype[] = {JB_F32};
    const char *defines[] = {"OFFSET=1.0f"}, *other_defines[] = {"OFFSET=5.0f"};
    jb_kernel_param params[] = {{"SCALE", JB_PARAM_INT, 3}};
    float scale = 3.0f, offset = 1.0f, shift = 1.0f;
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    spec.body = "out[thread_index()] = shift((float)inp[thread_index()] * SCALE) + OFFSET;";
    spec.header = "static float shift(float x) { return x + 1.0f; }";
    spec.params = params, spec.num_params = 1;
    spec.defines = defines, spec.num_defines = 1;
    if (strcmp(variant, "define") == 0)
        spec.defines = other_defines, offset = 5.0f;
    else if (strcmp(variant, "dtype") == 0)
        in_dtype[0] = JB_F64;
    else if (strcmp(variant, "param") == 0)
        params[0].value = 4, scale = 4.0f;
    else if (strcmp(variant, "header") == 0)
        spec.header = "static float shift(float x) { return x + 2.0f; }", shift = 2.0f;
    else if (strcmp(variant, "body") == 0)
        spec.body = "out[thread_index()] = shift((float)inp[thread_index()] * SCALE) - OFFSET;",
        offset = -1.0f;
    else if (strcmp(variant, "fastmath") == 0)
        spec.compile_flags = JB_COMPILE_FAST_MATH;
    else if (strcmp(variant, "lineinfo") == 0)
        spec.compile_flags = JB_COMPILE_LINE_INFO;
    else if (strcmp(variant, "name") == 0)
        name = "keyed_again";
    spec.name = name;
    spec.input_names = in, spec.input_dtypes = in_dtype, spec.num_inputs = 1;
    spec.output_names = out, spec.output_dtypes = out_dtype, spec.num_outputs = 1;

    jb_custom_kernel *k = NULL;
    jb_array *x = NULL, *y = NULL;
    bool exact = jb_custom_kernel_new(&k, &spec) == JB_OK &&
                 jb_array_arange(&x, device, N, in_dtype[0]) == JB_OK;
    const int64_t n = N, *shapes[] = {&n};
    int ndims[] = {1};
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, N};
    float values[N];
    exact = exact && jb_custom_kernel_launch(&y, k, &x, 1, shapes, ndims, &shape) == JB_OK &&
            jb_array_read(y, values, sizeof values) == JB_OK;
    for (int i = 0; exact && i < N; i++)
        exact = values[i] == (float)i * scale + shift + offset;
    if (!exact)
        fprintf(stderr, "child: %s\n", jb_last_error_message());
    jb_counters c;
    jb_counters_get(&c, sizeof c);
    printf("RESULT builds=%llu disk_hits=%llu exact=%d\n", (unsigned long long)c.builds,
           (unsigned long long)c.disk_hits, exact);
    jb_array_free(y);
    jb_array_free(x);
    jb_custom_kernel_free(k);
    return 0;
}

/* ---- the parent: the table ---- */

static char self[PATH_MAX], base[PATH_MAX], gcc_real[PATH_MAX];
static bool on_cpu = true;

/* `text` with every "@/" replaced by the test's temporary folder and a slash ("$@" stays). */
static const char *at_base(const char *text, char *out, size_t len)
{
    size_t used = 0;
    for (const char *p = text; *p && used + 1 < len; p++) {
        bool folder = p[0] == '@' && p[1] == '/';
        int n = folder ? snprintf(out + used, len - used, "%s", base)
                       : snprintf(out + used, len - used, "%c", *p);
        used += n > 0 ? (size_t)n : 0;
    }
    out[used < len ? used : len - 1] = '\0';
    return out;
}

typedef struct key_case {
    const char *what;
    bool hit;          /* loads the stored code; else compiles anew */
    bool cpu_only;     /* about CC: other backends do not run it */
    const char *cc;    /* CC (default "gcc"); "@/" is in the temporary folder */
    const char *cache; /* JITBRIDGE_CACHE_DIR (default "@/cache") */
    const char *cwd;   /* the child's working directory (default "@/work") */
    const char *env;   /* one more NAME=VALUE */
    const char *variant;
    const char *setup; /* a shell command run first */
    const char *needs; /* a program on PATH the case needs (some hosts lack clang) */
} key_case;

#define HIT(text, ...) {.what = text, .hit = true, __VA_ARGS__}
#define MISS(text, ...) {.what = text, .hit = false, __VA_ARGS__}
static const key_case cases[] = {
    HIT("the same kernel again"),
    HIT("CC=/usr/bin/gcc (a link to gcc-12)", .cpu_only = true, .cc = "/usr/bin/gcc"),
    HIT("CC=the compiler's real file", .cpu_only = true, .cc = gcc_real),
    HIT("CC=a symlink to gcc, another name", .cpu_only = true, .cc = "@/links/my-compiler",
     .setup = "ln -s \"$(command -v gcc)\" @/links/my-compiler"),
    HIT("CC=cc, found in PATH, a link to gcc", .cpu_only = true, .cc = "cc",
     .env = "PATH=@/links2:/usr/bin:/bin",
     .setup = "mkdir -p @/links2 && ln -s \"$(command -v gcc)\" @/links2/cc && "
              "ln -s \"$(command -v gcc)\" @/links2/gcc"),
    HIT("CC=a copy of the compiler's file, touched", .cpu_only = true, .cc = "@/copy/gcc",
     .setup = "cp \"$(command -v gcc)\" @/copy/gcc && touch @/copy/gcc"),
    HIT("gcc found through another PATH folder", .cpu_only = true,
        .env = "PATH=@/links2:/usr/local/bin:/usr/bin:/bin"),
    HIT("the cache folder copied to another path", .cache = "@/cache-copy",
     .setup = "cp -a @/cache @/cache-copy"),
    HIT("the cache folder through a symlink", .cache = "@/cache-link",
     .setup = "ln -s @/cache @/cache-link"),
    HIT("another working directory", .cwd = "@/elsewhere"),
    HIT("a relative JITBRIDGE_CACHE_DIR from another directory", .cache = "../cache",
     .cwd = "@/elsewhere"),
    HIT("entries and the compiler's copy with old mtimes", .cpu_only = true, .cc = "@/copy/gcc",
     .setup = "touch -d 2001-01-01 @/cache/*.jbc @/copy/gcc"),
    HIT("CUDA_PATH through a symlink", .env = "CUDA_PATH=@/cuda-link",
     .setup = "ln -s /usr/local/cuda @/cuda-link"),
    HIT("ROCM_PATH set", .env = "ROCM_PATH=@/rocm-link", .setup = "ln -s /usr @/rocm-link"),
    HIT("another TMPDIR", .env = "TMPDIR=@/tmp2", .setup = "mkdir -m 700 @/tmp2"),
    HIT("LC_ALL=C", .env = "LC_ALL=C"),
    HIT("JITBRIDGE_SAVE_SOURCE set", .env = "JITBRIDGE_SAVE_SOURCE=@/saved"),
    MISS("another compiler (clang)", .cpu_only = true, .cc = "clang", .needs = "clang"),
    MISS("another compiler: a wrapper program around gcc", .cpu_only = true, .cc = "@/wrap/cc",
     .setup = "printf '#!/bin/sh\\nexec gcc \"$@\"\\n' > @/wrap/cc && chmod 755 @/wrap/cc"),
    MISS("another compiler version (says 12.9.9)", .cpu_only = true, .cc = "@/fake/gcc",
     .setup = "printf '#!/bin/sh\\n[ \"$1\" = --version ] && { echo \"gcc (Fake) 12.9.9\"; "
              "exit 0; }\\nexec gcc \"$@\"\\n' > @/fake/gcc && chmod 755 @/fake/gcc"),
    MISS("an option in CC (-fno-math-errno)", .cpu_only = true, .cc = "gcc -fno-math-errno"),
    MISS("another define", .variant = "define"),
    MISS("another dtype (f64 input)", .variant = "dtype"),
    MISS("another compile-time parameter", .variant = "param"),
    MISS("another header", .variant = "header"),
    MISS("another body", .variant = "body"),
    MISS("fast math", .variant = "fastmath"),
    MISS("line info", .variant = "lineinfo"),
    MISS("another kernel name, same body", .variant = "name"),
    MISS("another device architecture", .env = "TEST_KEY_ARCH=aarch64-Linux"),
    MISS("another library ABI", .env = "TEST_KEY_ABI=99"),
};

/* Runs the child for `c` (60 s at most); fills builds, hits and exact. False if it failed. */
static bool run_case(const key_case *c, unsigned long long *builds, unsigned long long *hits,
                     int *exact)
{
    char cc[PATH_MAX], cache[PATH_MAX], cwd[PATH_MAX], env[PATH_MAX];
    at_base(c->cc ? c->cc : "gcc", cc, sizeof cc);
    at_base(c->cache ? c->cache : "@/cache", cache, sizeof cache);
    at_base(c->cwd ? c->cwd : "@/work", cwd, sizeof cwd);
    at_base(c->env ? c->env : "", env, sizeof env);
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0)
        return false;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out[1], 1);
        if (chdir(cwd) != 0)
            _exit(3);
        setenv("CC", cc, 1);
        setenv("JITBRIDGE_CACHE_DIR", cache, 1);
        unsetenv("JITBRIDGE_DISK_CACHE"); /* valgrind runs turn it off; these children need it */
        if (c->variant)
            setenv("TEST_KEY_VARIANT", c->variant, 1);
        if (*env)
            putenv(env);
        execl(self, self, "child", (char *)NULL);
        _exit(4);
    }
    close(out[1]);
    char text[4096] = "";
    size_t used = 0;
    struct pollfd p = {out[0], POLLIN, 0};
    time_t deadline = time(NULL) + 60;
    while (used + 1 < sizeof text && time(NULL) < deadline && poll(&p, 1, 1000) >= 0) {
        ssize_t n = p.revents ? read(out[0], text + used, sizeof text - 1 - used) : 1;
        if (n <= 0)
            break;
        used += p.revents ? (size_t)n : 0;
    }
    text[used] = '\0';
    close(out[0]);
    kill(pid, SIGKILL); /* past the deadline; nothing once it exited */
    int status;
    waitpid(pid, &status, 0);
    const char *result = strstr(text, "RESULT ");
    return result && sscanf(result, "RESULT builds=%llu disk_hits=%llu exact=%d", builds, hits,
                            exact) == 3;
}

static void shell(const char *command)
{
    char cmd[4 * PATH_MAX];
    at_base(command, cmd, sizeof cmd);
    CHECK(system(cmd) == 0, "setup failed: %s", cmd);
}

/* ---- a stored payload the loader refuses ---- */

static char last_warning[1024];
static void keep_warning(void *user_data, jb_log_level level, const char *message)
{
    (void)user_data, (void)level;
    snprintf(last_warning, sizeof last_warning, "%s", message);
}

/* The disk key of the one-input f32 kernel `k` on `device` (as its build makes it). */
static bool kernel_key(jb_device *device, jb_custom_kernel *k, jb_disk_key *key)
{
    const char *names[] = {k->name};
    return jb__disk_cache_usable() &&
           jb__module_disk_key(device, k->module_name, names, 1, k->sources[device->backend->dialect],
                        key) == JB_OK;
}

/* An entry with a right key and checksum whose code is for another machine (its ELF header's
 * e_machine changed, as a bundle made on another architecture would hold under a forged key):
 * the loader refuses it, and the library evicts it, compiles once, says so, and stores the good
 * code in its place. */
static void refused_payload_is_evicted_rebuilt_and_reported(jb_device *device)
{
    jb_custom_kernel *donor = f32_kernel("payload_donor", "out[thread_index()] = 7.0f;");
    jb_custom_kernel *k = f32_kernel("payload_refused", "out[thread_index()] = 9.0f;");
    jb_array *x = f32_filled(device, N, 1.0f), *y = NULL;
    CHECK_OK(f32_launch(&y, donor, &x, 1, N));
    jb_array_free(y);
    y = NULL;
    jb_disk_key donor_key = {0}, key = {0};
    jb_blob code = {0};
    bool ready = kernel_key(device, donor, &donor_key) && kernel_key(device, k, &key) &&
                 jb__disk_load(&donor_key, &code) && code.size > 20;
    CHECK(ready, "the donor's entry could not be read back");
    if (ready) {
        unsigned char *elf = code.data, foreign = elf[18] == 62 ? 183 : 62; /* x86-64, AArch64 */
        elf[18] = foreign;
        elf[19] = 0;
        jb__disk_store(&key, &code);
        jb_set_log_callback(keep_warning, NULL);
        jb_counters_reset();
        CHECK_OK(f32_launch(&y, k, &x, 1, N));
        CHECK(f32_all_equal(y, N, 9.0f), "the rebuilt kernel's output is wrong");
        jb_set_log_callback(NULL, NULL);
        jb_counters c;
        jb_counters_get(&c, sizeof c);
        CHECK(c.builds == 1 && c.disk_hits == 0 && c.disk_rejected == 1,
              "a refused payload: builds %llu (want 1), disk hits %llu (0), rejected %llu (1)",
              (unsigned long long)c.builds, (unsigned long long)c.disk_hits,
              (unsigned long long)c.disk_rejected);
        CHECK(strstr(last_warning, key.file) && strstr(last_warning, "refused by the loader"),
              "no warning named the refused entry: '%s'", last_warning);
        free(code.data);
        code.data = NULL;
        CHECK(jb__disk_load(&key, &code) && ((unsigned char *)code.data)[18] != foreign,
              "the refused entry was not replaced by the rebuilt code");
    }
    free(code.data);
    jb__disk_key_free(&donor_key);
    jb__disk_key_free(&key);
    jb_array_free(y);
    jb_array_free(x);
    jb_custom_kernel_free(k);
    jb_custom_kernel_free(donor);
}

/* Whether `program` is found on PATH (the shell's `command -v`). */
static bool on_path(const char *program)
{
    char command[256];
    snprintf(command, sizeof command, "command -v %s >/dev/null 2>&1", program);
    return system(command) == 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "child") == 0)
        return child();
    CHECK(realpath(argv[0], self) != NULL, "realpath(%s): %s", argv[0], strerror(errno));
    const char *which = getenv("JITBRIDGE_TEST_DEVICE");
    on_cpu = !which || strcmp(which, "gpu") != 0;
    char made[] = "/tmp/jb_keys_XXXXXX";
    CHECK(mkdtemp(made) != NULL, "mkdtemp: %s", strerror(errno));
    snprintf(base, sizeof base, "%s", made);
    shell("mkdir -m 700 @/cache @/work @/elsewhere @/links @/copy @/wrap @/fake @/saved");
    FILE *found = popen("readlink -f \"$(command -v gcc)\"", "r");
    CHECK(found && fgets(gcc_real, sizeof gcc_real, found), "cannot find gcc's real file");
    gcc_real[strcspn(gcc_real, "\n")] = '\0';
    if (found)
        pclose(found);

    unsigned long long builds = 0, hits = 0;
    int exact = 0;
    CHECK(run_case(&(key_case){.what = "the first run"}, &builds, &hits, &exact) && builds == 1 &&
              hits == 0 && exact,
          "the first run: builds %llu, disk hits %llu, exact %d", builds, hits, exact);
    size_t count = sizeof cases / sizeof *cases, tried = 0;
    for (size_t i = 0; i < count; i++) {
        const key_case *c = &cases[i];
        if (c->cpu_only && !on_cpu)
            continue;
        if (c->needs && !on_path(c->needs)) {
            printf("  %-56s skipped: no %s on PATH\n", c->what, c->needs);
            continue;
        }
        tried++;
        if (c->setup)
            shell(c->setup);
        builds = hits = 0;
        exact = 0;
        bool ran = run_case(c, &builds, &hits, &exact);
        bool as_expected =
            ran && exact && (c->hit ? builds == 0 && hits == 1 : builds == 1 && hits == 0);
        CHECK(as_expected, "%-52s want %s, got builds %llu, disk hits %llu, exact %d%s", c->what,
              c->hit ? "a disk hit" : "a compile", builds, hits, exact, ran ? "" : " (no result)");
        printf("  %-56s %s\n", c->what, as_expected ? (c->hit ? "hit" : "miss") : "WRONG");
    }
    CHECK(tried >= 20, "only %zu cases ran", tried);

    /* This process's own cache folder, on: a valgrind run turns the disk cache off. */
    char own_cache[PATH_MAX];
    setenv("JITBRIDGE_CACHE_DIR", at_base("@/own-cache", own_cache, sizeof own_cache), 1);
    unsetenv("JITBRIDGE_DISK_CACHE");
    jb_device *device = test_device();
    if (device)
        refused_payload_is_evicted_rebuilt_and_reported(device);
    shell("rm -rf @/");
    return check_summary("test_keys");
}
