/*
 * The compile farm in the background (jb_prewarm_build_start): farm.c's run on a thread of its
 * own, started with every signal blocked (a host's handler never runs on it, and its poll is
 * never cut short), counted as its workers report, ended by one waiter or by itself when
 * detached. It takes the module cache's lock only in the prewarm at its end, never while its
 * workers run, and a launch waiting on a worker's lease holds no lock the thread needs: a
 * launch and the thread cannot wait on each other.
 */
#include "kernels.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jb_prewarm_build_job {
    pthread_t thread;
    jb_device *device;
    char *path, *worker;
    unsigned jobs;
    jb_farm_progress progress;
    atomic_bool done;
    jb_prewarm_build_result result;
    int status;
    char *message; /* the thread's error message (owned), for the waiter's thread */
    pthread_mutex_t mutex; /* orders the end and a detach: whichever comes last frees */
    bool ended, detached;
};

static void job_free(jb_prewarm_build_job *job)
{
    pthread_mutex_destroy(&job->mutex);
    free(job->path);
    free(job->worker);
    free(job->message);
    free(job);
}

static void *run(void *p)
{
    jb_prewarm_build_job *job = p;
    job->status = jb__farm_run(&job->result, job->device, job->path, job->jobs, job->worker,
                               &job->progress);
    if (job->status != JB_OK)
        job->message = jb__strdup(jb_last_error_message());
    atomic_store(&job->done, true);
    pthread_mutex_lock(&job->mutex);
    job->ended = true;
    bool detached = job->detached;
    pthread_mutex_unlock(&job->mutex);
    if (detached)
        job_free(job);
    return NULL;
}

jb_status jb_prewarm_build_start(jb_prewarm_build_job **out, jb_device *device,
                                 const char *path, unsigned jobs, const char *worker)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_prewarm_build_start: out is NULL");
    *out = NULL;
    JB_FORWARD_IF_ERROR(jb__farm_refusal(device, path, jobs, &worker));
    jb_prewarm_build_job *job = calloc(1, sizeof *job);
    if (job) {
        job->path = strdup(path);
        job->worker = strdup(worker);
    }
    if (!job || !job->path || !job->worker) {
        if (job) {
            free(job->path);
            free(job->worker);
        }
        free(job);
        return jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory to start a background build");
    }
    job->device = device;
    job->jobs = jobs;
    pthread_mutex_init(&job->mutex, NULL);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread starts with every signal blocked */
    int err = pthread_create(&job->thread, NULL, run, job);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err) {
        job_free(job);
        return jb__fail(JB_ERR_SYSTEM, "cannot start the background build's thread: %s",
                        strerror(err));
    }
    *out = job;
    return JB_OK;
}

jb_status jb_prewarm_build_poll(const jb_prewarm_build_job *job, jb_prewarm_build_progress *out)
{
    JB_RETURN_IF(!job || !out, JB_ERR_INVALID_ARGUMENT, "jb_prewarm_build_poll: %s is NULL",
                 job ? "out" : "the job");
    /* done first: once it is read true, the counters read after it are final. */
    bool done = atomic_load(&job->done);
    jb_farm_progress *p = (jb_farm_progress *)&job->progress;
    uint64_t total = atomic_load(&p->total), built = atomic_load(&p->built),
             failed = atomic_load(&p->failed);
    if (done)
        failed = total - built; /* kernels no worker took count as failed at the end */
    *out = (jb_prewarm_build_progress){total, built, failed, total - built - failed, done};
    return JB_OK;
}

jb_status jb_prewarm_build_wait(jb_prewarm_build_job *job, jb_prewarm_build_result *out)
{
    JB_RETURN_IF(!job, JB_ERR_INVALID_ARGUMENT, "jb_prewarm_build_wait: the job is NULL");
    pthread_join(job->thread, NULL);
    if (out)
        *out = job->result;
    int status = job->status;
    if (status != JB_OK)
        jb__fail_with_text(status, job->message ? job->message : "out of memory");
    job_free(job);
    return status;
}

void jb_prewarm_build_detach(jb_prewarm_build_job *job)
{
    if (!job)
        return;
    pthread_detach(job->thread);
    pthread_mutex_lock(&job->mutex);
    job->detached = true;
    bool ended = job->ended;
    pthread_mutex_unlock(&job->mutex);
    if (ended)
        job_free(job);
}
