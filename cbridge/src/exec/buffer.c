/*
 * Reference-counted device buffers and each device's caching allocator, in the manner of
 * PyTorch's CUDA caching allocator. A buffer whose last reference drops goes idle in its
 * device's cache and a later request of a close size reuses it without a driver call.
 *
 * - Sizes: at least 512 bytes (PyTorch's kMinBlockSize); above that, rounded up to one of 16
 *   steps per doubling (PyTorch's roundup_power2_divisions), so a new buffer wastes under 1/16.
 *   An idle buffer serves a request only if it wastes at most 1/8 of it: best fit, by bucket.
 * - Idle memory is bounded twice: by the device's idle cap (oldest idle buffers are freed past
 *   it), and by keeping reserved memory within 5/4 of the most ever live: a request the cache
 *   cannot serve first frees the oldest idle buffers until the new one fits that bound.
 * - A driver allocation that fails for lack of memory frees every idle buffer and tries once
 *   more (PyTorch's release_cached_blocks then retry).
 * - One lock per device, held for list and counter updates only: driver calls happen outside.
 *
 * Releases may call the driver's free (past the idle cap), so they must not run inside a driver
 * callback; the library releases on user threads and on the cpu backend's own workers only.
 */
#include "exec.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_BUFFER_BYTES 512
#define MIN_BUFFER_LOG2 9
/* Requests above this are refused at once: more than any device has, and rounding stays exact. */
#define MAX_BUFFER_BYTES ((size_t)1 << JB_BUFFER_MAX_LOG2)
/* Below this much reserved memory the 5/4 bound never forces an idle buffer out. */
#define ALWAYS_ALLOWED_BYTES ((uint64_t)1 << 20)

static int floor_log2(size_t x)
{
    return 63 - __builtin_clzll((unsigned long long)x);
}

/* The capacity a new buffer for `bytes` gets (bytes <= MAX_BUFFER_BYTES). */
static size_t round_size(size_t bytes)
{
    if (bytes <= MIN_BUFFER_BYTES)
        return MIN_BUFFER_BYTES;
    size_t step = (size_t)1 << (floor_log2(bytes) - 4);
    return (bytes + step - 1) & ~(step - 1);
}

/* Capacities are m << (k - 4) with 16 <= m < 32: one bucket per (k, m). */
static int bucket_of(size_t capacity)
{
    int k = floor_log2(capacity);
    return (k - MIN_BUFFER_LOG2) * 16 + (int)((capacity >> (k - 4)) - 16);
}

static size_t bucket_capacity(int bucket)
{
    return (size_t)(16 + bucket % 16) << (bucket / 16 + MIN_BUFFER_LOG2 - 4);
}

/* The most an idle buffer may hold and still serve `bytes`: 1/8 more (or the smallest size). */
static size_t reuse_limit(size_t bytes)
{
    return bytes <= MIN_BUFFER_BYTES ? MIN_BUFFER_BYTES : bytes + bytes / 8;
}

/* ---- the idle lists, under the cache's mutex ---- */

static void link_idle(jb_buffer_cache *c, jb_buffer *buf)
{
    int b = buf->bucket;
    buf->bucket_prev = NULL;
    buf->bucket_next = c->buckets[b];
    if (buf->bucket_next)
        buf->bucket_next->bucket_prev = buf;
    c->buckets[b] = buf; /* newest first: the most recently used memory is reused first */
    buf->older = c->newest;
    buf->newer = NULL;
    if (c->newest)
        c->newest->newer = buf;
    else
        c->oldest = buf;
    c->newest = buf;
    c->idle_bytes += buf->capacity;
}

static void unlink_idle(jb_buffer_cache *c, jb_buffer *buf)
{
    if (buf->bucket_prev)
        buf->bucket_prev->bucket_next = buf->bucket_next;
    else
        c->buckets[buf->bucket] = buf->bucket_next;
    if (buf->bucket_next)
        buf->bucket_next->bucket_prev = buf->bucket_prev;
    if (buf->older)
        buf->older->newer = buf->newer;
    else
        c->oldest = buf->newer;
    if (buf->newer)
        buf->newer->older = buf->older;
    else
        c->newest = buf->older;
    c->idle_bytes -= buf->capacity;
}

/* Takes buffers out of the cache for freeing: the count and reservation change now, the driver
 * call comes after the unlock. `victims` chains them through bucket_next. */
