/*
 * The disk cache of compiled code (shared objects, cubins, code objects), so that a new process
 * skips the compiler. It is an optimisation only: every failure is a miss, and a folder that
 * cannot be trusted or written turns it off with one warning, never an error.
 *
 * - An entry's file name is a hash of the inputs only (format version, backend, full target,
 *   compiler identity and options, source), never of compiler output. The whole key is also
 *   stored in the entry and compared on read, so a hash collision is a miss.
 * - One file per entry: magic, format version, key length, payload length, checksum, key,
 *   payload. Written to the cache's own tmp/, fsynced, then renamed into place; no lock files
 *   (a killed process would leave one behind and hang every later run).
 * - The folder ($JITBRIDGE_CACHE_DIR, else $XDG_CACHE_HOME/jitbridge, else ~/.cache/jitbridge)
 *   is created 0700; one owned by someone else, or writable by group or others, is refused:
 *   loading a planted shared object would run its code.
 */
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FORMAT_VERSION 1u
#define ENTRY_SUFFIX ".jbc"
#define MAX_ENTRY_BYTES (512u << 20)
#define STALE_TMP_SECONDS 3600

static const char magic[8] = {'J', 'B', 'C', 'A', 'C', 'H', 'E', '\0'};

typedef struct entry_header {
    char magic[8];
    uint32_t version;
    uint32_t key_bytes;
    uint64_t payload_bytes;
    uint64_t checksum; /* of the key and the payload */
} entry_header;

static char cache_dir[4096];
static char state_text[512] = "not yet used";
static atomic_bool usable;
static atomic_bool warned;
static pthread_once_t setup_once = PTHREAD_ONCE_INIT;
static atomic_uint_fast64_t counter_disk_hits, counter_disk_misses, counter_disk_rejected;

/* One warning per process, then memory-only. */
static void turn_off(const char *fmt, const char *detail)
{
    atomic_store(&usable, false);
    snprintf(state_text, sizeof state_text, fmt, detail);
    if (!atomic_exchange(&warned, true))
        jb__warn("%s; compiled code is kept in memory only", state_text);
}

static bool make_dir_0700(const char *path)
{
    return mkdir(path, 0700) == 0 || errno == EEXIST;
}

/* Creates each missing parent of `path` (0700), then `path` itself. */
static bool make_dirs(const char *path)
{
    char partial[sizeof cache_dir];
    snprintf(partial, sizeof partial, "%s", path);
    for (char *p = partial + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (!make_dir_0700(partial))
            return false;
        *p = '/';
    }
    return make_dir_0700(partial);
}

