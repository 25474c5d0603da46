/* A periodic keeper thread (keeper.h): what the host's lease and the fleet's lease renew while
 * their holder compiles. */
#include "base.h"
#include "keeper.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct jb_keeper {
    pthread_mutex_t mutex;
    pthread_cond_t wake; /* on CLOCK_MONOTONIC */
    bool stop;
    pid_t holder; /* the thread that started it */
    pthread_t thread;
    void (*tick)(void *state);
    uint64_t period_ns;
    struct held_warning *warnings; /* the ticks', given to the stopper once joined */
    max_align_t state[];           /* the starter's state, copied */
};

/* A signal mask's line of a /proc status text ("SigPnd:\t<hex>"); 0 when it has none. */
static uint64_t status_mask(const char *text, const char *line)
{
    const char *at = strstr(text, line);
    return at ? strtoull(at + strlen(line), NULL, 16) : 0;
}

static uint64_t signal_bit(int sig)
{
    return 1ULL << (sig - 1);
}

/* Whether the thread `holder` of this process is stopped (a job stop, a debugger's), a stop is
 * pending for it, or it has ended (cancelled mid-compile): such a holder stores nothing and
 * never lets go, so what it holds is left to go stale. Without /proc, it counts as running. */
static bool holder_stopped_or_gone(pid_t holder)
{
    char path[64], text[4096];
    snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)holder);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0 && errno == ENOENT) { /* gone, if this /proc lists this thread (its namespace) */
        snprintf(path, sizeof path, "/proc/self/task/%d", (int)gettid());
        return access(path, F_OK) == 0;
    }
    ssize_t n = fd >= 0 ? read(fd, text, sizeof text - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return false;
    text[n] = '\0';
    const char *state = strstr(text, "\nState:\t");
    if (state && (state[8] == 'T' || state[8] == 't'))
        return true;
    uint64_t pending = status_mask(text, "\nSigPnd:\t") | status_mask(text, "\nShdPnd:\t"),
             blocked = status_mask(text, "\nSigBlk:\t"), stops = signal_bit(SIGSTOP);
    /* The terminal's stops stop only where their action is the default and they are let in. */
    static const int job_stops[] = {SIGTSTP, SIGTTIN, SIGTTOU};
    for (size_t i = 0; i < sizeof job_stops / sizeof *job_stops; i++) {
        struct sigaction action;
        if (!(blocked & signal_bit(job_stops[i])) && sigaction(job_stops[i], NULL, &action) == 0 &&
            !(action.sa_flags & SA_SIGINFO) && action.sa_handler == SIG_DFL)
            stops |= signal_bit(job_stops[i]);
    }
    return (pending & stops) != 0;
}

static void *keeper_main(void *arg)
{
    jb_keeper *k = arg;
    jb__warn_hold();
    pthread_mutex_lock(&k->mutex);
    while (!k->stop) {
        struct timespec at;
        clock_gettime(CLOCK_MONOTONIC, &at);
        uint64_t ns = (uint64_t)at.tv_nsec + k->period_ns;
        at.tv_sec += (time_t)(ns / 1000000000ULL);
        at.tv_nsec = (long)(ns % 1000000000ULL);
        if (pthread_cond_timedwait(&k->wake, &k->mutex, &at) == ETIMEDOUT && !k->stop &&
            !holder_stopped_or_gone(k->holder)) {
            pthread_mutex_unlock(&k->mutex); /* a stop is not held up by a slow tick */
            k->tick(k->state);
            pthread_mutex_lock(&k->mutex);
        }
    }
    pthread_mutex_unlock(&k->mutex);
    k->warnings = jb__warn_release_taken();
    return NULL;
}

jb_keeper *jb__keeper_start(void (*tick)(void *state), const void *state, size_t size,
                            uint64_t period_ns)
{
    jb_keeper *k = calloc(1, sizeof *k + size);
    pthread_condattr_t attr;
    if (!k || pthread_condattr_init(&attr) != 0) {
        free(k);
        return NULL;
    }
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    bool made = pthread_cond_init(&k->wake, &attr) == 0;
    pthread_condattr_destroy(&attr);
    if (!made || pthread_mutex_init(&k->mutex, NULL) != 0) {
        if (made)
            pthread_cond_destroy(&k->wake);
        free(k);
        return NULL;
    }
    memcpy(k->state, state, size);
    k->tick = tick;
    k->period_ns = period_ns;
    k->holder = gettid();
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* no handler of the host runs on it */
    int err = pthread_create(&k->thread, NULL, keeper_main, k);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != 0) {
        pthread_mutex_destroy(&k->mutex);
        pthread_cond_destroy(&k->wake);
        free(k);
        return NULL;
    }
    return k;
}

void jb__keeper_stop(jb_keeper *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&k->mutex);
    k->stop = true;
    pthread_cond_signal(&k->wake);
    pthread_mutex_unlock(&k->mutex);
    pthread_join(k->thread, NULL);
    jb__warn_pass(k->warnings);
    pthread_mutex_destroy(&k->mutex);
    pthread_cond_destroy(&k->wake);
    free(k);
}
