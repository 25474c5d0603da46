/*
 * The cpu backend. Kernels are C, compiled by the system compiler and loaded with dlopen
 * (cpu_compiler.c). Each stream is a worker thread that runs its queue in order, so launches
 * are asynchronous and events mean what they mean on a GPU.
 */
#include "cpu.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* ---- events ---- */

typedef struct cpu_event {
    pthread_mutex_t mutex;
    pthread_cond_t done;
    uint64_t recorded;  /* number of the last record */
    uint64_t completed; /* highest record the streams have reached */
    struct cpu_event *prev, *next; /* in live_events */
} cpu_event;

/* Every cpu event, so that a forked child can make each one's mutex anew: a parent thread that
 * waited for or signalled one at the fork held its mutex, and the child reads (and reuses from
 * the pool) the parent's events. A leaf lock, taken only at create, destroy and fork. */
static pthread_mutex_t live_events_mutex = PTHREAD_MUTEX_INITIALIZER;
static cpu_event *live_events;

static int cpu_event_create(jb_device *dev, void **out_event)
{
    (void)dev;
    cpu_event *ev = calloc(1, sizeof *ev);
    JB_RETURN_IF(!ev, JB_ERR_OUT_OF_MEMORY, "no memory for an event");
    pthread_mutex_init(&ev->mutex, NULL);
    pthread_cond_init(&ev->done, NULL);
    pthread_mutex_lock(&live_events_mutex);
    JB_LIST_PUSH(live_events, ev);
    pthread_mutex_unlock(&live_events_mutex);
    *out_event = ev;
    return JB_OK;
}

static void cpu_event_destroy(jb_device *dev, void *event)
{
    (void)dev;
    cpu_event *ev = event;
    pthread_mutex_lock(&live_events_mutex);
    JB_LIST_UNLINK(live_events, ev);
    pthread_mutex_unlock(&live_events_mutex);
    pthread_mutex_destroy(&ev->mutex);
    pthread_cond_destroy(&ev->done);
    free(ev);
}

/* fork.c's step 7. Each event's mutex and condition are not taken (a waiter holds its mutex
 * only for a moment, but a signal may be queued behind any work): the child makes them anew,
 * its only thread holding none. */
static void cpu_events_fork(jb_fork_phase phase)
{
    if (phase == JB_FORK_PREPARE) {
        pthread_mutex_lock(&live_events_mutex);
    } else if (phase == JB_FORK_PARENT) {
        pthread_mutex_unlock(&live_events_mutex);
    } else {
        for (cpu_event *ev = live_events; ev; ev = ev->next) {
            pthread_mutex_init(&ev->mutex, NULL);
            pthread_cond_init(&ev->done, NULL);
        }
        pthread_mutex_init(&live_events_mutex, NULL);
    }
}
JB_FORK_HANDLER(JB_FORK_CPU_EVENTS, cpu_events_fork)

static void event_wait_for(cpu_event *ev, uint64_t target)
{
    pthread_mutex_lock(&ev->mutex);
    while (ev->completed < target)
        pthread_cond_wait(&ev->done, &ev->mutex);
    pthread_mutex_unlock(&ev->mutex);
}

static int cpu_event_synchronize(jb_device *dev, void *event)
{
    (void)dev;
    cpu_event *ev = event;
    pthread_mutex_lock(&ev->mutex);
    uint64_t target = ev->recorded;
    pthread_mutex_unlock(&ev->mutex);
    event_wait_for(ev, target);
    return JB_OK;
}

static int cpu_event_query(jb_device *dev, void *event)
{
    (void)dev;
    cpu_event *ev = event;
    pthread_mutex_lock(&ev->mutex);
    int done = ev->completed >= ev->recorded;
    pthread_mutex_unlock(&ev->mutex);
    return done;
}

/* ---- streams: a worker thread and an ordered queue ---- */

typedef enum task_kind {
    TASK_LAUNCH,
    TASK_SIGNAL,
    TASK_WAIT,
    TASK_FILL,  /* a captured fill (outside a capture a fill runs at once, on a buffer no work uses) */
    TASK_GRAPH, /* a graph's replay: copies of its tasks, back to back behind this one */
    TASK_STOP
} task_kind;

/* block_threads: the threads of one of the launch's blocks, which a kernel naming its block
 * reads (kernel_source.c); the others ignore it. */
