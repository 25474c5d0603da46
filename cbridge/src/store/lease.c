/*
 * Leases: processes that share a cache folder compile each key once. Before compiling a key
 * that is neither in memory nor on disk, a process takes the key's lease, an advisory lock on
 * leases/<entry name>.lease in the cache folder; the others wait, and load the entry once the
 * holder has stored it.
 *
 * - The lock is an open file description's (F_OFD_SETLK; flock on kernels without it): the
 *   kernel releases it when the holder's handle closes, so a holder killed at any point frees
 *   the key at once. Nothing is ever waited for blindly: a waiter polls (a few milliseconds
 *   apart) for the entry and for the lock, and gives up at its deadline, the compile timeout,
 *   which also bounds any holder's compile. Past it, or where locks do not work (ENOLCK, a
 *   network file system), a process compiles alone, as without leases.
 * - The holder removes the lease file (while still holding it) once the entry is stored, so
 *   the folder keeps no litter; a process that locks a file no longer at the lease's name
 *   opens the name again. A holder killed before that leaves an empty file, reused next time.
 * - A holder whose compile fails leaves the file with the time of the failure in it (the
 *   monotonic clock, shared by the processes of one machine): the processes that find it so
 *   within the compile timeout compile side by side, each seeing the compiler's error itself,
 *   instead of taking the lease one after another and each waiting for the last one's failure.
 *   An older mark (or one from before a reboot) is a lease as any other: its next holder
 *   removes the file, or marks it anew. Leaving a mark sweeps away the old ones no one holds.
 * - Lease files are opened as entries are: no link followed, never blocking, checked on the
 *   handle (a regular file of ours that no one else may read or write: another user who could
 *   open it could hold it). Anything else at the name (a FIFO, a link, another user's file) is
 *   removed (the folder is ours) and the lease taken afresh, never waited on.
 * - In one process builds are one at a time under the module cache's write lock, so a process
 *   holds at most one lease, and only while it compiles: no process holds one while it waits.
 */
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define POLL_FIRST_NS 1000000ULL /* 1 ms, doubling to: */
#define POLL_MAX_NS 16000000ULL  /* 16 ms */
#define OPEN_TRIES 8

static atomic_uint_fast64_t counter_waits, counter_timeouts, counter_fallbacks;
static atomic_bool warned;

#ifdef JB_TEST_HOOKS
static atomic_int test_lock_error;
void jb__test_set_lease_error(int err)
{
    atomic_store(&test_lock_error, err);
}
#endif

/* Compiling alone from now on for this key, with one warning per process. */
static jb_lease_outcome fall_back(const char *why, const char *detail)
{
    atomic_fetch_add(&counter_fallbacks, 1);
    if (!atomic_exchange(&warned, true))
        jb__warn("leases between processes are off (%s%s%s): processes that share the cache "
                 "folder may compile the same kernel",
                 why, detail ? ": " : "", detail ? detail : "");
    return JB_LEASE_NONE;
}

/* The cache folder's leases/, made 0700 if missing; it must be ours and closed to others. What
 * else stands at its name (a file, a link) is removed from a folder marked as the cache's own. */
#define LEASE_DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
static int open_lease_dir(int dir)
{
    int fd = openat(dir, JB_LEASE_DIR, LEASE_DIR_FLAGS);
    if (fd < 0 && (errno == ENOTDIR || errno == ELOOP) && jb__disk_folder_is_ours() &&
        unlinkat(dir, JB_LEASE_DIR, 0) == 0)
        errno = ENOENT;
    if (fd < 0 && errno == ENOENT && (mkdirat(dir, JB_LEASE_DIR, 0700) == 0 || errno == EEXIST))
        fd = openat(dir, JB_LEASE_DIR, LEASE_DIR_FLAGS);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 077))) {
        close(fd);
        errno = EPERM;
        return -1;
    }
    return fd;
}

