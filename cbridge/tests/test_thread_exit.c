/*
 * A thread's exit lets go of its default stream without waiting for the stream's work: a server
 * thread that queued work and exits (or whose device faulted) must not hang there. The stream,
 * still busy, stays with its device and goes once its work is done. A thread that only reads
 * results makes no stream at all. The gated kernels (tests/gated_kernels.h) hold work on a
 * stream until the test opens a gate, so what waits for what is seen, not timed.
 */
#include "gated_kernels.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

/* An exit that waited for the gated work would wait until the gate opens, which only the test
 * does after this: the bound is generous so that valgrind on a loaded host (a thread start, a
 * launch and an exit each seconds there) is not taken for a wait. Under valgrind, five times
 * that: it runs one thread at a time, and the gated kernels spinning on the earlier threads'
 * streams share that one thread with the next start, launch and exit (one of six took 23 s). */
#define EXIT_MS 20000
#define EXIT_MS_UNDER_VALGRIND (5 * EXIT_MS)

static int exit_bound_ms(void)
{
    return getenv("JB_TEST_UNDER_VALGRIND") ? EXIT_MS_UNDER_VALGRIND : EXIT_MS;
}

static int stream_count(void)
{
    int n = 0;
    pthread_mutex_lock(&dev->streams_mutex);
    for (jb_stream *s = dev->streams; s; s = s->device_next)
        n++;
    pthread_mutex_unlock(&dev->streams_mutex);
    return n;
}

/* Waits until every stream of the device is idle: the worker marks its stream idle a moment
 * after the work's last event fires. */
static void wait_streams_idle(void)
{
    for (bool idle = false; !idle;) {
        idle = true;
        pthread_mutex_lock(&dev->streams_mutex);
        for (jb_stream *s = dev->streams; s; s = s->device_next)
            idle = idle && dev->backend->stream_query(dev, s->native) == 1;
        pthread_mutex_unlock(&dev->streams_mutex);
        if (!idle)
            sched_yield();
    }
}

/* Trims until the device has `want` streams (the worker marks its stream idle a moment after the
 * work's event fires) or a second has passed; the count then. */
static int trimmed_to(int want)
{
    for (int tries = 0; tries < 200 && stream_count() != want; tries++) {
        CHECK_OK(jb_device_trim(NULL, dev));
        struct timespec ms5 = {0, 5000000L};
        nanosleep(&ms5, NULL);
    }
    return stream_count();
}

typedef struct leaver {
    jb_array *gate;
    jb_array *out; /* made by the gated kernel on the thread's own default stream */
} leaver;

static void *launch_and_exit(void *arg)
{
    leaver *l = arg;
    l->out = launch(gated, l->gate, NULL);
    return NULL;
}

/* Starts a thread that launches gated work on its default stream and exits; whether it was
 * joined within exit_bound_ms() (else the gate is opened to let it end, and it is joined). */
static bool exits_without_waiting(leaver *l)
{
    pthread_t thread;
    pthread_create(&thread, NULL, launch_and_exit, l);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += exit_bound_ms() / 1000;
    if (pthread_timedjoin_np(thread, NULL, &deadline) == 0)
        return true;
    set_gate(l->gate, 1.0f);
    pthread_join(thread, NULL);
    return false;
}

/* The exit returns while the work runs; the stream stays until its work is done, and its hold
 * keeps the output's buffer until then. */
static void test_exit_does_not_wait_for_queued_work(void)
{
    CHECK_OK(jb_device_trim(NULL, dev));
    int before = stream_count();
    leaver l = {filled(0.0f), NULL};
    bool prompt = exits_without_waiting(&l);
    CHECK(prompt, "a thread's exit waited for the work queued on its default stream (still "
                  "waiting after %d ms)",
          exit_bound_ms());
    CHECK(!prompt || stream_count() == before + 1, "%d streams while the exited thread's work "
                                                    "runs, not %d: it was destroyed",
          stream_count(), before + 1);
    CHECK_OK(jb_device_trim(NULL, dev));
    CHECK(!prompt || stream_count() == before + 1, "a trim destroyed a stream whose work runs");
    set_gate(l.gate, 1.0f);
    CHECK(value_of(l.out) == 2.0f, "the exited thread's output holds %g, not 2", value_of(l.out));
    int after = trimmed_to(before);
    CHECK(after == before, "%d streams after the exited thread's work ended and trims, not %d",
          after, before);
    jb_array_free(l.out);
    jb_array_free(l.gate);
}

/* On a faulted device (a query that fails, faked by the test hook) the exit does not hang
 * either, and the stream it leaves is not kept for ever: a device that cannot answer will not
 * answer later, so the next walk (a trim here) destroys it, its wait returning at once on such a
 * device (on the cpu here, once the gated work ran). */
