/*
 * Seeing compiles: the event callback, thread tags, and the slow path's counters for a
 * dashboard. Events are raised inside a build, under the module cache's write lock, so they are
 * queued on the raising thread and delivered in order once the cache lets go of its lock
 * (jb__events_release): a callback that launches a kernel of its own would otherwise take the
 * cache's lock again on this thread. A memory hit raises nothing and passes no code of this file.
 */
#include "base.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Thread_local char tls_tag[JB_THREAD_TAG_MAX + 1];

jb_status jb_set_thread_tag(const char *tag)
{
    size_t len = tag ? strnlen(tag, JB_THREAD_TAG_MAX + 1) : 0;
    JB_RETURN_IF(len > JB_THREAD_TAG_MAX, JB_ERR_INVALID_ARGUMENT,
                 "jb_set_thread_tag: the tag is longer than %d bytes", JB_THREAD_TAG_MAX);
    memcpy(tls_tag, tag ? tag : "", len);
    tls_tag[len] = '\0';
    return JB_OK;
}

const char *jb_thread_tag(void)
{
    return tls_tag;
}

const char *jb_cache_event_kind_name(int kind)
{
    static const char *const names[] = {
        [JB_CACHE_EVENT_DISK_HIT] = "disk hit",
        [JB_CACHE_EVENT_BUNDLE_HIT] = "bundle hit",
        [JB_CACHE_EVENT_BUILD_START] = "build start",
        [JB_CACHE_EVENT_BUILD_END] = "build end",
        [JB_CACHE_EVENT_BUILD_FAIL] = "build fail",
        [JB_CACHE_EVENT_DISK_STORE] = "disk store",
        [JB_CACHE_EVENT_ENTRY_REJECTED] = "entry rejected",
        [JB_CACHE_EVENT_ENTRY_EVICTED] = "entry evicted",
        [JB_CACHE_EVENT_SEAL_VIOLATION] = "seal violation",
        [JB_CACHE_EVENT_REMOTE_HIT] = "remote hit",
        [JB_CACHE_EVENT_REMOTE_REJECTED] = "remote rejected",
        [JB_CACHE_EVENT_REMOTE_STORE] = "remote store",
        [JB_CACHE_EVENT_FARM_BUILT] = "farm built",
        [JB_CACHE_EVENT_FARM_FAILED] = "farm failed",
    };
    return kind > 0 && (size_t)kind < sizeof names / sizeof *names ? names[kind] : NULL;
}

jb_status jb_set_event_callback(jb_cache_event_fn fn, void *user_data)
{
    return jb__callback_set(JB_CALLBACK_EVENT, (void (*)(void))fn, user_data,
                            "jb_set_event_callback", NULL, NULL);
}

jb_status jb_exchange_event_callback(jb_cache_event_fn *old_fn, void **old_user_data,
                                     jb_cache_event_fn fn, void *user_data)
{
    void (*old)(void) = NULL;
    int status = jb__callback_set(JB_CALLBACK_EVENT, (void (*)(void))fn, user_data,
                                  "jb_exchange_event_callback", &old, old_user_data);
    if (old_fn)
        *old_fn = (jb_cache_event_fn)old;
    return status;
}

/* ---- the module a build on this thread is for, and the events it raises ---- */

typedef struct build_context {
    jb_device *device;
    const char *name, *key;
    char content_key[64];
} build_context;
static _Thread_local build_context tls_build;

void jb__event_build_begin(jb_device *dev, const char *name, const char *key)
{
    tls_build = (build_context){.device = dev, .name = name, .key = key};
}

void jb__event_build_content_key(const char *file)
{
    /* The entry's file name without its suffix: the content hash. */
    size_t len = strcspn(file, ".");
    if (len >= sizeof tls_build.content_key)
        len = sizeof tls_build.content_key - 1;
    memcpy(tls_build.content_key, file, len);
    tls_build.content_key[len] = '\0';
}

