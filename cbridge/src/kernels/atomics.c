/*
 * Atomics in kernel bodies: atomic_add, atomic_exchange, atomic_min and atomic_max on an
 * output's element, each returning the element's old value, with one meaning on every backend.
 * The cpu uses the compiler's __atomic builtins (a compare-and-swap loop where no single
 * instruction does it); CUDA and HIP their atomic functions, and the same loop around atomicCAS
 * where they have none (f32 min and max, i64 min and max). Pure text work, like
 * kernel_source.c, which pastes what this file writes.
 */
#include "kernels.h"

#include <string.h>

/* The functions a body calls, by the name of the operation inside the helpers' names. */
static const struct {
    const char *word, *op;
} atomic_words[] = {
    {"atomic_add", "add"},
    {"atomic_exchange", "exchange"},
    {"atomic_min", "min"},
    {"atomic_max", "max"},
};
#define NUM_ATOMIC_WORDS (sizeof atomic_words / sizeof *atomic_words)

/* The dtypes with atomics, as the dtype names the preludes declare. */
static const char *const atomic_types[] = {"f32", "i32", "u32", "i64", "u64"};
#define NUM_ATOMIC_TYPES (sizeof atomic_types / sizeof *atomic_types)

bool jb__is_atomic_word(const char *name, size_t len)
{
    for (size_t i = 0; i < NUM_ATOMIC_WORDS; i++)
        if (strlen(atomic_words[i].word) == len && strncmp(atomic_words[i].word, name, len) == 0)
            return true;
    return false;
}

const char *jb__atomic_word(size_t i)
{
    return i < NUM_ATOMIC_WORDS ? atomic_words[i].word : NULL;
}

static bool has_atomics(jb_dtype dtype)
{
    for (size_t i = 0; i < NUM_ATOMIC_TYPES; i++)
        if (strcmp(jb_dtype_name(dtype), atomic_types[i]) == 0)
            return true;
    return false;
}

/* The cpu's helpers, one per operation and type: relaxed, as CUDA's atomics are. The generic
 * builtins (__atomic_load, __atomic_exchange, __atomic_compare_exchange) take any type, floats
 * included; a NULL element (a checked access out of range) is left alone and reads 0. */
static void append_c_helpers(jb_strbuf *sb)
{
    static const char *const relaxed = "__ATOMIC_RELAXED";
    for (size_t t = 0; t < NUM_ATOMIC_TYPES; t++) {
        const char *T = atomic_types[t];
        const char *head = "static inline __attribute__((unused))";
        if (t == 0) /* f32: no fetch-add for floats, so a compare-and-swap loop */
            jb__strbuf_appendf(sb,
                               "%s f32 jb_atomic_add_f32(f32 *p, f32 v) { if (!p) return 0; "
                               "f32 old, sum; __atomic_load(p, &old, %s); do sum = old + v; "
                               "while (!__atomic_compare_exchange(p, &old, &sum, 1, %s, %s)); "
                               "return old; }\n",
                               head, relaxed, relaxed, relaxed);
        else
            jb__strbuf_appendf(sb,
                               "%s %s jb_atomic_add_%s(%s *p, %s v) { return p ? "
                               "__atomic_fetch_add(p, v, %s) : 0; }\n",
                               head, T, T, T, T, relaxed);
        jb__strbuf_appendf(sb,
                           "%s %s jb_atomic_exchange_%s(%s *p, %s v) { %s old = 0; "
                           "if (p) __atomic_exchange(p, &v, &old, %s); return old; }\n",
                           head, T, T, T, T, T, relaxed);
        for (int max = 0; max <= 1; max++)
            jb__strbuf_appendf(sb,
                               "%s %s jb_atomic_%s_%s(%s *p, %s v) { if (!p) return 0; %s old; "
                               "__atomic_load(p, &old, %s); while (v %s old && "
                               "!__atomic_compare_exchange(p, &old, &v, 1, %s, %s)) {} "
                               "return old; }\n",
                               head, T, max ? "max" : "min", T, T, T, T, relaxed,
                               max ? ">" : "<", relaxed, relaxed);
    }
    /* The pointer's type picks the helper; its expression is not evaluated twice. */
    for (size_t w = 0; w < NUM_ATOMIC_WORDS; w++) {
        const char *op = atomic_words[w].op;
        jb__strbuf_appendf(sb, "#define jb_atomic_%s_op(p, v) _Generic((p)", op);
        for (size_t t = 0; t < NUM_ATOMIC_TYPES; t++)
            jb__strbuf_appendf(sb, ", %s *: jb_atomic_%s_%s", atomic_types[t], op,
                               atomic_types[t]);
        jb__strbuf_append(sb, ")((p), (v))\n");
    }
}

