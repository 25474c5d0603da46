/*
 * The compile farm's input: (key, source record) pairs of a manifest or a bundle, read through
 * jb__source_list_read (store/source_list.c), the one reader of both. A pair is listed only
 * when its record passes every check a worker will make again (rules, of its kernel, rebuilds
 * its key on this device), so that a hostile record never reaches a compiler and costs no
 * worker. A manifest's line must be this device's key; a bundle made elsewhere (another
 * architecture, compiler or library ABI) is rebuilt under the key this device makes from each
 * record, the record put into the cache folder's sources/ where the workers read it.
 */
#include "kernels.h"
#include "../store/sources.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool listed(const jb_farm_list *list, const unsigned char key[JB_SHA256_BYTES])
{
    for (size_t i = 0; i < list->count; i++)
        if (memcmp(list->items[i].key, key, JB_SHA256_BYTES) == 0)
            return true;
    return false;
}

bool jb__farm_entry_stored(const unsigned char *key)
{
    unsigned char *data = NULL;
    const unsigned char *stored;
    size_t key_bytes;
    bool found = jb__folder_entry_key(key, &data, &stored, &key_bytes);
    free(data);
    return found;
}

/* Whether the device has the kernel already: in memory, or a good entry under `key`. */
static bool present(jb_device *dev, const char *module, const unsigned char *key)
{
    return jb__jit_module_cached(dev, module) || jb__farm_entry_stored(key);
}

static int add(jb_farm_list *list, const unsigned char key[JB_SHA256_BYTES],
               const jb_manifest_line *line)
{
    if (list->count == list->capacity) {
        size_t capacity = list->capacity ? 2 * list->capacity : 64;
        jb_farm_item *grown = realloc(list->items, capacity * sizeof *grown);
        JB_RETURN_IF(!grown, JB_ERR_OUT_OF_MEMORY, "no memory for the compile farm's list");
        list->items = grown;
        list->capacity = capacity;
    }
    jb_farm_item *item = &list->items[list->count++];
    memcpy(item->key, key, JB_SHA256_BYTES);
    memcpy(item->record, line->source_digest, JB_SHA256_BYTES);
    snprintf(item->module, sizeof item->module, "%s", line->module);
    return JB_OK;
}

/* A bundle's record into the cache folder's sources/, where a worker reads it by its name. */
static int put_record(const jb_source_item *item)
{
    size_t len;
    char hex[2 * JB_SHA256_BYTES + 1];
    char *bytes = jb__source_record_bytes(&item->record, item->line.source_digest, &len);
    bool put = bytes && jb__source_record_put(bytes, len, item->line.module, hex);
    free(bytes);
    return put ? JB_OK
               : jb__fail(JB_ERR_SYSTEM, "its source record cannot be put into the cache "
                                         "folder's sources/");
}

/* Lists one kernel of the file, or counts why not. */
static int take(jb_device *dev, const jb_source_item *item, jb_farm_list *list,
                jb_prewarm_build_result *out)
{
    const jb_manifest_line *line = &item->line;
    /* A bundle's kernel is rebuilt for this device's architecture; a manifest names its own. */
    if (strcmp(line->backend, dev->backend->name) != 0 ||
        (!list->bundle && strcmp(line->target, dev->arch) != 0)) {
        out->other++;
        return JB_OK;
    }
    unsigned char key[JB_SHA256_BYTES];
    int status = list->bundle ? jb__source_record_key(dev, &item->record, key)
                              : jb__source_record_key_check(dev, &item->record, line->digest);
    if (!list->bundle)
        memcpy(key, line->digest, JB_SHA256_BYTES);
    if (status == JB_OK && listed(list, key))
        return JB_OK; /* several lines or entries of one key */
    /* A bundle entry of this very key is loaded from the bundle itself by the prewarm after. */
    if (status == JB_OK && (present(dev, line->module, key) ||
                            (list->bundle && memcmp(key, line->digest, JB_SHA256_BYTES) == 0))) {
        out->present++;
        return JB_OK;
    }
    if (status == JB_OK && list->bundle)
        status = put_record(item);
    if (status == JB_OK)
        return add(list, key, line);
    if (status == JB_ERR_OUT_OF_MEMORY)
        return status;
    out->refused++;
    jb__warn("cache build: module '%s' is not built from its source record: %s", line->module,
             jb_last_error_message());
    return JB_OK;
}

int jb__farm_items_read(jb_device *dev, const char *path, jb_farm_list *list,
                        jb_prewarm_build_result *out)
{
    memset(list, 0, sizeof *list);
    jb_source_list sources;
    JB_FORWARD_IF_ERROR(jb__source_list_read(&sources, path, jb__source_record_rules));
    list->bundle = sources.bundle;
    out->without_source += sources.without_record;
    out->refused += sources.refused;
    int status = JB_OK;
    for (size_t i = 0; status == JB_OK && i < sources.count; i++)
        status = take(dev, &sources.items[i], list, out);
    jb__source_list_free(&sources);
    if (status != JB_OK)
        jb__farm_list_free(list);
    return status;
}

void jb__farm_list_free(jb_farm_list *list)
{
    free(list->items);
    memset(list, 0, sizeof *list);
}
