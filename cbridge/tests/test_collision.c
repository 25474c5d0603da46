/*
 * Two sources that meet in one module name. A module name is the kernel's name and a 64-bit
 * hash of its source, and the module cache is keyed by it: a caller who controls kernel bodies
 * could make a second source take the first one's module and run its code. The tests give a
 * second kernel (and a second whole-source module) the first one's module name directly, as a
 * collision would, and check that the second is refused, nothing runs the wrong code, and the
 * first keeps working. Built with JB_TEST_HOOKS (a source module's name is private); cpu.
 */
#include "../src/kernels/kernels.h"
#include "helpers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef JB_TEST_HOOKS
#error "test_collision needs a JB_TEST_HOOKS build of the library"
#endif

#define N 64

static jb_device *dev;

/* The kernel `name` whose output is its input times `factor`. */
static jb_custom_kernel *scaling_kernel(const char *name, float factor)
{
    char body[96];
    snprintf(body, sizeof body, "out[thread_index()] = inp[thread_index()] * %.1ff;", factor);
    return f32_kernel(name, body);
}

/* A kernel of `owner`'s name that scales by `factor`, given `owner`'s module name as a hash
 * collision would. */
static jb_custom_kernel *colliding_kernel(const jb_custom_kernel *owner, float factor)
{
    jb_custom_kernel *k = scaling_kernel(owner->name, factor);
    free(k->module_name);
    k->module_name = jb__strdup(owner->module_name);
    k->module_name_hash = owner->module_name_hash;
    return k;
}

/* Launches `k` on 0..N-1; JB_OK with every element equal to factor * i, else the status. */
static int launch_scaled(jb_custom_kernel *k, jb_array *x, float factor, bool *exact)
{
    jb_array *y = NULL;
    int status = f32_launch(&y, k, &x, 1, N);
    *exact = false;
    if (status != JB_OK) {
        CHECK(y == NULL, "a refused launch handed out an array");
        return status;
    }
    float got[N];
    CHECK_OK(jb_array_read(y, got, sizeof got));
    *exact = true;
    for (int i = 0; i < N; i++)
        *exact = *exact && got[i] == factor * (float)i;
    jb_array_free(y);
    return status;
}

static bool refused_as_collision(int status)
{
    return status == JB_ERR_INVALID_ARGUMENT && strstr(jb_last_error_message(), "another source");
}

/* The first kernel's module is in the cache; the second, with its name, is refused. */
static void second_source_refused(jb_array *x)
{
    jb_custom_kernel *first = scaling_kernel("collide_twice", 2.0f);
    jb_custom_kernel *second = colliding_kernel(first, 3.0f);
    bool exact;
    CHECK_OK(launch_scaled(first, x, 2.0f, &exact));
    CHECK(exact, "the first kernel before the second's launch");
    jb_counters before, after;
    jb_counters_get(&before, sizeof before);
    int status = launch_scaled(second, x, 3.0f, &exact);
    CHECK(refused_as_collision(status), "the second source ran (status %d, exact %d): %s",
          status, exact, jb_last_error_message());
    jb_counters_get(&after, sizeof after);
    CHECK(after.builds == before.builds, "a refused launch built something");
    status = launch_scaled(second, x, 3.0f, &exact); /* refused every time, not only once */
    CHECK(refused_as_collision(status), "the second source ran on a second try");
    CHECK_OK(launch_scaled(first, x, 2.0f, &exact));
    CHECK(exact, "the first kernel after the second was refused");
    jb_custom_kernel_free(first);
    jb_custom_kernel_free(second);
}

/* The other order: the colliding kernel builds first, and the name's owner is the one refused. */
static void first_builder_keeps_the_name(jb_array *x)
{
    jb_custom_kernel *owner = scaling_kernel("collide_five", 5.0f);
    jb_custom_kernel *early = colliding_kernel(owner, 7.0f);
    bool exact;
    CHECK_OK(launch_scaled(early, x, 7.0f, &exact));
    CHECK(exact, "the kernel that built the module first");
    CHECK(refused_as_collision(launch_scaled(owner, x, 5.0f, &exact)),
          "the name's owner ran another source's code: %s", jb_last_error_message());
    jb_custom_kernel_free(owner);
    jb_custom_kernel_free(early);
}

