/*
 * The Redis client of the remote tier: hiredis, found at run time as gpu/gpu_loader.c finds the
 * GPU libraries, so that the library links nothing new and starts where hiredis is missing. No
 * hiredis header is needed to build: the few calls made are declared here, with the two structs
 * read (a reply, and the head of a context), whose layouts differ between 0.13/0.14 and 1.x
 * (1.x put a function table before the context's error, and a double and a type tag into the
 * reply). The layout is chosen by the soname that opened; a version not known here is refused.
 *
 * hiredis connects and closes; the library writes each command and reads its reply on the
 * socket itself, because hiredis's own timeout is per read or write: a store that answers one
 * byte at a time, or announces a reply of gigabytes, would hold a build for as long as it likes.
 * Here a whole command (send and reply) has one deadline, and its reply's first byte a shorter
 * one of its own, counted from the store's last taking in of the command (a stopped store is
 * given up on sooner than a large value is sent), a reply longer than a stored value may be is
 * refused from its length line without allocating it, and anything but the reply types this
 * library asks for ends the connection. A host name is looked up in a thread of its
 * own, waited for until the same deadline, so a dead resolver cannot hold a build either, and
 * each of its addresses is tried in turn (IPv4 first) while that deadline lasts.
 *
 * No SIGPIPE reaches the host: commands are sent with MSG_NOSIGNAL, and the calls into hiredis
 * block SIGPIPE in the calling thread and consume the one they raised before the mask is
 * restored (a store that died between two calls would kill a host with default handling).
 */
#include "store.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <link.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The layouts read (a context's head): hiredis 0.13 and 0.14 ... */
typedef struct context_v0 {
    int err;
    char errstr[128];
    int fd;
} context_v0;
/* ... and 1.x. */
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
    void (*free_context)(void *context);
    layout layout;
} api;

