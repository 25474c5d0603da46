/*
 * Custom kernels: a kernel object owns its spec (names, dtypes, configure hook) and the source
 * kernel_source.c generates from it; its module is built through the module cache on first use
 * and launched here, after every argument has been checked.
 */
#include "kernels.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DEFAULT_THREADS_PER_BLOCK 256
#define MAX_THREADS_PER_BLOCK 1024
#define MAX_OUTPUT_ELEMENTS (INT64_C(1) << 40)

void jb_custom_kernel_free(jb_custom_kernel *kernel)
{
    if (!kernel)
        return;
    for (size_t i = 0; kernel->input_names && i < kernel->num_inputs; i++)
        free(kernel->input_names[i]);
    for (size_t i = 0; kernel->output_names && i < kernel->num_outputs; i++)
        free(kernel->output_names[i]);
    free(kernel->input_names);
    free(kernel->output_names);
    for (size_t i = 0; kernel->scalar_names && i < kernel->num_scalars; i++)
        free(kernel->scalar_names[i]);
    free(kernel->scalar_names);
    free(kernel->input_dtypes);
    free(kernel->output_dtypes);
    free(kernel->scalar_dtypes);
    for (size_t i = 0; kernel->checked_names && i < kernel->num_checked; i++)
        free(kernel->checked_names[i]);
    free(kernel->checked_names);
    free(kernel->output_inits);
    jb__compile_options_free(&kernel->options);
    free(kernel->name);
    free(kernel->module_name);
    for (int d = 0; d < JB_DIALECT_COUNT; d++)
        free(kernel->sources[d]);
    free(kernel);
}

static char **copy_names(const char *const *names, size_t count)
{
    char **copy = calloc(count ? count : 1, sizeof *copy);
    for (size_t i = 0; copy && i < count; i++)
        if (!(copy[i] = jb__strdup(names[i]))) {
            while (i-- > 0)
                free(copy[i]);
            free(copy);
            return NULL;
        }
    return copy;
}

static jb_dtype *copy_dtypes(const jb_dtype *dtypes, size_t count)
{
    jb_dtype *copy = calloc(count ? count : 1, sizeof *copy);
    if (copy && count)
        memcpy(copy, dtypes, count * sizeof *copy);
    return copy;
}

/* The size of a jb_kernel_spec up to configure_user_data: the first header's struct. */
#define SPEC_V1_SIZE (offsetof(jb_kernel_spec, configure_user_data) + sizeof(void *))

/* Copies the caller's spec into a full-size one: fields its header lacked read as zero. */
static int spec_normalize(jb_kernel_spec *full, const jb_kernel_spec *spec)
{
    JB_RETURN_IF(!spec, JB_ERR_INVALID_ARGUMENT, "jb_custom_kernel_new: spec is NULL");
    JB_RETURN_IF(spec->struct_size < SPEC_V1_SIZE, JB_ERR_INVALID_ARGUMENT,
                 "jb_custom_kernel_new: spec.struct_size is %zu; set it with JB_KERNEL_SPEC_INIT "
                 "(sizeof(jb_kernel_spec))",
                 spec->struct_size);
    JB_RETURN_IF(spec->struct_size > sizeof *full, JB_ERR_UNSUPPORTED,
                 "jb_custom_kernel_new: spec.struct_size is %zu but this library knows %zu "
                 "bytes: the caller was built against a newer jitbridge.h",
                 spec->struct_size, sizeof *full);
    memset(full, 0, sizeof *full);
    memcpy(full, spec, spec->struct_size);
    return JB_OK;
}

static bool bounds_checks_for_all;
static pthread_once_t bounds_checks_once = PTHREAD_ONCE_INIT;

/* JITBRIDGE_BOUNDS_CHECKS, read once: 1, true, yes or on (any case) checks every kernel. */
static void read_bounds_checks(void)
{
    const char *value = getenv("JITBRIDGE_BOUNDS_CHECKS");
    static const char *const on[] = {"1", "true", "yes", "on"};
    static const char *const off[] = {"", "0", "false", "no", "off"};
    bool known = !value;
    for (size_t i = 0; value && i < sizeof on / sizeof *on; i++)
        if (strcasecmp(value, on[i]) == 0)
            bounds_checks_for_all = known = true;
    for (size_t i = 0; value && i < sizeof off / sizeof *off; i++)
        known = known || strcasecmp(value, off[i]) == 0;
    if (!known)
        jb__warn("JITBRIDGE_BOUNDS_CHECKS='%.64s' is not 1, true, yes, on, 0, false, no or off: "
                 "kernels are not bounds-checked", value);
}

/* Checks and copies the initial values of the outputs; a bool output without one starts false:
 * a C bool that is neither 0 nor 1 is undefined to read, and another kernel may read it. */
