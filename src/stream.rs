//! Streams and the thread-local default stream of each device.

use crate::device::Device;
use crate::error::{Error, check, record_drop_status};
use crate::ffi;
use std::marker::PhantomData;

/// An ordered queue of asynchronous work on one device. Owned: freed (after its work is done)
/// when dropped, unless some thread still has it installed as its default (a leaked guard): that
/// installation holds a reference of its own and keeps it alive until the thread exits. Never
/// `Clone`, since two owners would free it twice. A wait that fails in the drop is kept for
/// [`Device::check_drop_errors`].
pub struct Stream {
    raw: *mut ffi::jb_stream,
}

// SAFETY: a C stream may be used from any thread (jitbridge.h); the Rust handle only owns it.
unsafe impl Send for Stream {}
// SAFETY: synchronize and launches on one stream may come from several threads at once.
unsafe impl Sync for Stream {}

impl Stream {
    /// A new stream on `device`.
    pub fn new(device: Device) -> Result<Stream, Error> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out pointer and `device` a library device.
        check(unsafe { ffi::jb_stream_new(&mut raw, device.raw()) })?;
        Ok(Stream { raw })
    }

    /// The calling thread's default stream for `device` (the installed one, else the thread's
    /// own), as a `Stream` of its own: send it to helper threads, which may launch on it (or
    /// install it) after this thread has exited. Like any `Stream`, dropping it waits for the
    /// stream's work; the last reference destroys it.
    ///
    /// ```
    /// use jitbridge::{Array, DType, Device, Stream, streams};
    /// let cpu = Device::cpu()?;
    /// let handed = std::thread::spawn(move || Stream::thread_default(cpu)).join().unwrap()?;
    /// // The thread that made it has exited; its stream lives on for this one.
    /// let _guard = streams::install_thread_local_default_stream(&handed)?;
    /// let x = Array::arange(cpu, 3, DType::F32)?;
    /// assert_eq!(x.to_vec::<f32>()?, [0.0, 1.0, 2.0]);
    /// # Ok::<(), jitbridge::Error>(())
    /// ```
    pub fn thread_default(device: Device) -> Result<Stream, Error> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out pointer; the retain gives us a reference of our own.
        check(unsafe { ffi::jb_thread_local_default_stream_retain(&mut raw, device.raw()) })?;
        Ok(Stream { raw })
    }

    /// A new stream on `device` with `priority`: 0 is normal (what [`Stream::new`] makes),
    /// higher is more urgent, up to [`Device::max_stream_priority`]; a priority outside that
    /// range is clamped into it. Where several streams' work waits to run, the device runs the
    /// more urgent stream's first: give a decode stream a priority above its workers'. On a GPU
    /// these are the driver's stream priorities; on the cpu, the stream's worker thread runs at
    /// a nice value 5 below its creator's per level, where the system permits it (where it does
    /// not, the stream gets the most urgent level it may, and [`Stream::priority`] says which).
    ///
    /// ```
    /// use jitbridge::{Device, Stream};
    /// let cpu = Device::cpu()?;
    /// let decode = Stream::with_priority(cpu, cpu.max_stream_priority())?;
    /// assert!(decode.priority()? <= cpu.max_stream_priority());
    /// assert_eq!(Stream::with_priority(cpu, -3)?.priority()?, 0); // clamped
    /// # Ok::<(), jitbridge::Error>(())
    /// ```
    pub fn with_priority(device: Device, priority: i32) -> Result<Stream, Error> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out pointer and `device` a library device; any priority is
        // clamped by the library.
        check(unsafe { ffi::jb_stream_new_with_priority(&mut raw, device.raw(), priority) })?;
        Ok(Stream { raw })
    }

    /// The stream's priority, as the driver (on the cpu: the system) reports it.
    pub fn priority(&self) -> Result<i32, Error> {
        let mut priority = 0;
        // SAFETY: `raw` is a live stream and `priority` a valid out pointer.
        check(unsafe { ffi::jb_stream_priority(&mut priority, self.raw) })?;
        Ok(priority)
    }

    /// Blocks until every piece of work queued on the stream has finished.
    pub fn synchronize(&self) -> Result<(), Error> {
        // SAFETY: `raw` is a live stream.
        check(unsafe { ffi::jb_stream_synchronize(self.raw) })
    }

    /// The stream's device.
    pub fn device(&self) -> Device {
        // SAFETY: `raw` is a live stream.
        Device::from_raw(unsafe { ffi::jb_stream_device(self.raw) })
    }

    pub(crate) fn raw(&self) -> *mut ffi::jb_stream {
        self.raw
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // jb_stream_free waits too but returns nothing: wait here to keep the status.
        // SAFETY: we own the stream; a guard borrowing it has been dropped (or forgotten: the
        // installation it leaked holds its own reference in C) before us.
        let status = unsafe { ffi::jb_stream_synchronize(self.raw) };
        record_drop_status(self.device().index(), status);
        // SAFETY: as above.
        unsafe { ffi::jb_stream_free(self.raw) }
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").field("device", &self.device().index()).finish()
    }
}

