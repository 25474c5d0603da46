/* The process-global device table: the GPUs of each GPU backend built (cuda, then rocm), then
 * the cpu. A GPU backend's libraries are loaded when the table is first asked for. */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

typedef int (*gpu_enumerate_fn)(jb_device *devices, int max, int *out_count, char *why,
                                size_t why_len);

/* A GPU backend built into the library and what it found. */
typedef struct gpu_backend {
    const char *name;
    gpu_enumerate_fn enumerate;
    int first, count; /* its devices are devices[first .. first + count) */
    char why[512];    /* when count is 0: what was not found, or what the driver said */
} gpu_backend;

static gpu_backend gpu_backends[] = {
#if defined(JB_WITH_CUDA)
    {"cuda", jb__cuda_enumerate, 0, 0, ""},
#endif
#if defined(JB_WITH_ROCM)
    {"rocm", jb__rocm_enumerate, 0, 0, ""},
#endif
    {NULL, NULL, 0, 0, ""}, /* the end (and keeps the array non-empty without a GPU backend) */
};
#define NUM_GPU_BACKENDS ((int)(sizeof gpu_backends / sizeof gpu_backends[0]) - 1)
/* Every backend a device name may ask for, built or not. */
static const char *const known_gpu_backends[] = {"cuda", "rocm"};

static jb_device devices[JB_MAX_DEVICES];
static int num_gpus;
static int num_devices;
static char no_gpu_reason[1100]; /* why no GPU backend that was built has a device */
static pthread_once_t devices_once = PTHREAD_ONCE_INIT;
/* Devices set up so far: the counters read this without setting devices up. */
static atomic_int ready_devices;

static void device_common_init(jb_device *dev, int index)
{
    dev->index = index;
    jb__event_pool_init(&dev->event_pool);
    pthread_mutex_init(&dev->streams_mutex, NULL);
    jb__buffer_cache_init(dev); /* after total_memory: the default idle cap depends on it */
}

static void cpu_device_init(jb_device *dev)
{
    dev->kind = JB_DEVICE_CPU;
    dev->backend = &jb__cpu_backend;
    dev->max_stream_priority = JB_CPU_MAX_STREAM_PRIORITY;
    dev->ordinal = 0;
    snprintf(dev->name, sizeof dev->name, "cpu");
    FILE *cpuinfo = fopen("/proc/cpuinfo", "r");
    if (cpuinfo) {
        char line[512];
        while (fgets(line, sizeof line, cpuinfo)) {
            char *colon = strchr(line, ':');
            if (strncmp(line, "model name", 10) == 0 && colon) {
                colon += 1 + (colon[1] == ' ');
                colon[strcspn(colon, "\n")] = '\0';
                snprintf(dev->name, sizeof dev->name, "%s", colon);
                break;
            }
        }
        fclose(cpuinfo);
    }
    struct utsname uts;
    if (uname(&uts) == 0)
        snprintf(dev->arch, sizeof dev->arch, "%s-%s", uts.machine, uts.sysname);
    long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
    dev->total_memory = pages > 0 && page_size > 0 ? (uint64_t)pages * (uint64_t)page_size : 0;
}

static void devices_init(void)
{
    for (int b = 0; b < NUM_GPU_BACKENDS; b++) {
        gpu_backend *backend = &gpu_backends[b];
        int found = 0;
        backend->enumerate(devices + num_gpus, JB_MAX_DEVICES - 1 - num_gpus, &found,
                           backend->why, sizeof backend->why);
        backend->first = num_gpus;
        backend->count = found;
        for (int i = 0; i < found; i++)
            device_common_init(&devices[num_gpus + i], num_gpus + i);
        num_gpus += found;
        if (b == 0)
            no_gpu_reason[0] = '\0';
        if (found == 0)
            snprintf(no_gpu_reason + strlen(no_gpu_reason),
                     sizeof no_gpu_reason - strlen(no_gpu_reason), "%s%s",
                     no_gpu_reason[0] ? "; " : "", backend->why);
    }
    cpu_device_init(&devices[num_gpus]);
    device_common_init(&devices[num_gpus], num_gpus);
    num_devices = num_gpus + 1;
    atomic_store_explicit(&ready_devices, num_devices, memory_order_release);
}

/* Sets the devices up once; warnings raised meanwhile reach the callback after, so that it may
 * call the library. */
static void devices_ready(void)
{
    jb__warn_hold();
    pthread_once(&devices_once, devices_init);
    jb__warn_release();
}

#ifdef JB_TEST_HOOKS
static pthread_once_t second_cpu_once = PTHREAD_ONCE_INIT;
static jb_device *second_cpu;

static void second_cpu_init(void)
{
    if (num_devices >= JB_MAX_DEVICES)
        return;
    jb_device *dev = &devices[num_devices];
    cpu_device_init(dev);
    dev->ordinal = 1;
    device_common_init(dev, num_devices);
    second_cpu = dev;
}