static int copy_output_inits(jb_custom_kernel *k, const jb_kernel_spec *spec)
{
    bool any_bool = false;
    for (size_t i = 0; i < spec->num_outputs; i++)
        any_bool |= spec->output_dtypes[i] == JB_BOOL;
    if (!spec->output_inits && !any_bool)
        return JB_OK;
    for (size_t i = 0; spec->output_inits && i < spec->num_outputs; i++) {
        const jb_scalar *init = &spec->output_inits[i];
        if (init->dtype == JB_DTYPE_INVALID)
            continue;
        JB_RETURN_IF(init->dtype != spec->output_dtypes[i], JB_ERR_SHAPE,
                     "kernel '%s': the initial value of output '%s' is %s, the output %s",
                     spec->name, spec->output_names[i],
                     jb_dtype_name(init->dtype) ? jb_dtype_name(init->dtype) : "no dtype",
                     jb_dtype_name(spec->output_dtypes[i]));
        JB_FORWARD_IF_ERROR(jb__scalar_check(spec->name, init));
    }
    k->output_inits = malloc(spec->num_outputs * sizeof *k->output_inits);
    JB_RETURN_IF(!k->output_inits, JB_ERR_OUT_OF_MEMORY, "no memory for kernel '%s'",
                 spec->name);
    for (size_t i = 0; i < spec->num_outputs; i++) {
        if (spec->output_inits && spec->output_inits[i].dtype != JB_DTYPE_INVALID)
            k->output_inits[i] = spec->output_inits[i];
        else if (spec->output_dtypes[i] == JB_BOOL)
            k->output_inits[i] = (jb_scalar){.dtype = JB_BOOL, .value.boolean = 0};
        else
            k->output_inits[i] = (jb_scalar){.dtype = JB_DTYPE_INVALID};
    }
    return JB_OK;
}

jb_status jb_custom_kernel_new(jb_custom_kernel **out, const jb_kernel_spec *caller_spec)
{
    JB_RETURN_IF(!out, JB_ERR_INVALID_ARGUMENT, "jb_custom_kernel_new: out is NULL");
    *out = NULL;
    jb_kernel_spec full, *spec = &full;
    JB_FORWARD_IF_ERROR(spec_normalize(&full, caller_spec));
    JB_FORWARD_IF_ERROR(jb__kernel_spec_check(spec));
    pthread_once(&bounds_checks_once, read_bounds_checks);
    jb_custom_kernel *k = calloc(1, sizeof *k);
    JB_RETURN_IF(!k, JB_ERR_OUT_OF_MEMORY, "no memory for a kernel");
    k->num_inputs = spec->num_inputs;
    k->num_outputs = spec->num_outputs;
    k->num_scalars = spec->num_scalars;
    const jb_compile_options requested = {
        spec->compile_flags | (bounds_checks_for_all ? JB_COMPILE_BOUNDS_CHECKS : 0),
        spec->compiler_options, spec->num_compiler_options, spec->include_dirs,
        spec->num_include_dirs, spec->target_arch};
    if (jb__compile_options_copy(&k->options, &requested) != JB_OK) {
        free(k);
        return JB_ERR_OUT_OF_MEMORY;
    }
    k->bounds_checked = k->options.flags & JB_COMPILE_BOUNDS_CHECKS;
    k->configure = spec->configure;
    k->configure_user_data = spec->configure_user_data;
    k->disk_cacheable = true;
    k->name = jb__strdup(spec->name);
    k->input_names = copy_names(spec->input_names, spec->num_inputs);
    k->output_names = copy_names(spec->output_names, spec->num_outputs);
    k->scalar_names = copy_names(spec->scalar_names, spec->num_scalars);
    k->input_dtypes = copy_dtypes(spec->input_dtypes, spec->num_inputs);
    k->output_dtypes = copy_dtypes(spec->output_dtypes, spec->num_outputs);
    k->scalar_dtypes = copy_dtypes(spec->scalar_dtypes, spec->num_scalars);
    int status;
    if (!k->name || !k->input_names || !k->output_names || !k->scalar_names ||
        !k->input_dtypes || !k->output_dtypes || !k->scalar_dtypes) {
        status = jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory for a kernel");
        goto done;
    }
    if ((status = copy_output_inits(k, spec)) != JB_OK ||
        (status = jb__kernel_generate(k, spec)) != JB_OK)
        goto done;
    *out = k;
    return JB_OK;
done:
    jb_custom_kernel_free(k);
    return status;
}

const char *jb_custom_kernel_module_name(const jb_custom_kernel *kernel)
{
    return kernel ? kernel->module_name : NULL;
}

int jb_custom_kernel_bounds_checked(const jb_custom_kernel *kernel)
{
    return kernel && kernel->bounds_checked;
}