static void doom(jb_buffer_cache *c, jb_buffer *buf, jb_buffer **victims)
{
    c->reserved_bytes -= buf->capacity;
    c->frees++;
    buf->bucket_next = *victims;
    *victims = buf;
}

/* Dooms the oldest idle buffers until at most `keep` idle bytes remain. */
static void evict_to(jb_buffer_cache *c, uint64_t keep, jb_buffer **victims)
{
    while (c->oldest && c->idle_bytes > keep) {
        jb_buffer *buf = c->oldest;
        unlink_idle(c, buf);
        doom(c, buf, victims);
    }
}

/* Returns the doomed buffers' memory to the driver; outside the cache's mutex. */
static uint64_t free_victims(jb_device *dev, jb_buffer *victims)
{
    uint64_t freed = 0;
    while (victims) {
        jb_buffer *next = victims->bucket_next;
        freed += victims->capacity;
        dev->backend->mem_free(dev, victims->ptr);
        free(victims);
        victims = next;
    }
    return freed;
}

static void count_live(jb_buffer_cache *c, size_t bytes)
{
    c->live_bytes += bytes;
    if (c->live_bytes > c->peak_live_bytes)
        c->peak_live_bytes = c->live_bytes;
}

/* The best idle buffer for `bytes`, unlinked, or NULL: the smallest capacity that fits within
 * the reuse limit, the newest of that capacity. */
static jb_buffer *take_idle(jb_buffer_cache *c, size_t bytes)
{
    size_t limit = reuse_limit(bytes);
    for (int b = bucket_of(round_size(bytes));
         b < JB_BUFFER_BUCKETS && bucket_capacity(b) <= limit; b++) {
        jb_buffer *buf = c->buckets[b];
        if (buf) {
            unlink_idle(c, buf);
            return buf;
        }
    }
    return NULL;
}

/* A new driver allocation of `capacity` for `bytes`, already counted in reserved_bytes. */
static int allocate(jb_device *dev, size_t bytes, size_t capacity, jb_buffer *buf)
{
    jb_buffer_cache *c = &dev->buffers;
    int status = dev->backend->mem_alloc(dev, capacity, &buf->ptr);
    if (status == JB_ERR_OUT_OF_MEMORY) {
        jb_buffer *victims = NULL;
        pthread_mutex_lock(&c->mutex);
        evict_to(c, 0, &victims);
        c->retries += victims != NULL;
        pthread_mutex_unlock(&c->mutex);
        if (victims) {
            free_victims(dev, victims);
            status = dev->backend->mem_alloc(dev, capacity, &buf->ptr);
        }
    }
    pthread_mutex_lock(&c->mutex);
    if (status == JB_OK) {
        c->allocations++;
        count_live(c, bytes);
    } else {
        c->reserved_bytes -= capacity;
    }
    uint64_t live = c->live_bytes, reserved = c->reserved_bytes;
    pthread_mutex_unlock(&c->mutex);
    if (status == JB_ERR_OUT_OF_MEMORY) /* the backend's message, with the cache's state */
        jb__error_append(" (a buffer of %zu bytes for %zu asked; no idle buffer left to free; "
                         "%" PRIu64 " bytes live, %" PRIu64 " reserved on %s)",
                         capacity, bytes, live, reserved, dev->name);
    return status;
}

/* Gives `buf` out for `bytes`, with one reference. */
static void hand_out(jb_buffer *buf, size_t bytes, jb_buffer **out)
{
    buf->bytes = bytes;
    atomic_init(&buf->refs, 1);
    atomic_init(&buf->looked, false);
    *out = buf;
}

bool jb__buffer_reuse(jb_device *dev, size_t bytes, jb_buffer **out)
{
    if (!bytes || bytes > MAX_BUFFER_BYTES)
        return false;
    jb_buffer_cache *c = &dev->buffers;
    pthread_mutex_lock(&c->mutex);
    jb_buffer *buf = take_idle(c, bytes);
    if (buf) {
        c->reuses++;
        count_live(c, bytes);
    }
    pthread_mutex_unlock(&c->mutex);
    if (!buf)
        return false;
    hand_out(buf, bytes, out);
    return true;
}

