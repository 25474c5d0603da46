/*
 * Sealed mode: a server that finished warming up forbids the compiler. The check sits right
 * before the compiler would start (module.c), after memory and the cache folder missed, so
 * whatever loads without compiling still loads. JITBRIDGE_SEAL is read once, at the first use of
 * the seal; jb_seal overrides it. A security switch fails closed: only an unset variable or
 * exactly off, 0, false or no (any case) leaves the process unsealed; warn and error seal;
 * anything else (empty, a stray space, a typo) seals to refuse, with one warning naming it.
 */
#include "cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SHOWN_MAX 64 /* bytes of a refused value the warning shows */

static atomic_int seal_mode = JB_SEAL_OFF;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
/* A JITBRIDGE_SEAL that is none of the words, copied and escaped for the warning: each byte as
 * \xHH at most, and "..." past SHOWN_MAX. */
static char env_refused[4 * SHOWN_MAX + 4];
static bool env_was_refused;
static atomic_bool env_refusal_warned;

static bool is_one_of(const char *value, const char *const *words)
{
    for (; *words; words++)
        if (strcasecmp(value, *words) == 0)
            return true;
    return false;
}

/* `value` printable: control and non-ASCII bytes, quotes and backslashes as \xHH, cut short. */
static void escape_shown(const char *value, char *out)
{
    size_t used = 0, i = 0;
    for (; value[i] && i < SHOWN_MAX; i++) {
        unsigned char c = (unsigned char)value[i];
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\')
            out[used++] = (char)c;
        else
            used += (size_t)sprintf(out + used, "\\x%02x", c);
    }
    strcpy(out + used, value[i] ? "..." : "");
}

static void read_env(void)
{
    static const char *const off[] = {"off", "0", "false", "no", NULL};
    const char *value = getenv("JITBRIDGE_SEAL");
    if (!value || is_one_of(value, off))
        return;
    if (strcasecmp(value, "warn") == 0) {
        atomic_store(&seal_mode, JB_SEAL_WARN);
        return;
    }
    atomic_store(&seal_mode, JB_SEAL_ERROR);
    if (strcasecmp(value, "error") != 0) {
        escape_shown(value, env_refused);
        env_was_refused = true;
    }
}

/* Reads the variable on the first call; its warning is given outside the once (a log
 * callback may call jb_seal). */
static void read_env_once(void)
{
    pthread_once(&env_once, read_env);
    if (env_was_refused && !atomic_exchange(&env_refusal_warned, true))
        jb__warn("JITBRIDGE_SEAL='%s' is not warn, error or off (0, false, no): the process is "
                 "sealed to refuse compiles (JB_SEAL_ERROR); set off, warn or error, or unset it",
                 env_refused);
}

jb_status jb_seal(jb_seal_mode mode)
{
    read_env_once();
    JB_RETURN_IF(mode != JB_SEAL_OFF && mode != JB_SEAL_WARN && mode != JB_SEAL_ERROR,
                 JB_ERR_INVALID_ARGUMENT,
                 "jb_seal: %d is not JB_SEAL_OFF, JB_SEAL_WARN or JB_SEAL_ERROR", (int)mode);
    atomic_store(&seal_mode, mode);
    return JB_OK;
}

jb_seal_mode jb_seal_mode_get(void)
{
    read_env_once();
    return atomic_load(&seal_mode);
}

/* Keys warned about in JB_SEAL_WARN: "<device index>:<name>", kept for the process. Only under
 * the module cache's write lock. */
static jb_table warned;

static bool key_equal(const void *stored, const void *key)
{
    return strcmp(stored, key) == 0;
}

/* True the first time module `name` is seen on `dev`; on no memory, every time (a warning too
 * many). */
static bool first_warning(const jb_device *dev, const char *name)
{
    jb_strbuf key = {0};
    jb__strbuf_appendf(&key, "%d:%s", dev->index, name);
    if (key.failed)
        return true;
    uint64_t hash = jb__table_hash(key.data, key.len); /* names may come from a manifest */
    if (jb__table_find(&warned, hash, key.data, key_equal)) {
        jb__strbuf_free(&key);
        return false;
    }
    if (jb__table_reserve(&warned))
        jb__table_add(&warned, hash, key.data, key.data); /* kept for the process */
    else
        jb__strbuf_free(&key);
    return true;
}

int jb__seal_check(jb_device *dev, const char *name, bool once_per_module)
{
    read_env_once();
    int mode = atomic_load(&seal_mode);
    if (mode == JB_SEAL_OFF)
        return JB_OK;
    if (mode == JB_SEAL_WARN) {
        if (once_per_module && !first_warning(dev, name))
            return JB_OK;
        char text[768];
        snprintf(text, sizeof text,
                 "sealed process compiles kernel '%s' on %s: it was not in memory, the cache "
                 "folder or a bundle (JB_SEAL_WARN: warned once per kernel and device)",
                 name, dev->name);
        jb__warn("%s", text);
        jb__count_sealed(false);
        jb__event_raise(JB_CACHE_EVENT_SEAL_VIOLATION, 0, JB_OK, text);
        return JB_OK;
    }
    jb__count_sealed(true);
    jb__fail(JB_ERR_SEALED,
             "kernel '%s' would compile on %s, but the process is sealed (JB_SEAL_ERROR): it is "
             "not in memory, the cache folder or a bundle; nothing was compiled",
             name, dev->name);
    jb__event_raise(JB_CACHE_EVENT_SEAL_VIOLATION, 0, JB_ERR_SEALED, jb_last_error_message());
    return JB_ERR_SEALED;
}

int jb__compiler_identity(jb_device *dev, char *out, size_t len)
{
    /* Sealed to refuse, no program starts, the compiler's version query included. */
    return dev->backend->compiler_identity(dev, jb_seal_mode_get() != JB_SEAL_ERROR, out, len);
}