static jb_source_module *filling_module(const char *source)
{
    const char *entries[] = {"fill"};
    jb_source_module_spec spec = JB_SOURCE_MODULE_SPEC_INIT;
    spec.name = "collide_raw", spec.cpu_source = source;
    spec.entry_names = entries, spec.num_entries = 1;
    jb_source_module *m = NULL;
    CHECK_OK(jb_source_module_new(&m, &spec));
    return m;
}

/* Whole-source modules: the same check, once per module and device. */
static void source_modules_refused(void)
{
    jb_source_module *first = filling_module(
        "void fill(void **args, uint64_t n) { float *y = *(float **)args[0];"
        " for (uint64_t i = 0; i < n; i++) y[i] = 1.0f; }\n");
    jb_source_module *second = filling_module(
        "void fill(void **args, uint64_t n) { float *y = *(float **)args[0];"
        " for (uint64_t i = 0; i < n; i++) y[i] = 9.0f; }\n");
    jb__test_set_source_module_name(second, jb_source_module_name(first));
    jb_array *y = NULL;
    CHECK_OK(jb_array_arange(&y, dev, N, JB_F32));
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, N};
    jb_arg args[] = {{.array = y, .written = 1}};
    CHECK_OK(jb_source_module_launch(first, NULL, "fill", args, 1, &shape));
    int status = jb_source_module_launch(second, NULL, "fill", args, 1, &shape);
    CHECK(refused_as_collision(status), "the second whole source ran (status %d): %s", status,
          jb_last_error_message());
    float got[N];
    CHECK_OK(jb_array_read(y, got, sizeof got));
    bool ones = true;
    for (int i = 0; i < N; i++)
        ones = ones && got[i] == 1.0f;
    CHECK(ones, "the array holds another source's values");
    jb_array_free(y);
    jb_source_module_free(first);
    jb_source_module_free(second);
}

/* No collision at all: one source text given with fewer entry names must not hide an entry
 * from a module naming more (the module's kernel table is part of what was built). */
static void entry_lists_kept_apart(void)
{
    const char *source = "void one(void **args, uint64_t n) { float *y = *(float **)args[0];"
                         " for (uint64_t i = 0; i < n; i++) y[i] = 1.0f; }\n"
                         "void two(void **args, uint64_t n) { float *y = *(float **)args[0];"
                         " for (uint64_t i = 0; i < n; i++) y[i] = 2.0f; }\n";
    const char *few[] = {"one"}, *more[] = {"one", "two"};
    jb_source_module_spec spec = JB_SOURCE_MODULE_SPEC_INIT;
    spec.name = "collide_entries", spec.cpu_source = source;
    spec.entry_names = few, spec.num_entries = 1;
    jb_source_module *a = NULL, *b = NULL;
    CHECK_OK(jb_source_module_new(&a, &spec));
    spec.entry_names = more, spec.num_entries = 2;
    CHECK_OK(jb_source_module_new(&b, &spec));
    jb_array *y = NULL;
    CHECK_OK(jb_array_arange(&y, dev, N, JB_F32));
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, N};
    jb_arg args[] = {{.array = y, .written = 1}};
    CHECK_OK(jb_source_module_launch(a, NULL, "one", args, 1, &shape));
    int status = jb_source_module_launch(b, NULL, "two", args, 1, &shape);
    CHECK(status == JB_OK, "the second entry list's 'two' was not found (status %d): %s", status,
          jb_last_error_message());
    float got[N];
    CHECK_OK(jb_array_read(y, got, sizeof got));
    CHECK(got[0] == 2.0f && got[N - 1] == 2.0f, "'two' did not run: %g", (double)got[0]);
    jb_array_free(y);
    jb_source_module_free(a);
    jb_source_module_free(b);
}

int main(void)
{
    CHECK_OK(jb_device_get(&dev, JB_DEVICE_CPU, 0));
    if (!dev)
        return check_summary("test_collision");
    jb_array *x = NULL;
    CHECK_OK(jb_array_arange(&x, dev, N, JB_F32));
    second_source_refused(x);
    first_builder_keeps_the_name(x);
    source_modules_refused();
    entry_lists_kept_apart();
    jb_array_free(x);
    return check_summary("test_collision");
}
