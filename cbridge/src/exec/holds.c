/*
 * Holds: the buffers that a stream's queued work still uses, kept in a ring per stream, oldest
 * first, and released in the stream's order as that work finishes. A launch adds its hold in one
 * step under the stream's lock, so holds sit in the ring in the stream's order whatever other
 * threads launch on it. Holds are stored by value, so a warm launch's hold costs no allocation.
 * Each hold's event is recorded lazily (event_state.c): a look records the newest one.
 *
 * Also the test hooks that make those steps' interleaving deterministic.
 */
#include "exec.h"

#include <stdlib.h>

#ifdef JB_TEST_HOOKS
static _Atomic(jb_test_pause_fn) test_pause;
static void *_Atomic test_pause_ctx;
static atomic_bool test_query_fault;

void jb__test_set_pause(jb_test_pause_fn fn, void *ctx)
{
    atomic_store(&test_pause_ctx, ctx);
    atomic_store(&test_pause, fn);
}

void jb__test_pause(jb_stream *stream)
{
    jb_test_pause_fn fn = atomic_load(&test_pause);
    if (fn)
        fn(atomic_load(&test_pause_ctx), stream);
}

static _Atomic(jb_test_pause_fn) test_sync_pause;
static void *_Atomic test_sync_pause_ctx;

void jb__test_set_sync_pause(jb_test_pause_fn fn, void *ctx)
{
    atomic_store(&test_sync_pause_ctx, ctx);
    atomic_store(&test_sync_pause, fn);
}

void jb__test_sync_pause(jb_stream *stream)
{
    jb_test_pause_fn fn = atomic_load(&test_sync_pause);
    if (fn)
        fn(atomic_load(&test_sync_pause_ctx), stream);
}

static _Atomic(jb_test_pause_fn) test_record_pause;
static void *_Atomic test_record_pause_ctx;

void jb__test_set_record_pause(jb_test_pause_fn fn, void *ctx)
{
    atomic_store(&test_record_pause_ctx, ctx);
    atomic_store(&test_record_pause, fn);
}

void jb__test_record_pause(jb_stream *stream)
{
    jb_test_pause_fn fn = atomic_load(&test_record_pause);
    if (fn)
        fn(atomic_load(&test_record_pause_ctx), stream);
}

void jb__test_set_query_fault(bool fail)
{
    atomic_store(&test_query_fault, fail);
}

size_t jb__test_hold_count(jb_stream *stream)
{
    pthread_mutex_lock(&stream->holds_mutex);
    size_t count = stream->holds_count;
    pthread_mutex_unlock(&stream->holds_mutex);
    return count;
}
#endif

/* ...or sooner, once the new holds keep this many bytes: bounds what finished work keeps from
 * reuse. A buffer counts once per allocation: a kernel's weights, held by every launch, would
 * otherwise make every launch look (a driver call). */
#define HOLD_BYTES_PER_LOOK ((size_t)64 << 20)
/* Buffers a hold keeps without a malloc: a kernel's inputs and outputs, most of the time. */
#define HOLD_INLINE_BUFFERS 4

/* The ring keeps holds by value, so a warm launch's hold costs no allocation. */
struct jb_hold {
    jb_event *done;
    size_t count;
    jb_buffer **more; /* count > HOLD_INLINE_BUFFERS: the buffers, on the heap */
    jb_buffer *inline_buffers[HOLD_INLINE_BUFFERS];
};

/* A borrowed entry: a buffer the hold right before this one also keeps, whose reference this
 * hold uses instead of taking one (a decode loop's weights and input, launch after launch: no
 * atomic add and subtract on them per launch). Holds go in ring order, so the lender goes
 * first: when it goes and the borrower stays, the borrower takes a reference of its own. The tag
 * is the pointer's low bit (buffers are malloc'd, so at least 8-aligned). */
#define BORROWED ((uintptr_t)1)
/* How far back in the previous hold a buffer is looked for: a kernel's first few arrays. */
#define BORROW_LOOK HOLD_INLINE_BUFFERS

static jb_buffer *untagged(jb_buffer *entry)
{
    return (jb_buffer *)((uintptr_t)entry & ~BORROWED);
}

static bool borrowed(jb_buffer *entry)
{
    return (uintptr_t)entry & BORROWED;
}

