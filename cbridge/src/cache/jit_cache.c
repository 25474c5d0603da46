/*
 * The process-global JIT module cache: one map from "<device index>:<name>" to a module, and one
 * reader-writer lock. Both are allocated once and never freed (threads may still launch after
 * main returns, and unloading on a faulted device fails). The map is reachable from this file
 * only: it is static, no header names it, and the library exports no symbol for it.
 *
 * Hit:  read lock, a lookup that never inserts.
 * Miss: write lock, a second lookup, and a build + insert only if the key is still missing, so
 *       threads that miss one key together get one build and the same module. A failed build
 *       inserts nothing and the next caller tries again.
 *
 * In front of that protocol sits a per-thread lookaside: once a thread has found a module, its
 * later lookups of that key take no lock, build no string, allocate nothing and write no shared
 * cache line. That is sound because modules are never freed. It can be switched off at run time
 * (jb_set_lookaside_enabled) to measure the plain protocol.
 *
 * Behind the lookaside, a process-global published index answers a thread's first lookup of a
 * built key without the lock, so a new thread never queues behind a build in progress (the lock
 * prefers writers). It is filled under the write lock, right after the insert, and never shrinks:
 * modules are never freed. The map and its lock stay the authority: a miss there decides a build.
 */
#include "cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct module_cache {
    pthread_rwlock_t lock;
    jb_table table; /* key: "<device index>:<name>" (owned), value: the module */
} module_cache;

static module_cache *the_cache;
static pthread_once_t the_cache_once = PTHREAD_ONCE_INIT;

/* Per-process counters of the slow path. Hits and misses are counted per thread (below). */
static atomic_uint_fast64_t counter_builds, counter_build_failures, counter_build_ns, counter_build_max_ns, counter_configures, builds_in_flight, counter_peak_concurrent_builds;

static void raise_to(atomic_uint_fast64_t *peak, uint_fast64_t value)
{
    uint_fast64_t seen = atomic_load(peak);
    while (value > seen && !atomic_compare_exchange_weak(peak, &seen, value))
        ;
}

/* Builds run one at a time under the write lock; the peak shows it (and shows it broken). */
static void build_started(void)
{
    raise_to(&counter_peak_concurrent_builds, atomic_fetch_add(&builds_in_flight, 1) + 1);
}

/* ---- per-thread state: the lookaside and the hit/miss counters ---- */

/* A lookaside key: the device and the module's name, compared without building a string. */
typedef struct lookaside_key {
    int device;
    const char *name;
} lookaside_key;

typedef struct thread_state {
    jb_table lookaside; /* key: a lookaside_key and its name in one allocation (owned) */
    /* Written by the owning thread only (load + store, no locked instruction); read by
     * jb_counters_get from any thread. */
    atomic_uint_fast64_t hits, misses;
    struct thread_state *prev, *next;
} thread_state;

#define CACHE_LINE 64

static pthread_mutex_t registry_mutex = PTHREAD_MUTEX_INITIALIZER;
static thread_state *registry;
static uint64_t retired_hits, retired_misses;   /* of threads that exited; under the mutex */
static uint64_t baseline_hits, baseline_misses; /* subtracted by reads since the last reset */
static atomic_bool lookaside_enabled = true;

/* Built keys, searched without a lock; written under the write lock only. Key: a lookaside_key
 * and its name in one allocation, kept for the life of the process like the module. */
static jb_published_table the_index;

static thread_state *thread_state_create(void)
{
    /* Own cache lines: another thread's counters must not share this thread's line. */
    size_t bytes = (sizeof(thread_state) + CACHE_LINE - 1) / CACHE_LINE * CACHE_LINE;
    thread_state *ts = aligned_alloc(CACHE_LINE, bytes);
    if (!ts)
        return NULL;
    memset(ts, 0, bytes);
    pthread_mutex_lock(&registry_mutex);
    JB_LIST_PUSH(registry, ts);
    pthread_mutex_unlock(&registry_mutex);
    return ts;
}

