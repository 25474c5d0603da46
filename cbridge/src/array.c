/*
 * Arrays and the reference-counted device buffers under them. A launch or a copy holds a
 * reference on each buffer it uses until the event recorded after it fires (the stream keeps
 * these holds and releases them as it goes), so freeing an array early is safe. A buffer whose last reference drops goes idle in its device's cache, by size class, and
 * is reused by a later allocation; memory in the cache is never handed back to the driver.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

struct jb_array {
    jb_device *device;
    jb_dtype dtype;
    int ndim;
    int64_t shape[JB_MAX_NDIM];
    int64_t size;
    jb_buffer *buffer;
    jb_event *ready; /* NULL: nothing pending */
};

const char *jb_dtype_name(int dtype)
{
    switch (dtype) {
    case JB_F32:
        return "f32";
    case JB_I32:
        return "i32";
    }
    return NULL;
}

size_t jb_dtype_size(int dtype)
{
    return jb_dtype_name(dtype) ? 4 : 0;
}

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

#define HOLDS_PER_RELEASE 16

struct jb_hold {
    jb_event *done;
    size_t count;
    jb_buffer *buffers[];
};

static void hold_free(jb_hold *hold)
{
    for (size_t i = 0; i < hold->count; i++)
        jb__buffer_release(hold->buffers[i]);
    jb__event_release(hold->done);
    free(hold);
}

static jb_hold *hold_at(const jb_stream *stream, size_t i)
{
    return stream->holds[(stream->holds_first + i) % stream->holds_capacity];
}

void jb__stream_release_holds(jb_stream *stream, bool all)
{
    jb_device *dev = stream->device;
    pthread_mutex_lock(&stream->holds_mutex);
    size_t count = stream->holds_count, releasable = count;
    if (!all && count) {
        /* Work on one stream finishes in order, so "fired" holds for every hold older than one
         * that fired: ask the newest, else search for the newest that fired. */
        if (!dev->backend->event_query(dev, hold_at(stream, count - 1)->done->native)) {
            size_t fired = 0, running = count - 1; /* holds [0, fired) fired; `running` did not */
            /* The newest hold of the previous batch has most likely fired: try it first. */
            if (count > HOLDS_PER_RELEASE) {
                size_t guess = count - 1 - HOLDS_PER_RELEASE;
                if (dev->backend->event_query(dev, hold_at(stream, guess)->done->native))
                    fired = guess + 1;
                else
                    running = guess;
            }
            while (fired < running) {
                size_t mid = fired + (running - fired) / 2;
                if (dev->backend->event_query(dev, hold_at(stream, mid)->done->native))
                    fired = mid + 1;
                else
                    running = mid;
            }
            releasable = fired;
        }
    }
    jb_hold *stack_batch[64];
    jb_hold **batch = releasable <= 64 ? stack_batch : malloc(releasable * sizeof *batch);
    if (!batch)
        releasable = 64, batch = stack_batch; /* release what fits now, the rest later */
    for (size_t i = 0; i < releasable; i++)
        batch[i] = hold_at(stream, i);
    if (releasable)
        stream->holds_first = (stream->holds_first + releasable) % stream->holds_capacity;
    stream->holds_count -= releasable;
    pthread_mutex_unlock(&stream->holds_mutex);
    for (size_t i = 0; i < releasable; i++)
        hold_free(batch[i]);
    if (batch != stack_batch)
        free(batch);
}

/* Makes room for one more hold in the stream's ring (under its mutex). */
static bool holds_reserve(jb_stream *stream)
{
    if (stream->holds_count < stream->holds_capacity)
        return true;
    size_t capacity = stream->holds_capacity ? stream->holds_capacity * 2 : 64;
    jb_hold **ring = malloc(capacity * sizeof *ring);
    if (!ring)
        return false;
    for (size_t i = 0; i < stream->holds_count; i++)
        ring[i] = hold_at(stream, i);
    free(stream->holds);
    stream->holds = ring;
    stream->holds_capacity = capacity;
    stream->holds_first = 0;
    return true;
}

