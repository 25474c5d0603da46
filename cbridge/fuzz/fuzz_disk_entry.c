/*
 * libFuzzer target: the disk-cache entry parser and the key text parser. Any bytes at all must be
 * judged well-formed or not without reading out of bounds, an accepted entry's payload must lie
 * inside the input, and an accepted key's source and entry names inside its copy.
 */
#include "../src/kernels/kernels.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly `size` bytes, so that AddressSanitizer sees any read past the end. */
    unsigned char *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    size_t payload_at = jb__disk_entry_check(copy, size, NULL);
    if (payload_at > size)
        abort();
    static const char key_text[] = "jitbridge cache key 2\nabi 2\nbackend cpu\n";
    jb_disk_key key = {.text = (char *)key_text, .bytes = sizeof key_text - 1,
                       .file = "fuzz.jbc"};
    payload_at = jb__disk_entry_check(copy, size, &key);
    if (payload_at > size)
        abort();
    jb_key_fields fields;
    if (jb__key_fields_parse(copy, size, &fields) == JB_OK) {
        char **names = NULL;
        if (fields.source + fields.source_bytes > fields.copy + size ||
            jb__key_fields_entries(&fields, &names) != JB_OK)
            abort();
        size_t n = 0;
        while (names[n])
            n++;
        if (n != fields.num_entries)
            abort();
        jb__key_entries_free(names);
        jb__key_fields_free(&fields);
    }
    free(copy);
    return 0;
}
