/*
 * A deadline for a test step that could deadlock: when the step has not ended in time, a
 * watchdog thread says which step hung and ends the test process with a failure, so a deadlock
 * costs seconds and a message, never a stuck CI run. A forked child is not watched (the
 * watchdog thread is not copied): a child arms alarm() itself.
 *
 * Every fork in the tests goes through fork_with_deadline (fork() must return in the parent in
 * time, under an alarm: the library's fork handlers take every lock it has and wait for a build
 * in progress; the child gets an alarm of its own) and wait_child_with_deadline (a child past
 * its time is killed and the test fails).
 */
#ifndef JB_TEST_DEADLINE_H
#define JB_TEST_DEADLINE_H

#include "check.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

/* How long fork() may take in the parent: its handlers wait for a build in progress. */
#define FORK_DEADLINE_S 30

/* The line fork_deadline_expired writes, made before the alarm is set. */
static char fork_deadline_line[300];

static void fork_deadline_expired(int signal)
{
    (void)signal;
    ssize_t written = write(2, fork_deadline_line, strlen(fork_deadline_line));
    (void)written;
    _exit(70);
}

/* fork(), which must return in the parent within FORK_DEADLINE_S (5 times that under valgrind);
 * the child gets alarm(child_seconds), so a hung child ends (SIGALRM) even while its parent
 * blocks on a pipe. `what` names the fork in the failure message. Returns what fork returns.
 * The parent's deadline is an alarm, not a watchdog thread: under valgrind a forked child counts
 * the blocks of its parent's threads as lost, and its exit status says so. */
static inline pid_t fork_with_deadline(const char *what, unsigned child_seconds)
{
    fflush(stdout);
    fflush(stderr);
    unsigned seconds = getenv("JB_TEST_UNDER_VALGRIND") ? 5 * FORK_DEADLINE_S : FORK_DEADLINE_S;
    snprintf(fork_deadline_line, sizeof fork_deadline_line,
             "DEADLINE: %s: fork() did not finish in %u s (a deadlock?); failing the test\n", what,
             seconds);
    struct sigaction expired, previous;
    memset(&expired, 0, sizeof expired);
    expired.sa_handler = fork_deadline_expired;
    sigemptyset(&expired.sa_mask);
    sigaction(SIGALRM, &expired, &previous);
    unsigned earlier = alarm(seconds);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGALRM, SIG_DFL); /* the child's own alarm ends it, for its parent to report */
        alarm(child_seconds);
        return 0;
    }
    alarm(earlier);
    sigaction(SIGALRM, &previous, NULL);
    CHECK(pid > 0, "%s: fork() failed: %s", what, strerror(errno));
    return pid;
}

/* Waits for the child `pid` (from fork_with_deadline) for up to `seconds`; past that, kills it
 * and fails the test. A child ended by its alarm fails the test too. Returns the child's wait
 * status, or -1 when there was no child to wait for or it was killed here. */
static inline int wait_child_with_deadline(pid_t pid, unsigned seconds, const char *what)
{
    if (pid <= 0)
        return -1;
    int status = 0;
    for (unsigned long waited_ms = 0;; waited_ms += 10) {
        pid_t done = waitpid(pid, &status, WNOHANG);
        if (done == pid) {
            CHECK(!WIFSIGNALED(status) || WTERMSIG(status) != SIGALRM,
                  "%s: the child hung until its alarm (a deadlock?)", what);
            return status;
        }
        if (done < 0 && errno != EINTR) {
            CHECK(false, "%s: waitpid: %s", what, strerror(errno));
            return -1;
        }
        if (waited_ms >= seconds * 1000UL) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            CHECK(false, "%s: the child did not finish within %u s and was killed (a deadlock?)",
                  what, seconds);
            return -1;
        }
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
}

/* Forks (fork_with_deadline) a child that runs `body` and answers through a pipe: under
 * valgrind a forked child's exit status also counts its parent's threads' blocks as lost, so
 * the status cannot carry the answer. True when the child answered yes; the child is reaped
 * within child_seconds + 5. */
static inline bool child_says_yes(const char *what, unsigned child_seconds, bool (*body)(void *),
                                  void *arg)
{
    int fds[2];
    if (pipe(fds) != 0)
        return false;
    pid_t pid = fork_with_deadline(what, child_seconds);
    if (pid == 0) {
        close(fds[0]);
        char answer = body(arg) ? 'y' : 'n';
        _exit(write(fds[1], &answer, 1) == 1 ? 0 : 1);
    }
    close(fds[1]);
    char answer = 0;
    ssize_t n = pid > 0 ? read(fds[0], &answer, 1) : 0; /* EOF if the child dies first */
    close(fds[0]);
    wait_child_with_deadline(pid, child_seconds + 5, what);
    return n == 1 && answer == 'y';
}

#endif
