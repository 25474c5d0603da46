/*
 * Size arithmetic that wraps: the checked helpers (util.c) at the edges of 2^64, a string
 * buffer asked to grow past SIZE_MAX, and a disk cache entry whose length sum wraps. Each must
 * fail cleanly; the unchecked sums wrote far outside their buffers (each case runs in a child
 * under a deadline, so such a crash is a failure with a message).
 */
#include "../src/kernels/kernels.h"
#include "check.h"
#include "deadline.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void helpers_at_the_edges(void)
{
    uint64_t u = 7;
    CHECK(!jb__add_u64(UINT64_MAX, 1, &u) && u == 7, "UINT64_MAX + 1 fit, or *out changed");
    CHECK(jb__add_u64(UINT64_MAX - 1, 1, &u) && u == UINT64_MAX, "UINT64_MAX - 1 + 1");
    CHECK(!jb__mul_u64(UINT64_C(1) << 32, UINT64_C(1) << 32, &u), "2^32 * 2^32 fit");
    CHECK(jb__mul_u64(UINT64_C(1) << 31, UINT64_C(1) << 32, &u) && u == UINT64_C(1) << 63,
          "2^31 * 2^32");
    CHECK(jb__mul_u64(0, UINT64_MAX, &u) && u == 0, "0 * UINT64_MAX");
    size_t z = 7;
    CHECK(!jb__add_size(SIZE_MAX, 1, &z) && z == 7, "SIZE_MAX + 1 fit");
    CHECK(!jb__mul_size(SIZE_MAX / 2 + 1, 2, &z) && z == 7, "(SIZE_MAX / 2 + 1) * 2 fit");
    CHECK(jb__mul_size(SIZE_MAX / 2, 2, &z) && z == SIZE_MAX - 1, "SIZE_MAX / 2 * 2");
    /* The launch check's ceiling division, where (total + per - 1) / per wraps to 0. */
    CHECK(jb__ceil_div_u64(UINT64_MAX, 256) == (UINT64_C(1) << 56),
          "ceil(UINT64_MAX / 256) = %llu", (unsigned long long)jb__ceil_div_u64(UINT64_MAX, 256));
    CHECK(jb__ceil_div_u64(UINT64_MAX - 1, 1024) == (UINT64_C(1) << 54), "ceil near 2^64");
    CHECK(jb__ceil_div_u64(1, 256) == 1 && jb__ceil_div_u64(512, 256) == 2 &&
              jb__ceil_div_u64(513, 256) == 3,
          "small ceilings");
    errno = 0;
    CHECK(jb__malloc_array(SIZE_MAX / 8 + 1, 16) == NULL && errno == ENOMEM,
          "a wrapping array size was allocated");
    void *p = jb__malloc_array(4, 8);
    CHECK(p != NULL, "4 x 8 bytes");
    void *q = jb__realloc_array(p, SIZE_MAX / 4, 8);
    CHECK(q == NULL && errno == ENOMEM, "a wrapping reallocation");
    free(q ? q : p);
}

/* A buffer whose length is near SIZE_MAX (forged: no machine holds one) is asked for more:
 * len + extra + 1 wrapped to a small size, "fitted", and the append wrote at data + len. */
static void strbuf_past_size_max(void)
{
    jb_strbuf sb = {0};
    jb__strbuf_append(&sb, "a real start");
    char *real = sb.data;
    size_t real_len = sb.len;
    sb.len = SIZE_MAX - 4;
    jb__strbuf_append(&sb, "0123456789");
    CHECK(sb.failed && sb.data == real, "growing past SIZE_MAX did not fail");
    jb__strbuf_appendf(&sb, "%s", "more");
    CHECK(sb.failed, "a failed buffer took more");
    sb.len = real_len;
    jb__strbuf_free(&sb);

    jb_strbuf doubling = {0};
    jb__strbuf_append(&doubling, "x");
    doubling.cap = SIZE_MAX / 2 + 2; /* doubling this capacity wraps to a small one */
    doubling.len = SIZE_MAX / 2 + 1;
    jb__strbuf_append(&doubling, "0123456789");
    CHECK(doubling.failed, "doubling a capacity past SIZE_MAX did not fail");
    doubling.len = 1;
    jb__strbuf_free(&doubling);
}

/* A compiled blob whose length plus the header and key wraps past SIZE_MAX: "small enough" to
 * store, then its checksum read SIZE_MAX bytes. Refused: nothing is stored, the cache stays on. */
static void disk_entry_length_wraps(void)
{
    jb_device *cpu = NULL;
    CHECK_OK(jb_device_get(&cpu, JB_DEVICE_CPU, 0));
    CHECK(jb__disk_cache_usable(), "the disk cache is off: %s", jb_disk_cache_state());
    jb_disk_key key = {0};
    CHECK_OK(jb__module_disk_key(cpu, "sizes_test", NULL, 0, "a source whose code is too long", &key));
    unsigned char byte = 0;
    jb_blob huge = {.data = &byte, .size = SIZE_MAX - 16};
    jb__disk_store(&key, &huge);
    jb_blob loaded = {0};
    CHECK(!jb__disk_load(&key, &loaded), "an entry of SIZE_MAX - 16 bytes was stored");
    CHECK(strcmp(jb_disk_cache_state(), "on") == 0, "state: %s", jb_disk_cache_state());
    jb__disk_key_free(&key);
}

typedef struct child_body {
    void (*run)(void);
} child_body;

static bool run_body(void *arg)
{
    check_failed = check_passed = 0;
    ((child_body *)arg)->run();
    return check_failed == 0;
}

static void in_a_child(const char *what, void (*body)(void))
{
    child_body b = {body};
    CHECK(child_says_yes(what, 20, run_body, &b),
          "%s: the child's checks failed (above), or it crashed", what);
}

int main(void)
{
    unsetenv("JITBRIDGE_DISK_CACHE"); /* the entry case needs the cache (a temporary folder) */
    helpers_at_the_edges();
    in_a_child("a string buffer grown past SIZE_MAX", strbuf_past_size_max);
    in_a_child("a disk entry whose length wraps", disk_entry_length_wraps);
    return check_summary("test_sizes");
}
