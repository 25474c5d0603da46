/*
 * The library's callbacks into the caller (the log callback, the event callback), one pattern:
 * a callback never runs under a library lock.
 *
 * Each kind's callback and its data are one record. A call takes a reference to the current
 * record under callback_mutex, lets go, calls, and gives the reference back. A replacement puts
 * a new record in place and waits (callback_idle) until the old record's calls have returned
 * before freeing it, so a replaced user_data is never used after the replacement returns; calls
 * that start meanwhile use the new record and do not hold it up. callback_mutex guards pointers
 * and counts only, never a call: a callback may fork, or wait for a thread that forks, and
 * fork's prepare takes it at once. A thread inside a kind's callback can neither replace that
 * kind (it would wait for itself) nor enter it again (recursion); other kinds nest.
 */
#include "base.h"

#include <stdlib.h>

typedef struct callback_record {
    void (*fn)(void);
    void *user_data;
    unsigned calls; /* in progress, under callback_mutex */
} callback_record;

static pthread_mutex_t callback_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t callback_idle = PTHREAD_COND_INITIALIZER;
/* NULL: none. Written under the mutex; read without it only to ask whether one is there. */
static _Atomic(callback_record *) current[JB_CALLBACK_KINDS];
/* The record of each kind this thread is calling, or NULL. */
static _Thread_local callback_record *tls_calling[JB_CALLBACK_KINDS];

int jb__callback_set(jb_callback_kind kind, void (*fn)(void), void *user_data, const char *who,
                     void (**old_fn)(void), void **old_user_data)
{
    if (old_fn)
        *old_fn = NULL;
    if (old_user_data)
        *old_user_data = NULL;
    JB_RETURN_IF(tls_calling[kind], JB_ERR_INVALID_ARGUMENT,
                 "%s called from inside that callback (it would wait for itself)", who);
    callback_record *fresh = NULL;
    if (fn) {
        fresh = malloc(sizeof *fresh);
        JB_RETURN_IF(!fresh, JB_ERR_OUT_OF_MEMORY, "%s: no memory for the callback", who);
        *fresh = (callback_record){fn, user_data, 0};
    }
    pthread_mutex_lock(&callback_mutex);
    callback_record *old = atomic_load_explicit(&current[kind], memory_order_relaxed);
    atomic_store_explicit(&current[kind], fresh, memory_order_relaxed);
    while (old && old->calls > 0)
        pthread_cond_wait(&callback_idle, &callback_mutex);
    pthread_mutex_unlock(&callback_mutex);
    if (old && old_fn)
        *old_fn = old->fn;
    if (old && old_user_data)
        *old_user_data = old->user_data;
    free(old);
    return JB_OK;
}

bool jb__callback_enter(jb_callback_kind kind, jb_callback_call *call)
{
    if (tls_calling[kind])
        return false;
    pthread_mutex_lock(&callback_mutex);
    callback_record *record = atomic_load_explicit(&current[kind], memory_order_relaxed);
    if (record)
        record->calls++;
    pthread_mutex_unlock(&callback_mutex);
    if (!record)
        return false;
    tls_calling[kind] = record;
    *call = (jb_callback_call){kind, record, record->fn, record->user_data};
    return true;
}

void jb__callback_leave(jb_callback_call *call)
{
    callback_record *record = call->record;
    tls_calling[call->kind] = NULL;
    pthread_mutex_lock(&callback_mutex);
    if (--record->calls == 0 && record != atomic_load_explicit(&current[call->kind],
                                                               memory_order_relaxed))
        pthread_cond_broadcast(&callback_idle); /* a replacement waits for its last call */
    pthread_mutex_unlock(&callback_mutex);
}

bool jb__callback_installed(jb_callback_kind kind)
{
    return atomic_load_explicit(&current[kind], memory_order_relaxed) != NULL;
}

bool jb__callback_inside(jb_callback_kind kind)
{
    return tls_calling[kind] != NULL;
}

static void callback_fork(jb_fork_phase phase)
{
    if (phase == JB_FORK_PREPARE) {
        pthread_mutex_lock(&callback_mutex);
    } else if (phase == JB_FORK_PARENT) {
        pthread_mutex_unlock(&callback_mutex);
    } else {
        pthread_mutex_init(&callback_mutex, NULL);
        pthread_cond_init(&callback_idle, NULL);
        /* Only this thread exists here: the calls still counted were other threads'. (A
         * replaced record this thread is calling stays allocated: its replacer is gone.) */
        for (int kind = 0; kind < JB_CALLBACK_KINDS; kind++) {
            callback_record *record = atomic_load_explicit(&current[kind], memory_order_relaxed);
            if (record)
                record->calls = tls_calling[kind] == record;
        }
    }
}
JB_FORK_HANDLER(JB_FORK_CALLBACKS, callback_fork)
