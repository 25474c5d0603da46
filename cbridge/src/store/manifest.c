/*
 * Manifests: the kernels a process built or loaded, one line each, so that a later process can
 * prewarm them, export exactly them into a bundle, or check which of them would compile.
 * JITBRIDGE_MANIFEST=FILE (secure_getenv) turns the writer on; the format is in jitbridge.h.
 *
 * Several processes append to one file: each line is one write() on an O_APPEND handle, so
 * lines never interleave, and a line is at most JB_MANIFEST_LINE_MAX bytes (a longer one is not
 * written). A line that another writer left cut (its disk full) is ended before the next one, so
 * that the next is not glued to it and lost with it: the writer looks at the file's last byte
 * under a write lock on the file (its open file description's, F_OFD_SETLK, which no other
 * descriptor's close drops; a forked child opens the file anew, so that its lock excludes its
 * parent's; a reader's read lock delays it, three lines at most), where it can (not on a
 * network file system, not when the lock stays taken, not on a file it may not read). The file
 * is opened once (no link followed, never blocking: a FIFO is refused) and must be a regular
 * file of ours that no one else may write; its device and inode are kept, and a descriptor that
 * no longer leads to them, appending and closed on exec (the application closed ours and reused
 * its number), is never written, reopened or closed. Writing is best effort: a failure stops it with one warning and never fails a
 * build.
 */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static pthread_once_t open_once = PTHREAD_ONCE_INIT;
static atomic_int manifest_fd = -1;
static dev_t manifest_dev; /* the file manifest_fd was opened on: set before it is published */
static ino_t manifest_ino;
/* Whether a writer looks for a line left cut: a local file we may read, and the lock not found
 * taken for LOCK_GIVE_UP lines in a row. Under the module cache's write lock, like builds. */
static bool look_for_cut;
static int lock_misses;
#define LOCK_GIVE_UP 3
/* The keys this process wrote (each once): under the module cache's write lock, like builds. */
static jb_table written;

static void open_manifest(void)
{
    const char *path = secure_getenv("JITBRIDGE_MANIFEST");
    char absolute[PATH_MAX]; /* a relative one: from where the process started */
    if (!path || !*path)
        return;
    if (!jb__path_from_start(path, absolute, sizeof absolute)) {
        jb__warn("JITBRIDGE_MANIFEST=%s cannot be made absolute (%s); no manifest is written",
                 path, strerror(errno));
        return;
    }
    /* Read as well: a writer looks at the last byte for a line left cut (a file we may only
     * write is written without that look). */
    const int flags = O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;
    int fd = open(absolute, O_RDWR | flags, 0600);
    bool readable = fd >= 0;
    if (fd < 0 && errno == EACCES)
        fd = open(absolute, O_WRONLY | flags, 0600);
    struct stat st;
    const char *problem = NULL;
    if (fd < 0)
        problem = strerror(errno);
    else if (fstat(fd, &st) != 0)
        problem = strerror(errno);
    else if (!S_ISREG(st.st_mode))
        problem = "not a regular file";
    else if (st.st_uid != geteuid())
        problem = "owned by another user";
    else if (st.st_mode & (S_IWGRP | S_IWOTH))
        problem = "writable by group or others";
    if (problem) {
        if (fd >= 0)
            close(fd);
        jb__warn("JITBRIDGE_MANIFEST=%s: %s; no manifest is written", path, problem);
        return;
    }
    look_for_cut = readable && !jb__network_file_system(fd);
    manifest_dev = st.st_dev;
    manifest_ino = st.st_ino;
    atomic_store(&manifest_fd, fd);
}

bool jb__manifest_on(void)
{
    pthread_once(&open_once, open_manifest);
    return atomic_load(&manifest_fd) >= 0;
}

static bool digest_equal(const void *stored, const void *key)
{
    return memcmp(stored, key, JB_SHA256_BYTES) == 0;
}

/* Stops writing with one warning: a full disk, a file someone truncated under us. */
static void stop(const char *why)
{
    int fd = atomic_exchange(&manifest_fd, -1);
    if (fd >= 0) {
        close(fd);
        jb__warn("JITBRIDGE_MANIFEST: %s; no more lines are written", why);
    }
}

/* Whether `fd` is still the manifest's descriptor: it leads to the file the manifest was opened
 * on, appending and closed on exec (an application's own descriptor that took its number, even
 * one on the same file, most likely lacks these). Safe in a fork child (fstat, fcntl). */
static bool is_manifest(int fd)
{
    struct stat st;
    int fd_flags = fcntl(fd, F_GETFD), flags = fcntl(fd, F_GETFL);
    return fd_flags >= 0 && (fd_flags & FD_CLOEXEC) && flags >= 0 && (flags & O_APPEND) &&
           fstat(fd, &st) == 0 && st.st_dev == manifest_dev && st.st_ino == manifest_ino;
}

/* Stops writing with one warning, leaving the descriptor open: it is no longer ours. */
static void forget(void)
{
    if (atomic_exchange(&manifest_fd, -1) >= 0)
        jb__warn("JITBRIDGE_MANIFEST: its descriptor now leads to another file (closed by the "
                 "application?); no more lines are written");
}

