/*
 * Kernel source: the rules a name must pass to be pasted into source, and the code generated
 * around a caller's body for each backend's dialect. Pure text work: no device, no cache.
 */
#include "kernels.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* The reason `s` cannot be a name in source (kernel_body.c's identifier rules), else NULL. */
static const char *identifier_problem(const char *s)
{
    const char *problem;
    return jb__identifier_ok(s, &problem) ? NULL : problem;
}

/* Arrays are numbered inputs first, then outputs: the order of the launch's arguments. */
static const char *slot_name(const jb_custom_kernel *k, size_t slot)
{
    return slot < k->num_inputs ? k->input_names[slot] : k->output_names[slot - k->num_inputs];
}

static const char *slot_type(const jb_custom_kernel *k, size_t slot)
{
    return jb_dtype_name(slot < k->num_inputs ? k->input_dtypes[slot]
                                              : k->output_dtypes[slot - k->num_inputs]);
}

/* The element type of checked name `slot`: an array's dtype, or i64 for a shape. */
static const char *checked_type(const jb_custom_kernel *k, size_t slot)
{
    return slot < k->num_inputs + k->num_outputs ? slot_type(k, slot) : "i64";
}

/* A bounds-checked access: in range, the element's address; else the first such access of the
 * launch is recorded (which name, index and thread) and the thread's own spare element, zeroed,
 * stands in, so a read gives 0 and a write goes nowhere. One record per launch: on the cpu one
 * worker runs all of a launch's threads, on a GPU the first thread to claim it writes it. */
static const char checked_access_c[] =
    "typedef struct jb_bounds_record { unsigned int flag, slot; long long index;\n"
    "    unsigned long long thread; } jb_bounds_record;\n"
    "static inline void *jb_checked(const void *base, unsigned long long elem,\n"
    "    unsigned long long size, long long i, unsigned int slot, jb_bounds_record *r,\n"
    "    unsigned long long thread, void *spare)\n"
    "{\n"
    "    if (i >= 0 && (unsigned long long)i < size)\n"
    "        return (char *)base + (unsigned long long)i * elem;\n"
    "    if (!r->flag) { r->flag = 1; r->slot = slot; r->index = i; r->thread = thread; }\n"
    "    __builtin_memset(spare, 0, elem);\n"
    "    return spare;\n"
    "}\n";
/* The spare is zeroed with memset (NVRTC has no __builtin_memset): with a byte loop there,
 * NVRTC 13.0 dropped every in-range load and store of a checked kernel (each read gave 0). */
static const char checked_access_cuda[] =
    "typedef struct jb_bounds_record { unsigned int flag, slot; long long index;\n"
    "    unsigned long long thread; } jb_bounds_record;\n"
    "static __device__ inline void *jb_checked(const void *base, unsigned long long elem,\n"
    "    unsigned long long size, long long i, unsigned int slot, jb_bounds_record *r,\n"
    "    unsigned long long thread, void *spare)\n"
    "{\n"
    "    if (i >= 0 && (unsigned long long)i < size)\n"
    "        return (char *)base + (unsigned long long)i * elem;\n"
    "    if (atomicCAS(&r->flag, 0u, 2u) == 0u) { r->slot = slot; r->index = i; r->thread = thread;\n"
    "        __threadfence(); atomicExch(&r->flag, 1u); }\n"
    "    memset(spare, 0, elem);\n"
    "    return spare;\n"
    "}\n";

/* What a thread runs, the same in both dialects: the checked accesses (bounds checks), the
 * body between its #line marks, and `thread_index()`. */