static void sweep_stale_temporaries(void)
{
    char tmp[sizeof cache_dir + 8];
    snprintf(tmp, sizeof tmp, "%s/tmp", cache_dir);
    DIR *dir = opendir(tmp);
    if (!dir)
        return;
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(dir))) {
        struct stat st;
        if (e->d_name[0] == '.' || fstatat(dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        /* Old enough that no live writer can still own it. */
        if (now - st.st_mtime > STALE_TMP_SECONDS)
            unlinkat(dirfd(dir), e->d_name, 0);
    }
    closedir(dir);
}

/* Refuses a folder that another user could have filled. Returns a reason, or NULL. */
static const char *untrusted(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return "cannot be examined";
    if (!S_ISDIR(st.st_mode))
        return "is not a directory (or is a symbolic link)";
    if (st.st_uid != geteuid())
        return "is owned by another user";
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return "is writable by group or others";
    return NULL;
}

static void setup(void)
{
    const char *off = getenv("JITBRIDGE_DISK_CACHE");
    if (off && strcmp(off, "0") == 0) {
        snprintf(state_text, sizeof state_text, "off (JITBRIDGE_DISK_CACHE=0)");
        return;
    }
    const char *dir = getenv("JITBRIDGE_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    int n;
    if (dir && *dir)
        n = snprintf(cache_dir, sizeof cache_dir, "%s", dir);
    else if (xdg && *xdg)
        n = snprintf(cache_dir, sizeof cache_dir, "%s/jitbridge", xdg);
    else if (home && *home)
        n = snprintf(cache_dir, sizeof cache_dir, "%s/.cache/jitbridge", home);
    else {
        turn_off("no cache folder: set JITBRIDGE_CACHE_DIR or HOME%s", "");
        return;
    }
    if (n < 0 || (size_t)n >= sizeof cache_dir - 64) {
        turn_off("the cache folder path is too long%s", "");
        return;
    }
    if (!make_dirs(cache_dir)) {
        turn_off("cannot create the cache folder %s", cache_dir);
        return;
    }
    const char *why = untrusted(cache_dir);
    if (why) {
        char detail[sizeof cache_dir + 128];
        snprintf(detail, sizeof detail, "%s %s", cache_dir, why);
        turn_off("refusing the cache folder %s", detail);
        return;
    }
    char tmp[sizeof cache_dir + 8];
    snprintf(tmp, sizeof tmp, "%s/tmp", cache_dir);
    if (!make_dir_0700(tmp) || untrusted(tmp)) {
        turn_off("cannot use %s", tmp);
        return;
    }
    sweep_stale_temporaries();
    snprintf(state_text, sizeof state_text, "on");
    atomic_store(&usable, true);
}

bool jb__disk_cache_usable(void)
{
    pthread_once(&setup_once, setup);
    return atomic_load(&usable);
}

/* ---- keys ---- */

int jb__disk_key(jb_device *dev, const char *source, jb_disk_key *out)
{
    char identity[1024];
    JB_FORWARD_IF_ERROR(dev->backend->compiler_identity(dev, identity, sizeof identity));
    jb_strbuf sb = {0};
    jb__strbuf_appendf(&sb, "jitbridge disk cache format %u\nbackend %s\ntarget %s\ncompiler %s\n",
                       FORMAT_VERSION, dev->backend->name, dev->arch, identity);
    jb__strbuf_append(&sb, "source\n");
    jb__strbuf_append(&sb, source);
    JB_RETURN_IF(sb.failed, JB_ERR_OUT_OF_MEMORY, "no memory for a disk cache key");
    out->text = sb.data;
    out->bytes = sb.len;
    uint64_t a = jb__fnv1a64(sb.data, sb.len, JB_FNV_SEED);
    uint64_t b = jb__fnv1a64(sb.data, sb.len, 0x84222325cbf29ce4ULL);
    snprintf(out->file, sizeof out->file, "%016" PRIx64 "%016" PRIx64 ENTRY_SUFFIX, a, b);
    return JB_OK;
}

void jb__disk_key_free(jb_disk_key *key)
{
    free(key->text);
    key->text = NULL;
}

static uint64_t entry_checksum(const void *key, size_t key_bytes, const void *payload,
                               size_t payload_bytes)
{
    return jb__fnv1a64(payload, payload_bytes, jb__fnv1a64(key, key_bytes, JB_FNV_SEED));
}

/* ---- reading ---- */

#define ENTRY_PATH_BYTES (sizeof cache_dir + 80)

static void entry_path(char *out, const char *file)
{
    snprintf(out, ENTRY_PATH_BYTES, "%s/%s", cache_dir, file);
}

static int open_entry(const char *file)
{
    char path[ENTRY_PATH_BYTES];
    entry_path(path, file);
    return open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
}

/* Parses and checks one entry read into memory; returns the payload's offset, or 0. `key` may
 * be NULL to accept any key (verification of the whole folder). */
size_t jb__disk_entry_check(const unsigned char *data, size_t size, const jb_disk_key *key)
{
    entry_header h;
    if (size < sizeof h)
        return 0;
    memcpy(&h, data, sizeof h);
    if (memcmp(h.magic, magic, sizeof magic) != 0 || h.version != FORMAT_VERSION)
        return 0;
    if (h.key_bytes > size - sizeof h || h.payload_bytes != size - sizeof h - h.key_bytes)
        return 0;
    const unsigned char *key_text = data + sizeof h;
    if (key && (h.key_bytes != key->bytes || memcmp(key_text, key->text, key->bytes) != 0))
        return 0;
    size_t payload_at = sizeof h + h.key_bytes;
    if (entry_checksum(key_text, h.key_bytes, data + payload_at, (size_t)h.payload_bytes) !=
        h.checksum)
        return 0;
    return payload_at;
}

/* Reads a whole entry file, at most MAX_ENTRY_BYTES; NULL on any failure. */
static unsigned char *read_entry(int fd, size_t *out_size)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        (uint64_t)st.st_size > MAX_ENTRY_BYTES)
        return NULL;
    size_t size = (size_t)st.st_size;
    unsigned char *data = malloc(size);
    if (data && jb__read_up_to(fd, data, size) != size) {
        free(data);
        data = NULL;
    }
    *out_size = size;
    return data;
}

