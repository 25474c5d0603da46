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
#include "../src/kernels/kernels.h"
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

/* ---- 3. a thread's default stream handed to helpers ---- */

#define HELPERS 4
#define HANDED_N 4096

typedef struct handoff {
    jb_stream *stream; /* the exited thread's default, retained */
    jb_array *made;    /* made on it before the thread exited */
    jb_custom_kernel *plus_one;
} handoff;

static void *retain_default_and_exit(void *arg)
{
    handoff *h = arg;
    jb_stream *borrowed = NULL;
    CHECK_OK(jb_thread_local_default_stream_retain(&h->stream, dev));
    CHECK_OK(jb_thread_local_default_stream(&borrowed, dev));
    CHECK(borrowed == h->stream, "the retained stream is not the thread's default");
    h->made = f32_filled(dev, HANDED_N, 3.0f); /* queued on that stream */
    return NULL;
}

static void *launch_on_handed(void *arg)
{
    handoff *h = arg;
    int64_t n = HANDED_N;
    const int64_t *shapes[] = {&n};
    int ndims[] = {1};
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, (uint64_t)n};
    for (int i = 0; i < 8; i++) {
        jb_array *y = NULL;
        CHECK_OK(jb_custom_kernel_launch_on(&y, h->plus_one, h->stream, &h->made, 1, NULL, 0,
                                            shapes, ndims, &shape));
        CHECK(f32_all_equal(y, n, 4.0f), "a helper's launch on the handed stream");
        jb_array_free(y);
    }
    return NULL;
}

/* A thread retains its default stream, queues work on it and exits; helper threads then launch
 * on it, the stream alive through their reference (a borrowed one died with the thread: a use
 * after free). The last jb_stream_free destroys it. */
static void test_default_stream_handed_to_helpers(void)
{
    handoff h = {NULL, NULL,
                 f32_kernel("quiet_plus_one", "out[thread_index()] = inp[thread_index()] + 1.0f;")};
    pthread_t owner, helpers[HELPERS];
    pthread_create(&owner, NULL, retain_default_and_exit, &h);
    pthread_join(owner, NULL);
    for (int i = 0; i < HELPERS; i++)
        pthread_create(&helpers[i], NULL, launch_on_handed, &h);
    for (int i = 0; i < HELPERS; i++)
        pthread_join(helpers[i], NULL);
    CHECK(f32_all_equal(h.made, HANDED_N, 3.0f), "the exited thread's array");
    jb_array_free(h.made);
    jb_stream_free(h.stream);
    jb_custom_kernel_free(h.plus_one);
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
    test_default_stream_handed_to_helpers();
    jb_custom_kernel_free(touch_one);
    return check_summary("test_quiet_threads");
}