static void append_body_section(jb_strbuf *sb, const jb_custom_kernel *k, const char *body)
{
    size_t num_arrays = k->num_inputs + k->num_outputs;
    /* Each checked access reads the array's address and size from jb_ locals taken before the
     * body, which the body can neither name nor shadow (it may shadow `x_size`). */
    for (size_t slot = 0; k->bounds_checked && slot < k->num_checked; slot++) {
        const char *type = checked_type(k, slot);
        const char *qualifier = slot < k->num_inputs || slot >= num_arrays ? "const " : "";
        const char *name = k->checked_names[slot];
        if (slot < num_arrays)
            jb__strbuf_appendf(sb, "    %s%s *const jb_base_%zu = %s;\n"
                               "    const unsigned long long jb_size_%zu = %s_size;\n",
                               qualifier, type, slot, name, slot, name);
        else /* a shape: its array's name is the checked name less "_shape" */
            jb__strbuf_appendf(sb, "    const i64 *const jb_base_%zu = %s;\n"
                               "    const unsigned long long jb_size_%zu = "
                               "(unsigned long long)%.*s_ndim;\n",
                               slot, name, slot, (int)(strlen(name) - 6), name);
        jb__strbuf_appendf(sb, "    %s jb_spare_%zu; (void)jb_spare_%zu; (void)jb_base_%zu; "
                               "(void)jb_size_%zu;\n"
                               "#define jb_at_%zu(...) (*(%s%s *)jb_checked(jb_base_%zu, "
                               "sizeof *jb_base_%zu, jb_size_%zu, ((void)sizeof(\"\"[__VA_ARGS__]), "
                               "(long long)(__VA_ARGS__)), %zuu, jb_bounds, jb_thread, "
                               "&jb_spare_%zu))\n",
                               type, slot, slot, slot, slot, slot, qualifier, type, slot, slot,
                               slot, slot, slot);
    }
    if (k->uses_atomics)
        jb__append_atomic_macros(sb, k);
    /* Each dialect's wrapper gives a kernel that names them the jb_ values these read. */
    if (k->uses_block)
        jb__strbuf_append(sb, "#define block_index() (jb_block_index)\n"
                              "#define thread_in_block() (jb_thread_in_block)\n"
                              "#define block_size() (jb_block_threads)\n"
                              "#define grid_blocks() (jb_grid_blocks)\n");
    /* #line makes the compiler's diagnostics point at lines of the caller's body. */
    jb__strbuf_appendf(sb, "#define thread_index() (jb_thread)\n#line 1 \"%s.body\"\n%s\n"
                           "#undef thread_index\n",
                       k->name, body);
    if (k->uses_block)
        jb__strbuf_append(sb, "#undef block_index\n#undef thread_in_block\n#undef block_size\n"
                              "#undef grid_blocks\n");
    if (k->uses_atomics)
        jb__append_atomic_undefs(sb, k);
    for (size_t slot = 0; k->bounds_checked && slot < k->num_checked; slot++)
        jb__strbuf_appendf(sb, "#undef jb_at_%zu\n", slot);
}

/* What every dialect's source starts with: the flags (so they are part of the hash), the
 * dtypes, the defines, the compile-time parameters and the caller's header. */
static void append_preamble(jb_strbuf *sb, const jb_custom_kernel *k, const jb_kernel_spec *spec,
                            jb_source_dialect dialect, const char *header)
{
    jb__strbuf_appendf(sb, "/* generated by jitbridge: kernel %s, %s backend; ", k->name,
                       dialect == JB_DIALECT_C ? "cpu" : "cuda/rocm");
    jb__compile_options_describe(sb, &k->options);
    jb__strbuf_append(sb, " */\n");
    jb__strbuf_append(sb, jb__dtype_prelude(dialect));
    jb__append_defines(sb, spec->defines, spec->num_defines);
    for (size_t i = 0; i < spec->num_params; i++) {
        const jb_kernel_param *p = &spec->params[i];
        if (p->kind == JB_PARAM_DTYPE)
            jb__strbuf_appendf(sb, "typedef %s %s;\n", jb_dtype_name((int)p->value), p->name);
        else if (p->value == INT64_MIN)
            jb__strbuf_appendf(sb, "#define %s (-9223372036854775807LL - 1)\n", p->name);
        else
            jb__strbuf_appendf(sb, "#define %s %s%" PRId64 "%s%s\n", p->name,
                               p->value < 0 ? "(" : "", p->value,
                               p->value > INT32_MAX || p->value < INT32_MIN ? "LL" : "",
                               p->value < 0 ? ")" : "");
    }
    if (k->bounds_checked)
        jb__strbuf_append(sb, dialect == JB_DIALECT_C ? checked_access_c : checked_access_cuda);
    if (k->uses_atomics)
        jb__append_atomic_helpers(sb, dialect, k->bounds_checked);
    if (header)
        jb__strbuf_appendf(sb, "#line 1 \"%s.header\"\n%s\n", k->name, header);
}

/* Where a shaped array's shape sits among the scalar slots: after the kernel's scalars, nine
 * slots per shaped array (ndim, then JB_MAX_NDIM dimensions). */
static size_t shape_slot(const jb_custom_kernel *k, size_t array)
{
    size_t before = 0;
    for (size_t a = 0; a < array; a++)
        before += k->shaped[a];
    return k->num_scalars + before * (1 + JB_MAX_NDIM);
}

/* The cpu's kernel: the body in a function of its own, called once per thread index, so that
 * `return` ends one thread as it does on a GPU, and an assignment to a parameter or scalar is
 * that thread's own. */
