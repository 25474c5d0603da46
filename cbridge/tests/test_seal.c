/*
 * Sealed mode, with the compiler counted: CC is a wrapper script that writes a line per
 * invocation. Sealed to refuse, no path starts it (launches, prepare, source modules, the
 * probe's paths, the bench's compiles), each refusal is JB_ERR_SEALED with one event naming the
 * kernel, counted, not remembered and not a build failure, while modules in memory and in the
 * cache folder still load; sealed to warn, a module compiles with one warning and one event per
 * module; JITBRIDGE_SEAL is read at the first use, and any value but the off words and the modes
 * seals to refuse.
 */
#include "deadline.h"
#include "helpers.h"
#include "jitbridge_sys.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char count_file[4200], other_cc[4200];
static unsigned salt;

/* The real compiler `name` as an absolute path (searched along PATH when it has no slash). */
static bool real_compiler(const char *name, char *out, size_t len)
{
    if (strchr(name, '/'))
        return realpath(name, out) != NULL;
    const char *path = getenv("PATH");
    for (const char *dir = path ? path : "/usr/bin:/bin"; *dir;) {
        size_t dir_len = strcspn(dir, ":");
        snprintf(out, len, "%.*s/%s", (int)dir_len, dir, name);
        if (dir_len && access(out, X_OK) == 0)
            return true;
        dir += dir_len + (dir[dir_len] == ':');
    }
    return false;
}

/* Points CC at a script that counts its runs into count_file, then runs the real compiler by
 * the name it was run by itself (bin/<its name>, a link to the real one), so that gcc's version
 * line names the compiler as CC does. other_cc: a link to the same script by another name. */
static void install_counting_compiler(void)
{
    char dir[] = "/tmp/jb-seal-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    const char *real = getenv("CC");
    char script[4200], text[8600], bin[4300], link[4400], real_path[4096];
    snprintf(script, sizeof script, "%s/cc", dir);
    snprintf(other_cc, sizeof other_cc, "%s/othercc", dir);
    snprintf(bin, sizeof bin, "%s/bin", dir);
    snprintf(count_file, sizeof count_file, "%s/count", dir);
    CHECK(real_compiler(real && *real ? real : "cc", real_path, sizeof real_path),
          "the compiler %s is not found", real && *real ? real : "cc");
    CHECK(mkdir(bin, 0700) == 0 && symlink("cc", other_cc) == 0, "mkdir %s: %s", bin,
          strerror(errno));
    for (int i = 0; i < 2; i++) {
        snprintf(link, sizeof link, "%s/%s", bin, i ? "othercc" : "cc");
        CHECK(symlink(real_path, link) == 0, "symlink %s: %s", link, strerror(errno));
    }
    snprintf(text, sizeof text,
             "#!/bin/sh\necho \"$*\" >> %s\nexec \"${0%%/*}/bin/${0##*/}\" \"$@\"\n", count_file);
    int fd = open(script, O_WRONLY | O_CREAT | O_EXCL, 0700);
    CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text), "write %s", script);
    close(fd);
    setenv("CC", script, 1);
}

/* Lines in the count file: the compiler's runs; with `compiles_only`, not counting its version
 * query (which names it in the cache folder's keys: an unsealed new process runs it once to look
 * a module up in the folder; a sealed one reads the folder's record of it instead). */
static int counted_runs(bool compiles_only)
{
    FILE *f = fopen(count_file, "r");
    char line[8192];
    int runs = 0;
    while (f && fgets(line, sizeof line, f))
        runs += !compiles_only || strcmp(line, "--version\n") != 0;
    if (f)
        fclose(f);
    return runs;
}

static int compiler_runs(void)
{
    return counted_runs(false);
}

static void reset_compiler_runs(void)
{
    fclose(fopen(count_file, "w"));
}

static jb_custom_kernel *kernel(const char *name, const char *body_fmt)
{
    char body[256];
    snprintf(body, sizeof body, body_fmt, salt);
    return f32_kernel(name, body);
}