static void thread_state_destroy(thread_state *ts)
{
    pthread_mutex_lock(&registry_mutex);
    retired_hits += atomic_load(&ts->hits);
    retired_misses += atomic_load(&ts->misses);
    JB_LIST_UNLINK(registry, ts);
    pthread_mutex_unlock(&registry_mutex);
    for (size_t i = 0; i < ts->lookaside.capacity; i++)
        free((void *)ts->lookaside.slots[i].key);
    free(ts->lookaside.slots);
    free(ts);
}

JB_THREAD_LOCAL(thread_state, this_thread_state, thread_state_create, thread_state_destroy)

static inline void count(atomic_uint_fast64_t *counter)
{
    atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

static inline uint64_t lookaside_hash(int device, uint64_t name_hash)
{
    return name_hash ^ ((uint64_t)(unsigned)device * 0x9e3779b97f4a7c15ULL);
}

static bool lookaside_equal(const void *stored, const void *key)
{
    const lookaside_key *a = stored, *b = key;
    return a->device == b->device && strcmp(a->name, b->name) == 0;
}

/* A lookaside key with its own copy of the name, in one allocation; NULL on no memory. */
static lookaside_key *lookaside_key_new(int device, const char *name)
{
    size_t name_bytes = strlen(name) + 1;
    lookaside_key *key = malloc(sizeof *key + name_bytes);
    if (key) {
        key->device = device;
        key->name = memcpy(key + 1, name, name_bytes);
    }
    return key;
}

/* Remembers a found module for this thread; on no memory it simply is not remembered. */
static void lookaside_remember(thread_state *ts, int device, const char *name, uint64_t hash,
                               jb_module *module)
{
    lookaside_key *key = lookaside_key_new(device, name);
    if (!key || !jb__table_reserve(&ts->lookaside)) {
        free(key);
        return;
    }
    jb__table_add(&ts->lookaside, hash, key, module);
}

/* Publishes a module just inserted (under the write lock). On no memory it is not published:
 * later first lookups of the key take the read lock, as before. */
static void index_publish(int device, const char *name, uint64_t hash, jb_module *module)
{
    lookaside_key *key = lookaside_key_new(device, name);
    if (key && !jb__published_add(&the_index, hash, key, module))
        free(key);
}

jb_status jb_set_lookaside_enabled(int enabled)
{
    atomic_store(&lookaside_enabled, enabled != 0);
    return JB_OK;
}

int jb_lookaside_enabled(void)
{
    return atomic_load(&lookaside_enabled);
}

static void cache_lock_init(pthread_rwlock_t *lock)
{
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
#ifdef __GLIBC__
    /* A steady stream of hits must not starve the thread that builds a new key. */
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#endif
    pthread_rwlock_init(lock, &attr);
    pthread_rwlockattr_destroy(&attr);
}

static void cache_create(void)
{
    module_cache *cache = calloc(1, sizeof *cache);
    if (!cache)
        return; /* the_cache stays NULL; callers report out of memory */
    cache_lock_init(&cache->lock);
    the_cache = cache;
}

static bool cache_key_equal(const void *stored, const void *key)
{
    return strcmp(stored, key) == 0;
}

/* Looks `key` up; never inserts, so it is safe under the shared lock. */
static jb_module *cache_find(const module_cache *cache, const char *key, uint64_t hash)
{
    return jb__table_find(&cache->table, hash, key, cache_key_equal);
}

/* Inserts a key known to be missing; only under the write lock. */
static int cache_insert(module_cache *cache, const char *key, uint64_t hash, jb_module *module)
{
    char *key_copy = jb__strdup(key);
    JB_RETURN_IF(!key_copy, JB_ERR_OUT_OF_MEMORY, "no memory for a cache key");
    if (!jb__table_reserve(&cache->table)) {
        free(key_copy);
        return jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory to grow the module cache");
    }
    jb__table_add(&cache->table, hash, key_copy, module);
    return JB_OK;
}

#ifdef JB_REMOVE_LOCK_JIT_CACHE
#define CACHE_READ_LOCK(c) ((void)0)
#define CACHE_WRITE_LOCK(c) ((void)0)
#define CACHE_UNLOCK(c) ((void)0)
#else
#define CACHE_READ_LOCK(c) pthread_rwlock_rdlock(&(c)->lock)
#define CACHE_WRITE_LOCK(c) pthread_rwlock_wrlock(&(c)->lock)
#define CACHE_UNLOCK(c) pthread_rwlock_unlock(&(c)->lock)
#endif

/* After a build under the write lock: its counters, and the insert of what it built. */
static void count_build(module_cache *cache, jb_device *dev, const char *name, const char *key,
                        uint64_t hash, uint64_t index_hash, jb_module *module, bool from_disk,
                        uint64_t start, int *status)
{
    uint64_t took = jb__now_ns() - start;
    atomic_fetch_add_explicit(&counter_build_ns, took, memory_order_relaxed);
    raise_to(&counter_build_max_ns, took);
    if (*status == JB_OK) {
        if (!from_disk) /* a disk hit is counted by the disk cache */
            atomic_fetch_add_explicit(&counter_builds, 1, memory_order_relaxed);
        /* On an insert failure the built module is kept alive but unreachable: modules are
         * never unloaded. The next caller builds again. */
        *status = cache_insert(cache, key, hash, module);
        if (*status == JB_OK)
            index_publish(dev->index, name, index_hash, module);
    } else if (*status != JB_ERR_SEALED) { /* a refusal is counted as one, not as a failure */
        atomic_fetch_add_explicit(&counter_build_failures, 1, memory_order_relaxed);
    }
}

/* The locked protocol: read lock and lookup; on a miss, write lock, lookup again, build. */
static int cache_lookup_or_build(thread_state *ts, jb_device *dev, const char *name,
                                 uint64_t index_hash, jb_module_builder builder, void *ctx,
                                 jb_module **out)
{
    pthread_once(&the_cache_once, cache_create);
    module_cache *cache = the_cache;
    JB_RETURN_IF(!cache, JB_ERR_OUT_OF_MEMORY, "no memory for the module cache");

    char stack_key[256];
    size_t key_len = (size_t)snprintf(NULL, 0, "%d:%s", dev->index, name);
    char *key = key_len < sizeof stack_key ? stack_key : malloc(key_len + 1);
    JB_RETURN_IF(!key, JB_ERR_OUT_OF_MEMORY, "no memory for a cache key");
    snprintf(key, key_len + 1, "%d:%s", dev->index, name);
    uint64_t hash = jb__fnv1a64(key, key_len, JB_FNV_SEED);

    CACHE_READ_LOCK(cache);
    jb_module *module = cache_find(cache, key, hash);
    CACHE_UNLOCK(cache);
    if (module) {
        count(&ts->hits);
        *out = module;
        if (key != stack_key)
            free(key);
        return JB_OK;
    }
    count(&ts->misses);
    JB_TEST_POINT(JB_TEST_CACHE_MISSED, key);

    int status = JB_OK;
    jb__warn_hold(); /* a build's warnings and events reach the callbacks once the lock is let go */
    jb__events_hold();
    uint64_t start = jb__now_ns();
    for (;;) {
        CACHE_WRITE_LOCK(cache);
        module = cache_find(cache, key, hash);
        if (module) {
            status = JB_OK; /* built by another thread while this one waited */
            break;
        }
        build_started();
        bool from_disk = false;
        jb__event_build_begin(dev, name, key);
        status = builder(ctx, dev, name, &module, &from_disk);
        jb__event_build_end();
        atomic_fetch_sub(&builds_in_flight, 1);
        if (status != JB_BUILD_LEASE_BUSY) {
            count_build(cache, dev, name, key, hash, index_hash, module, from_disk, start, &status);
            break;
        }
        /* Another process or host compiles it: waited for with the lock let go, so that other
         * threads' hits and loads go on meanwhile. */
        CACHE_UNLOCK(cache);
        jb__lease_wait();
        jb__remote_lease_wait();
    }
    CACHE_UNLOCK(cache);
    jb__disk_store_pending(); /* out of the lock: the other threads' builds go on */
    jb__warn_release();
    jb__events_release();
    if (key != stack_key)
        free(key);
    if (status == JB_OK)
        *out = module;
    return status;
}

static void jit_cache_fork(jb_fork_phase phase)
{
    /* A cache made by a once still running at fork time is not taken: the once itself hangs. */
    module_cache *cache = the_cache;
    if (phase == JB_FORK_PREPARE) {
        if (cache)
            pthread_rwlock_wrlock(&cache->lock); /* waits for a build in progress */
        pthread_mutex_lock(&registry_mutex);
    } else if (phase == JB_FORK_PARENT) {
        pthread_mutex_unlock(&registry_mutex);
        if (cache)
            pthread_rwlock_unlock(&cache->lock);
    } else { /* the child's only thread is not the owner glibc recorded: start the locks anew */
        pthread_mutex_init(&registry_mutex, NULL);
        if (cache)
            cache_lock_init(&cache->lock);
    }
}
JB_FORK_HANDLER(JB_FORK_JIT_CACHE, jit_cache_fork)

bool jb__jit_module_cached(const jb_device *dev, const char *name)
{
    pthread_once(&the_cache_once, cache_create);
    module_cache *cache = the_cache;
    jb_strbuf key = {0};
    jb__strbuf_appendf(&key, "%d:%s", dev->index, name);
    bool found = false;
    if (cache && !key.failed) {
        uint64_t hash = jb__fnv1a64(key.data, key.len, JB_FNV_SEED);
        CACHE_READ_LOCK(cache);
        found = cache_find(cache, key.data, hash) != NULL;
        CACHE_UNLOCK(cache);
    }
    jb__strbuf_free(&key);
    return found;
}

int jb__get_jit_module(jb_device *dev, const char *name, uint64_t name_hash,
                       jb_module_builder builder, void *ctx, jb_module **out)
{
    thread_state *ts = this_thread_state();
    JB_RETURN_IF(!ts, JB_ERR_OUT_OF_MEMORY, "no memory for the thread's cache state");
    bool use_lookaside = atomic_load_explicit(&lookaside_enabled, memory_order_relaxed);
    uint64_t hash = lookaside_hash(dev->index, name_hash);
    if (use_lookaside) {
        lookaside_key key = {dev->index, name};
        jb_module *module = jb__table_find(&ts->lookaside, hash, &key, lookaside_equal);
        if (module) {
            count(&ts->hits);
            JB_TEST_POINT(JB_TEST_LOOKASIDE_HIT, name);
            *out = module;
            return JB_OK;
        }
        /* This thread's first lookup of the key: a built one is found without the lock. */
        if ((module = jb__published_find(&the_index, hash, &key, lookaside_equal))) {
            count(&ts->hits);
            JB_TEST_POINT(JB_TEST_INDEX_HIT, name);
            *out = module;
            lookaside_remember(ts, dev->index, name, hash, module);
            return JB_OK;
        }
    }
    JB_FORWARD_IF_ERROR(cache_lookup_or_build(ts, dev, name, hash, builder, ctx, out));
    if (use_lookaside)
        lookaside_remember(ts, dev->index, name, hash, *out);
    return JB_OK;
}

void jb__counters_add_configure(void)
{
    atomic_fetch_add_explicit(&counter_configures, 1, memory_order_relaxed);
}

/* Every live thread's hits and misses plus those of exited threads; under registry_mutex. */
static void raw_thread_counters(uint64_t *hits, uint64_t *misses)
{
    uint64_t h = retired_hits, m = retired_misses;
    for (thread_state *ts = registry; ts; ts = ts->next) {
        h += atomic_load_explicit(&ts->hits, memory_order_relaxed);
        m += atomic_load_explicit(&ts->misses, memory_order_relaxed);
    }
    *hits = h;
    *misses = m;
}

jb_status jb_counters_get(jb_counters *caller_out, size_t caller_size)
{
    JB_RETURN_IF(!caller_out, JB_ERR_INVALID_ARGUMENT, "jb_counters_get: out is NULL");
    JB_RETURN_IF(caller_size == 0 || caller_size > sizeof(jb_counters), JB_ERR_INVALID_ARGUMENT,
                 "jb_counters_get: size %zu is not that of a jb_counters (%zu or less)",
                 caller_size, sizeof(jb_counters));
    /* Filled whole here, then copied at the caller's size: older callers get a prefix. */
    jb_counters all, *out = &all;
    out->builds = atomic_load(&counter_builds);
    out->build_failures = atomic_load(&counter_build_failures);
    uint64_t hits, misses;
    pthread_mutex_lock(&registry_mutex);
    raw_thread_counters(&hits, &misses);
    out->hits = hits - baseline_hits;
    out->misses = misses - baseline_misses;
    pthread_mutex_unlock(&registry_mutex);
    out->build_ns = atomic_load(&counter_build_ns);
    out->configures = atomic_load(&counter_configures);
    out->peak_concurrent_builds = atomic_load(&counter_peak_concurrent_builds);
    jb__disk_counters(&out->disk_hits, &out->disk_misses, &out->disk_rejected);
    memset(&out->mem_live_bytes, 0, sizeof all - offsetof(jb_counters, mem_live_bytes));
    jb__memory_counters_add(out);
    out->build_max_ns = atomic_load(&counter_build_max_ns);
    jb__slow_path_counters(out);
    jb__bundle_counters(&out->bundle_hits, &out->bundle_rejected);
    jb__lease_counters(&out->lease_waits, &out->lease_timeouts, &out->lease_fallbacks,
                       &out->lease_stale_takeovers);
    jb__remote_counters(&out->remote_hits, &out->remote_misses, &out->remote_rejected,
                        &out->remote_stores, &out->remote_breaker_trips);
    jb__remote_lease_counters(&out->remote_lease_waits, &out->remote_lease_timeouts);
    memcpy(caller_out, &all, caller_size);
    return JB_OK;
}

void jb_counters_reset(void)
{
    atomic_store(&counter_builds, 0);
    atomic_store(&counter_build_failures, 0);
    /* Threads count without locked instructions, so other threads' counters are never
     * written here: the reset moves a baseline instead. */
    pthread_mutex_lock(&registry_mutex);
    raw_thread_counters(&baseline_hits, &baseline_misses);
    pthread_mutex_unlock(&registry_mutex);
    atomic_store(&counter_build_ns, 0);
    atomic_store(&counter_build_max_ns, 0);
    atomic_store(&counter_configures, 0);
    atomic_store(&counter_peak_concurrent_builds, 0);
    jb__disk_counters_reset();
    jb__bundle_counters_reset();
    jb__lease_counters_reset();
    jb__remote_counters_reset();
    jb__remote_lease_counters_reset();
    jb__memory_counters_reset();
    jb__slow_path_counters_reset();
}

int jb_removed_locks(void)
{
    int removed = 0;
#ifdef JB_REMOVE_LOCK_JIT_CACHE
    removed |= 1;
#endif
#ifdef JB_REMOVE_LOCK_EVENT_POOL
    removed |= 2;
#endif
#ifdef JB_REMOVE_LOCK_CONFIGURE
    removed |= 4;
#endif
    return removed;
}
