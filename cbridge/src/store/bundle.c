/*
 * Bundles: many disk cache entries in one file, so that a new replica starts with the code its
 * fleet already compiled. A bundle is used in place, read-only, behind the module cache and the
 * cache folder (JITBRIDGE_CACHE_BUNDLE=FILE[:FILE...], jb_disk_cache_add_bundle), or imported
 * into the cache folder; bundle_export.c writes one.
 *
 * Format (integers little-endian):
 *   header, JB_BUNDLE_HEADER_BYTES: magic "JBBUNDLE", u32 format, u32 header bytes, u64 entries,
 *     u64 offset and u64 bytes of the fingerprints, u64 offset and u64 bytes of the index,
 *     u64 file bytes, the SHA-256 of the fingerprints followed by the index, zeros;
 *   each entry's key text, then its payload, at the offset its index entry gives;
 *   fingerprints: text lines "library <version>", "abi <n>", "key-format <n>", and one
 *     "built <backend> <target> <compiler identity>" per kind of entry it holds;
 *   index: JB_BUNDLE_INDEX_BYTES per entry, sorted by key digest: the SHA-256 of the key text,
 *     the SHA-256 of the key text followed by the payload, u64 offset, u64 key bytes, u64 payload
 *     bytes, u64 zero.
 *   Source records (export --with-sources): a fingerprint line "sources <offset> <count> <hex>"
 *     names a table among the entries (sources.h has its rows), each row an entry's key digest
 *     and its record's SHA-256, offset and bytes; the records themselves lie among the entries,
 *     each once. Readers before it pass the line by, so the format's number stays 1, and a
 *     bundle without the line is read as before. A record is data: checked (size, hash, format,
 *     the kernels' rules, of its entry's very key) before it is used, never run here.
 *
 * Trust, as for the cache folder: the file must be ours or root's and writable by no one else,
 * and so must every folder above it (or be sticky). It is opened once and read through that
 * handle. Each entry is read into memory and checked there (both hashes, the whole key) before
 * it is used, so a file changed or cut while in use gives a bad entry, never bad code: pread
 * copies rather than mmap, since a mapping of a file truncated under it faults (SIGBUS) and
 * bytes checked in a mapping could change before the loader reads them. A bad entry, or one
 * the loader refuses, is skipped for the life of the process with one warning.
 */
#include "sources.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_BUNDLES 64
#define MAX_FINGERPRINT_BYTES (1u << 20)
#define MAX_KEY_BYTES (16u << 20)
#define MAX_PAYLOAD_BYTES (64u << 20) /* the disk cache's own cap */

struct jb_bundle {
    int fd;
    char *path;
    dev_t dev;
    ino_t ino;
    size_t count;
    jb_bundle_entry *entries;
    atomic_bool *bad; /* per entry: failed a check or refused by the loader (warned once) */
    char *fingerprints;
    uint64_t entries_end; /* where the entries' part of the file ends (the fingerprints begin) */
    jb_bundle_source *sources; /* sorted by entry digest; NULL when it carries none */
    size_t num_sources;
};

static _Atomic(jb_bundle *) tiers[MAX_BUNDLES];
static pthread_once_t environment_once = PTHREAD_ONCE_INIT;
static atomic_uint_fast64_t counter_bundle_hits, counter_bundle_rejected;

#ifdef JB_TEST_HOOKS
static atomic_int test_read_error;
void jb__test_set_bundle_read_error(int err)
{
    atomic_store(&test_read_error, err);
}

static atomic_size_t test_max_entries;
void jb__test_set_bundle_max_entries(size_t max)
{
    atomic_store(&test_max_entries, max);
}
#endif

size_t jb__bundle_max_entries(void)
{
#ifdef JB_TEST_HOOKS
    size_t max = atomic_load(&test_max_entries);
    if (max)
        return max;
#endif
    return JB_BUNDLE_MAX_ENTRIES;
}

