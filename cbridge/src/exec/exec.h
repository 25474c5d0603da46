/* exec/: devices and their streams, events, buffers, holds, bounds reports and arrays. It calls
 * base/, store/ and the backends (the device table enumerates them); it reaches the backends'
 * streams and memory through the backend table. */
#ifndef JB_EXEC_EXEC_H
#define JB_EXEC_EXEC_H

#include "../internal.h"

/* ---- events (event_pool.c; their states, event_state.c) ---- */
/* Where an event stands. A launch's event starts pending: it is recorded on the stream only when
 * something needs it (a wait by the host or by another stream, a look at the holds), since a
 * record is a driver call that costs as much as a tenth of the launch. */
typedef enum jb_event_state {
    JB_EVENT_PENDING,   /* not recorded: the work is queued on `stream`, its end unknown */
    JB_EVENT_RECORDING, /* one thread records it now; others wait for that to end */
    JB_EVENT_RECORDED,  /* recorded on `stream` after the work: the driver knows its end */
    JB_EVENT_DONE,      /* the work is known done (its hold was released); never recorded */
    JB_EVENT_RECORDING_WAITED, /* recording, and threads sleep until it ends (a futex) */
} jb_event_state;

struct jb_event {
    jb_device *device;
    void *native;
    uint64_t stream_id; /* the work's stream: waits on that same stream are free */
    jb_stream *stream;  /* the work's stream, used only while pending (destroying the stream
                         * first marks its pending events done, event_state.c) */
    uint64_t hold_seq;  /* the stream's holds_next_seq before the work's hold went in */
    unsigned generation; /* the stream's: a forked child refuses the parent's unfinished work */
    _Atomic int state;  /* a jb_event_state */
    atomic_bool in_use; /* set while out of the pool: catches an event given to two owners */
    atomic_uint refs;   /* owners: an array, and the stream's hold on that work's buffers */
};
/* A stream looks whether its holds fired once per this many new holds: a query is a driver call
 * (1.3-1.6 us on an H200), so a warm launch pays for 1/64 of one. */
#define JB_HOLDS_PER_LOOK 64
/* Events a stream keeps for its next launches, given back by its finished work: more than a look
 * releases (about JB_HOLDS_PER_LOOK holds), so a launching stream's events come back to it. */
#define JB_SPARE_EVENTS (2 * JB_HOLDS_PER_LOOK)
/* Streams keep spares, but not in builds without the pool's lock: the race they show is the
 * pool's. */
#ifdef JB_REMOVE_LOCK_EVENT_POOL
#define JB_KEEP_SPARE_EVENTS 0
#else
#define JB_KEEP_SPARE_EVENTS 1
#endif
/* Holds a stream records each event at once for, after a late record (event_state.c). */
#define JB_EAGER_HOLDS 4096
int jb__event_state(const jb_event *event);
/* Records a pending event on its stream now (nothing when recorded or done); `stream_locked`:
 * the caller holds the stream's holds mutex and leaves an event being recorded to its recorder. */
int jb__event_record_now(jb_event *event, bool stream_locked);
/* The event's work is done (its hold is released): a pending event is never recorded. */
void jb__event_done(jb_event *event);
/* Takes up to `max` (at least 1) events from the device's pool, or makes one when it has none:
 * they go to out[0 .. *n), owned by the caller with no reference counted yet (a stream's spares,
 * or one to hand out at once with refs set to 1). */
int jb__event_acquire(jb_device *dev, jb_event **out, size_t max, size_t *n);
void jb__event_retain(jb_event *event);
/* Drops a reference; the last one gives the event back to its device's pool. */
void jb__event_release(jb_event *event);
/* Gives `n` events no one references, all of one device, back to its pool under one lock. */
void jb__event_pool_put(jb_event *const *events, size_t n);
/* Destroys the device's pooled events past a few; returns how many went. */
size_t jb__event_pool_trim(jb_device *dev);
/* Waits on the host until the event's work is done. */
int jb__event_synchronize(jb_event *event);
/* Makes `stream`'s later work wait for the event's (nothing when it is that stream's, or done). */
int jb__event_order_before(jb_event *event, jb_stream *stream);
void jb__event_pool_init(jb_event_pool *pool);

/* ---- streams (stream.c) ---- */
typedef struct jb_hold jb_hold;