int jb__stream_hold(jb_stream *stream, jb_buffer *const *buffers, size_t count, jb_event *done)
{
    jb_hold *hold = malloc(sizeof *hold + count * sizeof(jb_buffer *));
    pthread_mutex_lock(&stream->holds_mutex);
    bool room = hold && holds_reserve(stream);
    if (room) {
        hold->done = done;
        jb__event_retain(done);
        hold->count = count;
        for (size_t i = 0; i < count; i++) {
            hold->buffers[i] = buffers[i];
            jb__buffer_retain(buffers[i]);
        }
        stream->holds[(stream->holds_first + stream->holds_count) % stream->holds_capacity] = hold;
        stream->holds_count++;
    }
    bool release_now = ++stream->holds_since_release >= HOLDS_PER_RELEASE;
    if (release_now)
        stream->holds_since_release = 0;
    pthread_mutex_unlock(&stream->holds_mutex);
    if (!room) {
        /* No memory to remember the hold: wait, then nothing needs holding. */
        free(hold);
        stream->device->backend->stream_synchronize(stream->device, stream->native);
        jb__stream_release_holds(stream, true);
        return JB_OK;
    }
    if (release_now)
        jb__stream_release_holds(stream, false);
    return JB_OK;
}

jb_buffer *jb__array_buffer(const jb_array *array)
{
    return array->buffer;
}

jb_event *jb__array_ready_event(const jb_array *array)
{
    return array->ready;
}

void jb__array_set_ready(jb_array *array, jb_event *ready)
{
    jb__event_release(array->ready);
    array->ready = ready;
}

int jb__array_wrap(jb_array **out, jb_buffer *buf, jb_dtype dtype, const int64_t *shape, int ndim,
                   jb_event *ready)
{
    jb_array *array = calloc(1, sizeof *array);
    if (!array) {
        jb__buffer_release(buf);
        jb__event_release(ready);
        return jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory for an array");
    }
    array->device = buf->device;
    array->dtype = dtype;
    array->ndim = ndim;
    array->size = 1;
    for (int i = 0; i < ndim; i++) {
        array->shape[i] = shape[i];
        array->size *= shape[i];
    }
    array->buffer = buf;
    array->ready = ready;
    *out = array;
    return JB_OK;
}

/* Checks a shape and returns its element count and byte size without overflow. */
static int shape_bytes(const int64_t *shape, int ndim, jb_dtype dtype, size_t *out_bytes)
{
    JB_RETURN_IF(!jb_dtype_name(dtype), JB_ERR_INVALID_ARGUMENT, "unknown dtype %d", (int)dtype);
    JB_RETURN_IF(ndim < 0 || ndim > JB_MAX_NDIM, JB_ERR_INVALID_ARGUMENT,
                 "ndim %d is outside 0..%d", ndim, JB_MAX_NDIM);
    JB_RETURN_IF(ndim > 0 && !shape, JB_ERR_INVALID_ARGUMENT, "shape is NULL");
    uint64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        JB_RETURN_IF(shape[i] < 0, JB_ERR_INVALID_ARGUMENT, "dimension %d is negative (%lld)", i,
                     (long long)shape[i]);
        JB_RETURN_IF(shape[i] > 0 && count > (UINT64_MAX / 8) / (uint64_t)shape[i],
                     JB_ERR_INVALID_ARGUMENT, "the shape's element count overflows");
        count *= (uint64_t)shape[i];
    }
    JB_RETURN_IF(count > (uint64_t)SIZE_MAX / 8, JB_ERR_INVALID_ARGUMENT, "array too large");
    *out_bytes = (size_t)count * jb_dtype_size(dtype);
    return JB_OK;
}

