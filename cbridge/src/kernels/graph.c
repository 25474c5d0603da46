/*
 * Captured graphs: a stream's launches recorded once and replayed with one call. Between
 * jb_graph_begin_capture and jb_graph_end_capture the capturing thread's launches on the stream
 * run nothing: the backend records them (CUDA and HIP stream capture; the cpu a task list) and
 * this file records what the library must do around each replay, which a launch does at its
 * call: order the arrays the graph reads after their makers, and those it writes after their
 * readers on other streams (waits queued before the graph, never captured into it: a capture
 * may not wait on work outside it), hold every buffer until the replay is done, and give the
 * arrays it writes the replay's end as their event. The graph keeps a reference on each array
 * and buffer it uses, so freeing one while the graph exists is safe.
 *
 * A capture starts from a stream with no pending work (begin waits for it): an event recorded
 * lazily on a capturing stream would be captured, never fire. Another thread's launch on a
 * capturing stream is refused; one that raced with the start is caught at the end (the graph
 * holds work the library did not record) and the capture fails.
 */
#include "kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One captured launch: what a replay runs and the arguments the library may change. */
typedef struct graph_launch {
    void *node; /* the backend's handle of the launch in the graph */
    void *fn;
    uint32_t grid[3], block[3], shared_bytes;
    jb_launch_args args; /* points into the arrays below */
    void *pointers[JB_KERNEL_MAX_ARRAYS + 1];
    uint64_t sizes[JB_KERNEL_MAX_ARRAYS + 1];
    _Alignas(8) unsigned char scalars[JB_KERNEL_MAX_SLOTS * JB_SCALAR_SLOT];
    bool dirty; /* a scalar changed since the graph last had these arguments */
    /* The kernel's scalars, for jb_graph_set_scalar (the kernel may be freed meanwhile). */
    char *kernel_name;
    size_t num_scalars;
    jb_dtype scalar_dtypes[JB_KERNEL_MAX_ARRAYS];
    bool bounds_checked;
    jb_bounds_report *report; /* a bounds-checked launch's: each replay reads a fresh one */
    /* Its arrays, as indices into the graph's: inputs, then outputs. */
    size_t num_inputs, num_outputs;
    uint32_t arrays[JB_KERNEL_MAX_ARRAYS];
} graph_launch;

typedef struct graph_array {
    jb_array *array; /* a reference of the graph's */
    bool written;
} graph_array;

/* What a capture and the graph it becomes keep: launches, arrays and buffers. */
typedef struct graph_parts {
    graph_launch **launches;
    size_t num_launches, launches_capacity;
    graph_array *arrays;
    size_t num_arrays, arrays_capacity;
    jb_buffer **buffers; /* each once, a reference each */
    size_t num_buffers, buffers_capacity;
} graph_parts;

struct jb_capture {
    jb_stream *stream;
    pthread_t owner;
    size_t ops;     /* operations captured: launches and fills */
    bool poisoned;  /* something went wrong: end_capture fails and discards */
    char why[256];
    graph_parts parts;
};

/* One stream's latest replay: jb_graph_free waits for it. */
typedef struct graph_replay {
    uint64_t stream_id;
    jb_event *end;
} graph_replay;

struct jb_graph {
    jb_device *device;
    void *native;
    pthread_mutex_t mutex; /* launches, scalar updates and the replays' list */
    graph_parts parts;
    bool all_checked; /* every launch is bounds-checked */
    graph_replay *replays;
    size_t num_replays;
    struct jb_graph *prev, *next; /* in live_graphs */
};

/* Every graph, so that a forked child can make each one's mutex anew: a parent thread inside
 * jb_graph_launch at the fork held it, and the child may launch the graph too. A leaf lock,
 * taken only when a graph is made or freed, and at fork. */
static pthread_mutex_t live_graphs_mutex = PTHREAD_MUTEX_INITIALIZER;
static jb_graph *live_graphs;

/* fork.c's step 8. */
static void graphs_fork(jb_fork_phase phase)
{
    if (phase == JB_FORK_PREPARE) {
        pthread_mutex_lock(&live_graphs_mutex);
    } else if (phase == JB_FORK_PARENT) {
        pthread_mutex_unlock(&live_graphs_mutex);
    } else {
        for (jb_graph *g = live_graphs; g; g = g->next)
            pthread_mutex_init(&g->mutex, NULL);
        pthread_mutex_init(&live_graphs_mutex, NULL);
    }
}
JB_FORK_HANDLER(JB_FORK_GRAPHS, graphs_fork)

