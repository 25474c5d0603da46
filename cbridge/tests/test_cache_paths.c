/*
 * Which path a module lookup takes, seen through test points rather than timing, so that each
 * check fails every run when its path is broken:
 *  - a thread's second lookup of a key is a lookaside hit; another thread's first is a hit in
 *    the published index; with the lookaside switched off, neither is used;
 *  - a thread that missed under the read lock while another thread built the key finds the
 *    module under the write lock: one build, not two;
 *  - a kernel object's configure state is per device: on the cpu and on a second (test-only)
 *    cpu device, its hook runs once on each and each device keeps its own result.
 * Built with JB_TEST_HOOKS; cpu.
 */
#include "../src/kernels/kernels.h"
#include "deadline.h"
#include "helpers.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#ifndef JB_TEST_HOOKS
#error "test_cache_paths needs a JB_TEST_HOOKS build of the library"
#endif

#define N 32

static jb_device *cpu;

static jb_counters counters_now(void)
{
    jb_counters c;
    jb_counters_get(&c, sizeof c);
    return c;
}

/* ---- lookaside and published index ---- */

enum { LOOKASIDE, INDEX };
static _Thread_local int path_hits[2]; /* this thread's hits, by path */

static void count_path_hit(void *ctx, const char *module_name)
{
    (void)module_name;
    path_hits[(intptr_t)ctx]++;
}

/* Prepares `k` on the cpu; `seen` gets the lookaside and index hits of that one lookup. */
static void prepare_and_see(jb_custom_kernel *k, int seen[2])
{
    int before[2] = {path_hits[LOOKASIDE], path_hits[INDEX]};
    CHECK_OK(jb_custom_kernel_prepare(k, cpu));
    seen[LOOKASIDE] = path_hits[LOOKASIDE] - before[LOOKASIDE];
    seen[INDEX] = path_hits[INDEX] - before[INDEX];
}

typedef struct new_thread_lookups {
    jb_custom_kernel *k;
    int first[2], second[2];
} new_thread_lookups;

static void *lookups_on_a_new_thread(void *arg)
{
    new_thread_lookups *l = arg;
    prepare_and_see(l->k, l->first);
    prepare_and_see(l->k, l->second);
    return NULL;
}

static void test_lookup_paths(void)
{
    jb__test_set_point(JB_TEST_LOOKASIDE_HIT, count_path_hit, (void *)(intptr_t)LOOKASIDE);
    jb__test_set_point(JB_TEST_INDEX_HIT, count_path_hit, (void *)(intptr_t)INDEX);
    jb_custom_kernel *k =
        f32_kernel("paths_lookaside", "out[thread_index()] = inp[thread_index()];");
    int seen[2];
    prepare_and_see(k, seen); /* the build */
    prepare_and_see(k, seen);
    CHECK(seen[LOOKASIDE] == 1 && seen[INDEX] == 0,
          "a thread's second lookup of a key: %d lookaside hits, %d index hits (expected 1, 0): "
          "its first lookup did not fill the lookaside",
          seen[LOOKASIDE], seen[INDEX]);

    /* Another thread: its first lookup finds the built module in the index, its second in its
     * own lookaside. */
    new_thread_lookups other = {k, {-1, -1}, {-1, -1}};
    pthread_t t;
    pthread_create(&t, NULL, lookups_on_a_new_thread, &other);
    pthread_join(t, NULL);
    CHECK(other.first[LOOKASIDE] == 0 && other.first[INDEX] == 1,
          "a new thread's first lookup of a built key: %d lookaside hits, %d index hits "
          "(expected 0, 1)",
          other.first[LOOKASIDE], other.first[INDEX]);
    CHECK(other.second[LOOKASIDE] == 1 && other.second[INDEX] == 0,
          "a new thread's second lookup: %d lookaside hits, %d index hits (expected 1, 0)",
          other.second[LOOKASIDE], other.second[INDEX]);

    /* Switched off, the lookup skips the lookaside and the index, and still hits. */
    int was_enabled = jb_lookaside_enabled();
    CHECK_OK(jb_set_lookaside_enabled(0));
    uint64_t hits = counters_now().hits;
    prepare_and_see(k, seen);
    CHECK(seen[LOOKASIDE] == 0 && seen[INDEX] == 0,
          "with the lookaside switched off, a lookup took %d lookaside hits, %d index hits "
          "(expected 0, 0)",
          seen[LOOKASIDE], seen[INDEX]);
    CHECK(counters_now().hits == hits + 1, "with the lookaside off, the lookup was not a hit");
    CHECK_OK(jb_set_lookaside_enabled(was_enabled));
    jb__test_set_point(JB_TEST_LOOKASIDE_HIT, NULL, NULL);
    jb__test_set_point(JB_TEST_INDEX_HIT, NULL, NULL);
    jb_custom_kernel_free(k);
}

/* ---- a miss, then another thread's build, then the write lock ---- */

/* Holds the first thread that misses `module_name` between its read and its write lock until
 * released; later misses pass. */
typedef struct miss_gate {
    const char *module_name;
    pthread_mutex_t mutex;
    pthread_cond_t changed;
    int misses;
    bool first_waiting, released;
} miss_gate;

static void hold_first_miss(void *ctx, const char *key)
{
    miss_gate *g = ctx;
    if (!strstr(key, g->module_name))
        return;
    pthread_mutex_lock(&g->mutex);
    if (g->misses++ == 0) {
        g->first_waiting = true;
        pthread_cond_broadcast(&g->changed);
        while (!g->released)
            pthread_cond_wait(&g->changed, &g->mutex);
    }
    pthread_mutex_unlock(&g->mutex);
}

