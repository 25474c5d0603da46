/*
 * Export to and import from the remote tier (jitbridge cache remote export / import): a bundle
 * or the cache folder seeds the store through the same signed store a compile uses
 * (jb__remote_store), and a manifest's kernels are fetched through a checked remote load into
 * the cache folder (jb__disk_store), so that neither writes a value or an entry of its own.
 */
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Stores one entry (its key text, then its payload): JB_OK, or JB_ERR_SYSTEM when the store
 * failed (the breaker has tripped, with its warning). */
static int export_one(jb_remote_transfer *out, const unsigned char *key_text, size_t key_bytes,
                      const unsigned char *payload, size_t payload_bytes)
{
    jb_key_fields fields;
    if (jb__key_fields_parse(key_text, key_bytes, &fields) != JB_OK) {
        out->rejected++; /* not a key of this library's format: no build would ask for it */
        return JB_OK;
    }
    jb__key_fields_free(&fields);
    size_t value_bytes = JB_REMOTE_VALUE_HEADER_BYTES + key_bytes + 2 * JB_SHA256_BYTES +
                         payload_bytes;
    if (value_bytes >= jb__redis_reply_max_bytes()) {
        out->skipped++; /* no load would read it back whole: the store refuses it too */
        return JB_OK;
    }
    jb_disk_key key = {.text = (char *)key_text, .bytes = key_bytes};
    jb__disk_key_name(&key);
    jb_blob code = {(void *)payload, payload_bytes};
    jb__remote_store(&key, &code);
    JB_RETURN_IF(!jb__remote_last_store_stored(), JB_ERR_SYSTEM,
                 "the remote store failed after %llu entries were stored (see the warning)",
                 (unsigned long long)out->stored);
    out->stored++;
    return JB_OK;
}

/* Every entry of the cache folder `dir` (-1: none yet), read and checked as a load would. */
static int export_folder(jb_remote_transfer *out, int dir)
{
    if (dir < 0)
        return JB_OK;
    DIR *d = jb__opendir_at(dir);
    JB_RETURN_IF(!d, JB_ERR_SYSTEM, "cannot list the cache folder: %s", strerror(errno));
    int status = JB_OK;
    struct dirent *e;
    while (status == JB_OK && (e = readdir(d))) {
        if (!jb__disk_is_entry_name(e->d_name))
            continue;
        struct stat st;
        const char *problem;
        int fd = jb__disk_open_entry(dir, e->d_name, &st, &problem);
        size_t size = 0;
        unsigned char *data = fd >= 0 ? jb__disk_read_entry(fd, &st, &size) : NULL;
        if (fd >= 0)
            close(fd);
        size_t payload_at = data ? jb__disk_entry_check(data, size, NULL) : 0, key_bytes = 0;
        const unsigned char *key =
            payload_at ? jb__disk_entry_key(data, payload_at, &key_bytes) : NULL;
        char hex[2 * JB_SHA256_BYTES + 1];
        unsigned char digest[JB_SHA256_BYTES];
        if (key) { /* filed under its own name: never another kernel's code */
            jb__sha256(key, key_bytes, digest);
            jb__hex(digest, JB_SHA256_BYTES, hex);
        }
        if (!key || strncmp(e->d_name, hex, JB_DISK_ENTRY_HEX) != 0)
            out->rejected++;
        else
            status = export_one(out, key, key_bytes, data + payload_at, size - payload_at);
        free(data);
    }
    closedir(d);
    return status;
}

static int export_bundle(jb_remote_transfer *out, const char *path)
{
    jb_bundle *b;
    JB_FORWARD_IF_ERROR(jb__bundle_open(path, "the bundle's path", &b));
    int status = JB_OK;
    for (size_t i = 0; status == JB_OK && i < jb__bundle_count(b); i++) {
        unsigned char *data;
        if (jb__bundle_read_entry(b, i, &data) != JB_OK) { /* warned about by the read */
            out->rejected++;
            continue;
        }
        const jb_bundle_entry *e = jb__bundle_entry(b, i);
        status = export_one(out, data, (size_t)e->key_bytes, data + e->key_bytes,
                            (size_t)e->payload_bytes);
        free(data);
    }
    jb__bundle_free(b);
    return status;
}

