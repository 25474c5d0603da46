/*
 * Versions and the log callback: every warning reaches the callback installed at the time,
 * from many threads at once; replacing the callback waits for the calls in progress, so a
 * replaced user_data is never used again; the callback cannot replace itself or recurse; real
 * warnings (a refused cache folder, a bad JITBRIDGE_IDLE_CAP) arrive with the folder named, and
 * the callback may call the library.
 */
#include "check.h"
#include "deadline.h"
#include "jitbridge_sys.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The library's one warning function (internal, hidden; reachable from a static link). */
void jb__warn(const char *fmt, ...);
int jb__fail_with_log(int status, const char *log, const char *fmt, ...);

#define WARNERS 8
#define WARNINGS_EACH 2000

typedef struct sink {
    atomic_int live;   /* 1 while installed (or being replaced) */
    atomic_long calls;
    atomic_long stale; /* calls after the replacement returned: a use after release */
} sink;

static void count_warning(void *user_data, jb_log_level level, const char *message)
{
    sink *s = user_data;
    if (level == JB_LOG_WARNING && strncmp(message, "warning ", 8) == 0)
        atomic_fetch_add(&s->calls, 1);
    /* Stay a while, then look: a replacement must not have returned during this call. */
    if (atomic_load(&s->calls) % 16 == 0)
        nanosleep(&(struct timespec){.tv_nsec = 20000}, NULL);
    if (!atomic_load(&s->live))
        atomic_fetch_add(&s->stale, 1);
}

static atomic_int warners_done;

static void *warner(void *arg)
{
    (void)arg;
    for (int i = 0; i < WARNINGS_EACH; i++)
        jb__warn("warning %d", i);
    atomic_fetch_add(&warners_done, 1);
    return NULL;
}

static void versions(void)
{
    char expected[64];
    snprintf(expected, sizeof expected, "%d.%d.%d", JB_VERSION_MAJOR, JB_VERSION_MINOR,
             JB_VERSION_PATCH);
    CHECK(strcmp(jb_version(), expected) == 0, "jb_version() %s, header %s", jb_version(),
          expected);
    CHECK(strcmp(JB_VERSION_STRING, expected) == 0, "JB_VERSION_STRING %s", JB_VERSION_STRING);
    CHECK(jb_abi_version() == JB_ABI_VERSION, "ABI %d vs %d", jb_abi_version(), JB_ABI_VERSION);
}

static void concurrent_warnings_while_replacing(void)
{
    static sink sinks[2];
    pthread_t threads[WARNERS];
    atomic_store(&sinks[0].live, 1);
    CHECK_OK(jb_set_log_callback(count_warning, &sinks[0]));
    for (int t = 0; t < WARNERS; t++)
        CHECK(pthread_create(&threads[t], NULL, warner, NULL) == 0, "pthread_create");
    int current = 0;
    /* Replace the callback over and over for as long as warnings are coming. */
    long swaps = 0, failed_sets = 0;
    for (; atomic_load(&warners_done) < WARNERS || swaps < 100; swaps++) {
        int next = 1 - current;
        atomic_store(&sinks[next].live, 1);
        failed_sets += jb_set_log_callback(count_warning, &sinks[next]) != JB_OK;
        /* The old sink is released now: any call on it from here on is a bug. */
        atomic_store(&sinks[current].live, 0);
        current = next;
    }
    for (int t = 0; t < WARNERS; t++)
        pthread_join(threads[t], NULL);
    CHECK(failed_sets == 0, "%ld of %ld replacements failed", failed_sets, swaps);
    CHECK_OK(jb_set_log_callback(NULL, NULL));
    long total = atomic_load(&sinks[0].calls) + atomic_load(&sinks[1].calls);
    CHECK(total == (long)WARNERS * WARNINGS_EACH, "%ld of %d warnings reached a callback", total,
          WARNERS * WARNINGS_EACH);
    long stale = atomic_load(&sinks[0].stale) + atomic_load(&sinks[1].stale);
    CHECK(stale == 0, "%ld calls used a user_data after its replacement returned (%ld swaps)",
          stale, swaps);
}

static atomic_int inner_calls;
static atomic_int inner_set_status = -1;

static void reenter(void *user_data, jb_log_level level, const char *message)
{
    (void)user_data, (void)level, (void)message;
    atomic_fetch_add(&inner_calls, 1);
    atomic_store(&inner_set_status, jb_set_log_callback(NULL, NULL));
    jb__warn("from inside the callback (expected on stderr)");
}

