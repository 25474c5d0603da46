/*
 * A manifest's or bundle's kernels with their checked source records: the list the compile farm
 * builds from (sources.h says what it holds). A manifest's records come from the cache folder's
 * sources/, a bundle's from the bundle (bundle.c); each is checked with the caller's rules and
 * must be of its kernel. Nothing here compiles, loads or writes anything.
 */
#include "sources.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- a manifest's or bundle's kernels with their records ---- */

typedef struct list_ctx {
    jb_source_list *list;
    size_t capacity;
    jb_source_record_rules rules;
    const char *path;
    jb_table listed; /* the keys listed: each kernel once (a manifest names it once a process) */
} list_ctx;

static bool digest_equal(const void *stored, const void *key)
{
    return memcmp(stored, key, JB_SHA256_BYTES) == 0;
}

/* Whether the key `digest` was met before (counted as repeated); it is remembered now. */
static int met_before(list_ctx *c, const unsigned char digest[JB_SHA256_BYTES], bool *met)
{
    uint64_t hash = jb__table_hash(digest, JB_SHA256_BYTES);
    *met = jb__table_find(&c->listed, hash, digest, digest_equal) != NULL;
    if (*met) {
        c->list->repeated++;
        return JB_OK;
    }
    unsigned char *copy = malloc(JB_SHA256_BYTES);
    if (!copy || !jb__table_reserve(&c->listed)) {
        free(copy);
        return jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory to list the kernels of %s", c->path);
    }
    memcpy(copy, digest, JB_SHA256_BYTES);
    jb__table_add(&c->listed, hash, copy, copy);
    return JB_OK;
}

/* A refused record: counted, and its error warned about once (the list goes on). */
static void refuse(list_ctx *c, const char *module)
{
    c->list->refused++;
    jb__warn("%s: the source record of module '%s' is refused, so it cannot be rebuilt from it: "
             "%s",
             c->path, module, jb_last_error_message());
}

/* Adds a line made of these fields (its source= field naming `record`), with record `r` taken
 * over; JB_OK, or out of memory (r freed). */
static int add_item(list_ctx *c, const unsigned char digest[JB_SHA256_BYTES],
                    const char *backend, const char *target, const char *module,
                    const char *entries, const char *how, jb_source_record *r,
                    const unsigned char record[JB_SHA256_BYTES])
{
    char key_hex[2 * JB_SHA256_BYTES + 1], record_hex[2 * JB_SHA256_BYTES + 1];
    jb__hex(digest, JB_SHA256_BYTES, key_hex);
    jb__hex(record, JB_SHA256_BYTES, record_hex);
    jb_strbuf sb = {0};
    jb__strbuf_appendf(&sb, JB_MANIFEST_TAG "\t%s\t%s\t%s\t%s\t%s\t%s\t" JB_MANIFEST_SOURCE_FIELD
                       "%s",
                       key_hex, backend, target, module, entries, how, record_hex);
    if (!sb.failed && c->list->count == c->capacity) {
        size_t capacity = c->capacity ? 2 * c->capacity : 64;
        void *grown = realloc(c->list->items, capacity * sizeof *c->list->items);
        if (grown) {
            c->list->items = grown;
            c->capacity = capacity;
        }
    }
    jb_source_item *item = &c->list->items[c->list->count];
    if (sb.failed || c->list->count == c->capacity ||
        !jb__manifest_parse_line(sb.data, &item->line)) {
        jb__strbuf_free(&sb);
        jb__source_record_free(r);
        return jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory to list the kernels of %s", c->path);
    }
    item->line_text = sb.data;
    item->record = *r;
    c->list->count++;
    return JB_OK;
}

/* The record's entry names joined by commas equal `line_entries`. */
static bool same_entries(const jb_source_record *r, const char *line_entries)
{
    jb_strbuf joined = {0};
    for (size_t i = 0; i < r->num_entries; i++)
        jb__strbuf_appendf(&joined, "%s%s", i ? "," : "", r->entries[i]);
    bool same = !joined.failed && strcmp(joined.data, line_entries) == 0;
    jb__strbuf_free(&joined);
    return same;
}

