/*
 * The disk cache's folder: which one, whether it can be trusted, and the handle every entry
 * operation goes through.
 * - Which: $JITBRIDGE_CACHE_DIR (a relative one is made absolute against the working directory
 *   the process started in), else $XDG_CACHE_HOME/jitbridge (only an absolute one, as the XDG
 *   spec says), else $HOME/.cache/jitbridge. Read with secure_getenv.
 * - Trust is held, not re-checked by path: the folder is reached from "/" one component at a
 *   time with openat(O_NOFOLLOW), each folder checked on its own handle, and the last handle is
 *   kept for the life of the process. A symbolic link in the path is resolved first (realpath)
 *   and its target walked the same way, so a link is followed only to an acceptable folder.
 * - Refused: a folder not owned by the effective user or writable by group or others; a parent
 *   owned by another user (not root), or writable by others (or by a group not ours) without
 *   the sticky bit. Loading a planted shared object is running its code.
 */
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STALE_TMP_SECONDS 3600
#define DIR_OPEN_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)

static char start_cwd[PATH_MAX];
static char cache_dir[PATH_MAX];
static char choose_error[256];
static pthread_once_t choose_once = PTHREAD_ONCE_INIT;

static char state_text[PATH_MAX + 512] = "not yet used";
/* Taken by changes to state_text after setup and by the copy each caller gets. */
static pthread_mutex_t state_mutex = PTHREAD_MUTEX_INITIALIZER;
static atomic_int dir_fd = -1, tmp_fd = -1;
static pthread_mutex_t reattach_mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t *const jb__disk_locks[2] = {&reattach_mutex, &state_mutex}; /* fork.c's order */
static atomic_bool usable, storing, warned, set_up;
static pthread_once_t setup_once = PTHREAD_ONCE_INIT;

/* A relative JITBRIDGE_CACHE_DIR means the directory the process started in, not wherever the
 * host has chdir'd to by the first compile. */
__attribute__((constructor)) static void remember_start_directory(void)
{
    const char *dir = secure_getenv("JITBRIDGE_CACHE_DIR");
    if (dir && *dir && dir[0] != '/' && !getcwd(start_cwd, sizeof start_cwd))
        start_cwd[0] = '\0';
}

bool jb__disk_cache_disabled(const char **value)
{
    static const char *const off_words[] = {"0", "false", "no", "off"};
    const char *v = secure_getenv("JITBRIDGE_DISK_CACHE");
    *value = v;
    for (size_t i = 0; v && i < sizeof off_words / sizeof *off_words; i++)
        if (strcasecmp(v, off_words[i]) == 0)
            return true;
    return false;
}

static void choose(void)
{
    const char *dir = secure_getenv("JITBRIDGE_CACHE_DIR"), *xdg = secure_getenv("XDG_CACHE_HOME"),
               *home = secure_getenv("HOME");
    int n;
    if (dir && *dir && dir[0] == '/')
        n = snprintf(cache_dir, sizeof cache_dir, "%s", dir);
    else if (dir && *dir) {
        char here[PATH_MAX];
        const char *base = start_cwd[0] ? start_cwd : getcwd(here, sizeof here);
        if (!base) {
            snprintf(choose_error, sizeof choose_error,
                     "cannot make the relative JITBRIDGE_CACHE_DIR absolute (%s)", strerror(errno));
            return;
        }
        n = snprintf(cache_dir, sizeof cache_dir, "%s/%s", base, dir);
    } else if (xdg && xdg[0] == '/')
        n = snprintf(cache_dir, sizeof cache_dir, "%s/jitbridge", xdg);
    else if (home && home[0] == '/')
        n = snprintf(cache_dir, sizeof cache_dir, "%s/.cache/jitbridge", home);
    else {
        snprintf(choose_error, sizeof choose_error,
                 "no cache folder: set JITBRIDGE_CACHE_DIR or HOME to an absolute path");
        return;
    }
    if (n < 0 || (size_t)n >= sizeof cache_dir - 128) {
        cache_dir[0] = '\0';
        snprintf(choose_error, sizeof choose_error, "the cache folder path is too long");
    }
}

const char *jb__disk_folder(const char **why)
{
    pthread_once(&choose_once, choose);
    *why = choose_error;
    return cache_dir;
}