static void callback_cannot_replace_itself_or_recurse(void)
{
    CHECK_OK(jb_set_log_callback(reenter, NULL));
    jb__warn("outer");
    CHECK(atomic_load(&inner_calls) == 1, "the callback ran %d times", atomic_load(&inner_calls));
    CHECK(atomic_load(&inner_set_status) == JB_ERR_INVALID_ARGUMENT,
          "jb_set_log_callback from inside the callback returned %d",
          atomic_load(&inner_set_status));
    CHECK_OK(jb_set_log_callback(NULL, NULL));
}

/* A callback that uses the library: looks a device up, fails a lookup (setting its thread's
 * error), and builds a kernel; records each message it gets. */
static char reentrant_seen[4096];
static atomic_int reentrant_lookups;

static void prepare_copy_kernel(const char *name, const char *body, jb_status *status,
                                char *error, size_t error_len)
{
    const char *in[] = {"inp"}, *out[] = {"out"};
    jb_dtype f32[] = {JB_F32};
    jb_kernel_spec spec = {.struct_size = sizeof(jb_kernel_spec),
                           .name = name,
                           .input_names = in,
                           .input_dtypes = f32,
                           .num_inputs = 1,
                           .output_names = out,
                           .output_dtypes = f32,
                           .num_outputs = 1,
                           .body = body};
    jb_device *cpu = NULL;
    jb_custom_kernel *kernel = NULL;
    *status = jb_device_get(&cpu, JB_DEVICE_CPU, 0);
    if (*status == JB_OK)
        *status = jb_custom_kernel_new(&kernel, &spec);
    if (*status == JB_OK)
        *status = jb_custom_kernel_prepare(kernel, cpu);
    snprintf(error, error_len, "%s", *status == JB_OK ? "" : jb_last_error_message());
    jb_custom_kernel_free(kernel);
}

typedef struct inner_build {
    jb_status status;
    char error[512];
} inner_build;

static void *build_inner(void *arg)
{
    inner_build *b = arg;
    prepare_copy_kernel("log_test_inner", "out[thread_index()] = inp[thread_index()];",
                        &b->status, b->error, sizeof b->error);
    return NULL;
}

static void reentrant(void *user_data, jb_log_level level, const char *message)
{
    (void)user_data, (void)level;
    size_t at = strlen(reentrant_seen);
    snprintf(reentrant_seen + at, sizeof reentrant_seen - at, "%s\n", message);
    jb_device *device = NULL;
    if (jb_device_default(&device) == JB_OK && device)
        atomic_fetch_add(&reentrant_lookups, 1);
    CHECK(jb_device_lookup(&device, "bogus:0") == JB_ERR_INVALID_ARGUMENT, "bogus device");
    if (strstr(message, "JITBRIDGE_IDLE_CAP"))
        return; /* a build now would set the disk cache up, its warning going to stderr */
    /* Built on another thread, waited for: a callback run under the cache's lock would hang. */
    inner_build inner = {.status = JB_ERR_SYSTEM};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, build_inner, &inner) == 0, "pthread_create");
    pthread_join(thread, NULL);
    CHECK(inner.status == JB_OK, "a build from inside the callback: %s", inner.error);
}

/* Warnings raised while the library sets devices up or builds under its cache lock reach a
 * callback that calls the library: no deadlock (an alarm ends a hang), and the error the
 * outer call returns is its own. Must run first: devices and the cache folder are set up once. */
static void a_callback_may_call_the_library(void)
{
    char dir[] = "/tmp/jb-test-log-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    chmod(dir, 0777); /* writable by others: the cache refuses it, with a warning */
    setenv("JITBRIDGE_CACHE_DIR", dir, 1);
    unsetenv("JITBRIDGE_DISK_CACHE");
    setenv("JITBRIDGE_IDLE_CAP", "lots", 1); /* warned about while the devices are set up */
    CHECK_OK(jb_set_log_callback(reentrant, NULL));
    alarm(20);

    jb_device *cpu = NULL;
    CHECK_OK(jb_device_get(&cpu, JB_DEVICE_CPU, 0));
    CHECK(strstr(reentrant_seen, "JITBRIDGE_IDLE_CAP") != NULL, "seen: %s", reentrant_seen);
    jb_status status;
    char error[512];
    prepare_copy_kernel("log_test_outer", "this does not compile;", &status, error, sizeof error);
    CHECK(status == JB_ERR_COMPILE, "a bad body: status %d: %s", (int)status, error);
    CHECK(strstr(error, "log_test_outer") != NULL, "the outer error is its own: %s", error);
    CHECK(strstr(reentrant_seen, dir) != NULL, "seen: %s", reentrant_seen);
    CHECK(strstr(reentrant_seen, "writable by group or others") != NULL, "seen: %s",
          reentrant_seen);
    CHECK(atomic_load(&reentrant_lookups) == 2, "the callback looked up %d devices",
          atomic_load(&reentrant_lookups));
    alarm(0);
    CHECK_OK(jb_set_log_callback(NULL, NULL));
    unsetenv("JITBRIDGE_IDLE_CAP");
    rmdir(dir);
}