/* Opens the lease file, removing whatever else sits at its name; -1 with errno. */
static int open_lease_file(int leases, const char *name, struct stat *st)
{
    for (int tries = 0; tries < OPEN_TRIES; tries++) {
        int fd = openat(leases, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC |
                                          O_NOCTTY,
                        0600);
        /* Made 0600 whatever the umask: a lease file we could not open for writing would be
         * taken for someone else's, and removed from under its holder. */
        if (fd >= 0 && fstat(fd, st) == 0 && S_ISREG(st->st_mode) && st->st_uid == geteuid() &&
            !(st->st_mode & 077) && st->st_nlink == 1 &&
            ((st->st_mode & 0600) == 0600 || fchmod(fd, 0600) == 0))
            return fd;
        int err = fd >= 0 ? EPERM : errno;
        if (fd >= 0)
            close(fd);
        /* A link (ELOOP), FIFO, folder or someone else's file: not ours to use, and removed
         * only from a folder marked as the cache's own. */
        if ((err != ELOOP && err != EPERM && err != EISDIR && err != ENXIO && err != EACCES) ||
            !jb__disk_folder_is_ours()) {
            errno = err;
            return -1;
        }
        if (jb__disk_remove(leases, name) != 0)
            return -1;
    }
    errno = EAGAIN;
    return -1;
}

/* 0 once locked, else the errno (EAGAIN: someone holds it). */
static int try_lock(int fd)
{
#ifdef JB_TEST_HOOKS
    int injected = atomic_load(&test_lock_error);
    if (injected)
        return injected;
#endif
    return jb__lock_open_file(fd, F_WRLCK, JB_LOCK_OR_FLOCK);
}

/* Whether an entry stands at its name now (the holder stored it), other than `stale` (the one
 * found bad before, if any). */
