/*
 * Arrays: a buffer (buffer.c) with a dtype, a shape and the event that marks the end of the
 * work producing it. A launch or a copy holds a reference on each buffer it uses until that
 * work is done (the stream keeps these holds, stream.c), so freeing an array early is safe.
 */
#include "exec.h"

#include <stdlib.h>
#include <string.h>

/* Streams, other than the one that made its contents, an array remembers reading it. */
#define ARRAY_READERS 4

struct jb_array {
    jb_device *device;
    jb_dtype dtype;
    int ndim;
    int64_t shape[JB_MAX_NDIM];
    int64_t size;
    jb_buffer *buffer;
    jb_event *ready; /* NULL: nothing pending */
    /* Who read the contents `ready` marks: a write on another stream must wait for them. */
    atomic_bool read_where_made; /* read on `ready`'s own stream */
    atomic_bool read_by_many;    /* more reading streams than slots: a write looks for them in
                                  * every stream's holds */
    _Atomic uint64_t readers[ARRAY_READERS]; /* other reading streams' ids; 0: a free slot */
    /* Bounds-checked launches that wrote it or what it was made from (bounds.c). */
    size_t num_reports;
    jb_bounds_report *reports[JB_ARRAY_REPORTS];
    /* The owner's reference and one per captured graph that uses it (graph.c): the owner's free
     * and the last graph's free each let go, and the last one frees. */
    atomic_uint refs;
    bool owner_freed;
};

/* Each thread keeps a few freed array records and reuses them: a warm launch's output array
 * costs no malloc (a record freed here and reused there would cost two, one on each side). */
#define THREAD_ARRAYS 32
/* A freed record is reused (or given back to malloc) only after this many more records were
 * freed on its thread: a second free of an array until then finds the record still freed and is
 * caught. A help against a common bug, not a promise: a second free is undefined (jitbridge.h). */
#define QUARANTINE 16
/* Under AddressSanitizer records go back to malloc, so that a use after free or a second free
 * is caught there, every one. */
#if defined(__SANITIZE_ADDRESS__)
#define KEEP_RECORDS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KEEP_RECORDS 0
#endif
#endif
#ifndef KEEP_RECORDS
#define KEEP_RECORDS 1
#endif

/* Freed records, oldest first from `first`: taken from the front, given from the back. */
typedef struct thread_arrays {
    size_t first, count;
    jb_array *records[THREAD_ARRAYS];
} thread_arrays;

static thread_arrays *thread_arrays_create(void)
{
    return calloc(1, sizeof(thread_arrays));
}

static void thread_arrays_destroy(thread_arrays *ta)
{
    for (size_t i = 0; i < ta->count; i++)
        free(ta->records[(ta->first + i) % THREAD_ARRAYS]);
    free(ta);
}

JB_THREAD_LOCAL(thread_arrays, this_thread_arrays, thread_arrays_create, thread_arrays_destroy)

/* The oldest freed record, once QUARANTINE newer ones are behind it; else NULL. */
static jb_array *take_record(thread_arrays *ta)
{
    if (!ta || ta->count <= QUARANTINE)
        return NULL;
    jb_array *record = ta->records[ta->first];
    ta->first = (ta->first + 1) % THREAD_ARRAYS;
    ta->count--;
    return record;
}

/* Keeps a freed record; a full ring gives its oldest back to malloc (out of quarantine). */
static void keep_record(thread_arrays *ta, jb_array *record)
{
    if (ta->count == THREAD_ARRAYS) {
        free(ta->records[ta->first]);
        ta->first = (ta->first + 1) % THREAD_ARRAYS;
        ta->count--;
    }
    ta->records[(ta->first + ta->count++) % THREAD_ARRAYS] = record;
}

jb_buffer *jb__array_buffer(const jb_array *array)
{
    return array->buffer;
}

jb_event *jb__array_ready_event(const jb_array *array)
{
    return array->ready;
}

/* A read on another stream than the contents' maker: remembered in a free slot, once. */
static void note_reader(jb_array *array, uint64_t stream_id)
{
    if (atomic_load_explicit(&array->read_by_many, memory_order_relaxed))
        return;
    for (int i = 0; i < ARRAY_READERS; i++) {
        uint64_t seen = atomic_load_explicit(&array->readers[i], memory_order_relaxed);
        /* Several threads may read one array at once: a slot is taken by one of them. */
        if (!seen && atomic_compare_exchange_strong_explicit(&array->readers[i], &seen, stream_id,
                                                             memory_order_relaxed,
                                                             memory_order_relaxed))
            return;
        if (seen == stream_id)
            return;
    }
    atomic_store_explicit(&array->read_by_many, true, memory_order_relaxed);
}

