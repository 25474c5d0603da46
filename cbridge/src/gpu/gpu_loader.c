/*
 * Finds the vendor's libraries at run time and fills the call table (vendor.h) with dlsym, so a
 * GPU build links nothing of the vendor's and starts on a machine without the driver. Compiled
 * once per vendor, like gpu_backend.c.
 *
 * Search order, driver and compiler alike: the sonames through the dynamic loader's own search
 * (LD_LIBRARY_PATH, the ld.so cache), then the toolkit folders: the variable's, then the folder
 * of the toolkit this library was built with. A toolkit folder is searched only when absolute:
 * a relative one names a folder under whatever the current one is (a download, a checkout).
 */
#include "../internal.h"
#include "vendor.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

jb_gpu_api JB_GPU_PREFIXED(api);

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

#if defined(JB_VENDOR_CUDA)

#define MAJOR_OF_HEADERS (CUDA_VERSION / 1000)
/* The driver comes with the NVIDIA driver package, never with the toolkit (whose libcuda.so is
 * a stub that only fails): the soname alone. */
static const char *const driver_names[] = {"libcuda.so.1"};
static const char *const driver_hint = "is the NVIDIA driver installed?";
/* NVRTC majors this source compiles against, newest first; the headers' own is tried first. */
static const int compiler_majors[] = {MAJOR_OF_HEADERS, 13, 12, 11};
static const char *const compiler_stem = "libnvrtc.so";
static const char *const root_vars[] = {"CUDA_PATH"};
static const char *const lib_subdirs[] = {"lib64", "lib"};
#define VAR_HINT "set CUDA_PATH to the CUDA toolkit"
#ifndef JB_CUDA_ROOT
#define JB_CUDA_ROOT "/usr/local/cuda"
#endif
#define BUILD_ROOT JB_CUDA_ROOT

#else /* JB_VENDOR_HIP */

#define MAJOR_OF_HEADERS HIP_VERSION_MAJOR
static const char *const driver_names[] = {"libamdhip64.so." JB_GPU_STR(HIP_VERSION_MAJOR),
                                           "libamdhip64.so", "libamdhip64.so.7",
                                           "libamdhip64.so.6", "libamdhip64.so.5"};
static const char *const driver_hint = "is ROCm installed? set ROCM_PATH";
static const int compiler_majors[] = {MAJOR_OF_HEADERS, 7, 6};
static const char *const compiler_stem = "libhiprtc.so";
static const char *const root_vars[] = {"ROCM_PATH", "HIP_PATH"};
static const char *const lib_subdirs[] = {"lib", "lib64"};
#define VAR_HINT "set ROCM_PATH to the ROCm installation"
#ifndef JB_ROCM_ROOT
#define JB_ROCM_ROOT "/opt/rocm"
#endif
#define BUILD_ROOT JB_ROCM_ROOT

#endif /* JB_VENDOR_CUDA */

typedef struct call_entry {
    const char *symbol;
    size_t offset;
} call_entry;

#define JB_GPU_ENTRY(fn) {JB_GPU_STR(fn), offsetof(jb_gpu_api, fn)},
static const call_entry driver_calls[] = {JB_GPU_DRIVER_CALLS(JB_GPU_ENTRY)};
static const call_entry optional_calls[] = {JB_GPU_OPTIONAL_CALLS(JB_GPU_ENTRY)};
static const call_entry compiler_calls[] = {JB_GPU_COMPILER_CALLS(JB_GPU_ENTRY)};
#undef JB_GPU_ENTRY

/* dlopen of `name`, then of `name` in each toolkit folder; NULL if none loads. A library that
 * exists but fails to load (a missing dependency, another architecture) is reported in `why`. */
static void *try_open(const char *path, char *why, size_t why_len)
{
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const char *error = handle ? NULL : dlerror();
    if (error && !strstr(error, "No such file"))
        snprintf(why, why_len, "%s: %s could not be loaded: %s", JB_GPU_BACKEND_NAME, path, error);
    return handle;
}

static void *open_library(const char *name, char *why, size_t why_len)
{
    void *handle = try_open(name, why, why_len);
    if (handle)
        return handle;
    const char *roots[COUNT(root_vars) + 1];
    size_t num_roots = 0;
    for (size_t i = 0; i < COUNT(root_vars); i++) {
        const char *root = secure_getenv(root_vars[i]); /* a setuid host: never its caller's */
        if (root && root[0] == '/')
            roots[num_roots++] = root;
        else if (root && root[0] && !why[0]) /* relative: would load from the current folder */
            snprintf(why, why_len, "%s: %s not found: %s=%s was not searched (not an absolute path)",
                     JB_GPU_BACKEND_NAME, name, root_vars[i], root);
    }
    if (BUILD_ROOT[0] == '/') /* build.rs and the Makefile refuse a relative one; a -D may not */
        roots[num_roots++] = BUILD_ROOT;
    else if (!why[0])
        snprintf(why, why_len,
                 "%s: %s not found: the build's toolkit folder %s was not searched (not an "
                 "absolute path)",
                 JB_GPU_BACKEND_NAME, name, BUILD_ROOT);
    for (size_t r = 0; r < num_roots; r++) {
        for (size_t d = 0; d < COUNT(lib_subdirs); d++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s/%s", roots[r], lib_subdirs[d], name);
            if ((handle = try_open(path, why, why_len)) != NULL)
                return handle;
        }
    }
    return NULL;
}

