/* The open-addressing hash table behind the module cache, the lookaside and the probe kernels. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define TABLE_FIRST_CAPACITY 16
#define CACHE_LINE 64

static void place(jb_table_slot *slots, size_t capacity, jb_table_slot entry)
{
    size_t mask = capacity - 1, i = entry.hash & mask;
    while (slots[i].value)
        i = (i + 1) & mask;
    slots[i] = entry;
}

bool jb__table_reserve(jb_table *t)
{
    if ((t->count + 1) * 2 <= t->capacity)
        return true;
    size_t capacity = t->capacity ? t->capacity * 2 : TABLE_FIRST_CAPACITY;
    /* Cache-line aligned: a lookup's slot never straddles two lines needlessly. */
    jb_table_slot *slots = aligned_alloc(CACHE_LINE, capacity * sizeof *slots);
    if (!slots)
        return false;
    memset(slots, 0, capacity * sizeof *slots);
    for (size_t i = 0; i < t->capacity; i++)
        if (t->slots[i].value)
            place(slots, capacity, t->slots[i]);
    free(t->slots);
    t->slots = slots;
    t->capacity = capacity;
    return true;
}

void jb__table_add(jb_table *t, uint64_t hash, const void *key, void *value)
{
    place(t->slots, t->capacity, (jb_table_slot){hash, key, value});
    t->count++;
}
