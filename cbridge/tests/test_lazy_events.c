/*
 * Lazily recorded events (event_state.c): a launch's event is recorded only when a host wait,
 * another stream or a look at the holds needs it. These tests hold a kernel on the cpu stream
 * behind a gate that the test opens by writing the (host) memory the kernel spins on, so what
 * waits for what is seen, not timed (tests/gated_kernels.h).
 */
#include "deadline.h"
#include "gated_kernels.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

/* A module entry given no array, held while the gate array holds 0: work queued without a
 * hold. */
static const char bare_source[] =
    "void gated_bare(void **args, uint64_t threads) {\n"
    "    (void)threads;\n"
    "    while (*(const volatile float *)(intptr_t)*(const int64_t *)args[0] == 0.0f) {}\n"
    "}\n";

/* A reader that waits for an older array while newer work is queued on the stream: the late
 * record would make it wait for that work too, once; from then on the stream records every
 * event at once, and the next such wait does not wait for the gated work. `bare`: that work is
 * a module entry with no array, so it holds nothing. */
static void older_array_waits_only_for_its_work(bool bare)
{
    jb_stream *stream;
    CHECK_OK(jb_stream_new(&stream, dev));
    jb_source_module *module = NULL;
    const char *entries[] = {"gated_bare"};
    jb_source_module_spec spec = JB_SOURCE_MODULE_SPEC_INIT;
    spec.name = "lazy_bare", spec.cpu_source = bare_source;
    spec.entry_names = entries, spec.num_entries = 1;
    CHECK_OK(jb_source_module_new(&module, &spec));
    jb_array *gate = filled(0.0f), *x = filled(2.0f);
    for (int round = 0; round < 2; round++) {
        set_gate(gate, 0.0f);
        jb_array *older = launch(plus_one, x, stream), *behind = NULL;
        if (bare) {
            jb_arg arg = {.scalar = {.dtype = JB_I64,
                                     .value.i64 = (int64_t)(intptr_t)jb__array_buffer(gate)->ptr}};
            jb_launch_shape one = {{0, 0, 0}, {0, 0, 0}, 1};
            CHECK_OK(jb_source_module_launch(module, stream, "gated_bare", &arg, 1, &one));
        } else {
            behind = launch(gated, gate, stream);
        }
        opener o;
        open_after(&o, gate, round == 0 ? 50 : 5000);
        CHECK_OK(jb_array_eval(older));
        bool waited_for_the_gate = atomic_load(&o.opened);
        if (round == 1)
            CHECK(!waited_for_the_gate, "round 1%s: waiting for an older array waited for the "
                                        "gated work queued after it (the stream stayed lazy)",
                  bare ? ", work with no array" : "");
        CHECK(value_of(older) == 3.0f, "round %d: the older array holds %g, not 3", round,
              value_of(older));
        pthread_join(o.thread, NULL);
        CHECK(bare || value_of(behind) == 2.0f, "round %d: the gated kernel's output", round);
        jb_array_free(older);
        jb_array_free(behind);
    }
    jb_stream_free(stream);
    jb_source_module_free(module);
    jb_array_free(gate);
    jb_array_free(x);
}

static void test_older_array_waits_only_for_its_work(void)
{
    older_array_waits_only_for_its_work(false);
    older_array_waits_only_for_its_work(true);
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
    CHECK(stream->eager_until_seq <= stream->holds_next_seq,
          "waits for the newest work made the stream record eagerly");
    jb_stream_free(stream);
    jb_array_free(x);
}

static int event_state_of(jb_array *a)
{
    return atomic_load(&jb__array_ready_event(a)->state);
}

/* Whether `a`'s event says its work is done: marked done, or recorded and fired. */
static bool event_done(jb_array *a)
{
    jb_event *ev = jb__array_ready_event(a);
    int state = atomic_load(&ev->state);
    return state == JB_EVENT_DONE ||
           (state == JB_EVENT_RECORDED && dev->backend->event_query(dev, ev->native) == 1);
}

