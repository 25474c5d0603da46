/*
 * Reference-counted device buffers and their per-device cache by size class. A buffer whose last
 * reference drops goes idle in its device's cache and is reused by a later allocation; memory in
 * the cache is never handed back to the driver.
 */
#include "internal.h"

#include <stdlib.h>

#define SMALLEST_CLASS_BYTES 256

/* The size class holding `bytes`, or -1 when it is too large to keep idle. */
static int size_class(size_t bytes)
{
    int c = 0;
    while (((size_t)SMALLEST_CLASS_BYTES << c) < bytes)
        if (++c >= JB_BUFFER_CLASSES)
            return -1;
    return c;
}

int jb__buffer_new(jb_device *dev, size_t bytes, jb_buffer **out)
{
    int c = bytes ? size_class(bytes) : -1;
    jb_buffer *buf = NULL;
    if (c >= 0) {
        jb_buffer_cache *cache = &dev->buffers;
        pthread_mutex_lock(&cache->mutex);
        buf = cache->idle[c];
        if (buf)
            cache->idle[c] = buf->next_idle;
        pthread_mutex_unlock(&cache->mutex);
    }
    if (!buf) {
        buf = calloc(1, sizeof *buf);
        JB_RETURN_IF(!buf, JB_ERR_OUT_OF_MEMORY, "no memory for a buffer");
        buf->device = dev;
        buf->size_class = c;
        if (bytes > 0) {
            size_t capacity = c >= 0 ? (size_t)SMALLEST_CLASS_BYTES << c : bytes;
            int status = dev->backend->mem_alloc(dev, capacity, &buf->ptr);
            if (status != JB_OK) {
                free(buf);
                return status;
            }
        }
    }
    buf->bytes = bytes;
    buf->next_idle = NULL;
    atomic_init(&buf->refs, 1);
    *out = buf;
    return JB_OK;
}

void jb__buffer_retain(jb_buffer *buf)
{
    atomic_fetch_add_explicit(&buf->refs, 1, memory_order_relaxed);
}

void jb__buffer_release(jb_buffer *buf)
{
    if (atomic_fetch_sub_explicit(&buf->refs, 1, memory_order_acq_rel) != 1)
        return;
    jb_device *dev = buf->device;
    if (buf->size_class >= 0) {
        /* No work uses it any more (every launch held a reference): idle, ready for reuse. */
        jb_buffer_cache *cache = &dev->buffers;
        pthread_mutex_lock(&cache->mutex);
        buf->next_idle = cache->idle[buf->size_class];
        cache->idle[buf->size_class] = buf;
        pthread_mutex_unlock(&cache->mutex);
        return;
    }
    /* Uncached sizes are never released from a callback: only holds run there, and the array
     * that owns the buffer is freed on a user thread after its own reference. Zero-byte
     * buffers own no device memory. */
    if (buf->ptr)
        dev->backend->mem_free(dev, buf->ptr);
    free(buf);
}
