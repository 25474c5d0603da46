/*
 * The event pool: process-global, one per device, reusable events. Acquire and release may come
 * from any thread, so both run under the pool's mutex (the unlocked pool on the ROCm backend
 * handed one event to two threads: invalid resource handle, SIGABRT, SIGSEGV).
 */
#include "internal.h"

#include <stdlib.h>

#ifdef JB_REMOVE_LOCK_EVENT_POOL
#define POOL_LOCK(p) ((void)0)
#define POOL_UNLOCK(p) ((void)0)
#else
#define POOL_LOCK(p) pthread_mutex_lock(&(p)->mutex)
#define POOL_UNLOCK(p) pthread_mutex_unlock(&(p)->mutex)
#endif

void jb__event_pool_init(jb_event_pool *pool)
{
    pthread_mutex_init(&pool->mutex, NULL);
    pool->free_events = NULL;
    pool->count = pool->capacity = 0;
}

int jb__event_acquire(jb_device *dev, jb_event **out)
{
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
    jb_event_pool *pool = &event->device->event_pool;
    bool pooled = false;
    atomic_store(&event->in_use, false);
    POOL_LOCK(pool);
    if (pool->count == pool->capacity) {
        size_t capacity = pool->capacity ? pool->capacity * 2 : 32;
        jb_event **grown = realloc(pool->free_events, capacity * sizeof *grown);
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

int jb__event_record(jb_event *event, jb_stream *stream)
{
    JB_FORWARD_IF_ERROR(
        event->device->backend->event_record(event->device, event->native, stream->native));
    event->stream_id = stream->id;
    return JB_OK;
}
