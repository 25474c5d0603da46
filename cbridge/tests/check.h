/* A minimal test harness: CHECK records a failure and goes on; the summary line is the plain
 * "N passed, N failed" that CI reads. */
#ifndef JB_TEST_CHECK_H
#define JB_TEST_CHECK_H

#include <stdatomic.h>
#include <stdio.h>

/* Atomic: tests check from several threads at once (a stream's worker, racing launchers). */
static atomic_int check_passed, check_failed;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            check_passed++;                                                                        \
        } else {                                                                                   \
            check_failed++;                                                                        \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

#define CHECK_OK(expr) CHECK((expr) == JB_OK, "%s", jb_last_error_message())

static int check_summary(const char *suite)
{
    printf("%s: %d passed, %d failed\n", suite, check_passed, check_failed);
    return check_failed ? 1 : 0;
}

#endif