const char *jb_custom_kernel_source(const jb_custom_kernel *kernel, const char *backend)
{
    jb_source_dialect dialect;
    if (!kernel || !jb__backend_name_dialect(backend, &dialect))
        return NULL;
    return kernel->sources[dialect];
}

/* The cache's builder for a custom kernel: one module holding the one kernel. */
static int build_custom_module(void *ctx, jb_device *dev, const char *module_name,
                               jb_module **out, bool *from_disk)
{
    jb_custom_kernel *k = ctx;
    const char *names[] = {k->name};
    return jb__module_build(dev, module_name, k->sources[dev->backend->dialect], &k->options,
                            names, 1, k->disk_cacheable, out, from_disk);
}

int jb__resolve_launch_shape(const jb_launch_shape *shape, const jb_kernel_config *config,
                             uint32_t grid[3], uint32_t block[3], uint64_t *total)
{
    JB_RETURN_IF(!shape, JB_ERR_INVALID_ARGUMENT, "the launch shape is NULL");
    if (shape->grid[0] == 0 && shape->grid[1] == 0 && shape->grid[2] == 0) {
        if (shape->total_threads == 0) { /* an empty batch: checked like any launch, runs nothing */
            grid[0] = 0, grid[1] = grid[2] = 1;
            block[0] = block[1] = block[2] = 1;
            *total = 0;
            return JB_OK;
        }
        uint64_t per_block = config->threads_per_block ? config->threads_per_block
                                                       : DEFAULT_THREADS_PER_BLOCK;
        if (per_block > shape->total_threads)
            per_block = shape->total_threads;
        uint64_t blocks = jb__ceil_div_u64(shape->total_threads, per_block);
        JB_RETURN_IF(per_block > MAX_THREADS_PER_BLOCK || blocks > UINT32_MAX,
                     JB_ERR_INVALID_ARGUMENT, "%" PRIu64 " threads do not fit one launch",
                     shape->total_threads);
        grid[0] = (uint32_t)blocks, grid[1] = grid[2] = 1;
        block[0] = (uint32_t)per_block, block[1] = block[2] = 1;
        *total = shape->total_threads;
        return JB_OK;
    }
    uint64_t blocks = 1, per_block = 1;
    bool wrapped = false; /* three 32-bit factors can pass 2^64 */
    for (int i = 0; i < 3; i++) {
        /* A grid with no blocks in some dimension is an empty launch; a block must have threads. */
        JB_RETURN_IF(shape->block[i] == 0, JB_ERR_INVALID_ARGUMENT,
                     "block dimensions must be at least 1");
        grid[i] = shape->grid[i];
        block[i] = shape->block[i];
        wrapped |= !jb__mul_u64(blocks, grid[i], &blocks);
        wrapped |= !jb__mul_u64(per_block, block[i], &per_block);
    }
    JB_RETURN_IF(wrapped || per_block > MAX_THREADS_PER_BLOCK, JB_ERR_INVALID_ARGUMENT,
                 "%u x %u x %u threads per block exceed %d, or %u x %u x %u blocks of them "
                 "overflow a 64-bit count",
                 block[0], block[1], block[2], MAX_THREADS_PER_BLOCK, grid[0], grid[1], grid[2]);
    JB_RETURN_IF(!jb__mul_u64(blocks, per_block, total), JB_ERR_INVALID_ARGUMENT,
                 "%u x %u x %u blocks of %" PRIu64 " threads overflow a 64-bit count", grid[0],
                 grid[1], grid[2], per_block);
    return JB_OK;
}

/* Checks the scalars against the kernel's and stores each value in its slot. */
int jb__stage_scalars(const jb_custom_kernel *k, const jb_scalar *scalars, size_t num_scalars,
                      unsigned char *slots)
{
    JB_RETURN_IF(num_scalars != k->num_scalars || (num_scalars && !scalars),
                 JB_ERR_INVALID_ARGUMENT, "kernel '%s' takes %zu scalars, not %zu%s", k->name,
                 k->num_scalars, num_scalars, num_scalars && !scalars ? " (scalars is NULL)" : "");
    for (size_t i = 0; i < num_scalars; i++) {
        JB_RETURN_IF(scalars[i].dtype != k->scalar_dtypes[i], JB_ERR_SHAPE,
                     "scalar '%s' of kernel '%s' is not a valid %s: it is %s", k->scalar_names[i],
                     k->name, jb_dtype_name(k->scalar_dtypes[i]),
                     jb_dtype_name(scalars[i].dtype) ? jb_dtype_name(scalars[i].dtype)
                                                     : "no dtype");
        JB_RETURN_IF(scalars[i].dtype == JB_BOOL && scalars[i].value.boolean > 1,
                     JB_ERR_INVALID_ARGUMENT, "bool scalar '%s' of kernel '%s' is %u, not 0 or 1",
                     k->scalar_names[i], k->name, scalars[i].value.boolean);
        memset(slots + i * JB_SCALAR_SLOT, 0, JB_SCALAR_SLOT);
        memcpy(slots + i * JB_SCALAR_SLOT, &scalars[i].value, jb_dtype_size(scalars[i].dtype));
    }
    return JB_OK;
}

