//! Seeing compiles: a closure called for each event of the module cache's slow path (a disk
//! hit, a build starting, ending or failing, a store, a rejected or evicted entry, a seal
//! violation), and the thread tag those events carry. A module found in memory is never an
//! event.

use crate::callback::exchange_leaked;
use crate::device::Device;
use crate::error::{Error, ErrorCode, c_str, catch_all, check};
use crate::ffi;
use std::ffi::CString;
use std::os::raw::c_void;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

/// What happened on the slow path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CacheEventKind {
    /// Loaded from the cache folder: no compiler ran.
    DiskHit,
    /// Loaded from a bundle: no compiler ran.
    BundleHit,
    /// The compiler starts.
    BuildStart,
    /// Compiled and loaded.
    BuildEnd,
    /// The compile or the load failed.
    BuildFail,
    /// Compiled code was written to the cache folder.
    DiskStore,
    /// An entry found for the module failed its checks and was not loaded.
    EntryRejected,
    /// An entry that passed its checks was refused by the loader for good: not used and not
    /// removed; the compile that follows replaces it. A refusal for now (the loader's EMFILE or
    /// ENOMEM) is a warning and a miss, no event.
    EntryEvicted,
    /// A sealed process met a module that would compile (see [`crate::seal`]).
    SealViolation,
    /// Loaded from the remote tier: no compiler ran.
    RemoteHit,
    /// A remote entry failed its checks (MAC, checksum, lengths, key, size) or was refused by
    /// the loader: not loaded.
    RemoteRejected,
    /// Compiled code was written to the remote tier.
    RemoteStore,
    /// A compile farm worker reported the kernel built and stored (on the farm's thread).
    FarmBuilt,
    /// A compile farm worker failed the kernel, or was lost on it; the message says why.
    FarmFailed,
    /// A kind this version of the crate does not know.
    Other(i32),
}

/// The C numbers of the kinds, in one place on this side.
const KINDS: [(i32, CacheEventKind); 14] = [
    (1, CacheEventKind::DiskHit),
    (2, CacheEventKind::BundleHit),
    (3, CacheEventKind::BuildStart),
    (4, CacheEventKind::BuildEnd),
    (5, CacheEventKind::BuildFail),
    (6, CacheEventKind::DiskStore),
    (7, CacheEventKind::EntryRejected),
    (8, CacheEventKind::EntryEvicted),
    (9, CacheEventKind::SealViolation),
    (10, CacheEventKind::RemoteHit),
    (11, CacheEventKind::RemoteRejected),
    (12, CacheEventKind::RemoteStore),
    (13, CacheEventKind::FarmBuilt),
    (14, CacheEventKind::FarmFailed),
];

impl CacheEventKind {
    fn from_raw(kind: i32) -> Self {
        KINDS.iter().find(|(k, _)| *k == kind).map_or(Self::Other(kind), |&(_, kind)| kind)
    }

    /// "disk hit", "build start", ...: the C library's name of the kind.
    pub fn name(self) -> String {
        let raw = match self {
            Self::Other(raw) => raw,
            kind => KINDS.iter().find(|(_, k)| *k == kind).map_or(0, |&(raw, _)| raw),
        };
        // SAFETY: takes any int; returns a static string or NULL (c_str gives "").
        c_str(unsafe { ffi::jb_cache_event_kind_name(raw) })
    }
}

/// One event of the slow path, copied out of the C event.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CacheEvent {
    /// What happened.
    pub kind: CacheEventKind,
    /// The module's name: a custom kernel's name and source hash, a source module's name.
    pub name: String,
    /// The module cache's key, `"<device index>:<name>"`.
    pub key: String,
    /// The hash of everything that makes the code (the cache folder's entry name); empty for
    /// modules that skip the disk cache, or while it is off.
    pub content_key: String,
    /// The device the module is for.
    pub device: Option<Device>,
    /// The id of the thread it happened on (Linux: `gettid()`).
    pub thread_id: u64,
    /// That thread's tag when it happened ([`set_thread_tag`]).
    pub tag: String,
    /// When it happened (CLOCK_MONOTONIC, nanoseconds): delivery may come later.
    pub time_ns: u64,
    /// How long it took, for a disk hit, a build's end or failure, and a store.
    pub duration: Option<Duration>,
    /// The failure's code, for a failed build, an evicted entry or a refused compile.
    pub status: Option<ErrorCode>,
    /// Why: a failure's message (a compiler log too), a rejection's reason, a seal violation;
    /// for [`CacheEventKind::BuildEnd`], the compiler's warnings (at most 4 KiB), empty when none.
    pub message: String,
}

