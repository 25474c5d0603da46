/*
 * Whole-source modules (CuPy's RawModule): the caller's source, one per dialect, with several
 * entry points. Built through the module cache like custom kernels; launched with arguments in
 * order, arrays in place.
 */
#include "kernels.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jb_source_module {
    char *name;
    char *module_name;
    uint64_t module_name_hash;
    size_t num_entries;
    char **entry_names;
    jb_compile_options options; /* flags and the caller's compiler options (owned) */
    char *sources[JB_DIALECT_COUNT]; /* NULL where the caller gave none; for code, its marker */
    jb_blob code[JB_DIALECT_COUNT];  /* precompiled code (owned), else empty */
    jb_entry_signature *signatures;  /* NULL, or one per entry, args copied */
    atomic_bool checked[JB_MAX_DEVICES]; /* by device index: the module is this source's code */
};

/* The size of the first jb_source_module_spec: everything up to `dtypes`. */
/* (Later fields, such as `signatures`, read as zero for a caller whose header lacked them.) */
#define SPEC_MIN_SIZE (offsetof(jb_source_module_spec, dtypes) + sizeof(int))

void jb_source_module_free(jb_source_module *m)
{
    if (!m)
        return;
    for (size_t i = 0; m->entry_names && i < m->num_entries; i++)
        free(m->entry_names[i]);
    free(m->entry_names);
    for (size_t i = 0; m->signatures && i < m->num_entries; i++)
        free((void *)m->signatures[i].args);
    free(m->signatures);
    jb__compile_options_free(&m->options);
    for (int d = 0; d < JB_DIALECT_COUNT; d++) {
        free(m->sources[d]);
        free(m->code[d].data);
    }
    free(m->name);
    free(m->module_name);
    free(m);
}

static int spec_check(const jb_source_module_spec *spec)
{
    const char *problem;
    JB_RETURN_IF(!jb__identifier_ok(spec->name, &problem), JB_ERR_INVALID_ARGUMENT,
                 "the module name %s; it must be a C identifier and not reserved", problem);
    bool cpu_code = jb__module_code_given(&spec->cpu_code);
    bool gpu_code = jb__module_code_given(&spec->gpu_code);
    JB_RETURN_IF(!spec->cpu_source && !spec->gpu_source && !cpu_code && !gpu_code,
                 JB_ERR_INVALID_ARGUMENT, "module '%s' has neither a cpu nor a gpu source or code",
                 spec->name);
    JB_RETURN_IF((spec->cpu_source && cpu_code) || (spec->gpu_source && gpu_code),
                 JB_ERR_INVALID_ARGUMENT,
                 "module '%s' has both a source and precompiled code for the %s", spec->name,
                 spec->cpu_source && cpu_code ? "cpu" : "gpu");
    JB_RETURN_IF(spec->num_entries < 1 || spec->num_entries > JB_KERNEL_MAX_ARRAYS ||
                     !spec->entry_names,
                 JB_ERR_INVALID_ARGUMENT, "module '%s' needs 1 to %d entry names", spec->name,
                 JB_KERNEL_MAX_ARRAYS);
    for (size_t i = 0; i < spec->num_entries; i++) {
        JB_RETURN_IF(!jb__identifier_ok(spec->entry_names[i], &problem), JB_ERR_INVALID_ARGUMENT,
                     "module '%s': entry name %zu %s", spec->name, i, problem);
        for (size_t j = 0; j < i; j++)
            JB_RETURN_IF(strcmp(spec->entry_names[i], spec->entry_names[j]) == 0,
                         JB_ERR_INVALID_ARGUMENT, "module '%s' names entry '%s' twice",
                         spec->name, spec->entry_names[i]);
    }
    for (size_t i = 0; spec->signatures && i < spec->num_entries; i++) {
        const jb_entry_signature *sig = &spec->signatures[i];
        if (!sig->declared)
            continue;
        JB_RETURN_IF(sig->num_args > JB_KERNEL_MAX_ARRAYS || (sig->num_args && !sig->args),
                     JB_ERR_INVALID_ARGUMENT,
                     "module '%s': entry '%s' declares NULL or more than %d arguments",
                     spec->name, spec->entry_names[i], JB_KERNEL_MAX_ARRAYS);
        for (size_t a = 0; a < sig->num_args; a++)
            JB_RETURN_IF((sig->args[a].role != JB_ARG_IN && sig->args[a].role != JB_ARG_OUT &&
                          sig->args[a].role != JB_ARG_SCALAR) ||
                             !jb_dtype_name(sig->args[a].dtype),
                         JB_ERR_INVALID_ARGUMENT,
                         "module '%s': argument %zu of entry '%s' has role %d and dtype %d",
                         spec->name, a, spec->entry_names[i], (int)sig->args[a].role,
                         (int)sig->args[a].dtype);
    }
    JB_FORWARD_IF_ERROR(jb__compile_options_check(spec->name, spec->compile_flags, 0,
                                                  spec->defines, spec->num_defines));
    return jb__compiler_options_check(spec->name, &(jb_compile_options){
                                                      spec->compile_flags,
                                                      spec->compiler_options,
                                                      spec->num_compiler_options,
                                                      spec->include_dirs,
                                                      spec->num_include_dirs,
                                                      spec->target_arch});
}

