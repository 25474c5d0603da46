/*
 * `jitbridge cache`: statistics, pruning and verification of the disk cache. The folder is
 * reached under the library's own trust rules and never created here; every failure is an
 * error that says what could not be done, never a quiet "removed 0 entries". Only what sits at
 * entry names is looked at, and removed only in a folder that is the cache's own (disk_dir.c:
 * marked with CACHEDIR.TAG, or holding nothing else); a shared folder is refused.
 */
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct entry_info {
    char name[64];
    uint64_t bytes;
    time_t mtime;
    bool regular; /* anything else at an entry's name (FIFO, directory, link) is junk */
} entry_info;

/* Lists what sits at entry names in the folder `dir` (not tmp/); the caller frees *out. */
static int list_entries(int dir, entry_info **out, size_t *count, uint64_t *total)
{
    *out = NULL;
    *count = 0;
    *total = 0;
    if (dir < 0)
        return JB_OK; /* no folder yet: nothing in it */
    DIR *d = jb__opendir_at(dir);
    if (!d)
        return jb__fail(JB_ERR_SYSTEM, "cannot list the cache folder: %s", strerror(errno));
    size_t capacity = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        struct stat st;
        if (len >= sizeof((entry_info *)0)->name || !jb__disk_is_entry_name(e->d_name) ||
            fstatat(dir, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (*count == capacity) {
            capacity = capacity ? capacity * 2 : 64; /* the realloc's product is checked */
            entry_info *grown = jb__realloc_array(*out, capacity, sizeof *grown);
            if (!grown) {
                closedir(d);
                free(*out);
                *out = NULL;
                return jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory to list the cache");
            }
            *out = grown;
        }
        entry_info *info = &(*out)[(*count)++];
        memcpy(info->name, e->d_name, len + 1); /* the length was checked */
        info->regular = S_ISREG(st.st_mode);
        info->bytes = info->regular ? (uint64_t)st.st_size : 0;
        info->mtime = st.st_mtime;
        if (!jb__add_u64(*total, info->bytes, total))
            *total = UINT64_MAX; /* more than any disk holds: a prune then removes on */
    }
    closedir(d);
    return JB_OK;
}

/* Opens and lists the folder; `removing` refuses a folder that is not the cache's own. */
static int open_and_list(int *dir, bool removing, entry_info **list, size_t *count,
                         uint64_t *total)
{
    bool ours;
    JB_FORWARD_IF_ERROR(jb__disk_open_for_maintenance(dir, &ours));
    int status = JB_OK;
    if (removing && !ours) {
        const char *why;
        status = jb__fail(JB_ERR_UNSUPPORTED,
                          "the cache folder %s is not marked as the cache's own (no "
                          "CACHEDIR.TAG) and holds other files: nothing was removed; give the "
                          "cache a folder of its own with JITBRIDGE_CACHE_DIR",
                          jb__disk_folder(&why));
        *list = NULL;
    } else {
        status = list_entries(*dir, list, count, total);
    }
    if (status != JB_OK && *dir >= 0)
        close(*dir);
    return status;
}

static void close_and_free(int dir, entry_info *list)
{
    if (dir >= 0)
        close(dir);
    free(list);
}

jb_status jb_disk_cache_stats(uint64_t *entries, uint64_t *bytes)
{
    JB_RETURN_IF(!entries || !bytes, JB_ERR_INVALID_ARGUMENT, "jb_disk_cache_stats: NULL out");
    entry_info *list;
    size_t count;
    int dir;
    JB_FORWARD_IF_ERROR(open_and_list(&dir, false, &list, &count, bytes));
    *entries = 0;
    for (size_t i = 0; i < count; i++)
        *entries += list[i].regular;
    close_and_free(dir, list);
    return JB_OK;
}

/* Junk first (it is never an entry), then the oldest. */
static int removal_order(const void *a, const void *b)
{
    const entry_info *x = a, *y = b;
    if (x->regular != y->regular)
        return x->regular - y->regular;
    return (x->mtime > y->mtime) - (x->mtime < y->mtime);
}

static int removal_failed(const char *name, int err)
{
    const char *why, *folder = jb__disk_folder(&why);
    return jb__fail(JB_ERR_SYSTEM, "cannot remove %s/%s: %s", folder, name, strerror(err));
}

jb_status jb_disk_cache_prune(uint64_t max_bytes, uint64_t *removed)
{
    JB_RETURN_IF(!removed, JB_ERR_INVALID_ARGUMENT, "jb_disk_cache_prune: removed is NULL");
    *removed = 0;
    entry_info *list;
    size_t count;
    uint64_t total;
    int dir;
    JB_FORWARD_IF_ERROR(open_and_list(&dir, true, &list, &count, &total));
    if (count > 0) /* list is NULL when empty: qsort's pointer must not be */
        qsort(list, count, sizeof *list, removal_order);
    int status = JB_OK;
    for (size_t i = 0; i < count && status == JB_OK && (total > max_bytes || !list[i].regular);
         i++) {
        if (jb__disk_remove(dir, list[i].name) != 0) {
            status = removal_failed(list[i].name, errno);
            break;
        }
        total -= list[i].bytes;
        (*removed)++;
    }
    close_and_free(dir, list);
    return status;
}

/* What is wrong with one entry, as the library would see it before loading it, or NULL; or
 * NULL with *err set when it cannot be told now (a transient failure). */
static const char *entry_problem(int dir, const char *name, int *err)
{
    struct stat st;
    const char *problem;
    int fd = jb__disk_open_entry(dir, name, &st, &problem);
    if (fd < 0 && !problem && errno != ENOENT)
        *err = errno;
    if (fd < 0)
        return problem || *err ? problem : "disappeared while being checked";
    size_t size = 0;
    unsigned char *data = jb__disk_read_entry(fd, &st, &size);
    if (!data && jb__errno_is_transient(errno))
        *err = errno;
    close(fd);
    if (*err)
        return NULL;
    if (!data)
        problem = "cannot be read";
    else if (!jb__disk_entry_check(data, size, NULL))
        problem = "is malformed (magic, format version, lengths or checksum)";
    free(data);
    return problem;
}

jb_status jb_disk_cache_check(uint64_t *valid, uint64_t *invalid, int fix,
                              jb_disk_cache_report_fn report, void *user_data)
{
    JB_RETURN_IF(!valid || !invalid, JB_ERR_INVALID_ARGUMENT, "jb_disk_cache_check: NULL out");
    *valid = *invalid = 0;
    entry_info *list;
    size_t count;
    uint64_t total;
    int dir;
    JB_FORWARD_IF_ERROR(open_and_list(&dir, fix, &list, &count, &total));
    int status = JB_OK;
    for (size_t i = 0; i < count && status == JB_OK; i++) {
        int err = 0;
        const char *problem = entry_problem(dir, list[i].name, &err);
        if (err) {
            const char *why, *folder = jb__disk_folder(&why);
            status = jb__fail(JB_ERR_SYSTEM, "cannot check %s/%s now: %s (nothing was removed)",
                              folder, list[i].name, strerror(err));
            break;
        }
        if (!problem) {
            (*valid)++;
            continue;
        }
        (*invalid)++;
        if (report)
            report(user_data, list[i].name, problem);
        if (fix && jb__disk_remove(dir, list[i].name) != 0)
            status = removal_failed(list[i].name, errno);
    }
    close_and_free(dir, list);
    return status;
}

jb_status jb_disk_cache_verify(uint64_t *valid, uint64_t *invalid)
{
    JB_RETURN_IF(!valid || !invalid, JB_ERR_INVALID_ARGUMENT, "jb_disk_cache_verify: NULL out");
    return jb_disk_cache_check(valid, invalid, 0, NULL, NULL);
}
