/*
 * Source records: what it takes to build a kernel again (its generated source or a whole-source
 * module's source, entry names, compile flags and options, backend and dialect; never compiled
 * code), kept in the cache folder's sources/ under the SHA-256 of their content, so that a
 * manifest line can name one and a later process (the compile farm) can rebuild the kernel.
 *
 * Format: text lines "jbs1", "backend B", "dialect D", "module M", one "entry E" per entry,
 * "flags F", one "option O" per compiler option, an optional "target T", "source N", then the N
 * bytes of the source and nothing after them. Every line's value is printable ASCII.
 *
 * Written as entries are: a random temporary in the folder's tmp/, fsynced, renamed into place,
 * and only in a folder marked as the cache's own (CACHEDIR.TAG), where sources/ is made 0700;
 * best effort (a failure warns once and never fails a build). Read through the folder's handle,
 * the record opened without following a link or blocking and checked on its handle (regular,
 * ours, not writable by others, one link), at most JB_SOURCE_RECORD_MAX_BYTES, its content
 * hashed against its name, parsed strictly, then put through the caller's rules (the kernels
 * layer's identifier and option checks). A record is data: nothing in it runs while it is read.
 */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RECORD_TAG "jbs1"

static const char *dialect_word(jb_source_dialect dialect)
{
    return dialect == JB_DIALECT_C ? "c" : "cuda";
}

/* Whether `s` is one non-empty line of printable ASCII (a record's field value). */
static bool value_ok(const char *s, size_t len)
{
    if (!len)
        return false;
    for (size_t i = 0; i < len; i++)
        if (s[i] < 0x20 || s[i] > 0x7e)
            return false;
    return true;
}

/* The folder's sources/ (made 0700 when `create`), which must be ours and closed to others:
 * its fd, or -1 with errno (ENOENT: none yet; EPERM: not ours alone). */
static int open_sources_dir(int dir, bool create)
{
    return jb__disk_open_own_folder(dir, JB_SOURCE_RECORD_DIR, create, 077);
}

/* The record's text: false when a field could not be written as one line (or no memory). */
static bool record_text(jb_strbuf *sb, const char *backend, jb_source_dialect dialect,
                        const char *module_name, const char *const *entries, size_t num_entries,
                        const jb_compile_options *options, const char *source)
{
    bool ok = value_ok(backend, strlen(backend)) && value_ok(module_name, strlen(module_name)) &&
              num_entries >= 1 && num_entries <= JB_SOURCE_RECORD_MAX_ENTRIES &&
              options->num_extra <= JB_SOURCE_RECORD_MAX_OPTIONS && !options->num_include_dirs;
    jb__strbuf_appendf(sb, RECORD_TAG "\nbackend %s\ndialect %s\nmodule %s\n", backend,
                       dialect_word(dialect), module_name);
    for (size_t i = 0; ok && i < num_entries; i++) {
        ok = value_ok(entries[i], strlen(entries[i]));
        jb__strbuf_appendf(sb, "entry %s\n", entries[i]);
    }
    jb__strbuf_appendf(sb, "flags %u\n", options->flags);
    for (size_t i = 0; ok && i < options->num_extra; i++) {
        ok = value_ok(options->extra[i], strlen(options->extra[i]));
        jb__strbuf_appendf(sb, "option %s\n", options->extra[i]);
    }
    if (options->target_arch) {
        ok = ok && value_ok(options->target_arch, strlen(options->target_arch));
        jb__strbuf_appendf(sb, "target %s\n", options->target_arch);
    }
    jb__strbuf_appendf(sb, "source %zu\n", strlen(source));
    jb__strbuf_append(sb, source);
    return ok && !sb->failed && sb->len <= JB_SOURCE_RECORD_MAX_BYTES;
}

/* Whether `name` in `sources` already holds exactly `data` (a record is content-addressed: a
 * good copy is never written again). */
