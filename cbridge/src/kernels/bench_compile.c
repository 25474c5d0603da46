/*
 * jb_bench_compile_with: what one compile of a kernel's own generated source costs with a set of
 * compiler options, and what code it makes (its size and SHA-256, so that two option sets can be
 * shown to make the same code), optionally loaded on a device (for PTX: the driver's JIT). The
 * bench's compile-options section compares the library's options with the alternatives.
 */
#include "kernels.h"
#include "../cpu/cpu.h"

#include <stdlib.h>
#include <string.h>

/* The backend compile, for `backend` ("cpu", "cuda", "rocm"): with `options`, the compiler gets
 * exactly these in place of the library's own (the cpu's fixed flags, a GPU's architecture and
 * flags), then the kernel's; without, what a build runs. */
static int compile_with(const char *backend, const char *arch, const char *const *options,
                        size_t num_options, const jb_custom_kernel *kernel, jb_blob *code)
{
    if (strcmp(backend, "cpu") == 0) {
        const char *source = kernel->sources[JB_DIALECT_C];
        if (!options)
            return jb__cpu_compile(NULL, kernel->module_name, source, &kernel->options, code);
        /* The child's argument list is not const; the compiler never writes it. */
        return jb__cpu_compile_flags((char *const *)options, num_options, kernel->module_name,
                                     source, &kernel->options, code);
    }
#if defined(JB_WITH_CUDA)
    if (strcmp(backend, "cuda") == 0)
        return jb__cuda_bench_compile(arch, options, num_options, kernel->module_name,
                                      kernel->sources[JB_DIALECT_CUDA], &kernel->options, code);
#endif
#if defined(JB_WITH_ROCM)
    if (strcmp(backend, "rocm") == 0)
        return jb__rocm_bench_compile(arch, options, num_options, kernel->module_name,
                                      kernel->sources[JB_DIALECT_CUDA], &kernel->options, code);
#endif
    (void)arch;
    return jb__fail(JB_ERR_NO_DEVICE, "jb_bench_compile_with: no backend '%s' in this build",
                    backend);
}

jb_status jb_bench_compile_with(jb_bench_compile_cost *out, jb_custom_kernel *kernel,
                                const char *backend, const char *arch,
                                const char *const *options, size_t num_options,
                                jb_device *load_on)
{
    JB_RETURN_IF(!out || !kernel || !backend || (!options && num_options), JB_ERR_INVALID_ARGUMENT,
                 "jb_bench_compile_with: bad arguments");
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < num_options; i++)
        JB_RETURN_IF(!options[i], JB_ERR_INVALID_ARGUMENT,
                     "jb_bench_compile_with: option %zu is NULL", i);
    JB_RETURN_IF(load_on && strcmp(load_on->backend->name, backend) != 0,
                 JB_ERR_INVALID_ARGUMENT,
                 "jb_bench_compile_with: code compiled for %s cannot be loaded on %s", backend,
                 load_on->name);
    jb_device *seal_device = load_on;
    if (!seal_device)
        JB_FORWARD_IF_ERROR(jb_device_get(&seal_device, JB_DEVICE_CPU, 0));
    jb__event_build_begin(seal_device, kernel->module_name, ""); /* what a seal violation names */
    int sealed = jb__seal_check(seal_device, kernel->module_name, false);
    jb__event_build_end();
    JB_FORWARD_IF_ERROR(sealed);
    if (!arch && load_on && strcmp(backend, "cpu") != 0)
        arch = load_on->arch;
    jb_blob code = {0};
    uint64_t start = jb__now_ns();
    int status = compile_with(backend, arch, options, num_options, kernel, &code);
    out->compile_ns = (double)(jb__now_ns() - start);
    if (status != JB_OK)
        return status;
    out->code_bytes = code.size;
    jb__sha256(code.data, code.size, out->code_sha256);
    if (load_on) {
        /* The kernel is found too: a lazily loading driver may put off the JIT until then. */
        void *module = NULL, *fn = NULL;
        start = jb__now_ns();
        status = load_on->backend->module_load(load_on, &code, &module);
        if (status == JB_OK)
            status = load_on->backend->module_function(load_on, module, kernel->name, &fn);
        out->load_ns = (double)(jb__now_ns() - start);
        if (module)
            load_on->backend->module_unload(load_on, module);
    }
    free(code.data);
    return status;
}