/* Finds (or builds) the kernel's module on `dev` and runs its configure hook once. */
int jb__custom_kernel_prepare(jb_custom_kernel *k, jb_device *dev, jb_kernel_config *config,
                              void **fn)
{
    jb_module *module;
    JB_FORWARD_IF_ERROR(jb__get_jit_module(dev, k->module_name, k->module_name_hash,
                                           build_custom_module, k, &module));
    /* Before its first use on the device, the kernel makes sure the module is its own code. */
    if (!atomic_load_explicit(&k->configured[dev->index].configured, memory_order_acquire))
        JB_FORWARD_IF_ERROR(jb__module_check_source(module, k->module_name,
                                                    k->sources[dev->backend->dialect]));
    jb_kernel_entry *entry = jb__module_kernel(module, k->name);
    JB_RETURN_IF(!entry, JB_ERR_LOAD, "module '%s' has no kernel '%s'", k->module_name, k->name);
    return jb__kernel_configured_for(entry, &k->configured[dev->index], k->configure,
                                     k->configure_user_data, config, fn);
}

jb_status jb_custom_kernel_prepare(jb_custom_kernel *kernel, jb_device *device)
{
    JB_RETURN_IF(!kernel, JB_ERR_INVALID_ARGUMENT, "jb_custom_kernel_prepare: kernel is NULL");
    JB_RETURN_IF(!device, JB_ERR_INVALID_ARGUMENT, "jb_custom_kernel_prepare: device is NULL");
    jb_kernel_config config;
    void *fn;
    return jb__custom_kernel_prepare(kernel, device, &config, &fn);
}

int jb__kernel_attributes(jb_device *dev, void *fn, jb_kernel_attributes *out)
{
    *out = (jb_kernel_attributes){0};
    jb_kernel_attributes got = {0};
    JB_FORWARD_IF_ERROR(dev->backend->kernel_attributes(dev, fn, &got));
    /* A launch's own limit bounds every backend's (jb__resolve_launch_shape). */
    if (got.max_threads_per_block <= 0 || got.max_threads_per_block > MAX_THREADS_PER_BLOCK)
        got.max_threads_per_block = MAX_THREADS_PER_BLOCK;
    *out = got;
    return JB_OK;
}

jb_status jb_custom_kernel_attributes(jb_custom_kernel *kernel, jb_device *device,
                                      jb_kernel_attributes *out)
{
    JB_RETURN_IF(!kernel || !device || !out, JB_ERR_INVALID_ARGUMENT,
                 "jb_custom_kernel_attributes: kernel, device or out is NULL");
    *out = (jb_kernel_attributes){0};
    jb_kernel_config config;
    void *fn;
    JB_FORWARD_IF_ERROR(jb__custom_kernel_prepare(kernel, device, &config, &fn));
    return jb__kernel_attributes(device, fn, out);
}

/* The size of the first jb_launch: everything up to `shape`. */
#define LAUNCH_MIN_SIZE (offsetof(jb_launch, shape) + sizeof(jb_launch_shape))

/* A new output's shape, checked: its element count fits what a launch may make. */
static int check_output_shape(const jb_custom_kernel *k, size_t i, const int64_t *shape, int ndim)
{
    JB_RETURN_IF(ndim < 0 || ndim > JB_MAX_NDIM || (ndim > 0 && !shape), JB_ERR_INVALID_ARGUMENT,
                 "output '%s' of kernel '%s' has a bad shape", k->output_names[i], k->name);
    uint64_t elements = 1;
    for (int d = 0; d < ndim; d++) {
        JB_RETURN_IF(shape[d] < 0 || shape[d] > MAX_OUTPUT_ELEMENTS, JB_ERR_INVALID_ARGUMENT,
                     "output '%s' of kernel '%s' has dimension %d of %lld", k->output_names[i],
                     k->name, d, (long long)shape[d]);
        /* 2^40 x 2^40 wraps a 64-bit count (to 0: a 0-byte output the kernel writes into). */
        JB_RETURN_IF(!jb__mul_u64(elements, (uint64_t)shape[d], &elements) ||
                         elements > (uint64_t)MAX_OUTPUT_ELEMENTS,
                     JB_ERR_INVALID_ARGUMENT,
                     "output '%s' of kernel '%s' has more than 2^40 elements", k->output_names[i],
                     k->name);
    }
    return JB_OK;
}