struct jb_stream {
    jb_device *device;
    void *native;
    uint64_t id; /* unique for the process, never reused (unlike the address) */
    unsigned generation; /* jb__fork_generation at creation: unusable in a forked child */
    atomic_uint refs; /* the creator's, and one per installation on any thread */
    atomic_uint installs; /* installations as a thread's default, on any thread */
    /* Buffers that queued work still uses: a ring, oldest first, each released once its event
     * fires. Looked at every few holds, not at each one. */
    pthread_mutex_t holds_mutex;
    jb_hold *holds;
    size_t holds_capacity, holds_first, holds_count;
    uint64_t holds_next_seq;   /* holds ever added: the newest has holds_next_seq - 1 */
    uint64_t holds_looked_seq; /* holds_next_seq at the last look at which fired */
    unsigned holds_since_release;
    size_t holds_bytes_since_release;
    /* Record each hold's event at once while holds_next_seq is below this: a reader needed an
     * event with newer work queued behind it, which a late record makes it wait for too. */
    uint64_t eager_until_seq;
    uint64_t unheld_work_seq; /* holds_next_seq when work without a hold was last queued */
    uint64_t quiet_check_seq; /* holds_next_seq at the last check for quiet streams (stream.c) */
    jb_event *spare_events[JB_SPARE_EVENTS]; /* for its next launches, under holds_mutex */
    size_t spare_count;
    /* Its last reference went at a thread's exit while its work ran (or its query failed): the
     * device keeps it, with that one reference, until a walk of the device's streams finds it
     * idle or its query failing, a faulted device (stream.c). */
    atomic_bool retired;
    /* The device let go of it (a walk found it idle or faulted): no work is queued on it again,
     * and whoever drops its last reference destroys it without asking the device once more. */
    atomic_bool reaped;
    /* The graph capture in progress (graph.c), set and cleared under holds_mutex. */
    _Atomic(struct jb_capture *) capture;
    jb_stream *device_prev, *device_next; /* the device's streams, under its streams_mutex */
};
/* The calling thread's default stream for `dev`, created on first use. */
int jb__current_stream(jb_device *dev, jb_stream **out);
/* The calling thread's default stream for `dev` if it has one already; NULL (none made) if not. */
jb_stream *jb__current_stream_if_made(jb_device *dev);
/* JB_OK, or an error naming `what` when the stream was made before this process forked. */
int jb__stream_check_process(const jb_stream *stream, const char *what);
/* JB_ERR_INVALID_ARGUMENT naming `what` while `stream` captures: work other than a custom
 * kernel's launch (copies, fills of new arrays, reads, waits) is never captured. */
int jb__stream_refuse_capture(jb_stream *stream, const char *what);
/* How a stream destroyed while it captures discards its capture (kernels/graph.c's
 * jb__capture_abandon), set before any capture begins. */
void jb__stream_set_capture_abandon(void (*abandon)(jb_stream *stream));
/* A reference on a stream for something that keeps using it (the bench's raw launcher). */
void jb__stream_retain(jb_stream *stream);
/* Drops a reference; the last one waits for the stream's work and destroys it. */
void jb__stream_release(jb_stream *stream);
/* Drops a reference without waiting: the last one destroys an idle stream and leaves a busy one
 * (or one whose query fails: a faulted device) to the device, which destroys it once a walk of
 * its streams finds it idle or its query failing (a faulted device's wait returns at once). */
void jb__stream_let_go(jb_stream *stream);
/* Makes `waiter` wait for the work queued so far on the device's streams named in `ids`, and on
 * those whose holds keep `held` (when not NULL); streams gone are done. */
int jb__stream_wait_for_readers(jb_stream *waiter, const uint64_t *ids, size_t n,
                                const struct jb_buffer *held);

/* ---- buffers (buffer.c) ---- */
typedef struct jb_buffer {
    jb_device *device;
    void *ptr;
    size_t bytes;    /* asked for */
    size_t capacity; /* allocated; 0 for a zero-byte buffer, which owns no device memory */
    int bucket;      /* of its capacity in the device's cache */
    atomic_uint refs;
    atomic_bool looked; /* counted toward a stream's look (holds.c) since it was handed out */
    struct jb_buffer *bucket_prev, *bucket_next; /* while idle: its bucket */
    struct jb_buffer *older, *newer;             /* while idle: the device's idle list */
} jb_buffer;
int jb__buffer_alloc(jb_device *dev, size_t bytes, jb_buffer **out);
/* An idle buffer for `bytes` (not 0), if one fits: true with *out set; false changes nothing. */
bool jb__buffer_reuse(jb_device *dev, size_t bytes, jb_buffer **out);
/* A buffer for `bytes` (stream.c): an idle one if one fits; else, before reserved memory grows,
 * every idle stream of the device lets go of its holds and jb__buffer_alloc runs; on running out
 * of memory, every stream lets go of its fired holds and it tries once more. */
