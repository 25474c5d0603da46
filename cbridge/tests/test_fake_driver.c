/*
 * A cuda build meeting a broken driver: a fake libcuda.so.1 (under an absolute CUDA_PATH) whose
 * cuInit fails, whose cuDeviceGet fails for every device, or that lacks cuMemAlloc_v2. Each time
 * the cpu is still the default and works, and asking for cuda says what the driver said. Then a
 * working fake (host memory for device memory) with and without the stream-ordered allocator:
 * which calls buffers use, data intact, every allocation freed, out-of-memory and a failed wait
 * mapped, a module load out of memory said as JB_ERR_OUT_OF_MEMORY (not a rejected module), and
 * a module's global copied through cuModuleGetGlobal's address (refused where the driver lacks it),
 * and a kernel's attributes as cuFuncGetAttribute gives them (refused where the driver lacks it).
 * Runs where no real driver loads (CI); elsewhere, and in builds without cuda, it says it
 * skipped and why.
 */
#include "helpers.h"
#include "jitbridge_sys.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* In the child: the cpu works; the cuda backend's answer goes to stdout. */
static int child(void)
{
    jb_device *device = NULL;
    CHECK_OK(jb_device_default(&device));
    CHECK(jb_device_get_kind(device) == JB_DEVICE_CPU, "the default is the cpu");
    int count = -1;
    jb_status status = jb_backend_device_count(&count, "cuda");
    printf("status %d count %d: %s\n", (int)status, count, jb_last_error_message());
    CHECK(jb_device_lookup(&device, "cuda:0") == JB_ERR_NO_DEVICE, "cuda:0 is no device");
    return check_summary("test_fake_driver child");
}

/* In the child of a working fake, FAKE_GLOBALS: a source module's global written and read back
 * through cuModuleGetGlobal's address; an unknown name and bytes past the end refused; each
 * status printed ("globals S S S S"). */
static void module_globals(jb_device *device)
{
    const char *entries[] = {"weigh"};
    jb_source_module_spec spec = JB_SOURCE_MODULE_SPEC_INIT;
    spec.name = "fake_globals", spec.gpu_source = "__constant__ float coeffs[4];";
    spec.entry_names = entries, spec.num_entries = 1;
    jb_source_module *m = NULL;
    CHECK_OK(jb_source_module_new(&m, &spec));
    const float coeffs[4] = {2, 3, 4, 5};
    float back[4] = {0};
    int write = jb_source_module_global_write(m, device, NULL, "coeffs", 0, coeffs, sizeof coeffs);
    int read = jb_source_module_global_read(m, device, NULL, "coeffs", 4, back, 12);
    int unknown = jb_source_module_global_read(m, device, NULL, "other", 0, back, 4);
    int past = jb_source_module_global_write(m, device, NULL, "coeffs", 4, coeffs, 16);
    printf("globals %d %d %d %d: %s\n", write, read, unknown, past, jb_last_error_message());
    if (read == JB_OK)
        CHECK(back[0] == 3 && back[2] == 5, "read back %g %g", back[0], back[2]);
    jb_source_module_free(m);
}

/* In the child of a working fake, FAKE_ATTRIBUTES: a custom kernel's and a source module
 * entry's attributes, and an entry the module lacks; printed as "attributes S R M S L, entry S R
 * M S L, unknown S: message". */
static void kernel_attributes(jb_device *device)
{
    jb_custom_kernel *k = f32_kernel("fake_attributes", "out[thread_index()] = inp[0];");
    jb_kernel_attributes a = {-1, -1, 1, 1}, e = {-1, -1, 1, 1};
    int kernel = jb_custom_kernel_attributes(k, device, &a);
    const char *entries[] = {"weigh"};
    jb_source_module_spec spec = JB_SOURCE_MODULE_SPEC_INIT;
    spec.name = "fake_attributes_module", spec.gpu_source = "extern \"C\" __global__ void weigh() {}";
    spec.entry_names = entries, spec.num_entries = 1;
    jb_source_module *m = NULL;
    CHECK_OK(jb_source_module_new(&m, &spec));
    int entry = jb_source_module_attributes(m, device, "weigh", &e);
    jb_kernel_attributes u;
    int unknown = jb_source_module_attributes(m, device, "other", &u);
    printf("attributes %d %d %d %zu %zu, entry %d %d %d %zu %zu, unknown %d: %s\n", kernel,
           a.registers, a.max_threads_per_block, a.static_shared_bytes, a.local_bytes, entry,
           e.registers, e.max_threads_per_block, e.static_shared_bytes, e.local_bytes, unknown,
           jb_last_error_message());
    jb_source_module_free(m);
    jb_custom_kernel_free(k);
}

/* In the child of a working fake: a round trip through device memory, a trim, then what the
 * fake counted; FAKE_LIMIT: an allocation past the fake's memory is refused. */