int jb__buffer_alloc(jb_device *dev, size_t bytes, jb_buffer **out)
{
    *out = NULL;
    JB_RETURN_IF(bytes > MAX_BUFFER_BYTES, JB_ERR_OUT_OF_MEMORY,
                 "%zu bytes is more than any device holds (at most 2^%d per buffer)", bytes,
                 JB_BUFFER_MAX_LOG2);
    jb_buffer *buf = NULL;
    size_t capacity = bytes ? round_size(bytes) : 0;
    jb_buffer_cache *c = &dev->buffers;
    jb_buffer *victims = NULL;
    if (bytes) {
        pthread_mutex_lock(&c->mutex);
        buf = take_idle(c, bytes);
        if (buf) {
            c->reuses++;
            count_live(c, bytes);
        } else {
            /* A miss: keep reserved memory within 5/4 of the most ever live, oldest idle first;
             * the new buffer is reserved now, so that concurrent misses see it. */
            uint64_t peak = c->live_bytes + bytes;
            peak = peak > c->peak_live_bytes ? peak : c->peak_live_bytes;
            uint64_t allowed = peak + peak / 4;
            allowed = allowed > ALWAYS_ALLOWED_BYTES ? allowed : ALWAYS_ALLOWED_BYTES;
            while (c->oldest && c->reserved_bytes + capacity > allowed) {
                jb_buffer *old = c->oldest;
                unlink_idle(c, old);
                doom(c, old, &victims);
            }
            c->reserved_bytes += capacity;
        }
        pthread_mutex_unlock(&c->mutex);
        free_victims(dev, victims);
    }
    if (!buf) {
        buf = calloc(1, sizeof *buf);
        int status = buf ? JB_OK : jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory for a buffer");
        if (status == JB_OK && capacity)
            status = allocate(dev, bytes, capacity, buf);
        if (status != JB_OK) {
            if (!buf && capacity) {
                pthread_mutex_lock(&c->mutex);
                c->reserved_bytes -= capacity;
                pthread_mutex_unlock(&c->mutex);
            }
            free(buf);
            return status;
        }
        buf->device = dev;
        buf->capacity = capacity;
        buf->bucket = capacity ? bucket_of(capacity) : -1;
    }
    hand_out(buf, bytes, out);
    return JB_OK;
}

void jb__buffer_retain(jb_buffer *buf)
{
    atomic_fetch_add_explicit(&buf->refs, 1, memory_order_relaxed);
}

/* A buffer whose last reference went: no work uses it any more (every launch held a reference),
 * so it goes idle for reuse, or is doomed past the idle cap (under the cache's mutex). */
static void went_idle(jb_buffer_cache *c, jb_buffer *buf, jb_buffer **victims)
{
    c->live_bytes -= buf->bytes;
    if (buf->capacity <= c->idle_cap) {
        link_idle(c, buf);
        evict_to(c, c->idle_cap, victims);
    } else {
        doom(c, buf, victims);
    }
}

/* Drops one reference; true when it was the last and the buffer owns device memory (a buffer
 * of zero bytes is freed here). */
static bool drop_reference(jb_buffer *buf)
{
    if (atomic_fetch_sub_explicit(&buf->refs, 1, memory_order_acq_rel) != 1)
        return false;
    if (buf->capacity)
        return true;
    free(buf);
    return false;
}

void jb__buffer_release(jb_buffer *buf)
{
    jb__buffer_release_many(&buf, 1);
}

void jb__buffer_release_many(jb_buffer *const *bufs, size_t n)
{
    while (n) {
        /* The last references of up to one chunk, all on one device, go idle under one lock. */
        enum { CHUNK = 64 };
        jb_buffer *last[CHUNK];
        size_t count = 0;
        jb_device *dev = NULL;
        for (; n && count < CHUNK && (!dev || (*bufs)->device == dev); bufs++, n--) {
            if (drop_reference(*bufs)) {
                last[count++] = *bufs;
                dev = (*bufs)->device;
            }
        }
        if (!count)
            continue;
        jb_buffer_cache *c = &dev->buffers;
        jb_buffer *victims = NULL;
        pthread_mutex_lock(&c->mutex);
        for (size_t i = 0; i < count; i++)
            went_idle(c, last[i], &victims);
        pthread_mutex_unlock(&c->mutex);
        free_victims(dev, victims);
    }
}

/* ---- the idle cap, trim and statistics ---- */

static uint64_t env_idle_cap;
static bool env_idle_cap_set;

static void read_idle_cap_env(void)
{
    const char *text = getenv("JITBRIDGE_IDLE_CAP");
    if (!text)
        return;
    env_idle_cap_set = jb__parse_bytes(text, &env_idle_cap);
    if (!env_idle_cap_set)
        jb__warn("JITBRIDGE_IDLE_CAP=\"%s\" is not a byte count (digits, then optionally K, M, G "
                 "or T, binary, with or without iB): each device keeps its default idle cap",
                 text);
}

