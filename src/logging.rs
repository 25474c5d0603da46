//! Where the library's warnings go: stderr by default, or a closure of the caller's.

use crate::callback::exchange_leaked;
use crate::error::{Error, catch_all};
use crate::ffi;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::panic::AssertUnwindSafe;

type Callback = Box<dyn Fn(&str) + Send + Sync + 'static>;

unsafe extern "C" fn deliver(user_data: *mut c_void, _level: c_int, message: *const c_char) {
    // A panic must not unwind into C: the warning is then lost, as a failed print would be.
    catch_all(AssertUnwindSafe(|| {
        // SAFETY: user_data is a `Callback` installed with this function, alive until the
        // exchange that replaces it returns, which waits for this call; the message is a
        // NUL-terminated string.
        let (callback, text) = unsafe {
            (&*(user_data as *const Callback), CStr::from_ptr(message).to_string_lossy())
        };
        callback(&text)
    }));
}

fn install(callback: Option<Callback>) -> Result<(), Error> {
    let trampoline: unsafe extern "C" fn(*mut c_void, c_int, *const c_char) = deliver;
    let is_ours = |f: unsafe extern "C" fn(*mut c_void, c_int, *const c_char)| {
        f as usize == trampoline as usize
    };
    // SAFETY: the out pointers are the helper's; the user data lives until an exchange gives
    // it back.
    let exchange =
        |old_f, old_d, f, d| unsafe { ffi::jb_exchange_log_callback(old_f, old_d, f, d) };
    // SAFETY: `deliver` reads its user data as a `Callback`, and only this function installs it.
    unsafe { exchange_leaked(callback, trampoline, is_ours, exchange) }
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
