/*
 * Content keys: what decides a module's compiled code, and nothing else. The key text holds the
 * key format, the library's ABI, the backend, the device's architecture, the compiler's
 * identity (its version and a hash of its binary, never the path it was named by: see the
 * backends' compiler_identity), the module name, its entry points and the source. Its SHA-256
 * names the disk cache entry (the first 128 bits) and a bundle's entry (all of it); the whole
 * text is stored with the code and compared on every read, so a hash collision is only a miss.
 * A cache folder or bundle moved to another path, another working directory, the same compiler
 * by another name: the same key. Another compiler, option, define, dtype, architecture or ABI:
 * another key.
 *
 * Since the text also names the module and its entry points, a stored entry says by itself how
 * to load it into the module cache (prewarm, bundles) without the kernel object that built it.
 */
#include "store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef JB_TEST_HOOKS
static int key_abi = JB_ABI_VERSION;
void jb__test_set_key_abi(int abi)
{
    key_abi = abi;
}
#else
#define key_abi JB_ABI_VERSION
#endif

void jb__disk_key_name(jb_disk_key *key)
{
    jb__sha256(key->text, key->bytes, key->digest);
    char hex[2 * JB_SHA256_BYTES + 1];
    jb__hex(key->digest, JB_SHA256_BYTES, hex);
    snprintf(key->file, sizeof key->file, "%.*s" JB_DISK_ENTRY_SUFFIX, JB_DISK_ENTRY_HEX, hex);
}

int jb__disk_key(const char *backend, const char *arch, const char *identity,
                 const char *module_name, const char *const *entry_names, size_t num_entries,
                 const char *source, jb_disk_key *out)
{
    memset(out, 0, sizeof *out);
    int identity_len = (int)strcspn(identity, "\n"); /* one line: the text is parsed by lines */
    jb_strbuf sb = {0};
    jb__strbuf_appendf(&sb, "%s %d\nabi %d\nbackend %s\ntarget %s\ncompiler %.*s\nmodule %s\nentries",
                       JB_KEY_MAGIC, JB_KEY_FORMAT, key_abi, backend, arch, identity_len, identity,
                       module_name);
    for (size_t i = 0; i < num_entries; i++)
        jb__strbuf_appendf(&sb, " %s", entry_names[i]);
    jb__strbuf_appendf(&sb, "\nsource %zu\n", strlen(source));
    jb__strbuf_append(&sb, source);
    JB_RETURN_IF(sb.failed, JB_ERR_OUT_OF_MEMORY, "no memory for a disk cache key");
    out->text = sb.data;
    out->bytes = sb.len;
    jb__disk_key_name(out);
    return JB_OK;
}

int jb__disk_record_key(const char *subject, jb_disk_key *out)
{
    memset(out, 0, sizeof *out);
    jb_strbuf sb = {0};
    jb__strbuf_appendf(&sb, "jitbridge record %d\n%s\n", JB_KEY_FORMAT, subject);
    JB_RETURN_IF(sb.failed, JB_ERR_OUT_OF_MEMORY, "no memory for a cache folder record's key");
    out->text = sb.data;
    out->bytes = sb.len;
    jb__disk_key_name(out);
    snprintf(out->file + JB_DISK_ENTRY_HEX, sizeof out->file - JB_DISK_ENTRY_HEX,
             JB_DISK_RECORD_SUFFIX);
    return JB_OK;
}

void jb__disk_key_free(jb_disk_key *key)
{
    free(key->text);
    key->text = NULL;
}

/* The value of the line "<word> <value>" (or "<word>": "") at *at, NUL-terminated in place,
 * *at moved past it; NULL when the line is another. */
static char *field(char **at, char *end, const char *word)
{
    char *p = *at, *newline = memchr(p, '\n', (size_t)(end - p));
    size_t len = strlen(word);
    if (!newline || (size_t)(newline - p) < len || memcmp(p, word, len) != 0)
        return NULL;
    char *value = p + len;
    if (value < newline && *value++ != ' ')
        return NULL;
    *newline = '\0';
    *at = newline + 1;
    return value;
}

int jb__key_fields_parse(const void *text, size_t bytes, jb_key_fields *out)
{
    memset(out, 0, sizeof *out);
    char *copy = malloc(bytes + 1);
    JB_RETURN_IF(!copy, JB_ERR_OUT_OF_MEMORY, "no memory to read a cache key");
    memcpy(copy, text, bytes);
    copy[bytes] = '\0';
    out->copy = copy;
    char *at = copy, *end = copy + bytes, *magic = field(&at, end, JB_KEY_MAGIC), *abi = NULL,
         *source = NULL;
    char format[16];
    snprintf(format, sizeof format, "%d", JB_KEY_FORMAT);
    bool ok = magic && strcmp(magic, format) == 0 && (abi = field(&at, end, "abi")) &&
              (out->backend = field(&at, end, "backend")) &&
              (out->target = field(&at, end, "target")) &&
              (out->compiler = field(&at, end, "compiler")) &&
              (out->module = field(&at, end, "module")) &&
              (out->entry_list = field(&at, end, "entries")) &&
              (source = field(&at, end, "source"));
    if (ok) {
        char *stop;
        out->abi = strtol(abi, &stop, 10);
        ok = *abi && !*stop;
        unsigned long long len = strtoull(source, &stop, 10);
        ok = ok && *source >= '0' && *source <= '9' && !*stop && len == (size_t)(end - at) &&
             !memchr(at, '\0', (size_t)len);
        out->source = at;
        out->source_bytes = (size_t)len;
    }
    /* Entry names are identifiers: one space between two, none around them. */
    if (ok && *out->entry_list) {
        size_t len = strlen(out->entry_list);
        ok = out->entry_list[0] != ' ' && out->entry_list[len - 1] != ' ' &&
             !strstr(out->entry_list, "  ");
        out->num_entries = 1;
        for (const char *p = out->entry_list; *p; p++)
            out->num_entries += *p == ' ';
    }
    if (!ok) {
        jb__key_fields_free(out);
        return jb__fail(JB_ERR_INVALID_ARGUMENT, "not a jitbridge cache key of format %d",
                        JB_KEY_FORMAT);
    }
    return JB_OK;
}

int jb__key_fields_entries(const jb_key_fields *fields, char ***out)
{
    char **names = calloc(fields->num_entries + 1, sizeof *names);
    char *list = jb__strdup(fields->entry_list);
    if (!names || !list) {
        free(names);
        free(list);
        return jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory for a module's entry names");
    }
    size_t n = 0;
    for (char *save = NULL, *w = strtok_r(list, " ", &save); w; w = strtok_r(NULL, " ", &save))
        names[n++] = w;
    if (n == 0)
        free(list); /* names[0] owns the list otherwise */
    *out = names;
    return JB_OK;
}

void jb__key_entries_free(char **names)
{
    if (names)
        free(names[0]);
    free(names);
}

void jb__key_fields_free(jb_key_fields *fields)
{
    free(fields->copy);
    memset(fields, 0, sizeof *fields);
}
