//! Errors: the C status and message, copied into an owned value on the calling thread right
//! after the failing call.

use crate::ffi;
use std::ffi::CStr;
use std::fmt;
use std::os::raw::c_int;
use std::sync::Mutex;

/// What kind of failure a call met; the numbers are the C library's `jb_status` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// A NULL, out-of-range or malformed argument.
    InvalidArgument,
    /// An allocation failed.
    OutOfMemory,
    /// The operation needs something this build or device lacks.
    Unsupported,
    /// The device does not exist, or no driver or GPU is present.
    NoDevice,
    /// The kernel did not compile; the message carries the compiler's log.
    Compile,
    /// The compiled module could not be loaded.
    Load,
    /// The launch failed.
    Launch,
    /// A driver or runtime call failed.
    Backend,
    /// An operating-system call failed.
    System,
    /// A dtype or shape does not match.
    Shape,
    /// A bounds-checked kernel indexed outside an array (reported by the next wait for what the
    /// launch wrote).
    Bounds,
    /// The process is sealed ([`crate::seal`]) and the kernel would have compiled.
    Sealed,
    /// A status this version of the crate does not know.
    Other(i32),
}

/// Each failure status of the C library (`JB_STATUS_TABLE` in jitbridge.h) and its code: the one
/// place the numbers are written on this side.
const STATUSES: [(c_int, ErrorCode); 12] = [
    (1, ErrorCode::InvalidArgument),
    (2, ErrorCode::OutOfMemory),
    (3, ErrorCode::Unsupported),
    (4, ErrorCode::NoDevice),
    (5, ErrorCode::Compile),
    (6, ErrorCode::Load),
    (7, ErrorCode::Launch),
    (8, ErrorCode::Backend),
    (9, ErrorCode::System),
    (10, ErrorCode::Shape),
    (11, ErrorCode::Bounds),
    (12, ErrorCode::Sealed),
];

impl ErrorCode {
    pub(crate) fn from_status(status: c_int) -> Self {
        STATUSES.iter().find(|(s, _)| *s == status).map_or(Self::Other(status), |&(_, code)| code)
    }

    /// The C status number of this code.
    fn status(self) -> c_int {
        match self {
            Self::Other(status) => status,
            code => STATUSES.iter().find(|(_, c)| *c == code).map(|&(s, _)| s).unwrap_or(-1),
        }
    }
}

/// An error from the jitbridge library: a code and a human-readable message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    code: ErrorCode,
    status: i32,
    message: String,
}

impl Error {
    /// The kind of failure.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The C library's status number.
    pub fn status(&self) -> i32 {
        self.status
    }

    /// The message, including a compiler log for compile errors.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// An error raised by a caller of this crate (a tool or a harness), not by the library.
    pub fn new_other(message: impl Into<String>) -> Self {
        Error::new(ErrorCode::Other(-1), message)
    }

    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Error { code, status: code.status(), message: message.into() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The C message already starts with the status text.
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// Turns a C status into a `Result`, copying the thread's last error on failure.
pub(crate) fn check(status: c_int) -> Result<(), Error> {
    if status == ffi::JB_OK {
        return Ok(());
    }
    // SAFETY: the message is never NULL and stays valid until the next call on this thread,
    // which cannot happen before the copy below.
    let message =
        unsafe { CStr::from_ptr(ffi::jb_last_error_message()) }.to_string_lossy().into_owned();
    Err(Error { code: ErrorCode::from_status(status), status, message })
}

/// Errors met in `Drop`, which cannot return them: the first one per device index since that
/// device's last [`crate::Device::check_drop_errors`].
static DROP_ERRORS: Mutex<Vec<(i32, Error)>> = Mutex::new(Vec::new());

/// Records a failed status met while dropping a handle on device `device_index`; keeps the first.
pub(crate) fn record_drop_status(device_index: i32, status: c_int) {
    if let Err(error) = check(status) {
        let mut errors = DROP_ERRORS.lock().unwrap_or_else(|e| e.into_inner());
        if !errors.iter().any(|(index, _)| *index == device_index) {
            errors.push((device_index, error));
        }
    }
}

/// Takes the error recorded for device `device_index`, if any.
pub(crate) fn take_drop_error(device_index: i32) -> Option<Error> {
    let mut errors = DROP_ERRORS.lock().unwrap_or_else(|e| e.into_inner());
    let at = errors.iter().position(|(index, _)| *index == device_index)?;
    Some(errors.swap_remove(at).1)
}

/// A C string the library owns for the life of the process (or of the object it came from).
/// Runs `body`, catching a panic, and one in dropping its payload too (that second payload is
/// leaked): for callbacks from C, which no unwind may cross.
pub(crate) fn catch_all(body: impl FnOnce() + std::panic::UnwindSafe) {
    if let Err(payload) = std::panic::catch_unwind(body) {
        let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(payload)));
        if let Err(again) = dropped {
            std::mem::forget(again);
        }
    }
}

/// A path as a C string for the library; one with a NUL byte is an invalid-argument error.
pub(crate) fn c_path(path: &std::path::Path) -> Result<std::ffi::CString, Error> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        Error::new(ErrorCode::InvalidArgument, format!("{} contains a NUL byte", path.display()))
    })
}

pub(crate) fn c_str(ptr: *const std::os::raw::c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: the library returns NUL-terminated strings that outlive this call.
    unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// "JB_ERR_NO_DEVICE" -> "NoDevice", the spelling of the matching `ErrorCode` variant.
    fn variant_name(c_name: &str) -> String {
        let words = c_name.strip_prefix("JB_ERR_").unwrap_or_else(|| panic!("{c_name}"));
        words.split('_').map(|w| w[..1].to_string() + &w[1..].to_lowercase()).collect()
    }

    #[test]
    fn every_c_status_maps_to_its_code_and_back() {
        let mut named = 0;
        for status in -1..=1000 {
            // SAFETY: takes any int; returns a static string.
            let name = c_str(unsafe { ffi::jb_status_name(status) });
            if name == "JB_UNKNOWN_STATUS" || status == ffi::JB_OK {
                assert_eq!(ErrorCode::from_status(status), ErrorCode::Other(status));
                continue;
            }
            named += 1;
            let code = ErrorCode::from_status(status);
            assert_eq!(format!("{code:?}"), variant_name(&name), "status {status} ({name})");
            assert_eq!(code.status(), status, "{name}");
            assert_eq!(Error::new(code, "m").status(), status, "{name}");
        }
        assert_eq!(named, STATUSES.len(), "the C library names statuses the crate lacks");
    }
}