/* The path with every symbolic link in its existing part resolved; the missing rest is kept. */
static bool resolve(const char *path, char *out, size_t len)
{
    char prefix[PATH_MAX];
    snprintf(prefix, sizeof prefix, "%s", path);
    size_t cut = strlen(prefix);
    for (;;) {
        char real[PATH_MAX];
        if (realpath(prefix, real)) {
            int n = snprintf(out, len, "%s%s", strcmp(real, "/") ? real : "", path + cut);
            if (n == 0) /* the path was "/" itself */
                n = snprintf(out, len, "/");
            return n > 0 && (size_t)n < len;
        }
        if (errno != ENOENT && errno != ENOTDIR)
            return false;
        char *slash = strrchr(prefix, '/');
        if (!slash || slash == prefix) {
            snprintf(out, len, "%s", path);
            return true;
        }
        *slash = '\0';
        cut = (size_t)(slash - prefix);
    }
}

/* snprintf for messages: a pathological path may truncate one, and that is fine. */
__attribute__((format(printf, 3, 4))) static void say(char *out, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, len, fmt, ap);
    va_end(ap);
}

/* Why a folder on the way to the cache lets someone else swap what lies below it, or NULL. */
static const char *untrusted_parent(const struct stat *st, char *fix, size_t fix_len,
                                    const char *path, const char *variable)
{
    if (st->st_uid != 0 && st->st_uid != geteuid()) {
        say(fix, fix_len, "choose a folder of your own with %s", variable);
        return "is owned by another user";
    }
    if ((st->st_mode & S_ISVTX) == 0 && (st->st_mode & S_IWOTH)) {
        say(fix, fix_len, "chmod o-w %s", path);
        return "is writable by others without the sticky bit";
    }
    if ((st->st_mode & S_ISVTX) == 0 && (st->st_mode & S_IWGRP) && st->st_gid != getegid()) {
        say(fix, fix_len, "chmod g-w %s", path);
        return "is writable by another group without the sticky bit";
    }
    return NULL;
}

static const char *untrusted_folder(const struct stat *st, char *fix, size_t fix_len,
                                    const char *path)
{
    if (st->st_uid != geteuid()) {
        say(fix, fix_len, "chown %u %s, or choose a folder of your own with JITBRIDGE_CACHE_DIR",
            (unsigned)geteuid(), path);
        return "is owned by another user";
    }
    if (st->st_mode & (S_IWGRP | S_IWOTH)) {
        say(fix, fix_len, "chmod 700 %s", path);
        return "is writable by group or others";
    }
    return NULL;
}

/* Walks `resolved` (consumed) from "/" by handles, checking each folder on the way (made 0700
 * if missing when `create`): the last one's handle, unchecked; or -1 with *bad set or errno. */
static int walk(char *resolved, bool create, const char *variable, char walked[PATH_MAX],
                char *fix, size_t fix_len, const char **bad)
{
    snprintf(walked, PATH_MAX, "/");
    *bad = NULL;
    int fd = open("/", DIR_OPEN_FLAGS);
    struct stat st;
    char *rest = resolved, *component;
    while (fd >= 0 && (component = strtok_r(rest, "/", &rest))) {
        int next = -1;
        if (fstat(fd, &st) == 0 &&
            !(*bad = untrusted_parent(&st, fix, fix_len, walked, variable))) {
            size_t at = strlen(walked);
            snprintf(walked + at, PATH_MAX - at, "%s%s", at > 1 ? "/" : "", component);
            next = openat(fd, component, DIR_OPEN_FLAGS);
            if (next < 0 && errno == ENOENT && create &&
                (mkdirat(fd, component, 0700) == 0 || errno == EEXIST))
                next = openat(fd, component, DIR_OPEN_FLAGS);
        }
        int err = errno;
        close(fd);
        fd = next;
        errno = err;
    }
    return fd;
}

/*
 * Reaches `path` from "/" through handles, creating missing folders 0700 when `create`.
 * Returns the folder's handle; or -1 with *missing set (it does not exist and `create` is
 * false), or -1 with `why` saying what was refused and how to fix it.
 */
