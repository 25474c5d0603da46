/* store/'s source records beyond one record: records carried by bundles (bundle.c,
 * bundle_export.c), found for cache entries (sources.c), and listed with their manifest lines
 * for the compile farm (source_list.c). The rules a record must pass are the kernels layer's, handed down as a
 * jb_source_record_rules (store.h); a record is data, never run while it is read. */
#ifndef JB_STORE_SOURCES_H
#define JB_STORE_SOURCES_H

#include "store.h"

/* ---- a bundle's records (bundle.c; written by bundle_export.c) ----
 * Fingerprint line "sources <offset> <count> <SHA-256 of the table, 64 hex>" names a table of
 * `count` JB_BUNDLE_SOURCE_BYTES rows in the entries' part of the file, sorted by entry digest:
 * the entry's key digest, the record's SHA-256, u64 offset, u64 bytes of the record (stored
 * once per content among the entries). Readers before it pass the line by. */
#define JB_BUNDLE_SOURCES_LINE "sources "
#define JB_BUNDLE_SOURCE_BYTES 80
typedef struct jb_bundle_source {
    unsigned char entry[JB_SHA256_BYTES];  /* the entry's key digest */
    unsigned char record[JB_SHA256_BYTES]; /* the record's SHA-256 (its name in sources/) */
    uint64_t offset, bytes;
} jb_bundle_source;
void jb__bundle_source_encode(unsigned char out[JB_BUNDLE_SOURCE_BYTES],
                              const jb_bundle_source *s);
/* How many entries of the bundle name a record (0 for a bundle written without them). */
size_t jb__bundle_source_count(const jb_bundle *b);
/* The record of entry i (whose key text, read and checked by jb__bundle_read_entry, is `key`):
 * *has false when the bundle carries none. Else read (at most JB_SOURCE_RECORD_MAX_BYTES, a
 * larger one refused unread) and checked as jb__source_record_check does with `rules`, and it
 * must be of that very key (backend, module, entries, source): JB_OK with *out (free it with
 * jb__source_record_free) and its SHA-256 in `record`, or an error naming the bundle, entry and
 * record. */
int jb__bundle_source(jb_bundle *b, size_t i, const unsigned char *key, size_t key_bytes,
                      jb_source_record_rules rules, bool *has,
                      unsigned char record[JB_SHA256_BYTES], jb_source_record *out);
/* jb_disk_cache_import with records: each good entry stored, and its record (checked with
 * `rules`) put into the cache folder's sources/; a refused record is counted in *refused with
 * one warning each, and its entry is still imported. */
int jb__bundle_import(uint64_t *imported, uint64_t *skipped, uint64_t *records,
                      uint64_t *refused, const char *path, jb_source_record_rules rules);
/* jb_disk_cache_export; with `rules`, each entry's record found in sources/ (checked with them)
 * is carried too, counted in *records (NULL rules: none, and *records 0). */
int jb__bundle_export(uint64_t *exported, uint64_t *skipped, uint64_t *records,
                      const char *path, const char *manifest, jb_source_record_rules rules);

/* ---- records and keys (sources.c) ---- */
/* Whether record `r` is of the key whose fields are `f`: its backend, module, entry names and
 * source are the key's, byte for byte. */
bool jb__source_record_of_key(const jb_source_record *r, const jb_key_fields *f);
/* The record's bytes as stored (malloc'd, *len), made again from the parsed record and checked
 * against its SHA-256 `digest`; NULL when they cannot be. */
char *jb__source_record_bytes(const jb_source_record *r,
                              const unsigned char digest[JB_SHA256_BYTES], size_t *len);
/* The records in the cache folder's sources/ that pass `rules`, each found by its kernel. */
typedef struct jb_source_index {
    struct jb_source_index_item *items; /* sorted by what a key shares with its record */
    size_t count;
} jb_source_index;
/* Reads every record of sources/ (none there: an empty index); bad ones are left out. */
int jb__source_index_build(jb_source_index *out, jb_source_record_rules rules);
/* The record of the key with fields `f`: true with its SHA-256 in `record`. */
bool jb__source_index_find(const jb_source_index *index, const jb_key_fields *f,
                           unsigned char record[JB_SHA256_BYTES]);
void jb__source_index_free(jb_source_index *index);
/* Whether the record named `record` in sources/ passes (hash, size, format, `rules`) and is of
 * the key text `key`: a manifest line of that key may name it. */
bool jb__source_record_names_key(const unsigned char record[JB_SHA256_BYTES],
                                 const unsigned char *key, size_t key_bytes,
                                 jb_source_record_rules rules);

/* ---- a manifest's or bundle's kernels with their records, for the compile farm
 * (source_list.c) ---- */
typedef struct jb_source_item {
    jb_manifest_line line;   /* its strings point into line_text; has_source is true */
    char *line_text;         /* owned */
    jb_source_record record; /* read and checked with the caller's rules (owned) */
} jb_source_item;
typedef struct jb_source_list {
    jb_source_item *items;
    size_t count;
    uint64_t without_record; /* lines or entries that name no record (they cannot be rebuilt) */
    uint64_t refused;        /* records refused (bad, missing, another kernel's): one warning each */
    uint64_t repeated;       /* manifest lines of a kernel listed already (each is listed once) */
    bool bundle;             /* read from a bundle: its lines are made from its entries' keys */
} jb_source_list;
/* Every kernel of the manifest or bundle at `path` (told apart by the bundle's magic) whose
 * record passes `rules`, with its manifest line: a manifest's records are read from the cache
 * folder's sources/ (and must be of their line's backend, module and entries), a bundle's from
 * the bundle (and must be of their entry's key; the line is made from the key: how "bundle").
 * Each kernel (key) is listed once, from its first line. Nothing is compiled, loaded or written.
 * JB_OK with *out (free it with jb__source_list_free)
 * also when records were refused (counted, each with one warning saying why); an error only
 * when the file cannot be read, the bundle is refused, or memory runs out. Any thread. */
int jb__source_list_read(jb_source_list *out, const char *path, jb_source_record_rules rules);
void jb__source_list_free(jb_source_list *list);

#endif /* JB_STORE_SOURCES_H */
