/* The open-addressing hash table behind the module cache, the lookaside and the probe kernels;
 * the keyed hash for tables whose keys a file gives. */
#include "base.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

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

/* ---- SipHash-1-3 under a key drawn once per process ---- */

static uint64_t sip_key[2];
static pthread_once_t sip_key_once = PTHREAD_ONCE_INIT;

static void draw_sip_key(void)
{
    if (getrandom(sip_key, sizeof sip_key, GRND_NONBLOCK) == (ssize_t)sizeof sip_key)
        return;
    /* No entropy yet (early boot) or no getrandom: still unknown to whoever wrote the file. */
    sip_key[0] = jb__now_ns() ^ ((uint64_t)getpid() << 32);
    sip_key[1] = jb__fnv1a64(&sip_key[0], sizeof sip_key[0], (uint64_t)(uintptr_t)&sip_key);
}

static inline uint64_t rotl64(uint64_t x, int b)
{
    return (x << b) | (x >> (64 - b));
}

static inline void sip_round(uint64_t v[4])
{
    v[0] += v[1];
    v[1] = rotl64(v[1], 13);
    v[1] ^= v[0];
    v[0] = rotl64(v[0], 32);
    v[2] += v[3];
    v[3] = rotl64(v[3], 16);
    v[3] ^= v[2];
    v[0] += v[3];
    v[3] = rotl64(v[3], 21);
    v[3] ^= v[0];
    v[2] += v[1];
    v[1] = rotl64(v[1], 17);
    v[1] ^= v[2];
    v[2] = rotl64(v[2], 32);
}

static inline uint64_t load_le64(const unsigned char *p, size_t n)
{
    uint64_t m = 0;
    for (size_t i = 0; i < n; i++)
        m |= (uint64_t)p[i] << (8 * i);
    return m;
}

uint64_t jb__siphash13(const uint64_t key[2], const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t v[4] = {key[0] ^ 0x736f6d6570736575ULL, key[1] ^ 0x646f72616e646f6dULL,
                     key[0] ^ 0x6c7967656e657261ULL, key[1] ^ 0x7465646279746573ULL};
    size_t whole = len - len % 8;
    for (size_t i = 0; i < whole; i += 8) {
        uint64_t m = load_le64(p + i, 8);
        v[3] ^= m;
        sip_round(v);
        v[0] ^= m;
    }
    uint64_t last = ((uint64_t)len << 56) | load_le64(p + whole, len % 8);
    v[3] ^= last;
    sip_round(v);
    v[0] ^= last;
    v[2] ^= 0xff;
    sip_round(v);
    sip_round(v);
    sip_round(v);
    return v[0] ^ v[1] ^ v[2] ^ v[3];
}

uint64_t jb__table_hash(const void *data, size_t len)
{
    pthread_once(&sip_key_once, draw_sip_key);
    return jb__siphash13(sip_key, data, len);
}

/* ---- the published table: readers take no lock ---- */

typedef struct published_slot {
    uint64_t hash;
    const void *key;
    _Atomic(void *) value; /* NULL while empty; stored last, with release */
} published_slot;

struct jb_published_slots {
    size_t capacity;
    jb_published_slots *older; /* kept until exit: a reader may still be searching it */
    published_slot slots[];
};

void *jb__published_find(const jb_published_table *t, uint64_t hash, const void *key,
                         jb_table_equal equal)
{
    const jb_published_slots *s = atomic_load_explicit(&t->current, memory_order_acquire);
    if (!s)
        return NULL;
    size_t mask = s->capacity - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        const published_slot *slot = &s->slots[i];
        void *value = atomic_load_explicit(&slot->value, memory_order_acquire);
        if (!value)
            return NULL; /* slots fill in probe order, so an empty one ends the search */
        if (slot->hash == hash && equal(slot->key, key))
            return value;
    }
}

static void publish(jb_published_slots *s, uint64_t hash, const void *key, void *value)
{
    size_t mask = s->capacity - 1, i = hash & mask;
    while (atomic_load_explicit(&s->slots[i].value, memory_order_relaxed))
        i = (i + 1) & mask;
    s->slots[i].hash = hash;
    s->slots[i].key = key;
    atomic_store_explicit(&s->slots[i].value, value, memory_order_release);
}

bool jb__published_add(jb_published_table *t, uint64_t hash, const void *key, void *value)
{
    jb_published_slots *s = atomic_load_explicit(&t->current, memory_order_relaxed);
    if (!s || (t->count + 1) * 2 > s->capacity) {
        size_t capacity = s ? s->capacity * 2 : TABLE_FIRST_CAPACITY;
        size_t bytes;
        jb_published_slots *grown =
            jb__mul_size(capacity, sizeof(published_slot), &bytes) &&
                    jb__add_size(bytes, sizeof *grown, &bytes)
                ? calloc(1, bytes)
                : NULL;
        if (!grown)
            return false;
        grown->capacity = capacity;
        grown->older = s;
        for (size_t i = 0; s && i < s->capacity; i++) {
            void *old = atomic_load_explicit(&s->slots[i].value, memory_order_relaxed);
            if (old)
                publish(grown, s->slots[i].hash, s->slots[i].key, old);
        }
        /* Every copied slot is visible to whoever sees the new array. */
        atomic_store_explicit(&t->current, grown, memory_order_release);
        s = grown;
    }
    publish(s, hash, key, value);
    t->count++;
    return true;
}
