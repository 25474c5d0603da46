/* The process-global device table. Each backend is set up when a device of it is first asked
 * for, never before: a GPU backend's libraries are loaded (and its driver started) only when
 * one of its devices, "gpu", or the default device needs it, so a build with both GPU backends
 * starts like a build with one. Indices go in the order backends are set up. */
#include "exec.h"

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
    pthread_once_t once; /* its set-up: the first that asks for one of its devices runs it */
    int first, count;    /* its devices are devices[first .. first + count) */
    char why[512];       /* when count is 0: what was not found, or what the driver said */
} gpu_backend;

static gpu_backend gpu_backends[] = {
#if defined(JB_WITH_CUDA)
    {"cuda", jb__cuda_enumerate, PTHREAD_ONCE_INIT, 0, 0, ""},
#endif
#if defined(JB_WITH_ROCM)
    {"rocm", jb__rocm_enumerate, PTHREAD_ONCE_INIT, 0, 0, ""},
#endif
    /* the end (and keeps the array non-empty without a GPU backend) */
    {NULL, NULL, PTHREAD_ONCE_INIT, 0, 0, ""},
};
#define NUM_GPU_BACKENDS ((int)(sizeof gpu_backends / sizeof gpu_backends[0]) - 1)
/* Every backend a device name may ask for, built or not. */
static const char *const known_gpu_backends[] = {"cuda", "rocm"};

static jb_device devices[JB_MAX_DEVICES];
/* Devices set up so far, under setup_mutex; ready_devices publishes the count (the counters and
 * fork read it without setting anything up). */
static int num_devices;
static pthread_mutex_t setup_mutex = PTHREAD_MUTEX_INITIALIZER;
static atomic_int ready_devices;
static jb_device *cpu_device;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

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

/* Gives the next `count` slots of the table their indices and publishes them (setup_mutex held). */
static void publish_devices(int count)
{
    for (int i = 0; i < count; i++)
        device_common_init(&devices[num_devices + i], num_devices + i);
    num_devices += count;
    atomic_store_explicit(&ready_devices, num_devices, memory_order_release);
}

static void setup_cpu(void)
{
    pthread_mutex_lock(&setup_mutex);
    cpu_device_init(&devices[num_devices]);
    cpu_device = &devices[num_devices];
    publish_devices(1);
    pthread_mutex_unlock(&setup_mutex);
}

#if defined(JB_WITH_CUDA) || defined(JB_WITH_ROCM)
/* Loads GPU backend `b`'s libraries and lists its devices into the next free slots (one stays
 * free for the cpu until the cpu has its own). */
static void setup_gpu_backend(int b)
{
    gpu_backend *backend = &gpu_backends[b];
    pthread_mutex_lock(&setup_mutex);
    int room = JB_MAX_DEVICES - num_devices - (cpu_device ? 0 : 1), found = 0;
    backend->enumerate(devices + num_devices, room, &found, backend->why, sizeof backend->why);
    backend->first = num_devices;
    backend->count = found;
    publish_devices(found);
    pthread_mutex_unlock(&setup_mutex);
}

static void setup_gpu_backend_0(void)
{
    setup_gpu_backend(0);
}
#endif
#if defined(JB_WITH_CUDA) && defined(JB_WITH_ROCM)
static void setup_gpu_backend_1(void)
{
    setup_gpu_backend(1);
}
#endif

/* Sets `backend` up once (pthread_once wants a function without arguments: one per slot);
 * warnings raised meanwhile reach the callback after, so that it may call the library. */
static const gpu_backend *gpu_backend_ready(int b)
{
    static void (*const setups[])(void) = {
#if defined(JB_WITH_CUDA) || defined(JB_WITH_ROCM)
        setup_gpu_backend_0,
#endif
#if defined(JB_WITH_CUDA) && defined(JB_WITH_ROCM)
        setup_gpu_backend_1,
#endif
        NULL,
    };
    jb__warn_hold();
    pthread_once(&gpu_backends[b].once, setups[b]);
    jb__warn_release();
    return &gpu_backends[b];
}

static jb_device *cpu_ready(void)
{
    jb__warn_hold();
    pthread_once(&cpu_once, setup_cpu);
    jb__warn_release();
    return cpu_device;
}

#ifdef JB_TEST_HOOKS
static pthread_once_t second_cpu_once = PTHREAD_ONCE_INIT;
static jb_device *second_cpu;

static void second_cpu_init(void)
{
    pthread_mutex_lock(&setup_mutex);
    if (num_devices < JB_MAX_DEVICES) {
        jb_device *dev = &devices[num_devices];
        cpu_device_init(dev);
        dev->ordinal = 1;
        device_common_init(dev, num_devices);
        num_devices++; /* not published: never counted among the devices */
        second_cpu = dev;
    }
    pthread_mutex_unlock(&setup_mutex);
}