static void fail_with_a_log(void *user_data, jb_log_level level, const char *message)
{
    (void)user_data, (void)level, (void)message;
    jb__fail_with_log(JB_ERR_COMPILE, "the inner log", "inner failure");
}

static void *warn_between_errors(void *arg)
{
    (void)arg;
    jb__fail_with_log(JB_ERR_COMPILE, "the outer log", "outer failure");
    jb__warn("the callback fails with a log of its own");
    return strstr(jb_last_error_message(), "the outer log") ? (void *)1 : NULL; /* then the thread's exit frees the outer message once */
}

/* A callback that fails with a long message on a thread whose own error has one: the caller's
 * comes back, and the thread's exit frees it, not the callback's (freed already: a double free). */
static void thread_exit_frees_the_restored_error(void)
{
    CHECK_OK(jb_set_log_callback(fail_with_a_log, NULL));
    for (int round = 0; round < 4; round++) {
        pthread_t thread;
        void *kept = NULL;
        CHECK(pthread_create(&thread, NULL, warn_between_errors, NULL) == 0, "pthread_create");
        pthread_join(thread, &kept);
        CHECK(kept, "the outer error with its log is back after the callback");
    }
    CHECK_OK(jb_set_log_callback(NULL, NULL));
}

/* ---- fork and the callback: the callback runs under no library lock, so a fork from inside
 * it, or by a thread it waits for, takes every lock at once; the child can then log. ---- */

static atomic_int children_ok, children_forked;

/* A forked child's time: a hang in it is a failure the parent sees. */
#define CHILD_S 30

static bool nothing_to_do(void *arg)
{
    (void)arg;
    return true;
}

static void fork_inside(void *user_data, jb_log_level level, const char *message)
{
    (void)user_data, (void)level, (void)message;
    atomic_fetch_add(&children_forked, 1);
    atomic_fetch_add(&children_ok, child_says_yes("a fork inside the callback", CHILD_S,
                                                  nothing_to_do, NULL));
}

static atomic_long child_sink_calls;

static void count_in_child(void *user_data, jb_log_level level, const char *message)
{
    (void)user_data, (void)level, (void)message;
    atomic_fetch_add(&child_sink_calls, 1);
}

/* A thread the callback waits for forks; its child replaces the callback (which must not wait
 * for the parent's call in progress: its thread is not in the child) and logs through it. */
static bool replace_the_callback_and_log(void *arg)
{
    (void)arg;
    if (jb_set_log_callback(count_in_child, NULL) != JB_OK)
        return false;
    jb__warn("from the forked child");
    return atomic_load(&child_sink_calls) == 1;
}

static void *fork_and_log_in_child(void *arg)
{
    (void)arg;
    atomic_fetch_add(&children_forked, 1);
    atomic_fetch_add(&children_ok, child_says_yes("a fork by a thread the callback waits for",
                                                  CHILD_S, replace_the_callback_and_log, NULL));
    return NULL;
}

static void wait_for_a_forking_thread(void *user_data, jb_log_level level, const char *message)
{
    (void)user_data, (void)level, (void)message;
    pthread_t thread;
    if (pthread_create(&thread, NULL, fork_and_log_in_child, NULL) == 0)
        pthread_join(thread, NULL);
}

static void fork_from_the_callback(void)
{
    deadline d;
    deadline_start(&d, 20, "a fork inside the log callback");
    CHECK_OK(jb_set_log_callback(fork_inside, NULL));
    jb__warn("fork in here");
    CHECK_OK(jb_set_log_callback(NULL, NULL));
    deadline_end(&d);
    CHECK(atomic_load(&children_forked) == 1 && atomic_load(&children_ok) == 1,
          "forked %d, clean %d", atomic_load(&children_forked), atomic_load(&children_ok));

    deadline_start(&d, 20, "a fork by a thread the log callback waits for");
    CHECK_OK(jb_set_log_callback(wait_for_a_forking_thread, NULL));
    jb__warn("a thread of mine forks");
    CHECK_OK(jb_set_log_callback(NULL, NULL));
    deadline_end(&d);
    CHECK(atomic_load(&children_forked) == 2 && atomic_load(&children_ok) == 2,
          "forked %d, clean %d (a child that could not replace the callback or log through "
          "it answers no, one that hung is killed)",
          atomic_load(&children_forked), atomic_load(&children_ok));
}

int main(void)
{
    a_callback_may_call_the_library();
    versions();
    concurrent_warnings_while_replacing();
    callback_cannot_replace_itself_or_recurse();
    thread_exit_frees_the_restored_error();
    fork_from_the_callback();
    return check_summary("test_log");
}
