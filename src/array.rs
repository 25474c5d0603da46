//! Arrays: device buffers with a dtype and a shape, produced asynchronously.

use crate::device::Device;
use crate::error::{Error, ErrorCode, check};
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
}

const DTYPES: [(DType, i32, &str, usize); 10] = [
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
];

impl DType {
    /// Every dtype, in the C library's numbering.
    pub const ALL: [DType; 10] = [
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

    fn from_raw(raw: i32) -> DType {
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
          u32 => U32, i64 => I64, bool => Bool);

/// An array on a device. The work that produces it may still be running; [`Array::eval`] waits
/// for it and [`Array::to_vec`] reads it back. Dropping an array whose buffer a queued kernel
/// still uses is safe.
///
/// ```
/// use jitbridge::{Array, Device};
/// let a = Array::from_slice(Device::cpu()?, &[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
/// assert_eq!(a.shape(), vec![2, 2]);
/// assert_eq!(a.to_vec::<f32>()?, [1.0, 2.0, 3.0, 4.0]);
/// # Ok::<(), jitbridge::Error>(())
/// ```
pub struct Array {
    raw: *mut ffi::jb_array,
}

// SAFETY: the C array functions may be called from any thread; the handle only owns the array.
unsafe impl Send for Array {}
// SAFETY: the methods taking &self only read the array or wait for it, which C allows from
// several threads at once.
unsafe impl Sync for Array {}

/// Sizes are `usize` in Rust and `int64_t` in C: a size C cannot hold is a shape error here.
pub(crate) fn c_shape(shape: &[usize]) -> Result<Vec<i64>, Error> {
    shape
        .iter()
        .map(|&d| {
            i64::try_from(d).map_err(|_| {
                Error::new(ErrorCode::Shape, format!("dimension {d} is too large for the library"))
            })
        })
        .collect()
}

impl Array {
    /// An array on `device` holding a copy of `data`, whose length must match `shape`.
    pub fn from_slice<T: Element>(
        device: Device,
        data: &[T],
        shape: &[usize],
    ) -> Result<Array, Error> {
        let dims = c_shape(shape)?;
        let count = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        if count != Some(data.len()) {
            return Err(Error::new(
                ErrorCode::Shape,
                format!("shape {shape:?} does not hold {} elements", data.len()),
            ));
        }
        let mut raw = std::ptr::null_mut();
        // SAFETY: `data` holds `count` elements of the dtype; the library copies before return.
        check(unsafe {
            ffi::jb_array_from_host(
                &mut raw,
                device.raw(),
                T::DTYPE.raw(),
                dims.as_ptr(),
                dims.len() as i32,
                data.as_ptr().cast(),
            )
        })?;
        Ok(Array { raw })
    }

    /// The one-dimensional array 0, 1, ..., n-1.
    pub fn arange(device: Device, n: usize, dtype: DType) -> Result<Array, Error> {
        let n = c_shape(&[n])?[0];
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out pointer; the library checks `n`.
        check(unsafe { ffi::jb_array_arange(&mut raw, device.raw(), n, dtype.raw()) })?;
        Ok(Array { raw })
    }

    /// Blocks until the work that produces this array has finished. Launches record their event
    /// lazily: the first wait for an array with newer work queued behind it on its stream also
    /// waits for that work; that stream then records each launch's event at once for its next
    /// 4096 launches, so a program that keeps waiting for older arrays pays that again each time
    /// those 4096 run out.
    pub fn eval(&self) -> Result<(), Error> {
        // SAFETY: `raw` is live; eval only waits.
        check(unsafe { ffi::jb_array_eval(self.raw) })
    }

    /// Waits for the array and copies it out. `T` must match the dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>, Error> {
        if self.dtype() != T::DTYPE {
            return Err(Error::new(
                ErrorCode::Shape,
                format!("the array is {:?}, not {:?}", self.dtype(), T::DTYPE),
            ));
        }
        // Read as bytes first: a bool array's bytes are checked before they become bools.
        let mut bytes = vec![0u8; self.size() * T::DTYPE.size()];
        // SAFETY: `bytes` has room for exactly the array's bytes.
        check(unsafe { ffi::jb_array_read(self.raw, bytes.as_mut_ptr().cast(), bytes.len()) })?;
        if T::DTYPE == DType::Bool && bytes.iter().any(|&b| b > 1) {
            return Err(Error::new(
                ErrorCode::Shape,
                "a bool array holds a byte other than 0 or 1",
            ));
        }
        let mut out = vec![T::default(); self.size()];
        // SAFETY: every Element is plain data of DTYPE.size() bytes, any bit pattern valid (bool
        // checked above); `out` has room for `bytes.len()` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                out.as_mut_ptr().cast::<u8>(),
                bytes.len(),
            )
        };
        Ok(out)
    }

    /// The device the array lives on.
    pub fn device(&self) -> Device {
        // SAFETY: `raw` is live.
        Device::from_raw(unsafe { ffi::jb_array_device(self.raw) })
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        // SAFETY: `raw` is live.
        DType::from_raw(unsafe { ffi::jb_array_dtype(self.raw) })
    }

    /// The dimensions.
    pub fn shape(&self) -> Vec<usize> {
        // SAFETY: the shape pointer holds `ndim` values while the array lives.
        let dims = unsafe {
            let ndim = ffi::jb_array_ndim(self.raw) as usize;
            std::slice::from_raw_parts(ffi::jb_array_shape(self.raw), ndim)
        };
        // The library never holds a negative dimension.
        dims.iter().map(|&d| d as usize).collect()
    }

    /// The number of elements.
    pub fn size(&self) -> usize {
        // SAFETY: `raw` is live.
        unsafe { ffi::jb_array_size(self.raw) as usize }
    }

    pub(crate) fn raw(&self) -> *mut ffi::jb_array {
        self.raw
    }

    /// Takes ownership of an array the library created.
    pub(crate) fn from_raw(raw: *mut ffi::jb_array) -> Array {
        Array { raw }
    }
}

impl Drop for Array {
    fn drop(&mut self) {
        // SAFETY: we own the array; queued work holds its own reference to the buffer.
        unsafe { ffi::jb_array_free(self.raw) }
    }
}

impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Array")
            .field("dtype", &self.dtype())
            .field("shape", &self.shape())
            .field("device", &self.device().index())
            .finish()
    }
}
