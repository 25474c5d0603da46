/*
 * A stream's holds (holds.c), and the array records a thread keeps for reuse (array.c): the buffers queued work uses stay alive until that work is done,
 * whoever frees their arrays, and finished work lets go of them soon. Built with JB_TEST_HOOKS
 * (the hold count); runs on the cpu, or on GPU 0 with JITBRIDGE_TEST_DEVICE=gpu:
 *   make CUDA=1 build-cuda-hooks/test_holds && JITBRIDGE_TEST_DEVICE=gpu build-cuda-hooks/test_holds
 */
#include "../src/kernels/kernels.h"
#include "helpers.h"

#include <pthread.h>
#include <sched.h>
#include <string.h>

#ifndef JB_TEST_HOOKS
#error "test_holds needs a JB_TEST_HOOKS build of the library"
#endif

static jb_device *dev;

/* Outputs of 16 MiB: the stream looks at its holds once they keep 64 MiB, long before
 * JB_HOLDS_PER_LOOK launches, so finished work does not keep gigabytes from reuse. */
static void test_big_holds_are_looked_at_soon(void)
{
    const int64_t small = 16, big = (16 << 20) / 4;
    jb_custom_kernel *k = f32_kernel("holds_spread", "out[thread_index()] = inp[0] + 1.0f;");
    jb_stream *stream;
    CHECK_OK(jb_stream_new(&stream, dev));
    CHECK_OK(jb_install_thread_local_default_stream(stream));
    jb_array *x = f32_filled(dev, small, 2.0f);
    CHECK_OK(jb_stream_synchronize(stream));
    for (int i = 0; i < 4; i++) {
        jb_array *y = NULL;
        CHECK_OK(f32_launch(&y, k, &x, 1, big));
        CHECK_OK(jb_array_eval(y)); /* done: its hold may go at the next look */
        jb_array_free(y);
    }
    /* The fourth launch's look found the first three done; only its own may still run. */
    size_t held = jb__test_hold_count(stream);
    CHECK(held <= 1, "%zu holds of finished 16 MiB launches kept after 64 MiB", held);
    CHECK_OK(jb_stream_synchronize(stream));
    CHECK(jb__test_hold_count(stream) == 0, "holds after a synchronize");
    CHECK_OK(jb_uninstall_thread_local_default_stream(stream));
    jb_stream_free(stream);
    jb_array_free(x);
    jb_custom_kernel_free(k);
}

/* A kernel of seven arrays: its hold keeps its buffers off the stack of inline slots; every
 * input freed at once after the launch still reaches the kernel intact. */
static void test_hold_of_many_buffers(void)
{
    enum { INPUTS = 6, ROUNDS = 3 * JB_HOLDS_PER_LOOK };
    const int64_t n = 4096;
    const char *in[INPUTS] = {"a", "b", "c", "d", "e", "f"}, *out[] = {"sum"};
    jb_dtype f32[INPUTS] = {JB_F32, JB_F32, JB_F32, JB_F32, JB_F32, JB_F32};
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    spec.name = "holds_sum6";
    spec.input_names = in, spec.input_dtypes = f32, spec.num_inputs = INPUTS;
    spec.output_names = out, spec.output_dtypes = f32, spec.num_outputs = 1;
    spec.body = "const uint64_t i = thread_index();\n"
                "sum[i] = a[i] + b[i] + c[i] + d[i] + e[i] + f[i];";
    jb_custom_kernel *k = NULL;
    CHECK_OK(jb_custom_kernel_new(&k, &spec));
    int exact = 0;
    for (int round = 0; round < ROUNDS; round++) {
        jb_array *inputs[INPUTS];
        for (int i = 0; i < INPUTS; i++)
            inputs[i] = f32_filled(dev, n, (float)(round % 7 + i));
        jb_array *sum = NULL;
        CHECK_OK(f32_launch(&sum, k, inputs, INPUTS, n));
        for (int i = 0; i < INPUTS; i++)
            jb_array_free(inputs[i]); /* only the hold keeps them now */
        /* New arrays that would take a freed input's buffer if the hold let go early. */
        jb_array *decoys[INPUTS];
        for (int i = 0; i < INPUTS; i++)
            decoys[i] = f32_filled(dev, n, -1000.0f);
        exact += sum && f32_all_equal(sum, n, (float)(6 * (round % 7) + 15));
        for (int i = 0; i < INPUTS; i++)
            jb_array_free(decoys[i]);
        jb_array_free(sum);
    }
    CHECK(exact == ROUNDS, "%d of %d sums exact", exact, ROUNDS);
    jb_custom_kernel_free(k);
}