/* Checks every array of the launch and finds its device: the stream's, the inputs', the
 * in-place outputs', else the launch's own. */
static int validate_launch(const jb_custom_kernel *k, const jb_launch *l, jb_device **out)
{
    JB_RETURN_IF(l->num_inputs && !l->inputs, JB_ERR_INVALID_ARGUMENT,
                 "jb_custom_kernel_launch: inputs is NULL");
    JB_RETURN_IF(l->num_inputs != k->num_inputs, JB_ERR_INVALID_ARGUMENT,
                 "kernel '%s' takes %zu inputs, not %zu", k->name, k->num_inputs, l->num_inputs);
    jb_device *dev = l->stream ? l->stream->device : NULL;
    for (size_t i = 0; i < l->num_inputs; i++) {
        jb_array *x = l->inputs[i];
        JB_RETURN_IF(!x, JB_ERR_INVALID_ARGUMENT, "input %zu of kernel '%s' is NULL", i, k->name);
        JB_RETURN_IF(jb_array_dtype(x) != k->input_dtypes[i], JB_ERR_SHAPE,
                     "input '%s' of kernel '%s' is %s, expected %s", k->input_names[i], k->name,
                     jb_dtype_name(jb_array_dtype(x)), jb_dtype_name(k->input_dtypes[i]));
        if (!dev)
            dev = jb_array_device(x);
        JB_RETURN_IF(jb_array_device(x) != dev, JB_ERR_INVALID_ARGUMENT,
                     "input '%s' of kernel '%s' is on %s, the launch on %s", k->input_names[i],
                     k->name, jb_array_device(x)->name, dev->name);
    }
    for (size_t i = 0; i < k->num_outputs; i++) {
        jb_array *y = l->in_place ? l->in_place[i] : NULL;
        if (!y) {
            JB_RETURN_IF(!l->output_shapes || !l->output_ndims, JB_ERR_INVALID_ARGUMENT,
                         "jb_custom_kernel_launch: output shapes are NULL");
            JB_FORWARD_IF_ERROR(
                check_output_shape(k, i, l->output_shapes[i], l->output_ndims[i]));
            continue;
        }
        JB_RETURN_IF(jb_array_dtype(y) != k->output_dtypes[i], JB_ERR_SHAPE,
                     "output '%s' of kernel '%s' is written into a %s array, not %s",
                     k->output_names[i], k->name, jb_dtype_name(jb_array_dtype(y)),
                     jb_dtype_name(k->output_dtypes[i]));
        if (!dev)
            dev = jb_array_device(y);
        JB_RETURN_IF(jb_array_device(y) != dev, JB_ERR_INVALID_ARGUMENT,
                     "output '%s' of kernel '%s' is written into an array on %s, the launch is "
                     "on %s",
                     k->output_names[i], k->name, jb_array_device(y)->name, dev->name);
        /* One buffer behind two of the kernel's restrict pointers is undefined behaviour. */
        for (size_t j = 0; j < l->num_inputs; j++)
            JB_RETURN_IF(l->inputs[j] == y, JB_ERR_INVALID_ARGUMENT,
                         "kernel '%s': the array written in place as output '%s' is also input "
                         "'%s' (an output may read its own elements)",
                         k->name, k->output_names[i], k->input_names[j]);
        for (size_t j = 0; j < i; j++)
            JB_RETURN_IF(l->in_place[j] == y, JB_ERR_INVALID_ARGUMENT,
                         "kernel '%s': one array is written in place as outputs '%s' and '%s'",
                         k->name, k->output_names[j], k->output_names[i]);
    }
    if (!dev)
        dev = l->device;
    JB_RETURN_IF(!dev, JB_ERR_INVALID_ARGUMENT,
                 "kernel '%s': no input, in-place output, stream or device says where to launch",
                 k->name);
    JB_RETURN_IF(l->device && l->device != dev, JB_ERR_INVALID_ARGUMENT,
                 "kernel '%s': the launch names %s, its arrays or stream are on %s", k->name,
                 l->device->name, dev->name);
    *out = dev;
    return JB_OK;
}

/* Stores each shaped array's ndim and dimensions after the kernel's scalars. */
static void stage_shapes(const jb_custom_kernel *k, const jb_launch *l, unsigned char *slots)
{
    size_t at = k->num_scalars;
    for (size_t slot = 0; slot < k->num_inputs + k->num_outputs; slot++) {
        if (!k->shaped[slot])
            continue;
        const jb_array *a = slot < k->num_inputs ? l->inputs[slot]
                            : l->in_place && l->in_place[slot - k->num_inputs]
                                ? l->in_place[slot - k->num_inputs]
                                : NULL;
        int64_t ndim = a ? jb_array_ndim(a) : l->output_ndims[slot - k->num_inputs];
        const int64_t *dims = a ? jb_array_shape(a) : l->output_shapes[slot - k->num_inputs];
        int64_t values[1 + JB_MAX_NDIM] = {ndim};
        for (int d = 0; d < JB_MAX_NDIM; d++)
            values[1 + d] = d < ndim ? dims[d] : 1;
        memcpy(slots + at * JB_SCALAR_SLOT, values, sizeof values);
        at += 1 + JB_MAX_NDIM;
    }
}

