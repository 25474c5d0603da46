/*
 * Server threads that go quiet, exit, or hand their stream to helpers. A worker that freed its
 * outputs and stopped launching must not keep their memory (a stream looks at its holds only
 * when it launches again); events pooled after a burst are given back by a trim; a thread's exit
 * does not wait for its queued work, and a thread that only reads results makes no stream; a
 * thread's default stream can be handed to other threads with a reference of their own. Built
 * with JB_TEST_HOOKS (hold counts, a faulting query); runs on the cpu, or on GPU 0 with
 * JITBRIDGE_TEST_DEVICE=gpu:
 *   make CUDA=1 build-cuda-hooks/test_quiet_threads && JITBRIDGE_TEST_DEVICE=gpu build-cuda-hooks/test_quiet_threads
 */
#include "../src/internal.h"
#include "helpers.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#ifndef JB_TEST_HOOKS
#error "test_quiet_threads needs a JB_TEST_HOOKS build of the library"
#endif

static jb_device *dev;
static jb_custom_kernel *touch_one; /* writes element 0 of its output alone: memory stays cheap */

/* A thread's step, and the main thread's signal, under one lock. */
typedef struct crew {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    int quiet;    /* workers done launching */
    bool go_home; /* the workers may exit */
} crew;

static void crew_init(crew *c)
{
    pthread_mutex_init(&c->mutex, NULL);
    pthread_cond_init(&c->cond, NULL);
    c->quiet = 0;
    c->go_home = false;
}

/* A worker reports it went quiet, then stays alive, launching nothing, until sent home. */
static void go_quiet(crew *c)
{
    pthread_mutex_lock(&c->mutex);
    c->quiet++;
    pthread_cond_broadcast(&c->cond);
    while (!c->go_home)
        pthread_cond_wait(&c->cond, &c->mutex);
    pthread_mutex_unlock(&c->mutex);
}

static void wait_until_quiet(crew *c, int workers)
{
    pthread_mutex_lock(&c->mutex);
    while (c->quiet < workers)
        pthread_cond_wait(&c->cond, &c->mutex);
    pthread_mutex_unlock(&c->mutex);
}

static void send_home(crew *c)
{
    pthread_mutex_lock(&c->mutex);
    c->go_home = true;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->mutex);
}

/* An output of `bytes` whose element 0 is input element 0 plus one, on the thread's stream. */
static jb_array *touch(jb_array *input, size_t bytes)
{
    int64_t n = (int64_t)(bytes / sizeof(float));
    const int64_t *shapes[] = {&n};
    int ndims[] = {1};
    jb_launch_shape one = {{0, 0, 0}, {0, 0, 0}, 1};
    jb_array *out = NULL;
    CHECK_OK(jb_custom_kernel_launch(&out, touch_one, &input, 1, shapes, ndims, &one));
    return out;
}

static jb_memory_stats memory(void)
{
    jb_memory_stats stats;
    CHECK_OK(jb_device_memory_stats(&stats, sizeof stats, dev));
    return stats;
}

/* ---- 1. memory freed on streams that went quiet ---- */

#define WORKERS 16
#define OUTPUTS 63 /* fewer than a stream's 64 launches per look, and under its 64 MiB */

typedef struct quiet_worker {
    crew *crew;
    jb_array *input;
    size_t output_bytes;
} quiet_worker;

static void *launch_then_go_quiet(void *arg)
{
    quiet_worker *w = arg;
    for (int i = 0; i < OUTPUTS; i++) {
        jb_array *y = touch(w->input, w->output_bytes);
        CHECK_OK(jb_array_eval(y));
        jb_array_free(y); /* only its stream's hold keeps the buffer now */
    }
    go_quiet(w->crew);
    return NULL;
}

/* WORKERS threads free OUTPUTS outputs each and go quiet (alive, launching nothing). Then this
 * thread keeps as many outputs live at once: reserved memory must stay within 5/4 of the most
 * bytes ever live, the quiet streams' finished work letting go of what their owners freed. */
