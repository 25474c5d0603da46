/*
 * The cpu backend's private directory: where kernel sources, compiled shared objects and
 * modules about to be dlopen'ed live for a moment. It is "$TMPDIR/jitbridge-PID-NS-XXXXXX"
 * (NS: the inode of the process's PID namespace), mode 0700.
 *
 * - The compiler and dlopen go by path, so no one but root and us may be able to swap a folder
 *   on that path: TMPDIR (else /tmp) and each of its parents must be ours or root's and not
 *   writable by group or others without the sticky bit (disk_dir.c checks them by handle).
 *   When TMPDIR is not, the folder is made in the disk cache's own tmp/ instead, which passed
 *   the same checks, with one warning; with no disk cache either, compiles fail saying why.
 *
 * - Only the process that made it removes it, at exit: a forked child that exits runs the same
 *   atexit handler and must leave its parent's directory alone.
 * - A child after fork makes its own directory (and starts its own serials) on first use.
 * - A directory that has gone (a tmp cleaner, an idle server) is made again.
 * - A process killed with SIGKILL never removes its own: the first directory a process makes
 *   first sweeps those of dead processes (ours, same PID namespace, PID not alive), never
 *   following a symbolic link. One from another or an unknown PID namespace, where a PID says
 *   nothing, is swept once untouched for a day; if its process lives, it makes a new one.
 */
#include "cpu.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STALE_SECONDS (24 * 60 * 60)

static pthread_mutex_t dir_mutex = PTHREAD_MUTEX_INITIALIZER;
static char dir_path[4096];
static pid_t dir_owner;        /* the process that made dir_path; 0: none yet, or it has gone */
static uint64_t dir_serial;    /* names are never reused: glibc's dlopen matches by path name */
static bool exit_hook, swept;  /* inherited by a forked child: done once per process tree */

static void remove_own_dir(void)
{
    pthread_mutex_lock(&dir_mutex);
    if (dir_owner == getpid())
        rmdir(dir_path); /* best effort: only empty once every compile has finished */
    pthread_mutex_unlock(&dir_mutex);
}

/* fork.c's last step: the compile that holds the module cache's lock takes this one too. */
static void private_dir_fork(jb_fork_phase phase)
{
    if (phase == JB_FORK_PREPARE) {
        pthread_mutex_lock(&dir_mutex);
        return;
    }
    if (phase == JB_FORK_CHILD) {
        dir_owner = 0; /* the parent's: this process makes its own on first use */
        dir_serial = 0;
    }
    pthread_mutex_unlock(&dir_mutex);
}
JB_FORK_HANDLER(JB_FORK_PRIVATE_DIR, private_dir_fork)

static unsigned long long pid_namespace(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

/* "jitbridge-PID-NS-XXXXXX", or the older "jitbridge-PID-XXXXXX" (NS 0: unknown). */
static bool parse_name(const char *name, long *pid, unsigned long long *ns)
{
    if (strncmp(name, "jitbridge-", 10) != 0)
        return false;
    char *end;
    errno = 0;
    *pid = strtol(name + 10, &end, 10);
    if (errno || end == name + 10 || *end != '-' || *pid <= 0)
        return false;
    const char *rest = end + 1;
    *ns = 0;
    if (strchr(rest, '-')) {
        *ns = strtoull(rest, &end, 10);
        if (errno || end == rest || *end != '-')
            return false;
        rest = end + 1;
    }
    return strlen(rest) == 6;
}

/* Empties and removes one folder, already opened (no symlink followed) and checked. */
static void remove_folder(int parent, const char *name, int fd)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            unlinkat(dirfd(d), e->d_name, 0); /* a link goes, not its target; a folder stays */
    closedir(d);
    unlinkat(parent, name, AT_REMOVEDIR);
}

