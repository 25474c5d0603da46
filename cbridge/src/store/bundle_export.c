/*
 * Writing a bundle (the format is bundle.c's): the cache folder's entries, or those a manifest
 * names, each read and checked as a load would, streamed into an unnamed file (O_TMPFILE) in
 * the destination's folder. Once whole and fsynced it is linked at the destination in one step
 * where nothing is there yet (a link never replaces); where a bundle is there, it is linked
 * under a temporary name (<32 hex>.export.tmp) and renamed over it. A reader never sees half a
 * bundle, a failed export leaves what was there before, and a process killed while it writes
 * (SIGKILL, the OOM killer) leaves nothing, as the kernel frees the unnamed file. Where there
 * are no unnamed files (before Linux 3.11, some file systems, no /proc to name one through), it
 * is a named temporary file from the start.
 *
 * A kill between the temporary's link (or creation) and the rename leaves the temporary: the
 * next export into that folder removes it. The exporter holds its file's lock (an open file
 * description's, which dies with it) for as long as the file has a temporary name; a sweep
 * removes only temporaries of an export's name that are ours, regular, of one link, and whose
 * lock it takes (never a live export's), checked again at the name just before the unlink.
 *
 * With sources (export --with-sources), each entry's record in the cache folder's sources/
 * (the one of its very key, checked by the kernels' rules) follows the entries, each content
 * once, then their table, which a fingerprint line names (bundle.c has the format).
 */
#include "sources.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_BUILT_LINES 256 /* kinds of entries (backend, target, compiler) named in the header */

typedef struct export_state {
    int out;        /* the temporary file */
    uint64_t at;    /* where the next entry goes */
    jb_bundle_entry *index;
    size_t count, capacity;
    char *built[MAX_BUILT_LINES];
    size_t num_built;
    uint64_t skipped;
    int error;     /* errno of a failed write; 0 */
    bool too_many; /* more entries than a reader opens: nothing written */
    jb_source_record_rules rules; /* NULL: no source records carried */
    jb_source_index records;      /* the folder's, by kernel */
    jb_bundle_source *rows;       /* an exported entry and its record; offsets set once written */
    size_t num_rows, rows_capacity;
    uint64_t records_written; /* records carried (each content once) */
    char sources_line[160]; /* the fingerprint line naming the table, or "" */
} export_state;

static bool write_out(export_state *x, const void *data, size_t bytes)
{
    if (x->error == 0 && !jb__write_all(x->out, data, bytes))
        x->error = errno ? errno : EIO;
    x->at += bytes;
    return x->error == 0;
}

/* Remembers "built <backend> <target> <compiler>" for the header, once per kind. */
static void note_kind(export_state *x, const jb_key_fields *f)
{
    jb_strbuf sb = {0};
    jb__strbuf_appendf(&sb, "built %s %s %s\n", f->backend, f->target, f->compiler);
    for (size_t i = 0; !sb.failed && i < x->num_built; i++)
        if (strcmp(x->built[i], sb.data) == 0) {
            jb__strbuf_free(&sb);
            return;
        }
    if (sb.failed || x->num_built == MAX_BUILT_LINES)
        jb__strbuf_free(&sb);
    else
        x->built[x->num_built++] = sb.data;
}

/* Adds the cache entry `name` (checked as a load checks it); `want` is the manifest's digest
 * it must have, or NULL. A missing or bad entry is counted as skipped. */
