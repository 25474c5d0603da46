/*
 * Coverage: before a server seals (jb_seal), which kernels of a manifest its first launches would
 * find without a compile (in memory, in the cache folder, in a bundle) and which would compile.
 * Nothing is compiled or loaded. A stored entry counts only when its key is the one this process
 * makes for that module on the device (prewarm.c: the same compiler, architecture and library
 * ABI): code made by another compiler sits under another key, and the launch would compile.
 * Without a device, each line is checked on this host's device of the backend and architecture
 * it names: a worker launches each kernel on its own device, not on the default one.
 */
#include "cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct coverage {
    jb_device *dev; /* the one device checked; NULL: each line's own device on this host */
    jb_coverage_result *result;
    jb_coverage_fn fn;
    void *user_data;
    jb_table seen; /* the digests reported: a manifest names a kernel once per process */
} coverage;

static bool digest_equal(const void *stored, const void *key)
{
    return memcmp(stored, key, JB_SHA256_BYTES) == 0;
}

/* Where a stored copy of the kernel is that this process would load; JB_COVERAGE_COMPILE with
 * the reason in `why` when there is none. */
static jb_coverage_source stored_source(jb_device *dev, const unsigned char *digest, char *why,
                                        size_t why_len)
{
    unsigned char *data = NULL;
    const unsigned char *key;
    size_t key_bytes;
    jb_coverage_source source = JB_COVERAGE_DISK;
    if (!jb__folder_entry_key(digest, &data, &key, &key_bytes)) {
        jb_blob payload;
        jb_bundle_ref ref;
        source = JB_COVERAGE_BUNDLE;
        if (!jb__bundle_find(digest, &data, &key_bytes, &payload, &ref)) {
            snprintf(why, why_len, "in neither the cache folder nor a bundle");
            return JB_COVERAGE_COMPILE;
        }
        key = data;
    }
    bool ours = false;
    if (jb__stored_key_is_ours(dev, key, key_bytes, &ours) != JB_OK)
        snprintf(why, why_len, "its key cannot be made here: %s", jb_last_error_message());
    else if (!ours)
        snprintf(why, why_len, "the %s holds it for another compiler or library ABI",
                 source == JB_COVERAGE_DISK ? "cache folder" : "bundle");
    free(data);
    return ours ? source : JB_COVERAGE_COMPILE;
}

/* This host's device of line's backend and architecture (the first, where several are), set up
 * if it was not; NULL, with why this host has none in `why`, when there is none. */
static jb_device *host_device(const jb_manifest_line *line, char *why, size_t why_len)
{
    jb_saved_error saved; /* a device this host lacks is an answer, not the caller's failure */
    jb__error_save(&saved);
    jb_device *found = NULL;
    int count = 0;
    /* "gpu" names no backend in a manifest: a device lookup would take it for the default GPU. */
    int status = strcmp(line->backend, "gpu") == 0
                     ? jb__fail(JB_ERR_INVALID_ARGUMENT, "unknown backend 'gpu'")
                     : (int)jb_backend_device_count(&count, line->backend);
    for (int i = 0; status == JB_OK && !found && i < count; i++) {
        char name[64];
        jb_device *dev = NULL;
        snprintf(name, sizeof name, "%s:%d", line->backend, i);
        status = jb_device_lookup(&dev, name);
        if (status == JB_OK && strcmp(dev->arch, line->target) == 0)
            found = dev;
    }
    if (status != JB_OK)
        snprintf(why, why_len, "for %s %s, and this host has no such device: %s", line->backend,
                 line->target, jb_last_error_message());
    else if (!found)
        snprintf(why, why_len, "for %s %s, and this host has no %s device of that architecture",
                 line->backend, line->target, line->backend);
    jb__error_restore(&saved);
    return found;
}