bool jb__disk_load(const jb_disk_key *key, jb_blob *out)
{
    if (!jb__disk_cache_usable())
        return false;
    int fd = open_entry(key->file);
    if (fd < 0) {
        atomic_fetch_add(&counter_disk_misses, 1);
        return false;
    }
    size_t size = 0;
    unsigned char *data = read_entry(fd, &size);
    close(fd);
    size_t payload_at = data ? jb__disk_entry_check(data, size, key) : 0;
    if (!payload_at) {
        free(data);
        atomic_fetch_add(&counter_disk_rejected, 1);
        return false; /* a miss; the rebuilt entry replaces it */
    }
    memmove(data, data + payload_at, size - payload_at);
    out->data = data;
    out->size = size - payload_at;
    return true;
}

void jb__disk_accept(void)
{
    atomic_fetch_add(&counter_disk_hits, 1);
}

void jb__disk_reject(const jb_disk_key *key)
{
    char path[ENTRY_PATH_BYTES];
    entry_path(path, key->file);
    unlink(path);
    atomic_fetch_add(&counter_disk_rejected, 1);
}

/* ---- writing ---- */

static bool write_all(int fd, const void *buf, size_t bytes)
{
    /* Test hook: simulate a full disk. */
    const char *fault = getenv("JITBRIDGE_DISK_CACHE_FAULT");
    if (fault && strcmp(fault, "enospc") == 0) {
        errno = ENOSPC;
        return false;
    }
    return jb__write_all(fd, buf, bytes);
}

void jb__disk_store(const jb_disk_key *key, const jb_blob *code)
{
    if (!jb__disk_cache_usable())
        return;
    char tmp[sizeof cache_dir + 128], final_path[ENTRY_PATH_BYTES];
    static atomic_uint_fast64_t serial;
    snprintf(tmp, sizeof tmp, "%s/tmp/%s.%ld.%llu.tmp", cache_dir, key->file, (long)getpid(),
             (unsigned long long)atomic_fetch_add(&serial, 1));
    entry_path(final_path, key->file);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        turn_off("cannot write to the cache folder (%s)", strerror(errno));
        return;
    }
    entry_header h;
    memcpy(h.magic, magic, sizeof magic);
    h.version = FORMAT_VERSION;
    h.key_bytes = (uint32_t)key->bytes;
    h.payload_bytes = code->size;
    h.checksum = entry_checksum(key->text, key->bytes, code->data, code->size);
    bool ok = write_all(fd, &h, sizeof h) && write_all(fd, key->text, key->bytes) &&
              write_all(fd, code->data, code->size) && fsync(fd) == 0;
    int err = errno;
    ok = close(fd) == 0 && ok;
    if (ok && rename(tmp, final_path) != 0) {
        ok = false;
        err = errno;
    }
    if (!ok) {
        unlink(tmp);
        turn_off("writing a cache entry failed (%s)", strerror(err));
    }
}

/* ---- the public view: jitbridge cache ---- */

jb_status jb_disk_cache_dir(const char **out)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_disk_cache_dir: out is NULL");
    jb__disk_cache_usable();
    *out = cache_dir;
    return JB_OK;
}

const char *jb_disk_cache_state(void)
{
    jb__disk_cache_usable();
    return state_text;
}

typedef struct entry_info {
    char name[64];
    uint64_t bytes;
    time_t mtime;
} entry_info;