static int list_manifest_line(void *p, const jb_manifest_line *line)
{
    list_ctx *c = p;
    bool met;
    JB_FORWARD_IF_ERROR(met_before(c, line->digest, &met));
    if (met)
        return JB_OK;
    if (line->source_malformed) {
        jb__fail(JB_ERR_INVALID_ARGUMENT, "its manifest line names it in a malformed field");
        refuse(c, line->module);
        return JB_OK;
    }
    if (!line->has_source) {
        c->list->without_record++;
        return JB_OK;
    }
    jb_source_record r;
    if (jb__source_record_read(line->source_digest, c->rules, &r) != JB_OK) {
        refuse(c, line->module);
        return JB_OK;
    }
    if (strcmp(r.backend, line->backend) != 0 || strcmp(r.module, line->module) != 0 ||
        !same_entries(&r, line->entries)) {
        jb__fail(JB_ERR_INVALID_ARGUMENT, "it is of another kernel (%s module '%s')", r.backend,
                 r.module);
        jb__source_record_free(&r);
        refuse(c, line->module);
        return JB_OK;
    }
    return add_item(c, line->digest, line->backend, line->target, line->module, line->entries,
                    line->how, &r, line->source_digest);
}

/* Entry i of a bundle, with its record when it carries one. */
static int list_bundle_entry(list_ctx *c, jb_bundle *b, size_t i)
{
    unsigned char *data;
    if (jb__bundle_read_entry(b, i, &data) != JB_OK) {
        c->list->without_record++; /* a bad entry (warned about): nothing to rebuild it as */
        return JB_OK;
    }
    const jb_bundle_entry *e = jb__bundle_entry(b, i);
    jb_key_fields f;
    bool has = false;
    jb_source_record r;
    int status = JB_OK;
    if (jb__key_fields_parse(data, (size_t)e->key_bytes, &f) != JB_OK) {
        c->list->without_record++; /* a key of another format: another library made it */
    } else {
        unsigned char record[JB_SHA256_BYTES];
        if (jb__bundle_source(b, i, data, (size_t)e->key_bytes, c->rules, &has, record, &r) !=
            JB_OK) {
            refuse(c, f.module);
        } else if (!has) {
            c->list->without_record++;
        } else {
            jb_strbuf entries = {0}; /* the key's entry names, as a line has them */
            for (const char *p = f.entry_list; *p; p++)
                jb__strbuf_appendf(&entries, "%c", *p == ' ' ? ',' : *p);
            if (entries.failed) {
                jb__source_record_free(&r);
                status = jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory to list %s", c->path);
            } else {
                status = add_item(c, e->digest, f.backend, f.target, f.module, entries.data,
                                  "bundle", &r, record);
            }
            jb__strbuf_free(&entries);
        }
        jb__key_fields_free(&f);
    }
    free(data);
    return status;
}

int jb__source_list_read(jb_source_list *out, const char *path, jb_source_record_rules rules)
{
    JB_RETURN_IF(!out || !path || !rules, JB_ERR_INVALID_ARGUMENT,
                 "listing source records: out, the path or the rules is NULL");
    memset(out, 0, sizeof *out);
    list_ctx c = {out, 0, rules, path, {0}};
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    JB_RETURN_IF(fd < 0, JB_ERR_SYSTEM, "cannot open %s: %s", path, strerror(errno));
    char magic[8] = {0};
    bool bundle = read(fd, magic, sizeof magic) == (ssize_t)sizeof magic &&
                  memcmp(magic, JB_BUNDLE_MAGIC, sizeof magic) == 0;
    close(fd);
    out->bundle = bundle;
    int status;
    if (bundle) {
        jb_bundle *b;
        status = jb__bundle_open(path, "the bundle's path", &b);
        for (size_t i = 0; status == JB_OK && i < jb__bundle_count(b); i++)
            status = list_bundle_entry(&c, b, i);
        if (b)
            jb__bundle_free(b);
    } else {
        jb__disk_cache_usable(); /* a manifest's records are in the cache folder */
        status = jb__manifest_read(path, list_manifest_line, &c);
    }
    for (size_t i = 0; i < c.listed.capacity; i++)
        free(c.listed.slots[i].value);
    free(c.listed.slots);
    if (status != JB_OK)
        jb__source_list_free(out);
    return status;
}

void jb__source_list_free(jb_source_list *list)
{
    if (!list)
        return;
    for (size_t i = 0; i < list->count; i++) {
        free(list->items[i].line_text);
        jb__source_record_free(&list->items[i].record);
    }
    free(list->items);
    memset(list, 0, sizeof *list);
}
