/*
 * ThreadSanitizer stress of the cpu backend (make tsan). With every lock in it must produce no
 * report; built with one lock removed (make tsan REMOVE_LOCK=...) it must produce one.
 *
 * - same key: 8 threads first-launch one new probe variant behind a barrier, per round;
 * - distinct keys: 8 threads first-launch a new variant each while a hitter launches a warm one,
 *   so lookups of missing keys run while other threads insert and the table grows;
 * - event pool: threads create and drop arrays (each takes and returns a pooled event);
 * - configure: 8 threads first-launch one kernel whose configure hook is slow;
 * - allocator: threads allocate and free varying sizes on streams they create and free, without
 *   synchronizing, while one trims, moves the idle cap (0 included) and reads the counters;
 * - events: the distinct-key rounds run with an event callback that reads every field, while
 *   another thread keeps replacing it, and each launcher sets its thread tag.
 */
#include "check.h"
#include "jitbridge.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define THREADS 8
#define ROUNDS 4
#define N 64

static jb_device *cpu;
static pthread_barrier_t barrier;
static atomic_bool hitter_stop;
static atomic_int failures;

static void probe_checked(jb_array *in, int variant)
{
    jb_array *out = NULL;
    float values[N];
    bool ok = jb_jit_race_probe_array(&out, in, variant) == JB_OK &&
              jb_array_read(out, values, sizeof values) == JB_OK;
    for (int i = 0; ok && i < N; i++)
        ok = values[i] == 2.0f * (float)i + 1.0f;
    if (!ok)
        atomic_fetch_add(&failures, 1);
    jb_array_free(out);
}

typedef struct worker {
    int variant;
} worker;

static void *first_launcher(void *p)
{
    worker *w = p;
    jb_stream *stream = NULL;
    jb_array *in = NULL;
    char tag[32];
    snprintf(tag, sizeof tag, "launcher %d", w->variant);
    jb_set_thread_tag(tag);
    jb_stream_new(&stream, cpu);
    jb_install_thread_local_default_stream(stream);
    jb_array_arange(&in, cpu, N, JB_F32);
    pthread_barrier_wait(&barrier);
    probe_checked(in, w->variant);
    jb_array_free(in);
    jb_uninstall_thread_local_default_stream(stream);
    jb_stream_free(stream);
    return NULL;
}

static void *hitter(void *p)
{
    (void)p;
    jb_array *in = NULL;
    jb_array_arange(&in, cpu, N, JB_F32);
    pthread_barrier_wait(&barrier);
    while (!atomic_load(&hitter_stop))
        probe_checked(in, 0);
    jb_array_free(in);
    return NULL;
}

static void round_of(int first_variant, int step, bool with_hitter)
{
    pthread_t threads[THREADS + 1];
    worker workers[THREADS];
    pthread_barrier_init(&barrier, NULL, THREADS + (with_hitter ? 1 : 0));
    atomic_store(&hitter_stop, false);
    if (with_hitter)
        pthread_create(&threads[THREADS], NULL, hitter, NULL);
    for (int t = 0; t < THREADS; t++) {
        workers[t].variant = first_variant + t * step;
        pthread_create(&threads[t], NULL, first_launcher, &workers[t]);
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(threads[t], NULL);
    atomic_store(&hitter_stop, true);
    if (with_hitter)
        pthread_join(threads[THREADS], NULL);
    pthread_barrier_destroy(&barrier);
}

/* Two sinks the swapper alternates between; every event reaches one of them. */
static atomic_long sink_events[2];
static atomic_bool swapper_stop;

static void count_event(void *user_data, const jb_cache_event *e)
{
    size_t bytes = strlen(e->name) + strlen(e->key) + strlen(e->content_key) + strlen(e->tag) +
                   strlen(e->message);
    if (bytes > 0 && e->device == cpu)
        atomic_fetch_add((atomic_long *)user_data, 1);
}

static void *swapper(void *p)
{
    (void)p;
    for (int i = 0; !atomic_load(&swapper_stop); i++) {
        jb_set_event_callback(count_event, &sink_events[i % 2]);
        nanosleep(&(struct timespec){.tv_nsec = 200000}, NULL);
    }
    return NULL;
}

static void *pool_churn(void *p)
{
    (void)p;
    pthread_barrier_wait(&barrier);
    for (int i = 0; i < 200; i++) {
        jb_array *a = NULL, *b = NULL;
        jb_array_arange(&a, cpu, N, JB_F32);
        jb_array_arange(&b, cpu, N, JB_F32);
        jb_array_free(a);
        if (jb_array_eval(b) != JB_OK)
            atomic_fetch_add(&failures, 1);
        jb_array_free(b);
    }
    return NULL;
}

static int slow_configure(void *user_data, const jb_device *device, jb_kernel_config *config)
{
    (void)user_data, (void)device;
    struct timespec wait = {0, 5 * 1000 * 1000};
    nanosleep(&wait, NULL);
    config->threads_per_block = 32;
    return 0;
}

static jb_custom_kernel *configured;

static void *configure_launcher(void *p)
{
    (void)p;
    jb_array *in = NULL, *out = NULL;
    jb_array_arange(&in, cpu, N, JB_F32);
    pthread_barrier_wait(&barrier);
    int64_t n = N;
    const int64_t *shapes[] = {&n};
    int ndims[] = {1};
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, N};
    if (jb_custom_kernel_launch(&out, configured, &in, 1, shapes, ndims, &shape) != JB_OK ||
        jb_array_eval(out) != JB_OK)
        atomic_fetch_add(&failures, 1);
    jb_array_free(in);
    jb_array_free(out);
    return NULL;
}

