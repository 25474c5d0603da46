/*
 * The Redis client of the remote tier: hiredis, found at run time as gpu/gpu_loader.c finds the
 * GPU libraries, so that the library links nothing new and starts where hiredis is missing. No
 * hiredis header is needed to build: the few calls made are declared here, with the two structs
 * read (a reply, and the head of a context), whose layouts differ between 0.13/0.14 and 1.x
 * (1.x put a function table before the context's error, and a double and a type tag into the
 * reply). The layout is chosen by the soname that opened; a version not known here is refused.
 *
 * Every call into hiredis blocks SIGPIPE in the calling thread (hiredis writes to its socket
 * with write(), and a store that died between two calls would kill a host with default SIGPIPE
 * handling) and consumes the SIGPIPE the call raised before the mask is restored.
 */
#include "store.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The layouts read: hiredis 0.13 and 0.14 ... */
typedef struct reply_v0 {
    int type;
    long long integer;
    size_t len;
    char *str;
    size_t elements;
    void **element;
} reply_v0;
typedef struct context_v0 {
    int err;
    char errstr[128];
    int fd;
} context_v0;
/* ... and 1.x. */
typedef struct reply_v1 {
    int type;
    long long integer;
    double dval;
    size_t len;
    char *str;
    char vtype[4];
    size_t elements;
    void **element;
} reply_v1;
typedef struct context_v1 {
    const void *funcs;
    int err;
    char errstr[128];
    int fd;
} context_v1;

typedef enum layout { LAYOUT_V0, LAYOUT_V1 } layout;

/* Sonames Debian and others ship, newest first (hiredis 1.2 keeps 1.1.0's); the unversioned
 * name last, its layout known from the file it resolves to. */
static const struct {
    const char *soname;
    layout layout;
} known[] = {
    {"libhiredis.so.1.1.0", LAYOUT_V1},
    {"libhiredis.so.1.0.0", LAYOUT_V1},
    {"libhiredis.so.0.14", LAYOUT_V0},
    {"libhiredis.so.0.13", LAYOUT_V0},
};

static struct {
    void *(*connect_tcp)(const char *ip, int port, struct timeval timeout);
    void *(*connect_unix)(const char *path, struct timeval timeout);
    int (*set_timeout)(void *context, struct timeval timeout);
    void *(*command_argv)(void *context, int argc, const char **argv, const size_t *argvlen);
    void (*free_reply)(void *reply);
    void (*free_context)(void *context);
    layout layout;
} api;

static const struct {
    const char *symbol;
    size_t offset;
} calls[] = {
    {"redisConnectWithTimeout", offsetof(__typeof__(api), connect_tcp)},
    {"redisConnectUnixWithTimeout", offsetof(__typeof__(api), connect_unix)},
    {"redisSetTimeout", offsetof(__typeof__(api), set_timeout)},
    {"redisCommandArgv", offsetof(__typeof__(api), command_argv)},
    {"freeReplyObject", offsetof(__typeof__(api), free_reply)},
    {"redisFree", offsetof(__typeof__(api), free_context)},
};

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static bool loaded;
static char load_failure[512];

/* The layout of the file the unversioned name opened, by its real name; false if unknown. */
static bool layout_of_unversioned(void *handle, layout *out, char *name, size_t name_len)
{
    struct link_map *map = NULL;
    char real[PATH_MAX];
    if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || !map || !realpath(map->l_name, real))
        return false;
    snprintf(name, name_len, "%s", basename(real));
    for (size_t i = 0; i < COUNT(known); i++) {
        size_t len = strlen(known[i].soname);
        if (strncmp(name, known[i].soname, len) == 0 && (name[len] == '\0' || name[len] == '.')) {
            *out = known[i].layout;
            return true;
        }
    }
    return false;
}

static void load(void)
{
    void *handle = NULL;
    const char *opened = NULL;
    char error[256] = "";
    for (size_t i = 0; i <= COUNT(known) && !handle; i++) {
        opened = i < COUNT(known) ? known[i].soname : "libhiredis.so";
        handle = dlopen(opened, RTLD_NOW | RTLD_LOCAL);
        const char *why = handle ? NULL : dlerror();
        if (why && !strstr(why, "No such file") && !error[0])
            snprintf(error, sizeof error, "%s", why); /* there, but not loadable: say why */
        if (handle && i < COUNT(known))
            api.layout = known[i].layout;
    }
    if (!handle) {
        snprintf(load_failure, sizeof load_failure,
                 "the Redis client library (hiredis: %s, or another version) could not be "
                 "loaded%s%s; install libhiredis (Debian: libhiredis0.14 or libhiredis1.1.0)",
                 known[0].soname, error[0] ? ": " : "", error);
        return;
    }
    char real_name[256];
    if (strcmp(opened, "libhiredis.so") == 0 &&
        !layout_of_unversioned(handle, &api.layout, real_name, sizeof real_name)) {
        snprintf(load_failure, sizeof load_failure,
                 "libhiredis.so is a version of hiredis this library does not know (%s): its "
                 "structures' layout cannot be trusted; install one of 0.13, 0.14, 1.x",
                 real_name);
        dlclose(handle);
        return;
    }
    for (size_t i = 0; i < COUNT(calls); i++) {
        void *symbol = dlsym(handle, calls[i].symbol);
        if (!symbol) {
            snprintf(load_failure, sizeof load_failure, "%s has no %s", opened, calls[i].symbol);
            dlclose(handle);
            return;
        }
        memcpy((char *)&api + calls[i].offset, &symbol, sizeof symbol);
    }
    loaded = true; /* never closed: contexts may live until the process ends */
}