int jb__test_second_cpu(jb_device **out)
{
    cpu_ready();
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

/* fork.c's step 3. A backend being set up at fork time is waited for (setup_mutex). */
static void devices_fork(jb_fork_phase phase)
{
    if (phase == JB_FORK_PREPARE)
        pthread_mutex_lock(&setup_mutex);
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
    if (phase == JB_FORK_PARENT)
        pthread_mutex_unlock(&setup_mutex);
    else if (phase == JB_FORK_CHILD)
        pthread_mutex_init(&setup_mutex, NULL);
}
JB_FORK_HANDLER(JB_FORK_DEVICES, devices_fork)

/* The backend that "gpu" means: the first GPU backend that has devices, setting each up in
 * turn until one has; NULL if none has. */
static const gpu_backend *default_gpu_backend(void)
{
    for (int b = 0; b < NUM_GPU_BACKENDS; b++)
        if (gpu_backend_ready(b)->count > 0)
            return &gpu_backends[b];
    return NULL;
}

/* Why no GPU backend has a device (each set up by default_gpu_backend first), in `out`. */
static const char *no_gpu_reason(char *out, size_t len)
{
    out[0] = '\0';
    for (int b = 0; b < NUM_GPU_BACKENDS; b++)
        snprintf(out + strlen(out), len - strlen(out), "%s%s", out[0] ? "; " : "",
                 gpu_backends[b].why);
    return out;
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

/* The GPU backend called `name` ("gpu": the default one), set up; sets the error when there is
 * none. */
static int find_gpu_backend(const gpu_backend **out, const char *name, const char *asked)
{
    *out = NULL;
    if (strcmp(name, "gpu") == 0) {
        if (NUM_GPU_BACKENDS == 0)
            return built_without(asked, NULL);
        *out = default_gpu_backend();
        char why[1100];
        JB_RETURN_IF(!*out, JB_ERR_NO_DEVICE, "no device %s: %s", asked,
                     no_gpu_reason(why, sizeof why));
        return JB_OK;
    }
    for (int b = 0; b < NUM_GPU_BACKENDS; b++) {
        if (strcmp(gpu_backends[b].name, name) == 0) {
            *out = gpu_backend_ready(b);
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
    if (strcmp(backend, "cpu") == 0) {
        cpu_ready();
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
    if (strcmp(backend, "cpu") == 0) {
        JB_RETURN_IF(ordinal != 0, JB_ERR_NO_DEVICE, "no device %s: there is one cpu device (0)",
                     name);
        *out = cpu_ready();
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
    if (kind == JB_DEVICE_CPU) {
        cpu_ready();
        *out = 1;
        return JB_OK;
    }
    const gpu_backend *gpu = default_gpu_backend();
    *out = gpu ? gpu->count : 0;
    return JB_OK;
}

jb_status jb_device_get(jb_device **out, jb_device_kind kind, int ordinal)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_device_get: out is NULL");
    *out = NULL;
    JB_RETURN_IF(kind != JB_DEVICE_CPU && kind != JB_DEVICE_GPU, JB_ERR_INVALID_ARGUMENT,
                 "jb_device_get: unknown device kind %d", (int)kind);
    if (kind == JB_DEVICE_CPU) {
        JB_RETURN_IF(ordinal != 0, JB_ERR_NO_DEVICE, "there is one cpu device (0), not %d",
                     ordinal);
        *out = cpu_ready();
        return JB_OK;
    }
    if (NUM_GPU_BACKENDS == 0) {
        char asked[32];
        snprintf(asked, sizeof asked, "gpu:%d", ordinal);
        return built_without(asked, NULL);
    }
    const gpu_backend *gpu = default_gpu_backend();
    char why[1100];
    JB_RETURN_IF(!gpu, JB_ERR_NO_DEVICE, "no GPU %d: %s", ordinal,
                 no_gpu_reason(why, sizeof why));
    JB_RETURN_IF(ordinal < 0 || ordinal >= gpu->count, JB_ERR_NO_DEVICE,
                 "no GPU %d: %s has %d GPU(s)", ordinal, gpu->name, gpu->count);
    *out = &devices[gpu->first + ordinal];
    return JB_OK;
}

jb_status jb_device_default(jb_device **out)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_device_default: out is NULL");
    *out = NULL;
    const gpu_backend *gpu = default_gpu_backend();
    *out = gpu ? &devices[gpu->first] : cpu_ready();
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

jb_status jb_driver_call_counting(jb_device *device, int enabled)
{
    JB_RETURN_IF(!device, JB_ERR_INVALID_ARGUMENT, "jb_driver_call_counting: device is NULL");
    JB_RETURN_IF(!device->backend->count_driver_calls, JB_ERR_UNSUPPORTED,
                 "jb_driver_call_counting: %s has no driver to count", device->name);
    return device->backend->count_driver_calls(enabled != 0);
}

jb_status jb_thread_driver_calls(jb_device *device, jb_driver_call_count *out, size_t capacity,
                                 size_t *out_count, int reset)
{
    JB_RETURN_IF(!device || !out_count || (capacity && !out), JB_ERR_INVALID_ARGUMENT,
                 "jb_thread_driver_calls: bad arguments");
    JB_RETURN_IF(!device->backend->thread_driver_calls, JB_ERR_UNSUPPORTED,
                 "jb_thread_driver_calls: %s has no driver to count", device->name);
    *out_count = device->backend->thread_driver_calls(out, capacity, reset != 0);
    return JB_OK;
}