void jb__buffer_cache_init(jb_device *dev)
{
    static pthread_once_t env_once = PTHREAD_ONCE_INIT;
    pthread_once(&env_once, read_idle_cap_env);
    jb_buffer_cache *c = &dev->buffers;
    jb__mutex_init_spinning(&c->mutex);
    /* Default: 1/16 of the device's memory (1 GiB where unknown): enough to keep a server's
     * churning activations warm, never a large share of the device. */
    c->idle_cap = dev->total_memory ? dev->total_memory / 16 : (uint64_t)1 << 30;
    if (env_idle_cap_set)
        c->idle_cap = env_idle_cap;
}

jb_status jb_device_set_idle_cap(jb_device *device, uint64_t bytes)
{
    JB_RETURN_IF(!device, JB_ERR_INVALID_ARGUMENT, "jb_device_set_idle_cap: device is NULL");
    jb_buffer_cache *c = &device->buffers;
    jb_buffer *victims = NULL;
    pthread_mutex_lock(&c->mutex);
    c->idle_cap = bytes;
    evict_to(c, bytes, &victims);
    pthread_mutex_unlock(&c->mutex);
    free_victims(device, victims);
    return JB_OK;
}

uint64_t jb_device_idle_cap(const jb_device *device)
{
    if (!device)
        return 0;
    jb_buffer_cache *c = (jb_buffer_cache *)&device->buffers;
    pthread_mutex_lock(&c->mutex);
    uint64_t cap = c->idle_cap;
    pthread_mutex_unlock(&c->mutex);
    return cap;
}

uint64_t jb__buffer_trim(jb_device *device)
{
    jb_buffer_cache *c = &device->buffers;
    jb_buffer *victims = NULL;
    pthread_mutex_lock(&c->mutex);
    evict_to(c, 0, &victims);
    pthread_mutex_unlock(&c->mutex);
    return free_victims(device, victims);
}

/* One consistent snapshot of the device's statistics: every field read under one lock hold. */
static void snapshot(jb_device *dev, jb_memory_stats *out)
{
    jb_buffer_cache *c = &dev->buffers;
    pthread_mutex_lock(&c->mutex);
    out->live_bytes = c->live_bytes;
    out->peak_live_bytes = c->peak_live_bytes;
    out->reserved_bytes = c->reserved_bytes;
    out->idle_bytes = c->idle_bytes;
    out->allocations = c->allocations;
    out->frees = c->frees;
    out->reuses = c->reuses;
    out->retries = c->retries;
    pthread_mutex_unlock(&c->mutex);
}

jb_status jb_device_memory_stats(jb_memory_stats *out, size_t out_size, jb_device *device)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_device_memory_stats: out is NULL");
    JB_RETURN_IF(out_size == 0 || out_size > sizeof(jb_memory_stats), JB_ERR_INVALID_ARGUMENT,
                 "jb_device_memory_stats: size %zu is not that of a jb_memory_stats (%zu or less)",
                 out_size, sizeof(jb_memory_stats));
    JB_RETURN_IF(!device, JB_ERR_INVALID_ARGUMENT, "jb_device_memory_stats: device is NULL");
    jb_memory_stats all;
    snapshot(device, &all);
    memcpy(out, &all, out_size); /* older callers get the prefix they know */
    return JB_OK;
}

void jb__buffer_counters_add(jb_device *dev, jb_counters *out)
{
    jb_memory_stats s;
    snapshot(dev, &s);
    out->mem_live_bytes += s.live_bytes;
    out->mem_peak_live_bytes += s.peak_live_bytes;
    out->mem_reserved_bytes += s.reserved_bytes;
    out->mem_idle_bytes += s.idle_bytes;
    out->mem_allocations += s.allocations;
    out->mem_frees += s.frees;
    out->mem_reuses += s.reuses;
    out->mem_retries += s.retries;
}

void jb__buffer_counters_reset(jb_device *dev)
{
    jb_buffer_cache *c = &dev->buffers;
    pthread_mutex_lock(&c->mutex);
    c->peak_live_bytes = c->live_bytes;
    c->allocations = c->frees = c->reuses = c->retries = 0;
    pthread_mutex_unlock(&c->mutex);
}