jb_status jb_array_from_host(jb_array **out, jb_device *device, jb_dtype dtype,
                             const int64_t *shape, int ndim, const void *data)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_array_from_host: out is NULL");
    *out = NULL;
    JB_RETURN_IF(!device, JB_ERR_INVALID_ARGUMENT, "jb_array_from_host: device is NULL");
    size_t bytes;
    JB_FORWARD_IF_ERROR(shape_bytes(shape, ndim, dtype, &bytes));
    JB_RETURN_IF(bytes > 0 && !data, JB_ERR_INVALID_ARGUMENT, "jb_array_from_host: data is NULL");
    jb_stream *stream;
    JB_FORWARD_IF_ERROR(jb__current_stream(device, &stream));
    jb_buffer *buf;
    JB_FORWARD_IF_ERROR(jb__buffer_new(device, bytes, &buf));
    jb_event *ready = NULL;
    int status = JB_OK;
    if (bytes > 0)
        status = device->backend->memcpy_htod(device, stream->native, buf->ptr, data, bytes);
    if (status == JB_OK)
        status = jb__event_acquire(device, &ready);
    if (status == JB_OK)
        status = jb__event_record(ready, stream);
    if (status != JB_OK) {
        jb__event_release(ready);
        jb__buffer_release(buf);
        return status;
    }
    /* The copy may still write into the buffer: it must not go idle before the copy is done. */
    if (bytes > 0)
        jb__stream_hold(stream, &buf, 1, ready);
    return jb__array_wrap(out, buf, dtype, shape, ndim, ready);
}

jb_status jb_array_arange(jb_array **out, jb_device *device, int64_t n, jb_dtype dtype)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_array_arange: out is NULL");
    *out = NULL;
    JB_RETURN_IF(!device, JB_ERR_INVALID_ARGUMENT, "jb_array_arange: device is NULL");
    JB_RETURN_IF(n < 0, JB_ERR_INVALID_ARGUMENT, "jb_array_arange: n is negative (%lld)",
                 (long long)n);
    size_t bytes;
    JB_FORWARD_IF_ERROR(shape_bytes(&n, 1, dtype, &bytes));
    void *host = malloc(bytes ? bytes : 1);
    JB_RETURN_IF(!host, JB_ERR_OUT_OF_MEMORY, "no memory for %lld elements", (long long)n);
    for (int64_t i = 0; i < n; i++) {
        if (dtype == JB_F32)
            ((float *)host)[i] = (float)i;
        else
            ((int32_t *)host)[i] = (int32_t)i;
    }
    int status = jb_array_from_host(out, device, dtype, &n, 1, host);
    free(host);
    return status;
}

void jb_array_free(jb_array *array)
{
    if (!array)
        return;
    jb__event_release(array->ready);
    jb__buffer_release(array->buffer);
    free(array);
}

jb_status jb_array_eval(jb_array *array)
{
    JB_RETURN_IF(!array, JB_ERR_INVALID_ARGUMENT, "jb_array_eval: array is NULL");
    if (array->ready)
        JB_FORWARD_IF_ERROR(
            array->device->backend->event_synchronize(array->device, array->ready->native));
    return JB_OK;
}

jb_status jb_array_read(const jb_array *array, void *dst, size_t dst_bytes)
{
    JB_RETURN_IF(!array, JB_ERR_INVALID_ARGUMENT, "jb_array_read: array is NULL");
    JB_RETURN_IF(!dst && dst_bytes > 0, JB_ERR_INVALID_ARGUMENT, "jb_array_read: dst is NULL");
    JB_RETURN_IF(dst_bytes != array->buffer->bytes, JB_ERR_SHAPE,
                 "jb_array_read: the array holds %zu bytes, the destination %zu",
                 array->buffer->bytes, dst_bytes);
    JB_FORWARD_IF_ERROR(jb_array_eval((jb_array *)array));
    if (dst_bytes == 0)
        return JB_OK;
    jb_stream *stream;
    JB_FORWARD_IF_ERROR(jb__current_stream(array->device, &stream));
    return array->device->backend->memcpy_dtoh(array->device, stream->native, dst,
                                               array->buffer->ptr, dst_bytes);
}

jb_device *jb_array_device(const jb_array *array)
{
    return array ? array->device : NULL;
}

jb_dtype jb_array_dtype(const jb_array *array)
{
    return array ? array->dtype : JB_F32;
}

int jb_array_ndim(const jb_array *array)
{
    return array ? array->ndim : 0;
}

const int64_t *jb_array_shape(const jb_array *array)
{
    return array ? array->shape : NULL;
}

int64_t jb_array_size(const jb_array *array)
{
    return array ? array->size : 0;
}
