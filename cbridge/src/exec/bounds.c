/*
 * Bounds-checked launches' reports. A checked kernel is launched with one more argument after
 * its arrays: a small record in device memory, zeroed on the launch's stream before the kernel,
 * into which the kernel's first out-of-range access writes which name, index and thread
 * (kernel_source.c generates that code). Each array the launch writes, and each array later made
 * from one of those, keeps a reference to the launch's report; a wait for such an array reads
 * the record (once: the launch is done by then) and fails with JB_ERR_BOUNDS when it is set.
 */
#include "exec.h"

#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* As the generated code lays it out (kernel_source.c). */
typedef struct bounds_record {
    unsigned int flag, slot;
    long long index;
    unsigned long long thread;
} bounds_record;

/* READING_WAITED: being read, and some thread sleeps until the read ends. A state word being
 * read also carries the fork generation of the reading process (above STATE_BITS): in a forked
 * child the parent's reader is gone, so a read of an older generation is taken over, never
 * waited for. */
enum { UNREAD, READING, READING_WAITED, CLEAN, VIOLATED };
enum { STATE_BITS = 3, STATE_MASK = (1 << STATE_BITS) - 1 };

struct jb_bounds_report {
    atomic_uint refs;
    jb_device *device;
    jb_buffer *record;
    _Atomic int state;
    bounds_record seen; /* what the record held, once state is VIOLATED */
    uint64_t sizes[JB_KERNEL_MAX_ARRAYS]; /* each array's element count at the launch */
    size_t num_arrays;
    size_t num_names;
    const char **names; /* the kernel's name, then each checked name, in `text` */
    char text[];
};

int jb__bounds_report_new(const char *kernel_name, char *const *checked_names, size_t num_checked,
                          size_t num_arrays, jb_stream *stream, jb_bounds_report **out,
                          jb_buffer **record)
{
    size_t text_bytes = strlen(kernel_name) + 1;
    for (size_t i = 0; i < num_checked; i++)
        text_bytes += strlen(checked_names[i]) + 1;
    size_t num_names = num_checked + 1;
    jb_bounds_report *r = calloc(1, sizeof *r + text_bytes);
    const char **names = calloc(num_names, sizeof *names);
    if (!r || !names) {
        free(r);
        free(names);
        return jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory for a bounds-checked launch");
    }
    char *at = r->text;
    for (size_t i = 0; i < num_names; i++) {
        const char *name = i == 0 ? kernel_name : checked_names[i - 1];
        size_t len = strlen(name) + 1;
        names[i] = memcpy(at, name, len);
        at += len;
    }
    r->names = names;
    r->num_names = num_names;
    r->num_arrays = num_arrays;
    r->device = stream->device;
    atomic_init(&r->refs, 1);
    atomic_init(&r->state, UNREAD);
    jb_device *dev = stream->device;
    int status = jb__buffer_new(dev, sizeof(bounds_record), &r->record);
    static const unsigned int zero = 0;
    if (status == JB_OK)
        status = dev->backend->fill(dev, stream->native, r->record->ptr,
                                    sizeof(bounds_record) / sizeof zero, &zero, sizeof zero);
    if (status != JB_OK) {
        jb__bounds_report_release(r);
        return status;
    }
    *out = r;
    *record = r->record;
    return JB_OK;
}

jb_bounds_report *jb__bounds_report_clone(const jb_bounds_report *r)
{
    size_t text_bytes = 0;
    for (size_t i = 0; i < r->num_names; i++)
        text_bytes += strlen(r->names[i]) + 1;
    jb_bounds_report *c = calloc(1, sizeof *c + text_bytes);
    const char **names = calloc(r->num_names, sizeof *names);
    if (!c || !names) {
        free(c);
        free(names);
        return NULL;
    }
    memcpy(c->text, r->text, text_bytes);
    for (size_t i = 0; i < r->num_names; i++)
        names[i] = c->text + (r->names[i] - r->text);
    c->names = names;
    c->num_names = r->num_names;
    c->num_arrays = r->num_arrays;
    memcpy(c->sizes, r->sizes, sizeof c->sizes);
    c->device = r->device;
    c->record = r->record;
    jb__buffer_retain(c->record);
    atomic_init(&c->refs, 1);
    atomic_init(&c->state, UNREAD);
    return c;
}

/* The launch's array sizes, for the message: an index is reported against its array's size. */
void jb__bounds_report_sizes(jb_bounds_report *r, const uint64_t *sizes, size_t count)
{
    memcpy(r->sizes, sizes, count * sizeof *sizes);
}

void jb__bounds_report_retain(jb_bounds_report *report)
{
    atomic_fetch_add_explicit(&report->refs, 1, memory_order_relaxed);
}