jb_event *jb__array_ready_for_read(jb_array *array, const jb_stream *stream)
{
    jb_event *ready = array->ready;
    if (ready && ready->stream_id == stream->id) {
        /* The warm path on one stream: a load, and a store once per write. */
        if (!atomic_load_explicit(&array->read_where_made, memory_order_relaxed))
            atomic_store_explicit(&array->read_where_made, true, memory_order_relaxed);
        return ready;
    }
    note_reader(array, stream->id);
    return ready;
}

int jb__array_order_write(jb_array *array, jb_stream *stream)
{
    jb_event *ready = array->ready;
    uint64_t ids[ARRAY_READERS + 1];
    size_t n = 0;
    if (ready && ready->stream_id != stream->id) {
        JB_FORWARD_IF_ERROR(jb__event_order_before(ready, stream));
        if (atomic_load_explicit(&array->read_where_made, memory_order_relaxed))
            ids[n++] = ready->stream_id;
    }
    for (int i = 0; i < ARRAY_READERS; i++) {
        uint64_t id = atomic_load_explicit(&array->readers[i], memory_order_relaxed);
        if (id && id != stream->id)
            ids[n++] = id;
    }
    /* Past the slots, the reading streams are those whose holds still keep the buffer: a hold
     * lasts until its work is done, so a read whose hold is gone needs no wait. */
    const jb_buffer *held =
        atomic_load_explicit(&array->read_by_many, memory_order_relaxed) ? array->buffer : NULL;
    return n || held ? jb__stream_wait_for_readers(stream, ids, n, held) : JB_OK;
}

void jb__array_written(jb_array *array, jb_event *done)
{
    atomic_store_explicit(&array->read_where_made, false, memory_order_relaxed);
    atomic_store_explicit(&array->read_by_many, false, memory_order_relaxed);
    for (int i = 0; i < ARRAY_READERS; i++)
        atomic_store_explicit(&array->readers[i], 0, memory_order_relaxed);
    jb__array_set_ready(array, done);
}

jb_bounds_report *const *jb__array_reports(const jb_array *array, size_t *count)
{
    *count = array->num_reports;
    return array->reports;
}

void jb__array_set_reports(jb_array *array, jb_bounds_report *const *reports, size_t count)
{
    for (size_t i = 0; i < count; i++)
        jb__bounds_report_retain(reports[i]);
    for (size_t i = 0; i < array->num_reports; i++)
        jb__bounds_report_release(array->reports[i]);
    memcpy(array->reports, reports, count * sizeof *reports);
    array->num_reports = count;
}

void jb__array_set_ready(jb_array *array, jb_event *ready)
{
    jb__event_release(array->ready);
    array->ready = ready;
}

int jb__array_wrap(jb_array **out, jb_buffer *buf, jb_dtype dtype, const int64_t *shape, int ndim,
                   jb_event *ready)
{
    jb_array *array = take_record(this_thread_arrays());
    if (!array)
        array = malloc(sizeof *array);
    if (!array) {
        jb__buffer_release(buf);
        jb__event_release(ready);
        return jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory for an array");
    }
    *array = (jb_array){.device = buf->device, .dtype = dtype, .ndim = ndim, .size = 1,
                        .buffer = buf, .ready = ready};
    atomic_init(&array->refs, 1);
    for (int i = 0; i < ndim; i++) {
        array->shape[i] = shape[i];
        array->size *= shape[i];
    }
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
        JB_RETURN_IF(!jb__mul_u64(count, (uint64_t)shape[i], &count), JB_ERR_INVALID_ARGUMENT,
                     "the shape's element count overflows");
    }
    /* At most 1/8 of the address space: its bytes fit a size_t, its count jb_array_size. */
    JB_RETURN_IF(count > (uint64_t)SIZE_MAX / 8 ||
                     !jb__mul_size((size_t)count, jb_dtype_size(dtype), out_bytes),
                 JB_ERR_INVALID_ARGUMENT, "array too large");
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
    /* Any other byte is not a C bool: kernels reading it are undefined. */
    for (size_t i = 0; dtype == JB_BOOL && i < bytes; i++)
        JB_RETURN_IF(((const unsigned char *)data)[i] > 1, JB_ERR_INVALID_ARGUMENT,
                     "jb_array_from_host: bool element %zu is %u, not 0 or 1", i,
                     ((const unsigned char *)data)[i]);
    jb_stream *stream;
    JB_FORWARD_IF_ERROR(jb__current_stream(device, &stream));
    JB_FORWARD_IF_ERROR(jb__stream_refuse_capture(stream, "jb_array_from_host"));
    jb_buffer *buf;
    JB_FORWARD_IF_ERROR(jb__buffer_new(device, bytes, &buf));
    jb_event *ready = NULL;
    int status = JB_OK;
    if (bytes > 0 && (status = device->backend->memcpy_htod(device, stream->native, buf->ptr,
                                                            data, bytes)) != JB_OK)
        goto done;
    /* The copy may still write into the buffer: it must not go idle before the copy is done. */
    if ((status = jb__stream_record_hold(stream, &ready, &buf, bytes > 0)) != JB_OK)
        goto done;
    return jb__array_wrap(out, buf, dtype, shape, ndim, ready);
