/*
 * A thread that needs an event another thread is recording right now waits for that record
 * (event_state.c). It must sleep, not spin: a real-time thread that spins on a core never lets a
 * lower-priority recorder on that core finish, and a spinning thread burns a core while it
 * waits. The recorder is held inside its record by a test hook (JB_TEST_HOOKS) for PAUSE_MS, and
 * the waiter's CPU time over its wait is measured; where SCHED_FIFO is permitted the waiter also
 * runs as a real-time thread on the recorder's core, and its wait must end soon after the pause.
 */
#include "../src/internal.h"
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

typedef struct scene {
    jb_stream *stream;
    jb_array *array; /* its event pending: the first eval records it */
    int cpu;         /* the core both threads run on, or -1 */
    bool real_time;  /* the waiter runs SCHED_FIFO */
    atomic_bool recorder_paused, waiter_done;
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
    if (!s || stream != s->stream || atomic_exchange(&s->recorder_paused, true))
        return;
    sleep_ms(PAUSE_MS);
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
    while (!atomic_load(&s->recorder_paused))
        sleep_ms(1);
    struct timespec cpu_start, wall_start;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu_start);
    clock_gettime(CLOCK_MONOTONIC, &wall_start);
    s->waiter_status = jb_array_eval(s->array); /* the record is in progress: it waits */
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

/* One round: this thread records (paused inside), another waits for that record. */
static void waiter_sleeps_during_a_record(bool real_time)
{
    scene s = {.cpu = -1, .real_time = real_time};
    atomic_init(&s.recorder_paused, false);
    atomic_init(&s.waiter_done, false);
    cpu_set_t before;
    pthread_getaffinity_np(pthread_self(), sizeof before, &before);
    if (real_time) {
        s.cpu = sched_getcpu();
        pin_to(s.cpu);
    }
    CHECK_OK(jb_stream_new(&s.stream, dev));
    jb_custom_kernel *k = f32_kernel("record_wait_plus_one", "out[thread_index()] = inp[0] + 1.0f;");
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
    jb__test_set_record_pause(pause_record, NULL);
    if (!start_waiter(&s, real_time)) {
        printf("  SCHED_FIFO refused here: the real-time round is skipped\n");
        jb__test_set_record_pause(NULL, NULL);
        current = NULL;
        atomic_store(&s.recorder_paused, true);
    } else {
        pthread_t watchdog;
        pthread_create(&watchdog, NULL, watch_waiter, &s);
        CHECK_OK(jb_array_eval(s.array)); /* records, paused PAUSE_MS inside */
        pthread_join(s.waiter, NULL);
        pthread_join(watchdog, NULL);
        jb__test_set_record_pause(NULL, NULL);
        current = NULL;
        CHECK(s.waiter_status == JB_OK, "the waiter's eval: %s", jb_status_name(s.waiter_status));
        CHECK(s.waiter_cpu_ms <= MAX_WAIT_CPU_MS,
              "%s waiter burned %llu ms of CPU in a %llu ms wait for another thread's record "
              "(it spins instead of sleeping)",
              real_time ? "a SCHED_FIFO" : "a", (unsigned long long)s.waiter_cpu_ms,
              (unsigned long long)s.waiter_wall_ms);
        if (real_time)
            CHECK(!s.rescued && s.waiter_wall_ms < PAUSE_MS + 500,
                  "a SCHED_FIFO waiter on the recorder's core waited %llu ms for a %d ms record%s",
                  (unsigned long long)s.waiter_wall_ms, PAUSE_MS,
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

int main(void)
{
    dev = test_device();
    if (!dev)
        return check_summary("test_record_wait");
    default_stream_first(dev);
    waiter_sleeps_during_a_record(false);
    /* Under valgrind threads take turns on one lock: a real-time round proves nothing there. */
    if (!getenv("JB_TEST_UNDER_VALGRIND"))
        waiter_sleeps_during_a_record(true);
    return check_summary("test_record_wait");
}
