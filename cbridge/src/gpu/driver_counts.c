/*
 * The driver-call counter (jitbridge_sys.h's jb_driver_call_counting): switched on, each entry
 * of the vendor's call table (vendor.h) is replaced by a wrapper that counts the call for the
 * calling thread, then calls the driver's own. Switched off (the default), the table holds the
 * driver's entries themselves: a build that never switches it on pays nothing on any path.
 * Compiled once per vendor, like gpu_loader.c; only the CUDA spelling has the wrappers (HIP's
 * prototypes differ), so a HIP backend refuses to count.
 */
#include "../internal.h"
#include "vendor.h"

#include <pthread.h>

/* Every call of the table's driver part, counted or not (the runtime compiler is no driver). */
#define COUNTED_CALLS(X) JB_GPU_DRIVER_CALLS(X) JB_GPU_OPTIONAL_CALLS(X)

#define CALL_INDEX(fn) CALL_##fn,
enum { COUNTED_CALLS(CALL_INDEX) NUM_CALLS };
#undef CALL_INDEX

/* Named in the CUDA spelling, before the header maps a name to its versioned symbol. */
#define CALL_NAME(fn) #fn,
static const char *const call_names[NUM_CALLS] = {COUNTED_CALLS(CALL_NAME)};
#undef CALL_NAME

/* The calling thread's count of each call since its last reset. */
static _Thread_local uint64_t thread_counts[NUM_CALLS];

#if defined(JB_VENDOR_CUDA)

/* The driver's own entries, copied when counting starts; the wrappers call these. */
static jb_gpu_api driver_entries;
static pthread_mutex_t switch_mutex = PTHREAD_MUTEX_INITIALIZER;
static bool counting;

/* A wrapper with the call's own prototype (a wrong one does not compile: the table is typed). */
#define COUNTED(fn, params, args)                                                                  \
    static CUresult CUDAAPI counted_##fn params                                                    \
    {                                                                                              \
        thread_counts[CALL_##fn]++;                                                                \
        return driver_entries.fn args;                                                             \
    }

COUNTED(cuInit, (unsigned int flags), (flags))
COUNTED(cuDeviceGetCount, (int *count), (count))
COUNTED(cuDeviceGet, (CUdevice *device, int ordinal), (device, ordinal))
COUNTED(cuDeviceGetName, (char *name, int len, CUdevice device), (name, len, device))
COUNTED(cuDeviceTotalMem, (size_t *bytes, CUdevice device), (bytes, device))
COUNTED(cuModuleLoadData, (CUmodule *module, const void *image), (module, image))
COUNTED(cuModuleGetFunction, (CUfunction *fn, CUmodule module, const char *name),
        (fn, module, name))
COUNTED(cuStreamCreate, (CUstream *stream, unsigned int flags), (stream, flags))
COUNTED(cuStreamCreateWithPriority, (CUstream *stream, unsigned int flags, int priority),
        (stream, flags, priority))
COUNTED(cuStreamGetPriority, (CUstream stream, int *priority), (stream, priority))
COUNTED(cuCtxGetStreamPriorityRange, (int *least, int *greatest), (least, greatest))
COUNTED(cuStreamDestroy, (CUstream stream), (stream))
COUNTED(cuStreamSynchronize, (CUstream stream), (stream))
COUNTED(cuStreamQuery, (CUstream stream), (stream))
COUNTED(cuStreamWaitEvent, (CUstream stream, CUevent event, unsigned int flags),
        (stream, event, flags))
COUNTED(cuEventCreate, (CUevent *event, unsigned int flags), (event, flags))
COUNTED(cuEventDestroy, (CUevent event), (event))
COUNTED(cuEventRecord, (CUevent event, CUstream stream), (event, stream))
COUNTED(cuEventSynchronize, (CUevent event), (event))
COUNTED(cuEventQuery, (CUevent event), (event))
COUNTED(cuMemAlloc, (CUdeviceptr *ptr, size_t bytes), (ptr, bytes))
COUNTED(cuMemFree, (CUdeviceptr ptr), (ptr))
COUNTED(cuMemcpyHtoDAsync, (CUdeviceptr dst, const void *src, size_t bytes, CUstream stream),
        (dst, src, bytes, stream))
COUNTED(cuMemcpyDtoHAsync, (void *dst, CUdeviceptr src, size_t bytes, CUstream stream),
        (dst, src, bytes, stream))
COUNTED(cuMemcpyDtoDAsync, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream),
        (dst, src, bytes, stream))
COUNTED(cuMemsetD8Async, (CUdeviceptr dst, unsigned char value, size_t n, CUstream stream),
        (dst, value, n, stream))
COUNTED(cuMemsetD16Async, (CUdeviceptr dst, unsigned short value, size_t n, CUstream stream),
        (dst, value, n, stream))