static bool already_stored(int sources, const char *name, const char *data, size_t len)
{
    struct stat st;
    const char *problem;
    int fd = jb__disk_open_entry(sources, name, &st, &problem);
    if (fd < 0)
        return false;
    bool same = false;
    if ((size_t)st.st_size == len) {
        size_t size;
        unsigned char *stored = jb__disk_read_entry(fd, &st, &size);
        same = stored && size == len && memcmp(stored, data, len) == 0;
        free(stored);
    }
    close(fd);
    return same;
}

static atomic_bool store_warned;

/* Writes the record's bytes under `file` in sources/: 0, or the errno of the failing step. */
static int write_record(int sources, const char *file, const char *data, size_t len)
{
    int tmp = jb__disk_tmp_fd();
    if (tmp < 0)
        return EROFS; /* storing is stopped: the cache folder's own warning said why */
    if (already_stored(sources, file, data, len))
        return 0;
    char name[64];
    int fd = jb__disk_create_temporary(tmp, name, sizeof name);
    if (fd < 0)
        return errno;
    bool ok = jb__write_all(fd, data, len) && fsync(fd) == 0;
    int err = errno;
    ok = close(fd) == 0 && ok;
    /* Renaming replaces a link or FIFO at the name itself, never what it leads to (sources/ is
     * made only in a folder marked as the cache's own). */
    if (ok && renameat(tmp, name, sources, file) == 0)
        return 0;
    err = errno ? errno : EIO;
    unlinkat(tmp, name, 0);
    return err;
}

bool jb__source_record_store(const char *backend, jb_source_dialect dialect,
                             const char *module_name, const char *const *entries,
                             size_t num_entries, const jb_compile_options *options,
                             const char *source, char hex[2 * JB_SHA256_BYTES + 1])
{
    jb_strbuf sb = {0};
    bool ok = record_text(&sb, backend, dialect, module_name, entries, num_entries, options,
                          source) &&
              jb__source_record_put(sb.data, sb.len, module_name, hex);
    jb__strbuf_free(&sb);
    return ok;
}

bool jb__source_record_put(const char *data, size_t len, const char *module_name,
                           char hex[2 * JB_SHA256_BYTES + 1])
{
    /* Only in a folder marked as the cache's own: a shared one ($HOME) gets no sources/. */
    int dir = jb__disk_dir_fd();
    if (dir < 0 || !jb__disk_folder_is_ours() || len > JB_SOURCE_RECORD_MAX_BYTES) {
        errno = len > JB_SOURCE_RECORD_MAX_BYTES ? EFBIG : EPERM;
        return false;
    }
    unsigned char digest[JB_SHA256_BYTES];
    jb__sha256(data, len, digest);
    jb__hex(digest, JB_SHA256_BYTES, hex);
    char file[2 * JB_SHA256_BYTES + sizeof JB_SOURCE_RECORD_SUFFIX];
    snprintf(file, sizeof file, "%s%s", hex, JB_SOURCE_RECORD_SUFFIX);
    int sources = open_sources_dir(dir, true);
    int err = sources < 0 ? errno : write_record(sources, file, data, len);
    if (sources >= 0)
        close(sources);
    if (err && !jb__errno_is_transient(err) && err != EROFS &&
        !atomic_exchange(&store_warned, true))
        jb__warn("the source record of module '%s' could not be stored in the cache folder's "
                 JB_SOURCE_RECORD_DIR "/ (%s); manifest lines name no source records",
                 module_name, strerror(err));
    errno = err;
    return err == 0;
}

/* ---- reading ---- */

typedef struct cursor {
    char *at, *end;
    const char *problem;
} cursor;

/* The value of the next line if it starts with `word` and a space (NUL-terminated in place);
 * NULL otherwise, leaving the cursor where it was. */