int jb__launch_begin(jb_staged_launch *st, jb_custom_kernel *k, const jb_launch *l)
{
    /* Only what a failure path reads is cleared: the arrays are 2.6 KB, and written as filled. */
    st->num_outputs = 0;
    st->end = NULL;
    st->queued = false;
    st->capture = NULL;
    st->report = NULL;
    st->num_reports = 0;
    jb_device *dev = NULL;
    JB_FORWARD_IF_ERROR(validate_launch(k, l, &dev));
    JB_FORWARD_IF_ERROR(jb__stage_scalars(k, l->scalars, l->num_scalars, st->scalars));
    stage_shapes(k, l, st->scalars);
    /* Resolved with the default block size before any build, so a bad shape builds nothing. */
    const jb_kernel_config defaults = {0, 0};
    JB_FORWARD_IF_ERROR(
        jb__resolve_launch_shape(&l->shape, &defaults, st->grid, st->block, &st->args.total_threads));
    st->dev = dev;
    if (l->stream)
        JB_FORWARD_IF_ERROR(jb__stream_check_process(l->stream, "jb_custom_kernel_launch_on"));
    jb_kernel_config config;
    JB_FORWARD_IF_ERROR(jb__custom_kernel_prepare(k, dev, &config, &st->fn));
    st->shared_bytes = config.shared_memory_bytes;
    if (config.threads_per_block) /* the hook chose a block size: resolve again with it */
        JB_FORWARD_IF_ERROR(jb__resolve_launch_shape(&l->shape, &config, st->grid, st->block,
                                                     &st->args.total_threads));
    if (l->stream)
        st->stream = l->stream;
    else
        JB_FORWARD_IF_ERROR(jb__current_stream(dev, &st->stream));
    st->kernel = k;
    JB_FORWARD_IF_ERROR(jb__stream_capture(st->stream, "jb_custom_kernel_launch", &st->capture));
    jb_capture *capture = st->capture; /* captured: the graph orders and holds at each replay */

    /* From here on a failure goes through jb__launch_end, which undoes what was staged. */
    size_t num_arrays = k->num_inputs + k->num_outputs;
    st->args = (jb_launch_args){num_arrays, st->pointers, st->sizes, st->args.total_threads,
                                k->num_scalars, st->scalars, false};
    for (size_t slot = 0; slot < num_arrays; slot++)
        st->args.num_scalars += k->shaped[slot] * (1 + JB_MAX_NDIM);
    st->num_outputs = k->num_outputs;
    for (size_t i = 0; i < k->num_outputs; i++)
        st->outputs[i] = NULL, st->in_place[i] = l->in_place ? l->in_place[i] : NULL;
    int status = JB_OK;
    for (size_t i = 0; i < k->num_inputs; i++) {
        jb_array *x = l->inputs[i];
        jb_event *input_ready = capture ? NULL : jb__array_ready_for_read(x, st->stream);
        if (input_ready && (status = jb__event_order_before(input_ready, st->stream)) != JB_OK)
            goto done;
        if (capture && (status = jb__capture_array(capture, x, false, &st->captured[i])) != JB_OK)
            goto done;
        st->buffers[i] = jb__array_buffer(x);
        st->pointers[i] = st->buffers[i]->ptr;
        st->sizes[i] = (uint64_t)jb_array_size(x);
        size_t count;
        jb_bounds_report *const *held = jb__array_reports(x, &count);
        for (size_t r = 0; r < count; r++)
            jb__bounds_merge(st->reports, &st->num_reports, held[r]);
    }
    st->queued = !capture; /* an output's fill may queue work from here on (a capture's is
                            * captured: never waited for) */
    for (size_t i = 0; i < k->num_outputs; i++) {
        size_t slot = k->num_inputs + i;
        jb_array *y = st->in_place[i];
        if (y) { /* after its maker, and after its readers on other streams */
            if ((status = capture ? jb__capture_array(capture, y, true, &st->captured[slot])
                                  : jb__array_order_write(y, st->stream)) != JB_OK)
                goto done;
            st->buffers[slot] = jb__array_buffer(y);
        } else {
            size_t bytes = jb_dtype_size(k->output_dtypes[i]);
            bool fits = true; /* bounded by validate_launch; checked all the same */
            for (int d = 0; d < l->output_ndims[i]; d++)
                fits &= jb__mul_size(bytes, (size_t)l->output_shapes[i][d], &bytes);
            jb_buffer *buf;
            if (!fits)
                status = jb__fail(JB_ERR_INVALID_ARGUMENT, "output '%s' of kernel '%s' is too large",
                                  k->output_names[i], k->name);
            if (status != JB_OK || (status = jb__buffer_new(dev, bytes, &buf)) != JB_OK ||
                (status = jb__array_wrap(&st->outputs[i], buf, k->output_dtypes[i],
                                         l->output_shapes[i], l->output_ndims[i], NULL)) != JB_OK)
                goto done;
            st->buffers[slot] = buf;
            if (capture && (status = jb__capture_array(capture, st->outputs[i], true,
                                                       &st->captured[slot])) != JB_OK)
                goto done;
            const jb_scalar *init = k->output_inits ? &k->output_inits[i] : NULL;
            if (init && init->dtype != JB_DTYPE_INVALID && bytes) {
                if ((status = dev->backend->fill(dev, st->stream->native, buf->ptr,
                                                 bytes / jb_dtype_size(init->dtype), &init->value,
                                                 jb_dtype_size(init->dtype))) != JB_OK)
                    goto done;
                if (capture)
                    jb__capture_count_op(capture);
            }
        }
        st->pointers[slot] = st->buffers[slot]->ptr;
        st->sizes[slot] = (uint64_t)jb_array_size(y ? y : st->outputs[i]);
    }
    if (k->bounds_checked) { /* the record goes after the arrays, as one more */
        jb_buffer *record;
        if ((status = jb__bounds_report_new(k->name, k->checked_names, k->num_checked,
                                            k->num_inputs + k->num_outputs, st->stream,
                                            &st->report, &record)) != JB_OK)
            goto done;
        if (capture) /* the record's zeroing, replayed before each run */
            jb__capture_count_op(capture);
        jb__bounds_report_sizes(st->report, st->sizes, num_arrays);
        st->buffers[num_arrays] = record;
        st->pointers[num_arrays] = record->ptr;
        st->sizes[num_arrays] = 1;
        st->args.count++;
        jb__bounds_merge(st->reports, &st->num_reports, st->report);
    }
done:
    if (status != JB_OK)
        return jb__launch_end(st, status, NULL);
    return JB_OK;
}