static int working_child(const char *driver)
{
    jb_device *device = NULL;
    CHECK_OK(jb_device_lookup(&device, "cuda:0"));
    if (!device)
        return check_summary("test_fake_driver working child");
    int64_t n = 1000;
    float host[1000], back[1000];
    for (int i = 0; i < n; i++)
        host[i] = (float)i * 0.5f;
    jb_array *a = NULL;
    jb_status status = jb_array_from_host(&a, device, JB_F32, &n, 1, host);
    printf("from_host %d: %s\n", (int)status, status == JB_OK ? "" : jb_last_error_message());
    if (status == JB_OK) {
        CHECK_OK(jb_array_read(a, back, sizeof back));
        CHECK(memcmp(host, back, sizeof back) == 0, "the data came back changed");
        jb_array_free(a);
    }
    if (getenv("FAKE_LIMIT")) {
        int64_t big = 1 << 22; /* 16 MiB, past the fake's 1 MiB */
        float *data = calloc((size_t)big, sizeof *data);
        status = jb_array_from_host(&a, device, JB_F32, &big, 1, data);
        free(data);
        printf("big %d: %s\n", (int)status, jb_last_error_message());
        CHECK(status == JB_ERR_OUT_OF_MEMORY, "16 MiB past a 1 MiB device: status %d",
              (int)status);
    }
    if (getenv("FAKE_LOAD_OOM")) {
        /* The driver out of memory for a module is no verdict on its code (a bundle keeps it). */
        jb_custom_kernel *k =
            f32_kernel("fake_loaded", "out[thread_index()] = inp[thread_index()];");
        jb_array *in = f32_filled(device, 4, 1.0f), *out = NULL;
        status = f32_launch(&out, k, &in, 1, 4);
        printf("load %d: %s\n", (int)status, jb_last_error_message());
        CHECK(status == JB_ERR_OUT_OF_MEMORY, "a module load out of memory: status %d",
              (int)status);
        jb_array_free(out);
        jb_array_free(in);
        jb_custom_kernel_free(k);
    }
    if (getenv("FAKE_GLOBALS"))
        module_globals(device);
    if (getenv("FAKE_ATTRIBUTES"))
        kernel_attributes(device);
    CHECK_OK(jb_device_trim(NULL, device));
    void *fake = dlopen(driver, RTLD_NOW | RTLD_NOLOAD);
    CHECK(fake != NULL, "%s is not loaded", driver);
    const long *counts = fake ? (const long *)dlsym(fake, "fake_counts") : NULL;
    CHECK(counts != NULL, "the fake has no fake_counts");
    if (counts)
        printf("alloc %ld free %ld async_alloc %ld async_free %ld live %ld implicit %ld\n",
               counts[0], counts[1], counts[2], counts[3], counts[4], counts[5]);
    return check_summary("test_fake_driver working child");
}

/* The library's locks a thread takes while it counts them: this program's own lock functions
 * stand in for libc's for the library linked into it (a test's count, no cost in the library).
 * Only where a fake driver runs: a sanitizer's build keeps its own lock functions. */
