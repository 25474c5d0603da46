/*
 * SHA-256 as FIPS 180-4 defines it (section 6.2), for the checksums of bundle entries and the
 * content keys of the disk cache: a collision of this hash is out of reach, unlike FNV's. The
 * project takes no dependencies, so it is written here and tested against the standard's own
 * examples (tests/test_sha256.c). On x86-64 processors with the SHA extensions (Intel since
 * Goldmont and Ice Lake, AMD since Zen) the rounds run on those instructions, several times
 * faster: a new process checks every bundle entry it loads and hashes every key it makes.
 */
#include "base.h"

#include <string.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define JB_SHA_X86 1
#endif

/* The first 32 bits of the fractional parts of the cube roots of the first 64 primes (4.2.2). */
static const uint32_t round_constants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

/* The first 32 bits of the fractional parts of the square roots of the first 8 primes (5.3.3). */
static const uint32_t initial_state[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                          0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

static inline uint32_t rotr(uint32_t x, unsigned n)
{
    return (x >> n) | (x << (32 - n));
}

static inline uint32_t load_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline void store_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* One 64-byte block into the state (6.2.2): the message schedule, then the 64 rounds. */
static void compress(uint32_t state[8], const unsigned char *block)
{
    uint32_t w[64];
    for (int t = 0; t < 16; t++)
        w[t] = load_be32(block + 4 * t);
    for (int t = 16; t < 64; t++) {
        uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
        uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3], e = state[4], f = state[5],
             g = state[6], h = state[7];
    for (int t = 0; t < 64; t++) {
        uint32_t big_s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
        uint32_t choose = (e & f) ^ (~e & g);
        uint32_t t1 = h + big_s1 + choose + round_constants[t] + w[t];
        uint32_t big_s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
        uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = big_s0 + majority;
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
}

#ifdef JB_SHA_X86
/* The same rounds on the SHA extensions: each _mm_sha256rnds2_epu32 runs two rounds, on the
 * state split as ABEF and CDGH; sha256msg1/msg2 extend the message schedule four words at a
 * time. */
__attribute__((target("sha,sse4.1,ssse3"))) static void compress_sha_ni(uint32_t state[8],
                                                                         const unsigned char *p,
                                                                         size_t blocks)
{
    const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i dcba = _mm_loadu_si128((const __m128i *)&state[0]);
    __m128i hgfe = _mm_loadu_si128((const __m128i *)&state[4]);
    __m128i cdab = _mm_shuffle_epi32(dcba, 0xB1);
    __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);
    __m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
    __m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xF0);
    for (; blocks; blocks--, p += 64) {
        __m128i abef_start = abef, cdgh_start = cdgh, w[16];
        for (int g = 0; g < 16; g++) {
            if (g < 4) {
                w[g] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * g)), byte_swap);
            } else {
                __m128i t = _mm_sha256msg1_epu32(w[g - 4], w[g - 3]);
                t = _mm_add_epi32(t, _mm_alignr_epi8(w[g - 1], w[g - 2], 4));
                w[g] = _mm_sha256msg2_epu32(t, w[g - 1]);
            }
            __m128i k = _mm_loadu_si128((const __m128i *)&round_constants[4 * g]);
            __m128i wk = _mm_add_epi32(w[g], k);
            cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);
            abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0E));
        }
        abef = _mm_add_epi32(abef, abef_start);
        cdgh = _mm_add_epi32(cdgh, cdgh_start);
    }
    __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
    __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
    _mm_storeu_si128((__m128i *)&state[0], _mm_blend_epi16(feba, dchg, 0xF0));
    _mm_storeu_si128((__m128i *)&state[4], _mm_alignr_epi8(dchg, feba, 8));
}

static bool cpu_has_sha_ni(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSSE3) || !(c & bit_SSE4_1))
        return false;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_SHA);
}
#endif

/* 1: the SHA extensions, 0: portable C, -1: not yet asked. */
static atomic_int use_sha_ni = -1;

static void compress_blocks(uint32_t state[8], const unsigned char *p, size_t blocks)
{
#ifdef JB_SHA_X86
    int accelerated = atomic_load_explicit(&use_sha_ni, memory_order_relaxed);
    if (accelerated < 0) {
        accelerated = cpu_has_sha_ni();
        atomic_store_explicit(&use_sha_ni, accelerated, memory_order_relaxed);
    }
    if (accelerated) {
        compress_sha_ni(state, p, blocks);
        return;
    }
#endif
    for (; blocks; blocks--, p += 64)
        compress(state, p);
}

