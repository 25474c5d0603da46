/*
 * The cpu backend's children and the processes around them. Each scenario runs in a child of
 * this (library-free) process, so that it starts with the library untouched: its CC, TMPDIR and
 * first compile are its own. $CC is a script: it refuses a source that says FAILME (exit 3),
 * kills itself on KILLME, floods its output on BIGOUT / LONGLOG, and hangs on --version when
 * JB_TEST_VERSION_HANG is set; else it runs cc.
 *  - fork: a forked child that exits leaves the parent's private directory; a removed one is
 *    made again; a child gets a directory of its own.
 *  - SIGCHLD ignored (SIG_IGN, SA_NOCLDWAIT), and a thread reaping with waitpid(-1): compiles
 *    work and a failing compiler's exit status is still reported.
 *  - JITBRIDGE_COMPILE_TIMEOUT_MS parsed strictly, one warning per bad value; a version query
 *    that hangs is killed; $CC with 40 words; 10 MB of compiler output kept head and tail.
 *  - A thread's long error message (a compiler log) is freed when the thread ends.
 */
#include "check.h"
#include "deadline.h"
#include "jitbridge.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Each scenario is a child that ends within this (valgrind included), or fails the test. */
#define SCENARIO_DEADLINE_S 300
/* A child of a scenario compiles once. */
#define CHILD_DEADLINE_S 60

static char root[] = "/tmp/jb-process-XXXXXX";
static char fake_cc[128];
static jb_device *cpu;

static const char script[] =
    "#!/bin/sh\n"
    "if [ \"$1\" = --version ]; then\n"
    "  [ -n \"$JB_TEST_VERSION_HANG\" ] && exec sleep 60\n"
    "  exec cc --version\n"
    "fi\n"
    "for a; do case $a in *.c)\n"
    "  grep -q FAILME \"$a\" && { echo 'refused FAILME' >&2; exit 3; }\n"
    "  grep -q KILLME \"$a\" && kill -9 $$\n"
    "  grep -q LONGLOG \"$a\" && { head -c 200000 /dev/zero | tr '\\0' y; exit 1; }\n"
    "  grep -q BIGOUT \"$a\" && { echo HEADMARK; head -c 10000000 /dev/zero | tr '\\0' x; echo;\n"
    "    echo TAILMARK >&2; exit 1; }\n"
    "esac; done\n"
    "exec cc \"$@\"\n";

/* Builds (without launching) a new kernel whose body carries `mark`: a fresh module each time. */
static int build(const char *mark)
{
    static int serial;
    char body[256];
    snprintf(body, sizeof body, "/* %s %d */ out[thread_index()] = inp[thread_index()] + %d.0f;",
             mark, getpid(), ++serial);
    const char *in[] = {"inp"}, *out[] = {"out"};
    jb_dtype f32[] = {JB_F32};
    jb_kernel_spec spec = {.struct_size = sizeof(jb_kernel_spec), .name = "proc",
                           .input_names = in, .input_dtypes = f32, .num_inputs = 1,
                           .output_names = out, .output_dtypes = f32, .num_outputs = 1,
                           .body = body};
    jb_custom_kernel *kernel;
    int status = jb_custom_kernel_new(&kernel, &spec);
    if (status == JB_OK) {
        if (!cpu)
            status = jb_device_get(&cpu, JB_DEVICE_CPU, 0);
        if (status == JB_OK)
            status = jb_custom_kernel_prepare(kernel, cpu);
        jb_custom_kernel_free(kernel);
    }
    return status;
}

static bool message_has(const char *needle)
{
    return strstr(jb_last_error_message(), needle) != NULL;
}

/* A failing compiler must be reported with its own exit status and words. */
static void check_failure_reported(const char *host)
{
    int status = build("FAILME");
    CHECK(status == JB_ERR_COMPILE && message_has("exit status 3") &&
              message_has("refused FAILME"),
          "%s: a failing compiler: %s", host, jb_last_error_message());
    status = build("KILLME");
    CHECK(status == JB_ERR_COMPILE && message_has("signal 9"), "%s: a killed compiler: %s", host,
          jb_last_error_message());
}

