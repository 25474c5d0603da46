/*
 * A thread that needs an event another thread is recording right now waits for that record
 * (event_state.c), and one that needs a bounds record another thread is reading waits for that
 * read (bounds.c). It must sleep, not spin: a real-time thread that spins on a core never lets a
 * lower-priority recorder or reader on that core finish, and a spinning thread burns a core
 * while it waits. The other thread is held inside its step by a test hook (JB_TEST_HOOKS) for
 * PAUSE_MS, and the waiter's CPU time over its wait is measured; where SCHED_FIFO is permitted
 * the waiter also runs as a real-time thread on the other's core, and its wait must end soon
 * after the pause.
 *
 * A child forked while a thread of its parent reads a bounds record has no such thread: the
 * read in progress must not leave the child's own check of that report waiting for ever.
 */
#include "../src/kernels/kernels.h"
#include "deadline.h"
#include "helpers.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef JB_TEST_HOOKS
#error "test_record_wait needs a JB_TEST_HOOKS build of the library"
#endif

#define PAUSE_MS 400
/* A wait that sleeps costs microseconds of CPU; one that spins costs about the pause (or, on a
 * machine busy with other work, its share of it: still far above this). */
#define MAX_WAIT_CPU_MS 25
/* A real-time spinner would hold the core until the kernel's real-time throttling (950 ms of
 * every second by default) or this watchdog lets the recorder run. */
#define WATCHDOG_MS 3000

static jb_device *dev;