static void parts_free(jb_device *dev, graph_parts *p)
{
    (void)dev;
    for (size_t i = 0; i < p->num_launches; i++) {
        jb__bounds_report_release(p->launches[i]->report);
        free(p->launches[i]->kernel_name);
        free(p->launches[i]);
    }
    for (size_t i = 0; i < p->num_arrays; i++)
        jb__array_release(p->arrays[i].array);
    jb__buffer_release_many(p->buffers, p->num_buffers);
    free(p->launches);
    free(p->arrays);
    free(p->buffers);
    *p = (graph_parts){0};
}

/* Makes room for one more of `size` bytes in *items (count, capacity); false without memory. */
static bool grow(void **items, size_t count, size_t *capacity, size_t size)
{
    if (count < *capacity)
        return true;
    size_t more = *capacity ? 2 * *capacity : 8;
    void *grown = jb__realloc_array(*items, more, size);
    if (!grown)
        return false;
    *items = grown;
    *capacity = more;
    return true;
}

/* ---- the capture ---- */

static void poison(jb_capture *c, const char *why)
{
    if (!c->poisoned)
        snprintf(c->why, sizeof c->why, "%s", why);
    c->poisoned = true;
}

static int capture_failed(jb_capture *c, int status, const char *why)
{
    poison(c, why);
    return status;
}

int jb__stream_capture(jb_stream *stream, const char *what, jb_capture **out)
{
    jb_capture *c = atomic_load_explicit(&stream->capture, memory_order_acquire);
    *out = NULL;
    if (!c)
        return JB_OK;
    JB_RETURN_IF(!pthread_equal(c->owner, pthread_self()), JB_ERR_INVALID_ARGUMENT,
                 "%s: the stream is capturing a graph begun on another thread: only that thread "
                 "may launch on it until it ends the capture",
                 what);
    *out = c;
    return JB_OK;
}

void jb__capture_count_op(jb_capture *c)
{
    c->ops++;
}

/* The graph's buffer list gets `buffer` (a reference of its own), once. */
static int parts_add_buffer(graph_parts *p, jb_buffer *buffer)
{
    for (size_t i = 0; i < p->num_buffers; i++)
        if (p->buffers[i] == buffer)
            return JB_OK;
    JB_RETURN_IF(!grow((void **)&p->buffers, p->num_buffers, &p->buffers_capacity,
                       sizeof *p->buffers),
                 JB_ERR_OUT_OF_MEMORY, "no memory to capture a launch");
    jb__buffer_retain(buffer);
    p->buffers[p->num_buffers++] = buffer;
    return JB_OK;
}

int jb__capture_array(jb_capture *c, jb_array *array, bool written, uint32_t *out_index)
{
    graph_parts *p = &c->parts;
    for (size_t i = 0; i < p->num_arrays; i++) {
        if (p->arrays[i].array == array) {
            p->arrays[i].written |= written;
            *out_index = (uint32_t)i;
            return JB_OK;
        }
    }
    if (!grow((void **)&p->arrays, p->num_arrays, &p->arrays_capacity, sizeof *p->arrays))
        return capture_failed(c, jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory to capture a launch"),
                              "out of memory");
    jb__array_retain(array);
    p->arrays[p->num_arrays] = (graph_array){array, written};
    *out_index = (uint32_t)p->num_arrays++;
    return JB_OK;
}