static const struct {
    const char *symbol;
    size_t offset;
} calls[] = {
    {"redisConnectWithTimeout", offsetof(__typeof__(api), connect_tcp)},
    {"redisConnectUnixWithTimeout", offsetof(__typeof__(api), connect_unix)},
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

/* ---- the largest reply ---- */

static atomic_size_t reply_max_bytes = JB_REMOTE_VALUE_MAX_BYTES;

size_t jb__redis_reply_max_bytes(void)
{
    return atomic_load(&reply_max_bytes);
}

#ifdef JB_TEST_HOOKS
void jb__test_set_remote_value_max(size_t bytes)
{
    atomic_store(&reply_max_bytes, bytes ? bytes : JB_REMOTE_VALUE_MAX_BYTES);
}
static atomic_int resolve_delay_ms;
void jb__test_set_resolve_delay_ms(int ms)
{
    atomic_store(&resolve_delay_ms, ms);
}
static _Atomic(const char *) resolve_answer;
void jb__test_set_resolve_answer(const char *addresses)
{
    atomic_store(&resolve_answer, addresses);
}
#endif

/* ---- host names, looked up under a deadline ---- */

/* Milliseconds left until `deadline_ns` (jb__now_ns's clock), 0 when it has passed. */
static int ms_left(uint64_t deadline_ns)
{
    uint64_t now = jb__now_ns();
    if (now >= deadline_ns)
        return 0;
    uint64_t ms = (deadline_ns - now + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* A host's addresses, as numbers: its IPv4 ones first, then the others, at most 8. */
#define MAX_ADDRESSES 8
typedef struct address_list {
    int count;
    char numeric[MAX_ADDRESSES][INET6_ADDRSTRLEN];
} address_list;

/* A lookup shared by the thread that makes it and the caller who waits for it: the last of the
 * two to let go frees it, so a caller that gave up leaves the thread nothing dangling. */
typedef struct lookup {
    pthread_mutex_t mutex;
    pthread_cond_t done_cond;
    int references;
    bool done;
    int err; /* getaddrinfo's */
    char host[256];
    address_list found;
} lookup;

static void lookup_release(lookup *l)
{
    pthread_mutex_lock(&l->mutex);
    bool last = --l->references == 0;
    pthread_mutex_unlock(&l->mutex);
    if (last) {
        pthread_cond_destroy(&l->done_cond);
        pthread_mutex_destroy(&l->mutex);
        free(l);
    }
}

static void *lookup_thread(void *arg)
{
    lookup *l = arg;
#ifdef JB_TEST_HOOKS
    int delay = atomic_load(&resolve_delay_ms);
    if (delay > 0) { /* a resolver that does not answer */
        struct timespec t = {delay / 1000, (delay % 1000) * 1000000L};
        while (nanosleep(&t, &t) != 0 && errno == EINTR)
            ;
    }
#endif
    address_list list = {0};
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *found = NULL;
    int err = getaddrinfo(l->host, NULL, &hints, &found);
    /* IPv4 first, as hiredis itself did: a store bound to 127.0.0.1 only is still reached by
     * a "localhost" that resolves to ::1 first, without waiting for a refusal. */
    for (int pass = 0; pass < 2; pass++)
        for (const struct addrinfo *a = found; a && list.count < MAX_ADDRESSES; a = a->ai_next)
            if ((a->ai_family == AF_INET) == (pass == 0) &&
                getnameinfo(a->ai_addr, a->ai_addrlen, list.numeric[list.count],
                            INET6_ADDRSTRLEN, NULL, 0, NI_NUMERICHOST) == 0)
                list.count++;
    if (found)
        freeaddrinfo(found);
    if (err == 0 && list.count == 0)
        err = EAI_FAIL;
#ifdef JB_TEST_HOOKS
    const char *answer = atomic_load(&resolve_answer);
    for (list.count = answer ? 0 : list.count; answer && *answer && list.count < MAX_ADDRESSES;) {
        size_t len = strcspn(answer, ",");
        snprintf(list.numeric[list.count++], INET6_ADDRSTRLEN, "%.*s", (int)len, answer);
        answer += len + (answer[len] == ',');
        err = 0;
    }
#endif
    pthread_mutex_lock(&l->mutex);
    l->done = true;
    l->err = err;
    l->found = list;
    pthread_cond_signal(&l->done_cond);
    pthread_mutex_unlock(&l->mutex);
    lookup_release(l);
    return NULL;
}

/* The addresses of `host`, as numbers, into `out` within `wait_ms`: JB_OK, or JB_ERR_SYSTEM
 * with *why (the lookup goes on in its thread and is then thrown away). */
static int resolve(const char *host, int wait_ms, address_list *out, char *why, size_t why_len)
{
    unsigned char address[sizeof(struct in6_addr)];
    if (inet_pton(AF_INET, host, address) == 1 || inet_pton(AF_INET6, host, address) == 1) {
        out->count = 1; /* numbers already: no lookup to wait for */
        snprintf(out->numeric[0], INET6_ADDRSTRLEN, "%s", host);
        return JB_OK;
    }
    lookup *l = calloc(1, sizeof *l);
    pthread_condattr_t attr;
    if (!l || pthread_condattr_init(&attr) != 0) {
        free(l);
        snprintf(why, why_len, "no memory to look up %s", host);
        return JB_ERR_SYSTEM;
    }
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&l->mutex, NULL);
    pthread_cond_init(&l->done_cond, &attr);
    pthread_condattr_destroy(&attr);
    snprintf(l->host, sizeof l->host, "%s", host);
    l->references = 2;
    pthread_attr_t thread_attr;
    pthread_attr_init(&thread_attr);
    pthread_attr_setdetachstate(&thread_attr, PTHREAD_CREATE_DETACHED);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the host's signals are not delivered there */
    pthread_t thread;
    int created = pthread_create(&thread, &thread_attr, lookup_thread, l);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&thread_attr);
    if (created != 0) {
        l->references = 1;
        lookup_release(l);
        snprintf(why, why_len, "no thread to look up %s: %s", host, strerror(created));
        return JB_ERR_SYSTEM;
    }
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += wait_ms / 1000;
    deadline.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&l->mutex);
    while (!l->done && pthread_cond_timedwait(&l->done_cond, &l->mutex, &deadline) != ETIMEDOUT)
        ;
    bool done = l->done;
    int err = l->err;
    *out = l->found;
    pthread_mutex_unlock(&l->mutex);
    lookup_release(l);
    if (!done) {
        snprintf(why, why_len, "the host name %s was not resolved within %d ms", host, wait_ms);
        return JB_ERR_SYSTEM;
    }
    if (err != 0) {
        snprintf(why, why_len, "the host name %s cannot be resolved: %s", host,
                 err == EAI_SYSTEM ? strerror(errno) : gai_strerror(err));
        return JB_ERR_SYSTEM;
    }
    return JB_OK;
}