int jb__launch_issue(const jb_staged_launch *l)
{
    if (!l->args.total_threads) /* an empty batch: no backend launches a grid of no blocks */
        return JB_OK;
    return l->dev->backend->launch(l->dev, l->stream->native, l->fn, l->grid, l->block,
                                   l->shared_bytes, &l->args);
}

int jb__launch_end(jb_staged_launch *l, int status, jb_array **outputs)
{
    /* The end event marks the kernel's end: until then every buffer the kernel uses stays held,
     * whoever frees its array. A captured launch's buffers the graph holds instead. */
    if (status == JB_OK)
        status = l->capture ? jb__capture_launch(l->capture, l)
                            : jb__stream_record_hold(l->stream, &l->end, l->buffers, l->args.count);
    if (status != JB_OK && l->capture) /* what was captured may hold the outputs' buffers */
        jb__capture_poison(l->capture, jb_last_error_message());
    if (status != JB_OK) {
        /* Queued or not, nothing may reuse these buffers before the stream is past them. */
        if (l->queued)
            l->dev->backend->stream_synchronize(l->dev, l->stream->native);
        for (size_t i = 0; i < l->num_outputs; i++)
            jb_array_free(l->outputs[i]);
        jb__event_release(l->end);
        jb__bounds_report_release(l->report);
        for (size_t r = 0; r < l->num_reports; r++)
            jb__bounds_report_release(l->reports[r]);
        return status;
    }
    if (l->capture) { /* nothing ran: the arrays' events and reports are each replay's */
        for (size_t i = 0; outputs && i < l->num_outputs; i++)
            outputs[i] = l->outputs[i];
        jb__bounds_report_release(l->report);
        for (size_t r = 0; r < l->num_reports; r++)
            jb__bounds_report_release(l->reports[r]);
        return JB_OK;
    }
    /* One loop, no memcpy: a copy of one pointer inlined as `rep movsq` cost 13 ns a launch. */
    for (size_t i = 0; i < l->num_outputs; i++) {
        jb__event_retain(l->end);
        if (l->in_place[i])
            jb__array_written(l->in_place[i], l->end);
        else
            jb__array_set_ready(l->outputs[i], l->end);
        if (l->num_reports) /* its writer's report, and those of what it was made from */
            jb__array_set_reports(l->in_place[i] ? l->in_place[i] : l->outputs[i], l->reports,
                                  l->num_reports);
        if (outputs)
            outputs[i] = l->outputs[i];
    }
    jb__event_release(l->end);
    jb__bounds_report_release(l->report);
    for (size_t r = 0; r < l->num_reports; r++)
        jb__bounds_report_release(l->reports[r]);
    return JB_OK;
}