static int open_trusted(const char *path, bool create, bool *missing, char *why, size_t why_len)
{
    char resolved[PATH_MAX], walked[PATH_MAX], fix[PATH_MAX + 96];
    *missing = false;
    if (!resolve(path, resolved, sizeof resolved)) {
        say(why, why_len, "cannot resolve the cache folder %s (%s)", path, strerror(errno));
        return -1;
    }
    const char *bad;
    int fd = walk(resolved, create, "JITBRIDGE_CACHE_DIR", walked, fix, sizeof fix, &bad);
    struct stat st;
    if (bad)
        say(why, why_len, "refusing the cache folder %s: its parent %s %s; fix: %s", path, walked,
            bad, fix);
    else if (fd < 0 && errno == ENOENT && !create)
        *missing = true;
    else if (fd < 0)
        say(why, why_len, "cannot %s the cache folder %s (%s at %s)",
            create ? "create" : "open", path, strerror(errno), walked);
    else if (fstat(fd, &st) != 0)
        say(why, why_len, "cannot examine the cache folder %s (%s)", path, strerror(errno));
    else if ((bad = untrusted_folder(&st, fix, sizeof fix, walked)))
        say(why, why_len, "refusing the cache folder %s: it %s; fix: %s", path, bad, fix);
    else
        return fd;
    if (fd >= 0)
        close(fd);
    return -1;
}

bool jb__trusted_folder_path(const char *path, const char *variable, char *resolved, size_t len,
                             char *why, size_t why_len)
{
    char walked[PATH_MAX], rest[PATH_MAX], fix[PATH_MAX + 96];
    if (!resolve(path, resolved, len) || snprintf(rest, sizeof rest, "%s", resolved) < 0) {
        say(why, why_len, "cannot resolve %s (%s)", path, strerror(errno));
        return false;
    }
    const char *bad;
    int fd = walk(rest, false, variable, walked, fix, sizeof fix, &bad);
    struct stat st;
    bool seen = fd >= 0 && fstat(fd, &st) == 0;
    if (seen) /* the folder itself holds what we make: checked as a parent */
        bad = untrusted_parent(&st, fix, sizeof fix, walked, variable);
    int err = errno;
    if (fd >= 0)
        close(fd);
    if (bad)
        say(why, why_len, "%s %s; fix: %s", walked, bad, fix);
    else if (!seen)
        say(why, why_len, "cannot open %s (%s)", walked, strerror(err));
    return seen && !bad;
}

/* One warning per process, then memory-only. */
void jb__disk_turn_off(const char *fmt, const char *detail)
{
    atomic_store(&usable, false);
    atomic_store(&storing, false);
    char text[sizeof state_text];
    say(text, sizeof text, fmt, detail);
    pthread_mutex_lock(&state_mutex);
    memcpy(state_text, text, sizeof text);
    pthread_mutex_unlock(&state_mutex);
    if (!atomic_exchange(&warned, true))
        jb__warn("%s; compiled code is kept in memory only", text);
}

/* A disk that cannot take more (read-only, full) still serves the entries it has. */
void jb__disk_stop_storing(const char *fmt, const char *detail)
{
    if (!atomic_exchange(&storing, false) || !atomic_load(&usable))
        return; /* said already, or the cache is off */
    char why[sizeof state_text];
    say(why, sizeof why, fmt, detail);
    pthread_mutex_lock(&state_mutex);
    say(state_text, sizeof state_text, "on, read-only: %s", why);
    pthread_mutex_unlock(&state_mutex);
    if (!atomic_exchange(&warned, true))
        jb__warn("%s; new compiled code is not stored on disk", why);
}

/* The folder's tmp/, made 0700 if missing; whatever else sits at that name is removed first. */
static int open_tmp(int dir)
{
    int fd = openat(dir, "tmp", DIR_OPEN_FLAGS);
    if (fd < 0 && (errno == ENOTDIR || errno == ELOOP))
        unlinkat(dir, "tmp", 0);
    if (fd < 0 && (mkdirat(dir, "tmp", 0700) == 0 || errno == EEXIST))
        fd = openat(dir, "tmp", DIR_OPEN_FLAGS);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || st.st_uid != geteuid() ||
                    (st.st_mode & (S_IWGRP | S_IWOTH)))) {
        close(fd);
        errno = EPERM;
        return -1;
    }
    return fd;
}

