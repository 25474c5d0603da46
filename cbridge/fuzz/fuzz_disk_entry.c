/*
 * libFuzzer target: the disk-cache entry parser. Any bytes at all must be judged well-formed or
 * not without reading out of bounds, and an accepted entry's payload must lie inside the input.
 */
#include "../src/internal.h"

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
    static const char key_text[] = "jitbridge disk cache format 1\nbackend cpu\n";
    jb_disk_key key = {(char *)key_text, sizeof key_text - 1, "fuzz.jbc"};
    payload_at = jb__disk_entry_check(copy, size, &key);
    if (payload_at > size)
        abort();
    free(copy);
    return 0;
}
