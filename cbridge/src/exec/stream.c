/*
 * Streams and the thread-local default stream of each device. A thread's own default is created
 * on first use; the thread's exit lets go of it without waiting for its work (a busy stream is
 * left to its device and destroyed once a walk of the device's streams finds it idle, or finds
 * its device faulted: a query that fails). Streams
 * are reference-counted: the creator owns one reference (jb_stream_free drops it), a retain
 * another, and each installation another, so a stream freed by its owner while some thread still
 * has it installed lives on until that thread lets go (a leaked guard leaks a reference, never
 * leaves a dangling default). Installed streams form a stack per device: the top one is the
 * default, and uninstalling removes a stream wherever it is, so guards dropped out of order never
 * bring back a stream that was uninstalled already. Each stream also keeps the holds on the
 * buffers its queued work uses, and spare events for its next launches (holds.c).
 */
#include "exec.h"

#include <stdlib.h>
#include <string.h>


typedef struct installed_stack {
    jb_stream **streams; /* one reference each; the last one overrides `own` */
    size_t depth, capacity;
} installed_stack;

typedef struct thread_streams {
    installed_stack installed[JB_MAX_DEVICES];
    jb_stream *own[JB_MAX_DEVICES]; /* created lazily, freed at thread exit */
} thread_streams;

static thread_streams *thread_streams_create(void)
{
    return calloc(1, sizeof(thread_streams));
}

static void reap_retired(jb_device *dev, bool exiting);

/* A thread's exit never waits for its streams' work: a busy stream is left to its device. */
static void thread_streams_destroy(thread_streams *ts)
{
    for (int i = 0; i < JB_MAX_DEVICES; i++) {
        while (ts->installed[i].depth) {
            jb_stream *stream = ts->installed[i].streams[--ts->installed[i].depth];
            atomic_fetch_sub_explicit(&stream->installs, 1, memory_order_relaxed);
            jb__stream_let_go(stream);
        }
        free(ts->installed[i].streams);
        if (ts->own[i]) {
            jb_device *dev = ts->own[i]->device;
            jb__stream_let_go(ts->own[i]);
            reap_retired(dev, true);
        }
    }
    free(ts);
}

JB_THREAD_LOCAL(thread_streams, this_thread_streams, thread_streams_create, thread_streams_destroy)

/* Removes the latest installation of `stream` from the thread's stack and drops its reference;
 * false if there is none. Sets no error: jb_stream_free uses it too. */
static bool remove_installed(thread_streams *ts, jb_stream *stream)
{
    installed_stack *stack = &ts->installed[stream->device->index];
    for (size_t i = stack->depth; i-- > 0;) {
        if (stack->streams[i] != stream)
            continue;
        memmove(&stack->streams[i], &stack->streams[i + 1],
                (stack->depth - i - 1) * sizeof *stack->streams);
        stack->depth--;
        atomic_fetch_sub_explicit(&stream->installs, 1, memory_order_relaxed);
        jb__stream_release(stream);
        return true;
    }
    return false;
}

jb_status jb_stream_new_with_priority(jb_stream **out, jb_device *device, int priority)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_stream_new: out is NULL");
    *out = NULL;
    JB_RETURN_IF(!device, JB_ERR_INVALID_ARGUMENT, "jb_stream_new: device is NULL");
    /* A new thread's stream: exited threads' streams whose work ended (or device faulted) go. */
    reap_retired(device, false);
    /* One scale on every device: 0 normal, higher more urgent, clamped to what it offers. */
    if (priority < 0)
        priority = 0;
    if (priority > device->max_stream_priority)
        priority = device->max_stream_priority;
    jb_stream *stream = calloc(1, sizeof *stream);
    JB_RETURN_IF(!stream, JB_ERR_OUT_OF_MEMORY, "no memory for a stream");
    static atomic_uint_fast64_t next_id = 1;
    stream->device = device;
    stream->id = atomic_fetch_add(&next_id, 1);
    stream->generation = atomic_load_explicit(&jb__fork_generation, memory_order_relaxed);
    atomic_init(&stream->refs, 1);
    jb__mutex_init_spinning(&stream->holds_mutex);
    int status = device->backend->stream_create(device, priority, &stream->native);
    if (status != JB_OK) {
        free(stream);
        return status;
    }
    pthread_mutex_lock(&device->streams_mutex);
    stream->device_next = device->streams;
    if (device->streams)
        device->streams->device_prev = stream;
    device->streams = stream;
    pthread_mutex_unlock(&device->streams_mutex);
    *out = stream;
    return JB_OK;
}