/* Copies the entries' declarations (their argument lists too); false on no memory. */
static bool copy_signatures(jb_source_module *m, const jb_source_module_spec *spec)
{
    if (!spec->signatures)
        return true;
    m->signatures = calloc(spec->num_entries, sizeof *m->signatures);
    if (!m->signatures)
        return false;
    for (size_t i = 0; i < spec->num_entries; i++) {
        const jb_entry_signature *sig = &spec->signatures[i];
        if (!sig->declared)
            continue;
        jb_arg_decl *args = calloc(sig->num_args ? sig->num_args : 1, sizeof *args);
        if (!args)
            return false;
        if (sig->num_args)
            memcpy(args, sig->args, sig->num_args * sizeof *args);
        m->signatures[i] = (jb_entry_signature){1, args, sig->num_args};
    }
    return true;
}

/* The source one dialect compiles: what the options change, then the caller's text. */
static char *module_source(const jb_source_module_spec *spec, const jb_compile_options *options,
                           jb_source_dialect dialect, const char *text)
{
    jb_strbuf sb = {0};
    jb__strbuf_appendf(&sb, "/* generated by jitbridge: module %s, %s backend; ", spec->name,
                       dialect == JB_DIALECT_C ? "cpu" : "cuda/rocm");
    jb__compile_options_describe(&sb, options);
    jb__strbuf_append(&sb, " */\n");
    if (dialect == JB_DIALECT_C)
        jb__strbuf_append(&sb, "#include <stdint.h>\n");
    if (spec->dtypes)
        jb__strbuf_append(&sb, jb__dtype_prelude(dialect));
    jb__append_defines(&sb, spec->defines, spec->num_defines);
    jb__strbuf_appendf(&sb, "#line 1 \"%s.%s\"\n%s\n", spec->name,
                       dialect == JB_DIALECT_C ? "c" : "cu", text);
    if (sb.failed) {
        jb__strbuf_free(&sb);
        return NULL;
    }
    return sb.data;
}

