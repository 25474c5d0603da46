/*
 * A device's walk over its streams (a trim, or an allocation retried after running out of
 * memory, letting go of finished work's holds) beside threads that create and free streams: the
 * walk's driver calls never hold up another thread's stream creation or destruction, a stream
 * whose last reference is being dropped is never brought back (and destroyed twice), and a walk
 * over more streams than one batch reaches every stream. Built with JB_TEST_HOOKS (the launch's
 * pause point, the last release's pause point, the hold count); runs on the cpu, or on GPU 0
 * with JITBRIDGE_TEST_DEVICE=gpu:
 *   make CUDA=1 build-cuda-hooks/test_stream_walk && JITBRIDGE_TEST_DEVICE=gpu build-cuda-hooks/test_stream_walk
 */
#include "../src/kernels/kernels.h"
#include "helpers.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#ifndef JB_TEST_HOOKS
#error "test_stream_walk needs a JB_TEST_HOOKS build of the library"
#endif

#define N 256
#define BLOCKED_MS 3000 /* how long a stream creation may take before it counts as blocked */

static jb_device *dev;
static jb_custom_kernel *kernel;

/* One launch of `kernel` on the calling thread's current stream; the output is freed at once,
 * so only the launch's hold keeps its buffer. */
static int launch_and_forget(jb_array *in)
{
    jb_array *out = NULL;
    int status = f32_launch(&out, kernel, &in, 1, N);
    jb_array_free(out);
    return status;
}

/* A step another thread takes, and a flag per stage that the main thread waits on. */
typedef struct gate {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    jb_stream *stream; /* the stream whose pause point stops */
    int paused, released, trimmed, created, unlink_calls;
    int thread_failures; /* failed calls on the threads: CHECK's counters are the main thread's */
    jb_array *input;
} gate;

static gate g = {.mutex = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static void set(int *flag)
{
    pthread_mutex_lock(&g.mutex);
    *flag = 1;
    pthread_cond_broadcast(&g.cond);
    pthread_mutex_unlock(&g.mutex);
}

/* Waits at most `ms` for `flag` (0 for ever); whether it was set. */
static bool wait_for(int *flag, int ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (ms % 1000) * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&g.mutex);
    while (!*flag) {
        if (!ms)
            pthread_cond_wait(&g.cond, &g.mutex);
        else if (pthread_cond_timedwait(&g.cond, &g.mutex, &until) == ETIMEDOUT)
            break;
    }
    bool got = *flag;
    pthread_mutex_unlock(&g.mutex);
    return got;
}

/* Stops the first caller for g.stream until the main thread lets it go. */
static void pause_on_stream(void *ctx, jb_stream *stream)
{
    (void)ctx;
    if (stream != g.stream)
        return;
    pthread_mutex_lock(&g.mutex);
    g.unlink_calls++;
    bool first = !g.paused;
    g.paused = 1;
    pthread_cond_broadcast(&g.cond);
    while (first && !g.released)
        pthread_cond_wait(&g.cond, &g.mutex);
    pthread_mutex_unlock(&g.mutex);
}

static void gate_reset(jb_stream *stream)
{
    pthread_mutex_lock(&g.mutex);
    g.stream = stream;
    g.paused = g.released = g.trimmed = g.created = g.unlink_calls = g.thread_failures = 0;
    pthread_mutex_unlock(&g.mutex);
}

/* On a thread the main one started: counts a failed call, for the main thread to CHECK. */
static void thread_ok(int status)
{
    if (status == JB_OK)
        return;
    fprintf(stderr, "a thread's call failed: %s\n", jb_last_error_message());
    pthread_mutex_lock(&g.mutex);
    g.thread_failures++;
    pthread_mutex_unlock(&g.mutex);
}

/* ---- 1. a trim waiting on one stream's holds leaves other threads' streams alone ---- */

static void *launcher(void *arg)
{
    (void)arg;
    thread_ok(jb_install_thread_local_default_stream(g.stream));
    thread_ok(launch_and_forget(g.input)); /* pauses holding the stream's holds mutex */
    thread_ok(jb_uninstall_thread_local_default_stream(g.stream));
    return NULL;
}

static void *trimmer(void *arg)
{
    (void)arg;
    thread_ok(jb_device_trim(NULL, dev));
    set(&g.trimmed);
    return NULL;
}

static void *creator(void *arg)
{
    (void)arg;
    jb_stream *s = NULL;
    thread_ok(jb_stream_new(&s, dev));
    jb_stream_free(s);
    set(&g.created);
    return NULL;
}

/* A launch stops between its record and its hold, holding its stream's holds mutex (as a slow
 * event query does); a trim on another thread waits for that mutex. A third thread's stream
 * creation and destruction must go on meanwhile: a trim that walked the device's streams under
 * streams_mutex held up every stream creation of the process behind one stream's lock. */