static const char *field(cursor *c, const char *word)
{
    size_t wlen = strlen(word);
    char *nl = memchr(c->at, '\n', (size_t)(c->end - c->at));
    if (!nl || (size_t)(nl - c->at) <= wlen + 1 || strncmp(c->at, word, wlen) != 0 ||
        c->at[wlen] != ' ')
        return NULL;
    char *value = c->at + wlen + 1;
    if (!value_ok(value, (size_t)(nl - value)))
        return NULL;
    *nl = '\0';
    c->at = nl + 1;
    return value;
}

/* A decimal number of at most `max` (no sign, no leading zero but "0"); false otherwise. */
static bool number(const char *s, unsigned long long max, unsigned long long *out)
{
    unsigned long long v = 0;
    if (!*s || (s[0] == '0' && s[1]))
        return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (max - (unsigned)(*s - '0')) / 10)
            return false;
        v = v * 10 + (unsigned)(*s - '0');
    }
    *out = v;
    return true;
}

static const char *parse(char *text, size_t len, jb_source_record *r)
{
    cursor c = {text, text + len, NULL};
    char *nl = memchr(text, '\n', len);
    if (!nl || (size_t)(nl - text) != strlen(RECORD_TAG) || memcmp(text, RECORD_TAG, 4) != 0)
        return "does not start with " RECORD_TAG;
    c.at = nl + 1;
    if (!(r->backend = field(&c, "backend")))
        return "has no backend line";
    const char *dialect = field(&c, "dialect");
    if (!dialect || (strcmp(dialect, "c") != 0 && strcmp(dialect, "cuda") != 0))
        return "has no dialect line of c or cuda";
    r->dialect = strcmp(dialect, "c") == 0 ? JB_DIALECT_C : JB_DIALECT_CUDA;
    if (!(r->module = field(&c, "module")))
        return "has no module line";
    for (const char *e; (e = field(&c, "entry"));) {
        if (r->num_entries == JB_SOURCE_RECORD_MAX_ENTRIES)
            return "names more entries than a module may have";
        r->entries[r->num_entries++] = e;
    }
    if (!r->num_entries)
        return "names no entry";
    const char *flags = field(&c, "flags");
    unsigned long long value;
    if (!flags || !number(flags, 0xffffffffu, &value))
        return "has no flags line of a 32-bit number";
    r->flags = (unsigned)value;
    for (const char *o; (o = field(&c, "option"));) {
        if (r->num_options == JB_SOURCE_RECORD_MAX_OPTIONS)
            return "names more compiler options than a kernel may have";
        r->options[r->num_options++] = o;
    }
    r->target_arch = field(&c, "target");
    const char *bytes = field(&c, "source");
    if (!bytes || !number(bytes, JB_SOURCE_RECORD_MAX_BYTES, &value))
        return "has no source line with its length";
    if ((size_t)(c.end - c.at) != value)
        return "holds a source of another length than it says (cut short, or with more after "
               "it)";
    if (!value || memchr(c.at, '\0', (size_t)value))
        return "holds an empty source or one with a NUL byte";
    r->source = c.at;
    r->source_bytes = (size_t)value;
    return NULL;
}

void jb__source_record_free(jb_source_record *r)
{
    if (r) {
        free(r->text);
        memset(r, 0, sizeof *r);
    }
}