typedef void (*cpu_kernel_fn)(void *const *pointers, const uint64_t *sizes,
                              const unsigned char *scalars, uint64_t threads,
                              uint64_t block_threads);
/* A whole-source module's entry point: args[i] points at argument i's value (jitbridge.h). */
typedef void (*cpu_entry_fn)(void **args, uint64_t threads);

typedef struct cpu_task {
    struct cpu_task *next;
    task_kind kind;
    size_t bytes; /* its allocation, what follows it included: a replay copies it whole */
    union {
        struct {
            cpu_kernel_fn fn;
            uint64_t threads, block_threads;
            size_t count;
            bool raw; /* a cpu_entry_fn with `count` argument pointers */
        } launch;
        struct {
            cpu_event *event;
            uint64_t target;
        } event;
        struct {
            unsigned char *dst;
            size_t count, pattern_bytes;
            unsigned char pattern[8];
        } fill;
        struct {
            size_t count;
        } graph;
    } u;
    /* TASK_LAUNCH only: count pointers, count sizes, then the scalar slots, behind the task */
    void **pointers;
} cpu_task;

/* A capture in progress on a stream, then the graph it ended as: the tasks the capturing thread
 * queued, in order, never run themselves (each replay runs copies). */
typedef struct cpu_graph {
    pthread_t owner;
    cpu_task **tasks;
    size_t count, capacity;
    size_t replay_bytes; /* the copies' size, each aligned */
    bool failed;         /* no memory to record a task: the capture fails */
} cpu_graph;

/* Where a task's copy ends in a replay: each starts aligned as malloc's memory is. */
static size_t aligned_task_bytes(size_t bytes)
{
    const size_t align = _Alignof(max_align_t);
    return (bytes + align - 1) / align * align;
}

typedef struct cpu_stream {
    pthread_mutex_t mutex;
    pthread_cond_t work;
    pthread_cond_t idle;
    cpu_task *head, *tail;
    uint64_t submitted, completed;
    pthread_t thread;
    cpu_task stop_task; /* allocated with the stream, so destroying one cannot fail */
    /* The priority asked for, and the one the worker got (set before the stream is handed out:
     * raising a thread's priority is refused without CAP_SYS_NICE or RLIMIT_NICE room). */
    int priority_asked, priority;
    bool started;
    _Atomic(cpu_graph *) capture; /* set while the owner thread captures */
} cpu_stream;

static void run_task(cpu_task *task)
{
    switch (task->kind) {
    case TASK_LAUNCH:
        if (task->u.launch.raw) {
            cpu_entry_fn entry;
            memcpy(&entry, &task->u.launch.fn, sizeof entry);
            entry(task->pointers, task->u.launch.threads);
            break;
        }
        task->u.launch.fn(task->pointers, (const uint64_t *)&task->pointers[task->u.launch.count],
                          (const unsigned char *)&task->pointers[2 * task->u.launch.count],
                          task->u.launch.threads, task->u.launch.block_threads);
        break;
    case TASK_SIGNAL: {
        cpu_event *ev = task->u.event.event;
        pthread_mutex_lock(&ev->mutex);
        if (ev->completed < task->u.event.target)
            ev->completed = task->u.event.target;
        pthread_cond_broadcast(&ev->done);
        pthread_mutex_unlock(&ev->mutex);
        break;
    }
    case TASK_WAIT:
        event_wait_for(task->u.event.event, task->u.event.target);
        break;
    case TASK_FILL:
        for (size_t i = 0; i < task->u.fill.count; i++)
            memcpy(task->u.fill.dst + i * task->u.fill.pattern_bytes, task->u.fill.pattern,
                   task->u.fill.pattern_bytes);
        break;
    case TASK_GRAPH: {
        unsigned char *at = (unsigned char *)(task + 1);
        for (size_t i = 0; i < task->u.graph.count; i++) {
            cpu_task *copy = (cpu_task *)at;
            run_task(copy);
            at += aligned_task_bytes(copy->bytes);
        }
        break;
    }
    case TASK_STOP:
        break;
    }
}

/* Each priority level is this many nice steps below the creating thread's (Linux threads have
 * their own nice value; the worker inherits its creator's). */
#define NICE_PER_PRIORITY 5