static void add_entry(export_state *x, int dir, const char *name, const unsigned char *want)
{
    struct stat st;
    const char *problem;
    int fd = jb__disk_open_entry(dir, name, &st, &problem);
    size_t size = 0;
    unsigned char *data = fd >= 0 ? jb__disk_read_entry(fd, &st, &size) : NULL;
    if (fd >= 0)
        close(fd);
    size_t payload_at = data ? jb__disk_entry_check(data, size, NULL) : 0, key_bytes = 0;
    const unsigned char *key = payload_at ? jb__disk_entry_key(data, payload_at, &key_bytes) : 0;
    jb_key_fields fields;
    jb_bundle_entry e = {0};
    jb_bundle_source row = {0};
    bool ok = key && jb__key_fields_parse(key, key_bytes, &fields) == JB_OK, has_record = false;
    if (ok) {
        note_kind(x, &fields);
        has_record = x->rules && jb__source_index_find(&x->records, &fields, row.record);
        jb__key_fields_free(&fields);
        jb__sha256(key, key_bytes, e.digest);
        char hex[2 * JB_SHA256_BYTES + 1];
        jb__hex(e.digest, JB_SHA256_BYTES, hex);
        /* Filed under its own name, and the manifest's key: never another kernel's code. */
        ok = strncmp(name, hex, JB_DISK_ENTRY_HEX) == 0 &&
             (!want || memcmp(want, e.digest, JB_SHA256_BYTES) == 0);
    }
    if (ok && x->count == jb__bundle_max_entries()) { /* no reader would open the bundle */
        x->too_many = true;
        x->error = EFBIG;
        ok = false;
    }
    if (ok && x->count == x->capacity) {
        size_t capacity = x->capacity ? 2 * x->capacity : 64;
        jb_bundle_entry *grown = realloc(x->index, capacity * sizeof *grown);
        ok = grown != NULL;
        if (grown) {
            x->index = grown;
            x->capacity = capacity;
        } else {
            x->error = ENOMEM;
        }
    }
    if (!ok) {
        x->skipped++;
        free(data);
        return;
    }
    size_t payload_bytes = size - payload_at;
    jb_sha256 h;
    jb__sha256_init(&h);
    jb__sha256_update(&h, key, key_bytes + payload_bytes); /* the key, then the payload */
    jb__sha256_final(&h, e.checksum);
    e.offset = x->at;
    e.key_bytes = key_bytes;
    e.payload_bytes = payload_bytes;
    if (write_out(x, key, key_bytes + payload_bytes))
        x->index[x->count++] = e;
    free(data);
    if (has_record && x->error == 0) {
        memcpy(row.entry, e.digest, JB_SHA256_BYTES);
        if (x->num_rows == x->rows_capacity) {
            size_t capacity = x->rows_capacity ? 2 * x->rows_capacity : 64;
            jb_bundle_source *grown = realloc(x->rows, capacity * sizeof *grown);
            if (grown) {
                x->rows = grown;
                x->rows_capacity = capacity;
            } else {
                x->error = ENOMEM;
            }
        }
        if (x->error == 0)
            x->rows[x->num_rows++] = row;
    }
}

static int by_digest(const void *a, const void *b)
{
    return memcmp(((const jb_bundle_entry *)a)->digest, ((const jb_bundle_entry *)b)->digest,
                  JB_SHA256_BYTES);
}

/* Every entry of the folder `dir` (-1: none yet). */
static int add_all(export_state *x, int dir)
{
    if (dir < 0)
        return JB_OK;
    DIR *d = jb__opendir_at(dir);
    if (!d)
        return jb__fail(JB_ERR_SYSTEM, "cannot list the cache folder: %s", strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) && x->error == 0)
        if (jb__disk_is_entry_name(e->d_name))
            add_entry(x, dir, e->d_name, NULL);
    closedir(d);
    return JB_OK;
}

typedef struct manifest_keys {
    unsigned char (*digests)[JB_SHA256_BYTES];
    size_t count, capacity;
} manifest_keys;

static int collect_key(void *ctx, const jb_manifest_line *line)
{
    manifest_keys *keys = ctx;
    if (keys->count == keys->capacity) {
        size_t capacity = keys->capacity ? 2 * keys->capacity : 64;
        void *grown = realloc(keys->digests, capacity * sizeof *keys->digests);
        JB_RETURN_IF(!grown, JB_ERR_OUT_OF_MEMORY, "no memory for the manifest's keys");
        keys->digests = grown;
        keys->capacity = capacity;
    }
    memcpy(keys->digests[keys->count++], line->digest, JB_SHA256_BYTES);
    return JB_OK;
}

static int by_bytes(const void *a, const void *b)
{
    return memcmp(a, b, JB_SHA256_BYTES);
}

/* The entries a manifest names, each once; those not in the folder are counted as skipped. */
static int add_from_manifest(export_state *x, int dir, const char *manifest)
{
    manifest_keys keys = {0};
    int status = jb__manifest_read(manifest, collect_key, &keys);
    if (status == JB_OK && keys.count)
        qsort(keys.digests, keys.count, sizeof *keys.digests, by_bytes);
    for (size_t i = 0; status == JB_OK && i < keys.count && x->error == 0; i++) {
        if (i && memcmp(keys.digests[i], keys.digests[i - 1], JB_SHA256_BYTES) == 0)
            continue;
        char hex[2 * JB_SHA256_BYTES + 1], name[64];
        jb__hex(keys.digests[i], JB_SHA256_BYTES, hex);
        snprintf(name, sizeof name, "%.*s%s", JB_DISK_ENTRY_HEX, hex, JB_DISK_ENTRY_SUFFIX);
        if (dir >= 0)
            add_entry(x, dir, name, keys.digests[i]);
        else
            x->skipped++;
    }
    free(keys.digests);
    return status;
}