static void test_trim_does_not_block_stream_creation(void)
{
    jb_stream *stream;
    CHECK_OK(jb_stream_new(&stream, dev));
    gate_reset(stream);
    jb__test_set_pause(pause_on_stream, NULL);
    pthread_t launching, trimming, creating;
    pthread_create(&launching, NULL, launcher, NULL);
    wait_for(&g.paused, 0);
    pthread_create(&trimming, NULL, trimmer, NULL);
    struct timespec settle = {0, 200 * 1000000L}; /* the trim reaches the paused stream */
    nanosleep(&settle, NULL);
    pthread_create(&creating, NULL, creator, NULL);
    bool created = wait_for(&g.created, BLOCKED_MS);
    bool trimmed_early = wait_for(&g.trimmed, 1);
    CHECK(created, "a stream creation on a third thread blocked for %d ms while a trim waited "
                   "on another stream's holds",
          BLOCKED_MS);
    CHECK(!trimmed_early, "the trim finished while a launch held its stream's holds mutex: the "
                          "test did not set up what it means to");
    set(&g.released);
    pthread_join(launching, NULL);
    pthread_join(trimming, NULL);
    pthread_join(creating, NULL);
    jb__test_set_pause(NULL, NULL);
    CHECK(g.thread_failures == 0, "%d calls failed on the threads", g.thread_failures);
    CHECK_OK(jb_stream_synchronize(stream));
    jb_stream_free(stream);
}

/* ---- 2. a stream whose last reference is going is not brought back by a trim ---- */

static void *freer(void *arg)
{
    jb_stream_free(arg); /* the last reference: pauses before unlinking the stream */
    return NULL;
}

/* A thread drops a stream's last reference and stops before taking streams_mutex to unlink it;
 * a trim then walks the device's streams and finds it still linked, at no reference. Taking a
 * reference there would destroy the stream once at the trim's release and again on the first
 * thread (a use after free: AddressSanitizer or memcheck name it, glibc often aborts). */
static void test_trim_skips_a_dying_stream(void)
{
    jb_stream *stream;
    CHECK_OK(jb_stream_new(&stream, dev));
    CHECK_OK(jb_install_thread_local_default_stream(stream));
    CHECK_OK(launch_and_forget(g.input)); /* a hold for the trim to look at */
    CHECK_OK(jb_uninstall_thread_local_default_stream(stream));
    gate_reset(stream);
    jb__test_set_unlink_pause(pause_on_stream, NULL);
    pthread_t freeing;
    pthread_create(&freeing, NULL, freer, stream);
    wait_for(&g.paused, 0);
    CHECK_OK(jb_device_trim(NULL, dev));
    pthread_mutex_lock(&g.mutex);
    int calls = g.unlink_calls;
    pthread_mutex_unlock(&g.mutex);
    CHECK(calls == 1, "a stream's last reference was dropped %d times: a trim brought back a "
                      "stream being destroyed",
          calls);
    set(&g.released);
    pthread_join(freeing, NULL);
    jb__test_set_unlink_pause(NULL, NULL);
}

/* ---- 3. a walk over more streams than one batch ---- */

/* A trim lets go of the finished holds of every stream, however many: the walk references
 * streams a batch at a time and must go on past each batch to the list's end. */
static void test_trim_reaches_every_stream(void)
{
    enum { STREAMS = 2 * 32 + 5 };
    jb_stream *streams[STREAMS];
    f32_idle_buffers(dev, N, STREAMS); /* else the trim finds nothing held to let go of */
    for (int i = 0; i < STREAMS; i++) {
        CHECK_OK(jb_stream_new(&streams[i], dev));
        CHECK_OK(jb_install_thread_local_default_stream(streams[i]));
        CHECK_OK(launch_and_forget(g.input));
        CHECK_OK(jb_uninstall_thread_local_default_stream(streams[i]));
    }
    int waiting = 0;
    for (int i = 0; i < STREAMS; i++) {
        /* Waits for the work without letting go of its holds: that is the trim's job. */
        CHECK(dev->backend->stream_synchronize(dev, streams[i]->native) == JB_OK,
              "waiting for stream %d", i);
        waiting += jb__test_hold_count(streams[i]) == 1;
    }
    CHECK(waiting == STREAMS, "%d of %d streams hold their launch's buffers before the trim",
          waiting, STREAMS);
    CHECK_OK(jb_device_trim(NULL, dev));
    int held = 0;
    for (int i = 0; i < STREAMS; i++) {
        held += jb__test_hold_count(streams[i]) != 0;
        jb_stream_free(streams[i]);
    }
    CHECK(held == 0, "%d of %d streams kept finished holds after a trim", held, STREAMS);
}

int main(void)
{
    dev = test_device();
    if (!dev)
        return check_summary("test_stream_walk");
    default_stream_first(dev);
    kernel =
        f32_kernel("stream_walk_plus_one", "out[thread_index()] = inp[thread_index()] + 1.0f;");
    CHECK_OK(jb_custom_kernel_prepare(kernel, dev));
    g.input = f32_filled(dev, N, 1.0f);
    CHECK_OK(jb_array_eval(g.input));
    test_trim_does_not_block_stream_creation();
    test_trim_skips_a_dying_stream();
    test_trim_reaches_every_stream();
    jb_array_free(g.input);
    jb_custom_kernel_free(kernel);
    return check_summary("test_stream_walk");
}