/// Uninstalls its stream when dropped, which restores the default from before the install.
/// Tied to the installing thread (not `Send`) and to the installed stream's lifetime. Guards may
/// be dropped in any order: each removes only its own installation. An uninstall that fails is
/// kept for [`Device::check_drop_errors`]. A guard that is never dropped (`mem::forget`) leaks
/// the installation's reference: the stream stays this thread's default, alive, until the thread
/// exits.
#[must_use = "dropping the guard at once uninstalls the stream"]
pub struct DefaultStreamGuard<'a> {
    stream: &'a Stream,
    _not_send: PhantomData<*const ()>,
}

impl Drop for DefaultStreamGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: same thread as the install (the guard is !Send) and the stream is borrowed,
        // so it is still alive and still installed here.
        let status = unsafe { ffi::jb_uninstall_thread_local_default_stream(self.stream.raw) };
        record_drop_status(self.stream.device().index(), status);
    }
}

/// Creating and installing per-thread streams, the way a generation thread does.
pub mod streams {
    use super::*;

    /// A new stream for the calling thread's generation work on `device`.
    pub fn new_thread_local_generation_stream(device: Device) -> Result<Stream, Error> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out pointer.
        check(unsafe { ffi::jb_new_thread_local_generation_stream(&mut raw, device.raw()) })?;
        Ok(Stream { raw })
    }

    /// Makes `stream` this thread's default stream for its device until the guard is dropped.
    /// Installs nest; the latest one still installed is the default.
    ///
    /// ```
    /// use jitbridge::{Array, DType, Device, streams};
    /// let cpu = Device::cpu()?;
    /// let stream = streams::new_thread_local_generation_stream(cpu)?;
    /// let _guard = streams::install_thread_local_default_stream(&stream)?;
    /// let x = Array::arange(cpu, 4, DType::F32)?; // queued on `stream`
    /// assert_eq!(x.to_vec::<f32>()?, [0.0, 1.0, 2.0, 3.0]);
    /// # Ok::<(), jitbridge::Error>(())
    /// ```
    pub fn install_thread_local_default_stream(
        stream: &Stream,
    ) -> Result<DefaultStreamGuard<'_>, Error> {
        // SAFETY: a live stream; the guard keeps it borrowed until it is uninstalled.
        check(unsafe { ffi::jb_install_thread_local_default_stream(stream.raw) })?;
        Ok(DefaultStreamGuard { stream, _not_send: PhantomData })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    #[test]
    fn an_error_met_in_drop_is_kept_for_its_device() {
        let cpu = Device::cpu().unwrap();
        let stream = streams::new_thread_local_generation_stream(cpu).unwrap();
        let guard = streams::install_thread_local_default_stream(&stream).unwrap();
        // Uninstall behind the guard's back, so that its own uninstall fails.
        // SAFETY: a live stream installed on this thread.
        assert_eq!(unsafe { ffi::jb_uninstall_thread_local_default_stream(stream.raw) }, 0);
        drop(guard);
        let err = cpu.check_drop_errors().unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
        assert!(err.message().contains("not installed"), "{err}");
        cpu.check_drop_errors().expect("taken by the first check");
        drop(stream);
        cpu.check_drop_errors().expect("a stream whose work succeeded drops cleanly");
    }
}
