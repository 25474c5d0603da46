//! Element types: the dtypes, the 16-bit float formats, the Rust types that match each dtype,
//! and scalars (a value with its dtype).

use crate::ffi;

/// Element types an array can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 32-bit signed integer.
    I32,
    /// IEEE binary16 ([`F16`]).
    F16,
    /// bfloat16, the top half of an f32 ([`Bf16`]).
    Bf16,
    /// 64-bit float.
    F64,
    /// 8-bit signed integer.
    I8,
    /// 8-bit unsigned integer.
    U8,
    /// 32-bit unsigned integer.
    U32,
    /// 64-bit signed integer.
    I64,
    /// One byte, 0 or 1.
    Bool,
    /// 16-bit signed integer.
    I16,
    /// 16-bit unsigned integer.
    U16,
    /// 64-bit unsigned integer.
    U64,
}

const DTYPES: [(DType, i32, &str, usize); 13] = [
    (DType::F32, ffi::JB_F32, "f32", 4),
    (DType::I32, ffi::JB_I32, "i32", 4),
    (DType::F16, ffi::JB_F16, "f16", 2),
    (DType::Bf16, ffi::JB_BF16, "bf16", 2),
    (DType::F64, ffi::JB_F64, "f64", 8),
    (DType::I8, ffi::JB_I8, "i8", 1),
    (DType::U8, ffi::JB_U8, "u8", 1),
    (DType::U32, ffi::JB_U32, "u32", 4),
    (DType::I64, ffi::JB_I64, "i64", 8),
    (DType::Bool, ffi::JB_BOOL, "bool", 1),
    (DType::I16, ffi::JB_I16, "i16", 2),
    (DType::U16, ffi::JB_U16, "u16", 2),
    (DType::U64, ffi::JB_U64, "u64", 8),
];

impl DType {
    /// Every dtype, in the C library's numbering.
    pub const ALL: [DType; 13] = [
        DType::F32,
        DType::I32,
        DType::F16,
        DType::Bf16,
        DType::F64,
        DType::I8,
        DType::U8,
        DType::U32,
        DType::I64,
        DType::Bool,
        DType::I16,
        DType::U16,
        DType::U64,
    ];

    fn entry(self) -> &'static (DType, i32, &'static str, usize) {
        DTYPES.iter().find(|e| e.0 == self).expect("every dtype is in the table")
    }

    pub(crate) fn raw(self) -> i32 {
        self.entry().1
    }

    /// The dtype's name, which is also its type's name inside kernel source ("bf16", ...).
    pub fn name(self) -> &'static str {
        self.entry().2
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        self.entry().3
    }

    pub(crate) fn from_raw(raw: i32) -> DType {
        DTYPES.iter().find(|e| e.1 == raw).map_or(DType::F32, |e| e.0)
    }
}

/// IEEE binary16, kept as its bits. Conversions from f32 round to nearest, ties to even, as
/// kernels do on every backend (`f32_to_f16` in kernel source).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct F16(u16);

/// bfloat16 (the top 16 bits of an f32), kept as its bits. Conversions from f32 round to
/// nearest, ties to even, as kernels do on every backend (`f32_to_bf16` in kernel source).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Bf16(u16);

impl F16 {
    /// The value with these bits.
    pub const fn from_bits(bits: u16) -> F16 {
        F16(bits)
    }
    /// The bits.
    pub const fn to_bits(self) -> u16 {
        self.0
    }
    /// The f16 nearest to `value` (ties to even); NaN stays NaN, overflow becomes infinity.
    pub fn from_f32(value: f32) -> F16 {
        let x = value.to_bits();
        let sign = (x >> 16) & 0x8000;
        let a = x & 0x7fff_ffff;
        let bits = if a > 0x7f80_0000 {
            sign | 0x7e00 | ((a >> 13) & 0x3ff)
        } else if a >= 0x477f_f000 {
            sign | 0x7c00
        } else if a < 0x3880_0000 {
            if a < 0x3300_0000 {
                sign
            } else {
                // Subnormal: shift the full significand, then round half to even.
                let shift = 126 - (a >> 23);
                let m = (a & 0x7f_ffff) | 0x80_0000;
                let (mut k, rem, half) = (m >> shift, m & ((1 << shift) - 1), 1 << (shift - 1));
                if rem > half || (rem == half && k & 1 == 1) {
                    k += 1;
                }
                sign | k
            }
        } else {
            let r = a - 0x3800_0000;
            sign | ((r + 0x0fff + ((r >> 13) & 1)) >> 13)
        };
        F16(bits as u16)
    }
    /// The exact f32 value; a NaN comes out quiet (payload and sign kept), as from hardware.
    pub fn to_f32(self) -> f32 {
        let h = self.0 as u32;
        let sign = (h & 0x8000) << 16;
        let (e, m) = ((h >> 10) & 0x1f, h & 0x3ff);
        let bits = if e == 0x1f && m != 0 {
            sign | 0x7fc0_0000 | (m << 13)
        } else if e == 0x1f {
            sign | 0x7f80_0000
        } else if e != 0 {
            sign | ((e + 112) << 23) | (m << 13)
        } else if m == 0 {
            sign
        } else {
            let lead = m.leading_zeros() - 21; // shifts that bring the top bit to 0x400
            sign | ((113 - lead) << 23) | (((m << lead) & 0x3ff) << 13)
        };
        f32::from_bits(bits)
    }
}

