/*
 * SHA-256 (src/sha256.c) against the examples of FIPS 180-4's reference material (NIST's
 * "SHA256.pdf" example computations and the long messages of FIPS 180-2 appendix B), then fed in
 * pieces of every size: the digest must not depend on how the message is split. All of it runs
 * twice: on the processor's SHA extensions where it has them, and in portable C (a test hook),
 * and the two must agree on 2,000 messages of every length up to 4 KiB. HMAC-SHA256 (the remote
 * tier's signatures) against RFC 4231.
 */
#include "../src/kernels/kernels.h"
#include "check.h"

#ifndef JB_TEST_HOOKS
#error "test_sha256 needs a JB_TEST_HOOKS build of the library (to choose the portable rounds)"
#endif

#include <stdlib.h>
#include <string.h>

static void digest_hex(const void *data, size_t len, char out[2 * JB_SHA256_BYTES + 1])
{
    unsigned char digest[JB_SHA256_BYTES];
    jb__sha256(data, len, digest);
    jb__hex(digest, sizeof digest, out);
}

typedef struct vector {
    const char *name;
    const char *message;
    const char *digest;
} vector;

static const vector vectors[] = {
    {"empty", "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
    {"one block, \"abc\"", "abc",
     "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
    {"two blocks, 448 bits", "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    {"896 bits",
     "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmn"
     "opqrsmnopqrstnopqrstu",
     "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
};

/* The standard's long message: one million 'a', here in uneven pieces. */
static void million_a(void)
{
    static unsigned char a[1000];
    memset(a, 'a', sizeof a);
    jb_sha256 h;
    jb__sha256_init(&h);
    size_t left = 1000000, piece = 1;
    while (left) {
        size_t n = piece < left ? piece : left;
        jb__sha256_update(&h, a, n);
        left -= n;
        piece = piece * 7 % 997 + 1;
    }
    unsigned char digest[JB_SHA256_BYTES];
    char hex[2 * JB_SHA256_BYTES + 1];
    jb__sha256_final(&h, digest);
    jb__hex(digest, sizeof digest, hex);
    CHECK(strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0,
          "one million 'a': %s", hex);
}

/* Every length from 0 to 300 (each padding case: 55, 56, 63, 64 bytes ...), split at every
 * point: the pieces must hash as the whole. */
static void splits_agree(void)
{
    unsigned char message[300];
    for (size_t i = 0; i < sizeof message; i++)
        message[i] = (unsigned char)(i * 131 + 7);
    int disagreements = 0;
    for (size_t len = 0; len <= sizeof message; len++) {
        unsigned char whole[JB_SHA256_BYTES];
        jb__sha256(message, len, whole);
        for (size_t cut = 0; cut <= len; cut++) {
            jb_sha256 h;
            unsigned char pieces[JB_SHA256_BYTES];
            jb__sha256_init(&h);
            jb__sha256_update(&h, message, cut);
            jb__sha256_update(&h, message + cut, len - cut);
            jb__sha256_final(&h, pieces);
            disagreements += memcmp(whole, pieces, sizeof whole) != 0;
        }
    }
    CHECK(disagreements == 0, "%d splits hashed differently from the whole message",
          disagreements);
}

/* A 1-bit change anywhere changes the digest (a sanity check that every byte is read). */
static void every_byte_counts(void)
{
    unsigned char message[130] = {0}, base[JB_SHA256_BYTES], changed[JB_SHA256_BYTES];
    jb__sha256(message, sizeof message, base);
    int unchanged = 0;
    for (size_t i = 0; i < sizeof message; i++) {
        message[i] ^= 1;
        jb__sha256(message, sizeof message, changed);
        unchanged += memcmp(base, changed, sizeof base) == 0;
        message[i] ^= 1;
    }
    CHECK(unchanged == 0, "%d one-bit changes left the digest as it was", unchanged);
}

/* The two ways agree on messages of every length (the SHA extensions' path against C's). */
static void both_ways_agree(void)
{
    static unsigned char message[4096];
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (size_t i = 0; i < sizeof message; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        message[i] = (unsigned char)(x >> 56);
    }
    int disagreements = 0;
    for (size_t n = 0; n < 2000; n++) {
        size_t len = n * 2 + (n % 7), at = n % 64;
        if (at + len > sizeof message)
            len = sizeof message - at;
        unsigned char fast[JB_SHA256_BYTES], portable[JB_SHA256_BYTES];
        jb__test_sha256_portable(false);
        jb__sha256(message + at, len, fast);
        jb__test_sha256_portable(true);
        jb__sha256(message + at, len, portable);
        disagreements += memcmp(fast, portable, sizeof fast) != 0;
    }
    jb__test_sha256_portable(false);
    CHECK(disagreements == 0, "the two ways disagreed on %d messages", disagreements);
}

/* No bytes at a null pointer (an export of nothing hashes its empty index so) is the empty
 * message, read from nowhere: UBSan stops on a copy from a null pointer, even of 0 bytes. */
static void no_bytes_from_nowhere(void)
{
    jb_sha256 h;
    jb__sha256_init(&h);
    jb__sha256_update(&h, "ab", 2);
    jb__sha256_update(&h, NULL, 0);
    jb__sha256_update(&h, "c", 1);
    unsigned char digest[JB_SHA256_BYTES];
    char hex[2 * JB_SHA256_BYTES + 1];
    jb__sha256_final(&h, digest);
    jb__hex(digest, sizeof digest, hex);
    CHECK(strcmp(hex, vectors[1].digest) == 0, "\"ab\", nothing, \"c\": got %s", hex);
    digest_hex(NULL, 0, hex);
    CHECK(strcmp(hex, vectors[0].digest) == 0, "nothing at a null pointer: got %s", hex);
}

static void standard_examples(void)
{
    for (size_t i = 0; i < sizeof vectors / sizeof *vectors; i++) {
        char hex[2 * JB_SHA256_BYTES + 1];
        digest_hex(vectors[i].message, strlen(vectors[i].message), hex);
        CHECK(strcmp(hex, vectors[i].digest) == 0, "%s: got %s, want %s", vectors[i].name, hex,
              vectors[i].digest);
    }
    million_a();
    splits_agree();
    every_byte_counts();
    no_bytes_from_nowhere();
}

/* HMAC-SHA256 against RFC 4231's test cases 1, 2 and 6 (a key longer than a block is hashed
 * first), the message fed in two pieces; then the constant-time comparison. */
static void hmac_examples(void)
{
    unsigned char key1[20], key6[131];
    memset(key1, 0x0b, sizeof key1);
    memset(key6, 0xaa, sizeof key6);
    const struct {
        const void *key;
        size_t key_len;
        const char *message;
        const char *mac;
    } cases[] = {
        {key1, sizeof key1, "Hi There",
         "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
        {"Jefe", 4, "what do ya want for nothing?",
         "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
        {key6, sizeof key6, "Test Using Larger Than Block-Size Key - Hash Key First",
         "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        jb_hmac_sha256 h;
        size_t len = strlen(cases[i].message), half = len / 2;
        jb__hmac_sha256_init(&h, cases[i].key, cases[i].key_len);
        jb__hmac_sha256_update(&h, cases[i].message, half);
        jb__hmac_sha256_update(&h, cases[i].message + half, len - half);
        unsigned char mac[JB_SHA256_BYTES];
        char hex[2 * JB_SHA256_BYTES + 1];
        jb__hmac_sha256_final(&h, mac);
        jb__hex(mac, sizeof mac, hex);
        CHECK(strcmp(hex, cases[i].mac) == 0, "HMAC case %zu: %s, want %s", i, hex,
              cases[i].mac);
    }
    unsigned char a[32] = {0}, b[32] = {0};
    CHECK(jb__equal_in_constant_time(a, b, sizeof a), "equal bytes compared unequal");
    for (size_t i = 0; i < sizeof b; i += 31) {
        b[i] = 0x80;
        CHECK(!jb__equal_in_constant_time(a, b, sizeof a), "a difference at byte %zu was missed",
              i);
        b[i] = 0;
    }
}

int main(void)
{
    jb__test_sha256_portable(false);
    printf("test_sha256: this processor's SHA extensions are %s\n",
           jb__sha256_accelerated() ? "used" : "absent: both passes are portable C");
    standard_examples();
    jb__test_sha256_portable(true);
    CHECK(!jb__sha256_accelerated(), "the hook did not choose the portable rounds");
    standard_examples();
    jb__test_sha256_portable(false);
    both_ways_agree();
    hmac_examples();
    return check_summary("test_sha256");
}