static _Thread_local bool counting_locks;
static _Thread_local long locks_taken;
#if defined(JB_WITH_CUDA)
#define COUNTED_LOCK(fn, type)                                                                     \
    int fn(type *lock)                                                                             \
    {                                                                                              \
        static int (*_Atomic libc_fn)(type *);                                                     \
        if (!libc_fn)                                                                              \
            libc_fn = (int (*)(type *))dlsym(RTLD_NEXT, #fn);                                      \
        locks_taken += counting_locks;                                                             \
        return libc_fn(lock);                                                                      \
    }
COUNTED_LOCK(pthread_mutex_lock, pthread_mutex_t)
COUNTED_LOCK(pthread_rwlock_rdlock, pthread_rwlock_t)
COUNTED_LOCK(pthread_rwlock_wrlock, pthread_rwlock_t)
#undef COUNTED_LOCK
#endif

/* Warm probe launches, each output freed after the next launch (as the bench's loop keeps one in
 * flight), counted after the pools filled; the calls of WARM_LAUNCHES launches go to stdout. */
#define WARM_LAUNCHES 64
static int counting_child(const char *driver)
{
    jb_device *device = NULL;
    CHECK_OK(jb_device_lookup(&device, "cuda:0"));
    if (!device)
        return check_summary("test_fake_driver counting child");
    CHECK_OK(jb_driver_call_counting(device, 1));
    jb_array *input = f32_filled(device, 32, 1.0f), *last = NULL;
    jb_driver_call_count calls[64];
    size_t made = 0;
    for (int round = 0; round < 3; round++) { /* the first two fill the pools */
        CHECK_OK(jb_thread_driver_calls(device, calls, 64, &made, 1));
        locks_taken = 0;
        counting_locks = true;
        for (int i = 0; i < WARM_LAUNCHES; i++) {
            jb_array *out = NULL;
            CHECK_OK(jb_jit_race_probe_array(&out, input, 7));
            jb_array_free(last);
            last = out;
        }
    }
    counting_locks = false;
    CHECK_OK(jb_thread_driver_calls(device, calls, 64, &made, 1));
    printf("%d warm launches:", WARM_LAUNCHES);
    for (size_t i = 0; i < made && i < 64; i++)
        printf(" %s %llu", calls[i].name, (unsigned long long)calls[i].count);
    printf(".\n%d warm launches took %ld locks.\n", WARM_LAUNCHES, locks_taken);
    /* Another library switches this thread's context: the launch that the library made without
     * asking fails, and is made again in its own context. */
    void *fake = dlopen(driver, RTLD_NOW | RTLD_NOLOAD);
    int (*set_current)(void *) = fake ? (int (*)(void *))dlsym(fake, "cuCtxSetCurrent") : NULL;
    CHECK(set_current != NULL, "the fake has no cuCtxSetCurrent");
    if (set_current)
        set_current(NULL);
    jb_array *out = NULL;
    CHECK_OK(jb_jit_race_probe_array(&out, input, 7));
    jb_array_free(last);
    last = out;
    CHECK_OK(jb_thread_driver_calls(device, calls, 64, &made, 1));
    printf("after a switch:");
    for (size_t i = 0; i < made && i < 64; i++)
        printf(" %s %llu", calls[i].name, (unsigned long long)calls[i].count);
    printf(".\n");
    /* Off: the driver's own entries again, nothing counted. */
    CHECK_OK(jb_driver_call_counting(device, 0));
    jb_array_free(last);
    CHECK_OK(jb_thread_driver_calls(device, calls, 64, &made, 1));
    CHECK(made == 0, "%zu calls counted with counting off", made);
    jb_array_free(input);
    return check_summary("test_fake_driver counting child");
}

static void note_device(void *user_data, const jb_coverage_kernel *kernel)
{
    char *devices = user_data;
    size_t len = strlen(devices);
    snprintf(devices + len, 256 - len, "%s[%s] ", kernel->module, kernel->device);
}

/* With a working fake, cuda:0 is the default device: a manifest's cpu kernel is still checked
 * on the cpu (where a worker launches it), its cuda kernel on cuda:0, and a kernel is "other"
 * only for a device this host lacks. A sealed worker would compile both kernels stored nowhere;
 * checked on the default device alone, the cpu one read as "other". */
static int coverage_child(const char *manifest)
{
    jb_device *gpu = NULL, *cpu = NULL;
    CHECK_OK(jb_device_default(&gpu));
    CHECK_OK(jb_device_lookup(&cpu, "cpu"));
    if (!gpu || !cpu || jb_device_get_kind(gpu) != JB_DEVICE_GPU)
        return check_summary("test_fake_driver coverage child: cuda:0 is not the default");
    FILE *file = fopen(manifest, "w");
    CHECK(file != NULL, "%s", manifest);
    if (!file)
        return check_summary("test_fake_driver coverage child");
    const char *lines[][3] = {
        {"a", "cpu", jb_device_arch(cpu)}, {"b", "cuda", jb_device_arch(gpu)},
        {"c", "cuda", "sm_1"},             {"d", "gpu", jb_device_arch(gpu)},
        {"e", "rocm", "gfx90a"},
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        fprintf(file, "jbm1\t");
        for (int d = 0; d < 64; d++)
            fputs(lines[i][0], file);
        fprintf(file, "\t%s\t%s\tcover_%s\tcover_%s\tcompiled\n", lines[i][1], lines[i][2],
                lines[i][0], lines[i][0]);
    }
    fclose(file);
    jb_coverage_result r;
    char devices[256] = "";
    const char *lines_a = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"; /* half a key */
    CHECK_OK(jb_cache_coverage(&r, NULL, manifest, note_device, devices));
    printf("coverage: %llu compile, %llu other: %s\n", (unsigned long long)r.compile,
           (unsigned long long)r.other, devices);
    CHECK(r.compile == 2 && r.other == 3, "each kernel on its own device: %llu compile, %llu other",
          (unsigned long long)r.compile, (unsigned long long)r.other);
    CHECK(strcmp(devices, "cover_a[cpu:0] cover_b[cuda:0] cover_c[] cover_d[] cover_e[] ") == 0,
          "checked on: %s", devices);
    /* A device given is a filter: the cpu's kernel is another device's there. */
    CHECK_OK(jb_cache_coverage(&r, gpu, manifest, NULL, NULL));
    CHECK(r.compile == 1 && r.other == 4, "on cuda:0 alone: %llu compile, %llu other",
          (unsigned long long)r.compile, (unsigned long long)r.other);
    /* The cpu's line alone: it would compile; checked on the default device alone (as `jitbridge
     * cache coverage` without --device did), it read as another device's, nothing to compile. */
    file = fopen(manifest, "w");
    CHECK(file != NULL, "%s", manifest);
    if (!file)
        return check_summary("test_fake_driver coverage child");
    fprintf(file, "jbm1\t%s%s\tcpu\t%s\tcover_a\tcover_a\tcompiled\n", lines_a, lines_a,
            jb_device_arch(cpu));
    fclose(file);
    CHECK_OK(jb_cache_coverage(&r, NULL, manifest, NULL, NULL));
    printf("cpu alone: %llu compile, %llu other\n", (unsigned long long)r.compile,
           (unsigned long long)r.other);
    CHECK(r.compile == 1 && r.other == 0, "the cpu's kernel on the cpu: %llu compile, %llu other",
          (unsigned long long)r.compile, (unsigned long long)r.other);
    CHECK_OK(jb_cache_coverage(&r, gpu, manifest, NULL, NULL));
    CHECK(r.compile == 0 && r.other == 1, "the cpu's kernel on cuda:0: %llu compile, %llu other",
          (unsigned long long)r.compile, (unsigned long long)r.other);
    return check_summary("test_fake_driver coverage child");
}

/* In a child forked from a process that used cuda:0: the cpu works, the parent's GPU is refused
 * with an error, and nothing (a read, a free, a trim, a new stream, exit's handlers) calls the
 * driver, whose state is the parent's (the fake crashes on such a call, naming it). */
static int forked_child(jb_array *parent_array, jb_device *gpu)
{
    jb_device *cpu = NULL;
    int failed = jb_device_lookup(&cpu, "cpu") != JB_OK;
    int64_t n = 4;
    float host[4] = {1, 2, 3, 4}, back[4] = {0};
    jb_array *mine = NULL;
    failed |= jb_array_from_host(&mine, cpu, JB_F32, &n, 1, host) != JB_OK ||
              jb_array_read(mine, back, sizeof back) != JB_OK || back[3] != 4.0f;
    jb_array_free(mine);
    jb_status read = jb_array_read(parent_array, back, sizeof back);
    printf("child: the parent's array: %s\n", read == JB_OK ? "read" : jb_last_error_message());
    failed |= read == JB_OK;
    jb_stream *stream = NULL;
    jb_status made = jb_stream_new(&stream, gpu);
    printf("child: a stream on cuda:0: %s\n", made == JB_OK ? "made" : jb_last_error_message());
    failed |= made == JB_OK;
    jb_array *fresh = NULL;
    failed |= jb_array_from_host(&fresh, gpu, JB_F32, &n, 1, host) == JB_OK;
    jb_array_free(parent_array);
    jb_device_trim(NULL, gpu);
    fflush(stdout);
    exit(failed); /* exit, not _exit: the library's and the driver's exit handlers run */
}

/* With a working fake: uses cuda:0 (a copy in, a read back on another thread too, a trim), then
 * forks a child that must make no driver call (forked_child). */
static int forking_parent(void)
{
    jb_device *gpu = NULL;
    CHECK_OK(jb_device_lookup(&gpu, "cuda:0"));
    if (!gpu)
        return check_summary("test_fake_driver forking parent");
    int64_t n = 4;
    float host[4] = {5, 6, 7, 8}, back[4] = {0};
    jb_array *a = NULL;
    CHECK_OK(jb_array_from_host(&a, gpu, JB_F32, &n, 1, host));
    CHECK_OK(jb_array_read(a, back, sizeof back));
    CHECK(back[0] == 5.0f, "read %g, not 5", back[0]);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0)
        forked_child(a, gpu);
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork or waitpid failed");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the forked child %s %d (a driver call there crashes the fake; stderr says which)",
          WIFSIGNALED(status) ? "died of signal" : "exited with",
          WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    CHECK_OK(jb_array_read(a, back, sizeof back)); /* the parent's GPU still works */
    jb_array_free(a);
    printf("forking parent: done\n");
    return check_summary("test_fake_driver forking parent");
}

