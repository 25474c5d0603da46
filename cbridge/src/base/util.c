/* Small helpers: clock, hash, strings. */
#include "base.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/file.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>

uint64_t jb__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void jb__nap_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

uint64_t jb__fnv1a64(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data;
    uint64_t h = seed;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

uint64_t jb__ceil_div_u64(uint64_t total, uint64_t per)
{
    return total / per + (total % per != 0);
}

void *jb__malloc_array(size_t count, size_t size)
{
    size_t bytes;
    if (!jb__mul_size(count, size, &bytes)) {
        errno = ENOMEM;
        return NULL;
    }
    return malloc(bytes ? bytes : 1);
}

void *jb__realloc_array(void *data, size_t count, size_t size)
{
    size_t bytes;
    if (!jb__mul_size(count, size, &bytes)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(data, bytes ? bytes : 1);
}

bool jb__errno_is_transient(int err)
{
    return err == EMFILE || err == ENFILE || err == ENOMEM || err == ENOBUFS || err == EINTR ||
           err == EAGAIN || err == EWOULDBLOCK || err == EIO || err == ETIMEDOUT;
}

#define FIRST_RETRY_NS (50ull * 1000 * 1000)
#define LAST_RETRY_NS (30ull * 1000 * 1000 * 1000)

bool jb__backoff_due(jb_backoff *b)
{
    return jb__now_ns() >= atomic_load(&b->at_ns);
}

uint64_t jb__backoff_failed(jb_backoff *b)
{
    b->delay_ns = b->delay_ns ? 2 * b->delay_ns : FIRST_RETRY_NS;
    if (b->delay_ns > LAST_RETRY_NS)
        b->delay_ns = LAST_RETRY_NS;
    atomic_store(&b->at_ns, jb__now_ns() + b->delay_ns);
    return b->delay_ns / 1000000;
}

bool jb__write_all(int fd, const void *data, size_t bytes)
{
    const char *p = data;
    while (bytes > 0) {
        ssize_t n = write(fd, p, bytes);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n;
        bytes -= (size_t)n;
    }
    return true;
}

size_t jb__read_up_to(int fd, void *data, size_t bytes)
{
    char *p = data;
    size_t got = 0;
    while (got < bytes) {
        ssize_t n = read(fd, p + got, bytes - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    return got;
}

char *jb__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *copy = malloc(n);
    if (copy)
        memcpy(copy, s, n);
    return copy;
}

static bool strbuf_reserve(jb_strbuf *sb, size_t extra)
{
    if (sb->failed)
        return false;
    size_t need;
    if (!jb__add_size(sb->len, extra, &need) || !jb__add_size(need, 1, &need)) {
        sb->failed = true;
        return false;
    }
    if (need <= sb->cap)
        return true;
    size_t cap = sb->cap ? sb->cap : 256;
    while (cap < need && jb__mul_size(cap, 2, &cap))
        ;
    char *grown = cap >= need ? realloc(sb->data, cap) : NULL;
    if (!grown) {
        sb->failed = true;
        return false;
    }
    sb->data = grown;
    sb->cap = cap;
    return true;
}

void jb__strbuf_append(jb_strbuf *sb, const char *s)
{
    size_t n = strlen(s);
    if (!strbuf_reserve(sb, n))
        return;
    memcpy(sb->data + sb->len, s, n + 1);
    sb->len += n;
}

void jb__strbuf_appendf(jb_strbuf *sb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !strbuf_reserve(sb, (size_t)n)) {
        sb->failed = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb->len += (size_t)n;
}

void jb__strbuf_free(jb_strbuf *sb)
{
    free(sb->data);
    sb->data = NULL;
    sb->len = sb->cap = 0;
}

bool jb__parse_bytes(const char *text, uint64_t *out)
{
    static const char units[] = "KMGT";
    uint64_t value = 0;
    const char *p = text;
    if (*p < '0' || *p > '9')
        return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (value > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            return false;
        value = value * 10 + (uint64_t)(*p - '0');
    }
    if (*p) {
        const char *unit = strchr(units, *p);
        if (!unit)
            return false;
        int shift = 10 * (int)(unit - units + 1);
        p++;
        if (*p && strcmp(p, "iB") != 0)
            return false;
        if (value > UINT64_MAX >> shift)
            return false;
        value <<= shift;
    }
    *out = value;
    return true;
}

void jb__mutex_init_spinning(pthread_mutex_t *mutex)
{
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP /* glibc's; elsewhere a plain mutex */
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
    pthread_mutex_init(mutex, &attr);
    pthread_mutexattr_destroy(&attr);
}

void jb__futex_wait(_Atomic int *word, int expected)
{
    /* _Atomic int is an int here (Linux, gcc and clang): the kernel compares it and sleeps. */
    syscall(SYS_futex, (int *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

void jb__futex_wake_all(_Atomic int *word)
{
    syscall(SYS_futex, (int *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

DIR *jb__opendir_at(int dir)
{
    int fd = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d && fd >= 0) {
        int err = errno;
        close(fd);
        errno = err;
    }
    return d;
}

bool jb__same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

bool jb__network_file_system(int fd)
{
    static const long magics[] = {
        0x6969,              /* NFS */
        0x517B,              /* SMB */
        (long)0xFF534D42,    /* CIFS */
        (long)0xFE534D42,    /* SMB2 */
        0x01021997,          /* 9P */
        0x65735546,          /* FUSE (sshfs and the like) */
    };
    struct statfs sf;
    if (fstatfs(fd, &sf) != 0)
        return false;
    for (size_t i = 0; i < sizeof magics / sizeof *magics; i++)
        if ((long)sf.f_type == magics[i])
            return true;
    return false;
}

int jb__lock_open_file(int fd, short type, jb_lock_fallback fallback)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    if (fcntl(fd, F_OFD_SETLK, &fl) == 0)
        return 0;
    int err = errno;
    if (err == EINVAL && fallback == JB_LOCK_OR_FLOCK)
        err = flock(fd, (type == F_UNLCK ? LOCK_UN : LOCK_EX) | LOCK_NB) == 0 ? 0 : errno;
    else if (err == EINVAL)
        err = fcntl(fd, F_SETLK, &fl) == 0 ? 0 : errno;
    return err == EACCES || err == EWOULDBLOCK ? EAGAIN : err;
}