void jb__event_build_end(void)
{
    tls_build = (build_context){0};
}

typedef struct queued_event {
    struct queued_event *next;
    jb_cache_event event;
    char strings[]; /* what the event's strings point at */
} queued_event;

static _Thread_local int tls_hold_depth;
static _Thread_local queued_event *tls_queue, *tls_queue_last;

static void deliver(const queued_event *q)
{
    jb_callback_call call;
    if (!jb__callback_enter(JB_CALLBACK_EVENT, &call))
        return;
    jb_saved_error saved;
    jb__error_save(&saved);
    ((jb_cache_event_fn)call.fn)(call.user_data, &q->event);
    jb__error_restore(&saved);
    jb__callback_leave(&call);
}

/* Copies `s` to *at and moves *at past it; the copy. */
static const char *place(char **at, const char *s)
{
    size_t bytes = strlen(s) + 1;
    char *copy = memcpy(*at, s, bytes);
    *at += bytes;
    return copy;
}

void jb__event_raise(jb_cache_event_kind kind, uint64_t duration_ns, int status,
                     const char *message)
{
    /* Nothing to build when nobody listens, nor inside the callback (callback.c never enters it
     * again): a build's events cost a load each. */
    if (!jb__callback_installed(JB_CALLBACK_EVENT) || jb__callback_inside(JB_CALLBACK_EVENT))
        return;
    JB_TEST_POINT(JB_TEST_EVENT_MADE, jb_cache_event_kind_name(kind));
    const build_context *b = &tls_build;
    const char *name = b->name ? b->name : "", *key = b->key ? b->key : "";
    message = message ? message : "";
    size_t strings = strlen(name) + strlen(key) + strlen(b->content_key) + strlen(tls_tag) +
                     strlen(message) + 5;
    queued_event *q = malloc(sizeof *q + strings);
    if (!q)
        return; /* an event is information: without memory it is lost, the build goes on */
    char *at = q->strings;
    q->next = NULL;
    q->event = (jb_cache_event){
        .struct_size = sizeof(jb_cache_event),
        .kind = kind,
        .name = place(&at, name),
        .key = place(&at, key),
        .content_key = place(&at, b->content_key),
        .device = b->device,
        .thread_id = (uint64_t)gettid(), /* not kept: a forked child's thread has another */
        .tag = place(&at, tls_tag),
        .time_ns = jb__now_ns(),
        .duration_ns = duration_ns,
        .status = status,
        .message = place(&at, message),
    };
    if (tls_hold_depth == 0) {
        deliver(q);
        free(q);
        return;
    }
    if (tls_queue_last)
        tls_queue_last->next = q;
    else
        tls_queue = q;
    tls_queue_last = q;
}

void jb__events_hold(void)
{
    tls_hold_depth++;
}

void jb__events_release(void)
{
    if (--tls_hold_depth > 0)
        return;
    /* Taken off first: the callback may build, and that build's release runs in here. */
    queued_event *q = tls_queue;
    tls_queue = tls_queue_last = NULL;
    while (q) {
        queued_event *next = q->next;
        deliver(q);
        free(q);
        q = next;
    }
}

/* ---- counters of the slow path (jb_counters' last fields) ---- */

static atomic_uint_fast64_t counter_sealed_refusals, counter_sealed_warnings;

void jb__count_sealed(bool refused)
{
    atomic_fetch_add_explicit(refused ? &counter_sealed_refusals : &counter_sealed_warnings, 1,
                              memory_order_relaxed);
}

void jb__slow_path_counters(jb_counters *out)
{
    out->sealed_refusals = atomic_load(&counter_sealed_refusals);
    out->sealed_warnings = atomic_load(&counter_sealed_warnings);
}

void jb__slow_path_counters_reset(void)
{
    atomic_store(&counter_sealed_refusals, 0);
    atomic_store(&counter_sealed_warnings, 0);
}
