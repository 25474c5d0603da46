/*
 * Prewarm: at start, every kernel a manifest or a bundle names is loaded into the module cache,
 * so that the first request finds it in memory. Nothing is compiled: a kernel whose code is in
 * neither the cache folder nor a bundle is counted as missing (it compiles at its first use).
 *
 * A stored key says by itself how to load its module (cache_key.c): module name, entry names,
 * source. The key is made again for the device from those, and must equal the stored one, so
 * only code this process would itself have found under that key is loaded (same compiler,
 * architecture, library ABI); the source the module keeps is the key's, the very text a kernel
 * object with that module name has, so a later launch finds its module as if it had built it.
 *
 * A prewarm's manifest line names the kernel's source record where one is known: the record
 * the manifest's own line names, when it is in the cache folder whole and of the very key, or
 * the record a bundle carries for the entry (put into the cache folder's sources/ first), each
 * checked by the rules the kernels layer hands down (jb__prewarm) and of the very key. A record
 * that fails is only not named: the kernel is loaded all the same.
 */
#include "cache.h"
#include "../store/sources.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct prewarm {
    jb_device *dev;
    jb_prewarm_result *result;
    jb_source_record_rules rules; /* what a record must pass before a line names it */
} prewarm;

/* Where a key text and payload came from, to count a hit or throw a refused payload out. */
typedef struct stored {
    const unsigned char *key; /* the key text */
    size_t key_bytes;
    jb_blob payload;
    const char *how;    /* "disk" or "bundle" */
    jb_bundle_ref ref;  /* a bundle's entry */
    const char *record; /* its source record's 64 hex digits, or NULL: none known */
} stored;

typedef struct build_ctx {
    const stored *from;
    const jb_key_fields *fields;
    char **names;
    const jb_disk_key *key;
    bool ran;
} build_ctx;

/* Code the loader refused: reported, and evicted (the cache folder) or skipped (a bundle). */
static void refused(const stored *from, const jb_disk_key *key, const char *module)
{
    bool disk = strcmp(from->how, "disk") == 0;
    jb__warn("prewarm: the %s's code of module '%s' was refused by the loader (%s); it is "
             "compiled at its first use",
             disk ? "cache folder" : "bundle", module, jb_last_error_message());
    if (disk)
        jb__disk_reject(key);
    else
        jb__bundle_reject(&from->ref, "was refused by the loader");
}

static int prewarm_builder(void *p, jb_device *dev, const char *name, jb_module **out,
                           bool *from_disk)
{
    (void)name;
    build_ctx *ctx = p;
    ctx->ran = true;
    uint64_t start = jb__now_ns();
    int status = jb__module_create(dev, &ctx->from->payload, ctx->fields->source,
                                   (const char *const *)ctx->names, ctx->fields->num_entries, out);
    if (status != JB_OK)
        return status;
    *from_disk = true;
    bool disk = strcmp(ctx->from->how, "disk") == 0;
    if (disk)
        jb__disk_accept();
    else
        jb__bundle_accept();
    /* Loaded without a compile: the event a launch's load would raise. */
    jb__event_build_content_key(ctx->key->file);
    jb__event_raise(disk ? JB_CACHE_EVENT_DISK_HIT : JB_CACHE_EVENT_BUNDLE_HIT,
                    jb__now_ns() - start, JB_OK, NULL);
    jb__manifest_record(dev->backend->name, dev->arch, ctx->key, ctx->fields->module, (const char *const *)ctx->names,
                        ctx->fields->num_entries, "prewarm", ctx->from->record);
    return JB_OK;
}

/* The key made again for this device from the stored key's fields; JB_OK with *same true when
 * it equals the stored one (code this process would load itself). */
static int key_again(jb_device *dev, const stored *from, const jb_key_fields *fields,
                     char **names, jb_disk_key *key, bool *same)
{
    *same = false;
    if (strcmp(fields->backend, dev->backend->name) != 0 || strcmp(fields->target, dev->arch) != 0)
        return JB_OK; /* another device's */
    JB_FORWARD_IF_ERROR(jb__module_disk_key(dev, fields->module, (const char *const *)names,
                                     fields->num_entries, fields->source, key));
    *same = key->bytes == from->key_bytes && memcmp(key->text, from->key, key->bytes) == 0;
    return JB_OK;
}

/* The record bundle `b` carries for entry i (key text `key`), put into the cache folder's
 * sources/: its hex in `hex`, or NULL when it carries none, or one refused (warned about). */