/* Temporaries old enough that no live writer can still own them: left by killed writers. */
static void sweep_stale_temporaries(void)
{
    int fd = openat(tmp_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dir) {
        if (fd >= 0)
            close(fd);
        return;
    }
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(dir))) {
        struct stat st;
        if (e->d_name[0] == '.' || fstatat(tmp_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (now - st.st_mtime > STALE_TMP_SECONDS)
            unlinkat(tmp_fd, e->d_name, S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0);
    }
    closedir(dir);
}

static void setup(void)
{
    const char *value, *why;
    if (jb__disk_cache_disabled(&value)) {
        say(state_text, sizeof state_text, "off (JITBRIDGE_DISK_CACHE=%s)", value);
    } else if (!jb__disk_folder(&why)[0]) {
        jb__disk_turn_off("%s", why);
    } else {
        char refused[sizeof state_text];
        bool missing;
        dir_fd = open_trusted(cache_dir, true, &missing, refused, sizeof refused);
        if (dir_fd < 0) {
            jb__disk_turn_off("%s", refused);
        } else {
            say(state_text, sizeof state_text, "on");
            atomic_store(&usable, true);
            atomic_store(&storing, true);
            tmp_fd = open_tmp(dir_fd); /* two steps: clang refuses comparing an atomic store */
            if (tmp_fd < 0)
                jb__disk_stop_storing("cannot use the cache folder's tmp/ (%s)", strerror(errno));
            else
                sweep_stale_temporaries();
        }
    }
    atomic_store(&set_up, true);
}

bool jb__disk_cache_usable(void)
{
    jb__warn_hold(); /* setup's warning reaches the callback after the once */
    pthread_once(&setup_once, setup);
    jb__warn_release();
    return atomic_load(&usable);
}

int jb__disk_dir_fd(void)
{
    return jb__disk_cache_usable() ? dir_fd : -1;
}

int jb__disk_tmp_fd(void)
{
    return jb__disk_cache_usable() && atomic_load(&storing) ? tmp_fd : -1;
}

/* The folder or its tmp/ was removed under a long-running process (a cache cleaner): set up
 * again. The old handles stay open, as another thread may be using them: one per removal. */
bool jb__disk_reattach(void)
{
    pthread_mutex_lock(&reattach_mutex);
    struct stat st;
    int dir = jb__disk_dir_fd(), tmp = -1;
    if (dir >= 0 && fstat(dir, &st) == 0 && st.st_nlink == 0) {
        char refused[sizeof state_text];
        bool missing;
        dir = open_trusted(cache_dir, true, &missing, refused, sizeof refused);
        if (dir < 0)
            jb__disk_turn_off("%s", refused);
        else
            atomic_store(&dir_fd, dir);
    }
    if (dir >= 0 && (tmp = open_tmp(dir)) >= 0)
        atomic_store(&tmp_fd, tmp);
    pthread_mutex_unlock(&reattach_mutex);
    return tmp >= 0;
}

int jb__disk_open_for_maintenance(int *out)
{
    *out = -1;
    const char *why;
    const char *folder = jb__disk_folder(&why);
    JB_RETURN_IF(!folder[0], JB_ERR_UNSUPPORTED, "%s", why);
    if (atomic_load(&set_up) && atomic_load(&usable)) {
        *out = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
        JB_RETURN_IF(*out < 0, JB_ERR_SYSTEM, "cannot duplicate a handle: %s", strerror(errno));
        return JB_OK;
    }
    char refused[sizeof state_text];
    bool missing;
    *out = open_trusted(folder, false, &missing, refused, sizeof refused);
    JB_RETURN_IF(*out < 0 && !missing, JB_ERR_SYSTEM, "%s", refused);
    return JB_OK;
}

/* ---- the public view ---- */
jb_status jb_disk_cache_dir(const char **out)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_disk_cache_dir: out is NULL");
    const char *why;
    *out = jb__disk_folder(&why);
    return JB_OK;
}

const char *jb_disk_cache_state(void)
{
    static _Thread_local char preview[sizeof state_text];
    if (atomic_load(&set_up)) {
        /* A copy of this thread's: another thread may turn the cache off meanwhile. */
        pthread_mutex_lock(&state_mutex);
        memcpy(preview, state_text, sizeof preview);
        pthread_mutex_unlock(&state_mutex);
        return preview;
    }
    /* Not used yet in this process: say what would happen, creating nothing. */
    const char *value, *why;
    const char *folder = jb__disk_folder(&why);
    bool missing;
    int fd = -1;
    if (jb__disk_cache_disabled(&value))
        say(preview, sizeof preview, "off (JITBRIDGE_DISK_CACHE=%s)", value);
    else if (!folder[0])
        say(preview, sizeof preview, "off: %s", why);
    else if ((fd = open_trusted(folder, false, &missing, preview, sizeof preview)) >= 0)
        say(preview, sizeof preview, "on");
    else if (missing)
        say(preview, sizeof preview, "on (the folder is created, 0700, at the first compile)");
    if (fd >= 0)
        close(fd);
    return preview;
}
