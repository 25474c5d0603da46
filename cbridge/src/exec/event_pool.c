/*
 * The event pool: process-global, one per device, reusable events. Acquire and release may come
 * from any thread, so both run under the pool's mutex (the unlocked pool on the ROCm backend
 * handed one event to two threads: invalid resource handle, SIGABRT, SIGSEGV).
 *
 * In front of it, each stream keeps the events its finished work gave back (holds.c), so a warm
 * launch takes no lock for its event. Nothing else keeps events: a trim takes every stream's
 * spares back and leaves the pool a few (jb_device_trim), so a burst's events do not stay for
 * the life of the process. Builds without the pool's lock skip the spares: the race they show is
 * the pool's.
 */
#include "exec.h"

#include <stdlib.h>

/* Pooled events a trim leaves: enough for a few streams' first launches. */
#define POOL_FLOOR 32

#ifdef JB_REMOVE_LOCK_EVENT_POOL
#define POOL_LOCK(p) ((void)0)
#define POOL_UNLOCK(p) ((void)0)
#else
#define POOL_LOCK(p) pthread_mutex_lock(&(p)->mutex)
#define POOL_UNLOCK(p) pthread_mutex_unlock(&(p)->mutex)
#endif

void jb__event_pool_init(jb_event_pool *pool)
{
    jb__mutex_init_spinning(&pool->mutex);
    pool->free_events = NULL;
    pool->count = pool->capacity = 0;
    atomic_init(&pool->alive, 0);
}

static void destroy(jb_event *event)
{
    jb_device *dev = event->device;
    dev->backend->event_destroy(dev, event->native);
    free(event);
    atomic_fetch_sub_explicit(&dev->event_pool.alive, 1, memory_order_relaxed);
}

int jb__event_acquire(jb_device *dev, jb_event **out, size_t max, size_t *n)
{
    jb_event_pool *pool = &dev->event_pool;
    *n = 0;
    POOL_LOCK(pool);
    while (*n < max && pool->count > 0)
        out[(*n)++] = pool->free_events[--pool->count];
    POOL_UNLOCK(pool);
    for (size_t i = 0; i < *n; i++) {
        /* Two owners of one event would wait on each other's work: refuse loudly. */
        if (atomic_exchange(&out[i]->in_use, true)) {
            jb__event_pool_put(out, i); /* those this call owns go back */
            *n = 0;
            return jb__fail(JB_ERR_BACKEND,
                            "the event pool of device %d handed out an event that is in use",
                            dev->index);
        }
    }
    if (*n)
        return JB_OK;
    jb_event *event = calloc(1, sizeof *event);
    JB_RETURN_IF(!event, JB_ERR_OUT_OF_MEMORY, "no memory for an event");
    event->device = dev;
    atomic_init(&event->in_use, true);
    atomic_init(&event->refs, 0);
    int status = dev->backend->event_create(dev, &event->native);
    if (status != JB_OK) {
        free(event);
        return status;
    }
    atomic_fetch_add_explicit(&pool->alive, 1, memory_order_relaxed);
    out[(*n)++] = event;
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
    jb__event_pool_put(&event, 1);
}

void jb__event_pool_put(jb_event *const *events, size_t n)
{
    if (!n)
        return;
    jb_event_pool *pool = &events[0]->device->event_pool;
    /* A release store, not a locked exchange: the flag only catches an event with two owners. */
    for (size_t i = 0; i < n; i++)
        atomic_store_explicit(&events[i]->in_use, false, memory_order_release);
    size_t pooled = 0;
    POOL_LOCK(pool);
    size_t need;
    if (jb__add_size(pool->count, n, &need) && need > pool->capacity) {
        size_t capacity = pool->capacity ? pool->capacity : 32;
        while (capacity < need && capacity <= SIZE_MAX / 2)
            capacity *= 2;
        jb_event **grown = jb__realloc_array(pool->free_events, capacity, sizeof *grown);
        if (grown) {
            pool->free_events = grown;
            pool->capacity = capacity;
        }
    }
    while (pooled < n && pool->count < pool->capacity)
        pool->free_events[pool->count++] = events[pooled++];
    POOL_UNLOCK(pool);
    for (; pooled < n; pooled++) /* no memory to keep them: destroy instead of losing them */
        destroy(events[pooled]);
}

size_t jb__event_pool_trim(jb_device *dev)
{
    jb_event_pool *pool = &dev->event_pool;
    jb_event **doomed = NULL;
    size_t n = 0;
    POOL_LOCK(pool);
    if (pool->count > POOL_FLOOR) {
        n = pool->count - POOL_FLOOR;
        /* The driver calls come after the unlock: the doomed move to an array of their own. */
        doomed = jb__malloc_array(n, sizeof *doomed);
        if (doomed) {
            pool->count = POOL_FLOOR;
            for (size_t i = 0; i < n; i++)
                doomed[i] = pool->free_events[POOL_FLOOR + i];
            jb_event **smaller =
                jb__realloc_array(pool->free_events, 2 * POOL_FLOOR, sizeof *smaller);
            if (smaller) {
                pool->free_events = smaller;
                pool->capacity = 2 * POOL_FLOOR;
            }
        } else {
            n = 0;
        }
    }
    POOL_UNLOCK(pool);
    for (size_t i = 0; i < n; i++)
        destroy(doomed[i]);
    free(doomed);
    return n;
}