impl Bf16 {
    /// The value with these bits.
    pub const fn from_bits(bits: u16) -> Bf16 {
        Bf16(bits)
    }
    /// The bits.
    pub const fn to_bits(self) -> u16 {
        self.0
    }
    /// The bf16 nearest to `value` (ties to even); NaN stays NaN.
    pub fn from_f32(value: f32) -> Bf16 {
        let x = value.to_bits();
        if x & 0x7fff_ffff > 0x7f80_0000 {
            return Bf16(((x >> 16) | 0x40) as u16);
        }
        Bf16(((x + 0x7fff + ((x >> 16) & 1)) >> 16) as u16)
    }
    /// The exact f32 value.
    pub fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
}

impl From<F16> for f32 {
    fn from(value: F16) -> f32 {
        value.to_f32()
    }
}
impl From<Bf16> for f32 {
    fn from(value: Bf16) -> f32 {
        value.to_f32()
    }
}
/// Rounds to nearest, ties to even ([`F16::from_f32`]).
impl From<f32> for F16 {
    fn from(value: f32) -> F16 {
        F16::from_f32(value)
    }
}
/// Rounds to nearest, ties to even ([`Bf16::from_f32`]).
impl From<f32> for Bf16 {
    fn from(value: f32) -> Bf16 {
        Bf16::from_f32(value)
    }
}

macro_rules! slice_conversions {
    ($t:ident, $name:literal) => {
        impl $t {
            #[doc = concat!("Each value of `values` as ", $name, ", rounded to nearest even: ")]
            #[doc = "host data for an array of this dtype."]
            pub fn from_f32_slice(values: &[f32]) -> Vec<$t> {
                values.iter().map(|&v| $t::from_f32(v)).collect()
            }
            #[doc = concat!("Each ", $name, " of `values` as the f32 it is exactly: what ")]
            #[doc = "`Array::to_vec` read, ready to compare."]
            pub fn to_f32_vec(values: &[$t]) -> Vec<f32> {
                values.iter().map(|v| v.to_f32()).collect()
            }
        }
    };
}
slice_conversions!(F16, "f16");
slice_conversions!(Bf16, "bf16");

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that matches one [`DType`].
pub trait Element: sealed::Sealed + Copy + Default + 'static {
    /// The matching dtype.
    const DTYPE: DType;
}

macro_rules! elements {
    ($($t:ty => $d:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$d;
        }
    )*};
}
elements!(f32 => F32, i32 => I32, F16 => F16, Bf16 => Bf16, f64 => F64, i8 => I8, u8 => U8,
          u32 => U32, i64 => I64, bool => Bool, i16 => I16, u16 => U16, u64 => U64);

/// A scalar argument of a launch, passed by value; its dtype must match the spec's (checked
/// before anything is built). `From` converts each element type; a float literal converts to
/// `F32` (`2.0.into()`), since there is no `From<f64>`: an `f64` scalar is written
/// `Scalar::F64(x)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    /// f32.
    F32(f32),
    /// i32.
    I32(i32),
    /// f16.
    F16(F16),
    /// bf16.
    Bf16(Bf16),
    /// f64.
    F64(f64),
    /// i8.
    I8(i8),
    /// u8.
    U8(u8),
    /// u32.
    U32(u32),
    /// i64.
    I64(i64),
    /// bool.
    Bool(bool),
    /// i16.
    I16(i16),
    /// u16.
    U16(u16),
    /// u64.
    U64(u64),
}

macro_rules! scalar_from {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for Scalar {
            fn from(value: $t) -> Scalar {
                Scalar::$v(value)
            }
        }
    )*};
}
// No f64: a float literal would default to it, where kernels take f32 far more often.
scalar_from!(f32 => F32, i32 => I32, F16 => F16, Bf16 => Bf16, i8 => I8, u8 => U8, u32 => U32,
             i64 => I64, bool => Bool, i16 => I16, u16 => U16, u64 => U64);

impl Scalar {
    /// The scalar's dtype.
    pub fn dtype(&self) -> DType {
        match self {
            Scalar::F32(_) => DType::F32,
            Scalar::I32(_) => DType::I32,
            Scalar::F16(_) => DType::F16,
            Scalar::Bf16(_) => DType::Bf16,
            Scalar::F64(_) => DType::F64,
            Scalar::I8(_) => DType::I8,
            Scalar::U8(_) => DType::U8,
            Scalar::U32(_) => DType::U32,
            Scalar::I64(_) => DType::I64,
            Scalar::Bool(_) => DType::Bool,
            Scalar::I16(_) => DType::I16,
            Scalar::U16(_) => DType::U16,
            Scalar::U64(_) => DType::U64,
        }
    }

    pub(crate) fn raw(&self) -> ffi::jb_scalar {
        use ffi::jb_scalar_value as V;
        let value = match *self {
            Scalar::F32(v) => V { f32: v },
            Scalar::I32(v) => V { i32: v },
            Scalar::F16(v) => V { bits16: v.to_bits() },
            Scalar::Bf16(v) => V { bits16: v.to_bits() },
            Scalar::F64(v) => V { f64: v },
            Scalar::I8(v) => V { i8: v },
            Scalar::U8(v) => V { u8: v },
            Scalar::U32(v) => V { u32: v },
            Scalar::I64(v) => V { i64: v },
            Scalar::Bool(v) => V { u8: v as u8 },
            Scalar::I16(v) => V { i16: v },
            Scalar::U16(v) => V { bits16: v },
            Scalar::U64(v) => V { u64: v },
        };
        ffi::jb_scalar { dtype: self.dtype().raw(), value }
    }
}