jb_status jb_stream_new(jb_stream **out, jb_device *device)
{
    return jb_stream_new_with_priority(out, device, 0);
}

int jb_device_max_stream_priority(const jb_device *device)
{
    return device ? device->max_stream_priority : 0;
}

jb_status jb_stream_priority(int *out, const jb_stream *stream)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_stream_priority: out is NULL");
    *out = 0;
    JB_RETURN_IF(!stream, JB_ERR_INVALID_ARGUMENT, "jb_stream_priority: stream is NULL");
    JB_FORWARD_IF_ERROR(jb__stream_check_process(stream, "jb_stream_priority"));
    int priority = stream->device->backend->stream_priority(stream->device, stream->native);
    if (priority < 0)
        return -priority;
    *out = priority;
    return JB_OK;
}

jb_status jb_new_thread_local_generation_stream(jb_stream **out, jb_device *device)
{
    return jb_stream_new(out, device);
}

static bool from_this_process(const jb_stream *stream)
{
    return stream->generation == atomic_load_explicit(&jb__fork_generation, memory_order_relaxed);
}

int jb__stream_check_process(const jb_stream *stream, const char *what)
{
    JB_RETURN_IF(!from_this_process(stream), JB_ERR_INVALID_ARGUMENT,
                 "%s: the stream was created before this process forked; a forked child uses "
                 "streams it creates itself (its thread-local default streams are new)",
                 what);
    return JB_OK;
}

void jb__stream_retain(jb_stream *stream)
{
    atomic_fetch_add_explicit(&stream->refs, 1, memory_order_relaxed);
}

#ifdef JB_TEST_HOOKS
static _Atomic(jb_test_pause_fn) test_unlink_pause;
static void *_Atomic test_unlink_pause_ctx;

void jb__test_set_unlink_pause(jb_test_pause_fn fn, void *ctx)
{
    atomic_store(&test_unlink_pause_ctx, ctx);
    atomic_store(&test_unlink_pause, fn);
}

static void unlink_pause(jb_stream *stream)
{
    jb_test_pause_fn fn = atomic_load(&test_unlink_pause);
    if (fn)
        fn(atomic_load(&test_unlink_pause_ctx), stream);
}
#else
static void unlink_pause(jb_stream *stream)
{
    (void)stream;
}
#endif

/* Drops a reference; true when it was the last of a stream of this process (the caller then
 * destroys it or retires it). */
static bool last_reference(jb_stream *stream)
{
    if (!stream || atomic_fetch_sub_explicit(&stream->refs, 1, memory_order_acq_rel) != 1)
        return false;
    /* A parent's stream: its worker thread is the parent's, waiting or joining here would hang. */
    return from_this_process(stream);
}

static void destroy(jb_stream *stream);

void jb__stream_release(jb_stream *stream)
{
    if (last_reference(stream))
        destroy(stream);
}

void jb__stream_let_go(jb_stream *stream)
{
    if (!last_reference(stream))
        return;
    if (atomic_load_explicit(&stream->reaped, memory_order_acquire) ||
        jb__stream_idle(stream) == 1) {
        destroy(stream); /* its wait returns at once */
        return;
    }
    /* The device's reference now: walks may retain it again, and the one that finds it idle
     * lets go of it (reap). */
    atomic_store_explicit(&stream->refs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&stream->device->retired_streams, 1, memory_order_relaxed);
    atomic_store_explicit(&stream->retired, true, memory_order_release);
}

int jb__stream_refuse_capture(jb_stream *stream, const char *what)
{
    JB_RETURN_IF(atomic_load_explicit(&stream->capture, memory_order_acquire) != NULL,
                 JB_ERR_INVALID_ARGUMENT,
                 "%s: the stream is capturing a graph, which holds kernel launches only: make "
                 "and read arrays, and wait for the stream, before jb_graph_begin_capture or "
                 "after jb_graph_end_capture (or on another stream)",
                 what);
    return JB_OK;
}

