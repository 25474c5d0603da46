/*
 * One GPU source, two vendors. gpu_backend.c is written against the CUDA driver API and NVRTC;
 * compiled with JB_VENDOR_HIP this header maps each of those names onto HIP and hiprtc, so the
 * H200 runs the very code a ROCm host runs and only this table differs. With both vendors in one
 * library the GPU sources are compiled twice; JB_GPU_PREFIXED gives each compile its own names.
 *
 * Nothing here is linked: every vendor call goes through a table of function pointers that
 * gpu_loader.c fills with dlsym, each under the symbol the vendor header maps the call to (the
 * CUDA header's cuMemAlloc is cuMemAlloc_v2, HIP 6's hipGetDeviceProperties is ...R0600).
 */
#ifndef JB_GPU_VENDOR_H
#define JB_GPU_VENDOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define JB_GPU_STR_(x) #x
/* The string of `x` after macro expansion: the symbol a call is built as. */
#define JB_GPU_STR(x) JB_GPU_STR_(x)

#if defined(JB_VENDOR_CUDA)

#include <cuda.h>
#include <nvrtc.h>

#define JB_GPU_BACKEND_NAME "cuda"
#define JB_GPU_PREFIXED(name) jb__cuda_##name
#define JB_GPU_ARCH_OPTION "--gpu-architecture="
#define JB_GPU_FAST_MATH_OPTION "--use_fast_math"
#define JB_GPU_LINE_INFO_OPTION "-lineinfo"
/* Left out of NVRTC's default headers: texture, surface and runtime-API types and device-side
 * runtime calls (NVRTC's documentation). A fifth of a small kernel's compile (bench section 11);
 * a source that needs them is compiled again without it. */
#define JB_GPU_LEAN_OPTION "-minimal"
/* NVRTC stages a pageable host buffer before an async copy returns. */
#define JB_GPU_HTOD_SYNC 0

/* The calls only the CUDA spelling makes (the shared ones are listed after the #endif). */
#define JB_GPU_VENDOR_CALLS(X)                                                                     \
    X(cuGetErrorName)                                                                              \
    X(cuGetErrorString)                                                                            \
    X(cuDevicePrimaryCtxRetain)                                                                    \
    X(cuCtxGetCurrent)                                                                             \
    X(cuCtxSetCurrent)                                                                             \
    X(cuDeviceGetAttribute)
#define JB_GPU_OPTIONAL_VENDOR_CALLS(X)
#define JB_GPU_COMPILER_VENDOR_CALLS(X)                                                            \
    X(nvrtcVersion) X(nvrtcGetCUBIN) X(nvrtcGetCUBINSize) X(nvrtcGetPTX) X(nvrtcGetPTXSize)
#define jbGetCode nvrtcGetCUBIN
#define jbGetCodeSize nvrtcGetCUBINSize
/* A compile for a virtual architecture (compute_XY) makes PTX only, for the driver's JIT. */
#define JB_GPU_HAS_PTX 1

typedef CUcontext jb_gpu_context;

#elif defined(JB_VENDOR_HIP)

#include <hip/hip_runtime_api.h>
#include <hip/hiprtc.h>

#define JB_GPU_BACKEND_NAME "rocm"
#define JB_GPU_PREFIXED(name) jb__rocm_##name
#define JB_GPU_ARCH_OPTION "--offload-arch="
#define JB_GPU_FAST_MATH_OPTION "-ffast-math"
#define JB_GPU_LINE_INFO_OPTION "-g"
/* hiprtc has no such option: every compile gets the architecture and the caller's options. */
#define JB_GPU_LEAN_OPTION NULL
#define JB_GPU_HAS_PTX 0
/* Be conservative: HIP does not promise that a pageable source is staged on return. */
#define JB_GPU_HTOD_SYNC 1

