/*
 * ThreadSanitizer stress of starting warm (make tsan): threads that first-launch kernels
 * (manifest lines, leases, disk stores) while others export bundles of the same cache, add
 * bundles as tiers, and prewarm from the manifest and from a bundle, all at once. With every
 * lock in it must produce no report, and every output must be exact.
 */
#include "check.h"
#include "helpers.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define THREADS 8
#define KERNELS 6
#define N 32

static jb_device *cpu;
static pthread_barrier_t barrier;
static atomic_int failures;
static char folder[PATH_MAX];

static bool launch_salt(int salt)
{
    char name[32], body[96];
    snprintf(name, sizeof name, "tsan_warm_%d", salt);
    snprintf(body, sizeof body, "out[thread_index()] = inp[thread_index()] + %d.0f;", salt);
    const char *in[] = {"inp"}, *out[] = {"out"};
    jb_dtype f32[] = {JB_F32};
    jb_kernel_spec spec = JB_KERNEL_SPEC_INIT;
    spec.name = name, spec.body = body;
    spec.input_names = in, spec.input_dtypes = f32, spec.num_inputs = 1;
    spec.output_names = out, spec.output_dtypes = f32, spec.num_outputs = 1;
    jb_custom_kernel *k = NULL;
    jb_array *x = NULL, *y = NULL;
    int64_t n = N;
    const int64_t *shapes[] = {&n};
    int ndims[] = {1};
    jb_launch_shape shape = {{0, 0, 0}, {0, 0, 0}, N};
    float values[N];
    bool ok = jb_custom_kernel_new(&k, &spec) == JB_OK &&
              jb_array_arange(&x, cpu, N, JB_F32) == JB_OK &&
              jb_custom_kernel_launch(&y, k, &x, 1, shapes, ndims, &shape) == JB_OK &&
              jb_array_read(y, values, sizeof values) == JB_OK;
    for (int i = 0; ok && i < N; i++)
        ok = values[i] == (float)i + (float)salt;
    jb_array_free(y);
    jb_array_free(x);
    jb_custom_kernel_free(k);
    return ok;
}

/* Thread t: launches, exports, adds a bundle or prewarms, by its number, all behind a barrier. */
static void *worker(void *p)
{
    int t = (int)(intptr_t)p;
    char path[PATH_MAX + 32];
    pthread_barrier_wait(&barrier);
    uint64_t a = 0, b = 0;
    jb_prewarm_result r;
    bool ok = true;
    switch (t % 4) {
    case 0: /* new kernels: leases, stores, manifest lines */
        for (int k = 0; k < KERNELS; k++)
            ok = ok && launch_salt(100 + t * KERNELS + k);
        break;
    case 1: /* a bundle of what the cache holds now */
        snprintf(path, sizeof path, "%s/b%d.jbb", folder, t);
        ok = jb_disk_cache_export(&a, &b, path, NULL) == JB_OK;
        break;
    case 2: /* the first bundle as a tier, then kernels it may serve */
        snprintf(path, sizeof path, "%s/first.jbb", folder);
        ok = jb_disk_cache_add_bundle(path) == JB_OK;
        for (int k = 0; ok && k < KERNELS; k++)
            ok = launch_salt(k);
        break;
    default: /* the manifest, then the first bundle */
        snprintf(path, sizeof path, "%s/m.manifest", folder);
        ok = jb_prewarm(&r, cpu, path) == JB_OK;
        snprintf(path, sizeof path, "%s/first.jbb", folder);
        ok = ok && jb_prewarm(&r, cpu, path) == JB_OK && r.failed == 0;
        break;
    }
    if (!ok)
        atomic_fetch_add(&failures, 1);
    return NULL;
}

int main(void)
{
    char made[] = "/tmp/jb_tsan_warm_XXXXXX";
    CHECK(mkdtemp(made) != NULL, "mkdtemp failed");
    snprintf(folder, sizeof folder, "%s", made);
    char manifest[PATH_MAX + 16];
    snprintf(manifest, sizeof manifest, "%s/m.manifest", folder);
    setenv("JITBRIDGE_MANIFEST", manifest, 1); /* before the library reads it */
    CHECK_OK(jb_device_get(&cpu, JB_DEVICE_CPU, 0));
    for (int k = 0; k < KERNELS; k++)
        CHECK(launch_salt(k), "kernel %d", k);
    char first[PATH_MAX + 16];
    snprintf(first, sizeof first, "%s/first.jbb", folder);
    uint64_t exported = 0, skipped = 0;
    CHECK_OK(jb_disk_cache_export(&exported, &skipped, first, NULL));
    CHECK(exported == KERNELS, "exported %llu", (unsigned long long)exported);

    pthread_t threads[THREADS];
    pthread_barrier_init(&barrier, NULL, THREADS);
    for (int t = 0; t < THREADS; t++)
        pthread_create(&threads[t], NULL, worker, (void *)(intptr_t)t);
    for (int t = 0; t < THREADS; t++)
        pthread_join(threads[t], NULL);
    pthread_barrier_destroy(&barrier);
    CHECK(atomic_load(&failures) == 0, "%d workers failed", atomic_load(&failures));

    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf %s", folder);
    CHECK(system(cmd) == 0, "cannot remove %s", folder);
    return check_summary("tsan_warm");
}