static int manifest_line(void *p, const jb_manifest_line *line)
{
    coverage *c = p;
    /* Keyed: a manifest's digests are whatever its writer chose, shared prefixes included. */
    uint64_t hash = jb__table_hash(line->digest, JB_SHA256_BYTES);
    if (jb__table_find(&c->seen, hash, line->digest, digest_equal))
        return JB_OK;
    unsigned char *copy = malloc(JB_SHA256_BYTES);
    if (!copy || !jb__table_reserve(&c->seen)) {
        free(copy);
        return jb__fail(JB_ERR_OUT_OF_MEMORY, "cache coverage: no memory for the kernels seen");
    }
    memcpy(copy, line->digest, JB_SHA256_BYTES);
    jb__table_add(&c->seen, hash, copy, copy);

    char why[1024] = "", device_name[80] = "";
    jb_coverage_source source;
    jb_device *dev = c->dev;
    if (!dev) {
        dev = host_device(line, why, sizeof why);
    } else if (strcmp(line->backend, dev->backend->name) != 0 ||
               strcmp(line->target, dev->arch) != 0) {
        snprintf(why, sizeof why, "for %s %s, not %s (%s)", line->backend, line->target,
                 dev->name, dev->arch);
        dev = NULL;
    }
    if (!dev) {
        source = JB_COVERAGE_OTHER;
    } else {
        snprintf(device_name, sizeof device_name, "%s:%d", dev->backend->name, dev->ordinal);
        source = jb__jit_module_cached(dev, line->module)
                     ? JB_COVERAGE_MEMORY
                     : stored_source(dev, line->digest, why, sizeof why);
    }
    jb_coverage_result *r = c->result;
    uint64_t *count[] = {[JB_COVERAGE_MEMORY] = &r->memory, [JB_COVERAGE_DISK] = &r->disk,
                         [JB_COVERAGE_BUNDLE] = &r->bundle, [JB_COVERAGE_COMPILE] = &r->compile,
                         [JB_COVERAGE_OTHER] = &r->other};
    (*count[source])++;
    if (!c->fn)
        return JB_OK;
    char hex[2 * JB_SHA256_BYTES + 1];
    jb__hex(line->digest, JB_SHA256_BYTES, hex);
    jb_coverage_kernel kernel = {
        .struct_size = sizeof kernel,
        .source = source,
        .key = hex,
        .backend = line->backend,
        .target = line->target,
        .module = line->module,
        .entries = line->entries,
        .why = why,
        .device = device_name,
    };
    jb_saved_error saved; /* fn may call the library; a failure it leaves is not ours */
    jb__error_save(&saved);
    c->fn(c->user_data, &kernel);
    jb__error_restore(&saved);
    return JB_OK;
}

const char *jb_coverage_source_name(int source)
{
    static const char *const names[] = {
        [JB_COVERAGE_MEMORY] = "memory", [JB_COVERAGE_DISK] = "disk",
        [JB_COVERAGE_BUNDLE] = "bundle", [JB_COVERAGE_COMPILE] = "compile",
        [JB_COVERAGE_OTHER] = "other",
    };
    return source > 0 && (size_t)source < sizeof names / sizeof *names ? names[source] : NULL;
}

jb_status jb_cache_coverage(jb_coverage_result *out, jb_device *device, const char *manifest,
                            jb_coverage_fn fn, void *user_data)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_cache_coverage: out is NULL");
    memset(out, 0, sizeof *out);
    JB_RETURN_IF(!manifest, JB_ERR_INVALID_ARGUMENT, "jb_cache_coverage: manifest is NULL");
    coverage c = {device, out, fn, user_data, {0}};
    jb__disk_cache_usable(); /* set up (one warning if refused) before any entry is looked for */
    jb__bundles_present();
    int status = jb__manifest_read(manifest, manifest_line, &c);
    for (size_t i = 0; i < c.seen.capacity; i++)
        free((void *)c.seen.slots[i].key);
    free(c.seen.slots);
    if (status != JB_OK)
        memset(out, 0, sizeof *out); /* no half answer: a partial count would read as covered */
    return status;
}