/* ---- connections ---- */

#define READ_BUFFER_BYTES 4096 /* the longest line of a reply read (a status, an error, a length) */

struct jb_redis {
    void *context;
    int fd;
    pid_t owner;                /* the process that connected ... */
    unsigned fork_generation;   /* ... and the forks it descends from: a child never uses it */
    int operation_ms;           /* the deadline of one whole command */
    int first_byte_ms;          /* ... and of its reply's first byte, from the send (0: none) */
    size_t start, end;          /* what `buffer` holds, not yet parsed */
    struct jb_redis *prev, *next; /* in `connections` */
    char buffer[READ_BUFFER_BYTES];
};

/* Every open connection of this process, so that a fork child closes its copies of them all:
 * an idle one would only wait for its free, but one in use by another thread at the fork would
 * stay open in the child for good (that thread does not exist there). */
static pthread_mutex_t connections_mutex = PTHREAD_MUTEX_INITIALIZER;
static jb_redis *connections;

/* Sets the descriptor hiredis closes at its free (-1: none, in every version). */
static void context_forget_fd(void *context)
{
    if (api.layout == LAYOUT_V1)
        ((context_v1 *)context)->fd = -1;
    else
        ((context_v0 *)context)->fd = -1;
}

void jb__redis_fork(jb_fork_phase phase)
{
    if (phase == JB_FORK_PREPARE) {
        pthread_mutex_lock(&connections_mutex);
    } else if (phase == JB_FORK_PARENT) {
        pthread_mutex_unlock(&connections_mutex);
    } else {
        /* The parent's sessions: closed here (the parent's stay open), freed by whoever
         * holds them, if anyone in this process does. */
        for (jb_redis *r = connections; r; r = r->next) {
            close(r->fd);
            context_forget_fd(r->context);
            r->fd = -1;
        }
        connections = NULL;
        pthread_mutex_init(&connections_mutex, NULL);
    }
}

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
                      int operation_ms, int first_byte_ms, jb_redis **out, char *why,
                      size_t why_len)
{
    *out = NULL;
    const char *load_why;
    if (!jb__redis_client_load(&load_why)) {
        snprintf(why, why_len, "%s", load_why);
        return JB_ERR_UNSUPPORTED;
    }
    uint64_t deadline_ns = jb__now_ns() + (uint64_t)operation_ms * 1000000ULL;
    address_list addresses = {.count = 1};
    if (!unix_path)
        JB_FORWARD_IF_ERROR(resolve(host, operation_ms, &addresses, why, why_len));
    jb_redis *r = malloc(sizeof *r);
    if (!r) {
        snprintf(why, why_len, "no memory for a connection");
        return JB_ERR_OUT_OF_MEMORY;
    }
    pipe_guard guard;
    guard_begin(&guard);
    /* Each address in turn, connect_ms each, until one answers or the lookup's and connects'
     * time together passes operation_ms (the first is always tried). */
    void *c = NULL;
    int fd = -1, err = 1;
    for (int i = 0; i < addresses.count && err && (i == 0 || ms_left(deadline_ns) > 0); i++) {
        if (c)
            api.free_context(c);
        c = unix_path ? api.connect_unix(unix_path, timeval_of_ms(connect_ms))
                      : api.connect_tcp(addresses.numeric[i], port, timeval_of_ms(connect_ms));
        const char *errstr = "no memory";
        err = c ? context_err(c, &errstr, &fd) : 1;
        if (!err && fd < 0)
            errstr = "no socket", err = 1;
        if (err && unix_path)
            snprintf(why, why_len, "cannot connect: %s", errstr[0] ? errstr : "unknown error");
        else if (err)
            snprintf(why, why_len, "cannot connect to %s (address %d of %d): %s",
                     addresses.numeric[i], i + 1, addresses.count,
                     errstr[0] ? errstr : "unknown error");
    }
    if (!err) /* a compiler the host starts must not inherit the store's socket */
        fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
    else if (c)
        api.free_context(c);
    guard_end(&guard);
    if (err) {
        free(r);
        return JB_ERR_SYSTEM;
    }
    r->context = c;
    r->fd = fd;
    r->owner = getpid();
    r->fork_generation = atomic_load(&jb__fork_generation);
    r->operation_ms = operation_ms;
    r->first_byte_ms = first_byte_ms;
    r->start = r->end = 0;
    pthread_mutex_lock(&connections_mutex);
    JB_LIST_PUSH(connections, r);
    pthread_mutex_unlock(&connections_mutex);
    *out = r;
    return JB_OK;
}

