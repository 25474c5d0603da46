/*
 * What a server does that the other tests do not (issue 12): several threads sharing one
 * installed stream, a stream freed on one thread while another still has it installed, an event
 * query that fails, and two kernels with one source and different configure hooks. Built with
 * JB_TEST_HOOKS (a test-only pause point between a launch's event and its hold, and a faulting
 * event query); runs on the cpu, or on GPU 0 with JITBRIDGE_TEST_DEVICE=gpu:
 *   make CUDA=1 build-cuda-hooks/test_server && JITBRIDGE_TEST_DEVICE=gpu build-cuda-hooks/test_server
 */
#include "../src/kernels/kernels.h"
#include "helpers.h"

#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#ifndef JB_TEST_HOOKS
#error "test_server needs a JB_TEST_HOOKS build of the library"
#endif

#define N 1024          /* elements of the slow kernel's output */
#define FAST_N 16       /* elements of the fast kernel's arrays: another buffer size class */
#define PAUSE_MS 500    /* how long the first launch waits, paused, for the second */

static jb_device *dev;
static jb_custom_kernel *fast, *slow;

/* ---- 1. one stream, two threads: the first launch pauses between its event and its hold ---- */

typedef struct share {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    jb_stream *stream;
    jb_array *fast_in, *slow_in;
    int first_paused, second_done;
    jb_array *fast_out;
} share;