/* CUDA's and HIP's: overloads by pointer type. i64 goes through unsigned long long (two's
 * complement: the same bits for add and exchange); f32 and i64 min and max loop on atomicCAS,
 * comparing as their own type. */
static const char cuda_helpers[] =
    "#define JB_ATOMIC_NATIVE(op, T, fn) static __device__ inline __attribute__((unused)) T "
    "jb_atomic_##op##_op(T *p, T v) { return p ? fn(p, v) : (T)0; }\n"
    "JB_ATOMIC_NATIVE(add, f32, atomicAdd) JB_ATOMIC_NATIVE(add, i32, atomicAdd)\n"
    "JB_ATOMIC_NATIVE(add, u32, atomicAdd) JB_ATOMIC_NATIVE(add, u64, atomicAdd)\n"
    "JB_ATOMIC_NATIVE(exchange, f32, atomicExch) JB_ATOMIC_NATIVE(exchange, i32, atomicExch)\n"
    "JB_ATOMIC_NATIVE(exchange, u32, atomicExch) JB_ATOMIC_NATIVE(exchange, u64, atomicExch)\n"
    "JB_ATOMIC_NATIVE(min, i32, atomicMin) JB_ATOMIC_NATIVE(min, u32, atomicMin)\n"
    "JB_ATOMIC_NATIVE(min, u64, atomicMin) JB_ATOMIC_NATIVE(max, i32, atomicMax)\n"
    "JB_ATOMIC_NATIVE(max, u32, atomicMax) JB_ATOMIC_NATIVE(max, u64, atomicMax)\n"
    "#undef JB_ATOMIC_NATIVE\n"
    "#define JB_ATOMIC_I64(op, fn) static __device__ inline __attribute__((unused)) i64 "
    "jb_atomic_##op##_op(i64 *p, i64 v) { return p ? (i64)fn((unsigned long long *)p, "
    "(unsigned long long)v) : (i64)0; }\n"
    "JB_ATOMIC_I64(add, atomicAdd) JB_ATOMIC_I64(exchange, atomicExch)\n"
    "#undef JB_ATOMIC_I64\n"
    /* U: the word atomicCAS swaps; to_T and to_U: the bits as the value and back. */
    "#define JB_ATOMIC_CAS(op, T, U, to_T, to_U, better) static __device__ inline "
    "__attribute__((unused)) T jb_atomic_##op##_op(T *p, T v) { if (!p) return (T)0; "
    "U *q = (U *)p; U old = *(volatile U *)q; while (v better to_T(old)) { "
    "U seen = atomicCAS(q, old, to_U(v)); if (seen == old) break; old = seen; } "
    "return to_T(old); }\n"
    "#define JB_AS_I64(u) ((i64)(u))\n#define JB_AS_U64(v) ((unsigned long long)(v))\n"
    "JB_ATOMIC_CAS(min, f32, unsigned int, __uint_as_float, __float_as_uint, <)\n"
    "JB_ATOMIC_CAS(max, f32, unsigned int, __uint_as_float, __float_as_uint, >)\n"
    "JB_ATOMIC_CAS(min, i64, unsigned long long, JB_AS_I64, JB_AS_U64, <)\n"
    "JB_ATOMIC_CAS(max, i64, unsigned long long, JB_AS_I64, JB_AS_U64, >)\n"
    "#undef JB_ATOMIC_CAS\n";

/* A checked atomic's element: its address in range, else NULL once the miss is recorded as
 * any checked access records it (the helpers leave NULL alone: a GPU has no atomics on a
 * thread's own spare, which lives in local memory). */
static const char checked_atomic_text[] =
    "%s __attribute__((unused)) void *jb_checked_atomic(const void *base, unsigned long long elem,\n"
    "    unsigned long long size, long long i, unsigned int slot, jb_bounds_record *r,\n"
    "    unsigned long long thread)\n"
    "{\n"
    "    if (i >= 0 && (unsigned long long)i < size)\n"
    "        return (char *)base + (unsigned long long)i * elem;\n"
    "    unsigned long long spare;\n"
    "    (void)jb_checked(base, elem, size, i, slot, r, thread, &spare); /* records it */\n"
    "    return (void *)0;\n"
    "}\n";