/* Lists the folder's entries (not tmp/) and their total bytes; the caller frees *out. */
static int list_entries(entry_info **out, size_t *count, uint64_t *total)
{
    jb__disk_cache_usable();
    *out = NULL;
    *count = 0;
    *total = 0;
    JB_RETURN_IF(!cache_dir[0], JB_ERR_UNSUPPORTED, "the disk cache is %s", state_text);
    DIR *dir = opendir(cache_dir);
    JB_RETURN_IF(!dir, JB_ERR_SYSTEM, "cannot open %s: %s", cache_dir, strerror(errno));
    size_t capacity = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        size_t len = strlen(e->d_name);
        struct stat st;
        if (len >= sizeof((entry_info *)0)->name || len <= strlen(ENTRY_SUFFIX) ||
            strcmp(e->d_name + len - strlen(ENTRY_SUFFIX), ENTRY_SUFFIX) != 0 ||
            fstatat(dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (*count == capacity) {
            capacity = capacity ? capacity * 2 : 64;
            entry_info *grown = realloc(*out, capacity * sizeof *grown);
            if (!grown) {
                closedir(dir);
                free(*out);
                *out = NULL;
                return jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory to list the cache");
            }
            *out = grown;
        }
        entry_info *info = &(*out)[(*count)++];
        memcpy(info->name, e->d_name, len + 1); /* len was checked against the size above */
        info->bytes = (uint64_t)st.st_size;
        info->mtime = st.st_mtime;
        *total += info->bytes;
    }
    closedir(dir);
    return JB_OK;
}

jb_status jb_disk_cache_stats(uint64_t *entries, uint64_t *bytes)
{
    JB_RETURN_IF(!entries || !bytes, JB_ERR_INVALID_ARGUMENT, "jb_disk_cache_stats: NULL out");
    entry_info *list;
    size_t count;
    JB_FORWARD_IF_ERROR(list_entries(&list, &count, bytes));
    *entries = count;
    free(list);
    return JB_OK;
}

static int oldest_first(const void *a, const void *b)
{
    const entry_info *x = a, *y = b;
    return (x->mtime > y->mtime) - (x->mtime < y->mtime);
}

jb_status jb_disk_cache_prune(uint64_t max_bytes, uint64_t *removed)
{
    JB_RETURN_IF(!removed, JB_ERR_INVALID_ARGUMENT, "jb_disk_cache_prune: removed is NULL");
    entry_info *list;
    size_t count;
    uint64_t total;
    JB_FORWARD_IF_ERROR(list_entries(&list, &count, &total));
    qsort(list, count, sizeof *list, oldest_first);
    *removed = 0;
    char path[ENTRY_PATH_BYTES];
    for (size_t i = 0; i < count && total > max_bytes; i++) {
        entry_path(path, list[i].name);
        if (unlink(path) == 0) {
            total -= list[i].bytes;
            (*removed)++;
        }
    }
    free(list);
    return JB_OK;
}

jb_status jb_disk_cache_verify(uint64_t *valid, uint64_t *invalid)
{
    JB_RETURN_IF(!valid || !invalid, JB_ERR_INVALID_ARGUMENT, "jb_disk_cache_verify: NULL out");
    entry_info *list;
    size_t count;
    uint64_t total;
    JB_FORWARD_IF_ERROR(list_entries(&list, &count, &total));
    *valid = *invalid = 0;
    for (size_t i = 0; i < count; i++) {
        int fd = open_entry(list[i].name);
        size_t size = 0;
        unsigned char *data = fd >= 0 ? read_entry(fd, &size) : NULL;
        if (fd >= 0)
            close(fd);
        if (data && jb__disk_entry_check(data, size, NULL))
            (*valid)++;
        else
            (*invalid)++;
        free(data);
    }
    free(list);
    return JB_OK;
}

void jb__disk_counters(uint64_t *hits, uint64_t *misses, uint64_t *rejected)
{
    *hits = atomic_load(&counter_disk_hits);
    *misses = atomic_load(&counter_disk_misses);
    *rejected = atomic_load(&counter_disk_rejected);
}

void jb__disk_counters_reset(void)
{
    atomic_store(&counter_disk_hits, 0);
    atomic_store(&counter_disk_misses, 0);
    atomic_store(&counter_disk_rejected, 0);
}
