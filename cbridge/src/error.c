/* Status names, the thread-local last error, versions, and where warnings go. */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Short messages live in a fixed buffer; a long one (a compiler log) in a heap block that the
 * next failure on the thread replaces. If that allocation fails, the short form is kept. */
#define JB_SHORT_MESSAGE 1024

static _Thread_local char tls_short[JB_SHORT_MESSAGE];
static _Thread_local char *tls_long;
static _Thread_local int tls_status;

/* _Thread_local has no destructor: a key whose value is tls_long frees it when the thread ends. */
static pthread_key_t long_key;
static bool long_key_made;
static pthread_once_t long_key_once = PTHREAD_ONCE_INIT;

/* Runs at thread exit; a later error on this thread (another destructor) starts afresh. */
static void free_long(void *text)
{
    if (text == tls_long)
        tls_long = NULL;
    free(text);
}

static void make_long_key(void)
{
    long_key_made = pthread_key_create(&long_key, free_long) == 0;
}

static void set_long(char *text)
{
    free(tls_long);
    tls_long = text;
    pthread_once(&long_key_once, make_long_key);
    if (long_key_made && pthread_setspecific(long_key, text) != 0 && text) {
        free(text); /* cannot be freed at thread exit: keep the short form instead */
        tls_long = NULL;
    }
}

const char *jb_status_name(int status)
{
    switch (status) {
#define JB_STATUS_NAME_(name, value, text)                                                         \
    case value:                                                                                    \
        return #name;
        JB_STATUS_TABLE(JB_STATUS_NAME_)
#undef JB_STATUS_NAME_
    }
    return "JB_UNKNOWN_STATUS";
}

static const char *status_text(int status)
{
    switch (status) {
#define JB_STATUS_TEXT_(name, value, text)                                                         \
    case value:                                                                                    \
        return text;
        JB_STATUS_TABLE(JB_STATUS_TEXT_)
#undef JB_STATUS_TEXT_
    }
    return "unknown status";
}

const char *jb_last_error_message(void)
{
    return tls_long ? tls_long : tls_short;
}

int jb_last_error_status(void)
{
    return tls_status;
}

int jb_abi_version(void)
{
    return JB_ABI_VERSION;
}

static void set_error(int status, const char *log, const char *fmt, va_list ap)
{
    char message[JB_SHORT_MESSAGE - 64]; /* leaves room for the status text in front */
    vsnprintf(message, sizeof message, fmt, ap);
    set_long(NULL);
    tls_status = status;
    snprintf(tls_short, sizeof tls_short, "%s: %s", status_text(status), message);
    if (log && *log) {
        size_t need;
        char *text = jb__add_size(strlen(tls_short), strlen(log), &need) &&
                             jb__add_size(need, 2, &need)
                         ? malloc(need)
                         : NULL;
        if (text)
            snprintf(text, need, "%s\n%s", tls_short, log);
        set_long(text);
    }
}

int jb__fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_error(status, NULL, fmt, ap);
    va_end(ap);
    return status;
}

int jb__fail_with_log(int status, const char *log, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_error(status, log, fmt, ap);
    va_end(ap);
    return status;
}

int jb__fail_with_text(int status, const char *text)
{
    size_t first_line = strcspn(text, "\n");
    snprintf(tls_short, sizeof tls_short, "%.*s", (int)first_line, text);
    tls_status = status;
    set_long(text[first_line] || first_line >= sizeof tls_short ? jb__strdup(text) : NULL);
    return status;
}