COUNTED(cuMemsetD32Async, (CUdeviceptr dst, unsigned int value, size_t n, CUstream stream),
        (dst, value, n, stream))
COUNTED(cuLaunchKernel,
        (CUfunction fn, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
         unsigned int block_x, unsigned int block_y, unsigned int block_z,
         unsigned int shared_bytes, CUstream stream, void **params, void **extra),
        (fn, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream, params,
         extra))
COUNTED(cuFuncSetAttribute, (CUfunction fn, CUfunction_attribute attribute, int value),
        (fn, attribute, value))
COUNTED(cuGetErrorName, (CUresult result, const char **name), (result, name))
COUNTED(cuGetErrorString, (CUresult result, const char **text), (result, text))
COUNTED(cuDevicePrimaryCtxRetain, (CUcontext *context, CUdevice device), (context, device))
COUNTED(cuCtxGetCurrent, (CUcontext *context), (context))
COUNTED(cuCtxSetCurrent, (CUcontext context), (context))
COUNTED(cuDeviceGetAttribute, (int *value, CUdevice_attribute attribute, CUdevice device),
        (value, attribute, device))
COUNTED(cuMemAllocAsync, (CUdeviceptr *ptr, size_t bytes, CUstream stream), (ptr, bytes, stream))
COUNTED(cuMemFreeAsync, (CUdeviceptr ptr, CUstream stream), (ptr, stream))
COUNTED(cuModuleUnload, (CUmodule module), (module))
COUNTED(cuModuleGetGlobal, (CUdeviceptr *ptr, size_t *bytes, CUmodule module, const char *name),
        (ptr, bytes, module, name))
COUNTED(cuFuncGetAttribute, (int *value, CUfunction_attribute attribute, CUfunction fn),
        (value, attribute, fn))
COUNTED(cuStreamBeginCapture, (CUstream stream, CUstreamCaptureMode mode), (stream, mode))
COUNTED(cuStreamEndCapture, (CUstream stream, CUgraph *graph), (stream, graph))
COUNTED(cuStreamGetCaptureInfo,
        (CUstream stream, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
         const CUgraphNode **dependencies, const CUgraphEdgeData **edges, size_t *count),
        (stream, status, id, graph, dependencies, edges, count))
COUNTED(cuGraphInstantiateWithFlags, (CUgraphExec *exec, CUgraph graph, unsigned long long flags),
        (exec, graph, flags))
COUNTED(cuGraphLaunch, (CUgraphExec exec, CUstream stream), (exec, stream))
COUNTED(cuGraphExecKernelNodeSetParams,
        (CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *params),
        (exec, node, params))
COUNTED(cuGraphExecDestroy, (CUgraphExec exec), (exec))
COUNTED(cuGraphDestroy, (CUgraph graph), (graph))
COUNTED(cuGraphGetNodes, (CUgraph graph, CUgraphNode *nodes, size_t *count), (graph, nodes, count))
#undef COUNTED

/* Points each entry the driver has at its wrapper, or back at the driver's own; an entry the
 * driver lacks (an optional call) stays NULL, so "has the driver graphs?" reads the same. */
static void point_entries(bool counted)
{
#define POINT(fn)                                                                                  \
    if (driver_entries.fn)                                                                         \
        JB_GPU_PREFIXED(api).fn = counted ? counted_##fn : driver_entries.fn;
    COUNTED_CALLS(POINT)
#undef POINT
}

int JB_GPU_PREFIXED(count_driver_calls)(bool on)
{
    pthread_mutex_lock(&switch_mutex);
    if (on && !counting)
        driver_entries = JB_GPU_PREFIXED(api);
    if (on != counting)
        point_entries(on);
    counting = on;
    pthread_mutex_unlock(&switch_mutex);
    return JB_OK;
}

#else /* JB_VENDOR_HIP */

int JB_GPU_PREFIXED(count_driver_calls)(bool on)
{
    (void)on;
    return jb__fail(JB_ERR_UNSUPPORTED,
                    "%s: driver calls are counted on the CUDA backend only (HIP's prototypes "
                    "differ from the wrappers')",
                    JB_GPU_BACKEND_NAME);
}

#endif /* JB_VENDOR_CUDA */

size_t JB_GPU_PREFIXED(thread_driver_calls)(jb_driver_call_count *out, size_t capacity,
                                           bool reset)
{
    size_t found = 0;
    for (size_t i = 0; i < NUM_CALLS; i++) {
        if (!thread_counts[i])
            continue;
        if (found < capacity)
            out[found] = (jb_driver_call_count){call_names[i], thread_counts[i]};
        found++;
        if (reset)
            thread_counts[i] = 0;
    }
    return found;
}