bool jb__redis_owned_here(const jb_redis *r)
{
    return r->owner == getpid() && r->fork_generation == atomic_load(&jb__fork_generation);
}

void jb__redis_free(jb_redis *r)
{
    if (!r)
        return;
    if (r->fd >= 0) { /* a parent's connection was taken off the list in the fork child */
        pthread_mutex_lock(&connections_mutex);
        JB_LIST_UNLINK(connections, r);
        pthread_mutex_unlock(&connections_mutex);
    }
    /* A plain connection's free only closes the descriptor and frees memory: nothing is sent,
     * so a fork child's copy goes without touching the parent's session. */
    pipe_guard guard;
    guard_begin(&guard);
    api.free_context(r->context);
    guard_end(&guard);
    free(r);
}

/* ---- one command under one deadline ---- */

/* Waits until `fd` is ready for `events` before the deadline: 0, or -1 with *why. */
static int wait_ready(jb_redis *r, short events, uint64_t deadline_ns, char *why, size_t why_len)
{
    for (;;) {
        int left = ms_left(deadline_ns);
        struct pollfd p = {.fd = r->fd, .events = events};
        int n = left > 0 ? poll(&p, 1, left) : 0;
        if (n > 0)
            return 0; /* ready, or an error the next call reports */
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            snprintf(why, why_len, "poll: %s", strerror(errno));
        else
            snprintf(why, why_len, "no answer within %d ms", r->operation_ms);
        return -1;
    }
}

#define MAX_ARGS 16

/* Sends the command in RESP, without SIGPIPE, before the deadline: 0, or -1 with *why. */
static int send_command(jb_redis *r, int argc, const char **argv, const size_t *lens,
                        uint64_t deadline_ns, char *why, size_t why_len)
{
    /* Pieces: "*argc\r\n$len0\r\n", arg 0, "\r\n$len1\r\n", arg 1, ..., "\r\n". */
    char headers[MAX_ARGS + 1][48];
    struct iovec iov[2 * MAX_ARGS + 1];
    size_t count = 0;
    for (int i = 0; i < argc; i++) {
        int n = i == 0 ? snprintf(headers[i], sizeof headers[i], "*%d\r\n$%zu\r\n", argc, lens[i])
                       : snprintf(headers[i], sizeof headers[i], "\r\n$%zu\r\n", lens[i]);
        iov[count++] = (struct iovec){headers[i], (size_t)n};
        iov[count++] = (struct iovec){(void *)argv[i], lens[i]};
    }
    snprintf(headers[argc], sizeof headers[argc], "\r\n");
    iov[count++] = (struct iovec){headers[argc], 2};
    struct iovec *next = iov;
    while (count > 0) {
        struct msghdr msg = {.msg_iov = next, .msg_iovlen = count};
        ssize_t sent = sendmsg(r->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (wait_ready(r, POLLOUT, deadline_ns, why, why_len) != 0)
                return -1;
            continue;
        }
        if (sent < 0) {
            snprintf(why, why_len, "sending: %s", strerror(errno));
            return -1;
        }
        size_t done = (size_t)sent;
        while (count > 0 && done >= next->iov_len) {
            done -= next->iov_len;
            next++, count--;
        }
        if (count > 0) {
            next->iov_base = (char *)next->iov_base + done;
            next->iov_len -= done;
        }
    }
    return 0;
}

/* Reads up to `len` bytes into `into` before the deadline: the count (> 0), or -1 with *why. */
static ssize_t receive(jb_redis *r, void *into, size_t len, uint64_t deadline_ns, char *why,
                       size_t why_len)
{
    for (;;) {
        ssize_t got = recv(r->fd, into, len, MSG_DONTWAIT);
        if (got > 0)
            return got;
        if (got == 0) {
            snprintf(why, why_len, "the store closed the connection");
            return -1;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            snprintf(why, why_len, "receiving: %s", strerror(errno));
            return -1;
        }
        if (wait_ready(r, POLLIN, deadline_ns, why, why_len) != 0)
            return -1;
    }
}