/* Sets (F_WRLCK) or clears (F_UNLCK) the open file's lock on the whole file, without waiting:
 * 0, or the errno (EAGAIN: another holds it). */
static int file_lock(int fd, short type)
{
    return jb__lock_open_file(fd, type, JB_LOCK_OR_PROCESS);
}

/* "/proc/self/fd/<fd>" in `out`, without snprintf, which a fork child's handler may not call. */
static void proc_fd_path(char out[32], int fd)
{
    static const char prefix[] = "/proc/self/fd/";
    char digits[12];
    int n = 0;
    for (unsigned v = (unsigned)fd; n == 0 || v; v /= 10)
        digits[n++] = (char)('0' + v % 10);
    memcpy(out, prefix, sizeof prefix - 1);
    char *at = out + sizeof prefix - 1;
    while (n)
        *at++ = digits[--n];
    *at = '\0';
}

/* A forked child shares the open file, and with it the lock: it opens the file anew, so that
 * its lock excludes its parent's. Where it cannot (no /proc), it writes without the look. */
static void manifest_fork(jb_fork_phase phase)
{
    int fd = atomic_load(&manifest_fd);
    if (phase != JB_FORK_CHILD || fd < 0)
        return;
    if (!is_manifest(fd)) { /* the application's file now: never written, never reopened */
        atomic_store(&manifest_fd, -1);
        return;
    }
    if (!look_for_cut)
        return; /* no look, no lock: the shared handle writes lines as well (no open wasted) */
    char proc[32];
    proc_fd_path(proc, fd);
    int own = open(proc, O_RDWR | O_APPEND | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (own >= 0 && is_manifest(own)) {
        atomic_store(&manifest_fd, own);
        close(fd);
        return;
    }
    if (own >= 0)
        close(own);
    look_for_cut = false;
}
JB_FORK_HANDLER(JB_FORK_MANIFEST, manifest_fork)

#ifdef JB_TEST_HOOKS
bool jb__test_manifest_lock(bool take)
{
    int fd = atomic_load(&manifest_fd);
    return fd >= 0 && file_lock(fd, take ? F_WRLCK : F_UNLCK) == 0;
}

int jb__test_manifest_fd(void)
{
    return atomic_load(&manifest_fd);
}
#endif

/* Takes the file's lock for a look at its end and a line: a look in the middle of another
 * writer's line would see it cut. Never waits long, as builds wait meanwhile: false after about
 * a millisecond, and the line goes without the look; after LOCK_GIVE_UP such lines in a row (a
 * writer stopped holding it), no more looks. */
static bool lock_briefly(int fd)
{
    for (int tries = 0; tries < 10; tries++) {
        if (tries)
            usleep(100);
        int err = file_lock(fd, F_WRLCK);
        if (err == 0) {
            lock_misses = 0;
            return true;
        }
        if (err != EAGAIN && err != EINTR) {
            look_for_cut = false; /* no locks here (ENOLCK): never waited for again */
            return false;
        }
    }
    if (++lock_misses >= LOCK_GIVE_UP) {
        look_for_cut = false;
        jb__warn("JITBRIDGE_MANIFEST: another writer keeps the file locked; lines are written "
                 "without looking for a line left cut");
    }
    return false;
}

/* Whether the file ends inside a line: one a writer left cut when its disk filled up (under the
 * file's lock, which this library's writers take for their lines where they can). */
static bool ends_cut(int fd)
{
    struct stat st;
    char last;
    return fstat(fd, &st) == 0 && st.st_size > 0 && pread(fd, &last, 1, st.st_size - 1) == 1 &&
           last != '\n';
}

static bool field_ok(const char *s)
{
    return *s && !strpbrk(s, "\t\n\r");
}

void jb__manifest_record(const char *backend, const char *arch, const jb_disk_key *key,
                         const char *module_name, const char *const *entry_names,
                         size_t num_entries, const char *how, const char *source_record)
{
    if (!jb__manifest_on())
        return;
    uint64_t hash = jb__table_hash(key->digest, JB_SHA256_BYTES);
    if (jb__table_find(&written, hash, key->digest, digest_equal))
        return;
    char hex[2 * JB_SHA256_BYTES + 1];
    jb__hex(key->digest, JB_SHA256_BYTES, hex);
    jb_strbuf sb = {0};
    /* Written only to end a line left cut, in the same write as the line (never a line alone). */
    jb__strbuf_appendf(&sb, "\n");
    const size_t line_start = sb.len;
    jb__strbuf_appendf(&sb, "%s\t%s\t%s\t%s\t%s\t", JB_MANIFEST_TAG, hex, backend, arch,
                       module_name);
    bool ok = field_ok(arch) && field_ok(module_name);
    for (size_t i = 0; i < num_entries; i++) {
        jb__strbuf_appendf(&sb, "%s%s", i ? "," : "", entry_names[i]);
        ok = ok && field_ok(entry_names[i]) && !strchr(entry_names[i], ',');
    }
    jb__strbuf_appendf(&sb, "\t%s", how);
    if (source_record)
        jb__strbuf_appendf(&sb, "\t" JB_MANIFEST_SOURCE_FIELD "%s", source_record);
    jb__strbuf_appendf(&sb, "\n");
    if (sb.failed || !ok || sb.len - line_start > JB_MANIFEST_LINE_MAX) {
        if (!sb.failed && ok)
            jb__warn("JITBRIDGE_MANIFEST: the line of module '%s' is %zu bytes, past the %d a "
                     "line may have; not written",
                     module_name, sb.len - line_start, JB_MANIFEST_LINE_MAX);
        jb__strbuf_free(&sb);
        return;
    }
    int fd = atomic_load(&manifest_fd);
    if (fd >= 0 && !is_manifest(fd)) {
        forget();
        fd = -1;
    }
    bool locked = fd >= 0 && look_for_cut && lock_briefly(fd);
    size_t from = locked && ends_cut(fd) ? 0 : line_start, len = sb.len - from;
    ssize_t n = fd >= 0 ? write(fd, sb.data + from, len) : -1;
    int write_errno = errno;
    if (locked)
        file_lock(fd, F_UNLCK);
    if (fd >= 0 && n != (ssize_t)len)
        stop(n < 0 ? strerror(write_errno) : "a line was written only in part");
    jb__strbuf_free(&sb);
    unsigned char *copy = malloc(JB_SHA256_BYTES);
    if (n > 0 && copy && jb__table_reserve(&written)) {
        memcpy(copy, key->digest, JB_SHA256_BYTES);
        jb__table_add(&written, hash, copy, copy);
    } else {
        free(copy); /* not remembered: at worst the line is written again */
    }
}

bool jb__hex_digest(const char *hex, unsigned char digest[JB_SHA256_BYTES])
{
    for (size_t i = 0; i < 2 * JB_SHA256_BYTES; i++) {
        char c = hex[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0)
            return false;
        if (i % 2 == 0)
            digest[i / 2] = (unsigned char)(v << 4);
        else
            digest[i / 2] |= (unsigned char)v;
    }
    return hex[2 * JB_SHA256_BYTES] == '\0';
}

bool jb__manifest_parse_line(char *line, jb_manifest_line *out)
{
    memset(out, 0, sizeof *out);
    line[strcspn(line, "\n")] = '\0';
    char *fields[7], *at = line;
    size_t n = 0;
    /* strsep-like on TABs: empty fields count (strtok would merge them). */
    while (n < 7 && at) {
        fields[n++] = at;
        char *tab = strchr(at, '\t');
        if (tab)
            *tab = '\0';
        at = tab ? tab + 1 : NULL;
    }
    if (n < 7 || strcmp(fields[0], JB_MANIFEST_TAG) != 0 ||
        !jb__hex_digest(fields[1], out->digest))
        return false;
    for (size_t i = 2; i < 7; i++)
        if (!*fields[i])
            return false;
    out->backend = fields[2];
    out->target = fields[3];
    out->module = fields[4];
    out->entries = fields[5];
    out->how = fields[6];
    /* Fields after the seven: "source=" names a source record; others (newer) are passed by. */
    while (at) {
        char *field = at, *tab = strchr(at, '\t');
        if (tab)
            *tab = '\0';
        at = tab ? tab + 1 : NULL;
        const size_t prefix = strlen(JB_MANIFEST_SOURCE_FIELD);
        if (strncmp(field, JB_MANIFEST_SOURCE_FIELD, prefix) == 0 && !out->has_source) {
            out->has_source = jb__hex_digest(field + prefix, out->source_digest);
            out->source_malformed = !out->has_source;
        }
    }
    return true;
}

int jb__manifest_read(const char *path, jb_manifest_fn fn, void *ctx)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    JB_RETURN_IF(fd < 0, JB_ERR_SYSTEM, "cannot open the manifest %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return jb__fail(JB_ERR_INVALID_ARGUMENT, "the manifest %s is not a regular file", path);
    }
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory to read the manifest %s", path);
    }
    char line[JB_MANIFEST_LINE_MAX + 2];
    int status = JB_OK;
    /* The buffer's last byte tells a line that filled it (a NUL there) from a shorter one: strlen
     * cannot, as a NUL byte inside the line stops it. */
    for (line[sizeof line - 1] = 1; status == JB_OK && fgets(line, sizeof line, f);
         line[sizeof line - 1] = 1) {
        bool filled = line[sizeof line - 1] == '\0' && line[sizeof line - 2] != '\n';
        if (filled && !feof(f)) { /* past the limit: not a manifest line */
            int c;
            while ((c = fgetc(f)) != EOF && c != '\n')
                ;
            continue;
        }
        jb_manifest_line parsed;
        if (line[0] != '#' && jb__manifest_parse_line(line, &parsed))
            status = fn(ctx, &parsed);
    }
    bool failed = ferror(f);
    fclose(f);
    JB_RETURN_IF(status == JB_OK && failed, JB_ERR_SYSTEM, "cannot read the manifest %s", path);
    return status;
}
