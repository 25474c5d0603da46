/*
 * Versions and the log callback: every warning reaches the callback installed at the time,
 * from many threads at once; replacing the callback waits for the calls in progress, so a
 * replaced user_data is never used again; the callback cannot replace itself or recurse; a real
 * warning (a refused cache folder) arrives with the folder named.
 */
#include "check.h"
#include "jitbridge_sys.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The library's one warning function (internal, hidden; reachable from a static link). */
void jb__warn(const char *fmt, ...);

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

static char received[2048];

static void keep_message(void *user_data, jb_log_level level, const char *message)
{
    (void)user_data, (void)level;
    snprintf(received, sizeof received, "%s", message);
}

/* Must run before anything else uses the disk cache: its folder is chosen once. */
static void a_refused_cache_folder_reaches_the_callback(void)
{
    char dir[] = "/tmp/jb-test-log-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    chmod(dir, 0777); /* writable by others: the cache must refuse it */
    setenv("JITBRIDGE_CACHE_DIR", dir, 1);
    unsetenv("JITBRIDGE_DISK_CACHE");
    CHECK_OK(jb_set_log_callback(keep_message, NULL));

    jb_device *cpu = NULL;
    jb_custom_kernel *kernel = NULL;
    const char *in[] = {"inp"}, *out[] = {"out"};
    jb_dtype f32[] = {JB_F32};
    jb_kernel_spec spec = {.struct_size = sizeof(jb_kernel_spec),
                           .name = "log_test",
                           .input_names = in,
                           .input_dtypes = f32,
                           .num_inputs = 1,
                           .output_names = out,
                           .output_dtypes = f32,
                           .num_outputs = 1,
                           .body = "out[thread_index()] = inp[thread_index()];"};
    CHECK_OK(jb_device_get(&cpu, JB_DEVICE_CPU, 0));
    CHECK_OK(jb_custom_kernel_new(&kernel, &spec));
    CHECK_OK(jb_custom_kernel_prepare(kernel, cpu));
    jb_custom_kernel_free(kernel);
    CHECK_OK(jb_set_log_callback(NULL, NULL));

    CHECK(strstr(received, dir) != NULL, "the warning %s does not name %s", received, dir);
    CHECK(strstr(received, "writable by group or others") != NULL, "the warning: %s", received);
    rmdir(dir);
}

int main(void)
{
    a_refused_cache_folder_reaches_the_callback();
    versions();
    concurrent_warnings_while_replacing();
    callback_cannot_replace_itself_or_recurse();
    return check_summary("test_log");
}