static const char *state_name(int state)
{
    static const char *const names[] = {"pending", "recording", "recorded", "done"};
    _Static_assert(JB_EVENT_PENDING == 0 && JB_EVENT_RECORDING == 1 && JB_EVENT_RECORDED == 2 &&
                       JB_EVENT_DONE == 3,
                   "names in the order of the states");
    return state >= 0 && state < 4 ? names[state] : "unknown";
}

/* Holds let go of after a synchronize, or when their stream is freed, mark their events done:
 * an older array's event is never left pending, to be recorded later on a stream that no
 * longer runs its work (or no longer exists). */
static bool test_released_holds_mark_events_done(void)
{
    enum { LAUNCHES = 4 };
    jb_array *x = filled(1.0f), *ys[LAUNCHES];
    for (int freed = 0; freed < 2; freed++) {
        jb_stream *stream;
        CHECK_OK(jb_stream_new(&stream, dev));
        for (int i = 0; i < LAUNCHES; i++)
            ys[i] = launch(plus_one, x, stream);
        if (freed)
            jb_stream_free(stream);
        else
            CHECK_OK(jb_stream_synchronize(stream));
        bool all_done = true;
        for (int i = 0; i < LAUNCHES; i++) {
            CHECK(event_done(ys[i]),
                  "after %s, the event of launch %d of %d is %s, not done: the released hold "
                  "did not mark it",
                  freed ? "its stream's free" : "a synchronize", i + 1, LAUNCHES,
                  state_name(event_state_of(ys[i])));
            all_done = all_done && event_done(ys[i]);
        }
        if (!all_done)
            return false; /* a read now would record on a stream that may be gone */
        if (!freed)
            jb_stream_free(stream);
        for (int i = 0; i < LAUNCHES; i++) {
            CHECK(value_of(ys[i]) == 2.0f, "launch %d's output", i + 1);
            jb_array_free(ys[i]);
        }
    }
    jb_array_free(x);
    return true;
}

/* A late record makes the stream record at once for JB_EAGER_HOLDS launches, not for ever: a
 * server thread that once read an older array goes back to lazy records. */