#if defined(JB_WITH_CUDA)
/* A driver that works on host memory, and counts the allocator's calls. FAKE_POOLS=0: the device
 * has no memory pools; FAKE_LIMIT: 1 MiB of memory; FAKE_FAIL_SYNC: waiting for the allocation
 * stream fails; FAKE_LOAD_OOM: loading a module finds the device out of memory; built with
 * NO_ASYNC: no cuMemAllocAsync/cuMemFreeAsync at all; NO_GLOBALS: no cuModuleGetGlobal_v2;
 * NO_ATTRIBUTES: no cuFuncGetAttribute (which otherwise gives each attribute a value of its own).
 * Its NVRTC "compiles" any source. */
static const char working_source[] =
    "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <unistd.h>\n"
    "typedef int R; typedef unsigned long long P;\n"
    "long fake_counts[6]; /* alloc, free, async_alloc, async_free, live, implicit */\n"
    "/* A copy or wait on a stream the library did not make: NULL, legacy or per-thread. */\n"
    "static void note_stream(void *st) { if ((P)st < 3) fake_counts[5]++; }\n"
    "static void *alloc_stream; static __thread void *current;\n"
    /* A call in a child forked after cuInit uses the parent's driver state: as a real driver
     * may, the fake crashes, saying which call it was. */
    "static pid_t init_pid;\n"
    "static void forked(const char *call) { if (init_pid && getpid() != init_pid) {\n"
    "  fprintf(stderr, \"fake driver: %s in a forked child\\n\", call); abort(); } }\n"
    "#define OK(name) R name() { forked(#name); return 0; }\n"
    "R cuInit(unsigned f) { (void)f; init_pid = getpid(); return 0; }\n"
    "R cuDeviceGetCount(int *n) { *n = 1; return 0; }\n"
    "R cuDeviceGet(int *d, int o) { *d = o; return 0; }\n"
    "R cuGetErrorName(R r, const char **s) { *s = r == 2 ? \"CUDA_ERROR_OUT_OF_MEMORY\" : "
    "\"CUDA_ERROR_FAKE\"; return 0; }\n"
    "R cuGetErrorString(R r, const char **s) { (void)r; *s = \"a fake driver\"; return 0; }\n"
    "R cuDevicePrimaryCtxRetain(void **c, int d) { *c = (void *)(P)(0x1000 + d); return 0; }\n"
    "R cuCtxGetCurrent(void **c) { forked(__func__); *c = current; return 0; }\n"
    "R cuCtxSetCurrent(void *c) { forked(__func__); current = c; return 0; }\n"
    "R cuDeviceGetName(char *s, int n, int d) { (void)d; strncpy(s, \"Fake\", n); return 0; }\n"
    "R cuDeviceTotalMem_v2(size_t *b, int d) { (void)d; *b = 1 << 30; return 0; }\n"
    "R cuDeviceGetAttribute(int *v, int a, int d) { (void)d;\n"
    "  const char *pools = getenv(\"FAKE_POOLS\");\n"
    "  *v = a == 75 ? 8 : a == 76 ? 0 : a == 115 ? !pools || atoi(pools) : 0; return 0; }\n"
    "R cuStreamCreate(void **s, unsigned f) { forked(__func__); (void)f; *s = malloc(1);\n"
    "  return 0; }\n"
    "R cuStreamCreateWithPriority(void **s, unsigned f, int p) { forked(__func__);\n"
    "  (void)f, (void)p; *s = malloc(1); return 0; }\n"
    "OK(cuStreamGetPriority) OK(cuCtxGetStreamPriorityRange)\n"
    "R cuStreamDestroy_v2(void *s) { forked(__func__); free(s); return 0; }\n"
    "R cuStreamSynchronize(void *s) { forked(__func__); note_stream(s);\n"
    "  return s == alloc_stream && getenv(\"FAKE_FAIL_SYNC\") ? 999 : 0; }\n"
    "R cuEventCreate(void **e, unsigned f) { forked(__func__); (void)f; *e = malloc(1);\n"
    "  return 0; }\n"
    "R cuEventDestroy_v2(void *e) { forked(__func__); free(e); return 0; }\n"
    "OK(cuEventRecord) OK(cuEventSynchronize) OK(cuEventQuery) OK(cuStreamWaitEvent)\n"
    "OK(cuStreamQuery)\n"
    "R cuModuleLoadData(void **m, const void *code) { forked(__func__); (void)code;\n"
    "  *m = malloc(sizeof current); *(void **)*m = current;\n"
    "  return getenv(\"FAKE_LOAD_OOM\") ? 2 : 0; }\n"
    "R cuModuleUnload(void *m) { forked(__func__); free(m); return 0; }\n"
    "R cuModuleGetFunction(void **f, void *m, const char *n) { forked(__func__); (void)n;\n"
    "  *f = m; return 0; }\n"
    "/* A launch in a context other than its module's fails, as the driver's does. */\n"
    "R cuLaunchKernel(void **f) { forked(__func__); return *f == current ? 0 : 201; }\n"
    "OK(cuFuncSetAttribute)\n"
    "#ifndef NO_ATTRIBUTES /* 0 max threads per block, 1 shared, 3 local bytes, 4 registers */\n"
    "R cuFuncGetAttribute(int *v, int a, void *f) { forked(__func__); (void)f;\n"
    "  *v = a == 0 ? 896 : a == 1 ? 3072 : a == 3 ? 24 : a == 4 ? 40 : -1; return *v < 0; }\n"
    "#endif\n"
    "OK(cuMemcpyDtoDAsync_v2) OK(cuMemsetD8Async) OK(cuMemsetD16Async) OK(cuMemsetD32Async)\n"
    "static R get(P *p, size_t n, int which) { forked(__func__);\n"
    "  if (getenv(\"FAKE_LIMIT\") && n > (1 << 20)) return 2;\n"
    "  void *m = malloc(n); if (!m) return 2;\n"
    "  *p = (P)m; fake_counts[which]++; fake_counts[4]++; return 0; }\n"
    "static R put(P p, int which) { forked(__func__); free((void *)p); fake_counts[which]++;\n"
    "  fake_counts[4]--;\n"
    "  return 0; }\n"
    "R cuMemAlloc_v2(P *p, size_t n) { return get(p, n, 0); }\n"
    "R cuMemFree_v2(P p) { return put(p, 1); }\n"
    "#ifndef NO_ASYNC\n"
    "R cuMemAllocAsync(P *p, size_t n, void *s) { alloc_stream = s; return get(p, n, 2); }\n"
    "R cuMemFreeAsync(P p, void *s) { alloc_stream = s; return put(p, 3); }\n"
    "#endif\n"
    "#ifndef NO_GLOBALS\n"
    "static float fake_global[4]; /* every module's one global, \"coeffs\" */\n"
    "R cuModuleGetGlobal_v2(P *p, size_t *n, void *m, const char *name) { forked(__func__);\n"
    "  (void)m; if (strcmp(name, \"coeffs\")) return 500;\n"
    "  *p = (P)fake_global; *n = sizeof fake_global; return 0; }\n"
    "#endif\n"
    "R cuMemcpyHtoDAsync_v2(P d, const void *s, size_t n, void *st) { forked(__func__);\n"
    "  (void)st;\n"
    "  memcpy((void *)d, s, n); return 0; }\n"
    "R cuMemcpyDtoHAsync_v2(void *d, P s, size_t n, void *st) { forked(__func__);\n"
    "  note_stream(st);\n"
    "  memcpy(d, (void *)s, n); return 0; }\n"
    "#define NV(name) R name() { return 0; }\n"
    "NV(nvrtcCreateProgram) NV(nvrtcCompileProgram) NV(nvrtcDestroyProgram)\n"
    "NV(nvrtcGetProgramLogSize) NV(nvrtcGetProgramLog) NV(nvrtcGetErrorString)\n"
    "NV(nvrtcGetPTX) NV(nvrtcGetPTXSize)\n"
    "R nvrtcVersion(int *major, int *minor) { *major = 13, *minor = 0; return 0; }\n"
    "R nvrtcGetCUBINSize(void *p, size_t *n) { (void)p; *n = 4; return 0; }\n"
    "R nvrtcGetCUBIN(void *p, char *code) { (void)p; memcpy(code, \"fake\", 4); return 0; }\n";

