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
 *   owned by another user (not root), or writable by its group or others without the sticky
 *   bit (our own group too: its other members). Loading a planted shared object is running its
 *   code.
 * - Ours: the library removes or replaces only what it made (temporaries by their name pattern,
 *   entries by their name and format), and sweeps, prunes or fixes only a folder marked as its
 *   own with CACHEDIR.TAG (the Cache Directory Tagging convention, which backup tools honour).
 *   A folder it creates or finds empty, or one that holds nothing but its kinds of files (entry
 *   names, and a tmp/ of temporary names: an older version's cache), it marks. Any other
 *   unmarked folder ($HOME, ".") is shared: entries are loaded and stored there (temporaries
 *   beside them, no tmp/ is made), nothing is swept or removed, an entry is replaced only by
 *   one of its own kind, and prune, clear and verify --fix refuse it.
 * - Not now: a transient failure (EMFILE, ENOMEM, EIO ...) while setting up leaves the cache off
 *   for now and tries again at a later build, after a delay that doubles up to 30 s; only a
 *   lasting refusal (ownership, permissions, a path that cannot be a folder) turns it off.
 */
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STALE_TMP_SECONDS 3600
#define DIR_OPEN_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
#define TAG_NAME "CACHEDIR.TAG"
#define TAG_SIGNATURE "Signature: 8a477f597d28d172789f06886806bc55" /* the convention's */
#define TEMPORARY_SUFFIX ".tmp"
#define TMP_NAME_TRIES 8

static const char tag_text[] =
    TAG_SIGNATURE "\n"
    "# This file marks the folder as jitbridge's cache of compiled code: jitbridge removes\n"
    "# files only in a folder so marked, and only its own. Backup tools that honour cache\n"
    "# directory tags (https://bford.info/cachedir/) leave the folder out.\n";

static char start_cwd[PATH_MAX];
static char cache_dir[PATH_MAX];
static char choose_error[256];
static pthread_once_t choose_once = PTHREAD_ONCE_INIT;

static char state_text[PATH_MAX + 512] = "not yet used";
/* Taken by changes to state_text after setup and by the copy each caller gets. */
static pthread_mutex_t state_mutex = PTHREAD_MUTEX_INITIALIZER;
static atomic_int dir_fd = -1, tmp_fd = -1; /* tmp_fd: where temporaries go (tmp/, or the folder) */
/* One setup attempt or reattach at a time; also serializes setup_backoff's failures. */
static pthread_mutex_t setup_mutex = PTHREAD_MUTEX_INITIALIZER;
/* Setup nests state's lock inside its own: fork takes them in that order (a build takes both
 * under the module cache's lock). */
static void disk_folder_fork(jb_fork_phase phase)
{
    if (phase == JB_FORK_PREPARE) {
        pthread_mutex_lock(&setup_mutex);
        pthread_mutex_lock(&state_mutex);
    } else if (phase == JB_FORK_PARENT) {
        pthread_mutex_unlock(&state_mutex);
        pthread_mutex_unlock(&setup_mutex);
    } else {
        pthread_mutex_init(&state_mutex, NULL);
        pthread_mutex_init(&setup_mutex, NULL);
    }
}
JB_FORK_HANDLER(JB_FORK_DISK_FOLDER, disk_folder_fork)
static atomic_bool usable, storing, shared, warned, set_up, attempted;
/* The handle of the tmp/ that attach opened (never closed) while it is not yet swept, else -1:
 * the first store sweeps it, so that a process that only loads never reads it (a quarter of
 * the folder's set-up on the development host). Only that tmp/, never a shared folder that a
 * reattach put in tmp_fd's place meanwhile. */
static atomic_int sweep_fd = -1;
static jb_backoff setup_backoff; /* after a transient failure */
/* A full disk (ENOSPC, EDQUOT) pauses storing until full_until_ns (0: not paused); full_wait_ns
 * is the last pause's length, doubled by each failure in a row, zeroed once a store lands. A
 * full disk frees up in minutes, so storing is not given up for the process's life. */
#define FULL_FIRST_WAIT_NS (30ull * 1000000000)
#define FULL_LAST_WAIT_NS (600ull * 1000000000)
static atomic_uint_fast64_t full_until_ns, full_wait_ns;
static int shared_tag_error; /* under setup_mutex: why the folder could not be marked, or 0 */

/* A relative path in JITBRIDGE_CACHE_DIR, JITBRIDGE_CACHE_BUNDLE or JITBRIDGE_MANIFEST means
 * the directory the process started in, not wherever the host has chdir'd to by the first
 * compile. */
__attribute__((constructor)) static void remember_start_directory(void)
{
    static const char *const variables[] = {"JITBRIDGE_CACHE_DIR", "JITBRIDGE_CACHE_BUNDLE",
                                            "JITBRIDGE_MANIFEST"};
    for (size_t i = 0; i < sizeof variables / sizeof *variables; i++) {
        const char *value = secure_getenv(variables[i]), *at = value;
        bool relative = false; /* a path of it (a list's, between colons) */
        for (; at && *at && !relative; at = strchr(at, ':') ? strchr(at, ':') + 1 : NULL)
            relative = *at != '/' && *at != ':';
        if (relative) {
            if (!getcwd(start_cwd, sizeof start_cwd))
                start_cwd[0] = '\0';
            return;
        }
    }
}

bool jb__path_from_start(const char *path, char *out, size_t len)
{
    char here[PATH_MAX];
    const char *base = path[0] == '/' ? "" : start_cwd[0] ? start_cwd : getcwd(here, sizeof here);
    if (!base)
        return false;
    int n = snprintf(out, len, "%s%s%s", base, *base ? "/" : "", path);
    if (n < 0 || (size_t)n >= len) {
        errno = ENAMETOOLONG;
        return false;
    }
    return true;
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
    if (dir && *dir && jb__path_from_start(dir, cache_dir, sizeof cache_dir))
        n = (int)strlen(cache_dir);
    else if (dir && *dir && errno == ENAMETOOLONG)
        n = (int)sizeof cache_dir; /* said below */
    else if (dir && *dir) {
        snprintf(choose_error, sizeof choose_error,
                 "cannot make the relative JITBRIDGE_CACHE_DIR absolute (%s)", strerror(errno));
        return;
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
    /* Our own group too: its other members (and a POSIX ACL's named users, whose write shows
     * in the group bits) could swap what the folder holds. */
    if ((st->st_mode & S_ISVTX) == 0 && (st->st_mode & S_IWGRP)) {
        say(fix, fix_len, "chmod g-w %s", path);
        return "is writable by its group without the sticky bit";
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
 * false), or -1 with `why` saying what was refused and how to fix it, and *err the failing
 * call's errno (0 when a folder broke a rule: that lasts).
 */
static int open_trusted(const char *path, bool create, bool *missing, char *why, size_t why_len,
                        int *err)
{
    char resolved[PATH_MAX], walked[PATH_MAX], fix[PATH_MAX + 96];
    *missing = false;
    *err = 0;
    if (!resolve(path, resolved, sizeof resolved)) {
        *err = errno;
        say(why, why_len, "cannot resolve the cache folder %s (%s)", path, strerror(*err));
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
    else if (fd < 0 && (*err = errno))
        say(why, why_len, "cannot %s the cache folder %s (%s at %s)",
            create ? "create" : "open", path, strerror(*err), walked);
    else if (fstat(fd, &st) != 0 && (*err = errno))
        say(why, why_len, "cannot examine the cache folder %s (%s)", path, strerror(*err));
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

/* ---- what in the folder is ours ---- */

static bool lowercase_hex(const char *text, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((text[i] >= '0' && text[i] <= '9') || (text[i] >= 'a' && text[i] <= 'f')))
            return false;
    return true;
}

static bool digits_then(const char **text, char end)
{
    const char *p = *text;
    while (*p >= '0' && *p <= '9')
        p++;
    if (p == *text || *p != end)
        return false;
    *text = p + 1;
    return true;
}

bool jb__disk_is_entry_name(const char *name)
{
    return strlen(name) == JB_DISK_ENTRY_HEX + strlen(JB_DISK_ENTRY_SUFFIX) &&
           lowercase_hex(name, JB_DISK_ENTRY_HEX) &&
           strcmp(name + JB_DISK_ENTRY_HEX, JB_DISK_ENTRY_SUFFIX) == 0;
}

bool jb__disk_is_record_name(const char *name)
{
    return strlen(name) == JB_DISK_ENTRY_HEX + strlen(JB_DISK_RECORD_SUFFIX) &&
           lowercase_hex(name, JB_DISK_ENTRY_HEX) &&
           strcmp(name + JB_DISK_ENTRY_HEX, JB_DISK_RECORD_SUFFIX) == 0;
}

bool jb__lease_is_name(const char *name)
{
    return strlen(name) == JB_DISK_ENTRY_HEX + strlen(JB_LEASE_SUFFIX) &&
           lowercase_hex(name, JB_DISK_ENTRY_HEX) &&
           strcmp(name + JB_DISK_ENTRY_HEX, JB_LEASE_SUFFIX) == 0;
}

#define TEMPORARY_HEX 32 /* the random part of a temporary name */

bool jb__disk_is_temporary_name_as(const char *name, const char *suffix)
{
    return strlen(name) == TEMPORARY_HEX + strlen(suffix) && lowercase_hex(name, TEMPORARY_HEX) &&
           strcmp(name + TEMPORARY_HEX, suffix) == 0;
}

/* Today's random names (32 hex digits), and an older version's <entry>.<pid>.<serial>.tmp. */
static bool is_temporary_name(const char *name)
{
    size_t len = strlen(name), entry = JB_DISK_ENTRY_HEX + strlen(JB_DISK_ENTRY_SUFFIX);
    if (jb__disk_is_temporary_name_as(name, TEMPORARY_SUFFIX))
        return true;
    char head[64];
    if (len <= entry + 1 || entry >= sizeof head)
        return false;
    memcpy(head, name, entry);
    head[entry] = '\0';
    const char *rest = name + entry + 1;
    return jb__disk_is_entry_name(head) && name[entry] == '.' && digits_then(&rest, '.') &&
           digits_then(&rest, '.') && strcmp(rest - 1, TEMPORARY_SUFFIX) == 0;
}

static void temporary_name(char *out, size_t len, const char *suffix)
{
    uint64_t r[2];
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        static atomic_uint_fast64_t serial;
        r[0] = jb__now_ns() ^ ((uint64_t)getpid() << 40);
        r[1] = jb__fnv1a64(r, sizeof r[0], atomic_fetch_add(&serial, 1) + JB_FNV_SEED);
    }
    snprintf(out, len, "%016" PRIx64 "%016" PRIx64 "%s", r[0], r[1], suffix);
}

int jb__disk_create_temporary(int dir, char *name, size_t len)
{
    return jb__disk_create_temporary_as(dir, name, len, TEMPORARY_SUFFIX);
}

int jb__disk_create_temporary_as(int dir, char *name, size_t len, const char *suffix)
{
    int fd = -1;
    for (int i = 0; i < TMP_NAME_TRIES && fd < 0; i++) {
        temporary_name(name, len, suffix);
        fd = openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK,
                    0600);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    return fd;
}

/* The paths through which an unnamed file is given a name (linkat's AT_EMPTY_PATH would need
 * CAP_DAC_READ_SEARCH): the calling thread's first, as /proc/self/fd is gone once the main
 * thread has exited; /proc/self for kernels before 3.17, which have no thread-self. */
static const char *const proc_fd_formats[2] = {"/proc/thread-self/fd/%d", "/proc/self/fd/%d"};

#ifdef JB_TEST_HOOKS
static atomic_bool unnamed_refused;

void jb__test_set_unnamed_refused(bool refused)
{
    atomic_store(&unnamed_refused, refused);
}
#endif

int jb__disk_create_unnamed(int dir)
{
#ifdef JB_TEST_HOOKS
    if (atomic_load(&unnamed_refused)) {
        errno = EOPNOTSUPP;
        return -1;
    }
#endif
    int fd = openat(dir, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    /* Named later through /proc: where no path there leads to this file, say so now. */
    struct stat held, by_path;
    bool reachable = fstat(fd, &held) == 0;
    for (int i = 0; reachable && i < 2; i++) {
        char proc[48];
        snprintf(proc, sizeof proc, proc_fd_formats[i], fd);
        if (stat(proc, &by_path) == 0 && jb__same_file(&by_path, &held))
            return fd;
    }
    close(fd);
    errno = ENOENT;
    return -1;
}

/* Links the file open as `fd` at `name` in `dir` through /proc; 0, or -1 with errno. */
static int link_through_proc(int fd, int dir, const char *name)
{
    int linked = -1;
    for (int i = 0; i < 2 && linked != 0; i++) {
        char proc[48];
        snprintf(proc, sizeof proc, proc_fd_formats[i], fd);
        linked = linkat(AT_FDCWD, proc, dir, name, AT_SYMLINK_FOLLOW);
        if (linked != 0 && errno != ENOENT)
            break;
    }
    return linked;
}

int jb__disk_link_unnamed(int dir, int fd, const char *name)
{
    if (link_through_proc(fd, dir, name) != 0)
        return -1;
    /* The name must lead to this file: not to another one that took its descriptor number
     * meanwhile (a thread that closed and reopened it). */
    struct stat held, named;
    if (fstat(fd, &held) != 0 || fstatat(dir, name, &named, AT_SYMLINK_NOFOLLOW) != 0 ||
        !jb__same_file(&held, &named)) {
        errno = ESTALE;
        return -1;
    }
    return 0;
}

int jb__disk_name_unnamed(int dir, int fd, char *name, size_t len, const char *suffix)
{
    int linked = -1;
    for (int i = 0; i < TMP_NAME_TRIES && linked != 0; i++) {
        temporary_name(name, len, suffix);
        linked = jb__disk_link_unnamed(dir, fd, name);
        if (linked != 0 && errno == ESTALE) { /* a random name: no one else's file */
            unlinkat(dir, name, 0);
            errno = ESTALE;
        }
        if (linked != 0 && errno != EEXIST)
            return -1;
    }
    return linked;
}

/* A failure to be told apart from "no": -1 when errno is transient, else `otherwise`. */
static int unless_transient(int otherwise)
{
    return jb__errno_is_transient(errno) ? -1 : otherwise;
}

/* 1 when `dir` holds a CACHEDIR.TAG (a regular file that begins with the signature), 0 when
 * not, -1 (errno) when that cannot be told now. */
static int marked(int dir)
{
    int fd = openat(dir, TAG_NAME, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return unless_transient(0);
    char head[sizeof TAG_SIGNATURE - 1];
    struct stat st;
    errno = 0;
    int answer = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
                 jb__read_up_to(fd, head, sizeof head) == sizeof head &&
                 memcmp(head, TAG_SIGNATURE, sizeof head) == 0;
    if (!answer && errno)
        answer = unless_transient(0);
    int err = errno;
    close(fd);
    errno = err;
    return answer;
}

/* 1 when every name in `dir` is of a kind the cache makes (entry and record names, and `tmp`
 * and `leases`, folders of temporary and lease names, at the top), 0 when anything else is
 * there, -1 (errno) when it cannot be listed now. */
static int holds_only_ours(int dir, bool top)
{
    DIR *d = jb__opendir_at(dir);
    if (!d)
        return unless_transient(0);
    int answer = 1;
    struct dirent *e;
    while (answer == 1 && (errno = 0, e = readdir(d))) {
        const char *name = e->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
            (top ? jb__disk_is_entry_name(name) || jb__disk_is_record_name(name)
                 : is_temporary_name(name) || jb__lease_is_name(name)))
            continue;
        if (!top || (strcmp(name, "tmp") != 0 && strcmp(name, JB_LEASE_DIR) != 0)) {
            answer = 0;
            continue;
        }
        int sub = openat(dir, name, DIR_OPEN_FLAGS); /* a file or link named tmp is not ours */
        answer = sub >= 0 ? holds_only_ours(sub, false) : unless_transient(0);
        if (sub >= 0)
            close(sub);
    }
    if (answer == 1 && errno) /* readdir failed */
        answer = unless_transient(0);
    int err = errno;
    closedir(d);
    errno = err;
    return answer;
}

/* Marks `dir` as the cache's own: 0, or -1 (errno). Written under a temporary name and linked
 * into place, so no process reads half a tag and a tag already there is kept. */
static int write_tag(int dir)
{
    char name[64];
    int fd = jb__disk_create_temporary(dir, name, sizeof name);
    if (fd < 0)
        return -1;
    bool ok = jb__write_all(fd, tag_text, sizeof tag_text - 1) && fsync(fd) == 0;
    int err = errno;
    ok = close(fd) == 0 && ok;
    if (ok && linkat(dir, name, dir, TAG_NAME, 0) != 0 && errno != EEXIST) {
        ok = false;
        err = errno;
    }
    unlinkat(dir, name, 0);
    errno = err;
    return ok ? 0 : -1;
}

/* Whether the cache may manage `dir` (*ours), marking it when it holds only the cache's kinds
 * of files (*tag_error: why a tag could not be written, else 0): 0, or -1 (errno) when that
 * cannot be told now. */
static int claim(int dir, bool *ours, int *tag_error)
{
    *tag_error = 0;
    int is_marked = marked(dir);
    if (is_marked == 0) {
        int only_ours = holds_only_ours(dir, true);
        if (only_ours == 1 && write_tag(dir) != 0) {
            if (jb__errno_is_transient(errno))
                return -1;
            *tag_error = errno; /* a read-only folder: used, never swept */
        }
        is_marked = only_ours == 1 ? marked(dir) : only_ours; /* ours, or another's, tag */
    }
    *ours = is_marked == 1;
    return is_marked < 0 ? -1 : 0;
}

/* ---- setting up ---- */

__attribute__((format(printf, 1, 2))) static void set_state(const char *fmt, ...)
{
    char text[sizeof state_text];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&state_mutex);
    memcpy(state_text, text, sizeof text);
    pthread_mutex_unlock(&state_mutex);
}

/* One warning per process, then memory-only. */
void jb__disk_turn_off(const char *fmt, const char *detail)
{
    atomic_store(&usable, false);
    atomic_store(&storing, false);
    char text[sizeof state_text];
    say(text, sizeof text, fmt, detail);
    set_state("%s", text);
    if (!atomic_exchange(&warned, true))
        jb__warn("%s; compiled code is kept in memory only", text);
}

/* The wait of a full disk's first pause of storing (tests set a shorter one). */
static uint64_t first_full_wait_ns(void)
{
#ifdef JB_TEST_HOOKS
    const char *ms = secure_getenv("JITBRIDGE_TEST_DISK_FULL_WAIT_MS");
    if (ms && *ms)
        return strtoull(ms, NULL, 10) * 1000000;
#endif
    return FULL_FIRST_WAIT_NS;
}

static bool paused_for_full_disk(void)
{
    uint64_t until = atomic_load(&full_until_ns);
    return until && jb__now_ns() < until;
}

/* A full disk frees up (logs rotated, a quota raised): storing pauses for a while, and the first
 * pause since stores last landed warns, not each one after a retry that failed again. */
static void pause_for_full_disk(const char *why)
{
    uint64_t now = jb__now_ns(), until = atomic_load(&full_until_ns);
    if (until && now < until)
        return; /* another store's failure paused it meanwhile */
    uint64_t wait = atomic_load(&full_wait_ns);
    wait = wait ? 2 * wait : first_full_wait_ns();
    wait = wait < FULL_LAST_WAIT_NS ? wait : FULL_LAST_WAIT_NS;
    if (!atomic_compare_exchange_strong(&full_until_ns, &until, now + wait))
        return; /* another thread's failure paused it first */
    atomic_store(&full_wait_ns, wait);
    time_t at = time(NULL) + (time_t)((wait + 999999999) / 1000000000);
    struct tm tm;
    char when[32] = "later";
    if (gmtime_r(&at, &tm))
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    set_state("on, read-only until %s: %s; the disk is full, storing is tried again then (a "
              "wait of %llu ms, doubling to 10 min while it stays full)",
              when, why, (unsigned long long)(wait / 1000000));
    if (until == 0)
        jb__warn("%s; new compiled code is not stored on disk until %s, then tried again", why,
                 when);
}

/* A disk that cannot take more (read-only, full) still serves the entries it has. */
void jb__disk_stop_storing(const char *fmt, int err)
{
    if (!atomic_load(&storing) || !atomic_load(&usable))
        return; /* stopped already, or the cache is off */
    char why[sizeof state_text];
    say(why, sizeof why, fmt, strerror(err));
    if (err == ENOSPC || err == EDQUOT) {
        pause_for_full_disk(why);
        return;
    }
    if (!atomic_exchange(&storing, false))
        return; /* said already */
    set_state("on, read-only: %s", why);
    if (!atomic_exchange(&warned, true))
        jb__warn("%s; new compiled code is not stored on disk", why);
}

int jb__disk_open_own_folder(int dir, const char *name, bool create, mode_t refused)
{
    int fd = openat(dir, name, DIR_OPEN_FLAGS);
    if (fd < 0 && errno == ENOENT && create && (mkdirat(dir, name, 0700) == 0 || errno == EEXIST))
        fd = openat(dir, name, DIR_OPEN_FLAGS);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    if (fd >= 0 && (st.st_uid != geteuid() || (st.st_mode & refused))) {
        close(fd);
        errno = EPERM;
        return -1;
    }
    return fd;
}

/* The marked folder's tmp/, made 0700 if missing, written by no one else: its handle, or -1
 * (errno). Whatever else sits at that name is left as it is: temporaries then go beside the
 * entries. */
static int open_tmp(int dir)
{
    return jb__disk_open_own_folder(dir, "tmp", true, S_IWGRP | S_IWOTH);
}

/* Temporaries (by name, regular files) old enough that no live writer can still own them: left
 * by killed writers. Only in a marked folder's tmp/. */
static void sweep_stale_temporaries(int tmp)
{
    DIR *dir = jb__opendir_at(tmp);
    if (!dir)
        return;
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(dir))) {
        struct stat st;
        if (is_temporary_name(e->d_name) &&
            fstatat(tmp, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            now - st.st_mtime > STALE_TMP_SECONDS)
            unlinkat(tmp, e->d_name, 0);
    }
    closedir(dir);
}

typedef enum attach_result { ATTACHED, NOT_NOW, REFUSED } attach_result;

/* Opens the folder (creating it), claims it, and opens where temporaries go; publishes the
 * handles on success. Otherwise `why` says what failed: NOT_NOW is transient. */
static attach_result attach(char *why, size_t why_len)
{
    bool missing, ours = false;
    int err;
    int dir = open_trusted(cache_dir, true, &missing, why, why_len, &err);
    if (dir < 0)
        return err && jb__errno_is_transient(err) ? NOT_NOW : REFUSED;
    if (claim(dir, &ours, &shared_tag_error) != 0) {
        say(why, why_len, "cannot look into the cache folder %s (%s)", cache_dir,
            strerror(errno));
        close(dir);
        return NOT_NOW;
    }
    int tmp = ours ? open_tmp(dir) : -1;
    if (tmp < 0 && ours && jb__errno_is_transient(errno)) {
        say(why, why_len, "cannot open %s/tmp (%s)", cache_dir, strerror(errno));
        close(dir);
        return NOT_NOW;
    }
    atomic_store(&shared, !ours);
    atomic_store(&dir_fd, dir);
    atomic_store(&tmp_fd, tmp >= 0 ? tmp : dir);
    atomic_store(&sweep_fd, tmp);
    return ATTACHED;
}

static const char shared_text[] = "on, shared: the folder is not marked as the cache's own (no "
                                  TAG_NAME ") and holds other files, so nothing in it is swept "
                                  "or removed";

/* Under setup_mutex. */
static void set_state_on(void)
{
    if (atomic_load(&shared) && shared_tag_error)
        set_state("on, shared: the folder could not be marked as the cache's own (%s: %s), so "
                  "nothing in it is swept or removed",
                  TAG_NAME, strerror(shared_tag_error));
    else
        set_state("%s", atomic_load(&shared) ? shared_text : "on");
}

void jb__disk_stored(void)
{
    if (!atomic_load(&full_until_ns) || !atomic_exchange(&full_until_ns, 0))
        return; /* the usual case: storing was not paused */
    atomic_store(&full_wait_ns, 0);
    pthread_mutex_lock(&setup_mutex);
    if (atomic_load(&storing) && !atomic_load(&full_until_ns))
        set_state_on(); /* not over a lasting stop, or a new pause, of another thread */
    pthread_mutex_unlock(&setup_mutex);
    jb__warn("the disk cache stores compiled code again: the disk has room");
}

/* Under setup_mutex. A transient failure leaves set_up false and the next try for later. */
static void attempt_setup(void)
{
    const char *value, *why;
    char text[sizeof state_text];
    atomic_store(&attempted, true);
    if (jb__disk_cache_disabled(&value)) {
        set_state("off (JITBRIDGE_DISK_CACHE=%s)", value);
    } else if (!jb__disk_folder(&why)[0]) {
        jb__disk_turn_off("off: %s", why);
    } else {
        attach_result result = attach(text, sizeof text);
        if (result == NOT_NOW) {
            uint64_t wait_ms = jb__backoff_failed(&setup_backoff);
            set_state("off for now: %s; a passing failure, tried again at a build after %llu ms",
                      text, (unsigned long long)wait_ms);
            return;
        }
        if (result == REFUSED) {
            jb__disk_turn_off("off: %s", text);
        } else {
            atomic_store(&usable, true);
            atomic_store(&storing, true);
            set_state_on();
        }
    }
    atomic_store(&set_up, true);
}

bool jb__disk_cache_usable(void)
{
    if (atomic_load(&set_up))
        return atomic_load(&usable);
    if (!jb__backoff_due(&setup_backoff))
        return false;
    jb__warn_hold(); /* setup's warning reaches the callback after the lock */
    pthread_mutex_lock(&setup_mutex);
    if (!atomic_load(&set_up) && jb__backoff_due(&setup_backoff))
        attempt_setup();
    pthread_mutex_unlock(&setup_mutex);
    jb__warn_release();
    return atomic_load(&usable);
}

int jb__disk_dir_fd(void)
{
    return jb__disk_cache_usable() ? dir_fd : -1;
}

int jb__disk_tmp_fd(void)
{
    if (!jb__disk_cache_usable() || !atomic_load(&storing) || paused_for_full_disk())
        return -1;
    int sweep = atomic_exchange(&sweep_fd, -1); /* one caller sweeps; others need not wait */
    if (sweep >= 0)
        sweep_stale_temporaries(sweep);
    return atomic_load(&tmp_fd);
}

bool jb__disk_folder_is_ours(void)
{
    return !atomic_load(&shared);
}

/* The folder or its tmp/ was removed under a long-running process (a cache cleaner): set up
 * again. The old handles stay open, as another thread may be using them: one per removal. */
bool jb__disk_reattach(void)
{
    if (!jb__disk_cache_usable())
        return false;
    jb__warn_hold(); /* a warning of turn_off reaches the callback after the lock, not under it */
    pthread_mutex_lock(&setup_mutex);
    struct stat st;
    int dir = atomic_load(&dir_fd);
    bool attached = true;
    if (fstat(dir, &st) == 0 && st.st_nlink == 0) {
        char text[sizeof state_text];
        attach_result result = attach(text, sizeof text);
        if (result == REFUSED)
            jb__disk_turn_off("off: %s", text);
        else if (result == ATTACHED)
            set_state_on();
        attached = result == ATTACHED; /* NOT_NOW: this store is skipped, the next tries */
    } else if (!atomic_load(&shared)) {
        int tmp = open_tmp(dir);
        atomic_store(&tmp_fd, tmp >= 0 ? tmp : dir);
    }
    pthread_mutex_unlock(&setup_mutex);
    jb__warn_release();
    return attached;
}

int jb__disk_open_for_maintenance(int *out, bool *ours)
{
    *out = -1;
    *ours = true;
    const char *why;
    const char *folder = jb__disk_folder(&why);
    JB_RETURN_IF(!folder[0], JB_ERR_UNSUPPORTED, "%s", why);
    if (atomic_load(&set_up) && atomic_load(&usable)) {
        *out = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
        JB_RETURN_IF(*out < 0, JB_ERR_SYSTEM, "cannot duplicate a handle: %s", strerror(errno));
        *ours = !atomic_load(&shared);
        return JB_OK;
    }
    char refused[sizeof state_text];
    bool missing;
    int err;
    *out = open_trusted(folder, false, &missing, refused, sizeof refused, &err);
    JB_RETURN_IF(*out < 0 && !missing, JB_ERR_SYSTEM, "%s", refused);
    if (*out < 0)
        return JB_OK;
    int kind = marked(*out);
    if (kind == 0)
        kind = holds_only_ours(*out, true); /* it would be marked at the first build */
    if (kind < 0) {
        err = errno;
        close(*out);
        *out = -1;
        return jb__fail(JB_ERR_SYSTEM, "cannot look into the cache folder %s: %s", folder,
                        strerror(err));
    }
    *ours = kind == 1;
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
    if (atomic_load(&attempted)) {
        /* A copy of this thread's: another thread may turn the cache off meanwhile. */
        pthread_mutex_lock(&state_mutex);
        memcpy(preview, state_text, sizeof preview);
        pthread_mutex_unlock(&state_mutex);
        return preview;
    }
    /* Not used yet in this process: say what would happen, creating nothing. */
    const char *value, *why;
    const char *folder = jb__disk_folder(&why);
    char refused[sizeof state_text];
    bool missing;
    int fd = -1, err;
    if (jb__disk_cache_disabled(&value))
        say(preview, sizeof preview, "off (JITBRIDGE_DISK_CACHE=%s)", value);
    else if (!folder[0])
        say(preview, sizeof preview, "off: %s", why);
    else if ((fd = open_trusted(folder, false, &missing, refused, sizeof refused, &err)) >= 0)
        say(preview, sizeof preview, "%s",
            marked(fd) == 0 && holds_only_ours(fd, true) == 0 ? shared_text : "on");
    else if (missing)
        say(preview, sizeof preview, "on (the folder is created, 0700, at the first compile)");
    else if (err && jb__errno_is_transient(err))
        say(preview, sizeof preview, "off for now: %s; a passing failure", refused);
    else
        say(preview, sizeof preview, "off: %s", refused);
    if (fd >= 0)
        close(fd);
    return preview;
}