/* A device trim (like a refused allocation) lets go of every finished hold: a look on the launch
 * path may leave the newest finished ones for the next look, a trim must not, or the memory a
 * server asks back stays held by work that ended long ago. The first look is made to see nothing
 * (a failed query), as a look that finds work still running does. */
static void test_trim_lets_go_of_every_finished_hold(void)
{
    const int64_t n = (1 << 20) / 4;
    jb_custom_kernel *k = f32_kernel("holds_trim", "out[thread_index()] = inp[0] * 2.0f;");
    jb_stream *stream;
    CHECK_OK(jb_stream_new(&stream, dev));
    CHECK_OK(jb_install_thread_local_default_stream(stream));
    jb_array *x = f32_filled(dev, 1, 3.0f);
    f32_idle_buffers(dev, n, 6); /* else the trims find nothing held to let go of */
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 3; i++) {
            jb_array *y = NULL;
            CHECK_OK(f32_launch(&y, k, &x, 1, n));
            CHECK_OK(jb_array_eval(y));
            jb_array_free(y);
        }
        if (round == 0) {
            /* An idle stream too: its query fails like any other on a faulted device. */
            while (dev->backend->stream_query(dev, stream->native) != 1)
                sched_yield();
            jb__test_set_query_fault(true);
            CHECK_OK(jb_device_trim(NULL, dev));
            jb__test_set_query_fault(false);
            CHECK(jb__test_hold_count(stream) == 3, "a failed look let go of holds");
        }
    }
    CHECK_OK(jb_device_trim(NULL, dev));
    size_t held = jb__test_hold_count(stream);
    CHECK(held == 0, "%zu holds of finished launches kept after a device trim", held);
    jb_memory_stats stats;
    CHECK_OK(jb_device_memory_stats(&stats, sizeof stats, dev));
    CHECK(stats.live_bytes == 4, "%llu bytes live after a trim, the input's 4 alone in use",
          (unsigned long long)stats.live_bytes);
    CHECK_OK(jb_uninstall_thread_local_default_stream(stream));
    jb_stream_free(stream);
    jb_array_free(x);
    jb_custom_kernel_free(k);
}

/* A kernel's weights (an input of 64 MiB, launched again and again) count toward a look once:
 * a look costs a driver call, and memory the caller still owns is not kept by finished work. */
static void test_weights_count_once(void)
{
    const int64_t big = (64 << 20) / 4, small = 16;
    jb_custom_kernel *k =
        f32_kernel("holds_weights", "out[thread_index()] = inp[thread_index()] + 1.0f;");
    jb_stream *stream;
    CHECK_OK(jb_stream_new(&stream, dev));
    CHECK_OK(jb_install_thread_local_default_stream(stream));
    jb_array *w = f32_filled(dev, big, 2.0f);
    /* Else the count below would not tell whether a look ran. */
    f32_idle_buffers(dev, small, JB_HOLDS_PER_LOOK);
    int exact = 0;
    for (int i = 0; i < JB_HOLDS_PER_LOOK / 2; i++) {
        jb_array *y = NULL;
        CHECK_OK(f32_launch(&y, k, &w, 1, small));
        exact += f32_all_equal(y, small, 3.0f);
        jb_array_free(y);
    }
    CHECK(exact == JB_HOLDS_PER_LOOK / 2, "%d of %d outputs exact", exact, JB_HOLDS_PER_LOOK / 2);
    size_t held = jb__test_hold_count(stream);
    CHECK(held == JB_HOLDS_PER_LOOK / 2,
          "%zu holds after %d launches on the same 64 MiB input: a look at every launch", held,
          JB_HOLDS_PER_LOOK / 2);
    CHECK_OK(jb_stream_synchronize(stream));
    CHECK_OK(jb_uninstall_thread_local_default_stream(stream));
    jb_stream_free(stream);
    jb_array_free(w);
    jb_custom_kernel_free(k);
}

/* ---- jb_stream_synchronize while another thread launches on the stream ---- */

typedef struct sync_race {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    jb_stream *stream;
    int paused, launched;
} sync_race;

/* The synchronize waits, past its wait for the stream, until the other thread has launched. */
static void pause_sync(void *ctx, jb_stream *stream)
{
    sync_race *r = ctx;
    if (stream != r->stream)
        return;
    pthread_mutex_lock(&r->mutex);
    r->paused = 1;
    pthread_cond_broadcast(&r->cond);
    while (!r->launched)
        pthread_cond_wait(&r->cond, &r->mutex);
    pthread_mutex_unlock(&r->mutex);
}