int jb__buffer_new(jb_device *dev, size_t bytes, jb_buffer **out);
/* Frees every idle buffer of the device; returns the bytes freed. */
uint64_t jb__buffer_trim(jb_device *dev);
void jb__buffer_retain(jb_buffer *buf);
/* Drops a reference; the last one returns the buffer to its device's cache, and frees idle
 * buffers past the idle cap. Any thread, but not inside a driver callback (it may free). */
void jb__buffer_release(jb_buffer *buf);
/* jb__buffer_release of each, the buffers of one device going idle under one lock: a stream
 * lets go of a batch of holds at once. */
void jb__buffer_release_many(jb_buffer *const *bufs, size_t n);
/* Sets up a device's cache (after its total_memory is known); reads JITBRIDGE_IDLE_CAP once. */
void jb__buffer_cache_init(jb_device *dev);
/* Adds the device's memory statistics to the mem_ fields of `out`; resets them. */
void jb__buffer_counters_add(jb_device *dev, jb_counters *out);
void jb__buffer_counters_reset(jb_device *dev);
/* The same over every device set up so far (device.c); sets up none. */
void jb__memory_counters_add(jb_counters *out);
void jb__memory_counters_reset(void);

/* ---- holds on buffers (holds.c) ---- */
/* Gives the stream's spare events back to its device's pool (a trim; a stream's destruction). */
void jb__stream_give_back_events(jb_stream *stream);
/* Keeps `count` buffers (none: no hold) alive until the work queued on `stream` so far is done,
 * marked by the event written to *done (a reference for the caller; the stream's spare, else the
 * pool's; not recorded: it is recorded when needed, or at once without a hold or on an eager
 * stream), in one step under the stream's lock, so that holds sit in the ring in the stream's
 * order whatever other threads launch on it. Also releases earlier holds that are done. A failed
 * record is returned with nothing held and *done NULL; a failed query (after the hold is in) is
 * returned with every hold kept and *done set. */
int jb__stream_record_hold(jb_stream *stream, jb_event **done, jb_buffer *const *buffers,
                           size_t count);
/* Releases the stream's holds whose events have fired; all of them when `all` (the stream has
 * been synchronized and no other thread can launch on it: it is being destroyed). A failed
 * event query keeps every hold and is returned. */
int jb__stream_release_holds(jb_stream *stream, bool all);
/* Waits for the stream's work, then releases the holds added before the wait began (another
 * thread's launch during the wait keeps its hold). Returns the wait's status. */
int jb__stream_wait(jb_stream *stream);
/* 1 when the stream's work is all done, 0 while some runs, a negative status on a failure (a
 * faulted device; a test hook fakes one). */
int jb__stream_idle(jb_stream *stream);
/* Releases every hold of a stream that went quiet (no hold added since the previous call) if its
 * work is all done, asked without holding its lock (a busy stream or a failed query keeps them).
 * Returns the answer (jb__stream_idle's), or 0 without asking when the stream launched since the
 * previous call or holds nothing (unless it is retired). */
int jb__stream_release_if_quiet(jb_stream *stream);
/* The event of the stream's newest hold (a reference for the caller), which fires once the
 * stream's work that holds buffers so far is done; NULL when nothing is held: that work is done.
 * With `buffer` not NULL, only when some hold keeps that buffer (else NULL). */
jb_event *jb__stream_newest_hold_event(jb_stream *stream, const jb_buffer *buffer);


/* ---- test hooks (holds.c, stream.c, event_state.c, device.c) ---- */
#ifdef JB_TEST_HOOKS
/* Called by each launch between its event and registering its hold, on `stream`. */
typedef void (*jb_test_pause_fn)(void *ctx, jb_stream *stream);
void jb__test_set_pause(jb_test_pause_fn fn, void *ctx);
void jb__test_pause(jb_stream *stream);
/* Called by jb__stream_wait between its wait for the stream and letting go of its holds. */
void jb__test_set_sync_pause(jb_test_pause_fn fn, void *ctx);
void jb__test_sync_pause(jb_stream *stream);
/* While set, a query of a hold's event or of a stream fails the way a faulted device's does. */
void jb__test_set_query_fault(bool fail);
/* How many holds the stream keeps. */
size_t jb__test_hold_count(jb_stream *stream);
/* Called (stream.c) by the release that drops a stream's last reference, before it unlinks it. */
void jb__test_set_unlink_pause(jb_test_pause_fn fn, void *ctx);
/* Called (event_state.c) by a record made when needed, between claiming the event and
 * recording it, with the event's stream. */