int jb__capture_launch(jb_capture *c, const jb_staged_launch *st)
{
    jb_device *dev = st->dev;
    const jb_custom_kernel *k = st->kernel;
    graph_parts *p = &c->parts;
    bool empty = !st->args.total_threads; /* an empty batch issued nothing: no node to replay */
    c->ops += !empty; /* issued: the graph holds it now, whatever happens below */
    graph_launch *g = calloc(1, sizeof *g);
    if (!g || !(g->kernel_name = jb__strdup(k->name)) ||
        !grow((void **)&p->launches, p->num_launches, &p->launches_capacity,
              sizeof *p->launches)) {
        if (g)
            free(g->kernel_name);
        free(g);
        return capture_failed(c, jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory to capture a launch"),
                              "out of memory");
    }
    int status = empty ? JB_OK : dev->backend->capture_node(dev, st->stream->native, &g->node);
    for (size_t i = 0; status == JB_OK && i < st->args.count; i++)
        status = parts_add_buffer(p, st->buffers[i]);
    if (status != JB_OK) {
        free(g->kernel_name);
        free(g);
        return capture_failed(c, status, jb_last_error_message());
    }
    g->fn = st->fn;
    memcpy(g->grid, st->grid, sizeof g->grid);
    memcpy(g->block, st->block, sizeof g->block);
    g->shared_bytes = st->shared_bytes;
    memcpy(g->pointers, st->pointers, st->args.count * sizeof *g->pointers);
    memcpy(g->sizes, st->sizes, st->args.count * sizeof *g->sizes);
    memcpy(g->scalars, st->scalars, st->args.num_scalars * JB_SCALAR_SLOT);
    g->args = st->args;
    g->args.pointers = g->pointers;
    g->args.sizes = g->sizes;
    g->args.scalars = g->scalars;
    g->num_scalars = k->num_scalars;
    memcpy(g->scalar_dtypes, k->scalar_dtypes, k->num_scalars * sizeof *g->scalar_dtypes);
    g->bounds_checked = k->bounds_checked;
    if (st->report) {
        jb__bounds_report_retain(st->report);
        g->report = st->report;
    }
    g->num_inputs = k->num_inputs;
    g->num_outputs = k->num_outputs;
    memcpy(g->arrays, st->captured, (k->num_inputs + k->num_outputs) * sizeof *g->arrays);
    p->launches[p->num_launches++] = g;
    return JB_OK;
}

void jb__capture_poison(jb_capture *c, const char *why)
{
    poison(c, why);
}

jb_status jb_graph_begin_capture(jb_stream *stream)
{
    JB_RETURN_IF(!stream, JB_ERR_INVALID_ARGUMENT, "jb_graph_begin_capture: stream is NULL");
    JB_FORWARD_IF_ERROR(jb__stream_check_process(stream, "jb_graph_begin_capture"));
    jb_device *dev = stream->device;
    JB_RETURN_IF(!dev->backend->capture_begin, JB_ERR_UNSUPPORTED,
                 "jb_graph_begin_capture: %s has no graphs (its driver lacks them)", dev->name);
    JB_RETURN_IF(atomic_load_explicit(&stream->capture, memory_order_acquire) != NULL,
                 JB_ERR_INVALID_ARGUMENT,
                 "jb_graph_begin_capture: the stream is capturing a graph already (captures do "
                 "not nest: end that one first)");
    jb_capture *c = calloc(1, sizeof *c);
    JB_RETURN_IF(!c, JB_ERR_OUT_OF_MEMORY, "no memory for a capture");
    jb__stream_set_capture_abandon(jb__capture_abandon); /* before any stream captures */
    c->stream = stream;
    c->owner = pthread_self();
    /* No pending work: an event recorded late on a capturing stream would be captured. */
    int status = jb__stream_wait(stream);
    pthread_mutex_lock(&stream->holds_mutex);
    if (status == JB_OK && atomic_load_explicit(&stream->capture, memory_order_relaxed))
        status = jb__fail(JB_ERR_INVALID_ARGUMENT,
                          "jb_graph_begin_capture: another thread began a capture on the stream "
                          "meanwhile");
    if (status == JB_OK)
        status = dev->backend->capture_begin(dev, stream->native);
    if (status == JB_OK)
        atomic_store_explicit(&stream->capture, c, memory_order_release);
    pthread_mutex_unlock(&stream->holds_mutex);
    if (status != JB_OK)
        free(c);
    return status;
}

/* Ends the stream's capture (the caller checked it is this thread's): the backend's executable
 * graph in *out_native, or an error and nothing kept. With `discard`, nothing is kept. */