static void use_tmpdir(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", root, name);
    mkdir(path, 0700);
    setenv("TMPDIR", path, 1);
}

/* This process's private directory "jitbridge-PID-*" under $TMPDIR, if there is one. */
static bool find_dir(pid_t pid, char *out, size_t len)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "jitbridge-%ld-", (long)pid);
    DIR *d = opendir(getenv("TMPDIR"));
    bool found = false;
    for (struct dirent *e; d && !found && (e = readdir(d));)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
            snprintf(out, len, "%s/%s", getenv("TMPDIR"), e->d_name);
            found = true;
        }
    if (d)
        closedir(d);
    return found;
}

static void scenario_fork(void)
{
    use_tmpdir("fork");
    CHECK_OK(build("parent"));
    char mine[512] = "", other[512];
    CHECK(find_dir(getpid(), mine, sizeof mine), "the parent has no private directory");
    pid_t child = fork_with_deadline("a child that compiles", CHILD_DEADLINE_S);
    if (child == 0) {
        /* exit(), not _exit(): the atexit handlers run, as in a real child that ends */
        bool built = build("child") == JB_OK;
        exit(built && find_dir(getpid(), other, sizeof other) ? 0 : 1);
    }
    int ws = wait_child_with_deadline(child, CHILD_DEADLINE_S + 5, "a child that compiles");
    CHECK(ws != -1 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
          "the child could not compile in a private directory of its own");
    struct stat st;
    CHECK(stat(mine, &st) == 0, "the child's exit removed the parent's directory %s", mine);
    CHECK(!find_dir(child, other, sizeof other), "the child left its directory %s", other);
    child = fork_with_deadline("a child that never compiles", CHILD_DEADLINE_S);
    if (child == 0)
        exit(0); /* a child that never compiled: its atexit handler sees the parent's path */
    wait_child_with_deadline(child, CHILD_DEADLINE_S + 5, "a child that never compiles");
    CHECK(stat(mine, &st) == 0, "an idle child's exit removed the parent's directory %s", mine);
    CHECK_OK(build("parent again"));

    /* A tmp cleaner removes the idle server's directory: the next compile makes a new one. */
    CHECK(rmdir(mine) == 0, "rmdir %s: %s", mine, strerror(errno));
    CHECK_OK(build("after the cleaner"));
    CHECK(find_dir(getpid(), mine, sizeof mine), "no private directory after the cleaner");
}

/* Where the host takes children away, a compile whose end the library missed would wait for the
 * compile timeout: a short one fails such a scenario in seconds, not the default 10 minutes. */
#define SHORT_COMPILE_TIMEOUT_MS "20000"

/* Builds; on a failure says why and returns false, and the scenario stops: a compile whose end
 * is never seen costs one timeout, not one per build. */
static bool builds(const char *mark, const char *host)
{
    int status = build(mark);
    CHECK(status == JB_OK, "%s: a compile failed: %s", host, jb_last_error_message());
    return status == JB_OK;
}

static void scenario_sigchld_ignored(void)
{
    use_tmpdir("sigign");
    setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", SHORT_COMPILE_TIMEOUT_MS, 1);
    signal(SIGCHLD, SIG_IGN);
    if (!builds("SIG_IGN", "SIGCHLD ignored"))
        return;
    check_failure_reported("SIGCHLD ignored");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sa.sa_flags = SA_NOCLDWAIT;
    sigaction(SIGCHLD, &sa, NULL);
    if (!builds("SA_NOCLDWAIT", "SA_NOCLDWAIT"))
        return;
    check_failure_reported("SA_NOCLDWAIT");
}

static atomic_bool reaper_stop;
static atomic_int reaped;

static void *reaper(void *arg)
{
    (void)arg;
    while (!atomic_load(&reaper_stop)) {
        int ws;
        if (waitpid(-1, &ws, 0) > 0)
            atomic_fetch_add(&reaped, 1);
        else
            nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    }
    return NULL;
}