static char *generate_cpu_source(const jb_custom_kernel *k, const jb_kernel_spec *spec,
                                 const char *header, const char *body)
{
    size_t num_arrays = k->num_inputs + k->num_outputs;
    jb_strbuf sb = {0};
    append_preamble(&sb, k, spec, JB_DIALECT_C, header);
    jb__strbuf_appendf(&sb, "#line 1 \"%s.generated\"\nstatic inline void jb_thread_%s(", k->name,
                       k->name);
    for (size_t slot = 0; slot < num_arrays; slot++) {
        const char *name = slot_name(k, slot);
        jb__strbuf_appendf(&sb, "%s%s *const restrict %s, const uint64_t %s_size, ",
                           slot < k->num_inputs ? "const " : "", slot_type(k, slot), name, name);
        if (k->shaped[slot])
            jb__strbuf_appendf(&sb, "const i64 *const %s_shape, const int %s_ndim, ", name,
                               name);
    }
    for (size_t i = 0; i < k->num_scalars; i++)
        jb__strbuf_appendf(&sb, "%s %s, ", jb_dtype_name(k->scalar_dtypes[i]), k->scalar_names[i]);
    if (k->bounds_checked)
        jb__strbuf_append(&sb, "jb_bounds_record *const jb_bounds, ");
    if (k->uses_block)
        jb__strbuf_append(&sb, "const uint64_t jb_block_index, const uint64_t jb_thread_in_block, "
                               "const uint64_t jb_block_threads, const uint64_t jb_grid_blocks, ");
    jb__strbuf_append(&sb, "const uint64_t jb_thread)\n{\n");
    for (size_t slot = 0; slot < num_arrays; slot++)
        jb__strbuf_appendf(&sb, "    (void)%s; (void)%s_size;\n", slot_name(k, slot),
                           slot_name(k, slot));
    for (size_t i = 0; i < k->num_scalars; i++)
        jb__strbuf_appendf(&sb, "    (void)%s;\n", k->scalar_names[i]);
    append_body_section(&sb, k, body);
    jb__strbuf_append(&sb, "}\n");

    jb__strbuf_appendf(&sb,
                       "#line 1 \"%s.generated\"\n"
                       "void %s(void *const *jb_pointers, const uint64_t *jb_sizes, "
                       "const unsigned char *jb_scalars, uint64_t jb_threads, "
                       "uint64_t jb_block_threads)\n{\n"
                       "    (void)jb_scalars; (void)jb_block_threads;\n",
                       k->name, k->name);
    for (size_t slot = 0; slot < num_arrays; slot++) {
        const char *name = slot_name(k, slot), *type = slot_type(k, slot);
        const char *qualifier = slot < k->num_inputs ? "const " : "";
        jb__strbuf_appendf(&sb,
                           "    %s%s *const %s = (%s%s *)jb_pointers[%zu];\n"
                           "    const uint64_t %s_size = jb_sizes[%zu];\n",
                           qualifier, type, name, qualifier, type, slot, name, slot);
        if (k->shaped[slot])
            jb__strbuf_appendf(&sb,
                               "    i64 %s_shape[%d]; memcpy(%s_shape, jb_scalars + %zu, "
                               "sizeof %s_shape);\n"
                               "    i64 %s_ndim; memcpy(&%s_ndim, jb_scalars + %zu, 8);\n",
                               name, JB_MAX_NDIM, name, (shape_slot(k, slot) + 1) * JB_SCALAR_SLOT,
                               name, name, name, shape_slot(k, slot) * JB_SCALAR_SLOT);
    }
    for (size_t i = 0; i < k->num_scalars; i++)
        jb__strbuf_appendf(&sb, "    %s %s; memcpy(&%s, jb_scalars + %zu, sizeof %s);\n",
                           jb_dtype_name(k->scalar_dtypes[i]), k->scalar_names[i],
                           k->scalar_names[i], i * JB_SCALAR_SLOT, k->scalar_names[i]);
    if (k->bounds_checked)
        jb__strbuf_appendf(&sb, "    jb_bounds_record *const jb_bounds = jb_pointers[%zu];\n",
                           num_arrays);
    /* The blocks a GPU would run, in order: the last one ends at the launch's last thread, as
     * the GPU's threads past it return at once. */
    if (k->uses_block)
        jb__strbuf_appendf(&sb, "    const uint64_t jb_grid_blocks = jb_threads / jb_block_threads + "
                                "(jb_threads %% jb_block_threads != 0);\n"
                                "    for (uint64_t jb_block_index = 0, jb_thread = 0; "
                                "jb_block_index < jb_grid_blocks; jb_block_index++)\n"
                                "    for (uint64_t jb_thread_in_block = 0; jb_thread_in_block < "
                                "jb_block_threads && jb_thread < jb_threads; "
                                "jb_thread_in_block++, jb_thread++)\n"
                                "        jb_thread_%s(",
                           k->name);
    else
        jb__strbuf_appendf(&sb, "    for (uint64_t jb_thread = 0; jb_thread < jb_threads; jb_thread++)\n"
                                "        jb_thread_%s(",
                           k->name);
    for (size_t slot = 0; slot < num_arrays; slot++) {
        const char *name = slot_name(k, slot);
        jb__strbuf_appendf(&sb, "%s, %s_size, ", name, name);
        if (k->shaped[slot])
            jb__strbuf_appendf(&sb, "%s_shape, (int)%s_ndim, ", name, name);
    }
    for (size_t i = 0; i < k->num_scalars; i++)
        jb__strbuf_appendf(&sb, "%s, ", k->scalar_names[i]);
    jb__strbuf_appendf(&sb, "%s%sjb_thread);\n}\n", k->bounds_checked ? "jb_bounds, " : "",
                       k->uses_block ? "jb_block_index, jb_thread_in_block, jb_block_threads, "
                                       "jb_grid_blocks, "
                                     : "");
    if (sb.failed) {
        jb__strbuf_free(&sb);
        return NULL;
    }
    return sb.data;
}

