/*
 * The disk cache of compiled code (shared objects, cubins, code objects), so that a new process
 * skips the compiler. It is an optimisation only: every failure is a miss, and a folder that
 * cannot be trusted turns it off, one that cannot be written stops new entries (those it has
 * are still served), a full one pauses them (disk_dir.c): each with one warning, never an error.
 *
 * - An entry's file name is a hash of its content key (cache_key.c), never of compiler output.
 *   The whole key is also stored in the entry and compared on read, so a collision is a miss.
 * - One file per entry: magic, format version, key length, payload length, checksum, key,
 *   payload. Written to the cache's own tmp/, fsynced (not a remote hit's copy), then renamed
 *   into place; no lock files (a killed process would leave one behind and hang every later
 *   run).
 * - The folder and the trust in it are disk_dir.c's; every operation here goes through its
 *   handles (openat/renameat/unlinkat). Each entry is checked on its own open handle before a
 *   byte is read (regular, ours, not writable by others, one link, at most
 *   JB_DISK_ENTRY_MAX_BYTES).
 *   Opens never block: a FIFO where an entry belongs is removed, not waited on.
 * - Temporary names are random (getrandom), retried on a clash: PIDs repeat across containers.
 * - Only in a folder marked as the cache's own (disk_dir.c) is anything removed: junk at an
 *   entry's name, an entry the loader refuses. In a shared folder an entry is replaced only by
 *   a newer copy over a file of the cache's own format, and junk is stepped around.
 * - A transient failure (out of descriptors or memory, a network disk's EIO) while opening or
 *   reading an entry is a miss that evicts nothing; while storing, that store is skipped.
 */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FORMAT_VERSION 1u

static const char magic[8] = {'J', 'B', 'C', 'A', 'C', 'H', 'E', '\0'};

typedef struct entry_header {
    char magic[8];
    uint32_t version;
    uint32_t key_bytes;
    uint64_t payload_bytes;
    uint64_t checksum; /* of the key and the payload */
} entry_header;

static atomic_uint_fast64_t counter_disk_hits, counter_disk_misses, counter_disk_rejected;

static uint64_t entry_checksum(const void *key, size_t key_bytes, const void *payload,
                               size_t payload_bytes)
{
    return jb__fnv1a64(payload, payload_bytes, jb__fnv1a64(key, key_bytes, JB_FNV_SEED));
}

/* ---- reading ---- */

const char *jb__disk_entry_problem(const struct stat *st)
{
    if (S_ISDIR(st->st_mode))
        return "is a directory";
    if (S_ISFIFO(st->st_mode))
        return "is a FIFO";
    if (!S_ISREG(st->st_mode))
        return "is not a regular file";
    if (st->st_uid != geteuid())
        return "is owned by another user";
    if (st->st_mode & (S_IWGRP | S_IWOTH))
        return "is writable by group or others";
    if (st->st_nlink != 1)
        return "has more than one link";
    if (st->st_size <= 0)
        return "is empty";
    if ((uint64_t)st->st_size > JB_DISK_ENTRY_MAX_BYTES)
        return "is larger than the 64 MiB entry cap";
    return NULL;
}

int jb__disk_open_entry(int dir, const char *name, struct stat *st, const char **problem)
{
    *problem = NULL;
    int fd = openat(dir, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        if (errno == ELOOP)
            *problem = "is a symbolic link";
        else if (errno != ENOENT && !jb__errno_is_transient(errno))
            *problem = "cannot be opened";
        return -1;
    }
    JB_TEST_POINT(JB_TEST_ENTRY_OPENED, name);
    if (fstat(fd, st) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        if (!jb__errno_is_transient(err))
            *problem = "cannot be examined";
        return -1;
    }
    *problem = jb__disk_entry_problem(st);
    if (*problem) {
        close(fd);
        return -1;
    }
    return fd;
}

