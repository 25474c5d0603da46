/*
 * dtypes: names, sizes, the conversions between f32 and the 16-bit float formats, and the
 * prelude that declares the dtypes inside generated kernel source. The software conversions are
 * written once (JB_SOFT_HALF_CODE) and both compiled here and pasted into kernel source, so the
 * host, the cpu fallback and GPUs without a conversion instruction round the same way.
 */
#include "base.h"

#include <string.h>

/* Round to nearest, ties to even, on raw bits; NaN stays NaN (quiet) with its sign. */
#define JB_SOFT_HALF_CODE(Q)                                                                       \
    Q unsigned short jb_f32bits_to_f16bits(unsigned int x)                                         \
    {                                                                                              \
        unsigned int sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;                              \
        if (a > 0x7f800000u)                                                                       \
            return (unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));                        \
        if (a >= 0x477ff000u)                                                                      \
            return (unsigned short)(sign | 0x7c00u);                                               \
        if (a < 0x38800000u) {                                                                     \
            if (a < 0x33000000u)                                                                   \
                return (unsigned short)sign;                                                       \
            unsigned int s = 126u - (a >> 23), m = (a & 0x7fffffu) | 0x800000u;                    \
            unsigned int k = m >> s, rem = m & ((1u << s) - 1u), half = 1u << (s - 1u);            \
            if (rem > half || (rem == half && (k & 1u)))                                           \
                k++;                                                                               \
            return (unsigned short)(sign | k);                                                     \
        }                                                                                          \
        a -= 0x38000000u;                                                                          \
        return (unsigned short)(sign | ((a + 0x0fffu + ((a >> 13) & 1u)) >> 13));                  \
    }                                                                                              \
    Q unsigned int jb_f16bits_to_f32bits(unsigned short h)                                         \
    {                                                                                              \
        unsigned int sign = (unsigned int)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu;              \
        unsigned int m = h & 0x3ffu;                                                               \
        if (e == 0x1fu) /* a NaN comes out quiet, as from the hardware conversions */              \
            return sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u);                          \
        if (e != 0)                                                                                \
            return sign | ((e + 112u) << 23) | (m << 13);                                          \
        if (m == 0)                                                                                \
            return sign;                                                                           \
        for (e = 113u; !(m & 0x400u); e--)                                                         \
            m <<= 1;                                                                               \
        return sign | (e << 23) | ((m & 0x3ffu) << 13);                                            \
    }                                                                                              \
    Q unsigned short jb_f32bits_to_bf16bits(unsigned int x)                                        \
    {                                                                                              \
        if ((x & 0x7fffffffu) > 0x7f800000u)                                                       \
            return (unsigned short)((x >> 16) | 0x40u);                                            \
        return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);                           \
    }

JB_SOFT_HALF_CODE(static)

#define JB_STRINGIFY(...) #__VA_ARGS__
#define JB_EXPAND_STRINGIFY(...) JB_STRINGIFY(__VA_ARGS__)

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [JB_F32] = {"f32", 4}, [JB_I32] = {"i32", 4}, [JB_F16] = {"f16", 2}, [JB_BF16] = {"bf16", 2},
    [JB_F64] = {"f64", 8}, [JB_I8] = {"i8", 1},   [JB_U8] = {"u8", 1},   [JB_U32] = {"u32", 4},
    [JB_I64] = {"i64", 8}, [JB_BOOL] = {"bool", 1}, [JB_I16] = {"i16", 2}, [JB_U16] = {"u16", 2},
    [JB_U64] = {"u64", 8},
};

const char *jb_dtype_name(int dtype)
{
    return dtype >= 0 && (size_t)dtype < sizeof dtypes / sizeof *dtypes ? dtypes[dtype].name : NULL;
}

size_t jb_dtype_size(int dtype)
{
    return jb_dtype_name(dtype) ? dtypes[dtype].size : 0;
}