static int capture_finish(jb_stream *stream, jb_capture *c, bool discard, void **out_native)
{
    jb_device *dev = stream->device;
    pthread_mutex_lock(&stream->holds_mutex);
    atomic_store_explicit(&stream->capture, NULL, memory_order_release);
    pthread_mutex_unlock(&stream->holds_mutex);
    discard = discard || c->poisoned;
    void *native = NULL;
    int status = dev->backend->capture_end(dev, stream->native, c->ops, discard, &native);
    if (status == JB_OK && c->poisoned)
        status = jb__fail(JB_ERR_INVALID_ARGUMENT,
                          "jb_graph_end_capture: the capture failed and was discarded: %s",
                          c->why);
    if (status == JB_OK && !discard && !c->parts.num_launches) {
        dev->backend->graph_destroy(dev, native);
        status = jb__fail(JB_ERR_INVALID_ARGUMENT,
                          "jb_graph_end_capture: nothing was launched on the stream since "
                          "jb_graph_begin_capture");
    }
    *out_native = status == JB_OK && !discard ? native : NULL;
    return status;
}

void jb__capture_abandon(jb_stream *stream)
{
    jb_capture *c = atomic_load_explicit(&stream->capture, memory_order_acquire);
    if (!c)
        return;
    void *native;
    capture_finish(stream, c, true, &native);
    parts_free(stream->device, &c->parts);
    free(c);
}

jb_status jb_graph_end_capture(jb_graph **out, jb_stream *stream)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_graph_end_capture: out is NULL");
    *out = NULL;
    JB_RETURN_IF(!stream, JB_ERR_INVALID_ARGUMENT, "jb_graph_end_capture: stream is NULL");
    jb_capture *c = atomic_load_explicit(&stream->capture, memory_order_acquire);
    JB_RETURN_IF(!c, JB_ERR_INVALID_ARGUMENT,
                 "jb_graph_end_capture: the stream is not capturing (no jb_graph_begin_capture)");
    JB_RETURN_IF(!pthread_equal(c->owner, pthread_self()), JB_ERR_INVALID_ARGUMENT,
                 "jb_graph_end_capture: the capture was begun on another thread, which ends it");
    jb_device *dev = stream->device;
    jb_graph *graph = calloc(1, sizeof *graph);
    void *native = NULL;
    int status = capture_finish(stream, c, !graph, &native);
    if (status == JB_OK && !graph)
        status = jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory for a graph");
    if (status != JB_OK) {
        parts_free(dev, &c->parts);
        free(c);
        free(graph);
        return status;
    }
    graph->device = dev;
    graph->native = native;
    graph->parts = c->parts;
    graph->all_checked = true;
    for (size_t i = 0; i < graph->parts.num_launches; i++)
        graph->all_checked &= graph->parts.launches[i]->bounds_checked;
    pthread_mutex_init(&graph->mutex, NULL);
    pthread_mutex_lock(&live_graphs_mutex);
    JB_LIST_PUSH(live_graphs, graph);
    pthread_mutex_unlock(&live_graphs_mutex);
    free(c);
    *out = graph;
    return JB_OK;
}

/* ---- the graph ---- */

size_t jb_graph_launch_count(const jb_graph *graph)
{
    return graph ? graph->parts.num_launches : 0;
}

int jb_graph_bounds_checked(const jb_graph *graph)
{
    return graph && graph->all_checked;
}

jb_status jb_graph_set_scalar(jb_graph *graph, size_t launch, size_t scalar,
                              const jb_scalar *value)
{
    JB_RETURN_IF(!graph || !value, JB_ERR_INVALID_ARGUMENT,
                 "jb_graph_set_scalar: graph or value is NULL");
    JB_RETURN_IF(launch >= graph->parts.num_launches, JB_ERR_INVALID_ARGUMENT,
                 "jb_graph_set_scalar: the graph has %zu launches, not %zu",
                 graph->parts.num_launches, launch + 1);
    graph_launch *g = graph->parts.launches[launch];
    JB_RETURN_IF(scalar >= g->num_scalars, JB_ERR_INVALID_ARGUMENT,
                 "jb_graph_set_scalar: kernel '%s' (launch %zu) takes %zu scalars, not %zu",
                 g->kernel_name, launch, g->num_scalars, scalar + 1);
    JB_RETURN_IF(value->dtype != g->scalar_dtypes[scalar], JB_ERR_SHAPE,
                 "jb_graph_set_scalar: scalar %zu of kernel '%s' is %s, not %s", scalar,
                 g->kernel_name, jb_dtype_name(g->scalar_dtypes[scalar]),
                 jb_dtype_name(value->dtype) ? jb_dtype_name(value->dtype) : "no dtype");
    JB_FORWARD_IF_ERROR(jb__scalar_check("jb_graph_set_scalar", value));
    pthread_mutex_lock(&graph->mutex);
    unsigned char *slot = g->scalars + scalar * JB_SCALAR_SLOT;
    memset(slot, 0, JB_SCALAR_SLOT);
    memcpy(slot, &value->value, jb_dtype_size(value->dtype));
    g->dirty = true;
    pthread_mutex_unlock(&graph->mutex);
    return JB_OK;
}