static jb_source_module *source_module(void)
{
    char body[256];
    snprintf(body, sizeof body, "void touch(void **args, unsigned long n) { (void)n; "
                                "**(float **)args[0] = %u.0f; }", salt);
    return touch_module("seal_disk", body);
}

/* ---- what the callbacks saw ---- */
static pthread_mutex_t seen_mutex = PTHREAD_MUTEX_INITIALIZER;
static char warnings[8192];
static int violations, violation_status = -1;
static char violation_name[256];

static void on_warning(void *user_data, jb_log_level level, const char *message)
{
    (void)user_data, (void)level;
    pthread_mutex_lock(&seen_mutex);
    snprintf(warnings + strlen(warnings), sizeof warnings - strlen(warnings), "%s\n", message);
    pthread_mutex_unlock(&seen_mutex);
}

static void on_event(void *user_data, const jb_cache_event *e)
{
    (void)user_data;
    if (e->kind != JB_CACHE_EVENT_SEAL_VIOLATION)
        return;
    pthread_mutex_lock(&seen_mutex);
    violations++;
    violation_status = e->status;
    snprintf(violation_name, sizeof violation_name, "%s", e->name);
    pthread_mutex_unlock(&seen_mutex);
}

static void seen_clear(void)
{
    pthread_mutex_lock(&seen_mutex);
    warnings[0] = violation_name[0] = '\0';
    violations = 0;
    violation_status = -1;
    pthread_mutex_unlock(&seen_mutex);
}