/* Raises the calling worker's priority as far toward `asked` as the system permits; the level
 * it got. */
static int raise_priority(int asked)
{
    errno = 0;
    int base = getpriority(PRIO_PROCESS, 0); /* Linux: the calling thread's */
    if (base == -1 && errno)
        return 0;
    for (int level = asked; level > 0; level--) {
        int nice = base - NICE_PER_PRIORITY * level;
        if (setpriority(PRIO_PROCESS, 0, nice < -20 ? -20 : nice) == 0)
            return level;
    }
    return 0;
}

static void *stream_worker(void *arg)
{
    cpu_stream *s = arg;
    if (s->priority_asked > 0) {
        int got = raise_priority(s->priority_asked);
        pthread_mutex_lock(&s->mutex);
        s->priority = got;
        s->started = true;
        pthread_cond_broadcast(&s->idle);
        pthread_mutex_unlock(&s->mutex);
    }
    for (;;) {
        /* Take every queued task at once: one lock per batch, not two per task. */
        pthread_mutex_lock(&s->mutex);
        while (!s->head)
            pthread_cond_wait(&s->work, &s->mutex);
        cpu_task *batch = s->head;
        s->head = s->tail = NULL;
        pthread_mutex_unlock(&s->mutex);

        uint64_t ran = 0;
        bool stop = false;
        while (batch) {
            cpu_task *task = batch;
            batch = task->next;
            run_task(task);
            ran++;
            stop = task == &s->stop_task;
            if (!stop)
                free(task);
        }

        pthread_mutex_lock(&s->mutex);
        s->completed += ran;
        pthread_cond_broadcast(&s->idle);
        pthread_mutex_unlock(&s->mutex);
        if (stop)
            return NULL;
    }
}

/* Records `task` in the capture instead of running it; without memory the capture fails. */
static void capture_task(cpu_graph *g, cpu_task *task)
{
    if (g->count == g->capacity) {
        size_t capacity = g->capacity ? 2 * g->capacity : 16;
        cpu_task **grown = jb__realloc_array(g->tasks, capacity, sizeof *grown);
        if (!grown) {
            g->failed = true;
            free(task);
            return;
        }
        g->tasks = grown;
        g->capacity = capacity;
    }
    g->tasks[g->count++] = task;
    g->replay_bytes += aligned_task_bytes(task->bytes);
}

/* The stream's capture when the calling thread is the one capturing (others' work runs). */
static cpu_graph *own_capture(cpu_stream *s)
{
    cpu_graph *g = atomic_load_explicit(&s->capture, memory_order_acquire);
    return g && pthread_equal(g->owner, pthread_self()) ? g : NULL;
}

static void enqueue(cpu_stream *s, cpu_task *task)
{
    cpu_graph *capturing = own_capture(s);
    if (capturing) {
        capture_task(capturing, task);
        return;
    }
    task->next = NULL;
    pthread_mutex_lock(&s->mutex);
    if (s->tail)
        s->tail->next = task;
    else
        s->head = task;
    s->tail = task;
    s->submitted++;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mutex);
}

/* A task with `extra` bytes behind it (argument counts are capped: 64 arrays, 64 scalars). */
static cpu_task *task_new(task_kind kind, size_t extra)
{
    size_t bytes;
    cpu_task *task = jb__add_size(sizeof *task, extra, &bytes) ? calloc(1, bytes) : NULL;
    if (task) {
        task->kind = kind;
        task->bytes = bytes;
        task->pointers = (void **)(task + 1);
    }
    return task;
}

static int cpu_stream_create(jb_device *dev, int priority, void **out_stream)
{
    (void)dev;
    cpu_stream *s = calloc(1, sizeof *s);
    JB_RETURN_IF(!s, JB_ERR_OUT_OF_MEMORY, "no memory for a stream");
    s->priority_asked = priority;
    pthread_mutex_init(&s->mutex, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->idle, NULL);
    s->stop_task.kind = TASK_STOP;
    /* The worker must not inherit the caller's signal handling duties. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&s->thread, NULL, stream_worker, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != 0) {
        free(s);
        return jb__fail(JB_ERR_SYSTEM, "cannot start a stream thread: %s", strerror(err));
    }
    /* Named before the stream is handed out: top -H, a debugger and tests can tell it apart. */
    pthread_setname_np(s->thread, JB_CPU_STREAM_THREAD_NAME);
    /* A stream with a priority is handed out once its worker has it (or was refused it). */
    pthread_mutex_lock(&s->mutex);
    while (priority > 0 && !s->started)
        pthread_cond_wait(&s->idle, &s->mutex);
    pthread_mutex_unlock(&s->mutex);
    *out_stream = s;
    return JB_OK;
}

