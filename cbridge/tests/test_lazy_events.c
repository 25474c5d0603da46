/*
 * Lazily recorded events (holds.c): a launch's event is recorded only when a host wait, another
 * stream or a look at the holds needs it. These tests hold a kernel on the cpu stream behind a
 * gate that the test opens by writing the (host) memory the kernel spins on, so what waits for
 * what is seen, not timed. cpu only: on a GPU the test cannot write a running kernel's memory.
 * Built with JB_TEST_HOOKS (the array's buffer, the hold count).
 */
#include "../src/internal.h"
#include "check.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef JB_TEST_HOOKS
#error "test_lazy_events needs a JB_TEST_HOOKS build of the library"
#endif

static jb_device *dev;
static jb_custom_kernel *plus_one, *gated;

static jb_custom_kernel *kernel(const char *name, const char *body)
{
    const char *in[] = {"inp"}, *out[] = {"out"};
    jb_dtype f32[] = {JB_F32};
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    spec.name = name;
    spec.input_names = in, spec.input_dtypes = f32, spec.num_inputs = 1;
    spec.output_names = out, spec.output_dtypes = f32, spec.num_outputs = 1;
    spec.body = body;
    jb_custom_kernel *k = NULL;
    CHECK_OK(jb_custom_kernel_new(&k, &spec));
    return k;
}

static jb_array *filled(float value)
{
    int64_t n = 1;
    jb_array *a = NULL;
    CHECK_OK(jb_array_from_host(&a, dev, JB_F32, &n, 1, &value));
    CHECK_OK(jb_array_eval(a));
    return a;
}

static jb_array *launch(jb_custom_kernel *k, jb_array *input, jb_stream *stream)
{
    int64_t n = 1;
    const int64_t *shapes[] = {&n};
    int ndims[] = {1};
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, 1};
    jb_array *out = NULL;
    CHECK_OK(jb_custom_kernel_launch_on(&out, k, stream, &input, 1, NULL, 0, shapes, ndims,
                                        &shape));
    return out;
}

static float value_of(jb_array *a)
{
    float v = -1.0f;
    CHECK_OK(jb_array_read(a, &v, sizeof v));
    return v;
}

/* The gate: a one-element array the gated kernel spins on while it holds 0. */
static void set_gate(jb_array *gate, float value)
{
    *(volatile float *)jb__array_buffer(gate)->ptr = value;
}

typedef struct opener {
    jb_array *gate;
    unsigned after_ms;
    atomic_bool opened;
    pthread_t thread;
} opener;