static uint64_t ms_since(const struct timespec *start, clockid_t clock)
{
    struct timespec now;
    clock_gettime(clock, &now);
    return (uint64_t)(now.tv_sec - start->tv_sec) * 1000 +
           (uint64_t)((now.tv_nsec - start->tv_nsec) / 1000000);
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* What the other thread is held inside of. */
typedef enum step { RECORD, BOUNDS_READ } step;

typedef struct scene {
    step step;
    jb_stream *stream;
    jb_array *array; /* its event pending: the first eval records it */
    int cpu;         /* the core both threads run on, or -1 */
    bool real_time;  /* the waiter runs SCHED_FIFO */
    atomic_bool other_paused, waiter_done;
    pthread_t waiter;
    uint64_t waiter_cpu_ms, waiter_wall_ms;
    int waiter_status;
    bool rescued; /* the watchdog took the waiter off real time */
} scene;

static scene *current;

/* The recorder, inside its record: lets the waiter start, then holds the record for PAUSE_MS. */
static void pause_record(void *ctx, jb_stream *stream)
{
    (void)ctx;
    scene *s = current;
    if (!s || stream != s->stream || atomic_exchange(&s->other_paused, true))
        return;
    sleep_ms(PAUSE_MS);
}

/* The reader of a bounds record, about to read it: the same, for the checked kernel's report. */
static void pause_bounds_read(void *ctx, const char *kernel)
{
    (void)ctx;
    scene *s = current;
    if (!s || strcmp(kernel, "record_wait_checked") != 0 ||
        atomic_exchange(&s->other_paused, true))
        return;
    sleep_ms(PAUSE_MS);
}

static void set_pause(step step, bool on)
{
    if (step == RECORD)
        jb__test_set_record_pause(on ? pause_record : NULL, NULL);
    else
        jb__test_set_point(JB_TEST_BOUNDS_READING, on ? pause_bounds_read : NULL, NULL);
}

/* out = inp[0] + 1, bounds-checked or not. */
static jb_custom_kernel *plus_one(const char *name, unsigned flags)
{
    const char *in[] = {"inp"}, *out[] = {"out"};
    jb_dtype f32[] = {JB_F32};
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    spec.name = name;
    spec.input_names = in, spec.input_dtypes = f32, spec.num_inputs = 1;
    spec.output_names = out, spec.output_dtypes = f32, spec.num_outputs = 1;
    spec.body = "out[thread_index()] = inp[0] + 1.0f;";
    spec.compile_flags = flags;
    jb_custom_kernel *k = NULL;
    CHECK_OK(jb_custom_kernel_new(&k, &spec));
    return k;
}

static void pin_to(int cpu)
{
    if (cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *wait_for_record(void *arg)
{
    scene *s = arg;
    pin_to(s->cpu);
    while (!atomic_load(&s->other_paused))
        sleep_ms(1);
    struct timespec cpu_start, wall_start;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu_start);
    clock_gettime(CLOCK_MONOTONIC, &wall_start);
    s->waiter_status = jb_array_eval(s->array); /* the record or read is in progress: it waits */
    s->waiter_cpu_ms = ms_since(&cpu_start, CLOCK_THREAD_CPUTIME_ID);
    s->waiter_wall_ms = ms_since(&wall_start, CLOCK_MONOTONIC);
    atomic_store(&s->waiter_done, true);
    return NULL;
}

/* On no core of the scene's: a real-time spinner there would keep it from running too. */
static void *watch_waiter(void *arg)
{
    scene *s = arg;
    if (s->cpu >= 0) {
        cpu_set_t others;
        CPU_ZERO(&others);
        for (int i = 0; i < CPU_SETSIZE; i++)
            if (i != s->cpu)
                CPU_SET(i, &others);
        pthread_setaffinity_np(pthread_self(), sizeof others, &others);
    }
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (!atomic_load(&s->waiter_done)) {
        if (s->real_time && !s->rescued && ms_since(&start, CLOCK_MONOTONIC) > WATCHDOG_MS) {
            /* A livelock: take the waiter off real time so that the test ends. */
            struct sched_param normal = {.sched_priority = 0};
            pthread_setschedparam(s->waiter, SCHED_OTHER, &normal);
            s->rescued = true;
        }
        sleep_ms(5);
    }
    return NULL;
}

/* Starts the waiter, as a SCHED_FIFO thread when `real_time` and permitted; false if refused. */
static bool start_waiter(scene *s, bool real_time)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (real_time) {
        struct sched_param param = {.sched_priority = sched_get_priority_min(SCHED_FIFO) + 1};
        pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
        pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
        pthread_attr_setschedparam(&attr, &param);
    }
    int err = pthread_create(&s->waiter, &attr, wait_for_record, s);
    pthread_attr_destroy(&attr);
    return err == 0;
}

/* One round: this thread records the event or reads the bounds record (paused inside), another
 * waits for that. */
static void waiter_sleeps_during(step step, bool real_time)
{
    const char *what = step == RECORD ? "record" : "bounds record's read";
    scene s = {.step = step, .cpu = -1, .real_time = real_time};
    atomic_init(&s.other_paused, false);
    atomic_init(&s.waiter_done, false);
    cpu_set_t before;
    pthread_getaffinity_np(pthread_self(), sizeof before, &before);
    if (real_time) {
        s.cpu = sched_getcpu();
        pin_to(s.cpu);
    }
    CHECK_OK(jb_stream_new(&s.stream, dev));
    jb_custom_kernel *k = step == RECORD ? plus_one("record_wait_plus_one", 0)
                                         : plus_one("record_wait_checked", JB_COMPILE_BOUNDS_CHECKS);
    jb_array *x = f32_filled(dev, 1, 2.0f);
    CHECK_OK(jb_array_eval(x));
    int64_t one = 1;
    const int64_t *shapes[] = {&one};
    int ndims[] = {1};
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, 1};
    CHECK_OK(jb_custom_kernel_launch_on(&s.array, k, s.stream, &x, 1, NULL, 0, shapes, ndims,
                                        &shape));
    CHECK(s.array && jb__event_state(jb__array_ready_event(s.array)) == JB_EVENT_PENDING,
          "the output's event is not pending: nothing to record");
    current = &s;
    set_pause(step, true);
    if (!start_waiter(&s, real_time)) {
        printf("  SCHED_FIFO refused here: the real-time round is skipped\n");
        set_pause(step, false);
        current = NULL;
        atomic_store(&s.other_paused, true);
    } else {
        pthread_t watchdog;
        pthread_create(&watchdog, NULL, watch_waiter, &s);
        CHECK_OK(jb_array_eval(s.array)); /* records or reads, paused PAUSE_MS inside */
        pthread_join(s.waiter, NULL);
        pthread_join(watchdog, NULL);
        set_pause(step, false);
        current = NULL;
        CHECK(s.waiter_status == JB_OK, "the waiter's eval: %s", jb_status_name(s.waiter_status));
        CHECK(s.waiter_cpu_ms <= MAX_WAIT_CPU_MS,
              "%s waiter burned %llu ms of CPU in a %llu ms wait for another thread's %s "
              "(it spins instead of sleeping)",
              real_time ? "a SCHED_FIFO" : "a", (unsigned long long)s.waiter_cpu_ms,
              (unsigned long long)s.waiter_wall_ms, what);
        if (real_time)
            CHECK(!s.rescued && s.waiter_wall_ms < PAUSE_MS + 500,
                  "a SCHED_FIFO waiter on the other thread's core waited %llu ms for a %d ms %s%s",
                  (unsigned long long)s.waiter_wall_ms, PAUSE_MS, what,
                  s.rescued ? " and was taken off real time to end the livelock" : "");
    }
    float v = 0.0f;
    CHECK_OK(jb_array_read(s.array, &v, sizeof v));
    CHECK(v == 3.0f, "the output holds %g, not 3", v);
    jb_array_free(s.array);
    jb_array_free(x);
    jb_custom_kernel_free(k);
    jb_stream_free(s.stream);
    pthread_setaffinity_np(pthread_self(), sizeof before, &before);
}

