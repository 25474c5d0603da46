//! Arrays: device buffers with a dtype and a shape, produced asynchronously.

use crate::device::Device;
use crate::dtype::{DType, Element, Scalar};
use crate::error::{Error, ErrorCode, check};
use crate::ffi;

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

    /// An array of `shape` on `device` whose every element is zero (0, 0.0, false), filled on
    /// the device: no host data is copied.
    pub fn zeros(device: Device, shape: &[usize], dtype: DType) -> Result<Array, Error> {
        let dims = c_shape(shape)?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out pointer and shape of `dims.len()` dimensions; the library checks
        // the rest.
        check(unsafe {
            ffi::jb_array_zeros(
                &mut raw,
                device.raw(),
                dtype.raw(),
                dims.as_ptr(),
                dims.len() as i32,
            )
        })?;
        Ok(Array { raw })
    }

    /// An array of `shape` on `device` whose every element is `value`, of `value`'s dtype
    /// (`Array::full(cpu, &[4], 1.5)` is f32; `Scalar::Bf16(x)` makes bf16), filled on the
    /// device: no host data is copied.
    pub fn full(device: Device, shape: &[usize], value: impl Into<Scalar>) -> Result<Array, Error> {
        let dims = c_shape(shape)?;
        let value = value.into().raw();
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out pointer, shape and scalar; the library checks the rest.
        check(unsafe {
            ffi::jb_array_full(&mut raw, device.raw(), dims.as_ptr(), dims.len() as i32, &value)
        })?;
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