/* driver API */
#define CUresult hipError_t
#define CUDA_SUCCESS hipSuccess
#define CUDA_ERROR_NO_DEVICE hipErrorNoDevice
#define CUDA_ERROR_NOT_READY hipErrorNotReady
#define CUDA_ERROR_OUT_OF_MEMORY hipErrorOutOfMemory
#define CUdevice hipDevice_t
#define CUdeviceptr hipDeviceptr_t
#define CUmodule hipModule_t
#define CUfunction hipFunction_t
#define CUstream hipStream_t
#define CUevent hipEvent_t
#define CU_STREAM_NON_BLOCKING hipStreamNonBlocking
#define CU_EVENT_DISABLE_TIMING hipEventDisableTiming
#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES hipFuncAttributeMaxDynamicSharedMemorySize
#define CU_FUNC_ATTRIBUTE_NUM_REGS HIP_FUNC_ATTRIBUTE_NUM_REGS
#define CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
#define CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
#define CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES HIP_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
#define cuInit hipInit
#define cuDeviceGetCount hipGetDeviceCount
#define cuDeviceGet hipDeviceGet
#define cuDeviceGetName hipDeviceGetName
#define cuDeviceTotalMem hipDeviceTotalMem
#define cuModuleLoadData hipModuleLoadData
#define cuModuleGetFunction hipModuleGetFunction
#define cuModuleUnload hipModuleUnload
#define cuModuleGetGlobal hipModuleGetGlobal
#define cuStreamCreate hipStreamCreateWithFlags
#define cuStreamCreateWithPriority hipStreamCreateWithPriority
#define cuStreamGetPriority hipStreamGetPriority
#define cuCtxGetStreamPriorityRange hipDeviceGetStreamPriorityRange /* the current device's */
#define cuStreamDestroy hipStreamDestroy
#define cuStreamSynchronize hipStreamSynchronize
#define cuStreamQuery hipStreamQuery
#define cuStreamWaitEvent hipStreamWaitEvent
#define cuEventCreate hipEventCreateWithFlags
#define cuEventDestroy hipEventDestroy
#define cuEventRecord hipEventRecord
#define cuEventSynchronize hipEventSynchronize
#define cuEventQuery hipEventQuery
#define cuMemAlloc hipMalloc /* CUdeviceptr * is hipDeviceptr_t *, that is void ** */
#define cuMemFree hipFree
#define cuMemAllocAsync hipMallocAsync
#define cuMemFreeAsync hipFreeAsync
#define cuMemcpyHtoDAsync hipMemcpyHtoDAsync
#define cuMemcpyDtoHAsync hipMemcpyDtoHAsync
#define cuMemcpyDtoDAsync hipMemcpyDtoDAsync
#define cuMemsetD8Async hipMemsetD8Async
#define cuMemsetD16Async hipMemsetD16Async
#define cuMemsetD32Async hipMemsetD32Async
#define cuLaunchKernel hipModuleLaunchKernel
#define cuFuncSetAttribute hipFuncSetAttribute
#define cuFuncGetAttribute hipFuncGetAttribute
#define CUgraph hipGraph_t
#define CUgraphExec hipGraphExec_t
#define CUgraphNode hipGraphNode_t
#define CUstreamCaptureStatus hipStreamCaptureStatus
#define CU_STREAM_CAPTURE_STATUS_ACTIVE hipStreamCaptureStatusActive
#define CU_STREAM_CAPTURE_MODE_RELAXED hipStreamCaptureModeRelaxed
#define cuStreamBeginCapture hipStreamBeginCapture
#define cuStreamEndCapture hipStreamEndCapture
#define cuStreamGetCaptureInfo hipStreamGetCaptureInfo_v2
#define cuGraphInstantiateWithFlags hipGraphInstantiateWithFlags
#define cuGraphLaunch hipGraphLaunch
#define cuGraphExecKernelNodeSetParams hipGraphExecKernelNodeSetParams
#define cuGraphExecDestroy hipGraphExecDestroy
#define cuGraphDestroy hipGraphDestroy
#define cuGraphGetNodes hipGraphGetNodes

