/* Status names, the thread-local last error, whether a compile was rejected, and versions. */
#include "base.h"

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
static _Thread_local char tls_build_log[JB_BUILD_LOG_MAX];

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

void jb__build_log_set(const char *text)
{
    static const char cut[] = "\n(cut: the compiler said more)";
    size_t len = text ? strlen(text) : 0;
    while (len && (text[len - 1] == '\n' || text[len - 1] == ' '))
        len--;
    if (len < sizeof tls_build_log) {
        memcpy(tls_build_log, text ? text : "", len);
        tls_build_log[len] = '\0';
        return;
    }
    size_t kept = sizeof tls_build_log - sizeof cut;
    memcpy(tls_build_log, text, kept);
    memcpy(tls_build_log + kept, cut, sizeof cut);
}

const char *jb__build_log(void)
{
    return tls_build_log;
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

_Static_assert(sizeof(((jb_saved_error *)0)->short_message) == JB_SHORT_MESSAGE,
               "a saved error holds a whole short message");

void jb__error_save(jb_saved_error *saved)
{
    saved->status = tls_status;
    saved->long_message = tls_long; /* still the key's value: a thread exit inside frees it */
    memcpy(saved->short_message, tls_short, sizeof saved->short_message);
    tls_long = NULL;
}

void jb__error_restore(const jb_saved_error *saved)
{
    set_long(saved->long_message); /* frees the long message the callback left, if any */
    memcpy(tls_short, saved->short_message, sizeof tls_short);
    tls_status = saved->status;
}

/* Set by a backend during a compile that the compiler rejected; the failure memory takes it. */
static _Thread_local bool tls_compile_rejected;

void jb__compile_rejected(void)
{
    tls_compile_rejected = true;
}

bool jb__compile_rejected_take(void)
{
    bool was = tls_compile_rejected;
    tls_compile_rejected = false;
    return was;
}

const char *jb_version(void)
{
    return JB_VERSION_STRING;
}
