//! Installing a Rust closure as one of the library's callbacks (the log and the event callback
//! share cbridge/src/base/callback.c's protocol): the closure is boxed and leaked into the library,
//! and the one the exchange gives back is taken back and dropped.

use crate::error::{Error, check};
use std::os::raw::{c_int, c_void};

/// Installs `closure` (None: no callback) through `exchange`, whose arguments are the C
/// function's: where to put the old function and user data, the new function and user data.
/// `trampoline` is our C-callable function that turns user data back into a `C`; `is_ours`
/// tells whether a function the library gives back is it. No lock of ours is held across the
/// exchange, which waits for calls in progress (a child forked then would find it held for
/// ever), and the closure given back is dropped once nothing is locked (its drop may install).
///
/// # Safety
/// `exchange` must be the library's exchange function for callbacks whose user data
/// `trampoline` reads as a `C`, and no other code may install a `trampoline` with user data
/// that is not a leaked `Box<C>`.
pub(crate) unsafe fn exchange_leaked<C, F: Copy>(
    closure: Option<C>,
    trampoline: F,
    is_ours: impl Fn(F) -> bool,
    exchange: impl FnOnce(*mut Option<F>, *mut *mut c_void, Option<F>, *mut c_void) -> c_int,
) -> Result<(), Error> {
    let fresh = closure.map(|c| Box::into_raw(Box::new(c)));
    let (function, user_data) = match fresh {
        Some(p) => (Some(trampoline), p.cast::<c_void>()),
        None => (None, std::ptr::null_mut()),
    };
    let (mut old_function, mut old_data): (Option<F>, *mut c_void) = (None, std::ptr::null_mut());
    let status = exchange(&mut old_function, &mut old_data, function, user_data);
    if status != crate::ffi::JB_OK {
        // SAFETY: refused, so never installed: still ours alone.
        drop(fresh.map(|p| unsafe { Box::from_raw(p) }));
        return check(status);
    }
    if old_function.is_some_and(&is_ours) && !old_data.is_null() {
        // SAFETY: beside our trampoline the library holds only a leaked `C` of ours (the
        // caller's promise), and the exchange returned once no call of it was in progress.
        drop(unsafe { Box::from_raw(old_data.cast::<C>()) });
    }
    Ok(())
}