/* Fills the table's entries from `handle`; false with the missing symbol named in `why`. */
static bool resolve(void *handle, const char *library, const call_entry *calls, size_t count,
                    char *why, size_t why_len)
{
    for (size_t i = 0; i < count; i++) {
        void *symbol = dlsym(handle, calls[i].symbol);
        if (!symbol) {
            snprintf(why, why_len, "%s: %s has no %s (older than the headers this build used?)",
                     JB_GPU_BACKEND_NAME, library, calls[i].symbol);
            return false;
        }
        memcpy((char *)&JB_GPU_PREFIXED(api) + calls[i].offset, &symbol, sizeof symbol);
    }
    return true;
}

static void *open_driver(const char **name, char *why, size_t why_len)
{
    why[0] = '\0';
    for (size_t i = 0; i < COUNT(driver_names); i++) {
        void *handle = open_library(driver_names[i], why, why_len);
        if (handle) {
            *name = driver_names[i];
            return handle;
        }
    }
    if (!why[0])
        snprintf(why, why_len, "%s: %s not found (%s)", JB_GPU_BACKEND_NAME, driver_names[0],
                 driver_hint);
    return NULL;
}

static void *open_compiler(char *name, size_t name_len, char *why, size_t why_len)
{
    why[0] = '\0';
    for (size_t i = 0; i <= COUNT(compiler_majors); i++) {
        if (i < COUNT(compiler_majors))
            snprintf(name, name_len, "%s.%d", compiler_stem, compiler_majors[i]);
        else
            snprintf(name, name_len, "%s", compiler_stem);
        if (i > 0 && i < COUNT(compiler_majors) && compiler_majors[i] == compiler_majors[0])
            continue;
        void *handle = open_library(name, why, why_len);
        if (handle)
            return handle;
    }
    if (!why[0])
        snprintf(why, why_len, "%s: %s.%d not found (nor another version, nor under $%s/%s or %s/%s): %s",
                 JB_GPU_BACKEND_NAME, compiler_stem, compiler_majors[0], root_vars[0],
                 lib_subdirs[0], BUILD_ROOT, lib_subdirs[0], VAR_HINT);
    return NULL;
}

/* The compiler's part of the table, filled once: by the first device enumeration or the first
 * bench compile (jb_bench_compile_with), which needs no driver. */
static pthread_once_t compiler_once = PTHREAD_ONCE_INIT;
static int compiler_status;
static char compiler_failure[512];

static void load_compiler_once(void)
{
    char name[64];
    void *compiler = open_compiler(name, sizeof name, compiler_failure, sizeof compiler_failure);
#if defined(JB_VENDOR_HIP)
    /* Before ROCm 6, hiprtc lives inside libamdhip64 itself. */
    if (!compiler) {
        const char *driver_name = NULL;
        char driver_why[256];
        void *driver = open_driver(&driver_name, driver_why, sizeof driver_why);
        if (driver && dlsym(driver, compiler_calls[0].symbol)) {
            compiler = driver;
            snprintf(name, sizeof name, "%s", driver_name);
        } else if (driver) {
            dlclose(driver);
        }
    }
#endif
    compiler_status = JB_OK;
    if (!compiler) {
        compiler_status = JB_ERR_NO_DEVICE;
    } else if (!resolve(compiler, name, compiler_calls, COUNT(compiler_calls), compiler_failure,
                        sizeof compiler_failure)) {
        dlclose(compiler); /* the driver's handle, before ROCm 6: the driver keeps its own */
        compiler_status = JB_ERR_NO_DEVICE;
    }
    /* Never closed once resolved: modules of this vendor live until the process ends. */
}

int JB_GPU_PREFIXED(load_compiler)(char *why, size_t why_len)
{
    pthread_once(&compiler_once, load_compiler_once);
    if (compiler_status != JB_OK)
        snprintf(why, why_len, "%s", compiler_failure);
    return compiler_status;
}

int JB_GPU_PREFIXED(load)(char *why, size_t why_len)
{
    const char *driver_name = NULL;
    void *driver = open_driver(&driver_name, why, why_len);
    if (!driver)
        return JB_ERR_NO_DEVICE;
    if (!resolve(driver, driver_name, driver_calls, COUNT(driver_calls), why, why_len)) {
        dlclose(driver);
        return JB_ERR_NO_DEVICE;
    }
    for (size_t i = 0; i < COUNT(optional_calls); i++) { /* NULL where the driver lacks one */
        void *symbol = dlsym(driver, optional_calls[i].symbol);
        memcpy((char *)&JB_GPU_PREFIXED(api) + optional_calls[i].offset, &symbol, sizeof symbol);
    }
    int status = JB_GPU_PREFIXED(load_compiler)(why, why_len);
    if (status != JB_OK) {
        dlclose(driver);
        return status;
    }
    /* Never closed: modules, streams and events of this vendor live until the process ends. */
    return JB_OK;
}