typedef struct prepare_arg {
    jb_custom_kernel *k;
    int status;
} prepare_arg;

static void *prepare_on_thread(void *arg)
{
    prepare_arg *p = arg;
    p->status = jb_custom_kernel_prepare(p->k, cpu);
    return NULL;
}

static void test_miss_while_another_thread_builds(void)
{
    jb_custom_kernel *k =
        f32_kernel("paths_second_lookup", "out[thread_index()] = inp[thread_index()] + 1.0f;");
    miss_gate gate = {jb_custom_kernel_module_name(k), PTHREAD_MUTEX_INITIALIZER,
                      PTHREAD_COND_INITIALIZER, 0, false, false};
    jb__test_set_point(JB_TEST_CACHE_MISSED, hold_first_miss, &gate);
    deadline d;
    deadline_start(&d, 60, "a miss held while another thread builds");
    jb_counters before = counters_now();

    prepare_arg first = {k, -1}, second = {k, -1};
    pthread_t first_thread, second_thread;
    pthread_create(&first_thread, NULL, prepare_on_thread, &first);
    pthread_mutex_lock(&gate.mutex);
    while (!gate.first_waiting)
        pthread_cond_wait(&gate.changed, &gate.mutex);
    pthread_mutex_unlock(&gate.mutex);
    /* The first thread has missed and waits outside the lock: the second builds meanwhile. */
    pthread_create(&second_thread, NULL, prepare_on_thread, &second);
    pthread_join(second_thread, NULL);
    pthread_mutex_lock(&gate.mutex);
    gate.released = true;
    pthread_cond_broadcast(&gate.changed);
    pthread_mutex_unlock(&gate.mutex);
    pthread_join(first_thread, NULL);

    jb_counters after = counters_now();
    deadline_end(&d);
    jb__test_set_point(JB_TEST_CACHE_MISSED, NULL, NULL);
    CHECK(first.status == JB_OK && second.status == JB_OK, "prepare: %d, %d", first.status,
          second.status);
    CHECK(gate.misses == 2, "%d misses of the key under the read lock, expected 2", gate.misses);
    CHECK(after.builds - before.builds == 1,
          "two threads that missed one key built it %llu times: the one that missed first did "
          "not look again under the write lock",
          (unsigned long long)(after.builds - before.builds));
    jb_custom_kernel_free(k);
}

/* ---- configure state per device ---- */

typedef struct configure_log {
    atomic_int calls[JB_MAX_DEVICES]; /* by device index */
} configure_log;

/* Counts its calls per device, and picks a block size of its own for each device. */
static int configure_by_device(void *user_data, const jb_device *device, jb_kernel_config *config)
{
    configure_log *log = user_data;
    int index = jb_device_index(device);
    atomic_fetch_add(&log->calls[index], 1);
    config->threads_per_block = 32u * (unsigned)(index + 1);
    return 0;
}

/* Launches `k` on `device` twice: JB_OK with every output element 3. */
static bool launches_right(jb_custom_kernel *k, jb_device *device)
{
    jb_array *x = f32_filled(device, N, 1.0f);
    bool right = x != NULL;
    for (int i = 0; right && i < 2; i++) {
        jb_array *y = NULL;
        right = f32_launch(&y, k, &x, 1, N) == JB_OK && f32_all_equal(y, N, 3.0f);
        jb_array_free(y);
    }
    jb_array_free(x);
    return right;
}

static void test_configure_state_per_device(jb_device *second)
{
    CHECK(jb_device_index(second) != jb_device_index(cpu), "the second cpu shares an index");
    static configure_log log;
    const char *body = "out[thread_index()] = inp[thread_index()] + 2.0f;";
    jb_custom_kernel *k = f32_kernel_configured("paths_configure", body, configure_by_device, &log);
    jb_device *both[] = {cpu, second};
    for (int d = 0; d < 2; d++) {
        int index = jb_device_index(both[d]);
        CHECK(launches_right(k, both[d]), "device %d: a launch failed or was wrong: %s", index,
              jb_last_error_message());
        CHECK(atomic_load(&log.calls[index]) == 1,
              "the configure hook ran %d times on device %d, expected once per device",
              atomic_load(&log.calls[index]), index);
        /* What each launch on the device is given: that device's own hook result. */
        jb_kernel_config config = {0, 0};
        void *fn = NULL;
        CHECK_OK(jb__custom_kernel_prepare(k, both[d], &config, &fn));
        CHECK(config.threads_per_block == 32u * (unsigned)(index + 1),
              "a launch on device %d gets a block size of %u; its hook chose %u", index,
              config.threads_per_block, 32u * (unsigned)(index + 1));
    }
    jb_custom_kernel_free(k);
}

int main(void)
{
    setenv("JITBRIDGE_DISK_CACHE", "0", 1); /* builds are compiles, counted as builds */
    CHECK_OK(jb_device_get(&cpu, JB_DEVICE_CPU, 0));
    if (!cpu)
        return check_summary("test_cache_paths");
    jb_device *second = NULL;
    CHECK_OK(jb__test_second_cpu(&second));
    default_stream_first(cpu);
    if (second)
        default_stream_first(second);
    test_lookup_paths();
    test_miss_while_another_thread_builds();
    if (second)
        test_configure_state_per_device(second);
    return check_summary("test_cache_paths");
}