bool jb__redis_client_load(const char **why)
{
    pthread_once(&load_once, load);
    *why = load_failure;
    return loaded;
}

/* ---- SIGPIPE kept from the host ---- */

typedef struct pipe_guard {
    sigset_t old_mask;
    bool pending_before; /* someone else's SIGPIPE: left for them */
} pipe_guard;

static bool sigpipe_pending(void)
{
    sigset_t pending;
    return sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
}

static void guard_begin(pipe_guard *g)
{
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, &g->old_mask);
    g->pending_before = sigpipe_pending();
}

static void guard_end(pipe_guard *g)
{
    if (!g->pending_before && sigpipe_pending()) {
        sigset_t pipe_only;
        sigemptyset(&pipe_only);
        sigaddset(&pipe_only, SIGPIPE);
        struct timespec now = {0, 0};
        int saved = errno;
        while (sigtimedwait(&pipe_only, NULL, &now) < 0 && errno == EINTR)
            ;
        errno = saved;
    }
    pthread_sigmask(SIG_SETMASK, &g->old_mask, NULL);
}

/* ---- connections ---- */

struct jb_redis {
    void *context;
    pid_t owner; /* the process that connected: a fork child never uses it */
};

static int context_err(void *context, const char **errstr, int *fd)
{
    if (api.layout == LAYOUT_V1) {
        context_v1 *c = context;
        *errstr = c->errstr;
        *fd = c->fd;
        return c->err;
    }
    context_v0 *c = context;
    *errstr = c->errstr;
    *fd = c->fd;
    return c->err;
}

static struct timeval timeval_of_ms(int ms)
{
    return (struct timeval){.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
}

int jb__redis_connect(const char *host, int port, const char *unix_path, int connect_ms,
                      int operation_ms, jb_redis **out, char *why, size_t why_len)
{
    *out = NULL;
    const char *load_why;
    if (!jb__redis_client_load(&load_why)) {
        snprintf(why, why_len, "%s", load_why);
        return JB_ERR_UNSUPPORTED;
    }
    jb_redis *r = malloc(sizeof *r);
    if (!r) {
        snprintf(why, why_len, "no memory for a connection");
        return JB_ERR_OUT_OF_MEMORY;
    }
    pipe_guard guard;
    guard_begin(&guard);
    void *c = unix_path ? api.connect_unix(unix_path, timeval_of_ms(connect_ms))
                        : api.connect_tcp(host, port, timeval_of_ms(connect_ms));
    const char *errstr = "no memory";
    int fd = -1;
    int err = c ? context_err(c, &errstr, &fd) : 1;
    if (!err && api.set_timeout(c, timeval_of_ms(operation_ms)) != 0) {
        context_err(c, &errstr, &fd);
        err = 1;
    }
    if (!err && fd >= 0) /* a compiler the host starts must not inherit the store's socket */
        fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
    if (err) {
        snprintf(why, why_len, "cannot connect: %s", errstr[0] ? errstr : "unknown error");
        if (c)
            api.free_context(c);
    }
    guard_end(&guard);
    if (err) {
        free(r);
        return JB_ERR_SYSTEM;
    }
    *r = (jb_redis){.context = c, .owner = getpid()};
    *out = r;
    return JB_OK;
}

bool jb__redis_owned_here(const jb_redis *r)
{
    return r->owner == getpid();
}

void jb__redis_free(jb_redis *r)
{
    if (!r)
        return;
    /* A plain connection's free only closes the descriptor and frees memory: nothing is sent,
     * so a fork child's copy goes without touching the parent's session. */
    pipe_guard guard;
    guard_begin(&guard);
    api.free_context(r->context);
    guard_end(&guard);
    free(r);
}

int jb__redis_command(jb_redis *r, int argc, const char **argv, const size_t *lens,
                      jb_redis_reply *out, char *why, size_t why_len)
{
    memset(out, 0, sizeof *out);
    pipe_guard guard;
    guard_begin(&guard);
    void *reply = api.command_argv(r->context, argc, argv, lens);
    const char *errstr;
    int fd;
    if (!reply || context_err(r->context, &errstr, &fd)) {
        if (reply)
            api.free_reply(reply);
        else
            context_err(r->context, &errstr, &fd);
        snprintf(why, why_len, "%s", errstr[0] ? errstr : "the connection failed");
        guard_end(&guard);
        return JB_ERR_SYSTEM; /* the connection is unusable now: the caller frees it */
    }
    guard_end(&guard);
    out->raw = reply;
    if (api.layout == LAYOUT_V1) {
        reply_v1 *x = reply;
        out->type = x->type, out->integer = x->integer, out->str = x->str, out->len = x->len;
    } else {
        reply_v0 *x = reply;
        out->type = x->type, out->integer = x->integer, out->str = x->str, out->len = x->len;
    }
    if (!out->str)
        out->len = 0;
    return JB_OK;
}

void jb__redis_reply_free(jb_redis_reply *reply)
{
    if (reply->raw)
        api.free_reply(reply->raw);
    memset(reply, 0, sizeof *reply);
}