static jb_buffer **hold_buffers(jb_hold *hold)
{
    return hold->count > HOLD_INLINE_BUFFERS ? hold->more : hold->inline_buffers;
}

/* Whether one of the hold's first BORROW_LOOK entries is `buffer`. */
static bool hold_lends(jb_hold *hold, const jb_buffer *buffer)
{
    jb_buffer **entries = hold_buffers(hold);
    size_t look = hold->count < BORROW_LOOK ? hold->count : BORROW_LOOK;
    for (size_t i = 0; i < look; i++)
        if (untagged(entries[i]) == buffer)
            return true;
    return false;
}

/* The hold's lender is going: each entry it borrowed takes a reference of its own. */
static void stop_borrowing(jb_hold *hold)
{
    jb_buffer **entries = hold_buffers(hold);
    for (size_t i = 0; i < hold->count; i++) {
        if (borrowed(entries[i])) {
            entries[i] = untagged(entries[i]);
            jb__buffer_retain(entries[i]);
        }
    }
}

/* Lets go of the holds' buffers and events: the buffers in chunks, one allocator lock each. */
static void holds_free(jb_hold *holds, size_t n)
{
    enum { CHUNK = 128 };
    jb_buffer *chunk[CHUNK];
    size_t count = 0;
    for (size_t h = 0; h < n; h++) {
        jb_buffer **buffers = hold_buffers(&holds[h]);
        for (size_t i = 0; i < holds[h].count; i++) {
            if (borrowed(buffers[i])) /* the reference is a hold's before it, let go with it */
                continue;
            if (count == CHUNK) {
                jb__buffer_release_many(chunk, count);
                count = 0;
            }
            chunk[count++] = buffers[i];
        }
        free(holds[h].more);
        if (!holds[h].done)
            continue; /* the stream kept it as a spare */
        /* With the hold its one owner nobody can read its state again: no atomic swap. */
        if (atomic_load_explicit(&holds[h].done->refs, memory_order_acquire) != 1)
            jb__event_done(holds[h].done);
        jb__event_release(holds[h].done);
    }
    jb__buffer_release_many(chunk, count);
}

static jb_hold *hold_at(const jb_stream *stream, size_t i)
{
    return &stream->holds[(stream->holds_first + i) % stream->holds_capacity];
}

static int hold_fired(jb_device *dev, const jb_hold *hold)
{
#ifdef JB_TEST_HOOKS
    if (atomic_load(&test_query_fault))
        return -jb__fail(JB_ERR_BACKEND, "test hook: the event query failed (a faulted device)");
#endif
    switch (jb__event_state(hold->done)) {
    case JB_EVENT_DONE:
        return 1;
    case JB_EVENT_RECORDED:
        return dev->backend->event_query(dev, hold->done->native);
    default:
        return 0; /* not recorded (yet): its end is unknown */
    }
}

int jb__stream_idle(jb_stream *stream)
{
#ifdef JB_TEST_HOOKS
    if (atomic_load(&test_query_fault))
        return -jb__fail(JB_ERR_BACKEND, "test hook: the stream query failed (a faulted device)");
#endif
    return stream->device->backend->stream_query(stream->device, stream->native);
}

/* Whether hold i's event can be asked: one not recorded (yet) says nothing of its work's end. */
static bool hold_recorded(const jb_stream *stream, size_t i)
{
    return jb__event_state(hold_at(stream, i)->done) == JB_EVENT_RECORDED;
}

/* Counts the holds below `below` that are known done: up to the newest whose event was recorded
 * and fired. Only recorded events can be asked, so each probe is the nearest recorded one at or
 * below the midpoint, within a look's distance (each look records one). */
static int search_fired(jb_stream *stream, size_t below, size_t *out)
{
    size_t fired = 0, low = 0, high = below; /* [0, fired) done; [low, high) not yet asked */
    while (low < high) {
        size_t mid = low + (high - low) / 2, probe = mid;
        size_t lowest = mid - low > JB_HOLDS_PER_LOOK ? mid - JB_HOLDS_PER_LOOK : low;
        while (probe > lowest && !hold_recorded(stream, probe))
            probe--;
        if (!hold_recorded(stream, probe)) { /* none to ask there: look above */
            low = mid + 1;
            continue;
        }
        int fired_now = hold_fired(stream->device, hold_at(stream, probe));
        if (fired_now < 0)
            return -fired_now;
        if (fired_now)
            fired = probe + 1, low = mid + 1;
        else
            high = probe;
    }
    *out = fired;
    return JB_OK;
}