static const char fake_source[] =
    "typedef int R;\n"
    "#define OK(name) R name() { return 0; }\n"
    "R cuInit(unsigned f) { (void)f; return MODE == 1 ? 999 : 0; }\n"
    "R cuDeviceGetCount(int *n) { *n = 3; return 0; }\n"
    "R cuDeviceGet(int *d, int o) { *d = o; return MODE == 2 ? 999 : 0; }\n"
    "R cuGetErrorName(R r, const char **s) { (void)r; *s = \"CUDA_ERROR_FAKE\"; return 0; }\n"
    "R cuGetErrorString(R r, const char **s) { (void)r; *s = \"a fake driver\"; return 0; }\n"
    "OK(cuDeviceGetName) OK(cuDeviceTotalMem_v2) OK(cuModuleLoadData) OK(cuModuleGetFunction)\n"
    "OK(cuStreamCreate) OK(cuStreamDestroy_v2) OK(cuStreamSynchronize) OK(cuStreamWaitEvent)\n"
    "OK(cuStreamQuery)\n"
    "OK(cuEventCreate) OK(cuEventDestroy_v2) OK(cuEventRecord) OK(cuEventSynchronize)\n"
    "OK(cuEventQuery) OK(cuMemFree_v2) OK(cuMemcpyHtoDAsync_v2) OK(cuMemcpyDtoHAsync_v2)\n"
    "OK(cuLaunchKernel) OK(cuFuncSetAttribute) OK(cuDevicePrimaryCtxRetain) OK(cuCtxGetCurrent)\n"
    "OK(cuCtxSetCurrent) OK(cuDeviceGetAttribute) OK(cuStreamCreateWithPriority)\n"
    "OK(cuStreamGetPriority) OK(cuCtxGetStreamPriorityRange)\n"
    "OK(cuMemcpyDtoDAsync_v2) OK(cuMemsetD8Async) OK(cuMemsetD16Async) OK(cuMemsetD32Async)\n"
    "#if MODE != 3\nOK(cuMemAlloc_v2)\n#endif\n"
    /* An NVRTC too, for hosts without one: the driver is what is tested. */
    "OK(nvrtcCreateProgram) OK(nvrtcCompileProgram) OK(nvrtcDestroyProgram)\n"
    "OK(nvrtcGetProgramLogSize) OK(nvrtcGetProgramLog) OK(nvrtcGetErrorString)\n"
    "OK(nvrtcVersion) OK(nvrtcGetCUBIN) OK(nvrtcGetCUBINSize) OK(nvrtcGetPTX)\n"
    "OK(nvrtcGetPTXSize)\n";