static atomic_int allocators_left;

static void *allocator(void *p)
{
    unsigned seed = (unsigned)(uintptr_t)p;
    pthread_barrier_wait(&barrier);
    for (int i = 0; i < 60; i++) {
        jb_stream *stream = NULL;
        jb_stream_new(&stream, cpu);
        jb_install_thread_local_default_stream(stream);
        for (int j = 0; j < 4; j++) {
            seed = seed * 1103515245u + 12345u;
            jb_array *a = NULL;
            if (jb_array_arange(&a, cpu, 1 + (int64_t)(seed >> 8) % 70000, JB_F32) != JB_OK)
                atomic_fetch_add(&failures, 1);
            jb_array_free(a);
        }
        jb_uninstall_thread_local_default_stream(stream);
        jb_stream_free(stream);
    }
    atomic_fetch_sub(&allocators_left, 1);
    return NULL;
}

static void *trimmer(void *p)
{
    (void)p;
    pthread_barrier_wait(&barrier);
    for (unsigned i = 0; atomic_load(&allocators_left) > 0; i++) {
        jb_counters c;
        uint64_t freed;
        jb_device_trim(&freed, cpu);
        jb_device_set_idle_cap(cpu, i % 3 == 0 ? 0 : (uint64_t)1 << (16 + i % 8));
        jb_counters_get(&c, sizeof c);
    }
    return NULL;
}

static void allocator_round(void)
{
    pthread_t threads[THREADS];
    uint64_t old_cap = jb_device_idle_cap(cpu);
    jb_counters before, after;
    jb_device_trim(NULL, cpu);
    jb_counters_get(&before, sizeof before);
    atomic_store(&allocators_left, THREADS - 1);
    pthread_barrier_init(&barrier, NULL, THREADS);
    pthread_create(&threads[0], NULL, trimmer, NULL);
    for (int t = 1; t < THREADS; t++)
        pthread_create(&threads[t], NULL, allocator, (void *)(uintptr_t)(t * 7919));
    for (int t = 0; t < THREADS; t++)
        pthread_join(threads[t], NULL);
    pthread_barrier_destroy(&barrier);
    jb_device_set_idle_cap(cpu, old_cap);
    jb_device_trim(NULL, cpu);
    jb_counters_get(&after, sizeof after);
    CHECK(after.mem_live_bytes == before.mem_live_bytes && after.mem_idle_bytes == 0 &&
              after.mem_reserved_bytes == before.mem_reserved_bytes,
          "allocator books: live %llu -> %llu, reserved %llu -> %llu, idle %llu",
          (unsigned long long)before.mem_live_bytes, (unsigned long long)after.mem_live_bytes,
          (unsigned long long)before.mem_reserved_bytes,
          (unsigned long long)after.mem_reserved_bytes, (unsigned long long)after.mem_idle_bytes);
}

static void run_all(void *(*fn)(void *))
{
    pthread_t threads[THREADS];
    pthread_barrier_init(&barrier, NULL, THREADS);
    for (int t = 0; t < THREADS; t++)
        pthread_create(&threads[t], NULL, fn, NULL);
    for (int t = 0; t < THREADS; t++)
        pthread_join(threads[t], NULL);
    pthread_barrier_destroy(&barrier);
}

int main(void)
{
    CHECK_OK(jb_device_get(&cpu, JB_DEVICE_CPU, 0));
    jb_array *warm = NULL;
    CHECK_OK(jb_array_arange(&warm, cpu, N, JB_F32));
    probe_checked(warm, 0);
    jb_array_free(warm);

    for (int round = 0; round < ROUNDS; round++)
        round_of(1000 + round, 0, false);
    jb_counters before, after;
    CHECK_OK(jb_counters_get(&before, sizeof before));
    CHECK_OK(jb_set_event_callback(count_event, &sink_events[1]));
    pthread_t swapping;
    pthread_create(&swapping, NULL, swapper, NULL);
    for (int round = 0; round < ROUNDS; round++)
        round_of(2000 + round * THREADS, 1, true);
    atomic_store(&swapper_stop, true);
    pthread_join(swapping, NULL);
    CHECK_OK(jb_set_event_callback(NULL, NULL));
    CHECK_OK(jb_counters_get(&after, sizeof after));
    long events = atomic_load(&sink_events[0]) + atomic_load(&sink_events[1]);
    CHECK(events == 2 * (long)(after.builds - before.builds),
          "%ld events for %llu builds (a start and an end each)", events,
          (unsigned long long)(after.builds - before.builds));
    run_all(pool_churn);

    const char *in_names[] = {"inp"}, *out_names[] = {"out"};
    jb_dtype dtypes[] = {JB_F32};
    jb_kernel_spec spec = {.struct_size = sizeof(jb_kernel_spec),
                           .name = "tsan_configured",
                           .input_names = in_names,
                           .input_dtypes = dtypes,
                           .num_inputs = 1,
                           .output_names = out_names,
                           .output_dtypes = dtypes,
                           .num_outputs = 1,
                           .body = "out[thread_index()] = inp[thread_index()];",
                           .configure = slow_configure};
    CHECK_OK(jb_custom_kernel_new(&configured, &spec));
    run_all(configure_launcher);
    jb_custom_kernel_free(configured);
    allocator_round();

    CHECK(atomic_load(&failures) == 0, "%d launches failed or were not exact",
          atomic_load(&failures));
    return check_summary("tsan_stress");
}