bool jb__sha256_accelerated(void)
{
    uint32_t state[8] = {0};
    unsigned char block[64] = {0};
    compress_blocks(state, block, 0); /* decides, once */
    return atomic_load(&use_sha_ni) == 1;
}

#ifdef JB_TEST_HOOKS
void jb__test_sha256_portable(bool portable)
{
    jb__sha256_accelerated();
    if (portable)
        atomic_store(&use_sha_ni, 0);
    else
        atomic_store(&use_sha_ni, -1);
}
#endif

void jb__sha256_init(jb_sha256 *h)
{
    memcpy(h->state, initial_state, sizeof initial_state);
    h->bytes = 0;
    h->used = 0;
}

void jb__sha256_update(jb_sha256 *h, const void *data, size_t len)
{
    if (len == 0)
        return; /* data may be NULL then: no copy from it, not even of 0 bytes */
    const unsigned char *p = data;
    h->bytes += len;
    if (h->used) {
        size_t take = len < 64 - h->used ? len : 64 - h->used;
        memcpy(h->block + h->used, p, take);
        h->used += take;
        p += take;
        len -= take;
        if (h->used < 64)
            return;
        compress_blocks(h->state, h->block, 1);
        h->used = 0;
    }
    compress_blocks(h->state, p, len / 64);
    p += len / 64 * 64;
    len %= 64;
    memcpy(h->block, p, len);
    h->used = len;
}

void jb__sha256_final(jb_sha256 *h, unsigned char out[JB_SHA256_BYTES])
{
    /* Padding (5.1.1): a 1 bit, zeros to 56 bytes of the last block, the length in bits. */
    uint64_t bits = h->bytes * 8;
    h->block[h->used++] = 0x80;
    if (h->used > 56) {
        memset(h->block + h->used, 0, 64 - h->used);
        compress_blocks(h->state, h->block, 1);
        h->used = 0;
    }
    memset(h->block + h->used, 0, 56 - h->used);
    store_be32(h->block + 56, (uint32_t)(bits >> 32));
    store_be32(h->block + 60, (uint32_t)bits);
    compress_blocks(h->state, h->block, 1);
    for (int i = 0; i < 8; i++)
        store_be32(out + 4 * i, h->state[i]);
    memset(h, 0, sizeof *h);
}

void jb__sha256(const void *data, size_t len, unsigned char out[JB_SHA256_BYTES])
{
    jb_sha256 h;
    jb__sha256_init(&h);
    jb__sha256_update(&h, data, len);
    jb__sha256_final(&h, out);
}

void jb__hmac_sha256_init(jb_hmac_sha256 *h, const void *key, size_t key_len)
{
    unsigned char block[64] = {0};
    if (key_len > sizeof block)
        jb__sha256(key, key_len, block); /* RFC 2104: a key longer than a block is hashed */
    else
        memcpy(block, key, key_len);
    unsigned char inner_pad[64];
    for (size_t i = 0; i < sizeof block; i++) {
        inner_pad[i] = block[i] ^ 0x36;
        h->outer_pad[i] = block[i] ^ 0x5c;
    }
    jb__sha256_init(&h->inner);
    jb__sha256_update(&h->inner, inner_pad, sizeof inner_pad);
    memset(block, 0, sizeof block);
    memset(inner_pad, 0, sizeof inner_pad);
}

void jb__hmac_sha256_update(jb_hmac_sha256 *h, const void *data, size_t len)
{
    jb__sha256_update(&h->inner, data, len);
}

void jb__hmac_sha256_final(jb_hmac_sha256 *h, unsigned char out[JB_SHA256_BYTES])
{
    unsigned char inner_digest[JB_SHA256_BYTES];
    jb__sha256_final(&h->inner, inner_digest);
    jb_sha256 outer;
    jb__sha256_init(&outer);
    jb__sha256_update(&outer, h->outer_pad, sizeof h->outer_pad);
    jb__sha256_update(&outer, inner_digest, sizeof inner_digest);
    jb__sha256_final(&outer, out);
    memset(h, 0, sizeof *h);
    memset(inner_digest, 0, sizeof inner_digest);
}

bool jb__equal_in_constant_time(const void *a, const void *b, size_t n)
{
    const volatile unsigned char *x = a, *y = b; /* volatile: no early exit compiled in */
    unsigned char differ = 0;
    for (size_t i = 0; i < n; i++)
        differ |= x[i] ^ y[i];
    return differ == 0;
}

void jb__hex(const unsigned char *bytes, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}