/* Writes `text` to dir/name. */
static void write_file(const char *dir, const char *name, const char *text)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *file = fopen(path, "w");
    CHECK(file != NULL, "%s", path);
    fputs(text, file);
    fclose(file);
}

/* Runs `command`, its output (at most size - 1 bytes) into `text`; its status as pclose gives
 * it, -1 when it did not start. */
static int run_child(const char *command, char *text, size_t size)
{
    FILE *out = popen(command, "r");
    size_t len = out ? fread(text, 1, size - 1, out) : 0;
    text[len] = '\0';
    return out ? pclose(out) : -1;
}

/* Builds dir/`source` with `flags` into dir/`name`/lib64/libcuda.so.1 (the NVRTC names link to
 * it), unless a run before built it. */
static void build_driver(const char *dir, const char *name, const char *flags, const char *source)
{
    char command[2048];
    snprintf(command, sizeof command,
             "mkdir -p %s/%s/lib64 && cd %s/%s/lib64 && [ -e libcuda.so.1 ] || { cc -shared "
             "-fPIC -w %s -x c %s/%s -o libcuda.so.1 && for m in 13 12 11; do "
             "ln -sf libcuda.so.1 libnvrtc.so.$m; done; }",
             dir, name, dir, name, flags, dir, source);
    CHECK(system(command) == 0, "%s", command);
}