static void *open_later(void *arg)
{
    opener *o = arg;
    struct timespec ts = {o->after_ms / 1000, (long)(o->after_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    atomic_store(&o->opened, true);
    set_gate(o->gate, 1.0f);
    return NULL;
}

static void open_after(opener *o, jb_array *gate, unsigned ms)
{
    o->gate = gate, o->after_ms = ms;
    atomic_init(&o->opened, false);
    pthread_create(&o->thread, NULL, open_later, o);
}

/* A reader that waits for an older array while newer work is queued on the stream: the late
 * record would make it wait for that work too, once; from then on the stream records every
 * event at once, and the next such wait does not wait for the gated kernel. */
static void test_older_array_waits_only_for_its_work(void)
{
    jb_stream *stream;
    CHECK_OK(jb_stream_new(&stream, dev));
    jb_array *gate = filled(0.0f), *x = filled(2.0f);
    for (int round = 0; round < 2; round++) {
        set_gate(gate, 0.0f);
        jb_array *older = launch(plus_one, x, stream);
        jb_array *behind = launch(gated, gate, stream);
        opener o;
        open_after(&o, gate, round == 0 ? 50 : 5000);
        CHECK_OK(jb_array_eval(older));
        bool waited_for_the_gate = atomic_load(&o.opened);
        if (round == 1)
            CHECK(!waited_for_the_gate, "round 1: waiting for an older array waited for the "
                                        "gated kernel queued after it (the stream stayed lazy)");
        CHECK(value_of(older) == 3.0f, "round %d: the older array holds %g, not 3", round,
              value_of(older));
        pthread_join(o.thread, NULL);
        CHECK(value_of(behind) == 2.0f, "round %d: the gated kernel's output", round);
        jb_array_free(older);
        jb_array_free(behind);
    }
    jb_stream_free(stream);
    jb_array_free(gate);
    jb_array_free(x);
}

/* Waiting for the newest work keeps the stream lazy: no launch pays for a record. */
static void test_newest_wait_stays_lazy(void)
{
    jb_stream *stream;
    CHECK_OK(jb_stream_new(&stream, dev));
    jb_array *x = filled(2.0f);
    for (int i = 0; i < 5; i++) {
        jb_array *y = launch(plus_one, x, stream);
        CHECK(value_of(y) == 3.0f, "step %d", i);
        jb_array_free(y);
    }
    CHECK(!stream->eager_events, "waits for the newest work made the stream record eagerly");
    jb_stream_free(stream);
    jb_array_free(x);
}

/* Another stream's launch reads an output whose event was never recorded: it must wait for the
 * (gated) kernel that writes it, and so read what that kernel wrote. */
static void test_other_stream_waits_for_pending_work(void)
{
    jb_stream *producer, *consumer;
    CHECK_OK(jb_stream_new(&producer, dev));
    CHECK_OK(jb_stream_new(&consumer, dev));
    jb_array *gate = filled(0.0f);
    jb_array *made = launch(gated, gate, producer);
    CHECK(atomic_load_explicit(&jb__array_ready_event(made)->state, memory_order_relaxed) ==
              JB_EVENT_PENDING,
          "a launch recorded its event at once");
    jb_array *used = launch(plus_one, made, consumer);
    opener o;
    open_after(&o, gate, 50);
    CHECK(value_of(used) == 3.0f, "the other stream read %g before the kernel wrote 2",
          value_of(used));
    pthread_join(o.thread, NULL);
    jb_array_free(used);
    jb_array_free(made);
    jb_stream_free(consumer);
    jb_stream_free(producer);
    jb_array_free(gate);
}

/* An array outlives its stream: freeing the stream waits for the work and marks its events done,
 * so a later wait neither records on the freed stream nor blocks. */
static void test_array_outlives_its_stream(void)
{
    jb_array *x = filled(4.0f);
    for (int i = 0; i < 20; i++) {
        jb_stream *stream;
        CHECK_OK(jb_stream_new(&stream, dev));
        jb_array *y = launch(plus_one, x, stream);
        jb_stream_free(stream);
        CHECK(value_of(y) == 5.0f, "an array read after its stream was freed");
        jb_array_free(y);
    }
    jb_array_free(x);
}

typedef struct reader {
    jb_array *array;
    int status;
} reader;

static void *evaluate(void *arg)
{
    reader *r = arg;
    r->status = jb_array_eval(r->array);
    return NULL;
}

/* One thread waits for an array (recording its event) while another frees its stream: the
 * record must end before the stream goes (AddressSanitizer and valgrind see it otherwise). */
static void test_wait_beside_stream_free(void)
{
    jb_array *x = filled(1.0f);
    for (int i = 0; i < 200; i++) {
        jb_stream *stream;
        CHECK_OK(jb_stream_new(&stream, dev));
        reader r = {launch(plus_one, x, stream), -1};
        pthread_t t;
        pthread_create(&t, NULL, evaluate, &r);
        jb_stream_free(stream);
        pthread_join(t, NULL);
        CHECK(r.status == JB_OK, "a wait beside the stream's free: %s", jb_last_error_message());
        jb_array_free(r.array);
    }
    jb_array_free(x);
}

/* Work that nobody waited for before fork: the child cannot record on the parent's stream (its
 * worker is not in the child), so a wait fails with a clear error instead of hanging. */
static void test_forked_child_refuses_unknown_work(void)
{
    jb_stream *stream;
    CHECK_OK(jb_stream_new(&stream, dev));
    jb_array *gate = filled(0.0f);
    jb_array *y = launch(gated, gate, stream);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(10); /* a hang is a failure, not a stuck test */
        int status = jb_array_eval(y);
        bool clear = status == JB_ERR_INVALID_ARGUMENT &&
                     strstr(jb_last_error_message(), "forked") != NULL;
        _exit(clear ? 0 : 1);
    }
    int child = -1;
    CHECK(pid > 0 && waitpid(pid, &child, 0) == pid, "fork");
    CHECK(WIFEXITED(child) && WEXITSTATUS(child) == 0,
          "the child's wait for the parent's unrecorded work: status %#x (not a clear error)",
          child);
    set_gate(gate, 1.0f);
    CHECK(value_of(y) == 2.0f, "the parent's gated kernel");
    jb_array_free(y);
    jb_stream_free(stream);
    jb_array_free(gate);
}

/* Forks; the child evaluates `y` (after `prepare`, when given) and exits 0 on a clear error. */
static void child_refuses(jb_array *y, void (*prepare)(jb_array *), const char *what)
{
    pid_t pid = fork();
    if (pid == 0) {
        alarm(10); /* a hang is a failure, not a stuck test */
        if (prepare)
            prepare(y);
        int status = jb_array_eval(y);
        _exit(status == JB_ERR_INVALID_ARGUMENT && strstr(jb_last_error_message(), "forked") ? 0
                                                                                           : 1);
    }
    int child = -1;
    CHECK(pid > 0 && waitpid(pid, &child, 0) == pid, "fork");
    CHECK(WIFEXITED(child) && WEXITSTATUS(child) == 0,
          "%s: the child's wait for the parent's running work: status %#x (not a clear error)",
          what, child);
}

/* Another parent thread was recording the event when the process forked: in the child, no
 * thread will ever finish that record. */
static void recording_at_fork(jb_array *y)
{
    atomic_store(&jb__array_ready_event(y)->state, JB_EVENT_RECORDING);
}

/* The parent's work whose event was recorded (another stream waited for it) or was being
 * recorded at the fork, and is not done: the child cannot see it end either. Work seen done
 * before the fork stays readable. */
static void test_forked_child_refuses_running_work(void)
{
    jb_stream *stream, *other;
    CHECK_OK(jb_stream_new(&stream, dev));
    CHECK_OK(jb_stream_new(&other, dev));
    jb_array *gate = filled(0.0f);
    jb_array *y = launch(gated, gate, stream);
    jb_array *z = launch(plus_one, y, other); /* records y's event on `stream` */
    CHECK(atomic_load(&jb__array_ready_event(y)->state) == JB_EVENT_RECORDED, "y's record");
    child_refuses(y, NULL, "recorded");
    jb_array *w = launch(gated, gate, stream);
    child_refuses(w, recording_at_fork, "recording");
    set_gate(gate, 1.0f);
    CHECK(value_of(z) == 3.0f && value_of(w) == 2.0f, "the parent's work after the forks");
    pid_t pid = fork();
    if (pid == 0) {
        alarm(10);
        float v = -1.0f;
        _exit(jb_array_read(y, &v, sizeof v) == JB_OK && v == 2.0f ? 0 : 1);
    }
    int child = -1;
    CHECK(pid > 0 && waitpid(pid, &child, 0) == pid, "fork");
    CHECK(WIFEXITED(child) && WEXITSTATUS(child) == 0,
          "a child's read of the parent's finished work: status %#x", child);
    jb_array_free(w);
    jb_array_free(z);
    jb_array_free(y);
    jb_stream_free(other);
    jb_stream_free(stream);
    jb_array_free(gate);
}

/* A trim with work done but never waited for lets go of every hold: the stream is idle, though
 * no event of its work was ever recorded. */
static void test_trim_after_unwaited_work(void)
{
    jb_stream *stream;
    CHECK_OK(jb_stream_new(&stream, dev));
    jb_array *x = filled(1.0f);
    jb_array *ys[8];
    for (int i = 0; i < 8; i++)
        ys[i] = launch(plus_one, x, stream);
    while (dev->backend->stream_query(dev, stream->native) != 1) /* the worker ran them */
        sched_yield();
    for (int i = 0; i < 7; i++)
        jb_array_free(ys[i]);
    CHECK(jb__test_hold_count(stream) == 8, "%zu holds before the trim, not 8",
          jb__test_hold_count(stream));
    CHECK_OK(jb_device_trim(NULL, dev));
    CHECK(jb__test_hold_count(stream) == 0, "%zu holds of finished work kept by a trim",
          jb__test_hold_count(stream));
    /* The idle stream said so itself: no event needed recording (a driver call) to know. */
    CHECK(atomic_load(&jb__array_ready_event(ys[7])->state) == JB_EVENT_DONE,
          "a trim of an idle stream recorded the newest work's event");
    jb_array_free(ys[7]);
    jb_stream_free(stream);
    jb_array_free(x);
}

/* Waits until a launch's output holds `value`: the stream ran that far (read from host memory,
 * so nothing is recorded or waited for by the library). */
static void wait_for_value(jb_array *a, float value)
{
    while (*(volatile const float *)jb__array_buffer(a)->ptr != value)
        sched_yield();
}

/* Marks a launch's output unwritten (its kernel waits behind a closed gate): a reused buffer may
 * hold the value already. */
static jb_array *not_yet(jb_array *a)
{
    *(volatile float *)jb__array_buffer(a)->ptr = -1.0f;
    return a;
}

/* A stream whose device runs a few looks behind the host: each look's guess (the hold recorded
 * at the previous look) has not fired, while holds recorded at earlier looks have. The search
 * must find those among the unrecorded holds, or the stream's holds (and their memory) grow for
 * as long as the device lags. */
static void lagging_stream(int offset)
{
    enum { SEGMENTS = 8, BEHIND = 2 };
    jb_stream *stream;
    CHECK_OK(jb_stream_new(&stream, dev));
    jb_array *x = filled(1.0f);
    /* Finished holds let go by a wait: the ring starts `offset` holds after a look's place. */
    for (int i = 0; i < offset; i++)
        jb_array_free(launch(plus_one, x, stream));
    CHECK_OK(jb_stream_synchronize(stream));
    jb_array *gates[SEGMENTS], *last[SEGMENTS];
    size_t most = 0;
    for (int seg = 0; seg < SEGMENTS; seg++) {
        /* One look per segment: a gated launch, then plus_ones, JB_HOLDS_PER_LOOK holds. */
        gates[seg] = filled(0.0f);
        jb_array_free(launch(gated, gates[seg], stream));
        for (int i = 1; i < JB_HOLDS_PER_LOOK; i++) {
            jb_array *y = launch(plus_one, x, stream);
            if (i < JB_HOLDS_PER_LOOK - 1)
                jb_array_free(y);
            else
                last[seg] = not_yet(y);
        }
        size_t held = jb__test_hold_count(stream);
        most = held > most ? held : most;
        if (seg >= BEHIND) { /* the device catches up to BEHIND segments behind the host */
            set_gate(gates[seg - BEHIND], 1.0f);
            wait_for_value(last[seg - BEHIND], 2.0f);
        }
    }
    CHECK(most <= (BEHIND + 2) * JB_HOLDS_PER_LOOK,
          "offset %d: %zu holds kept by a stream whose device ran %d looks behind, not at most "
          "%d: the search missed the recorded holds that fired",
          offset, most, BEHIND + 1, (BEHIND + 2) * JB_HOLDS_PER_LOOK);
    for (int seg = 0; seg < SEGMENTS; seg++)
        set_gate(gates[seg], 1.0f);
    for (int seg = 0; seg < SEGMENTS; seg++) {
        CHECK(value_of(last[seg]) == 2.0f, "segment %d's last output", seg);
        jb_array_free(last[seg]);
        jb_array_free(gates[seg]);
    }
    jb_stream_free(stream);
    jb_array_free(x);
}

static void test_lagging_stream_lets_go_of_finished_holds(void)
{
    for (int offset = 0; offset < JB_HOLDS_PER_LOOK; offset += 9)
        lagging_stream(offset);
}

/* A trim (or a refused allocation's retry) on a busy stream lets go of the work known finished:
 * the holds up to the last one whose recorded event fired, though most events are unrecorded. */
static void test_trim_of_busy_stream(void)
{
    enum { PLUS = JB_HOLDS_PER_LOOK + JB_HOLDS_PER_LOOK / 2 };
    jb_stream *stream;
    CHECK_OK(jb_stream_new(&stream, dev));
    jb_array *x = filled(1.0f), *first = filled(0.0f), *second = filled(0.0f), *last = NULL;
    jb_array_free(launch(gated, first, stream));
    for (int i = 0; i < PLUS; i++) { /* a look at the 64th hold records it; nothing fired */
        jb_array *y = launch(plus_one, x, stream);
        if (i < PLUS - 1)
            jb_array_free(y);
        else
            last = not_yet(y);
    }
    jb_array_free(launch(gated, second, stream));
    set_gate(first, 1.0f);
    wait_for_value(last, 2.0f); /* all but the second gated launch ran */
    size_t before = jb__test_hold_count(stream);
    CHECK_OK(jb_device_trim(NULL, dev));
    size_t after = jb__test_hold_count(stream);
    CHECK(after + JB_HOLDS_PER_LOOK <= before,
          "a trim of a busy stream kept %zu of %zu holds: those up to the look's recorded "
          "hold (%d) finished",
          after, before, JB_HOLDS_PER_LOOK);
    set_gate(second, 1.0f);
    CHECK(value_of(last) == 2.0f, "the last plus_one's output");
    jb_array_free(last);
    jb_stream_free(stream);
    jb_array_free(x);
    jb_array_free(first);
    jb_array_free(second);
}

int main(void)
{
    CHECK_OK(jb_device_get(&dev, JB_DEVICE_CPU, 0));
    if (!dev)
        return check_summary("test_lazy_events");
    jb_array_free(filled(0.0f)); /* the thread's default stream first (tests/valgrind.supp) */
    plus_one = kernel("lazy_plus_one", "out[thread_index()] = inp[0] + 1.0f;");
    gated = kernel("lazy_gated", "while (*(volatile const float *)&inp[0] == 0.0f) {}\n"
                                 "out[thread_index()] = inp[0] + 1.0f;");
    test_newest_wait_stays_lazy();
    test_older_array_waits_only_for_its_work();
    test_other_stream_waits_for_pending_work();
    test_array_outlives_its_stream();
    test_wait_beside_stream_free();
    test_forked_child_refuses_unknown_work();
    test_forked_child_refuses_running_work();
    test_trim_after_unwaited_work();
    test_lagging_stream_lets_go_of_finished_holds();
    test_trim_of_busy_stream();
    jb_custom_kernel_free(plus_one);
    jb_custom_kernel_free(gated);
    return check_summary("test_lazy_events");
}