int jb__source_record_read(const unsigned char digest[JB_SHA256_BYTES],
                           jb_source_record_rules rules, jb_source_record *out)
{
    memset(out, 0, sizeof *out);
    char hex[2 * JB_SHA256_BYTES + 1], file[2 * JB_SHA256_BYTES + sizeof JB_SOURCE_RECORD_SUFFIX];
    jb__hex(digest, JB_SHA256_BYTES, hex);
    snprintf(file, sizeof file, "%s%s", hex, JB_SOURCE_RECORD_SUFFIX);
    JB_RETURN_IF(!rules, JB_ERR_INVALID_ARGUMENT, "source record %s: no rules to check it by",
                 hex);
    int dir = jb__disk_dir_fd();
    JB_RETURN_IF(dir < 0, JB_ERR_UNSUPPORTED,
                 "source record %s: the cache folder, where records are kept, is off", hex);
    int sources = open_sources_dir(dir, false);
    JB_RETURN_IF(sources < 0, errno == ENOENT ? JB_ERR_INVALID_ARGUMENT : JB_ERR_SYSTEM,
                 "source record %s: the cache folder's " JB_SOURCE_RECORD_DIR "/ %s", hex,
                 errno == ENOENT ? "does not exist" : errno == EPERM
                                                        ? "is not ours alone (owner or mode)"
                                                        : strerror(errno));
    struct stat st;
    const char *problem;
    int fd = jb__disk_open_entry(sources, file, &st, &problem);
    int open_errno = errno;
    close(sources);
    JB_RETURN_IF(fd < 0 && problem, JB_ERR_INVALID_ARGUMENT,
                 "source record %s %s; refused, nothing read", hex, problem);
    JB_RETURN_IF(fd < 0, open_errno == ENOENT ? JB_ERR_INVALID_ARGUMENT : JB_ERR_SYSTEM,
                 "source record %s: %s", hex,
                 open_errno == ENOENT ? "missing from the cache folder" : strerror(open_errno));
    if ((uint64_t)st.st_size > JB_SOURCE_RECORD_MAX_BYTES) {
        close(fd);
        return jb__fail(JB_ERR_INVALID_ARGUMENT,
                        "source record %s is %lld bytes, past the %u a record may have; "
                        "refused, nothing read",
                        hex, (long long)st.st_size, (unsigned)JB_SOURCE_RECORD_MAX_BYTES);
    }
    size_t size;
    unsigned char *data = jb__disk_read_entry(fd, &st, &size);
    int read_errno = errno;
    close(fd);
    JB_RETURN_IF(!data, read_errno == ENOMEM ? JB_ERR_OUT_OF_MEMORY : JB_ERR_SYSTEM,
                 "source record %s cannot be read: %s", hex, strerror(read_errno));
    return jb__source_record_check(digest, data, size, rules, out);
}

int jb__source_record_check(const unsigned char digest[JB_SHA256_BYTES], unsigned char *data,
                            size_t size, jb_source_record_rules rules, jb_source_record *out)
{
    memset(out, 0, sizeof *out);
    char hex[2 * JB_SHA256_BYTES + 1];
    jb__hex(digest, JB_SHA256_BYTES, hex);
    if (!rules || size > JB_SOURCE_RECORD_MAX_BYTES) {
        free(data);
        JB_RETURN_IF(!rules, JB_ERR_INVALID_ARGUMENT, "source record %s: no rules to check it by",
                     hex);
        return jb__fail(JB_ERR_INVALID_ARGUMENT,
                        "source record %s is past the %u bytes a record may have; refused", hex,
                        (unsigned)JB_SOURCE_RECORD_MAX_BYTES);
    }
    unsigned char actual[JB_SHA256_BYTES];
    jb__sha256(data, size, actual);
    if (memcmp(actual, digest, JB_SHA256_BYTES) != 0) {
        free(data);
        return jb__fail(JB_ERR_INVALID_ARGUMENT,
                        "source record %s: its content does not hash to its name (changed or "
                        "cut after it was written); refused",
                        hex);
    }
    /* One byte more for the NUL that ends the source (the last field). */
    out->text = realloc(data, size + 1);
    if (!out->text) {
        free(data);
        return jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory to read source record %s", hex);
    }
    out->text[size] = '\0';
    const char *bad = parse(out->text, size, out);
    if (bad) {
        jb__source_record_free(out);
        return jb__fail(JB_ERR_INVALID_ARGUMENT, "source record %s %s; refused", hex, bad);
    }
    int status = rules(out);
    if (status != JB_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", jb_last_error_message());
        jb__source_record_free(out);
        return jb__fail(status, "source record %s refused: %s", hex, why);
    }
    return JB_OK;
}