static void scenario_reaper_thread(void)
{
    use_tmpdir("reaper");
    setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", SHORT_COMPILE_TIMEOUT_MS, 1);
    pthread_t thread;
    pthread_create(&thread, NULL, reaper, NULL);
    bool built = true;
    for (int i = 0; built && i < 4; i++)
        built = builds("reaped", "a thread reaping with waitpid(-1)");
    if (built)
        check_failure_reported("a thread reaping with waitpid(-1)");
    atomic_store(&reaper_stop, true);
    pthread_join(thread, NULL);
    CHECK(atomic_load(&reaped) == 0, "the host's reaper took %d of the library's children",
          atomic_load(&reaped));
}

/* Runs `fn` with stderr in a file; returns what it wrote (static, NUL-terminated). */
static const char *with_stderr_captured(void (*fn)(void))
{
    static char text[16384];
    char path[256];
    snprintf(path, sizeof path, "%s/stderr-%d", root, getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600), saved = dup(2);
    fflush(stderr);
    dup2(fd, 2);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    text[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
    return text;
}

static const char *const bad_timeouts[] = {"-1", "0", "abc", "5000x",
                                           "99999999999999999999999999"};

static void build_with_bad_timeouts(void)
{
    for (size_t i = 0; i < sizeof bad_timeouts / sizeof *bad_timeouts; i++) {
        setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", bad_timeouts[i], 1);
        for (int twice = 0; twice < 2; twice++)
            CHECK(build("timeout") == JB_OK, "JITBRIDGE_COMPILE_TIMEOUT_MS=%s: %s", bad_timeouts[i],
                  jb_last_error_message());
    }
    setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", "60000", 1);
    CHECK_OK(build("a good timeout"));
}

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static void scenario_timeout_values(void)
{
    use_tmpdir("timeout");
    const char *err = with_stderr_captured(build_with_bad_timeouts);
    for (size_t i = 0; i < sizeof bad_timeouts / sizeof *bad_timeouts; i++) {
        char needle[128];
        snprintf(needle, sizeof needle, "JITBRIDGE_COMPILE_TIMEOUT_MS=%s ", bad_timeouts[i]);
        CHECK(count(err, needle) == 1, "%s: %d warnings, expected one; stderr:\n%s", needle,
              count(err, needle), err);
    }
    CHECK(strstr(err, "using 86400000 ms") != NULL, "a huge value is not clamped to a day:\n%s",
          err);
    CHECK(strstr(err, "=60000") == NULL, "a good value warned:\n%s", err);
}

static void scenario_big_output(void)
{
    use_tmpdir("big");
    int status = build("BIGOUT");
    const char *m = jb_last_error_message();
    CHECK(status == JB_ERR_COMPILE && strlen(m) < 80 * 1024,
          "10 MB of compiler output made a message of %zu bytes", strlen(m));
    CHECK(message_has("HEADMARK") && message_has("TAILMARK") &&
              message_has("bytes cut from the middle of 10000"),
          "the head, the tail and a note of the cut must stay: %.300s", m);
}

static void scenario_many_words(void)
{
    use_tmpdir("words");
    char line[2048];
    int used = snprintf(line, sizeof line, "%s", fake_cc);
    for (int i = 1; i <= 40; i++)
        used += snprintf(line + used, sizeof line - (size_t)used, " -DW%d=%d", i, i);
    setenv("CC", line, 1);
    CHECK(strcmp(jb_cpu_compiler(), line) == 0, "CC kept as '%s'", jb_cpu_compiler());
    const char *in[] = {"inp"}, *outn[] = {"out"};
    jb_dtype f32[] = {JB_F32};
    jb_kernel_spec spec = {.struct_size = sizeof(jb_kernel_spec), .name = "words",
                           .input_names = in, .input_dtypes = f32, .num_inputs = 1,
                           .output_names = outn, .output_dtypes = f32, .num_outputs = 1,
                           .body = "out[thread_index()] = inp[thread_index()] + W40;"};
    jb_custom_kernel *kernel = NULL;
    jb_array *input = NULL, *output[1] = {NULL};
    int64_t n = 4;
    const int64_t *shapes[] = {&n};
    int ndims[] = {1};
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, 4};
    float values[4] = {0};
    CHECK_OK(jb_device_get(&cpu, JB_DEVICE_CPU, 0));
    CHECK_OK(jb_custom_kernel_new(&kernel, &spec));
    CHECK_OK(jb_array_arange(&input, cpu, 4, JB_F32));
    CHECK_OK(jb_custom_kernel_launch(output, kernel, &input, 1, shapes, ndims, &shape));
    if (output[0])
        CHECK_OK(jb_array_read(output[0], values, sizeof values));
    CHECK(values[3] == 43.0f, "the 40th word of CC was lost: %g", (double)values[3]);
    jb_array_free(input);
    jb_array_free(output[0]);
    jb_custom_kernel_free(kernel);
}