static void fake_driver(const char *self, const char *dir, int mode, const char *expected)
{
    char name[16], flags[16], command[2048];
    snprintf(name, sizeof name, "m%d", mode);
    snprintf(flags, sizeof flags, "-DMODE=%d", mode);
    build_driver(dir, name, flags, "fake.c");
    snprintf(command, sizeof command, "CUDA_PATH=%s/%s %s child", dir, name, self);
    char text[4096];
    int status = run_child(command, text, sizeof text);
    CHECK(status == 0, "mode %d: the child failed (%d): %s", mode, status, text);
    CHECK(strstr(text, "status 4 count 0") != NULL, "mode %d: %s", mode, text);
    CHECK(strstr(text, expected) != NULL, "mode %d: %s does not say %s", mode, text, expected);
}

/* Builds the working fake (`flags`: -DNO_ASYNC or none) in dir/`name`, then runs the working
 * child under `env`; returns its output (static), having checked that it passed. */
static const char *working_driver(const char *self, const char *dir, const char *name,
                                  const char *flags, const char *env)
{
    static char text[4096];
    char command[2048];
    build_driver(dir, name, flags, "working.c");
    snprintf(command, sizeof command, "env %s CUDA_PATH=%s/%s %s working %s/%s/lib64/libcuda.so.1",
             env, dir, name, self, dir, name);
    int status = run_child(command, text, sizeof text);
    CHECK(status == 0, "%s: the child failed (%d): %s", command, status, text);
    return text;
}