static char *generate_gpu_source(const jb_custom_kernel *k, const jb_kernel_spec *spec,
                                 const char *header, const char *body)
{
    size_t num_arrays = k->num_inputs + k->num_outputs;
    jb_strbuf sb = {0};
    append_preamble(&sb, k, spec, JB_DIALECT_CUDA, header);
    jb__strbuf_appendf(&sb, "#line 1 \"%s.generated\"\nextern \"C\" __global__ void %s(", k->name,
                       k->name);
    for (size_t slot = 0; slot < num_arrays; slot++)
        jb__strbuf_appendf(&sb, "%s%s *__restrict__ %s, const unsigned long long %s_size, ",
                           slot < k->num_inputs ? "const " : "", slot_type(k, slot),
                           slot_name(k, slot), slot_name(k, slot));
    if (k->bounds_checked) /* launched as one more array, after the kernel's own */
        jb__strbuf_append(&sb, "jb_bounds_record *jb_bounds, const unsigned long long jb_bounds_n, ");
    for (size_t i = 0; i < k->num_scalars; i++)
        jb__strbuf_appendf(&sb, "%s %s, ", jb_dtype_name(k->scalar_dtypes[i]), k->scalar_names[i]);
    for (size_t slot = 0; slot < num_arrays; slot++)
        for (int d = 0; k->shaped[slot] && d <= JB_MAX_NDIM; d++)
            jb__strbuf_appendf(&sb, "const i64 jb_shape_%zu_%d, ", slot, d);
    jb__strbuf_append(
        &sb, "const unsigned long long jb_threads)\n{\n"
             "    const unsigned long long jb_block = ((unsigned long long)blockIdx.z * gridDim.y"
             " + blockIdx.y) * gridDim.x + blockIdx.x;\n"
             "    const unsigned long long jb_thread = jb_block * (blockDim.x * blockDim.y * "
             "blockDim.z) + (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;\n"
             "    if (jb_thread >= jb_threads)\n        return;\n");
    if (k->uses_block)
        jb__strbuf_append(
            &sb, "    const unsigned long long jb_block_index = jb_block;\n"
                 "    const unsigned long long jb_thread_in_block = (threadIdx.z * blockDim.y + "
                 "threadIdx.y) * blockDim.x + threadIdx.x;\n"
                 "    const unsigned long long jb_block_threads = (unsigned long long)blockDim.x * "
                 "blockDim.y * blockDim.z;\n"
                 "    const unsigned long long jb_grid_blocks = (unsigned long long)gridDim.x * "
                 "gridDim.y * gridDim.z;\n"
                 "    (void)jb_block_index; (void)jb_thread_in_block; (void)jb_block_threads; "
                 "(void)jb_grid_blocks;\n");
    for (size_t slot = 0; slot < num_arrays; slot++) {
        const char *name = slot_name(k, slot);
        jb__strbuf_appendf(&sb, "    (void)%s_size;\n", name);
        if (k->shaped[slot]) {
            jb__strbuf_appendf(&sb, "    const i64 %s_shape[%d] = {", name, JB_MAX_NDIM);
            for (int d = 1; d <= JB_MAX_NDIM; d++)
                jb__strbuf_appendf(&sb, "jb_shape_%zu_%d%s", slot, d, d < JB_MAX_NDIM ? ", " : "");
            jb__strbuf_appendf(&sb, "};\n    const int %s_ndim = (int)jb_shape_%zu_0;\n"
                                    "    (void)%s_shape; (void)%s_ndim;\n",
                               name, slot, name, name);
        }
    }
    for (size_t i = 0; i < k->num_scalars; i++)
        jb__strbuf_appendf(&sb, "    (void)%s;\n", k->scalar_names[i]);
    append_body_section(&sb, k, body);
    jb__strbuf_append(&sb, "}\n");
    if (sb.failed) {
        jb__strbuf_free(&sb);
        return NULL;
    }
    return sb.data;
}

static int validate_names(const char *what, const char *const *names, const jb_dtype *dtypes,
                          size_t count)
{
    JB_RETURN_IF(count > 0 && (!names || !dtypes), JB_ERR_INVALID_ARGUMENT,
                 "the %s names or dtypes are NULL", what);
    for (size_t i = 0; i < count; i++) {
        const char *problem = identifier_problem(names[i]);
        /* The name is not echoed: it may be long or not text at all. */
        JB_RETURN_IF(problem, JB_ERR_INVALID_ARGUMENT,
                     "%s name %zu %s; names must be C identifiers and not reserved", what, i,
                     problem);
        JB_RETURN_IF(!jb_dtype_name(dtypes[i]), JB_ERR_INVALID_ARGUMENT,
                     "%s '%s' has unknown dtype %d", what, names[i], (int)dtypes[i]);
    }
    return JB_OK;
}