/* kernels/graph.c's, handed over before its first capture begins: this layer may not call up. */
static void (*_Atomic capture_abandon)(jb_stream *stream);

void jb__stream_set_capture_abandon(void (*abandon)(jb_stream *stream))
{
    atomic_store_explicit(&capture_abandon, abandon, memory_order_release);
}

/* Waits for the stream's work, unlinks it and destroys it: no reference is left. */
static void destroy(jb_stream *stream)
{
    jb_device *dev = stream->device;
    /* Freed while capturing: nothing of the capture is kept. */
    if (atomic_load_explicit(&stream->capture, memory_order_acquire))
        atomic_load_explicit(&capture_abandon, memory_order_acquire)(stream);
    /* Listed until its work is done: a write on another stream may still wait for a read here. */
    dev->backend->stream_synchronize(dev, stream->native);
    unlink_pause(stream);
    pthread_mutex_lock(&dev->streams_mutex);
    if (stream->device_prev)
        stream->device_prev->device_next = stream->device_next;
    else
        dev->streams = stream->device_next;
    if (stream->device_next)
        stream->device_next->device_prev = stream->device_prev;
    pthread_mutex_unlock(&dev->streams_mutex);
    jb__stream_release_holds(stream, true);
    jb__stream_give_back_events(stream);
    dev->backend->stream_destroy(dev, stream->native);
    pthread_mutex_destroy(&stream->holds_mutex);
    free(stream->holds);
    free(stream);
}

void jb_stream_free(jb_stream *stream)
{
    if (!stream)
        return;
    /* A stream freed while installed on this thread must not stay its default. */
    while (this_thread_streams_tls && remove_installed(this_thread_streams_tls, stream))
        ;
    jb__stream_release(stream);
}

int jb__stream_wait_for_readers(jb_stream *waiter, const uint64_t *ids, size_t n,
                                const jb_buffer *held)
{
    enum { STACK_EVENTS = 16 };
    jb_event *stack_events[STACK_EVENTS], **events = stack_events;
    size_t count = 0, capacity = STACK_EVENTS;
    jb_device *dev = waiter->device;
    int status = JB_OK;
    /* The events are taken under streams_mutex, which keeps a stream being destroyed (its work
     * still running) linked; the waits, driver calls, are queued after it is let go. */
    pthread_mutex_lock(&dev->streams_mutex);
    for (jb_stream *s = dev->streams; s; s = s->device_next) {
        bool named = false;
        for (size_t i = 0; !named && i < n; i++)
            named = s->id == ids[i];
        /* A parent's stream has no worker here: its work never ends in this process. */
        if ((!named && !held) || s == waiter || !from_this_process(s))
            continue;
        if (count == capacity) {
            jb_event **grown = jb__malloc_array(capacity, 2 * sizeof *grown);
            if (!grown) {
                status = jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory to wait for %zu streams",
                                  2 * capacity);
                break;
            }
            memcpy(grown, events, count * sizeof *grown);
            if (events != stack_events)
                free(events);
            events = grown, capacity *= 2;
        }
        if ((events[count] = jb__stream_newest_hold_event(s, named ? NULL : held)) != NULL)
            count++;
    }
    pthread_mutex_unlock(&dev->streams_mutex);
    for (size_t i = 0; i < count; i++) {
        if (status == JB_OK)
            status = jb__event_order_before(events[i], waiter);
        jb__event_release(events[i]);
    }
    if (events != stack_events)
        free(events);
    return status;
}

/* A reference on `stream` unless its last one is gone: a stream at 0 is being destroyed by
 * another thread, which unlinks it under streams_mutex (held by the caller); an increment would
 * bring it back and have it destroyed twice. */
static bool retain_unless_dying(jb_stream *stream)
{
    unsigned refs = atomic_load_explicit(&stream->refs, memory_order_relaxed);
    do {
        if (refs == 0)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&stream->refs, &refs, refs + 1,
                                                    memory_order_relaxed, memory_order_relaxed));
    return true;
}

typedef void (*stream_visit)(jb_stream *stream);

/* Calls `visit` on every stream of `dev` made in this process. Visits make driver calls and take
 * a stream's holds mutex: they run outside streams_mutex, on streams referenced under it a batch
 * at a time, so stream creation and destruction on other threads never wait for the walk. */
