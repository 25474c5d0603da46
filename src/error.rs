//! Errors: the C status and message, copied into an owned value on the calling thread right
//! after the failing call.

use crate::ffi;
use std::ffi::CStr;
use std::fmt;
use std::os::raw::c_int;

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
    /// A status this version of the crate does not know.
    Other(i32),
}

impl ErrorCode {
    fn from_status(status: c_int) -> Self {
        match status {
            1 => Self::InvalidArgument,
            2 => Self::OutOfMemory,
            3 => Self::Unsupported,
            4 => Self::NoDevice,
            5 => Self::Compile,
            6 => Self::Load,
            7 => Self::Launch,
            8 => Self::Backend,
            9 => Self::System,
            10 => Self::Shape,
            other => Self::Other(other),
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
        let status = match code {
            ErrorCode::InvalidArgument => 1,
            ErrorCode::Shape => 10,
            ErrorCode::Other(s) => s,
            _ => -1,
        };
        Error { code, status, message: message.into() }
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

/// A C string the library owns for the life of the process (or of the object it came from).
pub(crate) fn c_str(ptr: *const std::os::raw::c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: the library returns NUL-terminated strings that outlive this call.
    unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned()
}