/* Remembers `end` as the replay of `stream_id` to wait for at free (under the graph's mutex). */
static void note_replay(jb_graph *graph, uint64_t stream_id, jb_event *end)
{
    for (size_t i = 0; i < graph->num_replays; i++) {
        if (graph->replays[i].stream_id == stream_id) {
            jb__event_release(graph->replays[i].end);
            jb__event_retain(end);
            graph->replays[i].end = end;
            return;
        }
    }
    graph_replay *grown =
        jb__realloc_array(graph->replays, graph->num_replays + 1, sizeof *grown);
    if (!grown) { /* no memory to remember it: wait now, so that free need not */
        jb__event_synchronize(end);
        return;
    }
    graph->replays = grown;
    jb__event_retain(end);
    graph->replays[graph->num_replays++] = (graph_replay){stream_id, end};
}

/* The bounds reports each array the graph writes has after a replay: each launch's fresh
 * report, and those of what it read, in launch order, as a launch gives its outputs. */
static int replay_reports(jb_graph *graph, jb_bounds_report ***out)
{
    graph_parts *p = &graph->parts;
    bool any = false;
    for (size_t i = 0; !any && i < p->num_launches; i++)
        any = p->launches[i]->report != NULL;
    for (size_t i = 0; !any && i < p->num_arrays; i++) {
        size_t count;
        jb__array_reports(p->arrays[i].array, &count);
        any = count > 0;
    }
    *out = NULL;
    if (!any)
        return JB_OK;
    /* Per array: up to JB_ARRAY_REPORTS, a reference each, then its count. */
    size_t stride = JB_ARRAY_REPORTS + 1;
    jb_bounds_report **table = calloc(p->num_arrays * stride, sizeof *table);
    JB_RETURN_IF(!table, JB_ERR_OUT_OF_MEMORY, "no memory to launch a graph");
    for (size_t i = 0; i < p->num_arrays; i++) {
        size_t count;
        jb_bounds_report *const *held = jb__array_reports(p->arrays[i].array, &count);
        for (size_t r = 0; r < count; r++)
            jb__bounds_report_retain(held[r]);
        memcpy(&table[i * stride], held, count * sizeof *held);
        table[i * stride + JB_ARRAY_REPORTS] = (jb_bounds_report *)(uintptr_t)count;
    }
    int status = JB_OK;
    for (size_t l = 0; l < p->num_launches; l++) {
        graph_launch *g = p->launches[l];
        jb_bounds_report *merged[JB_ARRAY_REPORTS];
        size_t merged_count = 0;
        for (size_t i = 0; i < g->num_inputs; i++) {
            jb_bounds_report **row = &table[g->arrays[i] * stride];
            size_t count = (size_t)(uintptr_t)row[JB_ARRAY_REPORTS];
            for (size_t r = 0; r < count; r++)
                jb__bounds_merge(merged, &merged_count, row[r]);
        }
        if (g->report) {
            jb_bounds_report *fresh = jb__bounds_report_clone(g->report);
            if (!fresh)
                status = jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory to launch a graph");
            else {
                jb__bounds_merge(merged, &merged_count, fresh);
                jb__bounds_report_release(fresh);
            }
        }
        for (size_t o = 0; o < g->num_outputs; o++) {
            jb_bounds_report **row = &table[g->arrays[g->num_inputs + o] * stride];
            size_t count = (size_t)(uintptr_t)row[JB_ARRAY_REPORTS];
            for (size_t r = 0; r < count; r++)
                jb__bounds_report_release(row[r]);
            for (size_t r = 0; r < merged_count; r++)
                jb__bounds_report_retain(merged[r]);
            memcpy(row, merged, merged_count * sizeof *merged);
            row[JB_ARRAY_REPORTS] = (jb_bounds_report *)(uintptr_t)merged_count;
        }
        for (size_t r = 0; r < merged_count; r++)
            jb__bounds_report_release(merged[r]);
    }
    *out = table;
    return status;
}