static int validate_params(const jb_kernel_spec *spec)
{
    JB_RETURN_IF(spec->num_params > JB_KERNEL_MAX_PARAMS || (spec->num_params && !spec->params),
                 JB_ERR_INVALID_ARGUMENT, "kernel '%s': params are NULL or more than %d",
                 spec->name, JB_KERNEL_MAX_PARAMS);
    for (size_t i = 0; i < spec->num_params; i++) {
        const jb_kernel_param *p = &spec->params[i];
        const char *problem = identifier_problem(p->name);
        JB_RETURN_IF(problem, JB_ERR_INVALID_ARGUMENT,
                     "kernel '%s': parameter name %zu %s; names must be C identifiers and not "
                     "reserved", spec->name, i, problem);
        JB_RETURN_IF(p->kind != JB_PARAM_INT && p->kind != JB_PARAM_BOOL &&
                         p->kind != JB_PARAM_DTYPE,
                     JB_ERR_INVALID_ARGUMENT, "kernel '%s': parameter '%s' has unknown kind %d",
                     spec->name, p->name, (int)p->kind);
        JB_RETURN_IF(p->kind == JB_PARAM_BOOL && p->value != 0 && p->value != 1,
                     JB_ERR_INVALID_ARGUMENT,
                     "kernel '%s': bool parameter '%s' is %" PRId64 ", not 0 or 1", spec->name,
                     p->name, p->value);
        JB_RETURN_IF(p->kind == JB_PARAM_DTYPE &&
                         (p->value < 0 || p->value > INT32_MAX || !jb_dtype_name((int)p->value)),
                     JB_ERR_INVALID_ARGUMENT,
                     "kernel '%s': dtype parameter '%s' is %" PRId64 ", not a dtype", spec->name,
                     p->name, p->value);
    }
    return JB_OK;
}

/* True when define `d` ("NAME" or "NAME=VALUE") defines `name`. */
static bool define_is(const char *d, const char *name)
{
    size_t len = strlen(name);
    return strncmp(d, name, len) == 0 && (d[len] == '\0' || d[len] == '=');
}

/* A define is NAME or NAME=VALUE: NAME an identifier, VALUE printable text on one line. */
int jb__compile_options_check(const char *owner, unsigned flags, unsigned also_allowed,
                              const char *const *defines, size_t num_defines)
{
    JB_RETURN_IF(num_defines > JB_KERNEL_MAX_PARAMS || (num_defines && !defines),
                 JB_ERR_INVALID_ARGUMENT, "'%s': defines are NULL or more than %d", owner,
                 JB_KERNEL_MAX_PARAMS);
    JB_RETURN_IF(flags & JB_COMPILE_BOUNDS_CHECKS & ~also_allowed, JB_ERR_INVALID_ARGUMENT,
                 "'%s': bounds checks are for custom kernels: the library cannot see inside a "
                 "whole source", owner);
    JB_RETURN_IF(flags & ~(JB_COMPILE_FAST_MATH | JB_COMPILE_LINE_INFO | JB_COMPILE_BOUNDS_CHECKS),
                 JB_ERR_INVALID_ARGUMENT, "'%s': unknown compile flags 0x%x", owner, flags);
    for (size_t i = 0; i < num_defines; i++) {
        const char *d = defines[i];
        JB_RETURN_IF(!d, JB_ERR_INVALID_ARGUMENT, "'%s': define %zu is NULL", owner, i);
        const char *eq = strchr(d, '=');
        size_t name_len = eq ? (size_t)(eq - d) : strlen(d);
        char name[JB_MAX_IDENTIFIER + 2];
        /* Cut one past the limit, so an over-long name is still reported as too long. */
        if (name_len > JB_MAX_IDENTIFIER + 1)
            name_len = JB_MAX_IDENTIFIER + 1;
        snprintf(name, sizeof name, "%.*s", (int)name_len, d);
        const char *problem = identifier_problem(name);
        JB_RETURN_IF(problem, JB_ERR_INVALID_ARGUMENT, "'%s': the name of define %zu %s", owner,
                     i, problem);
        for (const char *c = eq ? eq + 1 : d; *c; c++)
            JB_RETURN_IF(*c < 0x20 || *c > 0x7e, JB_ERR_INVALID_ARGUMENT,
                         "'%s': define '%s' holds a character that is not printable ASCII (one "
                         "line only)",
                         owner, name);
        JB_RETURN_IF(strlen(d) > 4096, JB_ERR_INVALID_ARGUMENT,
                     "'%s': define '%s' is longer than 4096 characters", owner, name);
        /* Either would carry the define past its line, into the source that follows. */
        JB_RETURN_IF(eq && (strstr(eq, "/*") || d[strlen(d) - 1] == '\\'),
                     JB_ERR_INVALID_ARGUMENT,
                     "'%s': define '%s' opens a comment or ends with a backslash", owner, name);
        for (size_t j = 0; j < i; j++)
            JB_RETURN_IF(define_is(defines[j], name), JB_ERR_INVALID_ARGUMENT,
                         "'%s': define '%s' is given twice", owner, name);
    }
    return JB_OK;
}