static const char *bundle_record(const prewarm *pw, jb_bundle *b, size_t i,
                                 const unsigned char *key, size_t key_bytes,
                                 char hex[2 * JB_SHA256_BYTES + 1])
{
    if (!jb__bundle_source_count(b))
        return NULL;
    jb_saved_error saved; /* a record that cannot be named is only not named */
    jb__error_save(&saved);
    bool has = false;
    unsigned char digest[JB_SHA256_BYTES];
    jb_source_record r;
    char *bytes = NULL;
    size_t len = 0;
    if (jb__bundle_source(b, i, key, key_bytes, pw->rules, &has, digest, &r) != JB_OK)
        jb__warn("prewarm: %s; its manifest line names no source record",
                 jb_last_error_message());
    else if (has)
        bytes = jb__source_record_bytes(&r, digest, &len);
    bool put = bytes && jb__source_record_put(bytes, len, r.module, hex);
    free(bytes);
    jb__source_record_free(&r);
    jb__error_restore(&saved);
    return put ? hex : NULL;
}

/* Loads one stored module for the device, or counts why not. */
static void load_one(prewarm *pw, const stored *from)
{
    jb_prewarm_result *r = pw->result;
    jb_key_fields fields;
    if (jb__key_fields_parse(from->key, from->key_bytes, &fields) != JB_OK) {
        r->other++; /* a key of another format: another library made it */
        return;
    }
    jb_device *dev = pw->dev;
    char **names = NULL;
    jb_disk_key key = {0};
    bool same = false;
    int status = jb__key_fields_entries(&fields, &names);
    if (status == JB_OK)
        status = key_again(dev, from, &fields, names, &key, &same);
    stored with_record; /* a bundle's entry: its record, looked for only for what loads here */
    char record[2 * JB_SHA256_BYTES + 1];
    if (status == JB_OK && same && !from->record && strcmp(from->how, "bundle") == 0) {
        with_record = *from;
        with_record.record = bundle_record(pw, from->ref.bundle, from->ref.entry, from->key,
                                           from->key_bytes, record);
        from = &with_record;
    }
    if (status == JB_OK && same) {
        build_ctx ctx = {from, &fields, names, &key, false};
        jb_module *module;
        uint64_t hash = jb__fnv1a64(fields.module, strlen(fields.module), JB_FNV_SEED);
        status = jb__get_jit_module(dev, fields.module, hash, prewarm_builder, &ctx, &module);
        if (status == JB_OK && ctx.ran)
            r->loaded++;
        else if (status == JB_OK)
            r->present++;
        else if (status == JB_ERR_LOAD)
            refused(from, &key, fields.module);
    }
    if (status != JB_OK)
        r->failed++;
    else if (!same)
        r->other++; /* another device, compiler or library ABI: not code this process loads */
    jb__key_entries_free(names);
    jb__disk_key_free(&key);
    jb__key_fields_free(&fields);
}

/* ---- from a bundle ---- */

static int prewarm_bundle(prewarm *pw, const char *path)
{
    jb_bundle *b;
    JB_FORWARD_IF_ERROR(jb__bundle_open(path, "the prewarm path", &b));
    for (size_t i = 0; i < jb__bundle_count(b); i++) {
        unsigned char *data;
        if (jb__bundle_read_entry(b, i, &data) != JB_OK) {
            pw->result->failed++;
            continue;
        }
        const jb_bundle_entry *e = jb__bundle_entry(b, i);
        stored from = {.key = data,
                       .key_bytes = (size_t)e->key_bytes,
                       .payload = {data + e->key_bytes, (size_t)e->payload_bytes},
                       .how = "bundle",
                       .ref = {b, i}};
        load_one(pw, &from);
        free(data);
    }
    jb__bundle_free(b);
    return JB_OK;
}

/* ---- from a manifest ---- */

/* The cache folder's entry filed under `digest`, read and checked; false if none. */
static bool from_folder(const unsigned char *digest, unsigned char **data, stored *from)
{
    int dir = jb__disk_dir_fd();
    if (dir < 0)
        return false;
    char hex[2 * JB_SHA256_BYTES + 1], name[64];
    jb__hex(digest, JB_SHA256_BYTES, hex);
    snprintf(name, sizeof name, "%.*s%s", JB_DISK_ENTRY_HEX, hex, JB_DISK_ENTRY_SUFFIX);
    struct stat st;
    const char *problem;
    int fd = jb__disk_open_entry(dir, name, &st, &problem);
    if (fd < 0)
        return false;
    size_t size = 0, payload_at, key_bytes = 0;
    *data = jb__disk_read_entry(fd, &st, &size);
    close(fd);
    payload_at = *data ? jb__disk_entry_check(*data, size, NULL) : 0;
    unsigned char check[JB_SHA256_BYTES];
    const unsigned char *key = payload_at ? jb__disk_entry_key(*data, payload_at, &key_bytes) : 0;
    if (key)
        jb__sha256(key, key_bytes, check);
    if (!key || memcmp(check, digest, JB_SHA256_BYTES) != 0) {
        free(*data);
        *data = NULL;
        return false;
    }
    *from = (stored){.key = key,
                     .key_bytes = key_bytes,
                     .payload = {*data + payload_at, size - payload_at},
                     .how = "disk"};
    return true;
}

