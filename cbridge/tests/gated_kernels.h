/*
 * What the cpu tests of lazily recorded events share (test_lazy_events, test_hold_search):
 * one-element f32 arrays, a `plus_one` kernel, and a `gated` one that spins while its input holds
 * 0, until the test writes that (host) memory: what waits for what is seen, not timed. cpu only:
 * on a GPU a test cannot write a running kernel's memory. Needs a JB_TEST_HOOKS build (the
 * array's buffer).
 */
#ifndef JB_TEST_GATED_KERNELS_H
#define JB_TEST_GATED_KERNELS_H

#include "../src/kernels/kernels.h"
#include "helpers.h"

#include <stdio.h>

#ifndef JB_TEST_HOOKS
#error "the gated kernels' tests need a JB_TEST_HOOKS build of the library"
#endif

static jb_device *dev;
static jb_custom_kernel *plus_one, *gated;

/* One element of `value`, waited for. */
static jb_array *filled(float value)
{
    jb_array *a = f32_filled(dev, 1, value);
    CHECK_OK(jb_array_eval(a));
    return a;
}

static jb_array *launch(jb_custom_kernel *k, jb_array *input, jb_stream *stream)
{
    int64_t n = 1;
    const int64_t *shapes[] = {&n};
    int ndims[] = {1};
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, 1};
    jb_array *out = NULL;
    CHECK_OK(jb_custom_kernel_launch_on(&out, k, stream, &input, 1, NULL, 0, shapes, ndims,
                                        &shape));
    return out;
}

static float value_of(jb_array *a)
{
    float v = -1.0f;
    CHECK_OK(jb_array_read(a, &v, sizeof v));
    return v;
}

/* The gate: a one-element array the gated kernel spins on while it holds 0. */
static void set_gate(jb_array *gate, float value)
{
    *(volatile float *)jb__array_buffer(gate)->ptr = value;
}

/* Gets the cpu device and makes the two kernels, their names starting with `prefix`; false
 * without a cpu device. */
static bool gated_kernels_new(const char *prefix)
{
    CHECK_OK(jb_device_get(&dev, JB_DEVICE_CPU, 0));
    if (!dev)
        return false;
    jb_array_free(filled(0.0f)); /* the thread's default stream first (tests/valgrind.supp) */
    char name[64];
    snprintf(name, sizeof name, "%s_plus_one", prefix);
    plus_one = f32_kernel(name, "out[thread_index()] = inp[0] + 1.0f;");
    snprintf(name, sizeof name, "%s_gated", prefix);
    /* Both reads volatile: inp is a restrict pointer, so a plain read after the loop may be
     * the value loaded before it (the test writes the gate while the kernel runs). */
    gated = f32_kernel(name, "while (*(volatile const float *)&inp[0] == 0.0f) {}\n"
                             "out[thread_index()] = *(volatile const float *)&inp[0] + 1.0f;");
    return true;
}

static void gated_kernels_free(void)
{
    jb_custom_kernel_free(plus_one);
    jb_custom_kernel_free(gated);
}

#endif
