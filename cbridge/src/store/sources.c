/*
 * Source records and cache entries: which record is an entry's (the same backend, module, entry
 * names and source as its key), and an index of the cache folder's records by that, so that an
 * export finds each entry's record. Records are read and checked by source_record.c with the
 * caller's rules; nothing here compiles, loads or runs what a record holds.
 */
#include "sources.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct jb_source_index_item {
    unsigned char kernel[JB_SHA256_BYTES]; /* what a key shares with its record, hashed */
    unsigned char record[JB_SHA256_BYTES];
};

/* The SHA-256 of what a key and its record share: backend, module, entry names (one space
 * between two), source. */
static void kernel_digest(const char *backend, const char *module, const char *const *entries,
                          size_t num_entries, const char *entry_list, const char *source,
                          size_t source_bytes, unsigned char out[JB_SHA256_BYTES])
{
    jb_sha256 h;
    jb__sha256_init(&h);
    jb__sha256_update(&h, backend, strlen(backend) + 1);
    jb__sha256_update(&h, module, strlen(module) + 1);
    if (entry_list)
        jb__sha256_update(&h, entry_list, strlen(entry_list));
    for (size_t i = 0; !entry_list && i < num_entries; i++) {
        if (i)
            jb__sha256_update(&h, " ", 1);
        jb__sha256_update(&h, entries[i], strlen(entries[i]));
    }
    jb__sha256_update(&h, "", 1);
    jb__sha256_update(&h, source, source_bytes);
    jb__sha256_final(&h, out);
}

static void record_kernel_digest(const jb_source_record *r, unsigned char out[JB_SHA256_BYTES])
{
    kernel_digest(r->backend, r->module, r->entries, r->num_entries, NULL, r->source,
                  r->source_bytes, out);
}

static void key_kernel_digest(const jb_key_fields *f, unsigned char out[JB_SHA256_BYTES])
{
    kernel_digest(f->backend, f->module, NULL, 0, f->entry_list, f->source, f->source_bytes,
                  out);
}

bool jb__source_record_of_key(const jb_source_record *r, const jb_key_fields *f)
{
    unsigned char a[JB_SHA256_BYTES], b[JB_SHA256_BYTES];
    record_kernel_digest(r, a);
    key_kernel_digest(f, b);
    return memcmp(a, b, sizeof a) == 0;
}

char *jb__source_record_bytes(const jb_source_record *r,
                              const unsigned char digest[JB_SHA256_BYTES], size_t *len)
{
    /* Parsing turned each line's newline into a NUL, and a record holds no other NUL. */
    *len = (size_t)(r->source - r->text) + r->source_bytes;
    char *bytes = malloc(*len ? *len : 1);
    if (!bytes)
        return NULL;
    for (size_t i = 0; i < *len; i++)
        bytes[i] = r->text[i] ? r->text[i] : '\n';
    unsigned char check[JB_SHA256_BYTES];
    jb__sha256(bytes, *len, check);
    if (memcmp(check, digest, JB_SHA256_BYTES) != 0) {
        free(bytes);
        return NULL;
    }
    return bytes;
}

/* ---- the folder's records, found by kernel ---- */

static int by_kernel(const void *a, const void *b)
{
    return memcmp(a, b, JB_SHA256_BYTES);
}

/* The digest a record's file name gives (64 hex digits and the suffix); false for other names. */
static bool record_file_digest(const char *name, unsigned char digest[JB_SHA256_BYTES])
{
    char hex[2 * JB_SHA256_BYTES + 1];
    if (strlen(name) != 2 * JB_SHA256_BYTES + strlen(JB_SOURCE_RECORD_SUFFIX) ||
        strcmp(name + 2 * JB_SHA256_BYTES, JB_SOURCE_RECORD_SUFFIX) != 0)
        return false;
    memcpy(hex, name, 2 * JB_SHA256_BYTES);
    hex[2 * JB_SHA256_BYTES] = '\0';
    return jb__hex_digest(hex, digest);
}

int jb__source_index_build(jb_source_index *out, jb_source_record_rules rules)
{
    memset(out, 0, sizeof *out);
    int dir = jb__disk_dir_fd();
    int fd = dir >= 0 ? openat(dir, JB_SOURCE_RECORD_DIR,
                               O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
                      : -1;
    if (fd < 0)
        return JB_OK; /* no records kept: none to find */
    DIR *d = jb__opendir_at(fd);
    close(fd);
    if (!d)
        return jb__fail(JB_ERR_SYSTEM, "cannot list the cache folder's " JB_SOURCE_RECORD_DIR
                        "/: %s", strerror(errno));
    size_t capacity = 0;
    int status = JB_OK;
    jb_saved_error saved; /* a bad record is only left out: not the caller's error */
    jb__error_save(&saved);
    for (struct dirent *e; status == JB_OK && (e = readdir(d));) {
        struct jb_source_index_item item;
        jb_source_record r;
        if (!record_file_digest(e->d_name, item.record) ||
            jb__source_record_read(item.record, rules, &r) != JB_OK)
            continue;
        record_kernel_digest(&r, item.kernel);
        jb__source_record_free(&r);
        if (out->count == capacity) {
            capacity = capacity ? 2 * capacity : 64;
            void *grown = realloc(out->items, capacity * sizeof *out->items);
            if (!grown) {
                status = JB_ERR_OUT_OF_MEMORY;
                break;
            }
            out->items = grown;
        }
        out->items[out->count++] = item;
    }
    closedir(d);
    jb__error_restore(&saved);
    if (status != JB_OK) {
        jb__source_index_free(out);
        return jb__fail(status, "no memory to index the cache folder's source records");
    }
    if (out->count)
        qsort(out->items, out->count, sizeof *out->items, by_kernel);
    return JB_OK;
}

bool jb__source_index_find(const jb_source_index *index, const jb_key_fields *f,
                           unsigned char record[JB_SHA256_BYTES])
{
    struct jb_source_index_item want;
    key_kernel_digest(f, want.kernel);
    const struct jb_source_index_item *found =
        index->count ? bsearch(&want, index->items, index->count, sizeof want, by_kernel) : NULL;
    if (found)
        memcpy(record, found->record, JB_SHA256_BYTES);
    return found != NULL;
}

void jb__source_index_free(jb_source_index *index)
{
    free(index->items);
    memset(index, 0, sizeof *index);
}

bool jb__source_record_names_key(const unsigned char record[JB_SHA256_BYTES],
                                 const unsigned char *key, size_t key_bytes,
                                 jb_source_record_rules rules)
{
    jb_key_fields f;
    if (jb__key_fields_parse(key, key_bytes, &f) != JB_OK)
        return false;
    jb_saved_error saved; /* a record that cannot be named is only not named */
    jb__error_save(&saved);
    jb_source_record r;
    bool of_key = jb__source_record_read(record, rules, &r) == JB_OK &&
                  jb__source_record_of_key(&r, &f);
    jb__source_record_free(&r);
    jb__error_restore(&saved);
    jb__key_fields_free(&f);
    return of_key;
}
