//! Where the library's warnings go: stderr by default, or a closure of the caller's.

use crate::error::{Error, catch_all, check};
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

/// The trampoline's address, to know a user_data the library gives back as a `Callback` of ours.
fn ours(function: ffi::jb_log_fn) -> bool {
    let deliver: unsafe extern "C" fn(*mut c_void, c_int, *const c_char) = deliver;
    function.is_some_and(|f| f as usize == deliver as usize)
}

fn install(callback: Option<Callback>) -> Result<(), Error> {
    // As the event closure's (events.rs): no lock of ours across the exchange, and the closure
    // given back is dropped once nothing is locked.
    let fresh = callback.map(|c| Box::into_raw(Box::new(c)));
    let (function, user_data): (ffi::jb_log_fn, *mut c_void) = match fresh {
        Some(p) => (Some(deliver), p.cast()),
        None => (None, std::ptr::null_mut()),
    };
    let (mut old_function, mut old_data): (ffi::jb_log_fn, *mut c_void) =
        (None, std::ptr::null_mut());
    // SAFETY: user_data lives until an exchange gives it back below; the out pointers are ours.
    let status = unsafe {
        ffi::jb_exchange_log_callback(&mut old_function, &mut old_data, function, user_data)
    };
    if status != ffi::JB_OK {
        // SAFETY: refused, so never installed: still ours alone.
        drop(fresh.map(|p| unsafe { Box::from_raw(p) }));
        return check(status);
    }
    if ours(old_function) && !old_data.is_null() {
        // SAFETY: beside our trampoline the library holds only a leaked `Callback` of ours,
        // and the exchange returned once no call of it was in progress.
        drop(unsafe { Box::from_raw(old_data.cast::<Callback>()) });
    }
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