/* Gives the written arrays their replay's reports (table from replay_reports), and lets go of
 * the table. */
static void set_reports(jb_graph *graph, jb_bounds_report **table, bool apply)
{
    if (!table)
        return;
    graph_parts *p = &graph->parts;
    size_t stride = JB_ARRAY_REPORTS + 1;
    for (size_t i = 0; i < p->num_arrays; i++) {
        jb_bounds_report **row = &table[i * stride];
        size_t count = (size_t)(uintptr_t)row[JB_ARRAY_REPORTS];
        if (apply && p->arrays[i].written)
            jb__array_set_reports(p->arrays[i].array, row, count);
        for (size_t r = 0; r < count; r++)
            jb__bounds_report_release(row[r]);
    }
    free(table);
}

jb_status jb_graph_launch(jb_graph *graph, jb_stream *stream)
{
    JB_RETURN_IF(!graph || !stream, JB_ERR_INVALID_ARGUMENT,
                 "jb_graph_launch: graph or stream is NULL");
    JB_FORWARD_IF_ERROR(jb__stream_check_process(stream, "jb_graph_launch"));
    jb_device *dev = graph->device;
    JB_RETURN_IF(stream->device != dev, JB_ERR_INVALID_ARGUMENT,
                 "jb_graph_launch: the graph was captured on %s, the stream is on %s", dev->name,
                 stream->device->name);
    JB_FORWARD_IF_ERROR(jb__stream_refuse_capture(stream, "jb_graph_launch"));
    graph_parts *p = &graph->parts;
    pthread_mutex_lock(&graph->mutex);
    int status = JB_OK;
    for (size_t i = 0; status == JB_OK && i < p->num_launches; i++) {
        graph_launch *g = p->launches[i];
        if (!g->dirty || !g->node) /* an empty launch has no node: nothing to update */
            continue;
        status = dev->backend->graph_set_launch(dev, graph->native, g->node, g->fn, g->grid,
                                                g->block, g->shared_bytes, &g->args);
        g->dirty = status != JB_OK;
    }
    /* What a launch orders before it, for every array at once: their makers, and the readers
     * on other streams of those it writes. */
    for (size_t i = 0; status == JB_OK && i < p->num_arrays; i++) {
        jb_array *a = p->arrays[i].array;
        if (p->arrays[i].written) {
            status = jb__array_order_write(a, stream);
        } else {
            jb_event *ready = jb__array_ready_for_read(a, stream);
            if (ready)
                status = jb__event_order_before(ready, stream);
        }
    }
    jb_bounds_report **reports = NULL;
    jb_event *end = NULL;
    bool launched = false;
    if (status == JB_OK)
        status = replay_reports(graph, &reports);
    if (status == JB_OK) {
        launched = true;
        status = dev->backend->graph_launch(dev, graph->native, stream->native);
    }
    if (status == JB_OK) /* the replay's end, the stream's to give */
        status = jb__stream_record_hold(stream, &end, p->buffers, p->num_buffers);
    if (status == JB_OK) {
        for (size_t i = 0; i < p->num_arrays; i++) {
            if (!p->arrays[i].written)
                continue;
            jb__event_retain(end);
            jb__array_written(p->arrays[i].array, end);
        }
        note_replay(graph, stream->id, end);
    } else if (launched) {
        /* Queued or not, nothing may reuse the buffers before the stream is past them. */
        dev->backend->stream_synchronize(dev, stream->native);
    }
    set_reports(graph, reports, status == JB_OK);
    jb__event_release(end);
    pthread_mutex_unlock(&graph->mutex);
    return status;
}

void jb_graph_free(jb_graph *graph)
{
    if (!graph)
        return;
    /* A replay in flight uses the backend's graph (its buffers its hold keeps). */
    for (size_t i = 0; i < graph->num_replays; i++) {
        jb__event_synchronize(graph->replays[i].end);
        jb__event_release(graph->replays[i].end);
    }
    free(graph->replays);
    graph->device->backend->graph_destroy(graph->device, graph->native);
    parts_free(graph->device, &graph->parts);
    pthread_mutex_lock(&live_graphs_mutex);
    JB_LIST_UNLINK(live_graphs, graph);
    pthread_mutex_unlock(&live_graphs_mutex);
    pthread_mutex_destroy(&graph->mutex);
    free(graph);
}