jb_status jb_source_module_new(jb_source_module **out, const jb_source_module_spec *caller)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_source_module_new: out is NULL");
    *out = NULL;
    JB_RETURN_IF(!caller, JB_ERR_INVALID_ARGUMENT, "jb_source_module_new: spec is NULL");
    JB_RETURN_IF(caller->struct_size < SPEC_MIN_SIZE, JB_ERR_INVALID_ARGUMENT,
                 "jb_source_module_new: spec.struct_size is %zu; set it with "
                 "JB_SOURCE_MODULE_SPEC_INIT",
                 caller->struct_size);
    JB_RETURN_IF(caller->struct_size > sizeof(jb_source_module_spec), JB_ERR_UNSUPPORTED,
                 "jb_source_module_new: spec.struct_size is %zu but this library knows %zu "
                 "bytes: the caller was built against a newer jitbridge.h",
                 caller->struct_size, sizeof(jb_source_module_spec));
    jb_source_module_spec spec;
    memset(&spec, 0, sizeof spec);
    memcpy(&spec, caller, caller->struct_size);
    JB_FORWARD_IF_ERROR(spec_check(&spec));

    jb_source_module *m = calloc(1, sizeof *m);
    JB_RETURN_IF(!m, JB_ERR_OUT_OF_MEMORY, "no memory for a module");
    m->num_entries = spec.num_entries;
    const jb_compile_options requested = {spec.compile_flags, spec.compiler_options,
                                          spec.num_compiler_options, spec.include_dirs,
                                          spec.num_include_dirs, spec.target_arch};
    m->name = jb__strdup(spec.name);
    m->entry_names = calloc(spec.num_entries, sizeof *m->entry_names);
    bool ok = m->name && m->entry_names && copy_signatures(m, &spec) &&
              jb__compile_options_copy(&m->options, &requested) == JB_OK;
    for (size_t i = 0; ok && i < spec.num_entries; i++)
        ok = (m->entry_names[i] = jb__strdup(spec.entry_names[i])) != NULL;
    const char *texts[JB_DIALECT_COUNT] = {[JB_DIALECT_C] = spec.cpu_source,
                                           [JB_DIALECT_CUDA] = spec.gpu_source};
    const jb_module_code *codes[JB_DIALECT_COUNT] = {[JB_DIALECT_C] = &spec.cpu_code,
                                                     [JB_DIALECT_CUDA] = &spec.gpu_code};
    for (int d = 0; ok && d < JB_DIALECT_COUNT; d++) {
        if (!jb__module_code_given(codes[d]))
            continue;
        int status = jb__module_code_copy(spec.name, codes[d], &m->code[d]);
        if (status != JB_OK) {
            jb_source_module_free(m);
            return status;
        }
        ok = (m->sources[d] = jb__module_code_marker(&m->code[d])) != NULL;
    }
    /* Every dialect's source, a missing one as a marker: the hash covers them all. */
    uint64_t hash = JB_FNV_SEED;
    for (int d = 0; ok && d < JB_DIALECT_COUNT; d++) {
        if (texts[d])
            ok = (m->sources[d] = module_source(&spec, &m->options, (jb_source_dialect)d,
                                                texts[d])) != NULL;
        const char *hashed = m->sources[d] ? m->sources[d] : "(none)";
        if (ok)
            hash = jb__fnv1a64(hashed, strlen(hashed) + 1, hash);
    }
    /* The entry names too: they are the module's kernel table, so one text with fewer is not it. */
    for (size_t i = 0; ok && i < spec.num_entries; i++)
        hash = jb__fnv1a64(m->entry_names[i], strlen(m->entry_names[i]) + 1, hash);
    size_t len = strlen(spec.name) + 18;
    if (ok && (m->module_name = malloc(len)) != NULL) {
        snprintf(m->module_name, len, "%s_%016" PRIx64, spec.name, hash);
        m->module_name_hash = jb__fnv1a64(m->module_name, strlen(m->module_name), JB_FNV_SEED);
        *out = m;
        return JB_OK;
    }
    jb_source_module_free(m);
    return jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory for module '%s'", spec.name);
}

#ifdef JB_TEST_HOOKS
void jb__test_set_source_module_name(jb_source_module *m, const char *module_name)
{
    char *copy = jb__strdup(module_name);
    if (!copy)
        return;
    free(m->module_name);
    m->module_name = copy;
    m->module_name_hash = jb__fnv1a64(copy, strlen(copy), JB_FNV_SEED);
}
#endif

const char *jb_source_module_name(const jb_source_module *m)
{
    return m ? m->module_name : NULL;
}