void jb__error_append(const char *fmt, ...)
{
    char extra[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(extra, sizeof extra, fmt, ap);
    va_end(ap);
    size_t old_len = strlen(tls_short);
    snprintf(tls_short + old_len, sizeof tls_short - old_len, "%s", extra);
    if (tls_long) {
        /* The long form is the short message, a newline and the log: rebuild it around the log. */
        const char *log = tls_long + old_len + 1;
        size_t need;
        char *grown = jb__add_size(strlen(tls_short), strlen(log), &need) &&
                              jb__add_size(need, 2, &need)
                          ? malloc(need)
                          : NULL;
        if (grown) {
            snprintf(grown, need, "%s\n%s", tls_short, log);
            set_long(grown); /* through the key too: the thread's exit frees the new one */
        }
    }
}

const char *jb_version(void)
{
    return JB_VERSION_STRING;
}

/*
 * The callback never runs under a lock. The callback and its data are one record; a warning
 * takes a reference to the current record under log_mutex, lets go, calls, and gives the
 * reference back. jb_set_log_callback puts a new record in place and waits (log_idle) until the
 * old record's calls have returned before freeing it, so a replaced user_data is never used
 * after the replacement returns. log_mutex guards pointers and counts only, never a call: a
 * callback may fork, or wait for a thread that forks, and fork's prepare takes it at once.
 */
typedef struct log_sink {
    jb_log_fn fn;
    void *user_data;
    unsigned calls; /* in progress, under log_mutex */
} log_sink;
static pthread_mutex_t log_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t log_idle = PTHREAD_COND_INITIALIZER;
static log_sink *log_current; /* NULL: warnings go to stderr */
/* The record this thread is calling, or NULL: the callback's own warnings go to stderr, and it
 * cannot replace itself (that would wait for itself). */
static _Thread_local log_sink *tls_calling;

jb_status jb_set_log_callback(jb_log_fn fn, void *user_data)
{
    JB_RETURN_IF(tls_calling, JB_ERR_INVALID_ARGUMENT,
                 "jb_set_log_callback called from inside the log callback");
    log_sink *fresh = NULL;
    if (fn) {
        fresh = malloc(sizeof *fresh);
        JB_RETURN_IF(!fresh, JB_ERR_OUT_OF_MEMORY, "no memory for the log callback");
        *fresh = (log_sink){fn, user_data, 0};
    }
    pthread_mutex_lock(&log_mutex);
    log_sink *old = log_current;
    log_current = fresh;
    while (old && old->calls > 0)
        pthread_cond_wait(&log_idle, &log_mutex);
    pthread_mutex_unlock(&log_mutex);
    free(old);
    return JB_OK;
}

void jb__log_fork(jb_fork_phase phase)
{
    if (phase == JB_FORK_PREPARE) {
        pthread_mutex_lock(&log_mutex);
    } else if (phase == JB_FORK_PARENT) {
        pthread_mutex_unlock(&log_mutex);
    } else {
        pthread_mutex_init(&log_mutex, NULL);
        pthread_cond_init(&log_idle, NULL);
        /* Only this thread exists here: the calls still counted were other threads'. (A
         * replaced record this thread is calling stays allocated: its replacer is gone.) */
        if (log_current)
            log_current->calls = tls_calling == log_current;
    }
}

/* Calls the callback (else prints). The callback may call the library: the thread's last error,
 * which the caller may be about to read, is put back afterwards. */
static void deliver(const char *text)
{
    log_sink *sink = NULL;
    if (!tls_calling) {
        pthread_mutex_lock(&log_mutex);
        if ((sink = log_current))
            sink->calls++;
        pthread_mutex_unlock(&log_mutex);
    }
    if (!sink) {
        fprintf(stderr, "jitbridge: warning: %s\n", text);
        return;
    }
    int status = tls_status;
    char *long_message = tls_long;
    char short_message[JB_SHORT_MESSAGE];
    memcpy(short_message, tls_short, sizeof short_message);
    tls_long = NULL;
    tls_calling = sink;
    sink->fn(sink->user_data, JB_LOG_WARNING, text);
    tls_calling = NULL;
    set_long(long_message); /* the key too: it held the callback's message, freed here */
    memcpy(tls_short, short_message, sizeof short_message);
    tls_status = status;
    pthread_mutex_lock(&log_mutex);
    if (--sink->calls == 0 && sink != log_current)
        pthread_cond_broadcast(&log_idle); /* a replacement waits for this record's last call */
    pthread_mutex_unlock(&log_mutex);
}

/* Warnings held back on this thread, oldest first. */
typedef struct held_warning {
    struct held_warning *next;
    char text[];
} held_warning;
static _Thread_local int tls_hold_depth;
static _Thread_local held_warning *tls_held, *tls_held_last;

void jb__warn_hold(void)
{
    tls_hold_depth++;
}

void jb__warn_release(void)
{
    if (--tls_hold_depth > 0)
        return;
    while (tls_held) {
        held_warning *w = tls_held;
        tls_held = w->next;
        if (!tls_held)
            tls_held_last = NULL;
        deliver(w->text);
        free(w);
    }
}

void jb__warn(const char *fmt, ...)
{
    char text[1024];
    va_list args;
    va_start(args, fmt);
    vsnprintf(text, sizeof text, fmt, args);
    va_end(args);
    if (tls_hold_depth == 0 || tls_calling) {
        deliver(text);
        return;
    }
    held_warning *w = malloc(sizeof *w + strlen(text) + 1);
    if (!w) { /* no memory to hold it: stderr, never the callback under a lock */
        fprintf(stderr, "jitbridge: warning: %s\n", text);
        return;
    }
    w->next = NULL;
    memcpy(w->text, text, strlen(text) + 1);
    if (tls_held_last)
        tls_held_last->next = w;
    else
        tls_held = w;
    tls_held_last = w;
}