static int occurrences(const char *haystack, const char *needle)
{
    int n = 0;
    for (const char *p = haystack; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static bool disk_on(void)
{
    return strncmp(jb_disk_cache_state(), "on", 2) == 0;
}

/* Runs this program again as `mode` with JITBRIDGE_SEAL=`seal` and CC=`cc` (NULL: as ours);
 * its exit status. */
static int run_child_with(const char *mode, const char *seal, const char *cc)
{
    char self[4096], salt_text[32];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    snprintf(salt_text, sizeof salt_text, "%u", salt);
    pid_t pid = fork_with_deadline(mode, 120);
    if (pid == 0) {
        setenv("JITBRIDGE_SEAL", seal, 1);
        if (cc)
            setenv("CC", cc, 1);
        execl(self, self, mode, salt_text, (char *)NULL);
        _exit(127);
    }
    int ws = wait_child_with_deadline(pid, 125, mode);
    return ws != -1 && WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

static int run_child(const char *mode, const char *seal)
{
    return run_child_with(mode, seal, NULL);
}

/* JITBRIDGE_SEAL=error in a new process: the folder's module loads, a new kernel is refused. */
static int sealed_child(jb_device *dev)
{
    CHECK(jb_seal_mode_get() == JB_SEAL_ERROR, "JITBRIDGE_SEAL=error read as %d",
          jb_seal_mode_get());
    jb_source_module *m = source_module();
    CHECK_OK(launch_touch(m, dev));
    jb_custom_kernel *k = kernel("seal_child_new", "out[thread_index()] = %u.5f;");
    CHECK(launch_on_four_ones(k, dev) == JB_ERR_SEALED, "a new kernel in a sealed child: %s",
          jb_last_error_message());
    jb_counters c;
    CHECK_OK(jb_counters_get(&c, sizeof c));
    CHECK(c.disk_hits == 1 && c.builds == 0 && c.sealed_refusals == 1,
          "disk hits %llu builds %llu refusals %llu", (unsigned long long)c.disk_hits,
          (unsigned long long)c.builds, (unsigned long long)c.sealed_refusals);
    jb_custom_kernel_free(k);
    jb_source_module_free(m);
    return check_failed ? 1 : 0;
}

/* JITBRIDGE_SEAL=error with an empty cache folder: no record of the compiler, so the folder's
 * module is a miss too, refused, with one warning saying why; nothing starts (the parent counts). */
static int sealed_empty_child(jb_device *dev)
{
    CHECK_OK(jb_set_log_callback(on_warning, NULL));
    jb_source_module *m = source_module();
    CHECK(launch_touch(m, dev) == JB_ERR_SEALED, "sealed with no record: %s",
          jb_last_error_message());
    CHECK(occurrences(warnings, "holds a record of the version") == 1, "warnings: %s", warnings);
    jb_counters c;
    CHECK_OK(jb_counters_get(&c, sizeof c));
    CHECK(c.builds == 0 && c.sealed_refusals == 1, "builds %llu refusals %llu",
          (unsigned long long)c.builds, (unsigned long long)c.sealed_refusals);
    jb_source_module_free(m);
    CHECK_OK(jb_set_log_callback(NULL, NULL));
    return check_failed ? 1 : 0;
}

/* JITBRIDGE_SEAL=<not a mode>: sealed to refuse (a security switch fails closed), with one
 * warning showing the value as JB_TEST_SEAL_SHOWN says (escaped, cut short); a new kernel is
 * refused, not compiled. */
static int bad_value_child(jb_device *dev)
{
    CHECK_OK(jb_set_log_callback(on_warning, NULL));
    CHECK(jb_seal_mode_get() == JB_SEAL_ERROR, "a bad JITBRIDGE_SEAL left the mode %d",
          jb_seal_mode_get());
    jb_seal_mode_get();
    char want[512];
    snprintf(want, sizeof want, "JITBRIDGE_SEAL='%s' is not warn, error or off",
             getenv("JB_TEST_SEAL_SHOWN"));
    CHECK(occurrences(warnings, want) == 1 && strstr(warnings, "sealed to refuse"),
          "want one '%s' in: %s", want, warnings);
    jb_custom_kernel *k = kernel("seal_bad_value", "out[thread_index()] = %u.625f;");
    CHECK(launch_on_four_ones(k, dev) == JB_ERR_SEALED, "a new kernel under a bad value: %s",
          jb_last_error_message());
    jb_counters c;
    CHECK_OK(jb_counters_get(&c, sizeof c));
    CHECK(c.builds == 0, "%llu builds under a bad value", (unsigned long long)c.builds);
    jb_custom_kernel_free(k);
    CHECK_OK(jb_set_log_callback(NULL, NULL));
    return check_failed ? 1 : 0;
}

/* JITBRIDGE_SEAL=off, 0, false or no (any case): not sealed, and nothing to warn about. */
static int off_child(void)
{
    CHECK_OK(jb_set_log_callback(on_warning, NULL));
    CHECK(jb_seal_mode_get() == JB_SEAL_OFF, "an off value sealed: %d", jb_seal_mode_get());
    CHECK(!strstr(warnings, "JITBRIDGE_SEAL"), "warnings: %s", warnings);
    CHECK_OK(jb_set_log_callback(NULL, NULL));
    return check_failed ? 1 : 0;
}

/* Every value but the exact off words and the modes seals to refuse: a stray space or \r, a
 * typo, a number, an empty value (JITBRIDGE_SEAL=$MODE with MODE unset). The warning shows the
 * value escaped and cut at 64 bytes. */
static void env_values(void)
{
    static const char *const bad[][2] = {
        {"error ", "error "},   {" error", " error"}, {"errors", "errors"}, {"2", "2"},
        {"sideways", "sideways"}, {"", ""},         {"off\r", "off\\x0d"},
        {"1", "1"},             {"o'f\\f\x1b[2J\xc3\xa9", "o\\x27f\\x5cf\\x1b[2J\\xc3\\xa9"},
        {"0123456789012345678901234567890123456789012345678901234567890123456789",
         "0123456789012345678901234567890123456789012345678901234567890123..."},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("JB_TEST_SEAL_SHOWN", bad[i][1], 1);
        CHECK(run_child("bad-value-child", bad[i][0]) == 0,
              "JITBRIDGE_SEAL='%s' (shown '%s'): the child failed", bad[i][0], bad[i][1]);
    }
    unsetenv("JB_TEST_SEAL_SHOWN");
    static const char *const off[] = {"off", "OFF", "0", "false", "no"};
    for (size_t i = 0; i < sizeof off / sizeof *off; i++)
        CHECK(run_child("off-child", off[i]) == 0, "JITBRIDGE_SEAL=%s did not leave it off",
              off[i]);
}

static int warn_child(void)
{
    CHECK(jb_seal_mode_get() == JB_SEAL_WARN, "JITBRIDGE_SEAL=WARN read as %d",
          jb_seal_mode_get());
    return check_failed ? 1 : 0;
}

static void sealed_to_refuse(jb_device *dev, jb_custom_kernel *warm)
{
    jb_custom_kernel *fresh = kernel("seal_fresh", "out[thread_index()] = %u.25f;");
    jb_counters before, after;
    CHECK_OK(jb_counters_get(&before, sizeof before));
    CHECK_OK(jb_seal(JB_SEAL_ERROR));
    CHECK(jb_seal_mode_get() == JB_SEAL_ERROR, "mode %d", jb_seal_mode_get());
    reset_compiler_runs();
    seen_clear();
    CHECK_OK(launch_on_four_ones(warm, dev)); /* in memory: loads */
    for (int attempt = 0; attempt < 2; attempt++) {
        CHECK(launch_on_four_ones(fresh, dev) == JB_ERR_SEALED, "attempt %d: %s", attempt,
              jb_last_error_message());
        CHECK(jb_last_error_status() == JB_ERR_SEALED &&
                  strstr(jb_last_error_message(), jb_custom_kernel_module_name(fresh)) != NULL,
              "the refusal names the kernel: %s", jb_last_error_message());
    }
    CHECK(violations == 2 && violation_status == JB_ERR_SEALED &&
              strcmp(violation_name, jb_custom_kernel_module_name(fresh)) == 0,
          "%d violation events, status %d, name %s", violations, violation_status,
          violation_name);
    CHECK_OK(jb_counters_get(&after, sizeof after));
    CHECK(after.sealed_refusals - before.sealed_refusals == 2,
          "%llu refusals counted, want 2", (unsigned long long)(after.sealed_refusals - before.sealed_refusals));
    CHECK(after.build_failures == before.build_failures && after.builds == before.builds,
          "a refusal counted as a build or a failure");
    if (disk_on())
        CHECK(run_child("sealed-child", "error") == 0, "the JITBRIDGE_SEAL=error child failed");
    /* Sealed with CC a link of another name to the same compiler (whose version line then
     * names it otherwise): the folder's record still gives the identity, and its module loads. */
    if (disk_on())
        CHECK(run_child_with("sealed-child", "error", other_cc) == 0,
              "the sealed child whose CC is the compiler by another name failed");
    CHECK(counted_runs(true) == 0, "the compiler compiled %d times while sealed",
          counted_runs(true));
    CHECK(compiler_runs() == 0, "a sealed process started the compiler %d times (%s)",
          compiler_runs(), "its version query included");
    if (disk_on()) {
        /* With no record of the compiler in its cache folder, a sealed process still starts
         * nothing: it finds nothing stored, and its miss is refused. */
        char *folder = strdup(getenv("JITBRIDGE_CACHE_DIR")), empty[4300];
        snprintf(empty, sizeof empty, "%s/empty-cache", folder);
        setenv("JITBRIDGE_CACHE_DIR", empty, 1);
        CHECK(run_child("sealed-empty-child", "error") == 0,
              "the sealed child of an empty cache folder failed");
        setenv("JITBRIDGE_CACHE_DIR", folder, 1);
        free(folder);
        CHECK(compiler_runs() == 0, "a sealed process with no record started the compiler %d times",
              compiler_runs());
    }

    /* Unsealed, the refused kernel compiles: nothing of the refusal was remembered. */
    CHECK_OK(jb_seal(JB_SEAL_OFF));
    CHECK_OK(launch_on_four_ones(fresh, dev));
    CHECK(compiler_runs() > 0, "unsealed, the compiler did not run");
    jb_custom_kernel_free(fresh);
}

/* ---- every path that would start a compiler, sealed ---- */

/* Each starts the compiler for `k` (a kernel compiled nowhere yet) or, for the probe's paths,
 * for a probe variant not built yet; `dev` is the test's device. */
static jb_status by_launch(jb_device *dev, jb_custom_kernel *k)
{
    return launch_on_four_ones(k, dev);
}

static jb_status by_prepare(jb_device *dev, jb_custom_kernel *k)
{
    return jb_custom_kernel_prepare(k, dev);
}

static jb_status by_source_module(jb_device *dev, jb_custom_kernel *k)
{
    (void)k;
    char body[256];
    snprintf(body, sizeof body, "void touch(void **args, unsigned long n) { (void)n; "
                                "**(float **)args[0] = %u.5f; }", salt);
    jb_source_module *m = touch_module("seal_path_module", body);
    jb_status status = launch_touch(m, dev);
    jb_source_module_free(m);
    return status;
}

static int probe_variant(int path)
{
    return (int)(salt % 100000) + 7 + path;
}

static jb_status by_probe(jb_device *dev, jb_custom_kernel *k)
{
    (void)k;
    jb_array *in = f32_filled(dev, 8, 1.0f), *out = NULL;
    jb_status status = jb_jit_race_probe_array(&out, in, probe_variant(0));
    jb_array_free(out);
    jb_array_free(in);
    return status;
}

static jb_status by_cold_probe_steps(jb_device *dev, jb_custom_kernel *k)
{
    (void)k;
    jb_array *in = f32_filled(dev, 8, 1.0f);
    jb_bench_cold_steps steps;
    jb_status status = jb_bench_cold_probe_steps(&steps, in, probe_variant(1));
    jb_array_free(in);
    return status;
}

static jb_status by_raw_probe_launches(jb_device *dev, jb_custom_kernel *k)
{
    (void)k;
    jb_array *in = f32_filled(dev, 8, 1.0f);
    double ns = 0;
    jb_status status = jb_bench_raw_probe_launches(&ns, in, probe_variant(2), 2);
    jb_array_free(in);
    return status;
}

static jb_status by_compile_only(jb_device *dev, jb_custom_kernel *k)
{
    double ns = 0;
    return jb_bench_compile_only(&ns, k, dev);
}

/* The library's own options, no device given (the cpu's is the one sealed). */
static jb_status by_compile_with(jb_device *dev, jb_custom_kernel *k)
{
    (void)dev;
    jb_bench_compile_cost cost;
    return jb_bench_compile_with(&cost, k, "cpu", NULL, NULL, 0, NULL);
}

/* Options of the caller's, the code loaded on the device. */
static jb_status by_compile_with_options(jb_device *dev, jb_custom_kernel *k)
{
    const char *options[] = {"-O1", "-fPIC", "-shared"};
    jb_bench_compile_cost cost;
    return jb_bench_compile_with(&cost, k, jb_device_backend_name(dev), NULL, options, 3, dev);
}

/* Sealed to refuse, each path that would start a compiler: refused with JB_ERR_SEALED, one
 * seal violation event (naming the kernel where the caller gave one), the refusal counted, and
 * no compile started, no build counted. */
static void every_compiler_path_sealed(jb_device *dev)
{
    static const struct {
        const char *what;
        jb_status (*start)(jb_device *dev, jb_custom_kernel *k);
        bool names_the_kernel;
        bool cpu_only; /* the bench's compile for the cpu backend */
    } paths[] = {
        {"a custom kernel's launch", by_launch, true, false},
        {"jb_custom_kernel_prepare", by_prepare, true, false},
        {"a source module's launch", by_source_module, false, false},
        {"the race probe", by_probe, false, false},
        {"jb_bench_cold_probe_steps", by_cold_probe_steps, false, false},
        {"jb_bench_raw_probe_launches", by_raw_probe_launches, false, false},
        {"jb_bench_compile_only", by_compile_only, true, false},
        {"jb_bench_compile_with", by_compile_with, true, true},
        {"jb_bench_compile_with, options and a device", by_compile_with_options, true, false},
    };
    bool cpu = strcmp(jb_device_backend_name(dev), "cpu") == 0;
    CHECK_OK(jb_seal(JB_SEAL_ERROR));
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        if (paths[i].cpu_only && !cpu)
            continue;
        char name[64];
        snprintf(name, sizeof name, "seal_path_%zu", i);
        jb_custom_kernel *k = kernel(name, "out[thread_index()] = %u.0625f;");
        const char *module = jb_custom_kernel_module_name(k);
        jb_counters before, after;
        CHECK_OK(jb_counters_get(&before, sizeof before));
        reset_compiler_runs();
        seen_clear();
        jb_status status = paths[i].start(dev, k);
        CHECK_OK(jb_counters_get(&after, sizeof after));
        pthread_mutex_lock(&seen_mutex);
        int events = violations, event_status = violation_status;
        bool named = strcmp(violation_name, module) == 0;
        pthread_mutex_unlock(&seen_mutex);
        CHECK(status == JB_ERR_SEALED, "sealed, %s: status %s (%s)", paths[i].what,
              jb_status_name(status), status == JB_OK ? "it ran" : jb_last_error_message());
        CHECK(events == 1 && event_status == JB_ERR_SEALED &&
                  (named || !paths[i].names_the_kernel),
              "sealed, %s: %d violation events, status %d, %s", paths[i].what, events,
              event_status, named ? "naming the kernel" : "not naming the kernel");
        CHECK(after.sealed_refusals - before.sealed_refusals == 1,
              "sealed, %s: %llu refusals counted, want 1", paths[i].what,
              (unsigned long long)(after.sealed_refusals - before.sealed_refusals));
        CHECK(counted_runs(true) == 0 && after.builds == before.builds &&
                  after.build_failures == before.build_failures,
              "sealed, %s: the compiler ran %d times, %llu builds, %llu failures", paths[i].what,
              counted_runs(true), (unsigned long long)(after.builds - before.builds),
              (unsigned long long)(after.build_failures - before.build_failures));
        jb_custom_kernel_free(k);
    }
    CHECK_OK(jb_seal(JB_SEAL_OFF));
}

static void sealed_to_warn(jb_device *dev)
{
    jb_custom_kernel *fresh = kernel("seal_warned", "out[thread_index()] = %u.375f;");
    jb_custom_kernel *broken = kernel("seal_broken", "out[thread_index()] = %u +;");
    jb_counters before, after;
    CHECK_OK(jb_counters_get(&before, sizeof before));
    CHECK_OK(jb_seal(JB_SEAL_WARN));
    reset_compiler_runs();
    seen_clear();
    CHECK_OK(launch_on_four_ones(fresh, dev));
    CHECK(compiler_runs() > 0, "warned, the compiler did not run");
    const char *name = jb_custom_kernel_module_name(fresh);
    CHECK(occurrences(warnings, name) == 1 && strstr(warnings, "sealed") != NULL,
          "one warning naming %s: %s", name, warnings);
    CHECK(violations == 1 && violation_status == JB_OK && strcmp(violation_name, name) == 0,
          "%d events, status %d", violations, violation_status);
    /* A kernel that fails to compile, tried again once its failure is forgotten (the failure
     * memory would answer first), is warned about once. */
    CHECK(launch_on_four_ones(broken, dev) == JB_ERR_COMPILE, "broken");
    reset_compiler_runs();
    CHECK_OK(jb_forget_build_failures());
    CHECK(launch_on_four_ones(broken, dev) == JB_ERR_COMPILE, "broken, again");
    CHECK(compiler_runs() > 0, "the second try compiled again");
    CHECK(occurrences(warnings, jb_custom_kernel_module_name(broken)) == 1,
          "once per kernel: %s", warnings);
    CHECK_OK(jb_counters_get(&after, sizeof after));
    CHECK(after.sealed_warnings - before.sealed_warnings == 2 &&
              after.sealed_refusals == before.sealed_refusals,
          "warnings %llu", (unsigned long long)(after.sealed_warnings - before.sealed_warnings));
    CHECK(jb_seal((jb_seal_mode)7) == JB_ERR_INVALID_ARGUMENT && jb_seal_mode_get() == JB_SEAL_WARN,
          "a bad mode is refused and changes nothing");
    CHECK_OK(jb_seal(JB_SEAL_OFF));
    seen_clear();
    jb_custom_kernel *later = kernel("seal_later", "out[thread_index()] = %u.4375f;");
    CHECK_OK(launch_on_four_ones(later, dev));
    CHECK(warnings[0] == '\0' && violations == 0, "unsealed, still warned: %s", warnings);
    jb_custom_kernel_free(later);
    jb_custom_kernel_free(fresh);
    jb_custom_kernel_free(broken);
}

int main(int argc, char **argv)
{
    alarm(getenv("JB_TEST_UNDER_VALGRIND") ? 1500 : 300); /* a deadlock fails, never hangs */
    if (argc == 3) {
        salt = (unsigned)strtoul(argv[2], NULL, 10);
        jb_device *dev = test_device();
        if (strcmp(argv[1], "sealed-child") == 0)
            return dev ? sealed_child(dev) : 1;
        if (strcmp(argv[1], "bad-value-child") == 0)
            return dev ? bad_value_child(dev) : 1;
        if (strcmp(argv[1], "sealed-empty-child") == 0)
            return dev ? sealed_empty_child(dev) : 1;
        if (strcmp(argv[1], "off-child") == 0)
            return off_child();
        if (strcmp(argv[1], "warn-child") == 0)
            return warn_child();
        return 2;
    }
    salt = (unsigned)getpid() ^ (unsigned)time(NULL);
    install_counting_compiler(); /* before the library reads CC */
    jb_device *dev = test_device();
    if (!dev)
        return check_summary("test_seal");
    default_stream_first(dev);
    CHECK(jb_seal_mode_get() == JB_SEAL_OFF, "sealed from the start: %d", jb_seal_mode_get());
    env_values();
    CHECK(run_child("warn-child", "WARN") == 0, "the JITBRIDGE_SEAL=WARN child failed");
    CHECK_OK(jb_set_log_callback(on_warning, NULL));
    CHECK_OK(jb_set_event_callback(on_event, NULL));
    /* Warm-up: a kernel in memory and a module in the folder (for the sealed child). */
    jb_custom_kernel *warm = kernel("seal_warm", "out[thread_index()] = %u.0f;");
    CHECK_OK(launch_on_four_ones(warm, dev));
    jb_source_module *m = source_module();
    CHECK_OK(launch_touch(m, dev));
    CHECK(compiler_runs() > 0, "the counting compiler did not run: %s", count_file);
    sealed_to_refuse(dev, warm);
    every_compiler_path_sealed(dev);
    sealed_to_warn(dev);
    CHECK_OK(jb_set_event_callback(NULL, NULL));
    CHECK_OK(jb_set_log_callback(NULL, NULL));
    jb_source_module_free(m);
    jb_custom_kernel_free(warm);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", count_file);
    unlink(count_file);
    *strrchr(dir, '/') = '\0';
    const char *names[] = {"cc", "othercc", "bin/cc", "bin/othercc", "bin"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[4300];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (unlink(path) != 0)
            rmdir(path);
    }
    rmdir(dir);
    return check_summary("test_seal");
}