static int build_source_module(void *ctx, jb_device *dev, const char *module_name,
                               jb_module **out, bool *from_disk)
{
    jb_source_module *m = ctx;
    const jb_blob *code = &m->code[dev->backend->dialect];
    if (code->data) { /* nothing to compile, nothing to keep on disk: the caller has the code */
        *from_disk = false;
        return jb__module_create(dev, code, m->sources[dev->backend->dialect],
                                 (const char *const *)m->entry_names, m->num_entries, out);
    }
    return jb__module_build(dev, module_name, m->sources[dev->backend->dialect], &m->options,
                            (const char *const *)m->entry_names, m->num_entries, true, out,
                            from_disk);
}

/* The module on `dev`, built (or found) and, on its first use there, checked to be this
 * module's own code. */
static int module_on(jb_source_module *m, jb_device *dev, jb_module **out)
{
    JB_FORWARD_IF_ERROR(jb__get_jit_module(dev, m->module_name, m->module_name_hash,
                                           build_source_module, m, out));
    if (!atomic_load_explicit(&m->checked[dev->index], memory_order_acquire)) {
        JB_FORWARD_IF_ERROR(jb__module_check_source(*out, m->module_name,
                                                    m->sources[dev->backend->dialect]));
        atomic_store_explicit(&m->checked[dev->index], true, memory_order_release);
    }
    return JB_OK;
}

/* The configured function of `entry` in `m`'s module on `dev`, built on first use. */
static int entry_on(jb_source_module *m, jb_device *dev, const char *entry,
                    jb_kernel_config *config, void **fn)
{
    jb_module *module;
    JB_FORWARD_IF_ERROR(module_on(m, dev, &module));
    jb_kernel_entry *kernel = jb__module_kernel(module, entry);
    JB_RETURN_IF(!kernel, JB_ERR_LOAD, "module '%s' has no kernel '%s'", m->module_name, entry);
    return jb__kernel_configured(kernel, NULL, NULL, config, fn);
}

jb_status jb_source_module_prepare(jb_source_module *m, jb_device *device)
{
    JB_RETURN_IF(!m, JB_ERR_INVALID_ARGUMENT, "jb_source_module_prepare: module is NULL");
    JB_RETURN_IF(!device, JB_ERR_INVALID_ARGUMENT, "jb_source_module_prepare: device is NULL");
    jb_module *module; /* built even when no entry is declared */
    JB_FORWARD_IF_ERROR(module_on(m, device, &module));
    for (size_t i = 0; i < m->num_entries; i++) {
        jb_kernel_config config;
        void *fn;
        JB_FORWARD_IF_ERROR(entry_on(m, device, m->entry_names[i], &config, &fn));
    }
    return JB_OK;
}

jb_status jb_source_module_attributes(jb_source_module *m, jb_device *device, const char *entry,
                                      jb_kernel_attributes *out)
{
    JB_RETURN_IF(!m || !device || !entry || !out, JB_ERR_INVALID_ARGUMENT,
                 "jb_source_module_attributes: module, device, entry or out is NULL");
    *out = (jb_kernel_attributes){0};
    bool declared = false;
    for (size_t i = 0; i < m->num_entries; i++)
        declared |= strcmp(m->entry_names[i], entry) == 0;
    JB_RETURN_IF(!declared, JB_ERR_INVALID_ARGUMENT, "module '%s' has no entry point '%.128s'",
                 m->name, entry);
    jb_kernel_config config;
    void *fn;
    JB_FORWARD_IF_ERROR(entry_on(m, device, entry, &config, &fn));
    return jb__kernel_attributes(device, fn, out);
}

