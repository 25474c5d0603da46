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
 * - A holder keeps its lease fresh: a thread of its own touches the file's time every STALE/5
 *   while it is held, whatever the compile does (a compiler child, or a GPU compiler in the
 *   process), so a compile of minutes is never taken for a stopped one; but not while the
 *   holding thread is stopped or has a stop pending (a SIGSTOP sent while it sleeps in the
 *   compiler's vfork stops it only once the compile ends, and the keeper would run on). A
 *   stopped holder (a debugger, a frozen cgroup, kill -STOP) is found out by its waiters: a
 *   lease whose file and time they watched stand still for STALE is taken over. The breaker
 *   removes the file under the leases folder's own lock (flock), only if the very file with
 *   the very time it watched is still at the name, then takes the lease afresh; a second
 *   breaker finds the new file there and waits on it. A stopped holder that goes on removes
 *   only its own file (same device and inode): the worst it does is one more compile, stored
 *   by rename as every entry is. A taker touches its file as soon as it has locked it, before
 *   it looks that the name still leads there, so a taker is never robbed unseen. A takeover
 *   that fails is tried again BREAK_RETRY_NS later, the wait going on meanwhile.
 * - The holder removes the lease file (while still holding it) once the entry is stored, so
 *   the folder keeps no litter; a process that locks a file no longer at the lease's name
 *   opens the name again. A holder killed before that leaves an empty file, reused next time.
 *   Every removal of a lease name checks, under the folder's lock, that what stands there is
 *   still what it found (never a racing process's fresh lease).
 * - A holder whose compile fails leaves the file with the time of the failure in it (the
 *   monotonic clock, shared by the processes of one machine): the processes that find it so
 *   within the compile timeout compile side by side, each seeing the compiler's error itself,
 *   instead of taking the lease one after another and each waiting for the last one's failure.
 *   An older mark (or one from before a reboot) is a lease as any other: its next holder
 *   removes the file, or marks it anew. Leaving a mark sweeps away the old ones no one holds.
 * - Lease files are opened as entries are: no link followed, never blocking, checked on the
 *   handle (a regular file of ours that no one else may read or write: another user who could
 *   open it could hold it). Anything else at the name (a FIFO, a link, another user's file) is
 *   removed (the folder is ours) and the lease taken afresh, never waited on; a file found
 *   already unlinked (its holder just removed it) is left, and the name opened again. A folder
 *   at the name is removed when empty and ours or root's; else it stays, is said once with
 *   its path, and that kernel compiles without its lease.
 * - In one process builds are one at a time under the module cache's write lock, so a process
 *   holds at most one lease, and only while it compiles. A build that finds the lease held
 *   returns to the module cache, which waits (jb__lease_wait) with its lock let go: other
 *   threads' hits and loads go on meanwhile.
 */
#include "store.h"
#include "../base/keeper.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define POLL_FIRST_NS 1000000ULL /* 1 ms, doubling to: */
#define POLL_MAX_NS 16000000ULL  /* 16 ms */
#define OPEN_TRIES 8

static atomic_uint_fast64_t counter_waits, counter_timeouts, counter_fallbacks;
static atomic_bool warned;

#ifdef JB_TEST_HOOKS
static atomic_int test_lock_error, test_break_error;
void jb__test_set_lease_error(int err)
{
    atomic_store(&test_lock_error, err);
}
void jb__test_set_lease_break_error(int err)
{
    atomic_store(&test_break_error, err);
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
static int open_lease_dir(int dir)
{
    int fd = jb__disk_open_own_folder(dir, JB_LEASE_DIR, true, 077);
    if (fd < 0 && (errno == ENOTDIR || errno == ELOOP) && jb__disk_folder_is_ours() &&
        (unlinkat(dir, JB_LEASE_DIR, 0) == 0 || errno == ENOENT))
        fd = jb__disk_open_own_folder(dir, JB_LEASE_DIR, true, 077);
    return fd;
}

/* Whether `st` is what a lease file of ours looks like (a regular file, ours, closed to others):
 * a racing process's fresh lease may be one not yet made 0600 (its creator's umask), and is
 * never removed. */
static bool lease_like(const struct stat *st)
{
    return S_ISREG(st->st_mode) && st->st_uid == geteuid() && !(st->st_mode & 077);
}

/* Runs `fn` with the leases folder's own lock (flock on its handle) held, so that a check of
 * what stands at a name and its removal are one step against every other remover of lease
 * names; never waits blindly: a few tries, then false (the name is left as it is). */
#define NAME_LOCK_TRIES 50
static bool lock_names(int leases)
{
    for (int tries = 0; tries < NAME_LOCK_TRIES; tries++) {
        if (flock(leases, LOCK_EX | LOCK_NB) == 0)
            return true;
        if (errno != EWOULDBLOCK && errno != EINTR)
            return false;
        jb__nap_ns(POLL_FIRST_NS);
    }
    return false;
}

/* Removes `name` only if what stands there is still the file `seen` (its device and inode),
 * under the folder's lock: never another process's lease made there meanwhile. */
static bool remove_if_same(int leases, const char *name, const struct stat *seen)
{
    if (!lock_names(leases))
        return false;
    struct stat now;
    bool same = fstatat(leases, name, &now, AT_SYMLINK_NOFOLLOW) == 0 &&
                now.st_dev == seen->st_dev && now.st_ino == seen->st_ino;
    bool removed = same && unlinkat(leases, name, 0) == 0;
    flock(leases, LOCK_UN);
    return removed;
}

/* A folder at a lease's name: removed when it is empty and ours or root's (rmdir follows no
 * link and removes nothing in it); else left, said once per path, and the kernel compiles
 * without its lease. True when it was removed. */
static bool remove_folder(int leases, const char *name)
{
    struct stat st;
    if (fstatat(leases, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode))
        return true; /* gone, or something else now: open the name again */
    if ((st.st_uid == geteuid() || st.st_uid == 0) && jb__disk_folder_is_ours() &&
        unlinkat(leases, name, AT_REMOVEDIR) == 0)
        return true;
    int err = st.st_uid == geteuid() || st.st_uid == 0 ? errno : EPERM;
    const char *why = err == ENOTEMPTY || err == EEXIST ? "it is not empty"
                      : err == EPERM ? "it is not ours" : strerror(err);
    const char *folder = jb__disk_folder(&(const char *){NULL});
    static pthread_mutex_t warned_mutex = PTHREAD_MUTEX_INITIALIZER;
    static struct stat warned; /* the last folder said, once */
    pthread_mutex_lock(&warned_mutex);
    bool said = warned.st_ino == st.st_ino && warned.st_dev == st.st_dev &&
                warned.st_ctim.tv_sec == st.st_ctim.tv_sec &&
                warned.st_ctim.tv_nsec == st.st_ctim.tv_nsec;
    warned = st;
    pthread_mutex_unlock(&warned_mutex);
    if (!said)
        jb__warn("a folder stands at the lease file's name %s/" JB_LEASE_DIR "/%s and is left "
                 "(%s): its kernel compiles without its lease between processes until it is "
                 "removed",
                 folder, name, why);
    return false;
}

/* Opens the lease file, removing what else sits at its name (only from a folder marked as the
 * cache's own); -1 with errno (EISDIR: a folder stays there). */
static int open_lease_file(int leases, const char *name, struct stat *st)
{
    for (int tries = 0; tries < OPEN_TRIES; tries++) {
        int fd = openat(leases, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC |
                                          O_NOCTTY,
                        0600);
        /* Made 0600 whatever the umask: a lease file we could not open for writing would be
         * taken for someone else's, and removed from under its holder. */
        bool opened = fd >= 0 && fstat(fd, st) == 0;
        if (opened && lease_like(st) && st->st_nlink == 1 &&
            ((st->st_mode & 0600) == 0600 || fchmod(fd, 0600) == 0))
            return fd;
        int err = fd >= 0 ? EPERM : errno;
        if (fd >= 0)
            close(fd);
        if (opened && st->st_nlink == 0)
            continue; /* removed by its holder just now: what stands there now is not this */
        if (err == EISDIR) {
            if (remove_folder(leases, name))
                continue;
            errno = EISDIR;
            return -1;
        }
        /* A link (ELOOP), FIFO, hard link or someone else's file: not ours to use, and removed
         * only from a folder marked as the cache's own. */
        if ((err != ELOOP && err != EPERM && err != ENXIO && err != EACCES) ||
            !jb__disk_folder_is_ours()) {
            errno = err;
            return -1;
        }
        /* Not opened: what stands there is looked at now, and left if it is a lease file. */
        if (!opened && (fstatat(leases, name, st, AT_SYMLINK_NOFOLLOW) != 0 ||
                        (lease_like(st) && st->st_nlink == 1)))
            continue;
        remove_if_same(leases, name, st);
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

/* Whether another holds the lock of the lease file on `fd`, asked without taking it
 * (F_OFD_GETLK): a waiter's poll that took a free lock for a moment would, were the process
 * forked then, leave the lease held by a child that never compiles (it shares the open file
 * description) until it is taken over as stale. Without open file description locks, the lock
 * is tried and let go. */
static bool held_by_another(int fd)
{
#ifdef JB_TEST_HOOKS
    if (atomic_load(&test_lock_error))
        return try_lock(fd) == EAGAIN;
#endif
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    if (fcntl(fd, F_OFD_GETLK, &fl) == 0)
        return fl.l_type != F_UNLCK;
    return try_lock(fd) == EAGAIN;
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

/* ---- a holder keeps its lease fresh; a waiter finds a stopped one out ---- */

/* A holder's thread touches the lease file's time every STALE/5; a waiter takes the lease over
 * once the time has not moved for STALE: five missed touches are a stopped process, not a slow
 * one (a compile of minutes keeps touching). */
#define STALE_NS 5000000000ULL
/* A takeover that failed (the folder's lock busy, the removal refused) is tried again this much
 * later, the wait for the entry or the lock going on meanwhile: never a spin of rounds. */
#define BREAK_RETRY_NS 250000000ULL
static atomic_uint_fast64_t stale_ns = STALE_NS;
static atomic_uint_fast64_t counter_stale_takeovers;
#ifdef JB_TEST_HOOKS
void jb__test_set_lease_stale_ms(uint64_t ms)
{
    atomic_store(&stale_ns, ms ? ms * 1000000ULL : STALE_NS);
}
#endif

/* The keeper's tick: the lease file's time moves, which its waiters watch. */
static void touch(void *state)
{
    futimens(*(const int *)state, NULL);
}

/* Touches the held lease now and starts the keeper that keeps touching it while it is held,
 * whatever the compile does (a child compiler, or a GPU compiler in this process). Without the
 * keeper (no memory, no threads left), a compile past STALE may be done twice: never worse. */
static void keep_fresh(jb_lease *lease)
{
    futimens(lease->fd, NULL);
    lease->keeper =
        jb__keeper_start(touch, &lease->fd, sizeof lease->fd, atomic_load(&stale_ns) / 5);
}

static bool same_time(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

/* Notes a held lease file seen now; true when the watch has seen this very file with this very
 * time for STALE or longer. */
static bool watch_saw(jb_lease_watch *w, const struct stat *st, uint64_t now)
{
    if (w->seen && w->dev == st->st_dev && w->ino == st->st_ino &&
        same_time(&w->mtime, &st->st_mtim))
        return now - w->since_ns >= atomic_load(&stale_ns);
    *w = (jb_lease_watch){true, st->st_dev, st->st_ino, st->st_mtim, now};
    return false;
}

/* Takes a stale lease over: under the folder's lock, the file at the name is removed if it is
 * still the one watched, with its time unmoved (one breaker removes it; the next finds the new
 * lease and waits on it). Its stopped holder, should it go on, removes only its own file. */
static bool break_stale(int leases, const char *name, const jb_lease_watch *w)
{
    if (!lock_names(leases))
        return false;
    struct stat st;
    bool same = fstatat(leases, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_dev == w->dev &&
                st.st_ino == w->ino && same_time(&st.st_mtim, &w->mtime);
#ifdef JB_TEST_HOOKS
    int injected = atomic_load(&test_break_error);
    if (same && injected) {
        flock(leases, LOCK_UN);
        errno = injected;
        return false;
    }
#endif
    bool removed = same && unlinkat(leases, name, 0) == 0;
    flock(leases, LOCK_UN);
    return removed;
}

/* The lease's name of the entry named `file`. */
static void lease_name(const char *file, char *name, size_t len)
{
    snprintf(name, len, "%.*s" JB_LEASE_SUFFIX,
             (int)(strlen(file) - strlen(JB_DISK_ENTRY_SUFFIX)), file);
}

/* The calling thread's build that found its key's lease held by another process, between the
 * rounds of its wait (made with the module cache's lock let go): the key's entry name, the bad
 * entry to wait past, the holder's watched lease and the deadline, kept across the rounds. */
static _Thread_local struct {
    bool waiting;
    char file[64];
    jb_lease_stale stale;
    jb_lease_watch watch;
    uint64_t deadline_ns;
    uint64_t break_retry_ns; /* a failed takeover is not tried again before */
} pending;

jb_lease_outcome jb__lease_acquire(const jb_disk_key *key, const jb_lease_stale *stale,
                                   jb_lease *out)
{
    out->fd = out->dir = -1;
    out->keeper = NULL;
    if (!pending.waiting || strcmp(pending.file, key->file) != 0) {
        memset(&pending, 0, sizeof pending);
        snprintf(pending.file, sizeof pending.file, "%s", key->file);
        pending.deadline_ns = jb__now_ns() + jb__child_timeout_ms() * 1000000ULL;
    }
    pending.waiting = false;
    pending.stale = stale ? *stale : (jb_lease_stale){0};
    uint64_t deadline_ns = pending.deadline_ns;
    jb_lease_watch *watch = &pending.watch;
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
    lease_name(key->file, out->name, sizeof out->name);
    for (bool broke = false;;) {
        struct stat st, named;
        int fd = open_lease_file(leases, out->name, &st);
        if (fd < 0) {
            int err = errno;
            close(leases);
            if (err == EISDIR) { /* said by remove_folder, for this kernel only */
                atomic_fetch_add(&counter_fallbacks, 1);
                return JB_LEASE_NONE;
            }
            return fall_back("a lease file cannot be made", strerror(err));
        }
        int err = try_lock(fd);
        if (err == 0) {
            JB_TEST_POINT(JB_TEST_LEASE_LOCKED, out->name);
            /* Locked, and touched before the name is looked at: a waiter that watched the
             * file's old time (a killed holder's, or ours while we were slow) and breaks it
             * later finds the time moved and leaves it; one that broke it before the touch
             * took the name away, which the look below sees. A failure's mark is read first
             * and not touched: its file's time tells a mark from before a reboot. */
            bool marked = failed_lately(fd);
            if (!marked)
                futimens(fd, NULL);
            /* The name may also have been removed (and made anew) by its last holder. */
            if (fstatat(leases, out->name, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
                named.st_ino == st.st_ino && named.st_dev == st.st_dev) {
                if (marked) { /* compile alone, as it did */
                    close(fd);
                    close(leases);
                    return JB_LEASE_NONE;
                }
                out->fd = fd;
                out->dir = leases;
                keep_fresh(out);
                if (broke)
                    atomic_fetch_add(&counter_stale_takeovers, 1);
                return JB_LEASE_HELD;
            }
            close(fd);
            continue;
        }
        close(fd);
        if (err != EAGAIN) {
            remove_if_same(leases, out->name, &st); /* no litter where locks never work */
            close(leases);
            return fall_back("the lock failed", strerror(err));
        }
        /* Held by another process: past the deadline compile alone; a holder whose lease has
         * not moved for STALE is taken over; else the caller waits (jb__lease_wait). */
        uint64_t now = jb__now_ns();
        if (now >= deadline_ns) {
            close(leases);
            atomic_fetch_add(&counter_timeouts, 1);
            return JB_LEASE_NONE;
        }
        if (!broke && now >= pending.break_retry_ns && watch_saw(watch, &st, now)) {
            if (break_stale(leases, out->name, watch)) {
                broke = true;
                continue;
            }
            pending.break_retry_ns = now + BREAK_RETRY_NS;
        }
        close(leases);
        pending.waiting = true;
        return JB_LEASE_BUSY;
    }
}

void jb__lease_wait(void)
{
    if (!pending.waiting)
        return;
    const char *file = pending.file;
    const jb_lease_stale *stale = &pending.stale;
    uint64_t deadline_ns = pending.deadline_ns;
    jb_lease_watch *watch = &pending.watch;
    int dir = jb__disk_dir_fd(), leases = dir >= 0 ? open_lease_dir(dir) : -1;
    if (leases < 0)
        return;
    char name[64];
    lease_name(file, name, sizeof name);
    JB_TEST_POINT(JB_TEST_LEASE_WAITING, name);
    for (uint64_t pause = POLL_FIRST_NS;; pause = pause * 2 < POLL_MAX_NS ? pause * 2 : POLL_MAX_NS) {
        if (entry_stored(dir, file, stale)) {
            /* The round is over: the caller loads it, and a build of this key later (that
             * load refused, say) is a new round with a deadline of its own, not this one's. */
            atomic_fetch_add(&counter_waits, 1);
            pending.waiting = false;
            break;
        }
        uint64_t now = jb__now_ns();
        if (now >= deadline_ns)
            break;
        /* Gone, something else, or free now: the caller looks again, from the top. */
        int fd = openat(leases, name, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
        struct stat st;
        bool held = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && held_by_another(fd);
        JB_TEST_POINT(JB_TEST_LEASE_POLLED, name);
        if (fd >= 0)
            close(fd);
        if (!held || (watch_saw(watch, &st, now) && now >= pending.break_retry_ns))
            break;
        jb__nap_ns(pause < deadline_ns - now ? pause : deadline_ns - now);
    }
    close(leases);
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
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
            st.st_mtime < before && try_lock(fd) == 0 && !failed_lately(fd)) {
            JB_TEST_POINT(JB_TEST_LEASE_SWEEPING, e->d_name);
            /* Locked, and removed as a holder removes its own: only if the name still leads
             * to it (a waiter may take an old file so locked for a stopped holder's, remove
             * it, and another process make the name anew), under the folder's lock. */
            remove_if_same(leases, e->d_name, &st);
        }
        if (fd >= 0)
            close(fd);
    }
    closedir(d);
}

void jb__lease_release(jb_lease *lease, bool compile_failed)
{
    if (lease->fd < 0)
        return;
    jb__keeper_stop(lease->keeper);
    lease->keeper = NULL;
    /* Still held: no one else can be using this file; but a holder stopped long enough to be
     * taken over finds another's lease at the name, and leaves it. A failed compile's mark
     * stays. */
    uint64_t now = jb__now_ns();
    struct stat st;
    if (!compile_failed || pwrite(lease->fd, &now, sizeof now, 0) != (ssize_t)sizeof now) {
        if (fstat(lease->fd, &st) == 0)
            remove_if_same(lease->dir, lease->name, &st);
    } else {
        sweep(lease->dir, lease->name);
    }
    close(lease->fd);
    close(lease->dir);
    lease->fd = lease->dir = -1;
}

void jb__lease_counters(uint64_t *waits, uint64_t *timeouts, uint64_t *fallbacks,
                        uint64_t *stale_takeovers)
{
    *stale_takeovers = atomic_load(&counter_stale_takeovers);
    *waits = atomic_load(&counter_waits);
    *timeouts = atomic_load(&counter_timeouts);
    *fallbacks = atomic_load(&counter_fallbacks);
}

void jb__lease_counters_reset(void)
{
    atomic_store(&counter_waits, 0);
    atomic_store(&counter_timeouts, 0);
    atomic_store(&counter_fallbacks, 0);
    atomic_store(&counter_stale_takeovers, 0);
}
