/*
 * Streams and the thread-local default stream of each device. A thread's own default is created
 * on first use and destroyed when the thread exits; a stream the thread installs stays owned by
 * whoever created it. Installed streams form a stack per device: the top one is the default, and
 * uninstalling removes a stream wherever it is, so guards dropped out of order never bring back a
 * stream that was uninstalled (and perhaps freed) already.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct installed_stack {
    jb_stream **streams; /* borrowed; the last one overrides `own` */
    size_t depth, capacity;
} installed_stack;

typedef struct thread_streams {
    installed_stack installed[JB_MAX_DEVICES];
    jb_stream *own[JB_MAX_DEVICES]; /* created lazily, freed at thread exit */
} thread_streams;

static _Thread_local thread_streams *tls_streams;
static pthread_key_t streams_key;
static pthread_once_t streams_key_once = PTHREAD_ONCE_INIT;

static void thread_streams_destroy(void *p)
{
    thread_streams *ts = p;
    tls_streams = NULL; /* runs on the exiting thread itself */
    for (int i = 0; i < JB_MAX_DEVICES; i++) {
        jb_stream_free(ts->own[i]);
        free(ts->installed[i].streams);
    }
    free(ts);
}

static void streams_key_create(void)
{
    pthread_key_create(&streams_key, thread_streams_destroy);
}

static thread_streams *this_thread_streams(void)
{
    if (!tls_streams) {
        pthread_once(&streams_key_once, streams_key_create);
        thread_streams *ts = calloc(1, sizeof *ts);
        if (!ts)
            return NULL;
        pthread_setspecific(streams_key, ts);
        tls_streams = ts;
    }
    return tls_streams;
}

/* Removes the latest installation of `stream` from the thread's stack; false if there is none.
 * Sets no error: jb_stream_free uses it too. */
static bool remove_installed(thread_streams *ts, jb_stream *stream)
{
    installed_stack *stack = &ts->installed[stream->device->index];
    for (size_t i = stack->depth; i-- > 0;) {
        if (stack->streams[i] != stream)
            continue;
        memmove(&stack->streams[i], &stack->streams[i + 1],
                (stack->depth - i - 1) * sizeof *stack->streams);
        stack->depth--;
        return true;
    }
    return false;
}

jb_status jb_stream_new(jb_stream **out, jb_device *device)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_stream_new: out is NULL");
    *out = NULL;
    JB_RETURN_IF(!device, JB_ERR_INVALID_ARGUMENT, "jb_stream_new: device is NULL");
    jb_stream *stream = calloc(1, sizeof *stream);
    JB_RETURN_IF(!stream, JB_ERR_OUT_OF_MEMORY, "no memory for a stream");
    static atomic_uint_fast64_t next_id = 1;
    stream->device = device;
    stream->id = atomic_fetch_add(&next_id, 1);
    pthread_mutex_init(&stream->holds_mutex, NULL);
    int status = device->backend->stream_create(device, &stream->native);
    if (status != JB_OK) {
        free(stream);
        return status;
    }
    *out = stream;
    return JB_OK;
}

jb_status jb_new_thread_local_generation_stream(jb_stream **out, jb_device *device)
{
    return jb_stream_new(out, device);
}

void jb_stream_free(jb_stream *stream)
{
    if (!stream)
        return;
    /* A stream freed while installed on this thread must not stay its default. */
    while (tls_streams && remove_installed(tls_streams, stream))
        ;
    jb_device *dev = stream->device;
    dev->backend->stream_synchronize(dev, stream->native);
    jb__stream_release_holds(stream, true);
    dev->backend->stream_destroy(dev, stream->native);
    pthread_mutex_destroy(&stream->holds_mutex);
    free(stream->holds);
    free(stream);
}

jb_status jb_stream_synchronize(jb_stream *stream)
{
    JB_RETURN_IF(!stream, JB_ERR_INVALID_ARGUMENT, "jb_stream_synchronize: stream is NULL");
    JB_FORWARD_IF_ERROR(
        stream->device->backend->stream_synchronize(stream->device, stream->native));
    jb__stream_release_holds(stream, true);
    return JB_OK;
}

jb_device *jb_stream_device(const jb_stream *stream)
{
    return stream ? stream->device : NULL;
}

int jb__current_stream(jb_device *dev, jb_stream **out)
{
    thread_streams *ts = this_thread_streams();
    JB_RETURN_IF(!ts, JB_ERR_OUT_OF_MEMORY, "no memory for the thread's streams");
    installed_stack *stack = &ts->installed[dev->index];
    if (stack->depth) {
        *out = stack->streams[stack->depth - 1];
        return JB_OK;
    }
    if (!ts->own[dev->index])
        JB_FORWARD_IF_ERROR(jb_stream_new(&ts->own[dev->index], dev));
    *out = ts->own[dev->index];
    return JB_OK;
}

jb_status jb_thread_local_default_stream(jb_stream **out, jb_device *device)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_thread_local_default_stream: out is NULL");
    *out = NULL;
    JB_RETURN_IF(!device, JB_ERR_INVALID_ARGUMENT,
                 "jb_thread_local_default_stream: device is NULL");
    return jb__current_stream(device, out);
}

jb_status jb_install_thread_local_default_stream(jb_stream *stream)
{
    JB_RETURN_IF(!stream, JB_ERR_INVALID_ARGUMENT,
                 "jb_install_thread_local_default_stream: stream is NULL");
    thread_streams *ts = this_thread_streams();
    JB_RETURN_IF(!ts, JB_ERR_OUT_OF_MEMORY, "no memory for the thread's streams");
    installed_stack *stack = &ts->installed[stream->device->index];
    if (stack->depth == stack->capacity) {
        size_t capacity = stack->capacity ? stack->capacity * 2 : 4;
        jb_stream **grown = realloc(stack->streams, capacity * sizeof *grown);
        JB_RETURN_IF(!grown, JB_ERR_OUT_OF_MEMORY, "no memory to install a stream");
        stack->streams = grown;
        stack->capacity = capacity;
    }
    stack->streams[stack->depth++] = stream;
    return JB_OK;
}

jb_status jb_uninstall_thread_local_default_stream(jb_stream *stream)
{
    JB_RETURN_IF(!stream, JB_ERR_INVALID_ARGUMENT,
                 "jb_uninstall_thread_local_default_stream: stream is NULL");
    thread_streams *ts = this_thread_streams();
    JB_RETURN_IF(!ts, JB_ERR_OUT_OF_MEMORY, "no memory for the thread's streams");
    JB_RETURN_IF(!remove_installed(ts, stream), JB_ERR_INVALID_ARGUMENT,
                 "jb_uninstall_thread_local_default_stream: the stream is not installed on this "
                 "thread");
    return JB_OK;
}