/* The stream-ordered allocator where the device has one, the plain calls otherwise. */
static void test_working_drivers(const char *self, const char *dir)
{
    write_file(dir, "working.c", working_source);
    const char *ordered = "from_host 0: \nalloc 0 free 0 async_alloc 1 async_free 1 live 0";
    const char *plain = "from_host 0: \nalloc 1 free 1 async_alloc 0 async_free 0 live 0";
    const char *text = working_driver(self, dir, "pools", "", "");
    CHECK(strstr(text, ordered), "with pools: %s", text);
    /* The driver's implicit streams are never used: after the per-thread stream, its exit
     * handler crashed a forked child of a CUDA process (the soak's, on an H200). */
    CHECK(strstr(text, "implicit 0\n"), "a copy or wait on an implicit stream: %s", text);
    text = working_driver(self, dir, "pools", "", "JITBRIDGE_STREAM_ORDERED_ALLOC=0");
    CHECK(strstr(text, plain), "JITBRIDGE_STREAM_ORDERED_ALLOC=0: %s", text);
    text = working_driver(self, dir, "pools", "", "FAKE_POOLS=0");
    CHECK(strstr(text, plain), "a device without pools: %s", text);
    text = working_driver(self, dir, "no-async", "-DNO_ASYNC", "");
    CHECK(strstr(text, plain), "a driver without cuMemAllocAsync: %s", text);
    text = working_driver(self, dir, "pools", "", "FAKE_LIMIT=1");
    CHECK(strstr(text, "CUDA_ERROR_OUT_OF_MEMORY") && strstr(text, "cuMemAllocAsync") &&
              strstr(text, "async_alloc 1 async_free 1 live 0"),
          "out of memory: %s", text);
    text = working_driver(self, dir, "pools", "", "FAKE_FORK=1");
    CHECK(strstr(text, "forking parent: done") && strstr(text, "test_fake_driver forking parent: "),
          "a child forked after cuda:0 was used: %s", text);
    text = working_driver(self, dir, "pools", "", "FAKE_LOAD_OOM=1 JITBRIDGE_DISK_CACHE=0");
    char oom[64];
    snprintf(oom, sizeof oom, "load %d: ", (int)JB_ERR_OUT_OF_MEMORY);
    CHECK(strstr(text, oom) && strstr(text, "CUDA_ERROR_OUT_OF_MEMORY"),
          "a module load out of memory: %s", text);
    char env[512];
    snprintf(env, sizeof env, "JITBRIDGE_CACHE_DIR=%s/cache FAKE_COVERAGE=%s/kernels.manifest", dir,
             dir);
    text = working_driver(self, dir, "pools", "", env);
    CHECK(strstr(text, "coverage child: ") && strstr(text, "coverage: 2 compile, 3 other") &&
              strstr(text, "cpu alone: 1 compile, 0 other"),
          "coverage with cuda:0 the default: %s", text);
    text = working_driver(self, dir, "pools", "", "FAKE_GLOBALS=1 JITBRIDGE_DISK_CACHE=0");
    char globals[64];
    snprintf(globals, sizeof globals, "globals 0 0 %d %d: ", (int)JB_ERR_INVALID_ARGUMENT,
             (int)JB_ERR_INVALID_ARGUMENT);
    CHECK(strstr(text, globals) && strstr(text, "outside global 'coeffs' of 16 bytes"),
          "module globals: %s", text);
    text = working_driver(self, dir, "no-globals", "-DNO_GLOBALS",
                          "FAKE_GLOBALS=1 JITBRIDGE_DISK_CACHE=0");
    snprintf(globals, sizeof globals, "globals %d %d %d %d: ", (int)JB_ERR_UNSUPPORTED,
             (int)JB_ERR_UNSUPPORTED, (int)JB_ERR_UNSUPPORTED, (int)JB_ERR_UNSUPPORTED);
    CHECK(strstr(text, globals) && strstr(text, "has no cuModuleGetGlobal_v2"),
          "a driver without module globals: %s", text);
    text = working_driver(self, dir, "pools", "", "FAKE_ATTRIBUTES=1 JITBRIDGE_DISK_CACHE=0");
    char attributes[128];
    snprintf(attributes, sizeof attributes,
             "attributes 0 40 896 3072 24, entry 0 40 896 3072 24, unknown %d: ",
             (int)JB_ERR_INVALID_ARGUMENT);
    CHECK(strstr(text, attributes) && strstr(text, "has no entry point 'other'"),
          "kernel attributes: %s", text);
    text = working_driver(self, dir, "no-attributes", "-DNO_ATTRIBUTES",
                          "FAKE_ATTRIBUTES=1 JITBRIDGE_DISK_CACHE=0");
    snprintf(attributes, sizeof attributes, "attributes %d 0 0 0 0, entry %d 0 0 0 0, unknown %d: ",
             (int)JB_ERR_UNSUPPORTED, (int)JB_ERR_UNSUPPORTED, (int)JB_ERR_INVALID_ARGUMENT);
    CHECK(strstr(text, attributes), "a driver without kernel attributes: %s", text);
    text = working_driver(self, dir, "no-async", "-DNO_ASYNC", "FAKE_LIMIT=1");
    CHECK(strstr(text, "CUDA_ERROR_OUT_OF_MEMORY") && strstr(text, "alloc 1 free 1"),
          "out of memory, plain: %s", text);
    /* A warm launch's driver calls, counted: a change that adds one to the warm path fails
     * here, and says which. */
    text = working_driver(self, dir, "pools", "", "FAKE_COUNT=1");
    CHECK(strstr(text, "64 warm launches: cuEventRecord 1 cuEventQuery 1 cuLaunchKernel 64.\n"),
          "warm launches: %s", text);
    /* Two a launch (the buffer cache's, the stream's holds), 8 for the one look. */
    CHECK(strstr(text, "64 warm launches took 136 locks.\n"), "warm launches' locks: %s", text);
    CHECK(strstr(text, "after a switch: cuLaunchKernel 2 cuCtxGetCurrent 1 cuCtxSetCurrent 1.\n"),
          "a launch after another library switched the context: %s", text);
    /* The allocation is given back when the wait for it fails, and the failure is said. */
    text = working_driver(self, dir, "pools", "", "FAKE_FAIL_SYNC=1");
    char failed[64];
    snprintf(failed, sizeof failed, "from_host %d: ", (int)JB_ERR_BACKEND);
    CHECK(strstr(text, failed) && strstr(text, "cuStreamSynchronize): CUDA_ERROR_FAKE") &&
              strstr(text, "async_alloc 1 async_free 1 live 0"),
          "a failed wait for the allocation: %s", text);
}
#endif

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "child") == 0)
        return child();
    if (argc > 2 && strcmp(argv[1], "working") == 0)
        return getenv("FAKE_COVERAGE")  ? coverage_child(getenv("FAKE_COVERAGE"))
               : getenv("FAKE_FORK")   ? forking_parent()
               : getenv("FAKE_COUNT")  ? counting_child(argv[2])
                                     : working_child(argv[2]);
#if defined(JB_WITH_CUDA)
    void *real = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (real) {
        dlclose(real);
        printf("test_fake_driver: skipped: a real driver loads here, so no fake can be tested\n");
        return 0;
    }
    char dir[] = "/tmp/jb-test-fake-driver-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    write_file(dir, "fake.c", fake_source);
    fake_driver(argv[0], dir, 1, "cuInit failed: CUDA_ERROR_FAKE (a fake driver)");
    fake_driver(argv[0], dir, 2, "cuDeviceGet failed: CUDA_ERROR_FAKE (a fake driver)");
    fake_driver(argv[0], dir, 3, "libcuda.so.1 has no cuMemAlloc_v2");
    test_working_drivers(argv[0], dir);
    char command[128];
    snprintf(command, sizeof command, "rm -rf %s", dir);
    CHECK(system(command) == 0, "%s", command);
    return check_summary("test_fake_driver");
#else
    (void)argv;
    printf("test_fake_driver: skipped: this build has no cuda backend (make CUDA=1 test runs it, "
           "as CI does)\n");
    return 0;
#endif
}