impl CacheEvent {
    /// # Safety
    /// `raw` points at a valid event whose strings are valid for this call.
    unsafe fn from_raw(raw: &ffi::jb_cache_event) -> CacheEvent {
        CacheEvent {
            kind: CacheEventKind::from_raw(raw.kind),
            name: c_str(raw.name),
            key: c_str(raw.key),
            content_key: c_str(raw.content_key),
            device: (!raw.device.is_null()).then(|| Device::from_raw(raw.device)),
            thread_id: raw.thread_id,
            tag: c_str(raw.tag),
            time_ns: raw.time_ns,
            duration: (raw.duration_ns > 0).then(|| Duration::from_nanos(raw.duration_ns)),
            status: (raw.status != ffi::JB_OK).then(|| ErrorCode::from_status(raw.status)),
            message: c_str(raw.message),
        }
    }
}

type Callback = Box<dyn Fn(&CacheEvent) + Send + Sync + 'static>;

unsafe extern "C" fn deliver(user_data: *mut c_void, raw: *const ffi::jb_cache_event) {
    // A panic must not unwind into C: the event is then lost to the closure, nothing else.
    catch_all(AssertUnwindSafe(|| {
        // SAFETY: user_data is a `Callback` installed with this function, alive until the
        // exchange that replaces it returns, which waits for this call; the event and its
        // strings are valid during the call.
        let (callback, event) =
            unsafe { (&*(user_data as *const Callback), CacheEvent::from_raw(&*raw)) };
        callback(&event)
    }));
}

fn install(callback: Option<Callback>) -> Result<(), Error> {
    let trampoline: unsafe extern "C" fn(*mut c_void, *const ffi::jb_cache_event) = deliver;
    let is_ours = |f: unsafe extern "C" fn(*mut c_void, *const ffi::jb_cache_event)| {
        f as usize == trampoline as usize
    };
    // SAFETY: the out pointers are the helper's; the user data lives until an exchange gives
    // it back.
    let exchange =
        |old_f, old_d, f, d| unsafe { ffi::jb_exchange_event_callback(old_f, old_d, f, d) };
    // SAFETY: `deliver` reads its user data as a `Callback`, and only this function installs it.
    unsafe { exchange_leaked(callback, trampoline, is_ours, exchange) }
}

/// Calls `callback` for each event of the module cache's slow path, replacing any earlier one.
/// It runs on the thread the event happened on, on several threads at once, and never under a
/// library lock: it may launch kernels (whose own events it does not see: that would recurse),
/// seal, fork, or wait for threads that do. A build's events arrive once the build has let go
/// of the cache's lock, in order, each with the time it happened. Once this returns, the
/// previous callback is no longer running and has been dropped; from inside the callback this
/// fails. A panic inside is caught (that event is lost to it).
///
/// ```
/// use std::sync::{Arc, Mutex};
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let sink = seen.clone();
/// jitbridge::set_event_callback(move |e| {
///     sink.lock().unwrap().push(format!("{} {} [{}]", e.kind.name(), e.name, e.tag))
/// })?;
/// jitbridge::clear_event_callback()?;
/// # Ok::<(), jitbridge::Error>(())
/// ```
pub fn set_event_callback<F>(callback: F) -> Result<(), Error>
where
    F: Fn(&CacheEvent) + Send + Sync + 'static,
{
    install(Some(Box::new(callback)))
}

/// Stops the events, dropping the callback once it has returned.
pub fn clear_event_callback() -> Result<(), Error> {
    install(None)
}

/// The longest thread tag, in bytes.
pub const THREAD_TAG_MAX: usize = 255;

/// Sets the calling thread's tag, carried by the events it causes (`"request 1234"`); an
/// empty tag clears it. At most [`THREAD_TAG_MAX`] bytes and no NUL, else an error and the tag
/// is unchanged. Cheap enough to set per request: no allocation in the library, no lock.
pub fn set_thread_tag(tag: &str) -> Result<(), Error> {
    let tag = CString::new(tag).map_err(|_| {
        Error::new(ErrorCode::InvalidArgument, format!("thread tag {tag:?} contains NUL"))
    })?;
    // SAFETY: a NUL-terminated string, copied by the call.
    check(unsafe { ffi::jb_set_thread_tag(tag.as_ptr()) })
}

/// The calling thread's tag; empty when none.
pub fn thread_tag() -> String {
    // SAFETY: the tag is a NUL-terminated string of this thread's, copied at once.
    c_str(unsafe { ffi::jb_thread_tag() })
}