void jb__append_atomic_helpers(jb_strbuf *sb, jb_source_dialect dialect, bool checked)
{
    if (dialect == JB_DIALECT_C)
        append_c_helpers(sb);
    else
        jb__strbuf_append(sb, cuda_helpers);
    if (checked)
        jb__strbuf_appendf(sb, checked_atomic_text,
                           dialect == JB_DIALECT_C ? "static inline"
                                                   : "static __device__ inline");
}

/* Each array's element pointer for the atomics, `jb_atomic_ptr_<name>(index)`, which the
 * atomic_* macros reach by pasting the name they were given: an output of a dtype with
 * atomics gets its element's address (through the checks in a checked kernel); any other
 * array an identifier that does not exist, whose name is the compile error's message. */
void jb__append_atomic_macros(jb_strbuf *sb, const jb_custom_kernel *k)
{
    size_t num_arrays = k->num_inputs + k->num_outputs;
    for (size_t slot = 0; slot < num_arrays; slot++) {
        bool output = slot >= k->num_inputs;
        const char *name = output ? k->output_names[slot - k->num_inputs] : k->input_names[slot];
        jb_dtype dtype = output ? k->output_dtypes[slot - k->num_inputs] : k->input_dtypes[slot];
        const char *type = jb_dtype_name(dtype);
        if (!output)
            jb__strbuf_appendf(sb,
                               "#define jb_atomic_ptr_%s(...) "
                               "atomics_change_outputs_only__%s_is_an_input\n",
                               name, name);
        else if (!has_atomics(dtype))
            jb__strbuf_appendf(sb,
                               "#define jb_atomic_ptr_%s(...) "
                               "atomics_take_f32_i32_u32_i64_or_u64_outputs__%s_is_%s\n",
                               name, name, type);
        else if (k->bounds_checked)
            jb__strbuf_appendf(sb,
                               "#define jb_atomic_ptr_%s(...) ((%s *)jb_checked_atomic("
                               "jb_base_%zu, sizeof *jb_base_%zu, jb_size_%zu, "
                               "((void)sizeof(\"\"[__VA_ARGS__]), (long long)(__VA_ARGS__)), "
                               "%zuu, jb_bounds, jb_thread))\n",
                               name, type, slot, slot, slot, slot);
        else
            jb__strbuf_appendf(sb, "#define jb_atomic_ptr_%s(...) (&(%s)[(__VA_ARGS__)])\n", name,
                               name);
    }
    /* Scalars and shapes are no arrays of the kernel's either: say so too. */
    for (size_t i = 0; i < k->num_scalars; i++)
        jb__strbuf_appendf(sb,
                           "#define jb_atomic_ptr_%s(...) "
                           "atomics_change_outputs_only__%s_is_a_scalar\n",
                           k->scalar_names[i], k->scalar_names[i]);
    for (size_t slot = 0; slot < num_arrays; slot++)
        if (k->shaped[slot]) {
            const char *name =
                slot < k->num_inputs ? k->input_names[slot] : k->output_names[slot - k->num_inputs];
            jb__strbuf_appendf(sb,
                               "#define jb_atomic_ptr_%s_shape(...) "
                               "atomics_change_outputs_only__%s_shape_is_a_shape\n",
                               name, name);
        }
    for (size_t w = 0; w < NUM_ATOMIC_WORDS; w++)
        jb__strbuf_appendf(sb, "#define %s(array, index, value) jb_atomic_%s_op("
                               "jb_atomic_ptr_##array(index), (value))\n",
                           atomic_words[w].word, atomic_words[w].op);
}

void jb__append_atomic_undefs(jb_strbuf *sb, const jb_custom_kernel *k)
{
    size_t num_arrays = k->num_inputs + k->num_outputs;
    for (size_t slot = 0; slot < num_arrays; slot++)
        jb__strbuf_appendf(sb, "#undef jb_atomic_ptr_%s\n",
                           slot < k->num_inputs ? k->input_names[slot]
                                                : k->output_names[slot - k->num_inputs]);
    for (size_t i = 0; i < k->num_scalars; i++)
        jb__strbuf_appendf(sb, "#undef jb_atomic_ptr_%s\n", k->scalar_names[i]);
    for (size_t slot = 0; slot < num_arrays; slot++)
        if (k->shaped[slot])
            jb__strbuf_appendf(sb, "#undef jb_atomic_ptr_%s_shape\n",
                               slot < k->num_inputs ? k->input_names[slot]
                                                    : k->output_names[slot - k->num_inputs]);
    for (size_t w = 0; w < NUM_ATOMIC_WORDS; w++)
        jb__strbuf_appendf(sb, "#undef %s\n", atomic_words[w].word);
}