/* ---- the format: one place for its layout ---- */

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void jb__bundle_header_encode(unsigned char out[JB_BUNDLE_HEADER_BYTES],
                              const jb_bundle_header *h)
{
    memset(out, 0, JB_BUNDLE_HEADER_BYTES);
    memcpy(out, JB_BUNDLE_MAGIC, 8);
    put64(out + 8, JB_BUNDLE_FORMAT | (uint64_t)JB_BUNDLE_HEADER_BYTES << 32);
    put64(out + 16, h->count);
    put64(out + 24, h->fingerprints_offset);
    put64(out + 32, h->fingerprints_bytes);
    put64(out + 40, h->index_offset);
    put64(out + 48, h->index_bytes);
    put64(out + 56, h->file_bytes);
    memcpy(out + 64, h->tables_digest, JB_SHA256_BYTES);
}

/* The header's fields, or the reason it is not a bundle's this library reads. */
static const char *header_decode(const unsigned char in[JB_BUNDLE_HEADER_BYTES],
                                 jb_bundle_header *h)
{
    if (memcmp(in, JB_BUNDLE_MAGIC, 8) != 0)
        return "is not a jitbridge bundle (no JBBUNDLE magic)";
    uint64_t version = get64(in + 8);
    if ((uint32_t)version != JB_BUNDLE_FORMAT)
        return "has a bundle format this library does not read";
    if (version >> 32 != JB_BUNDLE_HEADER_BYTES)
        return "has a header of the wrong size";
    h->count = get64(in + 16);
    h->fingerprints_offset = get64(in + 24);
    h->fingerprints_bytes = get64(in + 32);
    h->index_offset = get64(in + 40);
    h->index_bytes = get64(in + 48);
    h->file_bytes = get64(in + 56);
    memcpy(h->tables_digest, in + 64, JB_SHA256_BYTES);
    return NULL;
}

void jb__bundle_index_encode(unsigned char out[JB_BUNDLE_INDEX_BYTES], const jb_bundle_entry *e)
{
    memset(out, 0, JB_BUNDLE_INDEX_BYTES);
    memcpy(out, e->digest, JB_SHA256_BYTES);
    memcpy(out + 32, e->checksum, JB_SHA256_BYTES);
    put64(out + 64, e->offset);
    put64(out + 72, e->key_bytes);
    put64(out + 80, e->payload_bytes);
}

static void index_decode(const unsigned char in[JB_BUNDLE_INDEX_BYTES], jb_bundle_entry *e)
{
    memcpy(e->digest, in, JB_SHA256_BYTES);
    memcpy(e->checksum, in + 32, JB_SHA256_BYTES);
    e->offset = get64(in + 64);
    e->key_bytes = get64(in + 72);
    e->payload_bytes = get64(in + 80);
}

/* Whether [offset, offset + bytes) lies inside [start, end), without overflow. */
static bool inside(uint64_t offset, uint64_t bytes, uint64_t start, uint64_t end)
{
    return offset >= start && offset <= end && bytes <= end - offset;
}

/* ---- opening ---- */