void jb__bounds_report_release(jb_bounds_report *report)
{
    if (!report || atomic_fetch_sub_explicit(&report->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (report->record)
        jb__buffer_release(report->record);
    free(report->names);
    free(report);
}

void jb__bounds_merge(jb_bounds_report **into, size_t *count, jb_bounds_report *report)
{
    for (size_t i = 0; i < *count; i++)
        if (into[i] == report)
            return;
    jb__bounds_report_retain(report);
    if (*count == JB_ARRAY_REPORTS) {
        jb__bounds_report_release(into[0]);
        memmove(into, into + 1, (JB_ARRAY_REPORTS - 1) * sizeof *into);
        (*count)--;
    }
    into[(*count)++] = report;
}

static int read_record(jb_bounds_report *r, bounds_record *out)
{
    jb_device *dev = r->device;
    if (dev->backend->dialect == JB_DIALECT_C) { /* the cpu's device memory is the host's */
        memcpy(out, r->record->ptr, sizeof *out);
        return JB_OK;
    }
    /* In a forked child the GPU backend refuses (a driver call there is invalid). */
    /* On no stream of the library's: the read does not wait for the caller's later work. */
    return dev->backend->memcpy_dtoh(dev, out, r->record->ptr, sizeof *out);
}

static int report_violation(const jb_bounds_report *r)
{
    const bounds_record *v = &r->seen;
    const char *name = v->slot + 1 < r->num_names ? r->names[v->slot + 1] : "?";
    if (v->slot < r->num_arrays)
        return jb__fail(JB_ERR_BOUNDS,
                        "kernel '%s': thread %llu indexed array '%s' at %lld, outside its "
                        "%" PRIu64 " elements (a bounds-checked launch: the access read 0 or "
                        "wrote nothing)",
                        r->names[0], v->thread, name, v->index, r->sizes[v->slot]);
    return jb__fail(JB_ERR_BOUNDS,
                    "kernel '%s': thread %llu indexed '%s' at %lld, past its array's dimensions "
                    "(a bounds-checked launch: the access read 0)",
                    r->names[0], v->thread, name, v->index);
}

/* Ends a read: publishes `state` and wakes the threads that sleep until it ends. */
static void end_reading(jb_bounds_report *r, int state)
{
    int was = atomic_exchange_explicit(&r->state, state, memory_order_release);
    if ((was & STATE_MASK) == READING_WAITED)
        jb__futex_wake_all(&r->state);
}

/* Reads a report's record once (its launch is done), by one thread; others sleep until then. */
static int settle(jb_bounds_report *r)
{
    /* This process's generation, as a state word being read carries it. */
    int mine = (int)((atomic_load_explicit(&jb__fork_generation, memory_order_relaxed)
                      << STATE_BITS) &
                     (unsigned)INT_MAX & ~(unsigned)STATE_MASK);
    int state = atomic_load_explicit(&r->state, memory_order_acquire);
    for (;;) {
        int kind = state & STATE_MASK;
        if (kind == CLEAN || kind == VIOLATED)
            return kind;
        /* Unread, or being read by a thread of the process this one was forked from: ours. */
        if (kind == UNREAD || (state & ~STATE_MASK) != mine) {
            if (atomic_compare_exchange_strong_explicit(&r->state, &state, READING | mine,
                                                        memory_order_acquire,
                                                        memory_order_acquire))
                break;
            continue;
        }
        if (kind == READING &&
            !atomic_compare_exchange_strong_explicit(&r->state, &state, READING_WAITED | mine,
                                                     memory_order_acquire, memory_order_acquire))
            continue; /* it changed meanwhile */
        jb__futex_wait(&r->state, READING_WAITED | mine);
        state = atomic_load_explicit(&r->state, memory_order_acquire);
    }
    JB_TEST_POINT(JB_TEST_BOUNDS_READING, r->names[0]);
    bounds_record seen;
    int status = read_record(r, &seen);
    if (status != JB_OK) { /* not read: the next wait tries again */
        end_reading(r, UNREAD);
        return -status;
    }
    r->seen = seen;
    state = seen.flag ? VIOLATED : CLEAN;
    end_reading(r, state);
    return state;
}

int jb__bounds_check(jb_bounds_report *const *reports, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        int state = atomic_load_explicit(&reports[i]->state, memory_order_acquire);
        if (state != CLEAN && state != VIOLATED) /* settled states carry no generation */
            state = settle(reports[i]);
        if (state < 0)
            return -state;
        if (state == VIOLATED)
            return report_violation(reports[i]);
    }
    return JB_OK;
}
