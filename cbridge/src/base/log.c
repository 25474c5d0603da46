/* Where warnings go: the log callback (callback.c's pattern), else stderr, and the warnings a
 * thread holds back while it holds a library lock. */
#include "base.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The log callback follows callback.c's pattern: called under no lock, replaced once its calls
 * in progress have returned; a warning it causes goes to stderr. */
jb_status jb_set_log_callback(jb_log_fn fn, void *user_data)
{
    return jb__callback_set(JB_CALLBACK_LOG, (void (*)(void))fn, user_data, "jb_set_log_callback",
                            NULL, NULL);
}

jb_status jb_exchange_log_callback(jb_log_fn *old_fn, void **old_user_data, jb_log_fn fn,
                                   void *user_data)
{
    void (*old)(void) = NULL;
    int status = jb__callback_set(JB_CALLBACK_LOG, (void (*)(void))fn, user_data,
                                  "jb_exchange_log_callback", &old, old_user_data);
    if (old_fn)
        *old_fn = (jb_log_fn)old;
    return status;
}

/* Calls the callback (else prints). The callback may call the library: the thread's last error,
 * which the caller may be about to read, is put back afterwards. */
static void deliver(const char *text)
{
    jb_callback_call call;
    if (!jb__callback_enter(JB_CALLBACK_LOG, &call)) {
        fprintf(stderr, "jitbridge: warning: %s\n", text);
        return;
    }
    jb_saved_error saved;
    jb__error_save(&saved);
    ((jb_log_fn)call.fn)(call.user_data, JB_LOG_WARNING, text);
    jb__error_restore(&saved);
    jb__callback_leave(&call);
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

held_warning *jb__warn_release_taken(void)
{
    held_warning *taken = tls_held;
    if (--tls_hold_depth > 0)
        return NULL;
    tls_held = tls_held_last = NULL;
    return taken;
}

static void warn_text(const char *text);

void jb__warn_pass(held_warning *warnings)
{
    while (warnings) {
        held_warning *w = warnings;
        warnings = w->next;
        warn_text(w->text);
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
    warn_text(text);
}

/* Delivers `text` now, or holds it while this thread holds its warnings. */
static void warn_text(const char *text)
{
    if (tls_hold_depth == 0 || jb__callback_inside(JB_CALLBACK_LOG)) {
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