/* runtime compiler */
#define nvrtcResult hiprtcResult
#define nvrtcProgram hiprtcProgram
#define NVRTC_SUCCESS HIPRTC_SUCCESS
#define NVRTC_ERROR_COMPILATION HIPRTC_ERROR_COMPILATION
#define nvrtcCreateProgram hiprtcCreateProgram
#define nvrtcCompileProgram hiprtcCompileProgram
#define nvrtcDestroyProgram hiprtcDestroyProgram
#define nvrtcGetProgramLogSize hiprtcGetProgramLogSize
#define nvrtcGetProgramLog hiprtcGetProgramLog
#define nvrtcGetErrorString hiprtcGetErrorString
#define nvrtcVersion hiprtcVersion
#define jbGetCode hiprtcGetCode
#define jbGetCodeSize hiprtcGetCodeSize

#define JB_GPU_VENDOR_CALLS(X)                                                                     \
    X(hipGetErrorName) X(hipGetErrorString) X(hipGetDevice) X(hipSetDevice) X(hipGetDeviceProperties)
#define JB_GPU_OPTIONAL_VENDOR_CALLS(X) X(hipDeviceGetAttribute)
#define JB_GPU_COMPILER_VENDOR_CALLS(X) X(hiprtcVersion) X(hiprtcGetCode) X(hiprtcGetCodeSize)

/* HIP has no per-thread context object to hold: the device ordinal stands in for it. */
typedef int jb_gpu_context;

#else
#error "the GPU sources are compiled with JB_VENDOR_CUDA or JB_VENDOR_HIP"
#endif /* JB_VENDOR_CUDA, JB_VENDOR_HIP */

/* The driver calls both spellings make, in the CUDA spelling. */
#define JB_GPU_DRIVER_CALLS(X)                                                                     \
    X(cuInit)                                                                                      \
    X(cuDeviceGetCount)                                                                            \
    X(cuDeviceGet)                                                                                 \
    X(cuDeviceGetName)                                                                             \
    X(cuDeviceTotalMem)                                                                            \
    X(cuModuleLoadData)                                                                            \
    X(cuModuleGetFunction)                                                                         \
    X(cuStreamCreate)                                                                              \
    X(cuStreamCreateWithPriority)                                                                  \
    X(cuStreamGetPriority)                                                                         \
    X(cuCtxGetStreamPriorityRange)                                                                 \
    X(cuStreamDestroy)                                                                             \
    X(cuStreamSynchronize)                                                                         \
    X(cuStreamQuery)                                                                               \
    X(cuStreamWaitEvent)                                                                           \
    X(cuEventCreate)                                                                               \
    X(cuEventDestroy)                                                                              \
    X(cuEventRecord)                                                                               \
    X(cuEventSynchronize)                                                                          \
    X(cuEventQuery)                                                                                \
    X(cuMemAlloc)                                                                                  \
    X(cuMemFree)                                                                                   \
    X(cuMemcpyHtoDAsync)                                                                           \
    X(cuMemcpyDtoHAsync)                                                                           \
    X(cuMemcpyDtoDAsync)                                                                           \
    X(cuMemsetD8Async)                                                                             \
    X(cuMemsetD16Async)                                                                            \
    X(cuMemsetD32Async)                                                                            \
    X(cuLaunchKernel)                                                                              \
    X(cuFuncSetAttribute)                                                                          \
    JB_GPU_VENDOR_CALLS(X)

/* Graphs (stream capture, then replays): where the driver lacks one of them, a capture is
 * refused as unsupported. */