/* Checks a declared entry's arguments against its declaration. */
static int check_declared(const jb_source_module *m, const char *entry,
                          const jb_entry_signature *sig, const jb_arg *args, size_t num_args)
{
    static const char *const roles[] = {"", "a read array", "a written array", "a scalar"};
    JB_RETURN_IF(num_args != sig->num_args, JB_ERR_INVALID_ARGUMENT,
                 "module '%s': entry '%s' takes %zu arguments, not %zu", m->name, entry,
                 sig->num_args, num_args);
    for (size_t i = 0; i < num_args; i++) {
        const jb_arg_decl *want = &sig->args[i];
        int role = !args[i].array ? JB_ARG_SCALAR : args[i].written ? JB_ARG_OUT : JB_ARG_IN;
        JB_RETURN_IF(role != (int)want->role, JB_ERR_INVALID_ARGUMENT,
                     "module '%s': argument %zu of entry '%s' is %s, declared %s", m->name, i,
                     entry, roles[role], roles[want->role]);
        jb_dtype dtype = args[i].array ? jb_array_dtype(args[i].array) : args[i].scalar.dtype;
        JB_RETURN_IF(dtype != want->dtype, JB_ERR_SHAPE,
                     "module '%s': argument %zu of entry '%s' is %s, declared %s", m->name, i,
                     entry, jb_dtype_name(dtype), jb_dtype_name(want->dtype));
    }
    return JB_OK;
}

/* Checks the arguments and finds the device: the stream's, else the first array's. */
static int check_args(const jb_source_module *m, jb_stream *stream, const jb_arg *args,
                      size_t num_args, jb_device **out)
{
    JB_RETURN_IF(num_args > JB_KERNEL_MAX_ARRAYS || (num_args && !args), JB_ERR_INVALID_ARGUMENT,
                 "module '%s': args are NULL or more than %d", m->name, JB_KERNEL_MAX_ARRAYS);
    if (stream) /* a parent's stream is not the child's to queue on, as for custom kernels */
        JB_FORWARD_IF_ERROR(jb__stream_check_process(stream, "jb_source_module_launch"));
    jb_device *dev = stream ? stream->device : NULL;
    for (size_t i = 0; i < num_args; i++) {
        if (args[i].array) {
            if (!dev)
                dev = jb_array_device(args[i].array);
            JB_RETURN_IF(jb_array_device(args[i].array) != dev, JB_ERR_INVALID_ARGUMENT,
                         "module '%s': argument %zu is on another device", m->name, i);
        } else {
            jb_dtype dtype = args[i].scalar.dtype;
            JB_RETURN_IF(!jb_dtype_name(dtype), JB_ERR_INVALID_ARGUMENT,
                         "module '%s': argument %zu is neither an array nor a scalar", m->name,
                         i);
            JB_RETURN_IF(dtype == JB_BOOL && args[i].scalar.value.boolean > 1,
                         JB_ERR_INVALID_ARGUMENT, "module '%s': bool argument %zu is %u",
                         m->name, i, args[i].scalar.value.boolean);
        }
    }
    JB_RETURN_IF(!dev, JB_ERR_INVALID_ARGUMENT,
                 "module '%s': no array and no stream, so no device to launch on", m->name);
    JB_RETURN_IF(!m->sources[dev->backend->dialect], JB_ERR_UNSUPPORTED,
                 "module '%s' has no source for the %s backend", m->name, dev->backend->name);
    *out = dev;
    return JB_OK;
}