static void test_eager_for_a_while(void)
{
    jb_stream *stream;
    CHECK_OK(jb_stream_new(&stream, dev));
    jb_array *x = filled(2.0f);
    jb_array *older = launch(plus_one, x, stream), *newer = launch(plus_one, x, stream);
    CHECK_OK(jb_array_eval(older)); /* newer work queued behind: a late record */
    jb_array *y = launch(plus_one, x, stream);
    CHECK(event_state_of(y) == JB_EVENT_RECORDED, "a launch after a late record was not eager");
    jb_array_free(y);
    for (int i = 1; i < JB_EAGER_HOLDS; i++)
        jb_array_free(launch(plus_one, x, stream));
    y = launch(plus_one, x, stream);
    CHECK(event_state_of(y) == JB_EVENT_PENDING,
          "the stream still records eagerly %d launches after its one late record",
          JB_EAGER_HOLDS);
    CHECK(value_of(y) == 3.0f && value_of(newer) == 3.0f, "the outputs");
    jb_array_free(y);
    jb_array_free(older);
    jb_array_free(newer);
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

/* Runs `check` in a forked child and returns its answer, or -1 when it never gave one (a hang
 * ends at its deadline). A pipe carries it: under valgrind a child's exit status reports the
 * parent's threads' blocks as lost (make valgrind's note). */
static int in_child(int (*check)(jb_array *), jb_array *y)
{
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    pid_t pid = fork_with_deadline("a child's look at the parent's work", 10);
    if (pid == 0) {
        close(fds[0]);
        char answer = (char)check(y);
        _exit(write(fds[1], &answer, 1) == 1 ? 0 : 1);
    }
    close(fds[1]);
    char answer = -1;
    if (pid < 0 || read(fds[0], &answer, 1) != 1)
        answer = -1;
    close(fds[0]);
    wait_child_with_deadline(pid, 15, "a child's look at the parent's work");
    return answer;
}

/* 1 when the child's wait for `y` is refused with a clear error. */
static int wait_is_refused(jb_array *y)
{
    int status = jb_array_eval(y);
    return status == JB_ERR_INVALID_ARGUMENT && strstr(jb_last_error_message(), "forked");
}

/* Work that nobody waited for before fork: the child cannot record on the parent's stream (its
 * worker is not in the child), so a wait fails with a clear error instead of hanging. */
static void test_forked_child_refuses_unknown_work(void)
{
    jb_stream *stream;
    CHECK_OK(jb_stream_new(&stream, dev));
    jb_array *gate = filled(0.0f);
    jb_array *y = launch(gated, gate, stream);
    int answer = in_child(wait_is_refused, y);
    CHECK(answer == 1, "the child's wait for the parent's unrecorded work: %s",
          answer < 0 ? "it hung" : "no clear error");
    set_gate(gate, 1.0f);
    CHECK(value_of(y) == 2.0f, "the parent's gated kernel");
    jb_array_free(y);
    jb_stream_free(stream);
    jb_array_free(gate);
}

/* Another parent thread was recording the event when the process forked: in the child, no
 * thread will ever finish that record. */
static int wait_while_recording(jb_array *y)
{
    atomic_store(&jb__array_ready_event(y)->state, JB_EVENT_RECORDING);
    return wait_is_refused(y);
}

/* 1 when the child reads `y` as 2. */
static int reads_two(jb_array *y)
{
    float v = -1.0f;
    return jb_array_read(y, &v, sizeof v) == JB_OK && v == 2.0f;
}

/* The parent's work whose event was recorded (on an eager stream) or was being recorded at the
 * fork, and is not done: the child cannot see it end either. Work seen done before the fork
 * stays readable. */
static void test_forked_child_refuses_running_work(void)
{
    jb_stream *stream;
    CHECK_OK(jb_stream_new(&stream, dev));
    jb_array *gate = filled(0.0f);
    stream->eager_until_seq = UINT64_MAX; /* as after a reader needed an older event */
    jb_array *y = launch(gated, gate, stream);
    CHECK(atomic_load(&jb__array_ready_event(y)->state) == JB_EVENT_RECORDED, "y's record");
    int answer = in_child(wait_is_refused, y);
    CHECK(answer == 1, "the child's wait for the parent's recorded, running work: %s",
          answer < 0 ? "it hung" : "no clear error");
    stream->eager_until_seq = 0;
    jb_array *w = launch(gated, gate, stream);
    answer = in_child(wait_while_recording, w);
    CHECK(answer == 1, "the child's wait for work recorded by a parent thread at the fork: %s",
          answer < 0 ? "it hung" : "no clear error");
    set_gate(gate, 1.0f);
    CHECK(value_of(y) == 2.0f && value_of(w) == 2.0f, "the parent's work after the forks");
    CHECK(in_child(reads_two, y) == 1, "a child's read of the parent's finished work");
    jb_array_free(w);
    jb_array_free(y);
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

int main(void)
{
    if (!gated_kernels_new("lazy"))
        return check_summary("test_lazy_events");
    /* First, and alone when it fails: events left pending make later tests crash. */
    if (!test_released_holds_mark_events_done())
        return check_summary("test_lazy_events");
    test_newest_wait_stays_lazy();
    test_eager_for_a_while();
    test_older_array_waits_only_for_its_work();
    test_other_stream_waits_for_pending_work();
    test_array_outlives_its_stream();
    test_wait_beside_stream_free();
    test_forked_child_refuses_unknown_work();
    test_forked_child_refuses_running_work();
    test_trim_after_unwaited_work();
    gated_kernels_free();
    return check_summary("test_lazy_events");
}