/* Counts the oldest holds whose work is done (under the stream's mutex, count > 0). Work on one
 * stream finishes in order, so "done" holds for every hold older than one that fired. A look
 * records the newest hold's event, so the next look has one to ask: that one, most likely
 * fired, is asked first and when it fired releases those older holds alone: one record and one
 * query per look, the newer holds going with the next look. Otherwise search for the newest
 * that fired among those recorded. `every` (a trim or a refused allocation wants all that
 * finished) first asks whether the stream is idle. A failed query (a faulted device) counts
 * nothing as fired: its status is returned, the work's end being unknown. */
static int holds_fired(jb_stream *stream, bool every, size_t *out)
{
    jb_device *dev = stream->device;
    size_t count = stream->holds_count;
    uint64_t first_seq = stream->holds_next_seq - count;
    size_t older = stream->holds_looked_seq > first_seq
                       ? (size_t)(stream->holds_looked_seq - first_seq)
                       : 0; /* holds that were there at the previous look */
    stream->holds_looked_seq = stream->holds_next_seq;
    *out = 0;
    if (every) {
        int idle = jb__stream_idle(stream);
        if (idle < 0)
            return -idle;
        if (idle) {
            *out = count;
            return JB_OK;
        }
    }
    JB_FORWARD_IF_ERROR(jb__event_record_now(hold_at(stream, count - 1)->done, true));
    int fired_now;
    size_t guess = older && !every ? older - 1 : count - 1;
    if ((fired_now = hold_fired(dev, hold_at(stream, guess))) < 0)
        return -fired_now;
    if (fired_now) {
        *out = guess + 1;
        return JB_OK;
    }
    return search_fired(stream, guess, out);
}

/* How a release finds the holds it lets go of. */
typedef enum release_kind {
    RELEASE_WAITED, /* those added before a wait for the stream began: their work is done */
    RELEASE_FIRED,  /* every one whose event fired (a trim, a refused allocation) */
    RELEASE_GUESS,  /* those a look's guess finds fired (the launch path) */
} release_kind;

/* `waited_before`: holds_next_seq when the wait began (RELEASE_WAITED only). */
static int release_holds(jb_stream *stream, release_kind kind, uint64_t waited_before)
{
    enum { STACK_HOLDS = 64 };
    jb_hold stack_batch[STACK_HOLDS];
    pthread_mutex_lock(&stream->holds_mutex);
    size_t releasable = stream->holds_count;
    int status = JB_OK;
    if (kind == RELEASE_WAITED) {
        /* A hold added after the wait began may be another thread's launch the wait missed. */
        uint64_t first_seq = stream->holds_next_seq - releasable;
        uint64_t waited = waited_before > first_seq ? waited_before - first_seq : 0;
        releasable = waited < releasable ? (size_t)waited : releasable;
    } else if (releasable) {
        status = holds_fired(stream, kind == RELEASE_FIRED, &releasable);
    }
    jb_hold *batch =
        releasable <= STACK_HOLDS ? stack_batch : jb__malloc_array(releasable, sizeof *batch);
    if (!batch)
        releasable = STACK_HOLDS, batch = stack_batch; /* release what fits now, the rest later */
    for (size_t i = 0; i < releasable; i++) {
        batch[i] = *hold_at(stream, i);
        /* An event whose one owner is the hold (a reference is taken only under this lock) is
         * the stream's again: its next launch takes it with no lock of the pool's. */
        jb_event *done = batch[i].done;
        if (JB_KEEP_SPARE_EVENTS && stream->spare_count < JB_SPARE_EVENTS &&
            atomic_load_explicit(&done->refs, memory_order_acquire) == 1) {
            atomic_store_explicit(&done->refs, 0, memory_order_relaxed);
            stream->spare_events[stream->spare_count++] = done;
            batch[i].done = NULL;
        }
    }
    if (releasable && releasable < stream->holds_count)
        stop_borrowing(hold_at(stream, releasable)); /* its lender is in the batch */
    if (releasable)
        stream->holds_first = (stream->holds_first + releasable) % stream->holds_capacity;
    stream->holds_count -= releasable;
    pthread_mutex_unlock(&stream->holds_mutex);
    holds_free(batch, releasable);
    if (batch != stack_batch)
        free(batch);
    return status;
}