static int by_entry(const void *a, const void *b)
{
    return memcmp(((const jb_bundle_source *)a)->entry, ((const jb_bundle_source *)b)->entry,
                  JB_SHA256_BYTES);
}

/* Each row's record (read and checked again: it is copied as it is now), each content once,
 * then their table; a record that no longer passes is left out, its entry kept. */
static void add_sources(export_state *x)
{
    size_t kept = 0;
    for (size_t i = 0; i < x->num_rows && x->error == 0; i++) {
        jb_bundle_source *row = &x->rows[i];
        const jb_bundle_source *same = NULL;
        for (size_t j = 0; !same && j < kept; j++)
            if (memcmp(x->rows[j].record, row->record, JB_SHA256_BYTES) == 0)
                same = &x->rows[j];
        if (same) {
            row->offset = same->offset;
            row->bytes = same->bytes;
            x->rows[kept++] = *row;
            continue;
        }
        jb_saved_error saved; /* a record gone bad since the index is only left out */
        jb__error_save(&saved);
        jb_source_record r;
        size_t len = 0;
        char *bytes = jb__source_record_read(row->record, x->rules, &r) == JB_OK
                          ? jb__source_record_bytes(&r, row->record, &len)
                          : NULL;
        jb__source_record_free(&r);
        jb__error_restore(&saved);
        if (!bytes)
            continue;
        row->offset = x->at;
        row->bytes = len;
        if (write_out(x, bytes, len)) {
            x->rows[kept++] = *row;
            x->records_written++;
        }
        free(bytes);
    }
    x->num_rows = kept;
    if (!kept || x->error)
        return;
    qsort(x->rows, kept, sizeof *x->rows, by_entry);
    unsigned char *table = malloc(kept * JB_BUNDLE_SOURCE_BYTES), digest[JB_SHA256_BYTES];
    if (!table) {
        x->error = ENOMEM;
        return;
    }
    for (size_t i = 0; i < kept; i++)
        jb__bundle_source_encode(table + i * JB_BUNDLE_SOURCE_BYTES, &x->rows[i]);
    jb__sha256(table, kept * JB_BUNDLE_SOURCE_BYTES, digest);
    char hex[2 * JB_SHA256_BYTES + 1];
    jb__hex(digest, JB_SHA256_BYTES, hex);
    snprintf(x->sources_line, sizeof x->sources_line, JB_BUNDLE_SOURCES_LINE "%llu %zu %s\n",
             (unsigned long long)x->at, kept, hex);
    write_out(x, table, kept * JB_BUNDLE_SOURCE_BYTES);
    free(table);
}

/* The fingerprints, the index and the header, after the entries. */
static void finish(export_state *x)
{
    if (x->count) /* index is NULL when nothing was exported: qsort's pointer must not be */
        qsort(x->index, x->count, sizeof *x->index, by_digest);
    jb_strbuf fp = {0};
    jb__strbuf_appendf(&fp, "jitbridge bundle\nlibrary %s\nabi %d\nkey-format %d\n",
                       JB_VERSION_STRING, JB_ABI_VERSION, JB_KEY_FORMAT);
    for (size_t i = 0; i < x->num_built; i++)
        jb__strbuf_append(&fp, x->built[i]);
    jb__strbuf_append(&fp, x->sources_line);
    unsigned char *index = malloc(x->count ? x->count * JB_BUNDLE_INDEX_BYTES : 1);
    if (fp.failed || !index) {
        x->error = ENOMEM;
        free(index);
        jb__strbuf_free(&fp);
        return;
    }
    for (size_t i = 0; i < x->count; i++)
        jb__bundle_index_encode(index + i * JB_BUNDLE_INDEX_BYTES, &x->index[i]);
    jb_bundle_header h = {.count = x->count,
                          .fingerprints_offset = x->at,
                          .fingerprints_bytes = fp.len,
                          .index_offset = x->at + fp.len,
                          .index_bytes = x->count * JB_BUNDLE_INDEX_BYTES};
    h.file_bytes = h.index_offset + h.index_bytes;
    jb_sha256 sha;
    jb__sha256_init(&sha);
    jb__sha256_update(&sha, fp.data, fp.len);
    jb__sha256_update(&sha, index, (size_t)h.index_bytes);
    jb__sha256_final(&sha, h.tables_digest);
    write_out(x, fp.data, fp.len);
    write_out(x, index, (size_t)h.index_bytes);
    unsigned char header[JB_BUNDLE_HEADER_BYTES];
    jb__bundle_header_encode(header, &h);
    if (x->error == 0 && (pwrite(x->out, header, sizeof header, 0) != (ssize_t)sizeof header ||
                          fsync(x->out) != 0))
        x->error = errno ? errno : EIO;
    free(index);
    jb__strbuf_free(&fp);
}

