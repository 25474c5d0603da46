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
}

impl DType {
    pub(crate) fn raw(self) -> i32 {
        match self {
            DType::F32 => ffi::JB_F32,
            DType::I32 => ffi::JB_I32,
        }
    }

    fn from_raw(raw: i32) -> DType {
        if raw == ffi::JB_I32 { DType::I32 } else { DType::F32 }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for i32 {}
}

/// A Rust type that matches one [`DType`].
pub trait Element: sealed::Sealed + Copy + Default {
    /// The matching dtype.
    const DTYPE: DType;
}
impl Element for f32 {
    const DTYPE: DType = DType::F32;
}
impl Element for i32 {
    const DTYPE: DType = DType::I32;
}

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

impl Array {
    /// An array on `device` holding a copy of `data`, whose length must match `shape`.
    pub fn from_slice<T: Element>(
        device: Device,
        data: &[T],
        shape: &[i64],
    ) -> Result<Array, Error> {
        let count: i64 = shape.iter().product();
        if shape.iter().any(|&d| d < 0) || count as usize != data.len() {
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
                shape.as_ptr(),
                shape.len() as i32,
                data.as_ptr().cast(),
            )
        })?;
        Ok(Array { raw })
    }

    /// The one-dimensional array 0, 1, ..., n-1.
    pub fn arange(device: Device, n: i64, dtype: DType) -> Result<Array, Error> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out pointer; the library checks `n`.
        check(unsafe { ffi::jb_array_arange(&mut raw, device.raw(), n, dtype.raw()) })?;
        Ok(Array { raw })
    }

    /// Blocks until the work that produces this array has finished.
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
        let mut out = vec![T::default(); self.size()];
        // SAFETY: `out` has room for exactly the array's bytes.
        check(unsafe {
            ffi::jb_array_read(self.raw, out.as_mut_ptr().cast(), std::mem::size_of_val(&out[..]))
        })?;
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
    pub fn shape(&self) -> Vec<i64> {
        // SAFETY: the shape pointer holds `ndim` values while the array lives.
        unsafe {
            let ndim = ffi::jb_array_ndim(self.raw) as usize;
            std::slice::from_raw_parts(ffi::jb_array_shape(self.raw), ndim).to_vec()
        }
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