int jb__stream_release_holds(jb_stream *stream, bool all)
{
    return release_holds(stream, all ? RELEASE_WAITED : RELEASE_FIRED, UINT64_MAX);
}

int jb__stream_wait(jb_stream *stream)
{
    pthread_mutex_lock(&stream->holds_mutex);
    uint64_t before = stream->holds_next_seq;
    pthread_mutex_unlock(&stream->holds_mutex);
    JB_FORWARD_IF_ERROR(
        stream->device->backend->stream_synchronize(stream->device, stream->native));
    JB_TEST_SYNC_PAUSE(stream);
    return release_holds(stream, RELEASE_WAITED, before);
}

/* Whether some hold of the stream keeps `buffer` (under its mutex). */
static bool holds_buffer(jb_stream *stream, const jb_buffer *buffer)
{
    for (size_t h = stream->holds_count; h-- > 0;) {
        jb_hold *hold = hold_at(stream, h);
        jb_buffer **buffers = hold_buffers(hold);
        for (size_t i = 0; i < hold->count; i++)
            if (untagged(buffers[i]) == buffer)
                return true;
    }
    return false;
}

int jb__stream_release_if_quiet(jb_stream *stream)
{
    pthread_mutex_lock(&stream->holds_mutex);
    uint64_t before = stream->holds_next_seq;
    size_t count = stream->holds_count;
    bool quiet = before == stream->quiet_check_seq;
    stream->quiet_check_seq = before;
    pthread_mutex_unlock(&stream->holds_mutex);
    /* A stream that launched since the last check looks at its holds itself, soon enough; and
     * releasing its newest holds would keep the idle buffers from ever covering its launches. */
    if (!atomic_load_explicit(&stream->retired, memory_order_acquire) && (!quiet || !count))
        return 0;
    /* Idle after `before` was read: the work of every hold added before it is done. */
    int idle = jb__stream_idle(stream);
    if (idle == 1 && count)
        release_holds(stream, RELEASE_WAITED, before);
    return idle;
}

jb_event *jb__stream_newest_hold_event(jb_stream *stream, const jb_buffer *buffer)
{
    jb_event *newest = NULL;
    pthread_mutex_lock(&stream->holds_mutex);
    if (stream->holds_count && (!buffer || holds_buffer(stream, buffer))) {
        newest = hold_at(stream, stream->holds_count - 1)->done;
        jb__event_retain(newest);
    }
    pthread_mutex_unlock(&stream->holds_mutex);
    return newest;
}

/* Makes room for one more hold in the stream's ring (under its mutex). */
static bool holds_reserve(jb_stream *stream)
{
    if (stream->holds_count < stream->holds_capacity)
        return true;
    size_t capacity = 2 * JB_HOLDS_PER_LOOK;
    if (stream->holds_capacity && !jb__mul_size(stream->holds_capacity, 2, &capacity))
        return false;
    jb_hold *ring = jb__malloc_array(capacity, sizeof *ring);
    if (!ring)
        return false;
    for (size_t i = 0; i < stream->holds_count; i++)
        ring[i] = *hold_at(stream, i);
    free(stream->holds);
    stream->holds = ring;
    stream->holds_capacity = capacity;
    stream->holds_first = 0;
    return true;
}

void jb__stream_give_back_events(jb_stream *stream)
{
    jb_event *events[JB_SPARE_EVENTS];
    pthread_mutex_lock(&stream->holds_mutex);
    size_t n = stream->spare_count;
    for (size_t i = 0; i < n; i++)
        events[i] = stream->spare_events[i];
    stream->spare_count = 0;
    pthread_mutex_unlock(&stream->holds_mutex);
    jb__event_pool_put(events, n);
}

/* Events a stream takes from the pool at once when it has no spare: one lock for several. */
#define SPARE_REFILL 16