#define JB_GPU_GRAPH_CALLS(X)                                                                      \
    X(cuStreamBeginCapture)                                                                        \
    X(cuStreamEndCapture)                                                                          \
    X(cuStreamGetCaptureInfo)                                                                      \
    X(cuGraphInstantiateWithFlags)                                                                 \
    X(cuGraphLaunch)                                                                               \
    X(cuGraphExecKernelNodeSetParams)                                                              \
    X(cuGraphExecDestroy)                                                                          \
    X(cuGraphDestroy)                                                                              \
    X(cuGraphGetNodes)

/* Calls used where the driver has them: a missing one leaves its entry NULL, never fails the
 * load (the stream-ordered allocator came with CUDA 11.2 and ROCm 5.2; without an unload, a
 * module whose entries did not all resolve stays loaded; without a global lookup, module
 * globals are refused, as are kernel attributes without the attribute query). */
#define JB_GPU_OPTIONAL_CALLS(X)                                                                   \
    X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuModuleUnload) X(cuModuleGetGlobal)                  \
        X(cuFuncGetAttribute) JB_GPU_GRAPH_CALLS(X) JB_GPU_OPTIONAL_VENDOR_CALLS(X)

/* The runtime compiler's calls (NVRTC; hiprtc, inside libamdhip64 before ROCm 6). */
#define JB_GPU_COMPILER_CALLS(X)                                                                   \
    X(nvrtcCreateProgram)                                                                          \
    X(nvrtcCompileProgram)                                                                         \
    X(nvrtcDestroyProgram)                                                                         \
    X(nvrtcGetProgramLogSize)                                                                      \
    X(nvrtcGetProgramLog)                                                                          \
    X(nvrtcGetErrorString)                                                                         \
    JB_GPU_COMPILER_VENDOR_CALLS(X)

/* One pointer per call, typed by the vendor's own prototype, named as the call is built. */
#define JB_GPU_MEMBER(fn) __typeof__(&fn) fn;
typedef struct jb_gpu_api {
    JB_GPU_DRIVER_CALLS(JB_GPU_MEMBER)
    JB_GPU_OPTIONAL_CALLS(JB_GPU_MEMBER)
    JB_GPU_COMPILER_CALLS(JB_GPU_MEMBER)
} jb_gpu_api;
#undef JB_GPU_MEMBER

/* Filled once by JB_GPU_PREFIXED(load) before any device of this vendor exists. */
extern jb_gpu_api JB_GPU_PREFIXED(api);

/* A vendor call through the table: JB_GPU(cuInit)(0). */
#define JB_GPU(fn) (JB_GPU_PREFIXED(api).fn)

/* Loads the vendor's driver and runtime compiler and resolves every call of the table. JB_OK,
 * else JB_ERR_NO_DEVICE with what was not found and which variable to set in `why`. Called
 * once, from the device table's pthread_once. */
int JB_GPU_PREFIXED(load)(char *why, size_t why_len);
/* Loads the runtime compiler alone (once per process; no driver needed) and resolves its calls:
 * JB_OK, else JB_ERR_NO_DEVICE with what was not found in `why`. */
int JB_GPU_PREFIXED(load_compiler)(char *why, size_t why_len);
/* The driver-call counter (driver_counts.c): swaps the table's entries for counting wrappers
 * (on) or back (off); the calling thread's counts, most `capacity` written, how many made. */
int JB_GPU_PREFIXED(count_driver_calls)(bool on);
size_t JB_GPU_PREFIXED(thread_driver_calls)(jb_driver_call_count *out, size_t capacity,
                                           bool reset);

#if defined(JB_VENDOR_CUDA)

static inline const char *jb_gpu_error_name(CUresult result)
{
    const char *name = NULL;
    return JB_GPU(cuGetErrorName)(result, &name) == CUDA_SUCCESS && name ? name
                                                                         : "CUDA_ERROR_UNKNOWN";
}

static inline const char *jb_gpu_error_text(CUresult result)
{
    const char *text = NULL;
    return JB_GPU(cuGetErrorString)(result, &text) == CUDA_SUCCESS && text ? text
                                                                           : "unknown error";
}