void jb__append_defines(jb_strbuf *sb, const char *const *defines, size_t num_defines)
{
    for (size_t i = 0; i < num_defines; i++) {
        const char *d = defines[i], *eq = strchr(d, '=');
        if (eq)
            jb__strbuf_appendf(sb, "#define %.*s %s\n", (int)(eq - d), d, eq + 1);
        else
            jb__strbuf_appendf(sb, "#define %s 1\n", d);
    }
}

/* The names a kernel pastes into source, in one list: inputs, outputs (these two have `_size`
 * companions), scalars, parameters. */
static size_t gather_names(const jb_kernel_spec *k, const char **names, size_t *num_arrays)
{
    size_t n = 0;
    for (size_t i = 0; i < k->num_inputs; i++)
        names[n++] = k->input_names[i];
    for (size_t i = 0; i < k->num_outputs; i++)
        names[n++] = k->output_names[i];
    *num_arrays = n;
    for (size_t i = 0; i < k->num_scalars; i++)
        names[n++] = k->scalar_names[i];
    for (size_t i = 0; i < k->num_params; i++)
        names[n++] = k->params[i].name;
    return n;
}

/* The names each array brings with it into a body. */
static const char *const companions[] = {"_size", "_shape", "_ndim"};
#define NUM_COMPANIONS (sizeof companions / sizeof *companions)

/* True when `name` is array name `array` followed by one of its companions' suffixes. */
static bool is_companion(const char *name, const char *array)
{
    size_t len = strlen(array);
    if (strncmp(name, array, len) != 0)
        return false;
    for (size_t c = 0; c < NUM_COMPANIONS; c++)
        if (strcmp(name + len, companions[c]) == 0)
            return true;
    return false;
}

/* True when two of the names, or one name and an array's companion (`_size`, `_shape`,
 * `_ndim`), coincide, or a define redefines one of them. */
static bool names_collide(const jb_kernel_spec *k)
{
    const char *names[2 * JB_KERNEL_MAX_ARRAYS + JB_KERNEL_MAX_PARAMS];
    size_t num_arrays, total = gather_names(k, names, &num_arrays);
    for (size_t d = 0; d < k->num_defines; d++)
        if (define_is(k->defines[d], k->name))
            return true;
    for (size_t a = 0; a < total; a++) {
        if (strcmp(names[a], k->name) == 0)
            return true;
        for (size_t d = 0; d < k->num_defines; d++) {
            if (define_is(k->defines[d], names[a]))
                return true;
            for (size_t c = 0; a < num_arrays && c < NUM_COMPANIONS; c++) {
                char companion[JB_MAX_IDENTIFIER + 8];
                snprintf(companion, sizeof companion, "%s%s", names[a], companions[c]);
                if (define_is(k->defines[d], companion))
                    return true;
            }
        }
        for (size_t b = 0; b < total; b++) {
            if (a != b && strcmp(names[a], names[b]) == 0)
                return true;
            if (b < num_arrays && is_companion(names[a], names[b]))
                return true;
        }
    }
    return false;
}

int jb__kernel_spec_check(const jb_kernel_spec *spec)
{
    JB_RETURN_IF(!spec, JB_ERR_INVALID_ARGUMENT, "jb_custom_kernel_new: spec is NULL");
    const char *problem = identifier_problem(spec->name);
    JB_RETURN_IF(problem, JB_ERR_INVALID_ARGUMENT,
                 "the kernel name %s; it must be a C identifier and not reserved", problem);
    JB_RETURN_IF(spec->num_outputs < 1, JB_ERR_INVALID_ARGUMENT,
                 "kernel '%s' needs at least one output", spec->name);
    JB_RETURN_IF(spec->num_inputs > JB_KERNEL_MAX_ARRAYS || /* each first: the sum may wrap */
                     spec->num_outputs > JB_KERNEL_MAX_ARRAYS - spec->num_inputs ||
                     spec->num_scalars > JB_KERNEL_MAX_ARRAYS,
                 JB_ERR_INVALID_ARGUMENT,
                 "kernel '%s' has more than %d inputs and outputs, or more than %d scalars",
                 spec->name, JB_KERNEL_MAX_ARRAYS, JB_KERNEL_MAX_ARRAYS);
    JB_FORWARD_IF_ERROR(
        validate_names("input", spec->input_names, spec->input_dtypes, spec->num_inputs));
    JB_FORWARD_IF_ERROR(
        validate_names("output", spec->output_names, spec->output_dtypes, spec->num_outputs));
    JB_FORWARD_IF_ERROR(
        validate_names("scalar", spec->scalar_names, spec->scalar_dtypes, spec->num_scalars));
    JB_FORWARD_IF_ERROR(validate_params(spec));
    JB_FORWARD_IF_ERROR(jb__compile_options_check(spec->name, spec->compile_flags,
                                                  JB_COMPILE_BOUNDS_CHECKS, spec->defines,
                                                  spec->num_defines));
    const jb_compile_options requested = {spec->compile_flags, spec->compiler_options,
                                          spec->num_compiler_options, spec->include_dirs,
                                          spec->num_include_dirs, spec->target_arch};
    JB_FORWARD_IF_ERROR(jb__compiler_options_check(spec->name, &requested));
    JB_RETURN_IF(!spec->body, JB_ERR_INVALID_ARGUMENT, "kernel '%s' has no body", spec->name);
    JB_RETURN_IF(names_collide(spec), JB_ERR_INVALID_ARGUMENT,
                 "kernel '%s': input, output, scalar, parameter and define names must differ "
                 "from each other, from the kernel's name and from each array's '<name>_size', "
                 "'<name>_shape' and '<name>_ndim'",
                 spec->name);
    return JB_OK;
}