static int cpu_stream_priority(jb_device *dev, void *stream)
{
    (void)dev;
    cpu_stream *s = stream;
    pthread_mutex_lock(&s->mutex);
    int priority = s->priority;
    pthread_mutex_unlock(&s->mutex);
    return priority;
}

static int cpu_stream_synchronize(jb_device *dev, void *stream)
{
    (void)dev;
    cpu_stream *s = stream;
    pthread_mutex_lock(&s->mutex);
    uint64_t target = s->submitted;
    while (s->completed < target)
        pthread_cond_wait(&s->idle, &s->mutex);
    pthread_mutex_unlock(&s->mutex);
    return JB_OK;
}

static int cpu_stream_query(jb_device *dev, void *stream)
{
    (void)dev;
    cpu_stream *s = stream;
    pthread_mutex_lock(&s->mutex);
    int idle = s->completed == s->submitted;
    pthread_mutex_unlock(&s->mutex);
    return idle;
}

static void cpu_stream_destroy(jb_device *dev, void *stream)
{
    (void)dev;
    cpu_stream *s = stream;
    enqueue(s, &s->stop_task);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->mutex);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->idle);
    free(s);
}

static int cpu_event_record(jb_device *dev, void *event, void *stream)
{
    (void)dev;
    cpu_event *ev = event;
    cpu_task *task = task_new(TASK_SIGNAL, 0);
    JB_RETURN_IF(!task, JB_ERR_OUT_OF_MEMORY, "no memory to record an event");
    pthread_mutex_lock(&ev->mutex);
    task->u.event.event = ev;
    task->u.event.target = ++ev->recorded;
    pthread_mutex_unlock(&ev->mutex);
    enqueue(stream, task);
    return JB_OK;
}

static int cpu_stream_wait_event(jb_device *dev, void *stream, void *event)
{
    (void)dev;
    cpu_event *ev = event;
    cpu_task *task = task_new(TASK_WAIT, 0);
    JB_RETURN_IF(!task, JB_ERR_OUT_OF_MEMORY, "no memory to wait for an event");
    pthread_mutex_lock(&ev->mutex);
    task->u.event.event = ev;
    task->u.event.target = ev->recorded;
    pthread_mutex_unlock(&ev->mutex);
    enqueue(stream, task);
    return JB_OK;
}

static int cpu_launch(jb_device *dev, void *stream, void *fn, const uint32_t grid[3],
                      const uint32_t block[3], uint32_t shared_bytes, const jb_launch_args *args)
{
    (void)dev, (void)grid, (void)shared_bytes;
    if (args->raw) {
        /* Argument pointers, then the slots they point at, behind the task. */
        size_t n = args->num_scalars;
        cpu_task *task = task_new(TASK_LAUNCH, n * (sizeof(void *) + JB_SCALAR_SLOT));
        JB_RETURN_IF(!task, JB_ERR_OUT_OF_MEMORY, "no memory for a launch");
        memcpy(&task->u.launch.fn, &fn, sizeof fn);
        task->u.launch.threads = args->total_threads;
        task->u.launch.count = n;
        task->u.launch.raw = true;
        unsigned char *slots = (unsigned char *)&task->pointers[n];
        if (n) /* args->scalars may be NULL with no scalars: no copy from it */
            memcpy(slots, args->scalars, n * JB_SCALAR_SLOT);
        for (size_t i = 0; i < n; i++)
            task->pointers[i] = slots + i * JB_SCALAR_SLOT;
        enqueue(stream, task);
        return JB_OK;
    }
    size_t count = args->count;
    size_t scalar_bytes = args->num_scalars * JB_SCALAR_SLOT;
    cpu_task *task =
        task_new(TASK_LAUNCH, count * (sizeof(void *) + sizeof(uint64_t)) + scalar_bytes);
    JB_RETURN_IF(!task, JB_ERR_OUT_OF_MEMORY, "no memory for a launch");
    memcpy(&task->u.launch.fn, &fn, sizeof fn); /* dlsym gave an object pointer (POSIX) */
    task->u.launch.threads = args->total_threads;
    /* Every block full but the last (jb__resolve_launch_shape): the threads in blocks of this
     * many give the grid's block count. */
    task->u.launch.block_threads = (uint64_t)block[0] * block[1] * block[2];
    task->u.launch.count = count;
    if (count) { /* the arrays' pointers and sizes may be NULL with no arrays */
        memcpy(task->pointers, args->pointers, count * sizeof(void *));
        memcpy(&task->pointers[count], args->sizes, count * sizeof(uint64_t));
    }
    if (scalar_bytes)
        memcpy(&task->pointers[2 * count], args->scalars, scalar_bytes);
    enqueue(stream, task);
    return JB_OK;
}