/* Copies the caller's jb_launch into a full-size one: fields its header lacked read as zero. */
static int launch_normalize(jb_launch *full, const jb_launch *launch)
{
    JB_RETURN_IF(!launch, JB_ERR_INVALID_ARGUMENT, "jb_custom_kernel_run: launch is NULL");
    JB_RETURN_IF(launch->struct_size < LAUNCH_MIN_SIZE, JB_ERR_INVALID_ARGUMENT,
                 "jb_custom_kernel_run: launch.struct_size is %zu; set it with JB_LAUNCH_INIT",
                 launch->struct_size);
    JB_RETURN_IF(launch->struct_size > sizeof *full, JB_ERR_UNSUPPORTED,
                 "jb_custom_kernel_run: launch.struct_size is %zu but this library knows %zu "
                 "bytes: the caller was built against a newer jitbridge.h",
                 launch->struct_size, sizeof *full);
    memset(full, 0, sizeof *full);
    memcpy(full, launch, launch->struct_size);
    return JB_OK;
}

jb_status jb_custom_kernel_run(jb_array **outputs, jb_custom_kernel *k, const jb_launch *launch)
{
    JB_RETURN_IF(!k, JB_ERR_INVALID_ARGUMENT, "jb_custom_kernel_run: kernel is NULL");
    jb_launch l;
    JB_FORWARD_IF_ERROR(launch_normalize(&l, launch));
    bool all_in_place = l.in_place != NULL;
    for (size_t i = 0; all_in_place && i < k->num_outputs; i++)
        all_in_place = l.in_place[i] != NULL;
    JB_RETURN_IF(!outputs && !all_in_place, JB_ERR_INVALID_ARGUMENT,
                 "jb_custom_kernel_run: outputs is NULL");
    for (size_t i = 0; outputs && i < k->num_outputs; i++)
        outputs[i] = NULL;
    jb_staged_launch staged;
    JB_FORWARD_IF_ERROR(jb__launch_begin(&staged, k, &l));
    return jb__launch_end(&staged, jb__launch_issue(&staged), outputs);
}

jb_status jb_custom_kernel_launch_on(jb_array **outputs, jb_custom_kernel *k, jb_stream *stream,
                                     jb_array *const *inputs, size_t num_inputs,
                                     const jb_scalar *scalars, size_t num_scalars,
                                     const int64_t *const *output_shapes, const int *output_ndims,
                                     const jb_launch_shape *shape)
{
    JB_RETURN_IF(!outputs, JB_ERR_INVALID_ARGUMENT, "jb_custom_kernel_launch: outputs is NULL");
    JB_RETURN_IF(!k, JB_ERR_INVALID_ARGUMENT, "jb_custom_kernel_launch: kernel is NULL");
    for (size_t i = 0; i < k->num_outputs; i++)
        outputs[i] = NULL;
    JB_RETURN_IF(!inputs, JB_ERR_INVALID_ARGUMENT, "jb_custom_kernel_launch: inputs is NULL");
    JB_RETURN_IF(num_inputs == 0, JB_ERR_INVALID_ARGUMENT,
                 "jb_custom_kernel_launch: no inputs; a kernel without inputs is launched with "
                 "jb_custom_kernel_run, which names its device");
    JB_RETURN_IF(!shape, JB_ERR_INVALID_ARGUMENT, "the launch shape is NULL");
    JB_RETURN_IF(!output_shapes || !output_ndims, JB_ERR_INVALID_ARGUMENT,
                 "jb_custom_kernel_launch: output shapes are NULL");
    jb_launch l = {.struct_size = sizeof l, .stream = stream, .inputs = inputs,
                   .num_inputs = num_inputs, .scalars = scalars, .num_scalars = num_scalars,
                   .output_shapes = output_shapes, .output_ndims = output_ndims, .shape = *shape};
    jb_staged_launch staged;
    JB_FORWARD_IF_ERROR(jb__launch_begin(&staged, k, &l));
    return jb__launch_end(&staged, jb__launch_issue(&staged), outputs);
}

jb_status jb_custom_kernel_launch(jb_array **outputs, jb_custom_kernel *k,
                                  jb_array *const *inputs, size_t num_inputs,
                                  const int64_t *const *output_shapes, const int *output_ndims,
                                  const jb_launch_shape *shape)
{
    return jb_custom_kernel_launch_on(outputs, k, NULL, inputs, num_inputs, NULL, 0, output_shapes,
                                      output_ndims, shape);
}