jb_status jb_source_module_launch(jb_source_module *m, jb_stream *stream, const char *entry,
                                  const jb_arg *args, size_t num_args,
                                  const jb_launch_shape *shape)
{
    JB_RETURN_IF(!m, JB_ERR_INVALID_ARGUMENT, "jb_source_module_launch: module is NULL");
    JB_RETURN_IF(!entry, JB_ERR_INVALID_ARGUMENT, "jb_source_module_launch: entry is NULL");
    size_t index = m->num_entries;
    for (size_t i = 0; i < m->num_entries; i++)
        if (strcmp(m->entry_names[i], entry) == 0)
            index = i;
    JB_RETURN_IF(index == m->num_entries, JB_ERR_INVALID_ARGUMENT,
                 "module '%s' has no entry point '%.128s'", m->name, entry);
    const jb_entry_signature *sig =
        m->signatures && m->signatures[index].declared ? &m->signatures[index] : NULL;
    jb_device *dev = NULL;
    JB_FORWARD_IF_ERROR(check_args(m, stream, args, num_args, &dev));
    if (sig)
        JB_FORWARD_IF_ERROR(check_declared(m, entry, sig, args, num_args));
    jb_kernel_config defaults = {0, 0};
    uint32_t grid[3], block[3];
    uint64_t total;
    JB_FORWARD_IF_ERROR(jb__resolve_launch_shape(shape, &defaults, grid, block, &total));
    if (!stream)
        JB_FORWARD_IF_ERROR(jb__current_stream(dev, &stream));
    JB_RETURN_IF(atomic_load_explicit(&stream->capture, memory_order_acquire) != NULL,
                 JB_ERR_UNSUPPORTED,
                 "jb_source_module_launch: the stream is capturing a graph, and graphs hold "
                 "custom kernels' launches only (launch the module outside the capture)");

    jb_kernel_config config;
    void *fn;
    JB_FORWARD_IF_ERROR(entry_on(m, dev, entry, &config, &fn));

    /* The arguments, then (a declared entry) each array's element count. */
    _Alignas(8) unsigned char slots[2 * JB_KERNEL_MAX_ARRAYS * JB_SCALAR_SLOT];
    size_t num_slots = num_args;
    jb_buffer *buffers[JB_KERNEL_MAX_ARRAYS];
    size_t num_buffers = 0;
    for (size_t i = 0; i < num_args; i++) {
        unsigned char *slot = slots + i * JB_SCALAR_SLOT;
        memset(slot, 0, JB_SCALAR_SLOT);
        if (!args[i].array) {
            memcpy(slot, &args[i].scalar.value, jb_dtype_size(args[i].scalar.dtype));
            continue;
        }
        if (args[i].written) { /* after its maker, and after its readers on other streams */
            JB_FORWARD_IF_ERROR(jb__array_order_write(args[i].array, stream));
        } else {
            jb_event *ready = jb__array_ready_for_read(args[i].array, stream);
            if (ready)
                JB_FORWARD_IF_ERROR(jb__event_order_before(ready, stream));
        }
        buffers[num_buffers] = jb__array_buffer(args[i].array);
        memcpy(slot, &buffers[num_buffers]->ptr, sizeof(void *));
        num_buffers++;
    }
    for (size_t i = 0; sig && i < num_args; i++)
        if (args[i].array) {
            uint64_t count = (uint64_t)jb_array_size(args[i].array);
            memcpy(slots + num_slots++ * JB_SCALAR_SLOT, &count, sizeof count);
        }
    jb_launch_args launch = {0, NULL, NULL, total, num_slots, slots, true};
    jb_event *done = NULL;
    int status = total ? dev->backend->launch(dev, stream->native, fn, grid, block, 0, &launch)
                       : JB_OK; /* an empty batch: no backend launches a grid of no blocks */
    /* Written arrays are ready when the entry has run; all stay held until then. */
    if (status == JB_OK)
        status = jb__stream_record_hold(stream, &done, buffers, num_buffers);
    if (status != JB_OK) {
        /* Queued or not, nothing may reuse these buffers before the stream is past them. */
        dev->backend->stream_synchronize(dev, stream->native);
        jb__event_release(done);
        return status;
    }
    for (size_t i = 0; i < num_args; i++)
        if (args[i].array && args[i].written) {
            jb__event_retain(done);
            jb__array_written(args[i].array, done);
        }
    jb__event_release(done);
    return JB_OK;
}

/* Global `name` of the module on `dev`, with [offset, offset + bytes) inside it (and writable
 * when `writing`): its address at `offset`, its whole size. */