/* A C function has no registers, shared or local memory the library could count, and no block
 * limit of its own. */
static int cpu_kernel_attributes(jb_device *dev, void *fn, jb_kernel_attributes *out)
{
    (void)dev, (void)fn;
    *out = (jb_kernel_attributes){0};
    return JB_OK;
}

/* ---- memory ---- */

static int cpu_mem_alloc(jb_device *dev, size_t bytes, void **out_ptr)
{
    (void)dev;
    void *ptr = NULL;
    int err = posix_memalign(&ptr, 64, bytes);
    JB_RETURN_IF(err != 0, JB_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes", bytes);
    *out_ptr = ptr;
    return JB_OK;
}

static void cpu_mem_free(jb_device *dev, void *ptr)
{
    (void)dev;
    free(ptr);
}

static int cpu_memcpy_htod(jb_device *dev, void *stream, void *dst, const void *src, size_t bytes)
{
    (void)dev, (void)stream;
    /* dst is a fresh buffer no queued work touches, or a module global whose stream the caller
     * waited for */
    memcpy(dst, src, bytes);
    return JB_OK;
}

static int cpu_memcpy_dtoh(jb_device *dev, void *dst, const void *src, size_t bytes)
{
    (void)dev;
    memcpy(dst, src, bytes);
    return JB_OK;
}

static int cpu_fill(jb_device *dev, void *stream, void *dst, size_t count, const void *pattern,
                    size_t pattern_bytes)
{
    (void)dev;
    cpu_graph *capturing = own_capture(stream);
    if (capturing && count) { /* each replay fills again, before the kernels after it */
        cpu_task *task = task_new(TASK_FILL, 0);
        JB_RETURN_IF(!task, JB_ERR_OUT_OF_MEMORY, "no memory to capture a fill");
        task->u.fill.dst = dst;
        task->u.fill.count = count;
        task->u.fill.pattern_bytes = pattern_bytes;
        memcpy(task->u.fill.pattern, pattern, pattern_bytes);
        capture_task(capturing, task);
        return JB_OK;
    }
    /* dst is a buffer no queued work uses: filled now, as a copy from the host is. */
    unsigned char *out = dst;
    if (count && pattern_bytes == 1) {
        memset(out, *(const unsigned char *)pattern, count);
        return JB_OK;
    }
    for (size_t i = 0; i < count; i++)
        memcpy(out + i * pattern_bytes, pattern, pattern_bytes);
    return JB_OK;
}

/* ---- graphs ---- */

static int cpu_capture_begin(jb_device *dev, void *stream)
{
    (void)dev;
    cpu_graph *g = calloc(1, sizeof *g);
    JB_RETURN_IF(!g, JB_ERR_OUT_OF_MEMORY, "no memory for a capture");
    g->owner = pthread_self();
    atomic_store_explicit(&((cpu_stream *)stream)->capture, g, memory_order_release);
    return JB_OK;
}

static int cpu_capture_node(jb_device *dev, void *stream, void **out_node)
{
    (void)dev;
    cpu_graph *g = own_capture(stream);
    JB_RETURN_IF(!g || g->failed || !g->count || g->tasks[g->count - 1]->kind != TASK_LAUNCH,
                 JB_ERR_OUT_OF_MEMORY, "no memory to capture a launch");
    *out_node = g->tasks[g->count - 1];
    return JB_OK;
}

static void cpu_graph_destroy(jb_device *dev, void *graph)
{
    (void)dev;
    cpu_graph *g = graph;
    if (!g)
        return;
    for (size_t i = 0; i < g->count; i++)
        free(g->tasks[i]);
    free(g->tasks);
    free(g);
}

static int cpu_capture_end(jb_device *dev, void *stream, size_t ops, bool discard,
                           void **out_graph)
{
    cpu_stream *s = stream;
    cpu_graph *g = atomic_exchange_explicit(&s->capture, NULL, memory_order_acq_rel);
    *out_graph = NULL;
    int status = JB_OK;
    if (g && g->failed)
        status = jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory to capture a graph's work");
    else if (g && g->count != ops)
        status = jb__fail(JB_ERR_INVALID_ARGUMENT,
                          "the capture recorded %zu operations, the library %zu", g->count, ops);
    if (discard || status != JB_OK) {
        cpu_graph_destroy(dev, g);
        return status;
    }
    *out_graph = g;
    return JB_OK;
}

static int cpu_graph_set_launch(jb_device *dev, void *graph, void *node, void *fn,
                                const uint32_t grid[3], const uint32_t block[3],
                                uint32_t shared_bytes, const jb_launch_args *args)
{
    (void)dev, (void)graph, (void)fn, (void)grid, (void)block, (void)shared_bytes;
    cpu_task *task = node; /* its arrays stay; only scalars change */
    unsigned char *slots = args->raw ? (unsigned char *)&task->pointers[args->num_scalars]
                                     : (unsigned char *)&task->pointers[2 * args->count];
    if (args->num_scalars) /* args->scalars may be NULL with no scalars */
        memcpy(slots, args->scalars, args->num_scalars * JB_SCALAR_SLOT);
    return JB_OK;
}

/* One replay: a task holding copies of the graph's tasks as they are now, so that a later
 * scalar change or the graph's destruction leaves a queued replay as it was. */
static int cpu_graph_launch(jb_device *dev, void *graph, void *stream)
{
    (void)dev;
    cpu_graph *g = graph;
    cpu_task *replay = task_new(TASK_GRAPH, g->replay_bytes);
    JB_RETURN_IF(!replay, JB_ERR_OUT_OF_MEMORY, "no memory to launch a graph");
    replay->u.graph.count = g->count;
    unsigned char *at = (unsigned char *)(replay + 1);
    for (size_t i = 0; i < g->count; i++) {
        cpu_task *copy = memcpy(at, g->tasks[i], g->tasks[i]->bytes);
        copy->pointers = (void **)(copy + 1);
        if (copy->kind == TASK_LAUNCH && copy->u.launch.raw) /* its argument pointers too */
            for (size_t a = 0; a < copy->u.launch.count; a++)
                copy->pointers[a] =
                    (unsigned char *)&copy->pointers[copy->u.launch.count] + a * JB_SCALAR_SLOT;
        at += aligned_task_bytes(copy->bytes);
    }
    enqueue(stream, replay);
    return JB_OK;
}

const jb_backend jb__cpu_backend = {
    .name = "cpu",
    .dialect = JB_DIALECT_C,
    .compiler_identity = jb__cpu_compiler_identity,
    .compile = jb__cpu_compile,
    .module_load = jb__cpu_module_load,
    .module_function = jb__cpu_module_function,
    .module_unload = jb__cpu_module_unload,
    .stream_create = cpu_stream_create,
    .stream_priority = cpu_stream_priority,
    .stream_destroy = cpu_stream_destroy,
    .stream_synchronize = cpu_stream_synchronize,
    .stream_query = cpu_stream_query,
    .stream_wait_event = cpu_stream_wait_event,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .event_synchronize = cpu_event_synchronize,
    .event_query = cpu_event_query,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .memcpy_htod = cpu_memcpy_htod,
    .memcpy_dtoh = cpu_memcpy_dtoh,
    .fill = cpu_fill,
    .launch = cpu_launch,
    .kernel_attributes = cpu_kernel_attributes,
    .kernel_set_shared_limit = NULL,
    .capture_begin = cpu_capture_begin,
    .capture_node = cpu_capture_node,
    .capture_end = cpu_capture_end,
    .graph_set_launch = cpu_graph_set_launch,
    .graph_launch = cpu_graph_launch,
    .graph_destroy = cpu_graph_destroy,
    .module_global = jb__cpu_module_global,
};
