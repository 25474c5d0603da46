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
        size_t need = strlen(tls_short) + strlen(log) + 2;
        char *text = malloc(need);
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
        size_t need = strlen(tls_short) + strlen(log) + 2;
        char *grown = malloc(need);
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

/* The callback and its data change together under the write lock; a warning holds the read
 * lock while it calls, so replacing the callback waits for the calls in progress. */
static pthread_rwlock_t log_lock = PTHREAD_RWLOCK_INITIALIZER;
pthread_rwlock_t *const jb__log_lock = &log_lock; /* taken by fork.c's handlers */
static jb_log_fn log_fn;
static void *log_user_data;
/* Set while this thread runs the callback: the callback's own warnings go to stderr, and it
 * cannot replace itself (that would wait for itself). */
static _Thread_local bool tls_in_log_callback;

jb_status jb_set_log_callback(jb_log_fn fn, void *user_data)
{
    JB_RETURN_IF(tls_in_log_callback, JB_ERR_INVALID_ARGUMENT,
                 "jb_set_log_callback called from inside the log callback");
    pthread_rwlock_wrlock(&log_lock);
    log_fn = fn;
    log_user_data = fn ? user_data : NULL;
    pthread_rwlock_unlock(&log_lock);
    return JB_OK;
}

/* Calls the callback (else prints). The callback may call the library: the thread's last error,
 * which the caller may be about to read, is put back afterwards. */
static void deliver(const char *text)
{
    if (!tls_in_log_callback && pthread_rwlock_rdlock(&log_lock) == 0) {
        if (log_fn) {
            int status = tls_status;
            char *long_message = tls_long;
            char short_message[JB_SHORT_MESSAGE];
            memcpy(short_message, tls_short, sizeof short_message);
            tls_long = NULL;
            tls_in_log_callback = true;
            log_fn(log_user_data, JB_LOG_WARNING, text);
            tls_in_log_callback = false;
            pthread_rwlock_unlock(&log_lock);
            set_long(long_message); /* the key too: it held the callback's message, freed here */
            memcpy(tls_short, short_message, sizeof short_message);
            tls_status = status;
            return;
        }
        pthread_rwlock_unlock(&log_lock);
    }
    fprintf(stderr, "jitbridge: warning: %s\n", text);
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
    if (tls_hold_depth == 0 || tls_in_log_callback) {
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