/* The next line of the reply (its CR LF replaced by NUL), in the buffer: NULL with *why when
 * it does not come before the deadline or is longer than the buffer. */
static char *read_line(jb_redis *r, size_t *line_len, uint64_t deadline_ns, char *why,
                       size_t why_len)
{
    for (;;) {
        char *at = r->buffer + r->start;
        size_t held = r->end - r->start;
        char *lf = held ? memchr(at, '\n', held) : NULL;
        if (lf) {
            if (lf == at || lf[-1] != '\r') {
                snprintf(why, why_len, "the store's reply is not RESP (a line without CR LF)");
                return NULL;
            }
            lf[-1] = '\0';
            *line_len = (size_t)(lf - 1 - at);
            r->start += *line_len + 2;
            return at;
        }
        if (r->start > 0) { /* room for the rest of the line */
            memmove(r->buffer, at, held);
            r->start = 0, r->end = held;
        }
        if (r->end == sizeof r->buffer) {
            snprintf(why, why_len, "the store's reply has a line longer than %d bytes",
                     READ_BUFFER_BYTES);
            return NULL;
        }
        ssize_t got = receive(r, r->buffer + r->end, sizeof r->buffer - r->end, deadline_ns, why,
                              why_len);
        if (got < 0)
            return NULL;
        r->end += (size_t)got;
    }
}

/* A whole decimal number, as RESP writes lengths and integers: false on anything else. */
static bool parse_integer(const char *s, long long *out)
{
    bool negative = *s == '-';
    s += negative;
    if (!*s)
        return false;
    unsigned long long value = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || value > (ULLONG_MAX - 9) / 10 || value * 10 + 9 > LLONG_MAX)
            return false;
        value = value * 10 + (unsigned)(*s - '0');
    }
    *out = negative ? -(long long)value : (long long)value;
    return true;
}

/* Reads `len` bytes of a bulk string into `into`, then its CR LF: 0, or -1 with *why. */
static int read_bulk(jb_redis *r, char *into, size_t len, uint64_t deadline_ns, char *why,
                     size_t why_len)
{
    size_t have = r->end - r->start < len ? r->end - r->start : len;
    memcpy(into, r->buffer + r->start, have);
    r->start += have;
    while (have < len) {
        ssize_t got = receive(r, into + have, len - have, deadline_ns, why, why_len);
        if (got < 0)
            return -1;
        have += (size_t)got;
    }
    size_t line_len;
    char *end = read_line(r, &line_len, deadline_ns, why, why_len);
    if (!end)
        return -1;
    if (line_len != 0) {
        snprintf(why, why_len, "the store's reply is longer than its length says");
        return -1;
    }
    return 0;
}

/* Reads one reply into `out` (its text allocated): 0, or -1 with *why. */
static int read_reply(jb_redis *r, jb_redis_reply *out, uint64_t deadline_ns, char *why,
                      size_t why_len)
{
    size_t line_len;
    char *line = read_line(r, &line_len, deadline_ns, why, why_len);
    if (!line)
        return -1;
    long long number = 0;
    switch (line[0]) {
    case '+':
    case '-':
        out->type = line[0] == '+' ? JB_REDIS_STATUS : JB_REDIS_ERROR;
        out->raw = malloc(line_len);
        if (!out->raw) {
            snprintf(why, why_len, "no memory for a reply");
            return -1;
        }
        memcpy(out->raw, line + 1, line_len); /* the text and its NUL */
        out->str = out->raw, out->len = line_len - 1;
        return 0;
    case ':':
        if (!parse_integer(line + 1, &number))
            break;
        out->type = JB_REDIS_INTEGER, out->integer = number;
        return 0;
    case '*':
    case '$':
        if (!parse_integer(line + 1, &number) || number < -1)
            break;
        if (number == -1) {
            out->type = JB_REDIS_NIL;
            return 0;
        }
        if (line[0] == '*') {
            snprintf(why, why_len, "the store answered with an array, which no command of this "
                                   "library asks for");
            return -1;
        }
        if ((unsigned long long)number > jb__redis_reply_max_bytes()) {
            snprintf(why, why_len, "the store announced a reply of %lld bytes, more than the %zu "
                     "a value may be: refused unread", number, jb__redis_reply_max_bytes());
            return -1;
        }
        out->raw = malloc((size_t)number + 1);
        if (!out->raw) {
            snprintf(why, why_len, "no memory for a reply of %lld bytes", number);
            return -1;
        }
        if (read_bulk(r, out->raw, (size_t)number, deadline_ns, why, why_len) != 0)
            return -1;
        ((char *)out->raw)[number] = '\0';
        out->type = JB_REDIS_STRING, out->str = out->raw, out->len = (size_t)number;
        return 0;
    }
    snprintf(why, why_len, "the store's reply is not RESP ('%.40s')", line);
    return -1;
}