int jb__test_second_cpu(jb_device **out)
{
    devices_ready();
    pthread_once(&second_cpu_once, second_cpu_init);
    *out = second_cpu;
    JB_RETURN_IF(!second_cpu, JB_ERR_NO_DEVICE, "test hook: no room for a second cpu device");
    return JB_OK;
}
#endif

void jb__memory_counters_add(jb_counters *out)
{
    int n = atomic_load_explicit(&ready_devices, memory_order_acquire);
    for (int i = 0; i < n; i++)
        jb__buffer_counters_add(&devices[i], out);
}

void jb__memory_counters_reset(void)
{
    int n = atomic_load_explicit(&ready_devices, memory_order_acquire);
    for (int i = 0; i < n; i++)
        jb__buffer_counters_reset(&devices[i]);
}

/* fork.c's step 4. A device still being set up at fork time is not counted in yet. */
void jb__devices_fork(jb_fork_phase phase)
{
    int n = atomic_load_explicit(&ready_devices, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        jb_device *dev = &devices[i];
        if (phase == JB_FORK_PREPARE) {
            pthread_mutex_lock(&dev->streams_mutex);
            for (jb_stream *s = dev->streams; s; s = s->device_next)
                pthread_mutex_lock(&s->holds_mutex);
            pthread_mutex_lock(&dev->event_pool.mutex);
            pthread_mutex_lock(&dev->buffers.mutex);
        } else if (phase == JB_FORK_PARENT) {
            pthread_mutex_unlock(&dev->buffers.mutex);
            pthread_mutex_unlock(&dev->event_pool.mutex);
            for (jb_stream *s = dev->streams; s; s = s->device_next)
                pthread_mutex_unlock(&s->holds_mutex);
            pthread_mutex_unlock(&dev->streams_mutex);
        } else {
            jb__mutex_init_spinning(&dev->buffers.mutex);
            jb__mutex_init_spinning(&dev->event_pool.mutex);
            for (jb_stream *s = dev->streams; s; s = s->device_next)
                jb__mutex_init_spinning(&s->holds_mutex);
            pthread_mutex_init(&dev->streams_mutex, NULL);
            atomic_store(&dev->walking_streams, false); /* its walker is the parent's */
            atomic_store(&dev->retired_streams, 0);     /* the parent's, never idle here */
        }
    }
}

/* The backend that "gpu" means: the first GPU backend that has devices; NULL if none has. */
static const gpu_backend *default_gpu_backend(void)
{
    for (int b = 0; b < NUM_GPU_BACKENDS; b++)
        if (gpu_backends[b].count > 0)
            return &gpu_backends[b];
    return NULL;
}

const char *jb_gpu_backend_name(void)
{
#if defined(JB_WITH_CUDA) && defined(JB_WITH_ROCM)
    return "cuda,rocm";
#elif defined(JB_WITH_CUDA)
    return "cuda";
#elif defined(JB_WITH_ROCM)
    return "rocm";
#else
    return "none";
#endif
}

/* `asked` names a backend this library was built without (`backend`: "cuda" or "rocm"; NULL:
 * "gpu" in a build with no GPU backend). One code and one message shape for both. */
static int built_without(const char *asked, const char *backend)
{
    if (backend)
        return jb__fail(JB_ERR_UNSUPPORTED,
                        "no device %s: jitbridge was built without the %s backend (cargo feature "
                        "'%s', or make %s=1)",
                        asked, backend, backend, strcmp(backend, "cuda") == 0 ? "CUDA" : "ROCM");
    return jb__fail(JB_ERR_UNSUPPORTED,
                    "no device %s: jitbridge was built without a GPU backend (cargo feature "
                    "'cuda' or 'rocm', or make CUDA=1 or ROCM=1)",
                    asked);
}

/* The GPU backend called `name` ("gpu": the default one); sets the error when there is none. */
static int find_gpu_backend(const gpu_backend **out, const char *name, const char *asked)
{
    *out = NULL;
    if (strcmp(name, "gpu") == 0) {
        if (NUM_GPU_BACKENDS == 0)
            return built_without(asked, NULL);
        *out = default_gpu_backend();
        JB_RETURN_IF(!*out, JB_ERR_NO_DEVICE, "no device %s: %s", asked, no_gpu_reason);
        return JB_OK;
    }
    for (int b = 0; b < NUM_GPU_BACKENDS; b++) {
        if (strcmp(gpu_backends[b].name, name) == 0) {
            *out = &gpu_backends[b];
            JB_RETURN_IF(gpu_backends[b].count == 0, JB_ERR_NO_DEVICE, "no device %s: %s",
                         asked, gpu_backends[b].why);
            return JB_OK;
        }
    }
    for (size_t k = 0; k < sizeof known_gpu_backends / sizeof known_gpu_backends[0]; k++)
        if (strcmp(known_gpu_backends[k], name) == 0)
            return built_without(asked, known_gpu_backends[k]);
    return jb__fail(JB_ERR_INVALID_ARGUMENT,
                    "unknown device '%s': expected cpu, gpu, cuda or rocm, each with an optional "
                    ":N",
                    asked);
}