static void for_each_stream(jb_device *dev, stream_visit visit)
{
    enum { BATCH = 32 };
    jb_stream *batch[BATCH];
    jb_stream *resume = NULL; /* referenced: the walk goes on after it, still linked */
    do {
        size_t n = 0;
        pthread_mutex_lock(&dev->streams_mutex);
        jb_stream *s = resume ? resume->device_next : dev->streams;
        for (; s && n < BATCH; s = s->device_next)
            if (from_this_process(s) /* a parent's stream's events may never fire here */
                && retain_unless_dying(s))
                batch[n++] = s;
        pthread_mutex_unlock(&dev->streams_mutex);
        jb__stream_let_go(resume);
        resume = s ? batch[n - 1] : NULL; /* s: the batch filled up before the list's end */
        for (size_t i = 0; i < n; i++) {
            visit(batch[i]);
            if (batch[i] != resume)
                jb__stream_let_go(batch[i]); /* maybe the last: a walk never waits for work */
        }
    } while (resume);
}

/* Lets go of the device's reference on a retired stream found idle, or whose query failed (a
 * faulted device, which never answers again; its wait returns at once): once, whoever finds it.
 * The walk's reference, the last, destroys it. */
static void reap(jb_stream *stream)
{
    if (atomic_exchange_explicit(&stream->retired, false, memory_order_acq_rel)) {
        atomic_fetch_sub_explicit(&stream->device->retired_streams, 1, memory_order_relaxed);
        atomic_store_explicit(&stream->reaped, true, memory_order_release);
        jb__stream_let_go(stream); /* not the last: the walk holds one */
    }
}

/* A retired stream goes once idle (1) or once its query fails (negative). */
static void reap_if_done(jb_stream *stream)
{
    if (atomic_load_explicit(&stream->retired, memory_order_acquire) &&
        jb__stream_idle(stream) != 0)
        reap(stream);
}

/* A thread's exit: a retired stream goes once idle; a faulted device's are left to the next
 * other walk, whose destruction waits for the stream (at once on a faulted device), which an exit
 * never does. */
static void reap_if_idle(jb_stream *stream)
{
    if (atomic_load_explicit(&stream->retired, memory_order_acquire) &&
        jb__stream_idle(stream) == 1)
        reap(stream);
}

/* Destroys the streams exiting threads left to `dev` whose work has ended (or, unless `exiting`,
 * whose device faulted). */
static void reap_retired(jb_device *dev, bool exiting)
{
    if (atomic_load_explicit(&dev->retired_streams, memory_order_relaxed))
        for_each_stream(dev, exiting ? reap_if_idle : reap_if_done);
}

/* Lets go of the stream's fired holds (a failed query keeps them); a retired one goes if idle
 * or faulted. */
static void release_fired(jb_stream *stream)
{
    jb__stream_release_holds(stream, false);
    reap_if_done(stream);
}

/* A trim's visit: the fired holds, then the spare events (the pool keeps a few of them). */
static void release_fired_and_spares(jb_stream *stream)
{
    release_fired(stream);
    jb__stream_give_back_events(stream);
}

/* Lets go of every hold of a quiet, idle stream; a retired one goes too, or one whose query
 * failed (reap takes only retired ones). */
static void release_if_quiet(jb_stream *stream)
{
    if (jb__stream_release_if_quiet(stream) != 0)
        reap(stream);
}

int jb__buffer_new(jb_device *dev, size_t bytes, jb_buffer **out)
{
    if (jb__buffer_reuse(dev, bytes, out))
        return JB_OK;
    /* Before reserved memory grows: finished work on a stream that went quiet (no launch since
     * the previous walk) still holds what its arrays' owners freed, and no launch there will look
     * again. One walk at a time: a thread that misses meanwhile does not wait for it. */
    if (!atomic_exchange_explicit(&dev->walking_streams, true, memory_order_acquire)) {
        for_each_stream(dev, release_if_quiet);
        atomic_store_explicit(&dev->walking_streams, false, memory_order_release);
    }
    int status = jb__buffer_alloc(dev, bytes, out);
    if (status != JB_ERR_OUT_OF_MEMORY || bytes > ((size_t)1 << JB_BUFFER_MAX_LOG2))
        return status;
    /* Finished work that no one synchronized may still hold the memory: let go, try again. */
    for_each_stream(dev, release_fired);
    return jb__buffer_alloc(dev, bytes, out);
}

