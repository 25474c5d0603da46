/*
 * Failure memory: a source the compiler rejected is not compiled again. Each entry is keyed like
 * the module (device and module name) and holds the source itself and the compiler's identity,
 * so a name shared by two sources, or another compiler, never recalls a failure that is not its
 * own. Only rejections are remembered: the compiler ran to its end and said no. Timeouts, a
 * killed compiler, a compiler that could not start, out of memory and the like are "not now",
 * and the next caller compiles again. At most MAX_REMEMBERED entries and MAX_BYTES of them (a
 * compiler's log can be long), the oldest forgotten first.
 */
#include "cache.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_REMEMBERED 1024
#define MAX_BYTES (16u << 20)

typedef struct remembered {
    struct remembered *next; /* newer */
    int device;
    char *module_name, *source, *identity;
    int status;
    char *message; /* the whole error text, as jb_last_error_message gave it */
    size_t bytes;
} remembered;

static pthread_mutex_t memory_mutex = PTHREAD_MUTEX_INITIALIZER;

/* A build takes the memory under the module cache's lock: fork takes it right after that. */
static void build_failures_fork(jb_fork_phase phase)
{
    if (phase == JB_FORK_PREPARE)
        pthread_mutex_lock(&memory_mutex);
    else if (phase == JB_FORK_PARENT)
        pthread_mutex_unlock(&memory_mutex);
    else
        pthread_mutex_init(&memory_mutex, NULL);
}
JB_FORK_HANDLER(JB_FORK_BUILD_FAILURES, build_failures_fork)
static remembered *oldest, *newest;
static size_t count, bytes;

/* Words that say the compiler ran out of something rather than found the source wrong. */
static const char *const resource_words[] = {
    "out of memory",    "cannot allocate memory", "memory exhausted", "no space left",
    "too many open files", "resource temporarily unavailable", "killed", "interrupted",
};

static bool mentions_resources(const char *log)
{
    for (const char *p = log; p && *p; p++)
        for (size_t i = 0; i < sizeof resource_words / sizeof *resource_words; i++) {
            size_t n = strlen(resource_words[i]);
            if (strncasecmp(p, resource_words[i], n) == 0)
                return true;
        }
    return false;
}

static void entry_free(remembered *r)
{
    if (!r)
        return;
    free(r->module_name);
    free(r->source);
    free(r->identity);
    free(r->message);
    free(r);
}

static bool identity_of(jb_device *dev, char *out, size_t len)
{
    /* The identity query may fail (an unknown compiler version); it must not be the error the
     * caller sees. */
    int saved_status = jb_last_error_status();
    char *saved = jb__strdup(jb_last_error_message());
    bool ok = jb__compiler_identity(dev, out, len) == JB_OK;
    if (saved)
        jb__fail_with_text(saved_status, saved);
    free(saved);
    return ok;
}

void jb__build_failure_start(void)
{
    (void)jb__compile_rejected_take();
}

bool jb__build_failure_recall(jb_device *dev, const char *module_name, const char *source,
                              int *status)
{
    pthread_mutex_lock(&memory_mutex);
    bool any = oldest != NULL;
    pthread_mutex_unlock(&memory_mutex);
    if (!any)
        return false;
    char identity[1024];
    if (!identity_of(dev, identity, sizeof identity))
        return false;
    bool found = false;
    pthread_mutex_lock(&memory_mutex);
    for (remembered *r = oldest; r && !found; r = r->next) {
        if (r->device != dev->index || strcmp(r->module_name, module_name) != 0 ||
            strcmp(r->source, source) != 0 || strcmp(r->identity, identity) != 0)
            continue;
        found = true;
        *status = jb__fail_with_text(r->status, r->message);
    }
    pthread_mutex_unlock(&memory_mutex);
    return found;
}

void jb__build_failure_remember(jb_device *dev, const char *module_name, const char *source,
                                int status)
{
    bool was_rejection = jb__compile_rejected_take();
    if (status != JB_ERR_COMPILE || !was_rejection || mentions_resources(jb_last_error_message()))
        return;
    char identity[1024];
    if (!identity_of(dev, identity, sizeof identity))
        return;
    remembered *r = calloc(1, sizeof *r);
    if (r) {
        r->device = dev->index;
        r->status = status;
        r->module_name = jb__strdup(module_name);
        r->source = jb__strdup(source);
        r->identity = jb__strdup(identity);
        r->message = jb__strdup(jb_last_error_message());
        r->bytes = sizeof *r + strlen(module_name) + strlen(source) + strlen(identity) +
                   strlen(jb_last_error_message()) + 4;
    }
    if (!r || !r->module_name || !r->source || !r->identity || !r->message) {
        entry_free(r); /* no memory: simply not remembered */
        return;
    }
    remembered *dropped = NULL, **last_dropped = &dropped;
    pthread_mutex_lock(&memory_mutex);
    if (newest)
        newest->next = r;
    else
        oldest = r;
    newest = r;
    count++;
    bytes += r->bytes;
    while (count > MAX_REMEMBERED || (bytes > MAX_BYTES && oldest != r)) {
        remembered *old = oldest;
        oldest = old->next;
        count--;
        bytes -= old->bytes;
        old->next = NULL;
        *last_dropped = old;
        last_dropped = &old->next;
    }
    pthread_mutex_unlock(&memory_mutex);
    while (dropped) {
        remembered *next = dropped->next;
        entry_free(dropped);
        dropped = next;
    }
}

jb_status jb_forget_build_failures(void)
{
    pthread_mutex_lock(&memory_mutex);
    remembered *all = oldest;
    oldest = newest = NULL;
    count = bytes = 0;
    pthread_mutex_unlock(&memory_mutex);
    while (all) {
        remembered *next = all->next;
        entry_free(all);
        all = next;
    }
    return JB_OK;
}
