/*
 * SHA-256 (src/sha256.c) against the examples of FIPS 180-4's reference material (NIST's
 * "SHA256.pdf" example computations and the long messages of FIPS 180-2 appendix B), then fed in
 * pieces of every size: the digest must not depend on how the message is split.
 */
#include "../src/internal.h"
#include "check.h"

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

int main(void)
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
    return check_summary("test_sha256");
}