jb_status jb_device_trim(uint64_t *out_freed, jb_device *device)
{
    if (out_freed)
        *out_freed = 0;
    JB_RETURN_IF(!device, JB_ERR_INVALID_ARGUMENT, "jb_device_trim: device is NULL");
    for_each_stream(device, release_fired_and_spares);
    jb__event_pool_trim(device);
    uint64_t freed = jb__buffer_trim(device);
    if (out_freed)
        *out_freed = freed;
    return JB_OK;
}

jb_status jb_stream_synchronize(jb_stream *stream)
{
    JB_RETURN_IF(!stream, JB_ERR_INVALID_ARGUMENT, "jb_stream_synchronize: stream is NULL");
    JB_FORWARD_IF_ERROR(jb__stream_check_process(stream, "jb_stream_synchronize"));
    JB_FORWARD_IF_ERROR(jb__stream_refuse_capture(stream, "jb_stream_synchronize"));
    return jb__stream_wait(stream);
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
    if (ts->own[dev->index] && !from_this_process(ts->own[dev->index]))
        ts->own[dev->index] = NULL; /* the parent's, left as it is: a new one below */
    if (stack->depth && !from_this_process(stack->streams[stack->depth - 1]))
        stack->depth = 0; /* installed in the parent: none of them runs here */
    if (stack->depth) {
        *out = stack->streams[stack->depth - 1];
        return JB_OK;
    }
    if (!ts->own[dev->index])
        JB_FORWARD_IF_ERROR(jb_stream_new(&ts->own[dev->index], dev));
    *out = ts->own[dev->index];
    return JB_OK;
}

jb_stream *jb__current_stream_if_made(jb_device *dev)
{
    thread_streams *ts = this_thread_streams_tls;
    if (!ts)
        return NULL;
    installed_stack *stack = &ts->installed[dev->index];
    jb_stream *stream = stack->depth ? stack->streams[stack->depth - 1] : ts->own[dev->index];
    return stream && from_this_process(stream) ? stream : NULL;
}

int jb_stream_installations(const jb_stream *stream)
{
    return stream ? (int)atomic_load_explicit(&stream->installs, memory_order_relaxed) : 0;
}

jb_status jb_thread_local_default_stream(jb_stream **out, jb_device *device)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_thread_local_default_stream: out is NULL");
    *out = NULL;
    JB_RETURN_IF(!device, JB_ERR_INVALID_ARGUMENT,
                 "jb_thread_local_default_stream: device is NULL");
    return jb__current_stream(device, out);
}

jb_status jb_thread_local_default_stream_retain(jb_stream **out, jb_device *device)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT,
                 "jb_thread_local_default_stream_retain: out is NULL");
    *out = NULL;
    JB_RETURN_IF(!device, JB_ERR_INVALID_ARGUMENT,
                 "jb_thread_local_default_stream_retain: device is NULL");
    jb_stream *stream;
    JB_FORWARD_IF_ERROR(jb__current_stream(device, &stream));
    jb__stream_retain(stream);
    *out = stream;
    return JB_OK;
}

jb_status jb_install_thread_local_default_stream(jb_stream *stream)
{
    JB_RETURN_IF(!stream, JB_ERR_INVALID_ARGUMENT,
                 "jb_install_thread_local_default_stream: stream is NULL");
    JB_FORWARD_IF_ERROR(
        jb__stream_check_process(stream, "jb_install_thread_local_default_stream"));
    thread_streams *ts = this_thread_streams();
    JB_RETURN_IF(!ts, JB_ERR_OUT_OF_MEMORY, "no memory for the thread's streams");
    installed_stack *stack = &ts->installed[stream->device->index];
    if (stack->depth == stack->capacity) {
        size_t capacity = stack->capacity ? stack->capacity * 2 : 4;
        jb_stream **grown = jb__realloc_array(stack->streams, capacity, sizeof *grown);
        JB_RETURN_IF(!grown, JB_ERR_OUT_OF_MEMORY, "no memory to install a stream");
        stack->streams = grown;
        stack->capacity = capacity;
    }
    atomic_fetch_add_explicit(&stream->refs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&stream->installs, 1, memory_order_relaxed);
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