done:
    jb__event_release(ready);
    jb__buffer_release(buf);
    return status;
}

/* Element i of an arange: the value i in `dtype`, rounded to nearest even for f16 and bf16,
 * wrapped modulo 2^8 for i8 and u8 (2^16 for i16 and u16), i != 0 for bool. */
static void arange_store(void *host, jb_dtype dtype, int64_t i)
{
    switch (dtype) {
    case JB_F32:
        ((float *)host)[i] = (float)i;
        break;
    case JB_I32:
        ((int32_t *)host)[i] = (int32_t)i;
        break;
    case JB_F16:
        ((uint16_t *)host)[i] = jb_f32_to_f16_bits((float)i);
        break;
    case JB_BF16:
        ((uint16_t *)host)[i] = jb_f32_to_bf16_bits((float)i);
        break;
    case JB_F64:
        ((double *)host)[i] = (double)i;
        break;
    case JB_I8:
    case JB_U8:
        ((uint8_t *)host)[i] = (uint8_t)i;
        break;
    case JB_U32:
        ((uint32_t *)host)[i] = (uint32_t)i;
        break;
    case JB_I64:
        ((int64_t *)host)[i] = i;
        break;
    case JB_BOOL:
        ((uint8_t *)host)[i] = i != 0;
        break;
    case JB_I16:
    case JB_U16:
        ((uint16_t *)host)[i] = (uint16_t)i;
        break;
    case JB_U64:
        ((uint64_t *)host)[i] = (uint64_t)i;
        break;
    case JB_DTYPE_INVALID:
        break;
    }
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
    for (int64_t i = 0; i < n; i++)
        arange_store(host, dtype, i);
    int status = jb_array_from_host(out, device, dtype, &n, 1, host);
    free(host);
    return status;
}

/* A new array of `shape` whose every element is `pattern` (pattern_bytes, the dtype's size),
 * filled on the device on the thread's default stream. */
static int filled(jb_array **out, jb_device *device, jb_dtype dtype, const int64_t *shape,
                  int ndim, const void *pattern)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_array_zeros/full: out is NULL");
    *out = NULL;
    JB_RETURN_IF(!device, JB_ERR_INVALID_ARGUMENT, "jb_array_zeros/full: device is NULL");
    size_t bytes;
    JB_FORWARD_IF_ERROR(shape_bytes(shape, ndim, dtype, &bytes));
    jb_stream *stream;
    JB_FORWARD_IF_ERROR(jb__current_stream(device, &stream));
    JB_FORWARD_IF_ERROR(jb__stream_refuse_capture(stream, "jb_array_zeros/full"));
    jb_buffer *buf;
    JB_FORWARD_IF_ERROR(jb__buffer_new(device, bytes, &buf));
    jb_event *ready = NULL;
    size_t size = jb_dtype_size(dtype);
    int status = JB_OK;
    if (bytes > 0 && (status = device->backend->fill(device, stream->native, buf->ptr,
                                                     bytes / size, pattern, size)) != JB_OK)
        goto done;
    /* The fill may still write into the buffer: it must not go idle before the fill is done. */
    if ((status = jb__stream_record_hold(stream, &ready, &buf, bytes > 0)) != JB_OK)
        goto done;
    return jb__array_wrap(out, buf, dtype, shape, ndim, ready);