static void *synchronize_shared(void *arg)
{
    sync_race *r = arg;
    CHECK_OK(jb_stream_synchronize(r->stream));
    return NULL;
}

/* A synchronize of a shared stream lets go of the holds of the work it waited for, never of a
 * launch another thread queued after its wait: that launch's output, freed by its caller, would
 * go to a new array while the kernel still runs, and the kernel would overwrite it. */
static void test_synchronize_beside_a_launch(int iterations)
{
    enum { N = 1024 };
    jb_custom_kernel *slow = f32_kernel("holds_slow",
                                        "float acc = 0.0f;\n"
                                        "for (int j = 0; j < (int)inp[0]; j++) acc += 1.0f;\n"
                                        "out[thread_index()] = acc;");
    CHECK_OK(jb_custom_kernel_prepare(slow, dev));
    sync_race r = {.paused = 0};
    pthread_mutex_init(&r.mutex, NULL);
    pthread_cond_init(&r.cond, NULL);
    CHECK_OK(jb_stream_new(&r.stream, dev));
    jb_array *count = f32_filled(dev, 1, (float)iterations);
    CHECK_OK(jb_array_eval(count));

    jb__test_set_sync_pause(pause_sync, &r);
    pthread_t syncer;
    pthread_create(&syncer, NULL, synchronize_shared, &r);
    pthread_mutex_lock(&r.mutex);
    while (!r.paused)
        pthread_cond_wait(&r.cond, &r.mutex);
    pthread_mutex_unlock(&r.mutex);
    CHECK_OK(jb_install_thread_local_default_stream(r.stream));
    jb_array *y = NULL;
    CHECK_OK(f32_launch(&y, slow, &count, 1, N));
    jb_array_free(y); /* fire and forget: only the launch's hold keeps its buffer now */
    CHECK_OK(jb_uninstall_thread_local_default_stream(r.stream));
    pthread_mutex_lock(&r.mutex);
    r.launched = 1;
    pthread_cond_broadcast(&r.cond);
    pthread_mutex_unlock(&r.mutex);
    pthread_join(syncer, NULL);
    jb__test_set_sync_pause(NULL, NULL);

    jb_array *decoys[4];
    for (int i = 0; i < 4; i++) {
        decoys[i] = f32_filled(dev, N, 1.0f);
        CHECK_OK(jb_array_eval(decoys[i]));
    }
    CHECK_OK(jb_stream_synchronize(r.stream)); /* the slow kernel has written its output */
    int intact = 0;
    for (int i = 0; i < 4; i++) {
        intact += f32_all_equal(decoys[i], N, 1.0f);
        jb_array_free(decoys[i]);
    }
    CHECK(intact == 4, "%d of 4 arrays made from host data (all 1.0) were overwritten by a "
                       "kernel whose hold a synchronize let go of while it ran", 4 - intact);
    jb_array_free(count);
    jb_stream_free(r.stream);
    jb_custom_kernel_free(slow);
    pthread_mutex_destroy(&r.mutex);
    pthread_cond_destroy(&r.cond);
}

static void count_double_free(void *user_data, jb_log_level level, const char *message)
{
    (void)level;
    if (strstr(message, "freed already"))
        ++*(int *)user_data;
}

/* A second jb_array_free is undefined (jitbridge.h), but one made before the array's record is
 * reused is caught with a warning: with the freed records reused newest first, a new array made
 * in between took the record, and the second free freed that new array instead. ASan builds keep
 * no records and report the second free themselves. */
static void test_second_free_is_refused(void)
{
#if defined(__SANITIZE_ADDRESS__)
    return;
#endif
    int warnings = 0;
    CHECK_OK(jb_set_log_callback(count_double_free, &warnings));
    jb_array *a = f32_filled(dev, 16, 1.0f);
    jb_array_free(a);
    jb_array_free(a);
    CHECK(warnings == 1, "%d warnings for a second free at once", warnings);
    jb_array *b = f32_filled(dev, 16, 2.0f), *c = f32_filled(dev, 16, 3.0f);
    CHECK(b != c, "two live arrays share one record");
    /* Arrays made and freed in between, fewer than the quarantine's 16. */
    for (int i = 0; i < 8; i++)
        jb_array_free(f32_filled(dev, 16, 4.0f));
    jb_array *d = f32_filled(dev, 16, 5.0f);
    jb_array_free(b);
    jb_array *e = f32_filled(dev, 16, 6.0f); /* made right after b's free */
    jb_array_free(b);
    CHECK(warnings == 2, "%d warnings: a second free after a new array was made went unseen "
                         "(it freed that array)", warnings);
    bool intact = warnings == 2; /* else e was freed: reading it would crash */
    CHECK(intact && f32_all_equal(c, 16, 3.0f) && f32_all_equal(d, 16, 5.0f) &&
              f32_all_equal(e, 16, 6.0f),
          "arrays after second frees");
    jb_array_free(c);
    jb_array_free(d);
    if (intact)
        jb_array_free(e);
    CHECK_OK(jb_set_log_callback(NULL, NULL));
}