static unsigned int float_bits(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

static float bits_float(unsigned int bits)
{
    uint32_t b = bits;
    float value;
    memcpy(&value, &b, sizeof value);
    return value;
}

uint16_t jb_f32_to_f16_bits(float value)
{
    return jb_f32bits_to_f16bits(float_bits(value));
}

float jb_f16_bits_to_f32(uint16_t bits)
{
    return bits_float(jb_f16bits_to_f32bits(bits));
}

uint16_t jb_f32_to_bf16_bits(float value)
{
    return jb_f32bits_to_bf16bits(float_bits(value));
}

float jb_bf16_bits_to_f32(uint16_t bits)
{
    return bits_float((unsigned int)bits << 16);
}

/* C: f16 and bf16 are the compiler's arithmetic _Float16 and __bf16 where it has them (gcc 12
 * and clang 15 _Float16 on x86-64; gcc 13 and clang 17 __bf16), computed in float and rounded
 * where a value is stored or cast, as the CUDA class below; else a 16-bit storage struct that
 * only the conversion functions read. */
static const char c_prelude[] =
    "#include <math.h>\n#include <stdbool.h>\n#include <stddef.h>\n#include <stdint.h>\n"
    "#include <string.h>\n"
    "typedef float f32;\ntypedef double f64;\ntypedef int8_t i8;\ntypedef uint8_t u8;\n"
    "typedef int32_t i32;\ntypedef uint32_t u32;\ntypedef int64_t i64;\n"
    "typedef int16_t i16;\ntypedef uint16_t u16;\ntypedef uint64_t u64;\n"
    JB_EXPAND_STRINGIFY(JB_SOFT_HALF_CODE(static inline)) "\n"
    "static inline uint32_t jb_bits_of(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }\n"
    "static inline float jb_float_of(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }\n"
    "#ifdef __FLT16_MAX__\n"
    "typedef _Float16 f16;\n"
    "static inline f16 f32_to_f16(float x) { return (f16)x; }\n"
    "static inline float f16_to_f32(f16 x) { return (float)x; }\n"
    "#else\n"
    "typedef struct f16 { uint16_t bits; } f16;\n"
    "static inline f16 f32_to_f16(float x) { f16 r = {jb_f32bits_to_f16bits(jb_bits_of(x))}; "
    "return r; }\n"
    "static inline float f16_to_f32(f16 x) { return jb_float_of(jb_f16bits_to_f32bits(x.bits)); }\n"
    "#endif\n"
    "#ifdef __BFLT16_MAX__\n"
    "typedef __bf16 bf16;\n"
    "static inline bf16 f32_to_bf16(float x) { return (bf16)x; }\n"
    "static inline float bf16_to_f32(bf16 x) { return (float)x; }\n"
    "#else\n"
    "typedef struct bf16 { uint16_t bits; } bf16;\n"
    "static inline bf16 f32_to_bf16(float x) { bf16 r = {jb_f32bits_to_bf16bits(jb_bits_of(x))}; "
    "return r; }\n"
    "static inline float bf16_to_f32(bf16 x) { return jb_float_of((uint32_t)x.bits << 16); }\n"
    "#endif\n";

/* CUDA C++ (and HIP through it): no vendor fp16 header is needed, so NVRTC and hiprtc compile it
 * without a toolkit include path; NVIDIA GPUs convert with cvt.rn (round to nearest even). */
/* Helpers a kernel may not use: unused ones must not fill a compile error's log with warnings. */
#define JB_CUDA_HELPER static __device__ inline __attribute__((unused))
#define JB_CUDA_HELPER_TEXT JB_EXPAND_STRINGIFY(JB_CUDA_HELPER)

/* One half class, for `NAME` (f16 or bf16) stored as 16 bits: it converts to float implicitly,
 * so arithmetic is float's, and from any number with one rounding to nearest even, so storing or
 * casting a result rounds once: what the cpu's _Float16 and __bf16 do. A double (or a 64-bit
 * integer, through double) is first rounded to float to odd, which makes the second rounding
 * exact. OTHER is the other half type, converted from through float (exactly). Negation flips
 * the sign and keeps the type, so `c ? x : -x` has one type, as in C. */
#define JB_HALF_CLASS(NAME, OTHER)                                                                 \
    struct NAME {                                                                                  \
        unsigned short jb_bits;                                                                    \
        NAME() = default;                                                                          \
        __device__ NAME(float x) : jb_bits(jb_f32_to_##NAME##_bits(x)) {}                          \
        __device__ NAME(double x) : jb_bits(jb_f32_to_##NAME##_bits(jb_f64_to_f32_odd(x))) {}      \
        __device__ NAME(int x) : NAME((double)x) {}                                                \
        __device__ NAME(unsigned x) : NAME((double)x) {}                                           \
        __device__ NAME(long x) : NAME((double)x) {}                                               \
        __device__ NAME(unsigned long x) : NAME((double)x) {}                                      \
        __device__ NAME(long long x) : NAME((double)x) {}                                          \
        __device__ NAME(unsigned long long x) : NAME((double)x) {}                                 \
        __device__ NAME(OTHER x);                                                                  \
        __device__ operator float() const { return jb_##NAME##_bits_to_f32(jb_bits); }             \
        __device__ NAME operator-() const { NAME r; r.jb_bits = jb_bits ^ 0x8000u; return r; }   \
        __device__ NAME operator+() const { return *this; }                                        \
        template <class V> __device__ NAME &operator+=(V v) { return *this = NAME(*this + v); }    \
        template <class V> __device__ NAME &operator-=(V v) { return *this = NAME(*this - v); }    \
        template <class V> __device__ NAME &operator*=(V v) { return *this = NAME(*this * v); }    \
        template <class V> __device__ NAME &operator/=(V v) { return *this = NAME(*this / v); }    \
        __device__ NAME &operator++() { return *this += 1.0f; }                                    \
        __device__ NAME &operator--() { return *this -= 1.0f; }                                    \
        __device__ NAME operator++(int) { NAME old = *this; *this += 1.0f; return old; }           \
        __device__ NAME operator--(int) { NAME old = *this; *this -= 1.0f; return old; }           \
    };

static const char cuda_prelude[] =
    /* NVRTC has no <stdint.h> without a toolkit path (hiprtc declares these itself); the types
     * are glibc's LP64 ones, so a source that gets <cstdint> some other way still agrees. */
    "#if !defined(__HIPCC_RTC__) && !defined(__HIP__)\n"
    "typedef signed char int8_t;\ntypedef unsigned char uint8_t;\ntypedef short int16_t;\n"
    "typedef unsigned short uint16_t;\ntypedef int int32_t;\ntypedef unsigned int uint32_t;\n"
    "typedef long int64_t;\ntypedef unsigned long uint64_t;\n"
    "#endif\n"
    "typedef float f32;\ntypedef double f64;\ntypedef int8_t i8;\ntypedef uint8_t u8;\n"
    "typedef int32_t i32;\ntypedef uint32_t u32;\ntypedef int64_t i64;\n"
    /* The types CUDA's and HIP's atomic functions take, so that one overload fits each. */
    "typedef short i16;\ntypedef unsigned short u16;\ntypedef unsigned long long u64;\n"
    JB_EXPAND_STRINGIFY(JB_SOFT_HALF_CODE(JB_CUDA_HELPER)) "\n"
    "#if defined(__CUDA_ARCH__) && !defined(__HIP__) && !defined(__HIPCC_RTC__)\n"
    JB_CUDA_HELPER_TEXT " unsigned short jb_f32_to_f16_bits(float x) { unsigned short r; "
    "asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(r) : \"f\"(x)); return r; }\n"
    JB_CUDA_HELPER_TEXT " float jb_f16_bits_to_f32(unsigned short x) { float f; "
    "asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(x)); return f; }\n"
    "#else\n"
    JB_CUDA_HELPER_TEXT " unsigned short jb_f32_to_f16_bits(float x) { "
    "return jb_f32bits_to_f16bits(__float_as_uint(x)); }\n"
    JB_CUDA_HELPER_TEXT " float jb_f16_bits_to_f32(unsigned short x) { "
    "return __uint_as_float(jb_f16bits_to_f32bits(x)); }\n"
    "#endif\n"
    "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(__HIP__) && "
    "!defined(__HIPCC_RTC__)\n"
    JB_CUDA_HELPER_TEXT " unsigned short jb_f32_to_bf16_bits(float x) { unsigned short r; "
    "asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(r) : \"f\"(x)); return r; }\n"
    "#else\n"
    JB_CUDA_HELPER_TEXT " unsigned short jb_f32_to_bf16_bits(float x) { "
    "return jb_f32bits_to_bf16bits(__float_as_uint(x)); }\n"
    "#endif\n"
    JB_CUDA_HELPER_TEXT " float jb_bf16_bits_to_f32(unsigned short x) { "
    "return __uint_as_float((unsigned int)x << 16); }\n"
    /* Round to odd: an inexact float result with an even last bit moves one unit toward x. */
    JB_CUDA_HELPER_TEXT " float jb_f64_to_f32_odd(double x) { float f = (float)x; "
    "unsigned int u = __float_as_uint(f); "
    "if (x == x && (double)f != x && !(u & 1u)) u += (f < 0 ? -(double)f : f) < (x < 0 ? -x : x) "
    "? 1u : -1u; "
    "return __uint_as_float(u); }\n"
    "struct bf16;\n"
    JB_EXPAND_STRINGIFY(JB_HALF_CLASS(f16, bf16)) "\n"
    JB_EXPAND_STRINGIFY(JB_HALF_CLASS(bf16, f16)) "\n"
    "__device__ inline f16::f16(bf16 x) : f16((float)x) {}\n"
    "__device__ inline bf16::bf16(f16 x) : bf16((float)x) {}\n"
    JB_CUDA_HELPER_TEXT " f16 f32_to_f16(float x) { return f16(x); }\n"
    JB_CUDA_HELPER_TEXT " float f16_to_f32(f16 x) { return (float)x; }\n"
    JB_CUDA_HELPER_TEXT " bf16 f32_to_bf16(float x) { return bf16(x); }\n"
    JB_CUDA_HELPER_TEXT " float bf16_to_f32(bf16 x) { return (float)x; }\n";

const char *jb__dtype_prelude(jb_source_dialect dialect)
{
    return dialect == JB_DIALECT_C ? c_prelude : cuda_prelude;
}

int jb__scalar_check(const char *what, const jb_scalar *scalar)
{
    JB_RETURN_IF(!jb_dtype_name(scalar->dtype), JB_ERR_INVALID_ARGUMENT,
                 "%s: the scalar's dtype %d is not a dtype", what, (int)scalar->dtype);
    JB_RETURN_IF(scalar->dtype == JB_BOOL && scalar->value.boolean > 1, JB_ERR_INVALID_ARGUMENT,
                 "%s: the bool scalar is %u, not 0 or 1", what, scalar->value.boolean);
    return JB_OK;
}