static void test_quiet_streams_do_not_keep_freed_memory(void)
{
    /* 1 MiB outputs, as a server's activations; smaller under valgrind, which shadows them. */
    size_t output_bytes = getenv("JB_TEST_UNDER_VALGRIND") ? 64 << 10 : 1 << 20;
    CHECK_OK(jb_device_trim(NULL, dev));
    uint64_t reserved_before = memory().reserved_bytes;
    jb_array *input = f32_filled(dev, 1, 1.0f);
    CHECK_OK(jb_array_eval(input));
    crew c;
    crew_init(&c);
    quiet_worker w = {&c, input, output_bytes};
    pthread_t workers[WORKERS];
    for (int i = 0; i < WORKERS; i++)
        pthread_create(&workers[i], NULL, launch_then_go_quiet, &w);
    wait_until_quiet(&c, WORKERS);

    enum { LIVE = WORKERS * OUTPUTS };
    jb_array **live = calloc(LIVE, sizeof *live);
    for (int i = 0; i < LIVE; i++)
        live[i] = touch(input, output_bytes);
    CHECK_OK(jb_array_eval(live[LIVE - 1]));
    jb_memory_stats stats = memory();
    double peak = (double)LIVE * (double)output_bytes + 4096; /* the outputs and the input */
    double reserved = (double)(stats.reserved_bytes - reserved_before);
    CHECK(reserved <= 1.25 * peak,
          "%.0f MiB reserved for at most %.0f MiB live (%.2fx): quiet streams keep %.0f MiB their "
          "owners freed",
          reserved / (1 << 20), peak / (1 << 20), reserved / peak,
          ((double)stats.live_bytes - peak) / (1 << 20));
    printf("  %d quiet workers: %.0f MiB reserved for %.0f MiB live (%.2fx)\n", WORKERS,
           reserved / (1 << 20), peak / (1 << 20), reserved / peak);
    float *host = malloc(output_bytes);
    CHECK_OK(jb_array_read(live[LIVE - 1], host, output_bytes));
    CHECK(host[0] == 2.0f, "an output holds %g, not 2", host[0]);
    free(host);
    for (int i = 0; i < LIVE; i++)
        jb_array_free(live[i]);
    free(live);
    send_home(&c);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(workers[i], NULL);
    jb_array_free(input);
}

/* ---- 2. events pooled after a burst ---- */

#define BURST 300 /* outputs each worker keeps live at once: as many events */
/* Events a trim may leave: the pool's few, and those of arrays still live. */
#define EVENTS_AFTER_TRIM 64

static void *burst_then_go_quiet(void *arg)
{
    quiet_worker *w = arg;
    jb_array *outputs[BURST];
    for (int i = 0; i < BURST; i++)
        outputs[i] = touch(w->input, w->output_bytes);
    CHECK_OK(jb_array_eval(outputs[BURST - 1]));
    for (int i = 0; i < BURST; i++)
        jb_array_free(outputs[i]);
    go_quiet(w->crew);
    /* Sent home: its stream launches again after the trim took its spare events. */
    jb_array *y = touch(w->input, w->output_bytes);
    float *host = malloc(w->output_bytes);
    CHECK_OK(jb_array_read(y, host, w->output_bytes));
    CHECK(host[0] == 2.0f, "a launch after the trim wrote %g, not 2", host[0]);
    free(host);
    jb_array_free(y);
    return NULL;
}

static size_t events_alive(void)
{
    return atomic_load(&dev->event_pool.alive);
}

/* WORKERS threads each keep BURST outputs live at once (an event each), free them and go quiet:
 * a trim then leaves the device a few events, wherever the burst's went (the pool, the quiet
 * streams' spares), instead of keeping every one for the life of the process. */
static void test_trim_gives_back_a_bursts_events(void)
{
    jb_array *input = f32_filled(dev, 1, 1.0f);
    CHECK_OK(jb_array_eval(input));
    crew c;
    crew_init(&c);
    quiet_worker w = {&c, input, 1024};
    pthread_t workers[WORKERS];
    for (int i = 0; i < WORKERS; i++)
        pthread_create(&workers[i], NULL, burst_then_go_quiet, &w);
    wait_until_quiet(&c, WORKERS);
    size_t after_burst = events_alive();
    CHECK_OK(jb_device_trim(NULL, dev));
    size_t after_trim = events_alive();
    printf("  %d workers' bursts of %d: %zu events, %zu after a trim\n", WORKERS, BURST,
           after_burst, after_trim);
    CHECK(after_trim <= EVENTS_AFTER_TRIM,
          "%zu events after a trim (%zu after %d threads' bursts of %d, the threads quiet): "
          "pooled and cached events are kept for ever",
          after_trim, after_burst, WORKERS, BURST);
    send_home(&c);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(workers[i], NULL);
    jb_array_free(input);
}

int main(void)
{
    dev = test_device();
    if (!dev)
        return check_summary("test_quiet_threads");
    default_stream_first(dev);
    touch_one = f32_kernel("quiet_touch_one", "out[0] = inp[0] + 1.0f;");
    CHECK_OK(jb_custom_kernel_prepare(touch_one, dev));
    test_quiet_streams_do_not_keep_freed_memory();
    test_trim_gives_back_a_bursts_events();
    jb_custom_kernel_free(touch_one);
    return check_summary("test_quiet_threads");
}
