/* The process-global device table: GPUs first (when a GPU backend is built), then the cpu. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

static jb_device devices[JB_MAX_DEVICES];
static int num_gpus;
static int num_devices;
static char no_gpu_reason[256] = "jitbridge was built without a GPU backend (features cuda, rocm)";
static pthread_once_t devices_once = PTHREAD_ONCE_INIT;

static void device_common_init(jb_device *dev, int index)
{
    dev->index = index;
    jb__event_pool_init(&dev->event_pool);
    pthread_mutex_init(&dev->buffers.mutex, NULL);
}

static void cpu_device_init(jb_device *dev)
{
    dev->kind = JB_DEVICE_CPU;
    dev->backend = &jb__cpu_backend;
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
#if defined(JB_WITH_CUDA) || defined(JB_WITH_ROCM)
    int found = 0;
    jb__gpu_enumerate(devices, JB_MAX_DEVICES - 1, &found, no_gpu_reason, sizeof no_gpu_reason);
    num_gpus = found;
    for (int i = 0; i < num_gpus; i++)
        device_common_init(&devices[i], i);
#endif
    device_common_init(&devices[num_gpus], num_gpus);
    cpu_device_init(&devices[num_gpus]);
    num_devices = num_gpus + 1;
}

const char *jb_gpu_backend_name(void)
{
#if defined(JB_WITH_CUDA)
    return "cuda";
#elif defined(JB_WITH_ROCM)
    return "rocm";
#else
    return "none";
#endif
}

jb_status jb_device_count(int *out, jb_device_kind kind)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_device_count: out is NULL");
    JB_RETURN_IF(kind != JB_DEVICE_CPU && kind != JB_DEVICE_GPU, JB_ERR_INVALID_ARGUMENT,
                 "jb_device_count: unknown device kind %d", (int)kind);
    pthread_once(&devices_once, devices_init);
    *out = kind == JB_DEVICE_CPU ? 1 : num_gpus;
    return JB_OK;
}

jb_status jb_device_get(jb_device **out, jb_device_kind kind, int ordinal)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_device_get: out is NULL");
    *out = NULL;
    JB_RETURN_IF(kind != JB_DEVICE_CPU && kind != JB_DEVICE_GPU, JB_ERR_INVALID_ARGUMENT,
                 "jb_device_get: unknown device kind %d", (int)kind);
    pthread_once(&devices_once, devices_init);
    if (kind == JB_DEVICE_CPU) {
        JB_RETURN_IF(ordinal != 0, JB_ERR_NO_DEVICE, "there is one cpu device (0), not %d",
                     ordinal);
        *out = &devices[num_gpus];
        return JB_OK;
    }
    JB_RETURN_IF(num_gpus == 0, JB_ERR_NO_DEVICE, "no GPU %d: %s", ordinal, no_gpu_reason);
    JB_RETURN_IF(ordinal < 0 || ordinal >= num_gpus, JB_ERR_NO_DEVICE,
                 "no GPU %d: %d GPU(s) present", ordinal, num_gpus);
    *out = &devices[ordinal];
    return JB_OK;
}

jb_status jb_device_default(jb_device **out)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_device_default: out is NULL");
    *out = NULL;
    pthread_once(&devices_once, devices_init);
    *out = &devices[0];
    return JB_OK;
}

int jb_device_index(const jb_device *device)
{
    return device ? device->index : -1;
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