static int global_range(jb_source_module *m, jb_device *dev, const char *verb, const char *name,
                        size_t offset, size_t bytes, bool writing, void **out_addr,
                        size_t *out_size)
{
    const char *problem;
    JB_RETURN_IF(!jb__identifier_ok(name, &problem), JB_ERR_INVALID_ARGUMENT,
                 "%s: module '%s': the global's name %s", verb, m->name, problem);
    JB_RETURN_IF(!m->sources[dev->backend->dialect], JB_ERR_UNSUPPORTED,
                 "module '%s' has no source for the %s backend", m->name, dev->backend->name);
    jb_module *module;
    JB_FORWARD_IF_ERROR(module_on(m, dev, &module));
    void *addr;
    size_t size;
    bool writable;
    JB_FORWARD_IF_ERROR(jb__module_global(module, name, &addr, &size, &writable));
    JB_RETURN_IF(offset > size || bytes > size - offset, JB_ERR_INVALID_ARGUMENT,
                 "%s: module '%s': bytes [%zu, %zu + %zu) lie outside global '%s' of %zu bytes",
                 verb, m->module_name, offset, offset, bytes, name, size);
    JB_RETURN_IF(writing && !writable, JB_ERR_INVALID_ARGUMENT,
                 "%s: module '%s': global '%s' is const (its pages are read-only)", verb,
                 m->module_name, name);
    *out_addr = (unsigned char *)addr + offset;
    *out_size = size;
    return JB_OK;
}

jb_status jb_source_module_global_size(jb_source_module *m, jb_device *device, const char *name,
                                       size_t *out_size)
{
    const char *verb = "jb_source_module_global_size";
    JB_RETURN_IF(!m || !device || !out_size, JB_ERR_INVALID_ARGUMENT,
                 "%s: module, device or out_size is NULL", verb);
    *out_size = 0;
    void *addr;
    return global_range(m, device, verb, name, 0, 0, false, &addr, out_size);
}

/* A copy to or from global `name`, after `stream`'s launches so far and before its later ones
 * (NULL: the thread's default stream of `device`; both given: on the same device). The cpu's
 * copies are not queued, so the stream is waited for first on every backend. */
static int global_copy(jb_source_module *m, jb_device *device, jb_stream *stream,
                       const char *name, size_t offset, void *host, size_t bytes, bool writing)
{
    const char *verb = writing ? "jb_source_module_global_write" : "jb_source_module_global_read";
    JB_RETURN_IF(!m, JB_ERR_INVALID_ARGUMENT, "%s: module is NULL", verb);
    JB_RETURN_IF(bytes && !host, JB_ERR_INVALID_ARGUMENT, "%s: the host data is NULL", verb);
    JB_RETURN_IF(!device && !stream, JB_ERR_INVALID_ARGUMENT,
                 "%s: module '%s': no device and no stream", verb, m->name);
    if (stream)
        JB_FORWARD_IF_ERROR(jb__stream_check_process(stream, verb));
    JB_RETURN_IF(device && stream && stream->device != device, JB_ERR_INVALID_ARGUMENT,
                 "%s: module '%s': the stream is on another device", verb, m->name);
    jb_device *dev = stream ? stream->device : device;
    void *global;
    size_t size;
    JB_FORWARD_IF_ERROR(global_range(m, dev, verb, name, offset, bytes, writing, &global, &size));
    if (!stream)
        JB_FORWARD_IF_ERROR(jb__current_stream(dev, &stream));
    JB_RETURN_IF(atomic_load_explicit(&stream->capture, memory_order_acquire) != NULL,
                 JB_ERR_UNSUPPORTED,
                 "%s: the stream is capturing a graph, which holds no copies (copy outside it)",
                 verb);
    if (!bytes)
        return JB_OK;
    JB_FORWARD_IF_ERROR(dev->backend->stream_synchronize(dev, stream->native));
    return writing ? dev->backend->memcpy_htod(dev, stream->native, global, host, bytes)
                   : dev->backend->memcpy_dtoh(dev, host, global, bytes);
}

jb_status jb_source_module_global_write(jb_source_module *m, jb_device *device,
                                        jb_stream *stream, const char *name, size_t offset,
                                        const void *src, size_t bytes)
{
    return global_copy(m, device, stream, name, offset, (void *)src, bytes, true);
}

jb_status jb_source_module_global_read(jb_source_module *m, jb_device *device, jb_stream *stream,
                                       const char *name, size_t offset, void *dst, size_t bytes)
{
    return global_copy(m, device, stream, name, offset, dst, bytes, false);
}