jb_status jb_backend_device_count(int *out, const char *backend)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_backend_device_count: out is NULL");
    *out = 0;
    JB_RETURN_IF(!backend, JB_ERR_INVALID_ARGUMENT, "jb_backend_device_count: backend is NULL");
    devices_ready();
    if (strcmp(backend, "cpu") == 0) {
        *out = 1;
        return JB_OK;
    }
    const gpu_backend *found;
    JB_FORWARD_IF_ERROR(find_gpu_backend(&found, backend, backend));
    *out = found->count;
    return JB_OK;
}

jb_status jb_device_lookup(jb_device **out, const char *name)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_device_lookup: out is NULL");
    *out = NULL;
    JB_RETURN_IF(!name, JB_ERR_INVALID_ARGUMENT, "jb_device_lookup: name is NULL");
    char backend[16];
    size_t len = strcspn(name, ":");
    JB_RETURN_IF(len >= sizeof backend, JB_ERR_INVALID_ARGUMENT,
                 "unknown device '%s': expected cpu, gpu, cuda or rocm, each with an optional :N",
                 name);
    memcpy(backend, name, len);
    backend[len] = '\0';
    long ordinal = 0;
    if (name[len] == ':') {
        const char *digits = name + len + 1;
        char *end = NULL;
        errno = 0;
        ordinal = strtol(digits, &end, 10);
        JB_RETURN_IF(digits[0] < '0' || digits[0] > '9' || *end != '\0' || errno == ERANGE ||
                         ordinal > JB_MAX_DEVICES,
                     JB_ERR_INVALID_ARGUMENT,
                     "device '%s': the part after ':' must be a device number (0, 1, ...)", name);
    }
    devices_ready();
    if (strcmp(backend, "cpu") == 0) {
        JB_RETURN_IF(ordinal != 0, JB_ERR_NO_DEVICE, "no device %s: there is one cpu device (0)",
                     name);
        *out = &devices[num_gpus];
        return JB_OK;
    }
    const gpu_backend *found;
    JB_FORWARD_IF_ERROR(find_gpu_backend(&found, backend, name));
    JB_RETURN_IF(ordinal >= found->count, JB_ERR_NO_DEVICE, "no device %s: %s has %d device(s)",
                 name, found->name, found->count);
    *out = &devices[found->first + ordinal];
    return JB_OK;
}

jb_status jb_device_count(int *out, jb_device_kind kind)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_device_count: out is NULL");
    JB_RETURN_IF(kind != JB_DEVICE_CPU && kind != JB_DEVICE_GPU, JB_ERR_INVALID_ARGUMENT,
                 "jb_device_count: unknown device kind %d", (int)kind);
    devices_ready();
    const gpu_backend *gpu = default_gpu_backend();
    *out = kind == JB_DEVICE_CPU ? 1 : gpu ? gpu->count : 0;
    return JB_OK;
}

jb_status jb_device_get(jb_device **out, jb_device_kind kind, int ordinal)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_device_get: out is NULL");
    *out = NULL;
    JB_RETURN_IF(kind != JB_DEVICE_CPU && kind != JB_DEVICE_GPU, JB_ERR_INVALID_ARGUMENT,
                 "jb_device_get: unknown device kind %d", (int)kind);
    devices_ready();
    if (kind == JB_DEVICE_CPU) {
        JB_RETURN_IF(ordinal != 0, JB_ERR_NO_DEVICE, "there is one cpu device (0), not %d",
                     ordinal);
        *out = &devices[num_gpus];
        return JB_OK;
    }
    if (NUM_GPU_BACKENDS == 0) {
        char asked[32];
        snprintf(asked, sizeof asked, "gpu:%d", ordinal);
        return built_without(asked, NULL);
    }
    const gpu_backend *gpu = default_gpu_backend();
    JB_RETURN_IF(!gpu, JB_ERR_NO_DEVICE, "no GPU %d: %s", ordinal, no_gpu_reason);
    JB_RETURN_IF(ordinal < 0 || ordinal >= gpu->count, JB_ERR_NO_DEVICE,
                 "no GPU %d: %s has %d GPU(s)", ordinal, gpu->name, gpu->count);
    *out = &devices[gpu->first + ordinal];
    return JB_OK;
}

jb_status jb_device_default(jb_device **out)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_device_default: out is NULL");
    *out = NULL;
    devices_ready();
    *out = &devices[0];
    return JB_OK;
}

int jb_device_index(const jb_device *device)
{
    return device ? device->index : -1;
}

int jb_device_ordinal(const jb_device *device)
{
    return device ? device->ordinal : -1;
}

jb_device_kind jb_device_get_kind(const jb_device *device)
{
    return device ? device->kind : JB_DEVICE_CPU;
}

const char *jb_device_name(const jb_device *device)
{
    return device ? device->name : "";
}

const char *jb_device_arch(const jb_device *device)
{
    return device ? device->arch : "";
}

const char *jb_device_backend_name(const jb_device *device)
{
    return device ? device->backend->name : "";
}

uint64_t jb_device_total_memory(const jb_device *device)
{
    return device ? device->total_memory : 0;
}