jb_status jb_remote_cache_export(jb_remote_transfer *out, const char *bundle)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_remote_cache_export: out is NULL");
    memset(out, 0, sizeof *out);
    JB_FORWARD_IF_ERROR(jb__remote_usable(true));
    if (bundle)
        return export_bundle(out, bundle);
    int dir;
    bool ours; /* only read here: whether the folder is marked does not matter */
    JB_FORWARD_IF_ERROR(jb__disk_open_for_maintenance(&dir, &ours));
    int status = export_folder(out, dir);
    if (dir >= 0)
        close(dir);
    return status;
}

typedef struct import_state {
    jb_remote_transfer *out;
    const char *manifest;
} import_state;

static int import_line(void *ctx, const jb_manifest_line *line)
{
    import_state *x = ctx;
    char hex[2 * JB_SHA256_BYTES + 1], name[64];
    jb__hex(line->digest, JB_SHA256_BYTES, hex);
    snprintf(name, sizeof name, "%.*s%s", JB_DISK_ENTRY_HEX, hex, JB_DISK_ENTRY_SUFFIX);
    struct stat st; /* a kernel named twice, or already here: nothing to ask the store */
    if (fstatat(jb__disk_dir_fd(), name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
        x->out->skipped++;
        return JB_OK;
    }
    uint64_t rejected_before, rejected_after, ignored;
    jb__remote_counters(&ignored, &ignored, &rejected_before, &ignored, &ignored);
    jb_disk_key key;
    jb_blob code;
    if (jb__remote_load_named(line->digest, &key, &code)) {
        jb_key_fields fields;
        bool ours = jb__key_fields_parse(key.text, key.bytes, &fields) == JB_OK;
        if (ours)
            jb__key_fields_free(&fields);
        if (ours)
            jb__disk_store(&key, &code);
        free(code.data);
        jb__disk_key_free(&key);
        if (!ours) {
            x->out->rejected++;
            return JB_OK;
        }
        /* A store that failed says so only through the state: look. */
        JB_RETURN_IF(jb__disk_tmp_fd() < 0 ||
                         fstatat(jb__disk_dir_fd(), name, &st, AT_SYMLINK_NOFOLLOW) != 0,
                     JB_ERR_SYSTEM, "importing from the remote tier stopped after %llu "
                     "entries: the disk cache is %s",
                     (unsigned long long)x->out->stored, jb_disk_cache_state());
        x->out->stored++;
        return JB_OK;
    }
    if (jb__remote_last_load_missed()) {
        x->out->missing++;
        return JB_OK;
    }
    jb__remote_counters(&ignored, &ignored, &rejected_after, &ignored, &ignored);
    JB_RETURN_IF(rejected_after == rejected_before, JB_ERR_SYSTEM,
                 "the remote store failed after %llu entries were imported (see the warning)",
                 (unsigned long long)x->out->stored);
    x->out->rejected++;
    return JB_OK;
}

jb_status jb_remote_cache_import(jb_remote_transfer *out, const char *manifest)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_remote_cache_import: out is NULL");
    memset(out, 0, sizeof *out);
    JB_RETURN_IF(!manifest || !*manifest, JB_ERR_INVALID_ARGUMENT,
                 "jb_remote_cache_import: no manifest");
    JB_FORWARD_IF_ERROR(jb__remote_usable(false));
    JB_RETURN_IF(jb__disk_tmp_fd() < 0, JB_ERR_UNSUPPORTED,
                 "cannot import into the cache folder: the disk cache is %s",
                 jb_disk_cache_state());
    import_state x = {out, manifest};
    return jb__manifest_read(manifest, import_line, &x);
}