/* False when the file ends first (errno 0) or a read fails (errno). */
static bool pread_all(int fd, void *buf, size_t bytes, uint64_t at)
{
    size_t got = 0;
    while (got < bytes) {
        ssize_t n = pread(fd, (char *)buf + got, bytes - got, (off_t)(at + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0)
            errno = 0;
        if (n <= 0)
            return false;
        got += (size_t)n;
    }
    return true;
}

void jb__bundle_free(jb_bundle *b)
{
    if (!b)
        return;
    if (b->fd >= 0)
        close(b->fd);
    free(b->path);
    free(b->entries);
    free(b->bad);
    free(b->fingerprints);
    free(b->sources);
    free(b);
}

/* Why the file on `fd` may not be trusted, or NULL. */
static const char *untrusted_file(const struct stat *st)
{
    if (!S_ISREG(st->st_mode))
        return "is not a regular file";
    if (st->st_uid != geteuid() && st->st_uid != 0)
        return "is owned by another user (not root); copy it to make it yours";
    if (st->st_mode & (S_IWGRP | S_IWOTH))
        return "is writable by group or others";
    if ((uint64_t)st->st_size < JB_BUNDLE_HEADER_BYTES)
        return "is too short to be a bundle";
    return NULL;
}

/* Reads and checks the header, the fingerprints and the index: NULL, or what is wrong. */
static const char *read_tables(jb_bundle *b, const struct stat *st)
{
    unsigned char raw[JB_BUNDLE_HEADER_BYTES];
    jb_bundle_header h;
    const char *bad;
    if (!pread_all(b->fd, raw, sizeof raw, 0))
        return "cannot be read";
    if ((bad = header_decode(raw, &h)))
        return bad;
    uint64_t size = (uint64_t)st->st_size;
    if (h.file_bytes != size)
        return "is cut short or has grown since it was written (its size is not the one recorded)";
    if (h.count > jb__bundle_max_entries() || h.index_bytes != h.count * JB_BUNDLE_INDEX_BYTES ||
        h.fingerprints_bytes > MAX_FINGERPRINT_BYTES ||
        !inside(h.index_offset, h.index_bytes, JB_BUNDLE_HEADER_BYTES, size) ||
        !inside(h.fingerprints_offset, h.fingerprints_bytes, JB_BUNDLE_HEADER_BYTES, size) ||
        h.fingerprints_offset + h.fingerprints_bytes != h.index_offset ||
        h.index_offset + h.index_bytes != size)
        return "has a malformed header";
    size_t tables_bytes = (size_t)(h.fingerprints_bytes + h.index_bytes);
    unsigned char *tables = malloc(tables_bytes + 1);
    b->entries = calloc(h.count ? h.count : 1, sizeof *b->entries);
    b->bad = calloc(h.count ? h.count : 1, sizeof *b->bad);
    b->fingerprints = malloc(h.fingerprints_bytes + 1);
    if (!tables || !b->entries || !b->bad || !b->fingerprints) {
        free(tables);
        return "cannot be read: no memory";
    }
    unsigned char digest[JB_SHA256_BYTES];
    if (!pread_all(b->fd, tables, tables_bytes, h.fingerprints_offset)) {
        bad = "cannot be read";
    } else {
        jb__sha256(tables, tables_bytes, digest);
        if (memcmp(digest, h.tables_digest, sizeof digest) != 0)
            bad = "has an index that fails its SHA-256 check";
    }
    memcpy(b->fingerprints, tables, (size_t)h.fingerprints_bytes);
    b->fingerprints[h.fingerprints_bytes] = '\0';
    b->count = (size_t)h.count;
    for (size_t i = 0; !bad && i < b->count; i++) {
        jb_bundle_entry *e = &b->entries[i];
        index_decode(tables + h.fingerprints_bytes + i * JB_BUNDLE_INDEX_BYTES, e);
        if (e->key_bytes == 0 || e->key_bytes > MAX_KEY_BYTES ||
            e->payload_bytes > MAX_PAYLOAD_BYTES ||
            !inside(e->offset, e->key_bytes + e->payload_bytes, JB_BUNDLE_HEADER_BYTES,
                    h.fingerprints_offset))
            bad = "has an index entry outside its entries";
        else if (i && memcmp(b->entries[i - 1].digest, e->digest, JB_SHA256_BYTES) >= 0)
            bad = "has an index that is not sorted by key";
    }
    free(tables);
    b->entries_end = h.fingerprints_offset;
    char wanted[64];
    snprintf(wanted, sizeof wanted, "\nkey-format %d\n", JB_KEY_FORMAT);
    if (!bad && !strstr(b->fingerprints, wanted))
        bad = "holds keys of another format (made by another jitbridge version)";
    return bad;
}

void jb__bundle_source_encode(unsigned char out[JB_BUNDLE_SOURCE_BYTES],
                              const jb_bundle_source *s)
{
    memcpy(out, s->entry, JB_SHA256_BYTES);
    memcpy(out + 32, s->record, JB_SHA256_BYTES);
    put64(out + 64, s->offset);
    put64(out + 72, s->bytes);
}

/* The table of source records the fingerprints name, or NULL: what is wrong with it. */
static const char *read_sources_rows(jb_bundle *b, const char *line)
{
    unsigned long long offset, count;
    char hex[2 * JB_SHA256_BYTES + 2];
    unsigned char digest[JB_SHA256_BYTES], actual[JB_SHA256_BYTES];
    if (sscanf(line, JB_BUNDLE_SOURCES_LINE "%llu %llu %65s", &offset, &count, hex) != 3 ||
        !jb__hex_digest(hex, digest))
        return "names its source records in a malformed line";
    if (count == 0 || count > b->count ||
        !inside(offset, count * JB_BUNDLE_SOURCE_BYTES, JB_BUNDLE_HEADER_BYTES, b->entries_end))
        return "has a table of source records outside its entries";
    size_t bytes = (size_t)count * JB_BUNDLE_SOURCE_BYTES;
    unsigned char *rows = malloc(bytes);
    b->sources = calloc((size_t)count, sizeof *b->sources);
    if (!rows || !b->sources) {
        free(rows);
        return "has a table of source records too large for memory";
    }
    const char *bad = NULL;
    if (!pread_all(b->fd, rows, bytes, offset))
        bad = "has a table of source records that cannot be read";
    if (!bad) {
        jb__sha256(rows, bytes, actual);
        if (memcmp(actual, digest, sizeof digest) != 0)
            bad = "has a table of source records that fails its SHA-256 check";
    }
    for (size_t i = 0; !bad && i < (size_t)count; i++) {
        jb_bundle_source *s = &b->sources[i];
        const unsigned char *row = rows + i * JB_BUNDLE_SOURCE_BYTES;
        memcpy(s->entry, row, JB_SHA256_BYTES);
        memcpy(s->record, row + 32, JB_SHA256_BYTES);
        s->offset = get64(row + 64);
        s->bytes = get64(row + 72);
        if (i && memcmp(b->sources[i - 1].entry, s->entry, JB_SHA256_BYTES) >= 0)
            bad = "has a table of source records not sorted by entry";
    }
    free(rows);
    if (!bad)
        b->num_sources = (size_t)count;
    return bad;
}

/* A bundle whose table of records is bad still serves its compiled entries: its records are
 * left out, with one warning. */
static void read_sources_table(jb_bundle *b)
{
    const char *line = strstr(b->fingerprints, "\n" JB_BUNDLE_SOURCES_LINE);
    if (!line)
        return; /* written without sources, or before them */
    const char *bad = read_sources_rows(b, line + 1);
    if (bad) {
        free(b->sources);
        b->sources = NULL;
        jb__warn("the bundle %s %s; its source records are left out (its entries are not)",
                 b->path, bad);
    }
}

int jb__bundle_open(const char *path, const char *variable, jb_bundle **out)
{
    *out = NULL;
    JB_RETURN_IF(!path || !*path, JB_ERR_INVALID_ARGUMENT, "no bundle path given");
    char real[PATH_MAX], folder[PATH_MAX], resolved_folder[PATH_MAX], why[PATH_MAX + 256];
    JB_RETURN_IF(!realpath(path, real), JB_ERR_SYSTEM, "the bundle %s: %s", path,
                 strerror(errno));
    snprintf(folder, sizeof folder, "%s", real);
    char *slash = strrchr(folder, '/'); /* realpath's answer is absolute */
    if (slash == folder)
        slash++; /* "/name": the folder is "/" */
    *slash = '\0';
    JB_RETURN_IF(!jb__trusted_folder_path(folder, variable, resolved_folder,
                                          sizeof resolved_folder, why, sizeof why),
                 JB_ERR_INVALID_ARGUMENT, "refusing the bundle %s: %s", path, why);
    jb_bundle *b = calloc(1, sizeof *b);
    JB_RETURN_IF(!b, JB_ERR_OUT_OF_MEMORY, "no memory for a bundle");
    b->fd = open(real, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    b->path = jb__strdup(path);
    struct stat st;
    const char *bad = b->fd < 0               ? strerror(errno)
                      : fstat(b->fd, &st) != 0 ? strerror(errno)
                      : !b->path               ? "no memory"
                                               : untrusted_file(&st);
    if (!bad)
        bad = read_tables(b, &st);
    if (!bad)
        read_sources_table(b);
    if (bad) {
        jb__bundle_free(b);
        return jb__fail(JB_ERR_INVALID_ARGUMENT, "refusing the bundle %s: it %s", path, bad);
    }
    b->dev = st.st_dev;
    b->ino = st.st_ino;
    *out = b;
    return JB_OK;
}

size_t jb__bundle_count(const jb_bundle *b)
{
    return b->count;
}

const char *jb__bundle_fingerprints(const jb_bundle *b)
{
    return b->fingerprints;
}

/* ---- entries ---- */

/* An entry's bytes, as pread_all reads them. */
static bool read_entry_bytes(int fd, void *buf, size_t bytes, uint64_t at)
{
#ifdef JB_TEST_HOOKS
    int injected = atomic_load(&test_read_error);
    if (injected) {
        errno = injected;
        return false;
    }
#endif
    return pread_all(fd, buf, bytes, at);
}

static void entry_rejected(jb_bundle *b, size_t i, const char *why)
{
    atomic_fetch_add(&counter_bundle_rejected, 1);
    if (!atomic_exchange(&b->bad[i], true)) {
        char hex[2 * JB_SHA256_BYTES + 1];
        jb__hex(b->entries[i].digest, JB_SHA256_BYTES, hex);
        jb__warn("the bundle %s: entry %.32s %s; it is skipped", b->path, hex, why);
    }
}

int jb__bundle_read_entry(jb_bundle *b, size_t i, unsigned char **out)
{
    *out = NULL;
    const jb_bundle_entry *e = &b->entries[i];
    JB_RETURN_IF(atomic_load(&b->bad[i]), JB_ERR_INVALID_ARGUMENT, "the entry was found bad");
    size_t bytes = (size_t)(e->key_bytes + e->payload_bytes);
    unsigned char *data = malloc(bytes ? bytes : 1), digest[JB_SHA256_BYTES];
    JB_RETURN_IF(!data, JB_ERR_OUT_OF_MEMORY, "no memory to read a bundle entry");
    const char *bad = NULL;
    if (!read_entry_bytes(b->fd, data, bytes, e->offset)) {
        int err = errno;
        if (err && jb__errno_is_transient(err)) { /* not now: the entry stays as good as it was */
            free(data);
            return jb__fail(JB_ERR_SYSTEM, "the bundle %s: reading an entry failed for now: %s",
                            b->path, strerror(err));
        }
        bad = err ? "cannot be read" : "cannot be read whole (was the bundle cut short?)";
    } else {
        jb__sha256(data, bytes, digest);
        if (memcmp(digest, e->checksum, sizeof digest) != 0)
            bad = "fails its SHA-256 checksum";
        jb__sha256(data, (size_t)e->key_bytes, digest);
        if (!bad && memcmp(digest, e->digest, sizeof digest) != 0)
            bad = "is filed under another key";
    }
    if (bad) {
        free(data);
        entry_rejected(b, i, bad);
        return jb__fail(JB_ERR_INVALID_ARGUMENT, "the bundle %s: an entry %s", b->path, bad);
    }
    *out = data;
    return JB_OK;
}

const jb_bundle_entry *jb__bundle_entry(const jb_bundle *b, size_t i)
{
    return &b->entries[i];
}

size_t jb__bundle_source_count(const jb_bundle *b)
{
    return b->num_sources;
}

static int by_entry(const void *digest, const void *row)
{
    return memcmp(digest, ((const jb_bundle_source *)row)->entry, JB_SHA256_BYTES);
}

int jb__bundle_source(jb_bundle *b, size_t i, const unsigned char *key, size_t key_bytes,
                      jb_source_record_rules rules, bool *has,
                      unsigned char record[JB_SHA256_BYTES], jb_source_record *out)
{
    memset(out, 0, sizeof *out);
    const jb_bundle_source *s =
        b->num_sources ? bsearch(b->entries[i].digest, b->sources, b->num_sources,
                                 sizeof *b->sources, by_entry)
                       : NULL;
    *has = s != NULL;
    if (!s)
        return JB_OK;
    memcpy(record, s->record, JB_SHA256_BYTES);
    char entry[2 * JB_SHA256_BYTES + 1], hex[2 * JB_SHA256_BYTES + 1];
    jb__hex(b->entries[i].digest, JB_SHA256_BYTES, entry);
    jb__hex(s->record, JB_SHA256_BYTES, hex);
    JB_RETURN_IF(s->bytes > JB_SOURCE_RECORD_MAX_BYTES, JB_ERR_INVALID_ARGUMENT,
                 "the bundle %s: source record %s of entry %.32s is %llu bytes, past the %u a "
                 "record may have; refused, nothing read",
                 b->path, hex, entry, (unsigned long long)s->bytes,
                 (unsigned)JB_SOURCE_RECORD_MAX_BYTES);
    JB_RETURN_IF(!inside(s->offset, s->bytes, JB_BUNDLE_HEADER_BYTES, b->entries_end),
                 JB_ERR_INVALID_ARGUMENT,
                 "the bundle %s: source record %s of entry %.32s lies outside its entries; "
                 "refused, nothing read",
                 b->path, hex, entry);
    unsigned char *data = malloc(s->bytes ? (size_t)s->bytes : 1);
    JB_RETURN_IF(!data, JB_ERR_OUT_OF_MEMORY, "no memory to read a bundle's source record");
    if (!read_entry_bytes(b->fd, data, (size_t)s->bytes, s->offset)) {
        int err = errno;
        free(data);
        return jb__fail(JB_ERR_SYSTEM, "the bundle %s: source record %s cannot be read: %s",
                        b->path, hex, err ? strerror(err) : "the bundle was cut short");
    }
    int status = jb__source_record_check(s->record, data, (size_t)s->bytes, rules, out);
    if (status != JB_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", jb_last_error_message());
        return jb__fail(status, "the bundle %s, entry %.32s: %s", b->path, entry, why);
    }
    jb_key_fields f;
    bool parsed = jb__key_fields_parse(key, key_bytes, &f) == JB_OK;
    bool of_key = parsed && jb__source_record_of_key(out, &f);
    if (parsed)
        jb__key_fields_free(&f);
    if (!of_key) {
        status = jb__fail(JB_ERR_INVALID_ARGUMENT,
                          "the bundle %s: source record %s is not of entry %.32s's kernel (%s "
                          "module '%s', or another source); refused",
                          b->path, hex, entry, out->backend, out->module);
        jb__source_record_free(out);
    }
    return status;
}

/* The entry filed under `digest`, or -1. */
static ptrdiff_t find(const jb_bundle *b, const unsigned char *digest)
{
    size_t lo = 0, hi = b->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = memcmp(b->entries[mid].digest, digest, JB_SHA256_BYTES);
        if (c == 0)
            return (ptrdiff_t)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* ---- the read-only tiers ---- */

/* Adds `b` as a tier; false (b freed) when it is one already, or all slots are taken. */
static int add_tier(jb_bundle *b)
{
    for (size_t i = 0; i < MAX_BUNDLES; i++) {
        jb_bundle *current = atomic_load(&tiers[i]);
        if (current && current->dev == b->dev && current->ino == b->ino) {
            jb__bundle_free(b);
            return JB_OK; /* the same file twice: once is enough */
        }
        jb_bundle *empty = NULL;
        if (!current && atomic_compare_exchange_strong(&tiers[i], &empty, b))
            return JB_OK;
        if (!current) /* another thread took this slot meanwhile: look at it again */
            i--;
    }
    char *path = b->path ? jb__strdup(b->path) : NULL;
    jb__bundle_free(b);
    int status = jb__fail(JB_ERR_UNSUPPORTED, "cannot add the bundle %s: %d are in use already",
                          path ? path : "", MAX_BUNDLES);
    free(path);
    return status;
}

/* JITBRIDGE_CACHE_BUNDLE=FILE[:FILE...]: a bundle that cannot be used is a warning. */
static void add_environment_bundles(void)
{
    const char *list = secure_getenv("JITBRIDGE_CACHE_BUNDLE");
    char *copy = list && *list ? jb__strdup(list) : NULL;
    for (char *save = NULL, *p = copy ? strtok_r(copy, ":", &save) : NULL; p;
         p = strtok_r(NULL, ":", &save)) {
        jb_bundle *b;
        char absolute[PATH_MAX]; /* a relative one: from where the process started */
        if (!jb__path_from_start(p, absolute, sizeof absolute))
            jb__warn("JITBRIDGE_CACHE_BUNDLE: %s cannot be made absolute (%s); its kernels are "
                     "compiled instead",
                     p, strerror(errno));
        else if (jb__bundle_open(absolute, "JITBRIDGE_CACHE_BUNDLE", &b) != JB_OK ||
                 add_tier(b) != JB_OK)
            jb__warn("JITBRIDGE_CACHE_BUNDLE: %s; its kernels are compiled instead",
                     jb_last_error_message());
    }
    free(copy);
}

bool jb__bundles_present(void)
{
    jb__warn_hold();
    pthread_once(&environment_once, add_environment_bundles);
    jb__warn_release();
    return atomic_load(&tiers[0]) != NULL;
}

jb_status jb_disk_cache_add_bundle(const char *path)
{
    jb__bundles_present(); /* the environment's come first */
    jb_bundle *b;
    JB_FORWARD_IF_ERROR(jb__bundle_open(path, "the bundle's path", &b));
    return add_tier(b);
}

bool jb__bundle_compiler(const char *backend, const char *target, const char *files, char *out,
                         size_t len)
{
    jb__bundles_present();
    jb_strbuf head = {0};
    jb__strbuf_appendf(&head, "built %s %s ", backend, target);
    size_t files_len = strlen(files);
    for (size_t t = 0; !head.failed && t < MAX_BUNDLES; t++) {
        jb_bundle *b = atomic_load(&tiers[t]);
        if (!b)
            break;
        for (const char *line = b->fingerprints; *line;) {
            size_t line_len = strcspn(line, "\n");
            const char *compiler = line + head.len;
            size_t compiler_len = line_len - head.len;
            /* "<version>; <files>": the version is what is sought. */
            if (line_len > head.len + files_len + 2 && strncmp(line, head.data, head.len) == 0 &&
                memcmp(compiler + compiler_len - files_len - 2, "; ", 2) == 0 &&
                memcmp(compiler + compiler_len - files_len, files, files_len) == 0 &&
                compiler_len - files_len - 2 < len) {
                snprintf(out, len, "%.*s", (int)(compiler_len - files_len - 2), compiler);
                jb__strbuf_free(&head);
                return true;
            }
            line += line_len + (line[line_len] == '\n');
        }
    }
    jb__strbuf_free(&head);
    return false;
}

bool jb__bundle_find(const unsigned char *digest, unsigned char **data, size_t *key_bytes,
                     jb_blob *payload, jb_bundle_ref *ref)
{
    for (size_t t = 0; t < MAX_BUNDLES; t++) {
        jb_bundle *b = atomic_load(&tiers[t]);
        if (!b)
            break;
        ptrdiff_t i = find(b, digest);
        if (i < 0 || jb__bundle_read_entry(b, (size_t)i, data) != JB_OK)
            continue;
        const jb_bundle_entry *e = &b->entries[i];
        *key_bytes = (size_t)e->key_bytes;
        payload->data = *data + e->key_bytes;
        payload->size = (size_t)e->payload_bytes;
        ref->bundle = b;
        ref->entry = (size_t)i;
        return true;
    }
    return false;
}

bool jb__bundle_load(const jb_disk_key *key, jb_blob *out, jb_bundle_ref *ref)
{
    unsigned char *data;
    size_t key_bytes;
    jb_blob payload;
    if (!jb__bundle_find(key->digest, &data, &key_bytes, &payload, ref))
        return false;
    if (key_bytes != key->bytes || memcmp(data, key->text, key->bytes) != 0) {
        free(data); /* another key with this SHA-256: not a collision anyone can make */
        return false;
    }
    memmove(data, payload.data, payload.size);
    out->data = data;
    out->size = payload.size;
    return true;
}

void jb__bundle_accept(void)
{
    atomic_fetch_add(&counter_bundle_hits, 1);
}

void jb__bundle_reject(const jb_bundle_ref *ref, const char *why)
{
    entry_rejected(ref->bundle, ref->entry, why);
}

void jb__bundle_counters(uint64_t *hits, uint64_t *rejected)
{
    *hits = atomic_load(&counter_bundle_hits);
    *rejected = atomic_load(&counter_bundle_rejected);
}

void jb__bundle_counters_reset(void)
{
    atomic_store(&counter_bundle_hits, 0);
    atomic_store(&counter_bundle_rejected, 0);
}

/* ---- import ---- */

/* Puts entry i's record (if the bundle carries one) into sources/: counted in *records, or,
 * refused or not put there (a full disk, sources/ not a folder of ours), in *refused with one
 * warning. The entry is imported either way. */
static void import_source(jb_bundle *b, size_t i, const unsigned char *key, size_t key_bytes,
                          jb_source_record_rules rules, uint64_t *records, uint64_t *refused)
{
    bool has;
    unsigned char digest[JB_SHA256_BYTES];
    jb_source_record r;
    if (jb__bundle_source(b, i, key, key_bytes, rules, &has, digest, &r) != JB_OK) {
        (*refused)++;
        jb__warn("%s; the record is not imported (its entry is)", jb_last_error_message());
        return;
    }
    if (!has)
        return;
    size_t len;
    char *bytes = jb__source_record_bytes(&r, digest, &len), hex[2 * JB_SHA256_BYTES + 1];
    if (bytes && jb__source_record_put(bytes, len, r.module, hex)) {
        (*records)++;
    } else {
        (*refused)++;
        jb__warn("the bundle %s: the source record of module '%s' could not be put into the "
                 "cache folder's " JB_SOURCE_RECORD_DIR "/ (%s); its entry is imported",
                 b->path, r.module, bytes ? strerror(errno) : "no memory");
    }
    free(bytes);
    jb__source_record_free(&r);
}

int jb__bundle_import(uint64_t *imported, uint64_t *skipped, uint64_t *records,
                      uint64_t *refused, const char *path, jb_source_record_rules rules)
{
    *imported = *skipped = *records = *refused = 0;
    jb_bundle *b;
    JB_FORWARD_IF_ERROR(jb__bundle_open(path, "the bundle's path", &b));
    int status = JB_OK;
    if (jb__disk_tmp_fd() < 0)
        status = jb__fail(JB_ERR_UNSUPPORTED, "cannot import %s: the disk cache is %s", path,
                          jb_disk_cache_state());
    for (size_t i = 0; status == JB_OK && i < b->count; i++) {
        unsigned char *data;
        jb_key_fields fields;
        if (jb__bundle_read_entry(b, i, &data) != JB_OK) {
            (*skipped)++;
            continue;
        }
        const jb_bundle_entry *e = &b->entries[i];
        if (jb__key_fields_parse(data, (size_t)e->key_bytes, &fields) != JB_OK) {
            entry_rejected(b, i, "holds no key of this library's format");
            (*skipped)++;
            free(data);
            continue;
        }
        jb__key_fields_free(&fields);
        jb_disk_key key = {.text = (char *)data, .bytes = (size_t)e->key_bytes};
        jb__disk_key_name(&key);
        jb_blob code = {data + e->key_bytes, (size_t)e->payload_bytes};
        jb__disk_store(&key, &code);
        struct stat st; /* a store that failed says so only through the state: look */
        if (jb__disk_tmp_fd() < 0 ||
            fstatat(jb__disk_dir_fd(), key.file, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(st.st_mode)) {
            status = jb__fail(JB_ERR_SYSTEM, "importing %s stopped after %llu entries: the disk "
                              "cache is %s", path, (unsigned long long)*imported,
                              jb_disk_cache_state());
        } else {
            (*imported)++;
            if (rules)
                import_source(b, i, data, (size_t)e->key_bytes, rules, records, refused);
        }
        free(data);
    }
    jb__bundle_free(b);
    return status;
}