static void test_exit_on_a_faulted_device(bool reap_by_new_stream)
{
    int before = stream_count();
    leaver l = {filled(0.0f), NULL};
    jb__test_set_query_fault(true);
    bool prompt = exits_without_waiting(&l);
    CHECK(prompt, "a thread's exit hung on a faulted device");
    CHECK(!prompt || stream_count() == before + 1,
          "%d streams after the exit on a faulted device, not %d", stream_count(), before + 1);
    set_gate(l.gate, 1.0f);
    CHECK(value_of(l.out) == 2.0f, "the exited thread's output holds %g, not 2", value_of(l.out));
    int after;
    if (reap_by_new_stream) { /* a new thread's first stream walks the device's streams too */
        jb_stream *fresh;
        CHECK_OK(jb_stream_new(&fresh, dev));
        after = stream_count() - 1;
        jb_stream_free(fresh);
    } else {
        after = trimmed_to(before);
    }
    CHECK(after == before,
          "%d streams after %s on the faulted device, not %d: the stream an exiting thread "
          "left there was never destroyed",
          after, reap_by_new_stream ? "a new stream" : "trims", before);
    jb__test_set_query_fault(false);
    jb_array_free(l.out);
    jb_array_free(l.gate);
}

/* Many threads exit with work queued; once it ends, the next new stream (a new thread's first
 * launch) lets go of theirs, with no trim: a server with thread churn does not pile them up. */
static void test_new_stream_reaps_exited_threads_streams(void)
{
    enum { THREADS = 6 };
    int before = stream_count();
    jb_array *gate = filled(0.0f);
    leaver l[THREADS];
    int prompt = 0;
    for (int i = 0; i < THREADS; i++) {
        l[i] = (leaver){gate, NULL};
        prompt += exits_without_waiting(&l[i]);
    }
    CHECK(prompt == THREADS, "%d of %d exits waited for their queued work", THREADS - prompt,
          THREADS);
    set_gate(gate, 1.0f);
    for (int i = 0; i < THREADS; i++) {
        CHECK_OK(jb_array_eval(l[i].out));
        jb_array_free(l[i].out);
    }
    wait_streams_idle();
    jb_stream *fresh;
    CHECK_OK(jb_stream_new(&fresh, dev));
    CHECK(stream_count() == before + 1, "%d streams after a new one, not %d: the exited "
                                        "threads' idle streams stayed",
          stream_count(), before + 1);
    jb_stream_free(fresh);
    jb_array_free(gate);
}

typedef struct reader {
    jb_array *a;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    int stage; /* 1: read, 2: may exit */
    float value;
} reader;

static void *read_only(void *arg)
{
    reader *r = arg;
    CHECK_OK(jb_array_eval(r->a));
    CHECK_OK(jb_array_read(r->a, &r->value, sizeof r->value));
    pthread_mutex_lock(&r->mutex);
    r->stage = 1;
    pthread_cond_broadcast(&r->cond);
    while (r->stage != 2)
        pthread_cond_wait(&r->cond, &r->mutex);
    pthread_mutex_unlock(&r->mutex);
    return NULL;
}

/* A thread that waits for an array and reads it makes no stream (on the cpu, a stream is a
 * thread of its own; on a GPU, a driver stream whose exit would wait). */
static void test_reader_makes_no_stream(void)
{
    reader r = {.a = filled(5.0f), .stage = 0};
    pthread_mutex_init(&r.mutex, NULL);
    pthread_cond_init(&r.cond, NULL);
    int before = stream_count();
    pthread_t thread;
    pthread_create(&thread, NULL, read_only, &r);
    pthread_mutex_lock(&r.mutex);
    while (r.stage != 1)
        pthread_cond_wait(&r.cond, &r.mutex);
    int during = stream_count();
    r.stage = 2;
    pthread_cond_broadcast(&r.cond);
    pthread_mutex_unlock(&r.mutex);
    pthread_join(thread, NULL);
    CHECK(during == before, "a thread that only read an array made %d stream(s)", during - before);
    CHECK(r.value == 5.0f, "the reader read %g, not 5", r.value);
    jb_array_free(r.a);
    pthread_mutex_destroy(&r.mutex);
    pthread_cond_destroy(&r.cond);
}

int main(void)
{
    if (!gated_kernels_new("exit"))
        return check_summary("test_thread_exit");
    test_reader_makes_no_stream();
    test_exit_does_not_wait_for_queued_work();
    test_exit_on_a_faulted_device(false);
    test_exit_on_a_faulted_device(true);
    test_new_stream_reaps_exited_threads_streams();
    gated_kernels_free();
    return check_summary("test_thread_exit");
}