/* Whether a file an export's temporary name leads to may be what a killed export left. */
static bool may_be_abandoned(const struct stat *st)
{
    return S_ISREG(st->st_mode) && st->st_uid == geteuid() && st->st_nlink == 1;
}

/* Removes the temporaries killed exports left in `folder` (the header comment says which). */
static void sweep_abandoned(int folder)
{
    DIR *d = jb__opendir_at(folder);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        struct stat at_name, held;
        if (!jb__disk_is_temporary_name_as(e->d_name, JB_EXPORT_TEMPORARY_SUFFIX) ||
            fstatat(folder, e->d_name, &at_name, AT_SYMLINK_NOFOLLOW) != 0 ||
            !may_be_abandoned(&at_name))
            continue;
        int fd = openat(folder, e->d_name, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY |
                                               O_CLOEXEC);
        if (fd < 0)
            continue;
        if (fstat(fd, &held) == 0 && jb__same_file(&held, &at_name) && may_be_abandoned(&held) &&
            jb__lock_open_file(fd, F_WRLCK, JB_LOCK_OR_FLOCK) == 0 &&
            fstatat(folder, e->d_name, &at_name, AT_SYMLINK_NOFOLLOW) == 0 &&
            jb__same_file(&held, &at_name))
            unlinkat(folder, e->d_name, 0);
        close(fd); /* lets go of the lock */
    }
    closedir(d);
}

/* A named temporary in `folder` (its name in `name`), locked before a sweep can take it: one
 * that took it between its creation and the lock is told by the name no longer leading to it,
 * and another is made. Where locks do not work, no sweep takes one either. */
static int create_locked_temporary(int folder, char *name, size_t len)
{
    for (int tries = 0; tries < 4; tries++) {
        int fd = jb__disk_create_temporary_as(folder, name, len, JB_EXPORT_TEMPORARY_SUFFIX);
        if (fd < 0)
            return -1;
        int err = jb__lock_open_file(fd, F_WRLCK, JB_LOCK_OR_FLOCK);
        struct stat held, at_name;
        if ((err != 0 && err != EAGAIN) ||
            (err == 0 && fstat(fd, &held) == 0 &&
             fstatat(folder, name, &at_name, AT_SYMLINK_NOFOLLOW) == 0 &&
             jb__same_file(&held, &at_name)))
            return fd;
        close(fd); /* a sweep has it, and removes it */
    }
    errno = EAGAIN;
    return -1;
}

/* The handle of the folder `path` names a file in (-1 with errno when it cannot be opened), and
 * that file's name in it (*base). */
static int open_folder_of(const char *path, const char **base)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    *base = slash ? path + (slash - dir) + 1 : path;
    if (slash == dir)
        slash++; /* "/name": the folder is "/" */
    if (slash)
        *slash = '\0';
    return open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

jb_status jb_disk_cache_export(uint64_t *exported, uint64_t *skipped, const char *path,
                               const char *manifest)
{
    uint64_t records;
    JB_RETURN_IF(!exported || !skipped, JB_ERR_INVALID_ARGUMENT,
                 "jb_disk_cache_export: NULL out");
    return jb__bundle_export(exported, skipped, &records, path, manifest, NULL);
}