done:
    jb__event_release(ready);
    jb__buffer_release(buf);
    return status;
}

jb_status jb_array_zeros(jb_array **out, jb_device *device, jb_dtype dtype, const int64_t *shape,
                         int ndim)
{
    static const uint64_t zero = 0;
    return filled(out, device, dtype, shape, ndim, &zero);
}

jb_status jb_array_full(jb_array **out, jb_device *device, const int64_t *shape, int ndim,
                        const jb_scalar *value)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_array_full: out is NULL");
    *out = NULL;
    JB_RETURN_IF(!value, JB_ERR_INVALID_ARGUMENT, "jb_array_full: value is NULL");
    JB_FORWARD_IF_ERROR(jb__scalar_check("jb_array_full", value));
    return filled(out, device, value->dtype, shape, ndim, &value->value);
}

/* Lets go of the array's contents and record: its last reference is gone. */
static void array_destroy(jb_array *array)
{
    jb__event_release(array->ready);
    jb__buffer_release(array->buffer);
    for (size_t i = 0; i < array->num_reports; i++)
        jb__bounds_report_release(array->reports[i]);
    array->buffer = NULL, array->ready = NULL, array->num_reports = 0;
    /* A thread that only frees (or is exiting) gives the record back to malloc. */
    thread_arrays *ta = this_thread_arrays_tls;
    if (KEEP_RECORDS && ta)
        keep_record(ta, array);
    else
        free(array);
}

void jb__array_retain(jb_array *array)
{
    atomic_fetch_add_explicit(&array->refs, 1, memory_order_relaxed);
}

void jb__array_release(jb_array *array)
{
    /* One reference is the owner's alone: nobody can take another while it lets go (a capture
     * that uses the array during its free is the caller's bug), so no atomic subtraction. */
    if (atomic_load_explicit(&array->refs, memory_order_acquire) == 1 ||
        atomic_fetch_sub_explicit(&array->refs, 1, memory_order_acq_rel) == 1)
        array_destroy(array);
}

void jb_array_free(jb_array *array)
{
    if (!array)
        return;
    /* A record in quarantine still reads as freed: that second free is caught. */
    if (!array->buffer || array->owner_freed) {
        jb__warn("jb_array_free: the array was freed already; this call does nothing");
        return;
    }
    array->owner_freed = true;
    jb__array_release(array);
}

jb_status jb_array_eval(jb_array *array)
{
    JB_RETURN_IF(!array, JB_ERR_INVALID_ARGUMENT, "jb_array_eval: array is NULL");
    if (array->ready)
        JB_FORWARD_IF_ERROR(jb__event_synchronize(array->ready));
    return array->num_reports ? jb__bounds_check(array->reports, array->num_reports) : JB_OK;
}

jb_status jb_array_read(const jb_array *array, void *dst, size_t dst_bytes)
{
    JB_RETURN_IF(!array, JB_ERR_INVALID_ARGUMENT, "jb_array_read: array is NULL");
    JB_RETURN_IF(!dst && dst_bytes > 0, JB_ERR_INVALID_ARGUMENT, "jb_array_read: dst is NULL");
    JB_RETURN_IF(dst_bytes != array->buffer->bytes, JB_ERR_SHAPE,
                 "jb_array_read: the array holds %zu bytes, the destination %zu",
                 array->buffer->bytes, dst_bytes);
    /* The copy itself uses no stream of the library's (none is made for it), but what the
     * capturing thread reads may be a captured launch's output, not written until a replay. */
    jb_stream *current = jb__current_stream_if_made(array->device);
    if (current)
        JB_FORWARD_IF_ERROR(jb__stream_refuse_capture(current, "jb_array_read"));
    JB_FORWARD_IF_ERROR(jb_array_eval((jb_array *)array));
    if (dst_bytes == 0)
        return JB_OK;
    return array->device->backend->memcpy_dtoh(array->device, dst, array->buffer->ptr, dst_bytes);
}

jb_device *jb_array_device(const jb_array *array)
{
    return array ? array->device : NULL;
}

jb_dtype jb_array_dtype(const jb_array *array)
{
    return array ? array->dtype : JB_DTYPE_INVALID;
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