static bool entry_stored(int dir, const char *file, const jb_lease_stale *stale)
{
    struct stat st;
    return fstatat(dir, file, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
           st.st_size > 0 &&
           !(stale && stale->present && stale->ino == st.st_ino && stale->dev == st.st_dev);
}

bool jb__lease_entry_stored(const jb_disk_key *key, const jb_lease_stale *stale)
{
    int dir = jb__disk_dir_fd();
    return dir >= 0 && entry_stored(dir, key->file, stale);
}

void jb__lease_note_stale(const jb_disk_key *key, jb_lease_stale *out)
{
    struct stat st;
    int dir = jb__disk_dir_fd();
    out->present = dir >= 0 && fstatat(dir, key->file, &st, AT_SYMLINK_NOFOLLOW) == 0;
    out->dev = out->present ? st.st_dev : 0;
    out->ino = out->present ? st.st_ino : 0;
}

/* Whether the lease file on `fd` says its last holder's compile failed within the compile
 * timeout: by the mark (the monotonic clock), and by the file's change time, since a mark left
 * before a reboot reads as recent on a machine up for less than the timeout. */
static bool failed_lately(int fd)
{
    uint64_t at, now = jb__now_ns(), timeout_ms = jb__child_timeout_ms();
    struct stat st;
    return pread(fd, &at, sizeof at, 0) == (ssize_t)sizeof at && at <= now &&
           now - at < timeout_ms * 1000000ULL && fstat(fd, &st) == 0 &&
           st.st_mtime >= time(NULL) - (time_t)(timeout_ms / 1000) - 1;
}

static void nap(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

jb_lease_outcome jb__lease_acquire(const jb_disk_key *key, const jb_lease_stale *stale,
                                   uint64_t deadline_ns, jb_lease *out)
{
    out->fd = out->dir = -1;
    int dir = jb__disk_dir_fd();
    if (dir < 0 || jb__disk_tmp_fd() < 0)
        return JB_LEASE_NONE; /* no folder to share, or nothing could be stored in it */
    int leases = open_lease_dir(dir);
    /* A folder that is read-only, full or was removed under us: nothing can be stored now, and
     * the store says so itself (or sets the folder up again); compile alone, quietly. Something
     * else at leases/ that could not be removed is said, once. */
    if (leases < 0 && errno != EPERM && errno != ENOTDIR && errno != ELOOP)
        return JB_LEASE_NONE;
    if (leases < 0)
        return fall_back("the cache folder's leases/ is not a folder of ours closed to others",
                         NULL);
    if (jb__network_file_system(leases)) {
        close(leases);
        return fall_back("the cache folder is on a network file system", NULL);
    }
    snprintf(out->name, sizeof out->name, "%.*s" JB_LEASE_SUFFIX,
             (int)(strlen(key->file) - strlen(JB_DISK_ENTRY_SUFFIX)), key->file);
    uint64_t pause = POLL_FIRST_NS;
    for (bool waited = false;; waited = true) {
        /* After a wait: the holder may have stored the entry (and gone). */
        if (waited && entry_stored(dir, key->file, stale)) {
            close(leases);
            atomic_fetch_add(&counter_waits, 1);
            return JB_LEASE_STORED;
        }
        struct stat st, named;
        int fd = open_lease_file(leases, out->name, &st);
        if (fd < 0) {
            int err = errno;
            close(leases);
            return fall_back("a lease file cannot be made", strerror(err));
        }
        int err = try_lock(fd);
        if (err == 0) {
            /* Locked: but the name may have been removed (and made anew) by its last holder. */
            if (fstatat(leases, out->name, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
                named.st_ino == st.st_ino && named.st_dev == st.st_dev) {
                if (named.st_size > 0 && failed_lately(fd)) { /* compile alone, as it did */
                    close(fd);
                    close(leases);
                    return JB_LEASE_NONE;
                }
                out->fd = fd;
                out->dir = leases;
                return JB_LEASE_HELD;
            }
            close(fd);
            continue;
        }
        close(fd);
        if (err != EAGAIN) {
            unlinkat(leases, out->name, 0); /* no litter where locks never work */
            close(leases);
            return fall_back("the lock failed", strerror(err));
        }
        /* Held by another process: wait for its entry, or for the lock, until the deadline. */
        uint64_t now = jb__now_ns();
        if (now >= deadline_ns) {
            close(leases);
            atomic_fetch_add(&counter_timeouts, 1);
            return JB_LEASE_NONE;
        }
        nap(pause < deadline_ns - now ? pause : deadline_ns - now);
        pause = pause * 2 < POLL_MAX_NS ? pause * 2 : POLL_MAX_NS;
    }
}

/* Removes the lease files other than `keep` that no one holds, last changed over a compile
 * timeout ago, whose marks are past (or empty: left by killed holders). Run where a mark is
 * left, so that a server compiling many kernels that fail keeps no more than one timeout's. */
static void sweep(int leases, const char *keep)
{
    DIR *d = jb__opendir_at(leases);
    if (!d)
        return;
    time_t before = time(NULL) - (time_t)(jb__child_timeout_ms() / 1000);
    for (struct dirent *e; (e = readdir(d));) {
        if (!jb__lease_is_name(e->d_name) || strcmp(e->d_name, keep) == 0)
            continue;
        int fd = openat(leases, e->d_name, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
        struct stat st, named;
        if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
            st.st_mtime < before && try_lock(fd) == 0 && !failed_lately(fd) &&
            fstatat(leases, e->d_name, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
            named.st_ino == st.st_ino && named.st_dev == st.st_dev)
            unlinkat(leases, e->d_name, 0); /* locked: as a holder removes its own */
        if (fd >= 0)
            close(fd);
    }
    closedir(d);
}

void jb__lease_release(jb_lease *lease, bool compile_failed)
{
    if (lease->fd < 0)
        return;
    /* Still held: no one else can be using this name. A failed compile's mark stays. */
    uint64_t now = jb__now_ns();
    if (!compile_failed || pwrite(lease->fd, &now, sizeof now, 0) != (ssize_t)sizeof now)
        unlinkat(lease->dir, lease->name, 0);
    else
        sweep(lease->dir, lease->name);
    close(lease->fd);
    close(lease->dir);
    lease->fd = lease->dir = -1;
}

void jb__lease_counters(uint64_t *waits, uint64_t *timeouts, uint64_t *fallbacks)
{
    *waits = atomic_load(&counter_waits);
    *timeouts = atomic_load(&counter_timeouts);
    *fallbacks = atomic_load(&counter_fallbacks);
}

void jb__lease_counters_reset(void)
{
    atomic_store(&counter_waits, 0);
    atomic_store(&counter_timeouts, 0);
    atomic_store(&counter_fallbacks, 0);
}