/* Installs the stream and leaves it installed (a leaked guard); holds one buffer on it. */
static void *install_and_exit(void *arg)
{
    if (jb_install_thread_local_default_stream(arg) != JB_OK)
        return NULL;
    jb_array_free(f32_filled(dev, 1024, 1.0f)); /* only the stream's hold keeps its buffer now */
    return arg;
}

/* A thread that exits with a stream still installed lets go of its installation's reference:
 * the creator's free is then the last one, which waits and releases the stream's holds. A
 * leaked reference would keep the stream, and the buffers its holds keep, for ever. */
static void test_exiting_thread_lets_go_of_its_installation(void)
{
    jb_memory_stats before, after;
    CHECK_OK(jb_device_memory_stats(&before, sizeof before, dev));
    jb_stream *stream;
    CHECK_OK(jb_stream_new(&stream, dev));
    pthread_t thread;
    void *installed = NULL;
    CHECK(pthread_create(&thread, NULL, install_and_exit, stream) == 0, "pthread_create");
    pthread_join(thread, &installed);
    CHECK(installed == stream, "the thread installed the stream");
    jb_stream_free(stream); /* no synchronize first: only the stream's destruction releases */
    CHECK_OK(jb_device_memory_stats(&after, sizeof after, dev));
    CHECK(after.live_bytes <= before.live_bytes,
          "%llu bytes live after the stream was freed, %llu before it was made",
          (unsigned long long)after.live_bytes, (unsigned long long)before.live_bytes);
}

/* The bench's raw launcher keeps launching on the stream and input it was staged with: it holds
 * both, so a caller who frees them (or drops the guard that installed the stream) leaves its
 * steps nothing freed to use. A decoy of the input's size would take a freed input buffer. */
static void test_raw_launcher_keeps_its_stream_and_inputs(void)
{
    const int64_t n = 256;
    jb_custom_kernel *k =
        f32_kernel("holds_raw_plus_one", "out[thread_index()] = inp[thread_index()] + 1.0f;");
    jb_stream *stream;
    CHECK_OK(jb_stream_new(&stream, dev));
    CHECK_OK(jb_install_thread_local_default_stream(stream));
    jb_array *x = f32_filled(dev, n, 4.0f);
    const int64_t *shapes[] = {&n};
    int ndims[] = {1};
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, (uint64_t)n};
    jb_bench_raw_launcher *r = NULL;
    CHECK_OK(jb_bench_raw_launcher_new(&r, k, &x, 1, NULL, 0, shapes, ndims, &shape));
    CHECK_OK(jb_uninstall_thread_local_default_stream(stream));
    jb_stream_free(stream);
    jb_array_free(x);
    jb_array *decoy = f32_filled(dev, n, -100.0f);
    uint64_t launch_ns, wait_ns;
    CHECK_OK(jb_bench_raw_launcher_step(r, NULL, 0, &launch_ns, &wait_ns));
    float got[256];
    CHECK_OK(jb_bench_raw_launcher_read(r, 0, got, sizeof got));
    bool exact = true;
    for (int i = 0; i < n; i++)
        exact = exact && got[i] == 5.0f;
    CHECK(exact, "a step after its input and stream were freed: %g, not 5", got[0]);
    jb_bench_raw_launcher_free(r);
    jb_array_free(decoy);
    jb_custom_kernel_free(k);
}

int main(void)
{
    dev = test_device();
    if (!dev)
        return check_summary("test_holds");
    default_stream_first(dev);
    test_big_holds_are_looked_at_soon();
    test_hold_of_many_buffers();
    test_second_free_is_refused();
    test_exiting_thread_lets_go_of_its_installation();
    test_trim_lets_go_of_every_finished_hold();
    test_weights_count_once();
    test_raw_launcher_keeps_its_stream_and_inputs();
    test_synchronize_beside_a_launch(jb_device_get_kind(dev) == JB_DEVICE_CPU ? 40000 : 4000000);
    return check_summary("test_holds");
}