static void sweep(const char *tmp)
{
    DIR *d = opendir(tmp);
    if (!d)
        return;
    unsigned long long our_ns = pid_namespace();
    time_t now = time(NULL);
    for (struct dirent *e; (e = readdir(d));) {
        long pid;
        unsigned long long ns;
        if (!parse_name(e->d_name, &pid, &ns) || pid == (long)getpid())
            continue;
        int fd = openat(dirfd(d), e->d_name,
                        O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        struct stat st;
        if (fd < 0)
            continue;
        bool ours = fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid();
        /* Only ours are looked at further: st is unset when fstat failed. */
        bool dead = ours && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
        bool stale = ours && now - st.st_mtime > STALE_SECONDS;
        bool gone = our_ns && ns == our_ns ? dead : ns == 0 ? dead && stale : stale;
        if (ours && gone)
            remove_folder(dirfd(d), e->d_name, fd);
        else
            close(fd);
    }
    closedir(d);
}

/* The disk cache's tmp/ as a path that leads to the very folder its held handle checked. */
static bool cache_tmp_path(char *out, size_t len, char *why, size_t why_len)
{
    int held_fd = jb__disk_tmp_fd();
    if (held_fd < 0) {
        snprintf(why, why_len, "the disk cache is %s", jb_disk_cache_state());
        return false;
    }
    if (held_fd == jb__disk_dir_fd()) { /* no tmp/: a folder the library may not make things in */
        snprintf(why, why_len, "the disk cache's folder is %s", jb_disk_cache_state());
        return false;
    }
    const char *unused;
    char path[4096];
    snprintf(path, sizeof path, "%s/tmp", jb__disk_folder(&unused));
    if (!jb__trusted_folder_path(path, "JITBRIDGE_CACHE_DIR", out, len, why, why_len))
        return false;
    struct stat held, named;
    if (fstat(held_fd, &held) != 0 || stat(out, &named) != 0 || held.st_dev != named.st_dev ||
        held.st_ino != named.st_ino) {
        snprintf(why, why_len, "%.300s is no longer the folder checked at first use", path);
        return false;
    }
    return true;
}

/* Where this process's directory goes: TMPDIR (else /tmp) when no one but root and us can swap
 * what it holds, else the disk cache's tmp/. Called without dir_mutex: the disk cache's set-up
 * takes its own locks, which come before it (fork.c). */
static int choose_parent(char *out, size_t len)
{
    const char *tmp = secure_getenv("TMPDIR"); /* a setuid host must not take it from its caller */
    if (!tmp || !*tmp)
        tmp = "/tmp";
    char why[1024], cache_why[1024];
    if (jb__trusted_folder_path(tmp, "TMPDIR", out, len, why, sizeof why))
        return JB_OK;
    JB_RETURN_IF(!cache_tmp_path(out, len, cache_why, sizeof cache_why), JB_ERR_SYSTEM,
                 "refusing TMPDIR=%s for the compiler's private folder: %s; the disk cache's "
                 "folder cannot stand in: %s",
                 tmp, why, cache_why);
    static atomic_bool warned;
    if (!atomic_exchange(&warned, true))
        jb__warn("refusing TMPDIR=%s for the compiler's private folder: %s; compiling in %s "
                 "instead",
                 tmp, why, out);
    return JB_OK;
}

/* Under dir_mutex: makes this process's directory in `parent` (from choose_parent). */
static int make_dir(const char *parent)
{
    if (!swept) {
        swept = true;
        sweep(parent);
    }
    int n = snprintf(dir_path, sizeof dir_path, "%s/jitbridge-%ld-%llu-XXXXXX", parent,
                     (long)getpid(), pid_namespace());
    JB_RETURN_IF(n < 0 || (size_t)n >= sizeof dir_path, JB_ERR_SYSTEM,
                 "the compiler's private folder's path under %s is too long", parent);
    JB_RETURN_IF(!mkdtemp(dir_path), JB_ERR_SYSTEM,
                 "cannot create a private directory under %s: %s (set TMPDIR)", parent,
                 strerror(errno));
    dir_owner = getpid();
    if (!exit_hook)
        exit_hook = atexit(remove_own_dir) == 0;
    return JB_OK;
}

/* Makes this process's directory unless it has one, and gives a path in it (`stem` NULL: the
 * directory's own) with the next serial. */
static int private_name(char *out, size_t len, const char *stem, const char *ext)
{
    char parent[sizeof dir_path - 64];
    int status = JB_OK, n = 0;
    pthread_mutex_lock(&dir_mutex);
    if (dir_owner != getpid()) {
        pthread_mutex_unlock(&dir_mutex);
        status = choose_parent(parent, sizeof parent);
        pthread_mutex_lock(&dir_mutex);
        if (status == JB_OK && dir_owner != getpid()) /* else another thread made it meanwhile */
            status = make_dir(parent);
    }
    if (status == JB_OK && stem)
        n = snprintf(out, len, "%s/%s-%llu%s", dir_path, stem, (unsigned long long)dir_serial++,
                     ext);
    else if (status == JB_OK)
        n = snprintf(out, len, "%s", dir_path);
    pthread_mutex_unlock(&dir_mutex);
    JB_FORWARD_IF_ERROR(status);
    JB_RETURN_IF(n < 0 || (size_t)n >= len, JB_ERR_SYSTEM, "temporary path too long");
    return JB_OK;
}

int jb__cpu_private_dir(char *out, size_t len)
{
    return private_name(out, len, NULL, NULL);
}

int jb__cpu_private_path(char *out, size_t len, const char *stem, const char *ext)
{
    return private_name(out, len, stem, ext);
}

/* The directory `path` is in has gone: the next name comes from a new one. */
static void forget_dir(const char *path)
{
    pthread_mutex_lock(&dir_mutex);
    size_t n = strlen(dir_path);
    if (dir_owner == getpid() && strncmp(path, dir_path, n) == 0 && path[n] == '/')
        dir_owner = 0;
    pthread_mutex_unlock(&dir_mutex);
}

int jb__cpu_private_write(char *out, size_t len, const char *stem, const char *ext,
                          const void *data, size_t size)
{
    int fd = -1;
    for (int attempt = 0; fd < 0; attempt++) {
        JB_FORWARD_IF_ERROR(jb__cpu_private_path(out, len, stem, ext));
        fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno == ENOENT && attempt == 0)
            forget_dir(out);
        else
            JB_RETURN_IF(fd < 0, JB_ERR_SYSTEM, "cannot create %s: %s", out, strerror(errno));
    }
    if (!jb__write_all(fd, data, size)) {
        int err = errno;
        close(fd);
        unlink(out);
        return jb__fail(JB_ERR_SYSTEM, "cannot write %s: %s", out, strerror(err));
    }
    close(fd);
    return JB_OK;
}