bool jb__folder_entry_key(const unsigned char *digest, unsigned char **data,
                          const unsigned char **key, size_t *key_bytes)
{
    stored from;
    if (!from_folder(digest, data, &from))
        return false;
    *key = from.key;
    *key_bytes = from.key_bytes;
    return true;
}

int jb__stored_key_is_ours(jb_device *dev, const unsigned char *key, size_t key_bytes,
                           bool *ours)
{
    *ours = false;
    jb_key_fields fields;
    if (jb__key_fields_parse(key, key_bytes, &fields) != JB_OK)
        return JB_OK; /* a key of another format: another library made it */
    char **names = NULL;
    jb_disk_key again = {0};
    stored from = {.key = key, .key_bytes = key_bytes};
    int status = jb__key_fields_entries(&fields, &names);
    if (status == JB_OK)
        status = key_again(dev, &from, &fields, names, &again, ours);
    jb__key_entries_free(names);
    jb__disk_key_free(&again);
    jb__key_fields_free(&fields);
    return status;
}

/* Loads the cache folder's entry filed under `digest`, naming record `source` (NULL: none)
 * when it is whole in the cache folder and of this key; false when there is no such entry. */
static bool load_folder_entry(prewarm *pw, const unsigned char digest[JB_SHA256_BYTES],
                              const unsigned char *source)
{
    unsigned char *data = NULL;
    stored from;
    char record[2 * JB_SHA256_BYTES + 1];
    if (!from_folder(digest, &data, &from))
        return false;
    if (source && jb__source_record_names_key(source, from.key, from.key_bytes, pw->rules)) {
        jb__hex(source, JB_SHA256_BYTES, record);
        from.record = record;
    }
    load_one(pw, &from);
    free(data);
    return true;
}

void jb__prewarm_entry(jb_prewarm_result *out, jb_device *device,
                       const unsigned char key[JB_SHA256_BYTES],
                       const unsigned char record[JB_SHA256_BYTES], jb_source_record_rules rules)
{
    prewarm pw = {device, out, rules};
    if (!load_folder_entry(&pw, key, record))
        out->missing++;
}

static int manifest_line(void *p, const jb_manifest_line *line)
{
    prewarm *pw = p;
    if (strcmp(line->backend, pw->dev->backend->name) != 0 ||
        strcmp(line->target, pw->dev->arch) != 0) {
        pw->result->other++;
        return JB_OK;
    }
    if (load_folder_entry(pw, line->digest, line->has_source ? line->source_digest : NULL))
        return JB_OK;
    unsigned char *data = NULL;
    jb_blob payload;
    jb_bundle_ref ref;
    size_t key_bytes;
    if (jb__bundle_find(line->digest, &data, &key_bytes, &payload, &ref)) {
        stored from = {.key = data, .key_bytes = key_bytes, .payload = payload, .how = "bundle",
                       .ref = ref};
        load_one(pw, &from);
    } else {
        pw->result->missing++;
    }
    free(data);
    return JB_OK;
}

int jb__prewarm(jb_prewarm_result *out, jb_device *device, const char *path,
                jb_source_record_rules rules)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_prewarm: out is NULL");
    memset(out, 0, sizeof *out);
    JB_RETURN_IF(!device || !path, JB_ERR_INVALID_ARGUMENT, "jb_prewarm: %s is NULL",
                 device ? "path" : "device");
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    JB_RETURN_IF(fd < 0, JB_ERR_SYSTEM, "prewarm: cannot open %s: %s", path, strerror(errno));
    char magic[8] = {0};
    struct stat st;
    bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    bool bundle = regular && read(fd, magic, sizeof magic) == (ssize_t)sizeof magic &&
                  memcmp(magic, JB_BUNDLE_MAGIC, sizeof magic) == 0;
    close(fd);
    JB_RETURN_IF(!regular, JB_ERR_INVALID_ARGUMENT, "prewarm: %s is not a regular file", path);
    prewarm pw = {device, out, rules};
    jb__disk_cache_usable(); /* set up (one warning if refused) before any entry is looked for */
    jb__bundles_present();
    return bundle ? prewarm_bundle(&pw, path) : jb__manifest_read(path, manifest_line, &pw);
}