/* Public backend names; the library's backends carry their dialect in their own table. */
static const struct {
    const char *name;
    jb_source_dialect dialect;
} backend_dialects[] = {{"cpu", JB_DIALECT_C}, {"cuda", JB_DIALECT_CUDA}, {"rocm", JB_DIALECT_CUDA}};

bool jb__backend_name_dialect(const char *backend, jb_source_dialect *out)
{
    for (size_t i = 0; backend && i < sizeof backend_dialects / sizeof *backend_dialects; i++)
        if (strcmp(backend, backend_dialects[i].name) == 0) {
            *out = backend_dialects[i].dialect;
            return true;
        }
    return false;
}

/* The names a body reads its block by, the same values on every backend (docs/KERNELS.md). */
static const char *const block_words[] = {"block_index", "thread_in_block", "block_size",
                                          "grid_blocks"};

/* Whether the body, header or a define's value names `name`. */
static bool spec_mentions(const jb_kernel_spec *spec, const char *name)
{
    if (jb__source_mentions(spec->body, name) || jb__source_mentions(spec->header, name))
        return true;
    for (size_t i = 0; i < spec->num_defines; i++) {
        const char *eq = strchr(spec->defines[i], '=');
        if (eq && jb__source_mentions(eq + 1, name))
            return true;
    }
    return false;
}

/* Which arrays show their shape (a body that names `x_shape` or `x_ndim`), and the names a
 * bounds-checked body subscripts: the arrays, then each shown shape. */
static int find_checked_names(jb_custom_kernel *k, const jb_kernel_spec *spec)
{
    size_t num_arrays = k->num_inputs + k->num_outputs, num_shaped = 0;
    char companion[JB_MAX_IDENTIFIER + 8];
    for (size_t slot = 0; slot < num_arrays; slot++) {
        snprintf(companion, sizeof companion, "%s_shape", slot_name(k, slot));
        bool shaped = spec_mentions(spec, companion);
        snprintf(companion, sizeof companion, "%s_ndim", slot_name(k, slot));
        k->shaped[slot] = shaped || spec_mentions(spec, companion);
        num_shaped += k->shaped[slot];
    }
    JB_RETURN_IF(num_shaped > JB_KERNEL_MAX_SHAPED, JB_ERR_INVALID_ARGUMENT,
                 "kernel '%s' uses the shapes of %zu arrays; at most %d may show theirs",
                 k->name, num_shaped, JB_KERNEL_MAX_SHAPED);
    JB_RETURN_IF(k->num_scalars + num_shaped * (1 + JB_MAX_NDIM) > JB_KERNEL_MAX_SLOTS,
                 JB_ERR_INVALID_ARGUMENT,
                 "kernel '%s': %zu scalars and %zu shapes do not fit a launch's %d scalar slots",
                 k->name, k->num_scalars, num_shaped, JB_KERNEL_MAX_SLOTS);
    k->checked_names = calloc(num_arrays + num_shaped + 1, sizeof *k->checked_names);
    JB_RETURN_IF(!k->checked_names, JB_ERR_OUT_OF_MEMORY, "no memory for kernel '%s'", k->name);
    for (size_t slot = 0; slot < num_arrays; slot++)
        k->checked_names[k->num_checked++] = jb__strdup(slot_name(k, slot));
    for (size_t slot = 0; slot < num_arrays; slot++)
        if (k->shaped[slot]) {
            snprintf(companion, sizeof companion, "%s_shape", slot_name(k, slot));
            k->checked_names[k->num_checked++] = jb__strdup(companion);
        }
    for (size_t i = 0; i < k->num_checked; i++)
        JB_RETURN_IF(!k->checked_names[i], JB_ERR_OUT_OF_MEMORY, "no memory for kernel '%s'",
                     k->name);
    return JB_OK;
}