void jb__test_set_record_pause(jb_test_pause_fn fn, void *ctx);
void jb__test_record_pause(jb_stream *stream);
/* A second cpu device with its own index (the device table's next free one): one kernel object
 * launched on two devices where the machine has only the cpu. Never counted among the devices
 * (not listed, not locked by fork: a test that uses it does not fork). */
int jb__test_second_cpu(jb_device **out);
#define JB_TEST_PAUSE(stream) jb__test_pause(stream)
#define JB_TEST_SYNC_PAUSE(stream) jb__test_sync_pause(stream)
#define JB_TEST_RECORD_PAUSE(stream) jb__test_record_pause(stream)
#else
#define JB_TEST_PAUSE(stream) ((void)0)
#define JB_TEST_SYNC_PAUSE(stream) ((void)0)
#define JB_TEST_RECORD_PAUSE(stream) ((void)0)
#endif

/* ---- bounds-checked launches' reports (bounds.c) ---- */
/* What one bounds-checked launch reports: its device record (the first out-of-range access of
 * the launch, written by the kernel) and the names to report it with. Reference-counted: each
 * array the launch wrote, or made from one, holds one. */
typedef struct jb_bounds_report jb_bounds_report;
/* A record for a launch on `stream` of kernel `kernel_name`, whose checked accesses report
 * `checked_names`, over `num_arrays` arrays (zeroed there, before the kernel): the report and its
 * record's buffer, which the launch passes after its arrays and holds like them. */
int jb__bounds_report_new(const char *kernel_name, char *const *checked_names, size_t num_checked,
                          size_t num_arrays, jb_stream *stream, jb_bounds_report **out,
                          jb_buffer **record);
/* A new report on the same record (a captured launch's, for one replay of its graph): unread,
 * a reference of its own on the record's buffer. NULL without memory. */
jb_bounds_report *jb__bounds_report_clone(const jb_bounds_report *report);
/* The launch's array element counts, in slot order (for the message). */
void jb__bounds_report_sizes(jb_bounds_report *report, const uint64_t *sizes, size_t count);
void jb__bounds_report_retain(jb_bounds_report *report);
void jb__bounds_report_release(jb_bounds_report *report);
/* The reports an array keeps: its writer's, and those of the arrays its writer read. */
#define JB_ARRAY_REPORTS 4
/* JB_OK, or JB_ERR_BOUNDS naming the first out-of-range access among `reports` (whose launches
 * are done: the caller waited for the array that holds them). */
int jb__bounds_check(jb_bounds_report *const *reports, size_t count);
/* Adds `report` to `into` (at most JB_ARRAY_REPORTS, no repeats, a reference each); *count
 * grows. Past the limit the oldest is let go. */
void jb__bounds_merge(jb_bounds_report **into, size_t *count, jb_bounds_report *report);

/* ---- arrays (array.c) ---- */
/* A reference for a captured graph that uses the array (the owner's free then leaves it to the
 * graph), and its release: the last reference frees the array. */
void jb__array_retain(jb_array *array);
void jb__array_release(jb_array *array);
jb_buffer *jb__array_buffer(const jb_array *array);
jb_event *jb__array_ready_event(const jb_array *array);
/* Wraps a fresh buffer as an array whose contents are ready once `ready` fires (may be NULL);
 * takes ownership of both. */
int jb__array_wrap(jb_array **out, jb_buffer *buf, jb_dtype dtype, const int64_t *shape, int ndim,
                   jb_event *ready);
void jb__array_set_ready(jb_array *array, jb_event *ready);
/* The array's ready event for a kernel that reads it on `stream`, noting the read: a later
 * write on another stream waits for it (jb__array_order_write). On the stream that made the
 * contents this costs a load; reads on others fill a few slots, then mark "read by many" (a
 * write then finds the readers by their holds). */
jb_event *jb__array_ready_for_read(jb_array *array, const jb_stream *stream);
/* Orders a write of the array on `stream` after the work that made it and after every read
 * on another stream since (write after read): waits queued on `stream`, nothing blocks. */
int jb__array_order_write(jb_array *array, jb_stream *stream);
/* The write is queued and `done` marks its end (ownership passes): new contents, no reads. */
void jb__array_written(jb_array *array, jb_event *done);
/* The array's bounds reports (a bounds-checked launch wrote it, or made it from arrays one
 * wrote); *count of them. */
jb_bounds_report *const *jb__array_reports(const jb_array *array, size_t *count);
/* Replaces the array's reports with `count` of `reports` (taking a reference on each). */
void jb__array_set_reports(jb_array *array, jb_bounds_report *const *reports, size_t count);


#endif /* JB_EXEC_EXEC_H */
