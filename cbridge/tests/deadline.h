/*
 * A deadline for a test step that could deadlock: when the step has not ended in time, a
 * watchdog thread says which step hung and ends the test process with a failure, so a deadlock
 * costs seconds and a message, never a stuck CI run. A forked child is not watched (the
 * watchdog thread is not copied): a child arms alarm() itself.
 */
#ifndef JB_TEST_DEADLINE_H
#define JB_TEST_DEADLINE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef struct deadline {
    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t ended;
    bool done;
    int seconds;
    const char *what;
} deadline;

static void *deadline_watch(void *arg)
{
    deadline *d = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += d->seconds;
    pthread_mutex_lock(&d->mutex);
    while (!d->done && pthread_cond_timedwait(&d->ended, &d->mutex, &until) == 0)
        ;
    if (!d->done) {
        fprintf(stderr, "DEADLINE: %s did not finish in %d s (a deadlock?); failing the test\n",
                d->what, d->seconds);
        fflush(stderr);
        _exit(70);
    }
    pthread_mutex_unlock(&d->mutex);
    return NULL;
}

/* Starts watching: `what` names the step in the failure. Valgrind's runs get 5 times longer. */
static inline void deadline_start(deadline *d, int seconds, const char *what)
{
    pthread_mutex_init(&d->mutex, NULL);
    pthread_cond_init(&d->ended, NULL);
    d->done = false;
    d->seconds = getenv("JB_TEST_UNDER_VALGRIND") ? 5 * seconds : seconds;
    d->what = what;
    if (pthread_create(&d->thread, NULL, deadline_watch, d) != 0) {
        perror("deadline: pthread_create");
        exit(1);
    }
}

static inline void deadline_end(deadline *d)
{
    pthread_mutex_lock(&d->mutex);
    d->done = true;
    pthread_cond_signal(&d->ended);
    pthread_mutex_unlock(&d->mutex);
    pthread_join(d->thread, NULL);
    pthread_cond_destroy(&d->ended);
    pthread_mutex_destroy(&d->mutex);
}

#endif