int jb__stream_record_hold(jb_stream *stream, jb_event **out, jb_buffer *const *buffers,
                           size_t count)
{
    jb_device *dev = stream->device;
    jb_buffer **more =
        count > HOLD_INLINE_BUFFERS ? jb__malloc_array(count, sizeof *more) : NULL;
    bool have_memory = count <= HOLD_INLINE_BUFFERS || more;
    size_t bytes = 0;
    for (size_t i = 0; i < count; i++) {
        if (!atomic_load_explicit(&buffers[i]->looked, memory_order_relaxed)) {
            atomic_store_explicit(&buffers[i]->looked, true, memory_order_relaxed);
            bytes += buffers[i]->capacity;
        }
    }
    /* The event's place and the hold in one step: another thread's hold between them would sit
     * ahead of ours in the ring while its work runs after ours on the stream. */
    jb_event *taken[SPARE_REFILL];
    size_t num_taken = 0;
    pthread_mutex_lock(&stream->holds_mutex);
    if (!stream->spare_count) {
        pthread_mutex_unlock(&stream->holds_mutex);
        int status = jb__event_acquire(dev, taken, JB_KEEP_SPARE_EVENTS ? SPARE_REFILL : 1,
                                       &num_taken);
        if (status != JB_OK) {
            free(more);
            *out = NULL;
            return status;
        }
        pthread_mutex_lock(&stream->holds_mutex);
        while (num_taken && stream->spare_count < JB_SPARE_EVENTS)
            stream->spare_events[stream->spare_count++] = taken[--num_taken];
    }
    jb_event *done = stream->spare_events[--stream->spare_count];
    atomic_store_explicit(&done->refs, 1, memory_order_relaxed);
    *out = done;
    done->stream = stream;
    done->stream_id = stream->id;
    done->hold_seq = stream->holds_next_seq;
    done->generation = stream->generation;
    /* Without a hold no look records it; an eager stream's readers want each event exact. */
    bool record_now = !count || stream->holds_next_seq < stream->eager_until_seq;
    if (!count) /* newer work (or a bare record) for older pending events, counted by no hold */
        stream->unheld_work_seq = stream->holds_next_seq;
    int status = record_now ? dev->backend->event_record(dev, done->native, stream->native) : JB_OK;
    atomic_store_explicit(&done->state, record_now ? JB_EVENT_RECORDED : JB_EVENT_PENDING,
                          memory_order_relaxed);
    JB_TEST_PAUSE(stream);
    bool room = status == JB_OK && count && have_memory && holds_reserve(stream);
    if (room) {
        jb_hold *lender = stream->holds_count ? hold_at(stream, stream->holds_count - 1) : NULL;
        jb_hold *hold = hold_at(stream, stream->holds_count);
        hold->done = done;
        jb__event_retain(done);
        hold->count = count;
        hold->more = more;
        jb_buffer **kept = hold_buffers(hold);
        for (size_t i = 0; i < count; i++) {
            if (i < BORROW_LOOK && lender && hold_lends(lender, buffers[i])) {
                kept[i] = (jb_buffer *)((uintptr_t)buffers[i] | BORROWED);
                continue;
            }
            kept[i] = buffers[i];
            jb__buffer_retain(buffers[i]);
        }
        stream->holds_count++;
        stream->holds_next_seq++;
        stream->holds_bytes_since_release += bytes;
    }
    bool release_now = room && (++stream->holds_since_release >= JB_HOLDS_PER_LOOK ||
                                stream->holds_bytes_since_release >= HOLD_BYTES_PER_LOOK);
    if (release_now)
        stream->holds_since_release = 0, stream->holds_bytes_since_release = 0;
    pthread_mutex_unlock(&stream->holds_mutex);
    if (num_taken) /* the spares were filled meanwhile by another thread */
        jb__event_pool_put(taken, num_taken);
    if (status != JB_OK) {
        free(more);
        jb__event_release(done);
        *out = NULL;
        return status;
    }
    if (!count) {
        free(more);
        return JB_OK;
    }
    if (!room) {
        /* No memory to remember the hold: wait, then nothing needs holding. */
        free(more);
        JB_FORWARD_IF_ERROR(jb__stream_wait(stream));
        jb__event_done(done);
        return JB_OK;
    }
    return release_now ? release_holds(stream, RELEASE_GUESS, 0) : JB_OK;
}
