//! Where the library's warnings go: stderr by default, or a closure of the caller's.

use crate::error::{Error, ErrorCode, check};
use crate::ffi;
use std::cell::Cell;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

type Callback = Box<dyn Fn(&str) + Send + Sync + 'static>;

/// The installed closure, boxed twice so the C side holds a thin pointer; kept here until the
/// C side has let go of it.
static INSTALLED: Mutex<Option<Box<Callback>>> = Mutex::new(None);

thread_local! {
    /// Set while this thread runs the closure: replacing it from there would wait for itself.
    static IN_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

unsafe extern "C" fn deliver(user_data: *mut c_void, _level: c_int, message: *const c_char) {
    // SAFETY: user_data is the `Callback` installed with it, alive until a replacement returns,
    // and the replacement waits for this call; the message is a NUL-terminated string.
    let (callback, text) =
        unsafe { (&*(user_data as *const Callback), CStr::from_ptr(message).to_string_lossy()) };
    IN_CALLBACK.with(|c| c.set(true));
    // A panic must not unwind into C; the warning is then lost, as a failed print would be.
    let _ = catch_unwind(AssertUnwindSafe(|| callback(&text)));
    IN_CALLBACK.with(|c| c.set(false));
}

fn install(callback: Option<Callback>) -> Result<(), Error> {
    if IN_CALLBACK.with(Cell::get) {
        return Err(Error::new(
            ErrorCode::InvalidArgument,
            "the log callback cannot be replaced from inside the log callback",
        ));
    }
    let mut installed = INSTALLED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let boxed = callback.map(Box::new);
    let (function, user_data): (ffi::jb_log_fn, *mut c_void) = match &boxed {
        Some(b) => (Some(deliver), &**b as *const Callback as *mut c_void),
        None => (None, std::ptr::null_mut()),
    };
    // SAFETY: user_data stays alive in INSTALLED until the next successful replacement, which
    // returns only once no call is using it.
    check(unsafe { ffi::jb_set_log_callback(function, user_data) })?;
    *installed = boxed;
    Ok(())
}

/// Sends every warning the library gives (the disk cache turned off, a cache folder refused) to
/// `callback` instead of stderr, replacing any earlier one. The callback may run on any thread,
/// on several at once. Once this returns, the previous callback is no longer running and has
/// been dropped. From inside the callback this fails, and warnings it causes go to stderr.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let sink = seen.clone();
/// jitbridge::set_log_callback(move |warning| sink.lock().unwrap().push(warning.to_string()))?;
/// jitbridge::clear_log_callback()?;
/// # Ok::<(), jitbridge::Error>(())
/// ```
pub fn set_log_callback<F>(callback: F) -> Result<(), Error>
where
    F: Fn(&str) + Send + Sync + 'static,
{
    install(Some(Box::new(callback)))
}

/// Sends warnings to stderr again (the default), dropping the callback once it has returned.
pub fn clear_log_callback() -> Result<(), Error> {
    install(None)
}
