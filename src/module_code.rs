//! Precompiled module code (CuPy's `RawModule(path=...)`): a whole-source module's code built
//! ahead of time, given instead of its source for one dialect.

use crate::error::Error;
use crate::ffi;
use crate::kernel::c_string;
use std::ffi::CString;
use std::path::Path;

/// A module's code for one dialect, built ahead of time: on the cpu a shared object for this
/// machine, on a GPU what the driver loads (CUDA: a cubin, a fatbin or PTX; HIP: a code object).
/// Its bytes are the module's identity; a file is read whole when the module is made.
#[derive(Debug, Clone, Copy)]
pub enum ModuleCode<'a> {
    /// The code itself (1 byte to 64 MiB).
    Bytes(&'a [u8]),
    /// An absolute path, trusted as the disk cache trusts its entries: a regular file (not a
    /// link) of this user's, writable by no group or other user, with one link, 1 byte to
    /// 64 MiB, in a folder no one but this user and root can change. Anything else is an
    /// `InvalidArgument` error.
    File(&'a Path),
}

/// The C form of `code`, and the path string it points into (kept alive by the caller).
pub(crate) fn raw_code(
    code: Option<&ModuleCode<'_>>,
) -> Result<(ffi::jb_module_code, Option<CString>), Error> {
    let none = ffi::jb_module_code { bytes: std::ptr::null(), size: 0, path: std::ptr::null() };
    Ok(match code {
        None => (none, None),
        Some(ModuleCode::Bytes(bytes)) => {
            (ffi::jb_module_code { bytes: bytes.as_ptr().cast(), size: bytes.len(), ..none }, None)
        }
        Some(ModuleCode::File(path)) => {
            let text = path.to_str().ok_or_else(|| {
                Error::new(
                    crate::ErrorCode::InvalidArgument,
                    format!("code path {path:?} is not UTF-8"),
                )
            })?;
            let path = c_string("code path", text)?;
            (ffi::jb_module_code { path: path.as_ptr(), ..none }, Some(path))
        }
    })
}