static inline CUresult jb_gpu_context_retain(int ordinal, jb_gpu_context *out)
{
    CUdevice device;
    CUresult r = JB_GPU(cuDeviceGet)(&device, ordinal);
    return r == CUDA_SUCCESS ? JB_GPU(cuDevicePrimaryCtxRetain)(out, device) : r;
}

/* A CUDA context is current per thread: every thread that touches the device sets it first. */
static inline CUresult jb_gpu_context_make_current(jb_gpu_context context)
{
    CUcontext current = NULL;
    if (JB_GPU(cuCtxGetCurrent)(&current) == CUDA_SUCCESS && current == context)
        return CUDA_SUCCESS;
    return JB_GPU(cuCtxSetCurrent)(context);
}
#define JB_GPU_MAKE_CURRENT_CALL cuCtxSetCurrent

static inline CUresult jb_gpu_arch_name(int ordinal, char *out, size_t len)
{
    CUdevice device;
    int major = 0, minor = 0;
    CUresult r = JB_GPU(cuDeviceGet)(&device, ordinal);
    if (r == CUDA_SUCCESS)
        r = JB_GPU(cuDeviceGetAttribute)(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                         device);
    if (r == CUDA_SUCCESS)
        r = JB_GPU(cuDeviceGetAttribute)(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                         device);
    snprintf(out, len, "sm_%d%d", major, minor);
    return r;
}

/* Whether the device takes cuMemAllocAsync (the driver has it and says so for the device). */
static inline bool jb_gpu_memory_pools_supported(int ordinal)
{
    CUdevice device;
    int supported = 0;
    return JB_GPU(cuMemAllocAsync) && JB_GPU(cuMemFreeAsync) &&
           JB_GPU(cuDeviceGet)(&device, ordinal) == CUDA_SUCCESS &&
           JB_GPU(cuDeviceGetAttribute)(&supported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
                                        device) == CUDA_SUCCESS &&
           supported;
}

#define JB_GPU_COMPILER_NAME "NVRTC"

/* The node a capture on `stream` recorded last: the one dependency of its next node. */
static inline CUresult jb_gpu_capture_last_node(CUstream stream, CUgraphNode *out, size_t *count)
{
    CUstreamCaptureStatus status;
    const CUgraphNode *dependencies = NULL;
    *count = 0;
    CUresult r = JB_GPU(cuStreamGetCaptureInfo)(stream, &status, NULL, NULL, &dependencies, NULL,
                                                count);
    if (r == CUDA_SUCCESS && status == CU_STREAM_CAPTURE_STATUS_ACTIVE && *count == 1)
        *out = dependencies[0];
    return r;
}