/* The bytes sent on `fd` that the store has not yet taken in (TCP: not yet acknowledged), or -1
 * when the system cannot say. */
static int bytes_unread(int fd)
{
    int queued;
    return ioctl(fd, SIOCOUTQ, &queued) == 0 ? queued : -1;
}

/* Waits for a reply's first byte under the command's deadline and, until then, within
 * first_byte_ms of the send's end or of the store's last seen taking in of the command's queued
 * bytes (a store still reading a large value is no stopped one), looked at every fifth of that:
 * 0, or -1 with *why. */
static int wait_first_byte(jb_redis *r, uint64_t deadline_ns, char *why, size_t why_len)
{
    uint64_t wait_ns = (uint64_t)r->first_byte_ms * 1000000ULL;
    uint64_t bound_ns = jb__now_ns() + wait_ns;
    int queued = bytes_unread(r->fd), look_ms = r->first_byte_ms / 5 + 1;
    for (;;) {
        if (bound_ns >= deadline_ns)
            return 0; /* the command's deadline comes first: read_reply waits for it */
        int left = ms_left(bound_ns);
        struct pollfd p = {.fd = r->fd, .events = POLLIN};
        int n = left > 0 ? poll(&p, 1, left < look_ms ? left : look_ms) : 0;
        if (n > 0)
            return 0; /* ready, or an error the next read reports */
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(why, why_len, "poll: %s", strerror(errno));
            return -1;
        }
        int now = bytes_unread(r->fd);
        if (now >= 0 && now < queued) { /* taken in since the last look */
            queued = now;
            bound_ns = jb__now_ns() + wait_ns;
        } else if (left <= look_ms) {
            snprintf(why, why_len, "no first byte of a reply within %d ms (nor any of the "
                     "command taken in)", r->first_byte_ms);
            return -1;
        }
    }
}

int jb__redis_command(jb_redis *r, int argc, const char **argv, const size_t *lens,
                      jb_redis_reply *out, char *why, size_t why_len)
{
    memset(out, 0, sizeof *out);
    if (!jb__redis_owned_here(r)) {
        snprintf(why, why_len, "the connection was made by the process this one was forked from");
        return JB_ERR_SYSTEM;
    }
    if (argc < 1 || argc > MAX_ARGS) {
        snprintf(why, why_len, "a command of %d words (1 to %d are sent)", argc, MAX_ARGS);
        return JB_ERR_SYSTEM;
    }
    uint64_t deadline_ns = jb__now_ns() + (uint64_t)r->operation_ms * 1000000ULL;
    int failed = send_command(r, argc, argv, lens, deadline_ns, why, why_len);
    if (!failed && r->first_byte_ms > 0 && r->end == r->start)
        failed = wait_first_byte(r, deadline_ns, why, why_len);
    if (!failed)
        failed = read_reply(r, out, deadline_ns, why, why_len);
    if (!failed && r->end != r->start) {
        snprintf(why, why_len, "the store sent more than one reply to one command");
        failed = -1;
    }
    if (failed) {
        jb__redis_reply_free(out);
        return JB_ERR_SYSTEM; /* the connection is unusable now: the caller frees it */
    }
    return JB_OK;
}

void jb__redis_reply_free(jb_redis_reply *reply)
{
    free(reply->raw);
    memset(reply, 0, sizeof *reply);
}