/* ---- a fork while a thread reads a bounds record ---- */

#define CHILD_S 20 /* the forked child's alarm: a hung check ends there */

typedef struct fork_scene {
    jb_array *array; /* a bounds-checked launch's output, its event pending */
    atomic_bool reader_paused, may_go_on;
    int reader_status;
} fork_scene;

static fork_scene *forking;

/* Holds the reader inside its read (state: being read) until the test lets it go on. A child's
 * own read finds it paused already and goes straight on. */
static void hold_bounds_read(void *ctx, const char *kernel)
{
    (void)ctx;
    fork_scene *f = forking;
    if (!f || strcmp(kernel, "record_wait_fork") != 0 || atomic_exchange(&f->reader_paused, true))
        return;
    for (int waited = 0; !atomic_load(&f->may_go_on) && waited < 60000; waited++)
        sleep_ms(1);
}

static void *read_report(void *arg)
{
    fork_scene *f = arg;
    f->reader_status = jb_array_eval(f->array);
    return NULL;
}

/* The child checks the report its parent's thread was reading at the fork: on the cpu it reads
 * it; a GPU's is refused (no driver call in a forked child). Either way it returns. */
static bool child_checks_report(void *arg)
{
    fork_scene *f = arg;
    float v = 0.0f;
    jb_status status = jb_array_eval(f->array);
    if (jb_device_get_kind(dev) != JB_DEVICE_CPU)
        return status != JB_OK;
    return status == JB_OK && jb_array_read(f->array, &v, sizeof v) == JB_OK && v == 3.0f;
}

static void fork_during_bounds_read(void)
{
    fork_scene f = {0};
    atomic_init(&f.reader_paused, false);
    atomic_init(&f.may_go_on, false);
    jb_custom_kernel *k = plus_one("record_wait_fork", JB_COMPILE_BOUNDS_CHECKS);
    jb_array *x = f32_filled(dev, 1, 2.0f);
    CHECK_OK(jb_array_eval(x));
    int64_t one = 1;
    const int64_t *shapes[] = {&one};
    int ndims[] = {1};
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, 1};
    CHECK_OK(jb_custom_kernel_launch(&f.array, k, &x, 1, shapes, ndims, &shape));
    forking = &f;
    jb__test_set_point(JB_TEST_BOUNDS_READING, hold_bounds_read, NULL);
    pthread_t reader;
    pthread_create(&reader, NULL, read_report, &f);
    while (!atomic_load(&f.reader_paused))
        sleep_ms(1);
    bool child_ok = child_says_yes("a child forked during a bounds record's read", CHILD_S,
                                   child_checks_report, &f);
    atomic_store(&f.may_go_on, true);
    pthread_join(reader, NULL);
    jb__test_set_point(JB_TEST_BOUNDS_READING, NULL, NULL);
    forking = NULL;
    CHECK(child_ok, "a child forked while its parent's thread read a bounds record could not "
                    "check that report (it hung until its alarm, or its check failed)");
    CHECK(f.reader_status == JB_OK, "the parent's reader: %s", jb_status_name(f.reader_status));
    jb_array_free(f.array);
    jb_array_free(x);
    jb_custom_kernel_free(k);
}

int main(void)
{
    dev = test_device();
    if (!dev)
        return check_summary("test_record_wait");
    default_stream_first(dev);
    /* Under valgrind threads take turns on one lock: a real-time round proves nothing there. */
    bool real_time_rounds = !getenv("JB_TEST_UNDER_VALGRIND");
    for (step step = RECORD; step <= BOUNDS_READ; step++) {
        waiter_sleeps_during(step, false);
        if (real_time_rounds)
            waiter_sleeps_during(step, true);
    }
    fork_during_bounds_read();
    return check_summary("test_record_wait");
}
