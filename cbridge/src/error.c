/* Status names and the thread-local last error. */
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
    free(tls_long);
    tls_long = NULL;
    tls_status = status;
    snprintf(tls_short, sizeof tls_short, "%s: %s", status_text(status), message);
    if (log && *log) {
        size_t need = strlen(tls_short) + strlen(log) + 2;
        tls_long = malloc(need);
        if (tls_long)
            snprintf(tls_long, need, "%s\n%s", tls_short, log);
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

void jb__warn(const char *fmt, ...)
{
    char text[1024];
    va_list args;
    va_start(args, fmt);
    vsnprintf(text, sizeof text, fmt, args);
    va_end(args);
    fprintf(stderr, "jitbridge: warning: %s\n", text);
}