int jb__bundle_export(uint64_t *exported, uint64_t *skipped, uint64_t *records,
                      const char *path, const char *manifest, jb_source_record_rules rules)
{
    *exported = *skipped = *records = 0;
    JB_RETURN_IF(!path || !*path, JB_ERR_INVALID_ARGUMENT, "jb_disk_cache_export: no path");
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    JB_RETURN_IF(!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0 ||
                     strlen(path) >= PATH_MAX,
                 JB_ERR_INVALID_ARGUMENT, "jb_disk_cache_export: '%s' does not name a file",
                 path);
    /* A bundle under an export's temporary name would be swept by the next export beside it. */
    JB_RETURN_IF(jb__disk_is_temporary_name_as(base, JB_EXPORT_TEMPORARY_SUFFIX),
                 JB_ERR_INVALID_ARGUMENT,
                 "jb_disk_cache_export: '%s' is named as an export's temporary file (32 hex "
                 "digits, %s), which exports into its folder remove",
                 path, JB_EXPORT_TEMPORARY_SUFFIX);
    int dir;
    bool ours; /* only read here: whether the folder is marked does not matter */
    JB_FORWARD_IF_ERROR(jb__disk_open_for_maintenance(&dir, &ours));
    export_state x = {.at = JB_BUNDLE_HEADER_BYTES, .rules = rules};
    char name[64]; /* the file's temporary name in the folder, once `named` */
    bool named = false, placed = false; /* placed: linked at `path` itself */
    int folder = open_folder_of(path, &base);
    if (folder >= 0)
        sweep_abandoned(folder);
    x.out = folder >= 0 ? jb__disk_create_unnamed(folder) : -1;
    /* Locked before it is ever named: a sweep passes it by. */
    if (x.out >= 0)
        jb__lock_open_file(x.out, F_WRLCK, JB_LOCK_OR_FLOCK);
    /* Whatever kept an unnamed file from being made, a named one works wherever it did before
     * (and where neither can be made, its error is the one reported). */
    if (x.out < 0 && folder >= 0) {
        x.out = create_locked_temporary(folder, name, sizeof name);
        named = x.out >= 0;
    }
    int status = JB_OK;
    if (x.out < 0)
        status = jb__fail(JB_ERR_SYSTEM, "cannot write a bundle beside %s: %s", path,
                          strerror(errno));
    unsigned char zeros[JB_BUNDLE_HEADER_BYTES] = {0};
    if (status == JB_OK && !jb__write_all(x.out, zeros, sizeof zeros))
        x.error = errno ? errno : EIO;
    /* Records are read through the cache folder's own handle (set up if it exists). */
    if (status == JB_OK && rules && dir >= 0 && jb__disk_cache_usable())
        status = jb__source_index_build(&x.records, rules);
    if (status == JB_OK)
        status = manifest ? add_from_manifest(&x, dir, manifest) : add_all(&x, dir);
    if (status == JB_OK && x.error == 0)
        add_sources(&x);
    if (status == JB_OK && x.error == 0)
        finish(&x);
    if (status == JB_OK && x.too_many)
        status = jb__fail(JB_ERR_UNSUPPORTED, "cannot export %s: a bundle holds at most %zu "
                          "entries and the cache has more (export those a manifest names)",
                          path, jb__bundle_max_entries());
    else if (status == JB_OK && x.error)
        status = jb__fail(JB_ERR_SYSTEM, "writing the bundle %s failed: %s", path,
                          strerror(x.error));
    if (status == JB_OK)
        JB_TEST_POINT(JB_TEST_BUNDLE_WRITTEN, path);
    /* Nothing at `path` yet: linked there in one step, which no kill can leave half done. */
    if (status == JB_OK && !named) {
        placed = jb__disk_link_unnamed(folder, x.out, base) == 0;
        if (!placed && errno == EEXIST) /* replaced by a rename, from a temporary name */
            named = jb__disk_name_unnamed(folder, x.out, name, sizeof name,
                                          JB_EXPORT_TEMPORARY_SUFFIX) == 0;
        if (!placed && !named)
            status = jb__fail(JB_ERR_SYSTEM, "cannot put the bundle at %s: %s", path,
                              strerror(errno));
    }
    if (status == JB_OK)
        JB_TEST_POINT(JB_TEST_BUNDLE_LINKED, placed ? base : name);
    if (status == JB_OK && !placed && renameat(folder, name, folder, base) != 0)
        status = jb__fail(JB_ERR_SYSTEM, "cannot put the bundle at %s: %s", path,
                          strerror(errno));
    if (status == JB_OK) {
        fsync(folder); /* the link or rename itself survives a crash */
        *exported = x.count;
        *skipped = x.skipped;
        *records = x.records_written;
    } else if (named) {
        unlinkat(folder, name, 0);
    }
    /* Closed (and its lock let go) only once the temporary name is gone; finish's fsync
     * reported any write error a close could. */
    if (x.out >= 0)
        close(x.out);
    if (folder >= 0)
        close(folder);
    if (dir >= 0)
        close(dir);
    for (size_t i = 0; i < x.num_built; i++)
        free(x.built[i]);
    free(x.index);
    free(x.rows);
    jb__source_index_free(&x.records);
    return status;
}