/* The first launch to get here waits (at most PAUSE_MS) for the second thread's whole launch. */
static void pause_first(void *ctx, jb_stream *stream)
{
    share *sh = ctx;
    if (stream != sh->stream)
        return;
    pthread_mutex_lock(&sh->mutex);
    if (!sh->first_paused) {
        sh->first_paused = 1;
        pthread_cond_broadcast(&sh->cond);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += PAUSE_MS * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        /* A fixed library keeps the second launch out while this one is between its record and
         * its hold: the wait then times out, and that is the point. */
        while (!sh->second_done &&
               pthread_cond_timedwait(&sh->cond, &sh->mutex, &until) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&sh->mutex);
}

static void *first_thread(void *arg)
{
    share *sh = arg;
    CHECK_OK(jb_install_thread_local_default_stream(sh->stream));
    jb_array *out[1] = {NULL};
    CHECK_OK(f32_launch(out, fast, &sh->fast_in, 1, FAST_N));
    sh->fast_out = out[0];
    CHECK_OK(jb_uninstall_thread_local_default_stream(sh->stream));
    return NULL;
}

static void *second_thread(void *arg)
{
    share *sh = arg;
    pthread_mutex_lock(&sh->mutex);
    while (!sh->first_paused)
        pthread_cond_wait(&sh->cond, &sh->mutex);
    pthread_mutex_unlock(&sh->mutex);
    CHECK_OK(jb_install_thread_local_default_stream(sh->stream));
    jb_array *out[1] = {NULL};
    CHECK_OK(f32_launch(out, slow, &sh->slow_in, 1, N));
    jb_array_free(out[0]); /* fire and forget: only the launch's hold keeps its buffer now */
    CHECK_OK(jb_uninstall_thread_local_default_stream(sh->stream));
    pthread_mutex_lock(&sh->mutex);
    sh->second_done = 1;
    pthread_cond_broadcast(&sh->cond);
    pthread_mutex_unlock(&sh->mutex);
    return NULL;
}

/* Arrays made on a thread of their own, on its own stream: they run beside the shared one. */
typedef struct fresh {
    jb_array *arrays[4];
} fresh;

static void *make_fresh(void *arg)
{
    fresh *f = arg;
    for (int i = 0; i < 4; i++) {
        f->arrays[i] = f32_filled(dev, N, 1.0f);
        CHECK_OK(jb_array_eval(f->arrays[i]));
    }
    return NULL;
}

/* `eager`: the stream records each event at once, as after a late read. A lazy event is recorded
 * only after its hold is in, so there the two steps apart do no harm; a record at once is made
 * before the hold, and another thread's hold between them breaks the ring's order. */
static void test_shared_stream(int slow_iterations, bool eager)
{
    share sh = {.first_paused = 0};
    pthread_mutex_init(&sh.mutex, NULL);
    pthread_cond_init(&sh.cond, NULL);
    CHECK_OK(jb_stream_new(&sh.stream, dev));
    if (eager)
        sh.stream->eager_until_seq = UINT64_MAX;
    sh.fast_in = f32_filled(dev, FAST_N, 3.0f);
    sh.slow_in = f32_filled(dev, 1, (float)slow_iterations);
    CHECK_OK(jb_array_eval(sh.fast_in));
    CHECK_OK(jb_array_eval(sh.slow_in));

    jb__test_set_pause(pause_first, &sh);
    pthread_t t1, t2;
    pthread_create(&t1, NULL, first_thread, &sh);
    pthread_create(&t2, NULL, second_thread, &sh);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    jb__test_set_pause(NULL, NULL);

    /* The fast kernel is done; the slow one, queued after it, still runs. Its output buffer must
     * still be held, so arrays made now cannot be given that buffer. */
    CHECK_OK(jb_array_eval(sh.fast_out));
    jb__stream_release_holds(sh.stream, false);
    fresh f;
    pthread_t maker;
    pthread_create(&maker, NULL, make_fresh, &f);
    pthread_join(maker, NULL);
    CHECK_OK(jb_stream_synchronize(sh.stream)); /* the slow kernel has written its output */
    int changed = 0;
    for (int i = 0; i < 4; i++) {
        float values[N];
        CHECK_OK(jb_array_read(f.arrays[i], values, sizeof values));
        for (int j = 0; j < N; j++)
            changed += values[j] != 1.0f;
        jb_array_free(f.arrays[i]);
    }
    CHECK(changed == 0, "%d elements of arrays made from host data (all 1.0) were overwritten "
                        "by a kernel whose buffer was released while it ran", changed);
    float fast_values[FAST_N];
    CHECK_OK(jb_array_read(sh.fast_out, fast_values, sizeof fast_values));
    CHECK(fast_values[0] == 7.0f, "fast kernel: %g, expected 7", fast_values[0]);

    jb_array_free(sh.fast_out);
    jb_array_free(sh.fast_in);
    jb_array_free(sh.slow_in);
    jb_stream_free(sh.stream);
    pthread_mutex_destroy(&sh.mutex);
    pthread_cond_destroy(&sh.cond);
}

/* ---- 2. a stream freed by its owner while another thread has it installed ---- */

typedef struct installed {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    jb_stream *stream;
    jb_array *in;
    int ready, freed, uninstall;
} installed;

static void *launch_on_installed(void *arg)
{
    installed *st = arg;
    CHECK_OK(jb_install_thread_local_default_stream(st->stream));
    pthread_mutex_lock(&st->mutex);
    st->ready = 1;
    pthread_cond_broadcast(&st->cond);
    while (!st->freed)
        pthread_cond_wait(&st->cond, &st->mutex);
    pthread_mutex_unlock(&st->mutex);
    /* The owner has freed the stream; it is still this thread's default, and must still work. */
    for (int i = 0; i < 40; i++) {
        jb_array *out[1] = {NULL};
        CHECK_OK(f32_launch(out, fast, &st->in, 1, FAST_N));
        float values[FAST_N] = {0};
        CHECK_OK(jb_array_read(out[0], values, sizeof values));
        CHECK(values[FAST_N - 1] == 7.0f, "launch %d on a stream freed elsewhere: %g", i,
              values[FAST_N - 1]);
        jb_array_free(out[0]);
    }
    if (st->uninstall) /* else the thread's exit lets go of it */
        CHECK_OK(jb_uninstall_thread_local_default_stream(st->stream));
    return NULL;
}

static void test_free_while_installed_elsewhere(int uninstall)
{
    installed st = {.uninstall = uninstall};
    pthread_mutex_init(&st.mutex, NULL);
    pthread_cond_init(&st.cond, NULL);
    st.in = f32_filled(dev, FAST_N, 3.0f);
    CHECK_OK(jb_array_eval(st.in));
    CHECK_OK(jb_stream_new(&st.stream, dev));
    pthread_t t;
    pthread_create(&t, NULL, launch_on_installed, &st);
    pthread_mutex_lock(&st.mutex);
    while (!st.ready)
        pthread_cond_wait(&st.cond, &st.mutex);
    pthread_mutex_unlock(&st.mutex);
    jb_stream_free(st.stream); /* the owner is done with it (a Rust Stream dropped) */
    pthread_mutex_lock(&st.mutex);
    st.freed = 1;
    pthread_cond_broadcast(&st.cond);
    pthread_mutex_unlock(&st.mutex);
    pthread_join(t, NULL);
    jb_array_free(st.in);
    pthread_mutex_destroy(&st.mutex);
    pthread_cond_destroy(&st.cond);
}

/* ---- 3. an event query that fails (a faulted device) is not "done" ---- */

static void test_failed_event_query(void)
{
    jb_stream *stream;
    CHECK_OK(jb_stream_new(&stream, dev));
    jb_array *in = f32_filled(dev, FAST_N, 3.0f);
    CHECK_OK(jb_array_eval(in));
    CHECK_OK(jb_install_thread_local_default_stream(stream));
    jb__test_set_query_fault(true);
    int launched = 2 * JB_HOLDS_PER_LOOK + JB_HOLDS_PER_LOOK / 2, errors = 0;
    for (int i = 0; i < launched; i++) {
        jb_array *out[1] = {NULL};
        int status = f32_launch(out, fast, &in, 1, FAST_N);
        if (status != JB_OK) {
            errors++;
            CHECK(status == JB_ERR_BACKEND && strstr(jb_last_error_message(), "event query"),
                  "launch %d: status %d, message: %s", i, status, jb_last_error_message());
            CHECK(out[0] == NULL, "a failed launch handed out an array");
        }
        jb_array_free(out[0]); /* only the launch's hold keeps its buffers now */
    }
    /* Holds are looked at every JB_HOLDS_PER_LOOK launches: each look met the fault, said so. */
    CHECK(errors == launched / JB_HOLDS_PER_LOOK,
          "%d launches reported the failed event query, expected %d", errors,
          launched / JB_HOLDS_PER_LOOK);
    CHECK(jb__test_hold_count(stream) == (size_t)launched,
          "%zu of %d holds kept after failed event queries", jb__test_hold_count(stream),
          launched);
    jb__test_set_query_fault(false);
    CHECK_OK(jb_stream_synchronize(stream)); /* a real wait, then they may go */
    CHECK(jb__test_hold_count(stream) == 0, "%zu holds after a synchronize",
          jb__test_hold_count(stream));
    CHECK_OK(jb_uninstall_thread_local_default_stream(stream));
    jb_stream_free(stream);
    jb_array_free(in);
}

/* ---- 4. one source, two kernels, two configure hooks: each hook runs, each result is used ---- */

typedef struct hook_record {
    atomic_int calls;
    unsigned threads_per_block;
} hook_record;

static int record_hook(void *user_data, const jb_device *device, jb_kernel_config *config)
{
    (void)device;
    hook_record *r = user_data;
    atomic_fetch_add(&r->calls, 1);
    config->threads_per_block = r->threads_per_block;
    return 0;
}

static void test_configure_per_kernel(void)
{
    /* 64 threads a block fits a launch; 2048 does not, which the launch must then say. */
    hook_record small = {0, 64}, large = {0, 2048};
    const char *body = "out[thread_index()] = inp[thread_index()] + 5.0f;";
    jb_custom_kernel *a = f32_kernel_configured("server_configured", body, record_hook, &small);
    jb_custom_kernel *b = f32_kernel_configured("server_configured", body, record_hook, &large);
    CHECK(strcmp(jb_custom_kernel_module_name(a), jb_custom_kernel_module_name(b)) == 0,
          "one source should be one module: %s, %s", jb_custom_kernel_module_name(a),
          jb_custom_kernel_module_name(b));
    jb_array *in = f32_filled(dev, 4096, 1.0f);
    for (int round = 0; round < 2; round++) {
        jb_array *out[1] = {NULL};
        CHECK_OK(f32_launch(out, a, &in, 1, 4096));
        float values[4096];
        CHECK_OK(jb_array_read(out[0], values, sizeof values));
        CHECK(values[4095] == 6.0f, "kernel a: %g", values[4095]);
        jb_array_free(out[0]);
        out[0] = NULL;
        int status = f32_launch(out, b, &in, 1, 4096);
        CHECK(status == JB_ERR_INVALID_ARGUMENT && strstr(jb_last_error_message(), "fit"),
              "kernel b ran with 2048 threads a block from its own hook? status %d: %s", status,
              jb_last_error_message());
        jb_array_free(out[0]);
    }
    CHECK(atomic_load(&small.calls) == 1, "hook a ran %d times", atomic_load(&small.calls));
    CHECK(atomic_load(&large.calls) == 1, "hook b ran %d times (the module's other kernel "
          "configured it?)", atomic_load(&large.calls));
    jb_array_free(in);
    jb_custom_kernel_free(a);
    jb_custom_kernel_free(b);
}

/* ---- 5. the disk cache's state string stays this thread's while another thread changes it ---- */

static void *turn_disk_cache_off(void *arg)
{
    (void)arg;
    jb__disk_turn_off("off: %s", "turned off by test_server's other thread");
    return NULL;
}

static void test_disk_state_is_the_callers(void)
{
    const char *state = jb_disk_cache_state();
    char before[512];
    snprintf(before, sizeof before, "%s", state);
    pthread_t t;
    pthread_create(&t, NULL, turn_disk_cache_off, NULL);
    pthread_join(t, NULL);
    CHECK(strcmp(state, before) == 0,
          "the string jb_disk_cache_state returned changed under this thread: \"%s\" became "
          "\"%s\"", before, state);
    CHECK(strstr(jb_disk_cache_state(), "test_server's other thread"),
          "a new call sees the new state: %s", jb_disk_cache_state());
}

int main(void)
{
    dev = test_device();
    if (!dev)
        return check_summary("test_server");
    bool cpu = jb_device_get_kind(dev) == JB_DEVICE_CPU;
    fast = f32_kernel("server_fast", "out[thread_index()] = inp[thread_index()] * 2.0f + 1.0f;");
    /* Long enough (tens of milliseconds) to still run while the test looks at its buffer. */
    slow = f32_kernel("server_slow", "float acc = 0.0f;\n"
                                     "for (int j = 0; j < (int)inp[0]; j++) acc += 1.0f;\n"
                                     "out[thread_index()] = acc;");
    CHECK_OK(jb_custom_kernel_prepare(fast, dev));
    CHECK_OK(jb_custom_kernel_prepare(slow, dev));

    for (int round = 0; round < 2; round++) {
        test_shared_stream(cpu ? 40000 : 4000000, false);
        test_shared_stream(cpu ? 40000 : 4000000, true);
    }
    test_free_while_installed_elsewhere(1);
    test_free_while_installed_elsewhere(0);
    test_failed_event_query();
    test_configure_per_kernel();
    test_disk_state_is_the_callers(); /* last: it turns the disk cache off */

    jb_custom_kernel_free(fast);
    jb_custom_kernel_free(slow);
    return check_summary("test_server");
}