/* Whether `stream` is capturing (false where the driver has no graphs). */
static inline bool jb_gpu_stream_capturing(CUstream stream)
{
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    return JB_GPU(cuStreamGetCaptureInfo) &&
           JB_GPU(cuStreamGetCaptureInfo)(stream, &status, NULL, NULL, NULL, NULL, NULL) ==
               CUDA_SUCCESS &&
           status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

/* A graph's kernel node gets new arguments (copied now) for the replays from the next on. */
static inline CUresult jb_gpu_graph_set_kernel(CUgraphExec exec, CUgraphNode node, CUfunction fn,
                                               const uint32_t grid[3], const uint32_t block[3],
                                               uint32_t shared_bytes, void **params)
{
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.func = fn;
    p.gridDimX = grid[0], p.gridDimY = grid[1], p.gridDimZ = grid[2];
    p.blockDimX = block[0], p.blockDimY = block[1], p.blockDimZ = block[2];
    p.sharedMemBytes = shared_bytes;
    p.kernelParams = params;
    return JB_GPU(cuGraphExecKernelNodeSetParams)(exec, node, &p);
}

#else /* JB_VENDOR_HIP */

static inline const char *jb_gpu_error_name(hipError_t result)
{
    return JB_GPU(hipGetErrorName)(result);
}

static inline const char *jb_gpu_error_text(hipError_t result)
{
    return JB_GPU(hipGetErrorString)(result);
}

static inline hipError_t jb_gpu_context_retain(int ordinal, jb_gpu_context *out)
{
    *out = ordinal;
    return hipSuccess;
}

/* The current HIP device is per thread, like a CUDA context. */
static inline hipError_t jb_gpu_context_make_current(jb_gpu_context ordinal)
{
    int current = -1;
    if (JB_GPU(hipGetDevice)(&current) == hipSuccess && current == ordinal)
        return hipSuccess;
    return JB_GPU(hipSetDevice)(ordinal);
}
#define JB_GPU_MAKE_CURRENT_CALL hipSetDevice

static inline hipError_t jb_gpu_arch_name(int ordinal, char *out, size_t len)
{
    hipDeviceProp_t prop;
    hipError_t r = JB_GPU(hipGetDeviceProperties)(&prop, ordinal);
    /* The precision only says to gcc that truncating a 256-byte name into `out` is meant. */
    snprintf(out, len, "%.*s", (int)len - 1, r == hipSuccess ? prop.gcnArchName : "unknown");
    return r;
}

static inline bool jb_gpu_memory_pools_supported(int ordinal)
{
    int supported = 0;
    return JB_GPU(hipMallocAsync) && JB_GPU(hipFreeAsync) && JB_GPU(hipDeviceGetAttribute) &&
           JB_GPU(hipDeviceGetAttribute)(&supported, hipDeviceAttributeMemoryPoolsSupported,
                                         ordinal) == hipSuccess &&
           supported;
}

#define JB_GPU_COMPILER_NAME "hiprtc"

static inline hipError_t jb_gpu_capture_last_node(hipStream_t stream, hipGraphNode_t *out,
                                                  size_t *count)
{
    hipStreamCaptureStatus status;
    const hipGraphNode_t *dependencies = NULL;
    *count = 0;
    hipError_t r = JB_GPU(hipStreamGetCaptureInfo_v2)(stream, &status, NULL, NULL, &dependencies,
                                                      count);
    if (r == hipSuccess && status == hipStreamCaptureStatusActive && *count == 1)
        *out = dependencies[0];
    return r;
}

static inline bool jb_gpu_stream_capturing(hipStream_t stream)
{
    hipStreamCaptureStatus status = hipStreamCaptureStatusNone;
    return JB_GPU(hipStreamGetCaptureInfo_v2) &&
           JB_GPU(hipStreamGetCaptureInfo_v2)(stream, &status, NULL, NULL, NULL, NULL) ==
               hipSuccess &&
           status == hipStreamCaptureStatusActive;
}

static inline hipError_t jb_gpu_graph_set_kernel(hipGraphExec_t exec, hipGraphNode_t node,
                                                 hipFunction_t fn, const uint32_t grid[3],
                                                 const uint32_t block[3], uint32_t shared_bytes,
                                                 void **params)
{
    hipKernelNodeParams p;
    memset(&p, 0, sizeof p);
    p.func = (void *)fn;
    p.gridDim.x = grid[0], p.gridDim.y = grid[1], p.gridDim.z = grid[2];
    p.blockDim.x = block[0], p.blockDim.y = block[1], p.blockDim.z = block[2];
    p.sharedMemBytes = shared_bytes;
    p.kernelParams = params;
    return JB_GPU(hipGraphExecKernelNodeSetParams)(exec, node, &p);
}

#endif /* JB_VENDOR_CUDA */

static inline void jb_gpu_compiler_version(char *out, size_t len)
{
    int major = 0, minor = 0;
    JB_GPU(nvrtcVersion)(&major, &minor);
    snprintf(out, len, "%s %d.%d", JB_GPU_COMPILER_NAME, major, minor);
}

#endif /* JB_GPU_VENDOR_H */
