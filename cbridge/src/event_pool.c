/*
 * The event pool: process-global, one per device, reusable events. Acquire and release may come
 * from any thread, so both run under the pool's mutex (the unlocked pool on the ROCm backend
 * handed one event to two threads: invalid resource handle, SIGABRT, SIGSEGV).
 *
 * In front of it, each thread keeps a few released events per device and takes those first, so
 * a warm launch takes no lock for its event. A thread's events go back to the pool when it exits.
 * Builds without the pool's lock skip the thread's events: the race they show is the pool's.
 */
#include "internal.h"

#include <stdlib.h>

/* More than a stream releases at once (about 64 holds per look, stream.c), so a launching thread's
 * events come back to it. */
#define THREAD_EVENTS (2 * JB_HOLDS_PER_LOOK)

/* Events only this thread holds, any device's; the newest is taken first. */
typedef struct thread_events {
    size_t count;
    jb_event *events[THREAD_EVENTS];
} thread_events;

static void pool_put(jb_event *event);

static thread_events *thread_events_create(void)
{
    return calloc(1, sizeof(thread_events));
}

static void thread_events_destroy(thread_events *te)
{
    for (size_t i = 0; i < te->count; i++)
        pool_put(te->events[i]);
    free(te);
}

JB_THREAD_LOCAL(thread_events, this_thread_events, thread_events_create, thread_events_destroy)

#ifdef JB_REMOVE_LOCK_EVENT_POOL
#define THREAD_EVENTS_ENABLED 0
#define POOL_LOCK(p) ((void)0)
#define POOL_UNLOCK(p) ((void)0)
#else
#define THREAD_EVENTS_ENABLED 1
#define POOL_LOCK(p) pthread_mutex_lock(&(p)->mutex)
#define POOL_UNLOCK(p) pthread_mutex_unlock(&(p)->mutex)
#endif

void jb__event_pool_init(jb_event_pool *pool)
{
    jb__mutex_init_spinning(&pool->mutex);
    pool->free_events = NULL;
    pool->count = pool->capacity = 0;
}

int jb__event_acquire(jb_device *dev, jb_event **out)
{
    thread_events *te = THREAD_EVENTS_ENABLED ? this_thread_events() : NULL;
    if (te && te->count && te->events[te->count - 1]->device == dev) {
        jb_event *event = te->events[--te->count];
        atomic_store_explicit(&event->in_use, true, memory_order_relaxed);
        atomic_store_explicit(&event->refs, 1, memory_order_relaxed);
        *out = event;
        return JB_OK;
    }
    jb_event_pool *pool = &dev->event_pool;
    jb_event *event = NULL;
    POOL_LOCK(pool);
    if (pool->count > 0)
        event = pool->free_events[--pool->count];
    POOL_UNLOCK(pool);
    if (event) {
        /* Two owners of one event would wait on each other's work: refuse loudly. */
        JB_RETURN_IF(atomic_exchange(&event->in_use, true), JB_ERR_BACKEND,
                     "the event pool of device %d handed out an event that is in use",
                     dev->index);
        atomic_store(&event->refs, 1);
        *out = event;
        return JB_OK;
    }
    event = calloc(1, sizeof *event);
    JB_RETURN_IF(!event, JB_ERR_OUT_OF_MEMORY, "no memory for an event");
    event->device = dev;
    atomic_init(&event->in_use, true);
    atomic_init(&event->refs, 1);
    int status = dev->backend->event_create(dev, &event->native);
    if (status != JB_OK) {
        free(event);
        return status;
    }
    *out = event;
    return JB_OK;
}

void jb__event_retain(jb_event *event)
{
    atomic_fetch_add_explicit(&event->refs, 1, memory_order_relaxed);
}

void jb__event_release(jb_event *event)
{
    if (!event || atomic_fetch_sub_explicit(&event->refs, 1, memory_order_acq_rel) != 1)
        return;
    /* A release store, not a locked exchange: the flag only catches an event with two owners. */
    atomic_store_explicit(&event->in_use, false, memory_order_release);
    /* Kept by this thread when it acquires events itself and has room: no lock. A thread that
     * only frees arrays (or is exiting) gives them back to the pool. */
    thread_events *te = THREAD_EVENTS_ENABLED ? this_thread_events_tls : NULL;
    if (te && te->count < THREAD_EVENTS) {
        te->events[te->count++] = event;
        return;
    }
    pool_put(event);
}

/* Gives a released event back to its device's pool (destroys it when no memory is left). */
static void pool_put(jb_event *event)
{
    jb_event_pool *pool = &event->device->event_pool;
    bool pooled = false;
    POOL_LOCK(pool);
    if (pool->count == pool->capacity) {
        size_t capacity = pool->capacity ? pool->capacity * 2 : 32;
        jb_event **grown = jb__realloc_array(pool->free_events, capacity, sizeof *grown);
        if (grown) {
            pool->free_events = grown;
            pool->capacity = capacity;
        }
    }
    if (pool->count < pool->capacity) {
        pool->free_events[pool->count++] = event;
        pooled = true;
    }
    POOL_UNLOCK(pool);
    if (!pooled) { /* no memory to keep it: destroy instead of losing it */
        event->device->backend->event_destroy(event->device, event->native);
        free(event);
    }
}