static void scenario_version_hangs(void)
{
    use_tmpdir("version");
    char cache[256];
    snprintf(cache, sizeof cache, "%s/version-cache", root);
    setenv("JITBRIDGE_CACHE_DIR", cache, 1);
    unsetenv("JITBRIDGE_DISK_CACHE"); /* the disk cache key is what asks for the version */
    setenv("JB_TEST_VERSION_HANG", "1", 1);
    setenv("JITBRIDGE_COMPILER_ENV", "JB_TEST_VERSION_HANG", 1); /* or the compiler sees none */
    /* Room for the real compile on a loaded machine, far less than the hang. */
    setenv("JITBRIDGE_COMPILE_TIMEOUT_MS", "5000", 1);
    time_t start = time(NULL);
    CHECK_OK(build("version"));
    CHECK(time(NULL) - start < 30, "a hanging '$CC --version' held the compile %ld s",
          (long)(time(NULL) - start));
}

static void *fail_with_long_log(void *arg)
{
    int *ok = arg;
    *ok = build("LONGLOG") == JB_ERR_COMPILE && strlen(jb_last_error_message()) > 60000;
    return NULL;
}

/* Heap in use, all arenas (threads allocate from arenas of their own). */
static size_t heap_in_use(void)
{
    return mallinfo2().uordblks;
}

static void scenario_thread_exit(void)
{
    use_tmpdir("threads");
    enum { THREADS = 24 };
    size_t before = 0;
    for (int t = 0; t <= THREADS; t++) {
        if (t == 1)
            before = heap_in_use(); /* after one thread: arenas and the device exist */
        pthread_t thread;
        int ok = 0;
        pthread_create(&thread, NULL, fail_with_long_log, &ok);
        pthread_join(thread, NULL);
        CHECK(ok, "thread %d: no long compiler log in its error", t);
        jb_forget_build_failures(); /* what the library remembers of each failure is not a leak */
    }
    size_t after = heap_in_use();
    CHECK(after < before + 256 * 1024,
          "%d threads that ended with a long error message kept %zu bytes of heap", THREADS,
          after - before);
}

static void run(const char *name, void (*scenario)(void))
{
    pid_t pid = fork_with_deadline(name, SCENARIO_DEADLINE_S);
    if (pid == 0) {
        check_passed = check_failed = 0; /* the child counts its own */
        scenario();
        exit(check_summary(name));
    }
    int ws = wait_child_with_deadline(pid, SCENARIO_DEADLINE_S + 5, name);
    CHECK(ws != -1 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "scenario %s failed (wait status %#x)",
          name, ws);
}

int main(void)
{
    CHECK(mkdtemp(root) != NULL, "mkdtemp");
    snprintf(fake_cc, sizeof fake_cc, "%s/cc", root);
    FILE *f = fopen(fake_cc, "w");
    fputs(script, f);
    fclose(f);
    chmod(fake_cc, 0755);
    setenv("CC", fake_cc, 1);
    setenv("JITBRIDGE_DISK_CACHE", "0", 1);

    run("fork", scenario_fork);
    run("SIGCHLD ignored", scenario_sigchld_ignored);
    run("a thread reaping with waitpid(-1)", scenario_reaper_thread);
    run("JITBRIDGE_COMPILE_TIMEOUT_MS values", scenario_timeout_values);
    run("10 MB of compiler output", scenario_big_output);
    run("CC with 40 words", scenario_many_words);
    run("a version query that hangs", scenario_version_hangs);
    run("long error messages of threads that end", scenario_thread_exit);

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0, "cleaning %s", root);
    return check_summary("test_process");
}
