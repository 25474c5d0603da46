/*
 * The compile farm's input: (manifest line, source record) pairs, read through this one function
 * so that another reader (a bundle carrying records) can feed the farm the same list. A pair is
 * listed only when its record passes every check a worker will make again (rules, of its line,
 * rebuilds its line's key on this device), so that a hostile record never reaches a compiler
 * and costs no worker.
 */
#include "kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct reader {
    jb_device *dev;
    jb_farm_list *list;
    jb_prewarm_build_result *out;
} reader;

static bool listed(const jb_farm_list *list, const unsigned char key[JB_SHA256_BYTES])
{
    for (size_t i = 0; i < list->count; i++)
        if (memcmp(list->items[i].key, key, JB_SHA256_BYTES) == 0)
            return true;
    return false;
}

/* Whether the device has the line's kernel already: in memory, or a good entry in the folder. */
static bool present(jb_device *dev, const jb_manifest_line *line)
{
    if (jb__jit_module_cached(dev, line->module))
        return true;
    unsigned char *data = NULL;
    const unsigned char *key;
    size_t key_bytes;
    bool found = jb__folder_entry_key(line->digest, &data, &key, &key_bytes);
    free(data);
    return found;
}

static int add(jb_farm_list *list, const jb_manifest_line *line)
{
    if (list->count == list->capacity) {
        size_t capacity = list->capacity ? 2 * list->capacity : 64;
        jb_farm_item *grown = realloc(list->items, capacity * sizeof *grown);
        JB_RETURN_IF(!grown, JB_ERR_OUT_OF_MEMORY, "no memory for the compile farm's list");
        list->items = grown;
        list->capacity = capacity;
    }
    jb_farm_item *item = &list->items[list->count++];
    memcpy(item->key, line->digest, JB_SHA256_BYTES);
    memcpy(item->record, line->source_digest, JB_SHA256_BYTES);
    snprintf(item->module, sizeof item->module, "%s", line->module);
    return JB_OK;
}

static int read_line(void *p, const jb_manifest_line *line)
{
    reader *rd = p;
    jb_prewarm_build_result *out = rd->out;
    if (strcmp(line->backend, rd->dev->backend->name) != 0 ||
        strcmp(line->target, rd->dev->arch) != 0) {
        out->other++;
        return JB_OK;
    }
    if (listed(rd->list, line->digest))
        return JB_OK; /* several processes' lines of one key */
    if (present(rd->dev, line)) {
        out->present++;
        return JB_OK;
    }
    if (!line->has_source && !line->source_malformed) {
        out->without_source++;
        return JB_OK;
    }
    int status = JB_ERR_INVALID_ARGUMENT;
    if (line->source_malformed) {
        jb__fail(status, "its manifest line names a source record in a malformed field");
    } else {
        jb_source_record r;
        status = jb__source_record_read(line->source_digest, jb__source_record_rules, &r);
        if (status == JB_OK) {
            status = jb__source_record_of_line(&r, line);
            if (status == JB_OK)
                status = jb__source_record_key_check(rd->dev, &r, line->digest);
            jb__source_record_free(&r);
        }
    }
    if (status == JB_OK)
        return add(rd->list, line);
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
    reader rd = {dev, list, out};
    int status = jb__manifest_read(path, read_line, &rd);
    if (status != JB_OK)
        jb__farm_list_free(list);
    return status;
}

void jb__farm_list_free(jb_farm_list *list)
{
    free(list->items);
    memset(list, 0, sizeof *list);
}