/* check_and_rewrite on texts whose lines are joined. */
static int check_and_rewrite_joined(jb_custom_kernel *k, const jb_kernel_spec *spec,
                                    const char *body_text, const char *header_text,
                                    jb_strbuf *body, jb_strbuf *header)
{
    const char *const *names = (const char *const *)k->checked_names;
    JB_FORWARD_IF_ERROR(jb__bounds_text_check(k->name, "body", body_text, names, k->num_checked));
    if (header_text)
        JB_FORWARD_IF_ERROR(
            jb__bounds_text_check(k->name, "header", header_text, names, k->num_checked));
    for (size_t i = 0; i < spec->num_defines; i++) {
        const char *value = strchr(spec->defines[i], '=');
        if (!value)
            continue;
        JB_FORWARD_IF_ERROR(
            jb__bounds_text_check(k->name, "define", value + 1, names, k->num_checked));
        for (size_t n = 0; n < k->num_checked; n++)
            JB_RETURN_IF(jb__source_mentions(value + 1, names[n]), JB_ERR_INVALID_ARGUMENT,
                         "kernel '%s': define %zu names array '%s', which a bounds-checked "
                         "kernel reaches only through subscripts in its body",
                         k->name, i, names[n]);
    }
    JB_FORWARD_IF_ERROR(jb__bounds_rewrite(k->name, "body", body_text, names, k->num_checked,
                                           true, body));
    return header_text ? jb__bounds_rewrite(k->name, "header", header_text, names,
                                            k->num_checked, true, header)
                       : JB_OK;
}

/* A checked kernel's texts: refused where they could reach an array past the checks, then
 * every subscript of an array or shape made a checked access. A define's value is pasted where
 * the body names it, so it may name no array at all. */
static int check_and_rewrite(jb_custom_kernel *k, const jb_kernel_spec *spec, jb_strbuf *body,
                             jb_strbuf *header)
{
    /* Lines are joined first, as the compiler joins them before it reads a token: a comment
     * that ends in `*\<newline>/`, or a string in `\\<newline>`, ends elsewhere for the
     * compiler than for a scan of the unjoined text, which would not see what lies between. */
    jb_strbuf body_text = {0}, header_text = {0};
    jb__splice_lines(spec->body, &body_text);
    if (spec->header)
        jb__splice_lines(spec->header, &header_text);
    int status = JB_OK;
    if (body_text.failed || header_text.failed)
        status = jb__fail(JB_ERR_OUT_OF_MEMORY, "no memory for the source of kernel '%s'",
                          k->name);
    else
        status = check_and_rewrite_joined(k, spec, body_text.data,
                                          spec->header ? header_text.data : NULL, body, header);
    jb__strbuf_free(&body_text);
    jb__strbuf_free(&header_text);
    return status;
}

int jb__kernel_generate(jb_custom_kernel *k, const jb_kernel_spec *spec)
{
    JB_FORWARD_IF_ERROR(find_checked_names(k, spec));
    /* Only a kernel that calls them gets the atomics: every other kernel's source is unchanged. */
    for (size_t w = 0; jb__atomic_word(w); w++)
        k->uses_atomics |= spec_mentions(spec, jb__atomic_word(w));
    /* Likewise the block's values: every other kernel's cpu loop is the one it was. */
    for (size_t w = 0; w < sizeof block_words / sizeof *block_words; w++)
        k->uses_block |= spec_mentions(spec, block_words[w]);
    /* A checked kernel's body and header reach arrays through checked accesses only. */
    jb_strbuf body = {0}, header = {0};
    int status = JB_OK;
    if (k->bounds_checked)
        status = check_and_rewrite(k, spec, &body, &header);
    const char *body_text = k->bounds_checked ? (body.data ? body.data : "") : spec->body;
    const char *header_text = k->bounds_checked && spec->header ? (header.data ? header.data : "")
                                                                : spec->header;
    if (status == JB_OK) {
        k->sources[JB_DIALECT_C] = generate_cpu_source(k, spec, header_text, body_text);
        k->sources[JB_DIALECT_CUDA] = generate_gpu_source(k, spec, header_text, body_text);
    }
    jb__strbuf_free(&body);
    jb__strbuf_free(&header);
    JB_FORWARD_IF_ERROR(status);
    size_t module_name_len = strlen(k->name) + 18;
    k->module_name = malloc(module_name_len);
    JB_RETURN_IF(!k->sources[JB_DIALECT_C] || !k->sources[JB_DIALECT_CUDA] || !k->module_name,
                 JB_ERR_OUT_OF_MEMORY, "no memory for the source of kernel '%s'", k->name);
    /* Every dialect's source, in dialect order: the hash (and so the module name) covers all. */
    uint64_t hash = JB_FNV_SEED;
    for (int d = 0; d < JB_DIALECT_COUNT; d++)
        hash = jb__fnv1a64(k->sources[d], strlen(k->sources[d]), hash);
    snprintf(k->module_name, module_name_len, "%s_%016" PRIx64, k->name, hash);
    k->module_name_hash = jb__fnv1a64(k->module_name, strlen(k->module_name), JB_FNV_SEED);
    return JB_OK;
}