int jb__disk_remove(int dir, const char *name)
{
    if (unlinkat(dir, name, 0) == 0 || errno == ENOENT)
        return 0;
    return errno == EISDIR ? unlinkat(dir, name, AT_REMOVEDIR) : -1;
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

const unsigned char *jb__disk_entry_key(const unsigned char *data, size_t payload_at,
                                        size_t *key_bytes)
{
    *key_bytes = payload_at - sizeof(entry_header);
    return data + sizeof(entry_header);
}

unsigned char *jb__disk_read_entry(int fd, const struct stat *st, size_t *out_size)
{
    size_t size = (size_t)st->st_size;
    unsigned char *data = malloc(size);
    errno = data ? 0 : ENOMEM;
    if (data && jb__read_up_to(fd, data, size) != size) {
        free(data);
        data = NULL;
        if (errno == 0)
            errno = EBADMSG; /* shorter than its size said: not a transient failure */
    }
    *out_size = size;
    return data;
}

bool jb__disk_load(const jb_disk_key *key, jb_blob *out)
{
    int dir = jb__disk_dir_fd();
    if (dir < 0)
        return false;
    struct stat st;
    const char *problem;
    int fd = jb__disk_open_entry(dir, key->file, &st, &problem);
    size_t size = 0;
    unsigned char *data = NULL;
    bool not_now = fd < 0 && !problem; /* missing, or a transient failure: nothing evicted */
    if (fd >= 0) {
        data = jb__disk_read_entry(fd, &st, &size);
        not_now = !data && jb__errno_is_transient(errno);
        close(fd);
    }
    if (not_now) {
        atomic_fetch_add(&counter_disk_misses, 1);
        return false;
    }
    size_t payload_at = data ? jb__disk_entry_check(data, size, key) : 0;
    if (!payload_at) {
        free(data);
        /* Not a file we may read: out of the way (in our own folder), so the rebuilt entry can
         * land. */
        if (problem && jb__disk_folder_is_ours())
            jb__disk_remove(dir, key->file);
        atomic_fetch_add(&counter_disk_rejected, 1);
        char why[256];
        snprintf(why, sizeof why, "cache entry %s %s", key->file,
                 problem ? problem : "failed its checks (magic, version, key, length or checksum)");
        jb__event_raise(JB_CACHE_EVENT_ENTRY_REJECTED, 0, JB_OK, why);
        return false; /* a miss; the rebuilt entry replaces it */
    }
    memmove(data, data + payload_at, size - payload_at);
    out->data = data;
    out->size = size - payload_at;
    return true;
}

bool jb__disk_record_load(const jb_disk_key *key, jb_blob *out)
{
    int dir = jb__disk_dir_fd();
    struct stat st;
    const char *problem;
    int fd = dir >= 0 ? jb__disk_open_entry(dir, key->file, &st, &problem) : -1;
    if (fd < 0)
        return false;
    size_t size = 0;
    unsigned char *data = jb__disk_read_entry(fd, &st, &size);
    close(fd);
    size_t payload_at = data ? jb__disk_entry_check(data, size, key) : 0;
    if (!payload_at) {
        free(data);
        return false;
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

/* A lasting refusal (JB_ERR_LOAD; module.c counts no other), yet nothing is removed: the
 * compile that follows stores its entry over this one; if that compile fails too, the entry
 * stays for the next process to try. */
void jb__disk_reject(const jb_disk_key *key)
{
    (void)key;
    atomic_fetch_add(&counter_disk_rejected, 1);
}

/* ---- writing ---- */

static bool write_all(int fd, const void *buf, size_t bytes)
{
    /* Test hook: simulate a full disk, or a disk that lasting fails. */
    const char *fault = secure_getenv("JITBRIDGE_DISK_CACHE_FAULT");
    if (fault && (strcmp(fault, "enospc") == 0 || strcmp(fault, "erofs") == 0)) {
        errno = fault[1] == 'n' ? ENOSPC : EROFS;
        return false;
    }
    return jb__write_all(fd, buf, bytes);
}

/* Whether what sits at `file` may be replaced in a shared folder: nothing, or a regular file
 * of the cache's own format (its magic). */
static bool replaceable(int dir, const char *file)
{
    int fd = openat(dir, file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return errno == ENOENT;
    struct stat st;
    char head[sizeof magic];
    bool ours = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
                jb__read_up_to(fd, head, sizeof head) == sizeof head &&
                memcmp(head, magic, sizeof magic) == 0;
    close(fd);
    return ours;
}

/* Moves the written temporary into place. Something that is not an entry at that name (a
 * directory) is removed in our own folder, or else stepped around: true unless the disk itself
 * failed. */
static bool publish(int tmp, const char *name, int dir, const char *file)
{
    bool ours = jb__disk_folder_is_ours();
    if (ours || replaceable(dir, file)) {
        if (renameat(tmp, name, dir, file) == 0)
            return true;
        if (errno != EISDIR && errno != ENOTEMPTY && errno != EEXIST && errno != ENOTDIR)
            return false;
        if (ours && jb__disk_remove(dir, file) == 0 && renameat(tmp, name, dir, file) == 0)
            return true;
    }
    unlinkat(tmp, name, 0);
    return true;
}

/* Test hook (JITBRIDGE_DISK_CACHE_FAULT=remove-tmp): a cache cleaner removes tmp/, with the
 * written temporary, between the write and the rename; once per process. */
static void fault_remove_tmp(int dir, int tmp, const char *name)
{
    static atomic_bool fired;
    const char *fault = secure_getenv("JITBRIDGE_DISK_CACHE_FAULT");
    if (fault && strcmp(fault, "remove-tmp") == 0 && !atomic_exchange(&fired, true)) {
        unlinkat(tmp, name, 0);
        unlinkat(dir, "tmp", AT_REMOVEDIR);
    }
}

/* Writes and publishes one entry (fsynced before the rename when `durable`): 0, or the failing
 * step's errno with *what saying which. */
static int write_entry(int dir, int tmp, const jb_disk_key *key, const jb_blob *code,
                       bool durable, const char **what)
{
    char name[64];
    int fd = jb__disk_create_temporary(tmp, name, sizeof name);
    if (fd < 0) {
        *what = "cannot write to the cache folder (%s)";
        return errno;
    }
    entry_header h;
    memcpy(h.magic, magic, sizeof magic);
    h.version = FORMAT_VERSION;
    h.key_bytes = (uint32_t)key->bytes;
    h.payload_bytes = code->size;
    h.checksum = entry_checksum(key->text, key->bytes, code->data, code->size);
    bool ok = write_all(fd, &h, sizeof h) && write_all(fd, key->text, key->bytes) &&
              write_all(fd, code->data, code->size) && (!durable || fsync(fd) == 0);
    int err = errno;
    ok = close(fd) == 0 && ok;
    if (ok)
        fault_remove_tmp(dir, tmp, name);
    if (ok && !publish(tmp, name, dir, key->file)) {
        ok = false;
        err = errno;
    }
    if (ok)
        return 0;
    unlinkat(tmp, name, 0);
    *what = "writing a cache entry failed (%s)";
    return err ? err : EIO;
}

static bool store_entry(const jb_disk_key *key, const jb_blob *code, bool durable)
{
    int dir = jb__disk_dir_fd(), tmp = jb__disk_tmp_fd();
    size_t bytes;
    if (dir < 0 || tmp < 0 || !jb__add_size(code->size, key->bytes, &bytes) ||
        !jb__add_size(bytes, sizeof(entry_header), &bytes) || bytes > JB_DISK_ENTRY_MAX_BYTES)
        return false; /* the cap also keeps the key's length within its 32-bit field */
    const char *what;
    int err = write_entry(dir, tmp, key, code, durable, &what);
    /* The folder or its tmp/ was removed (a cache cleaner) before the temporary was made or
     * before it was renamed into place: once more, in the folder set up again. */
    if (err == ENOENT && jb__disk_reattach())
        err = write_entry(jb__disk_dir_fd(), jb__disk_tmp_fd(), key, code, durable, &what);
    if (err && !jb__errno_is_transient(err)) /* a transient one skips this store only */
        jb__disk_stop_storing(what, err);
    else if (!err)
        jb__disk_stored();
    return err == 0;
}

bool jb__disk_store(const jb_disk_key *key, const jb_blob *code)
{
    return store_entry(key, code, true);
}

/* The calling thread's copy waiting for jb__disk_store_pending. */
static _Thread_local struct {
    jb_disk_key key;
    jb_blob code;
} later;

void jb__disk_store_later(const jb_disk_key *key, jb_blob *code)
{
    jb__disk_store_pending(); /* one left by a build that ended elsewhere */
    later.key = *key;
    later.key.text = malloc(key->bytes + 1);
    if (later.key.text) {
        memcpy(later.key.text, key->text, key->bytes);
        later.key.text[key->bytes] = '\0';
        later.code = *code;
        *code = (jb_blob){0};
    }
}

void jb__disk_store_pending(void)
{
    if (later.code.data)
        store_entry(&later.key, &later.code, false);
    free(later.code.data);
    free(later.key.text);
    memset(&later, 0, sizeof later);
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
