/*
 * One GPU source, two vendors. gpu_backend.c is written against the CUDA driver API and NVRTC;
 * on a ROCm build this header maps each of those names onto HIP and hiprtc, so the H200 runs the
 * very code a ROCm host runs and only this table differs. The few calls whose shapes differ
 * (current device, architecture name, error names) are small inline helpers, one per vendor.
 */
#ifndef JB_GPU_VENDOR_H
#define JB_GPU_VENDOR_H

#include <stdio.h>
#include <string.h>

#if defined(JB_WITH_CUDA)

#include <cuda.h>
#include <nvrtc.h>

#define JB_GPU_BACKEND_NAME "cuda"
#define JB_GPU_ARCH_OPTION "--gpu-architecture="
#define JB_GPU_FAST_MATH_OPTION "--use_fast_math"
#define JB_GPU_LINE_INFO_OPTION "-lineinfo"
/* NVRTC stages a pageable host buffer before an async copy returns. */
#define JB_GPU_HTOD_SYNC 0

typedef CUcontext jb_gpu_context;

static inline const char *jb_gpu_error_name(CUresult result)
{
    const char *name = NULL;
    return cuGetErrorName(result, &name) == CUDA_SUCCESS && name ? name : "CUDA_ERROR_UNKNOWN";
}

static inline const char *jb_gpu_error_text(CUresult result)
{
    const char *text = NULL;
    return cuGetErrorString(result, &text) == CUDA_SUCCESS && text ? text : "unknown error";
}

static inline CUresult jb_gpu_context_retain(int ordinal, jb_gpu_context *out)
{
    CUdevice device;
    CUresult r = cuDeviceGet(&device, ordinal);
    return r == CUDA_SUCCESS ? cuDevicePrimaryCtxRetain(out, device) : r;
}

/* A CUDA context is current per thread: every thread that touches the device sets it first. */
static inline CUresult jb_gpu_context_make_current(jb_gpu_context context)
{
    CUcontext current = NULL;
    if (cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == context)
        return CUDA_SUCCESS;
    return cuCtxSetCurrent(context);
}

static inline CUresult jb_gpu_arch_name(int ordinal, char *out, size_t len)
{
    CUdevice device;
    int major = 0, minor = 0;
    CUresult r = cuDeviceGet(&device, ordinal);
    if (r == CUDA_SUCCESS)
        r = cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
    if (r == CUDA_SUCCESS)
        r = cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
    snprintf(out, len, "sm_%d%d", major, minor);
    return r;
}

static inline void jb_gpu_compiler_version(char *out, size_t len)
{
    int major = 0, minor = 0;
    nvrtcVersion(&major, &minor);
    snprintf(out, len, "NVRTC %d.%d", major, minor);
}

#define jbGetCode nvrtcGetCUBIN
#define jbGetCodeSize nvrtcGetCUBINSize

#elif defined(JB_WITH_ROCM)

#include <hip/hip_runtime_api.h>
#include <hip/hiprtc.h>

#define JB_GPU_BACKEND_NAME "rocm"
#define JB_GPU_ARCH_OPTION "--offload-arch="
#define JB_GPU_FAST_MATH_OPTION "-ffast-math"
#define JB_GPU_LINE_INFO_OPTION "-g"
/* Be conservative: HIP does not promise that a pageable source is staged on return. */
#define JB_GPU_HTOD_SYNC 1

/* driver API */
#define CUresult hipError_t
#define CUDA_SUCCESS hipSuccess
#define CUDA_ERROR_NO_DEVICE hipErrorNoDevice
#define CUDA_ERROR_NOT_READY hipErrorNotReady
#define CUdevice hipDevice_t
#define CUdeviceptr hipDeviceptr_t
#define CUmodule hipModule_t
#define CUfunction hipFunction_t
#define CUstream hipStream_t
#define CUevent hipEvent_t
#define CU_STREAM_NON_BLOCKING hipStreamNonBlocking
#define CU_EVENT_DISABLE_TIMING hipEventDisableTiming
#define cuInit hipInit
#define cuDeviceGetCount hipGetDeviceCount
#define cuDeviceGet hipDeviceGet
#define cuDeviceGetName hipDeviceGetName
#define cuDeviceTotalMem hipDeviceTotalMem
#define cuModuleLoadData hipModuleLoadData
#define cuModuleGetFunction hipModuleGetFunction
#define cuStreamCreate hipStreamCreateWithFlags
#define cuStreamDestroy hipStreamDestroy
#define cuStreamSynchronize hipStreamSynchronize
#define cuStreamWaitEvent hipStreamWaitEvent
#define cuEventCreate hipEventCreateWithFlags
#define cuEventDestroy hipEventDestroy
#define cuEventRecord hipEventRecord
#define cuEventSynchronize hipEventSynchronize
#define cuEventQuery hipEventQuery
#define cuMemAlloc(ptr, bytes) hipMalloc((void **)(ptr), (bytes))
#define cuMemFree hipFree
#define cuMemcpyHtoDAsync(dst, src, bytes, stream)                                                 \
    hipMemcpyHtoDAsync((dst), (void *)(src), (bytes), (stream))
#define cuMemcpyDtoHAsync hipMemcpyDtoHAsync
#define cuLaunchKernel hipModuleLaunchKernel
#define cuFuncSetAttribute(fn, attribute, value)                                                   \
    hipFuncSetAttribute((const void *)(fn), (attribute), (value))
#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES hipFuncAttributeMaxDynamicSharedMemorySize

/* runtime compiler */
#define nvrtcResult hiprtcResult
#define nvrtcProgram hiprtcProgram
#define NVRTC_SUCCESS HIPRTC_SUCCESS
#define nvrtcCreateProgram hiprtcCreateProgram
#define nvrtcCompileProgram hiprtcCompileProgram
#define nvrtcDestroyProgram hiprtcDestroyProgram
#define nvrtcGetProgramLogSize hiprtcGetProgramLogSize
#define nvrtcGetProgramLog hiprtcGetProgramLog
#define nvrtcGetErrorString hiprtcGetErrorString
#define jbGetCode hiprtcGetCode
#define jbGetCodeSize hiprtcGetCodeSize

/* HIP has no per-thread context object to hold: the device ordinal stands in for it. */
typedef int jb_gpu_context;

static inline const char *jb_gpu_error_name(hipError_t result)
{
    return hipGetErrorName(result);
}

static inline const char *jb_gpu_error_text(hipError_t result)
{
    return hipGetErrorString(result);
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
    if (hipGetDevice(&current) == hipSuccess && current == ordinal)
        return hipSuccess;
    return hipSetDevice(ordinal);
}

static inline hipError_t jb_gpu_arch_name(int ordinal, char *out, size_t len)
{
    hipDeviceProp_t prop;
    hipError_t r = hipGetDeviceProperties(&prop, ordinal);
    snprintf(out, len, "%s", r == hipSuccess ? prop.gcnArchName : "unknown");
    return r;
}

static inline void jb_gpu_compiler_version(char *out, size_t len)
{
    int major = 0, minor = 0;
#if HIP_VERSION_MAJOR >= 6
    hiprtcVersion(&major, &minor);
#else  /* HIP_VERSION_MAJOR < 6: hiprtc shares HIP's version */
    major = HIP_VERSION_MAJOR, minor = HIP_VERSION_MINOR;
#endif /* HIP_VERSION_MAJOR >= 6 */
    snprintf(out, len, "hiprtc %d.%d", major, minor);
}

#else
#error "vendor.h needs JB_WITH_CUDA or JB_WITH_ROCM"
#endif

#endif /* JB_GPU_VENDOR_H */
