//! The disk cache of compiled code: a new process loads what an earlier one compiled.
//!
//! Folder: `$JITBRIDGE_CACHE_DIR` (a relative one is made absolute against the directory the
//! process started in), else `$XDG_CACHE_HOME/jitbridge` (an absolute one only), else
//! `~/.cache/jitbridge`, created 0700 at the first compile; `JITBRIDGE_DISK_CACHE` set to `0`,
//! `false`, `no` or `off` (any case) turns it off. The folder is opened once and every entry is
//! read through that handle, each checked first: a regular file, ours, not writable by others,
//! one link, at most 64 MiB. A folder owned by another user or writable by group or others, or
//! under a parent that its group (ours too) or others may write (without the sticky bit) or
//! another user owns, is refused, and a read-only disk stops new entries (a full one pauses them:
//! 30 s, doubling to 10 min while it stays full), each with one warning; kernels still run. A transient failure (out of descriptors or memory, a network
//! disk's I/O error) evicts nothing and turns nothing off for good: setting up is tried again at
//! a later build.
//!
//! The library removes only what it made, and only in a folder marked as its own with
//! `CACHEDIR.TAG` (a folder it creates, or finds empty or holding only its own kinds of files,
//! it marks). Any other folder (`$HOME`, `.`) is shared: entries are stored and served there,
//! but nothing is swept or removed, and [`prune`] and [`check`] with `fix` refuse it.
//!
//! The functions here never create the folder (but [`import`]), and they apply the same trust
//! rules: on a folder the library refuses they fail with a message that names it and the fix.
//!
//! Keys are made of content only (the library ABI, the backend, the device's architecture, the
//! compiler's version and a hash of its program file, the module and the source), never of a
//! path: a cache folder copied elsewhere, or the same compiler by another name, still hits.
//!
//! A bundle holds many entries in one file: [`export`] writes one, [`import`] copies one into
//! the cache folder, and [`add_bundle`] (or `JITBRIDGE_CACHE_BUNDLE=FILE[:FILE...]`) uses one in
//! place as a read-only tier behind the cache folder. Bundles are trusted as the folder is (ours
//! or root's, writable by no one else, under folders no one else may change), and every entry
//! is checked (SHA-256) before it is loaded; a bad one is skipped with one warning.
//!
//! A remote tier ([`set_remote`], or `JITBRIDGE_REMOTE_CACHE` and `JITBRIDGE_REMOTE_KEY_FILE`)
//! shares compiled code between hosts through a Redis server, below bundles: every value is
//! signed with the fleet's key and verified before it is loaded, and the hosts compile each
//! kernel once (a fleet lease in the store). See the README's remote tier section.

use crate::error::{Error, c_path, c_str, check as check_status};
use crate::ffi;
use std::ffi::{c_char, c_void};
use std::path::Path;

pub use crate::counters::{PrewarmBuildProgress, PrewarmBuildResult, PrewarmResult};
pub use crate::coverage::{Coverage, CoverageSource, CoveredKernel, coverage};

/// The folder ("" when none could be chosen).
pub fn dir() -> String {
    let mut ptr = std::ptr::null();
    // SAFETY: valid out pointer; the string lives for the process.
    match check_status(unsafe { ffi::jb_disk_cache_dir(&mut ptr) }) {
        Ok(()) => c_str(ptr),
        Err(_) => String::new(),
    }
}

/// "on"; "on, shared: `<why>`" (a folder not marked as the cache's own: nothing is removed);
/// "on, read-only: `<why>`" (entries served, none stored); "on, read-only until `<time>`:
/// `<why>`" (a full disk: storing is tried again then); "off for now: `<why>`" (a transient
/// failure while setting up, tried again at a later build); "off: `<why>`" (for the life of the
/// process) or "off (JITBRIDGE_DISK_CACHE=...)". Before the first compile: what would happen
/// (nothing is created).
pub fn state() -> String {
    // SAFETY: returns a library-owned string, copied at once.
    c_str(unsafe { ffi::jb_disk_cache_state() })
}

/// Entries and their total bytes.
pub fn stats() -> Result<(u64, u64), Error> {
    let (mut entries, mut bytes) = (0, 0);
    // SAFETY: valid out pointers.
    check_status(unsafe { ffi::jb_disk_cache_stats(&mut entries, &mut bytes) })?;
    Ok((entries, bytes))
}

/// Removes whatever is not an entry at an entry's name (a FIFO, a directory), then entries,
/// oldest first, until at most `max_bytes` remain; returns how many went. `prune(0)` clears.
/// A folder that does not exist yet is an empty cache; a shared folder is an error.
pub fn prune(max_bytes: u64) -> Result<u64, Error> {
    let mut removed = 0;
    // SAFETY: valid out pointer.
    check_status(unsafe { ffi::jb_disk_cache_prune(max_bytes, &mut removed) })?;
    Ok(removed)
}

/// Reads every entry: (good, bad), as [`check`] without a report.
pub fn verify() -> Result<(u64, u64), Error> {
    let (mut valid, mut invalid) = (0, 0);
    // SAFETY: valid out pointers.
    check_status(unsafe { ffi::jb_disk_cache_verify(&mut valid, &mut invalid) })?;
    Ok((valid, invalid))
}

/// One entry the library would refuse or reject, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The entry's file name in the folder.
    pub entry: String,
    /// What is wrong: "is a FIFO", "has more than one link", "is malformed (...)", ...
    pub problem: String,
}

/// What [`check`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Entries the library would load.
    pub valid: u64,
    /// Entries it would refuse (type, owner, mode, links, size) or reject (contents).
    pub invalid: u64,
    /// Each bad entry, named.
    pub problems: Vec<Problem>,
}

extern "C" fn collect_problem(
    user_data: *mut c_void,
    entry: *const c_char,
    problem: *const c_char,
) {
    // SAFETY: user_data is the Vec passed to jb_disk_cache_check below, used only during it.
    let problems = unsafe { &mut *user_data.cast::<Vec<Problem>>() };
    problems.push(Problem { entry: c_str(entry), problem: c_str(problem) });
}

/// Checks every entry as the library would before loading it (type, owner, mode, links, size),
/// then its contents (magic, version, lengths, checksum), naming each bad one; `fix` removes
/// them. A removal that fails is an error.
pub fn check(fix: bool) -> Result<CheckReport, Error> {
    let mut report = CheckReport::default();
    let problems: *mut Vec<Problem> = &mut report.problems;
    // SAFETY: valid out pointers; the callback only pushes onto `problems`, alive for the call.
    check_status(unsafe {
        ffi::jb_disk_cache_check(
            &mut report.valid,
            &mut report.invalid,
            i32::from(fix),
            Some(collect_problem),
            problems.cast(),
        )
    })?;
    Ok(report)
}

/// Writes the cache folder's entries (or only those `manifest` names) into a new bundle at
/// `path`, which replaces what was there once it is whole (until then the file is unnamed, so an
/// export that fails or is killed while it writes leaves nothing behind; one killed just before
/// it replaces a bundle leaves a temporary that the next export into the folder removes:
/// `jb_disk_cache_export` in jitbridge.h says which, and where a named temporary is used
/// instead). Returns (entries written, entries skipped:
/// bad, of another key format, or named by the manifest but not in the cache).
pub fn export(path: &Path, manifest: Option<&Path>) -> Result<(u64, u64), Error> {
    let path = c_path(path)?;
    let manifest = manifest.map(c_path).transpose()?;
    let (mut exported, mut skipped) = (0, 0);
    let manifest_ptr = manifest.as_ref().map_or(std::ptr::null(), |m| m.as_ptr());
    // SAFETY: valid out pointers and NUL-terminated strings (or NULL) that outlive the call.
    check_status(unsafe {
        ffi::jb_disk_cache_export(&mut exported, &mut skipped, path.as_ptr(), manifest_ptr)
    })?;
    Ok((exported, skipped))
}

/// [`export`], and the bundle also carries each exported entry's source record (what rebuilds
/// it, from the cache folder's `sources/`), each held to the rules of a kernel made through the
/// API first (one that fails is left out, its entry is not). Returns (entries written, entries
/// skipped, records carried). Every reader opens such a bundle; older ones pass the records by.
pub fn export_with_sources(path: &Path, manifest: Option<&Path>) -> Result<(u64, u64, u64), Error> {
    let path = c_path(path)?;
    let manifest = manifest.map(c_path).transpose()?;
    let (mut exported, mut skipped, mut records) = (0, 0, 0);
    let manifest_ptr = manifest.as_ref().map_or(std::ptr::null(), |m| m.as_ptr());
    // SAFETY: valid out pointers and NUL-terminated strings (or NULL) that outlive the call.
    check_status(unsafe {
        ffi::jb_disk_cache_export_sources(
            &mut exported,
            &mut skipped,
            &mut records,
            path.as_ptr(),
            manifest_ptr,
        )
    })?;
    Ok((exported, skipped, records))
}

/// What an import of a bundle did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BundleImport {
    /// Entries stored in the cache folder.
    pub imported: u64,
    /// Bad entries left out, each with a warning.
    pub skipped: u64,
    /// Source records the bundle carried, checked and put into the cache folder's `sources/`.
    pub records: u64,
    /// Source records refused (another hash, too large, a name or option the API refuses,
    /// another kernel's) or not put into `sources/` (a full disk, `sources/` not a folder of
    /// the library's own), each with a warning; their entries are imported all the same.
    pub refused: u64,
}

/// Checks every entry of the bundle at `path` and stores the good ones in the cache folder
/// (created if needed), with the source records it carries, each checked (at most 4 MiB, its
/// hash, the API's rules, of its entry's very key; never run) before it is put into `sources/`.
/// Returns (entries imported, bad entries skipped); [`import_with_sources`] also counts records.
pub fn import(path: &Path) -> Result<(u64, u64), Error> {
    let report = import_with_sources(path)?;
    Ok((report.imported, report.skipped))
}

/// [`import`], saying how many source records were put into `sources/` and how many refused.
pub fn import_with_sources(path: &Path) -> Result<BundleImport, Error> {
    let path = c_path(path)?;
    let mut r = BundleImport::default();
    // SAFETY: valid out pointers and a NUL-terminated path that outlives the call.
    check_status(unsafe {
        ffi::jb_disk_cache_import_sources(
            &mut r.imported,
            &mut r.skipped,
            &mut r.records,
            &mut r.refused,
            path.as_ptr(),
        )
    })?;
    Ok(r)
}

/// Uses the bundle at `path` in place as a read-only tier behind the cache folder, for the rest
/// of the process. An error when the bundle is refused (untrusted, malformed, of another key
/// format) or 64 are in use already.
pub fn add_bundle(path: &Path) -> Result<(), Error> {
    let path = c_path(path)?;
    // SAFETY: a NUL-terminated path that outlives the call.
    check_status(unsafe { ffi::jb_disk_cache_add_bundle(path.as_ptr()) })
}

/// Loads every kernel of the manifest or bundle at `path` that `device` can use into the
/// module cache, compiling nothing, so that the first launch of each finds its module in
/// memory. A manifest's kernels come from the cache folder, else from the bundles in use; a
/// bundle given here is trusted and checked as those are (and not kept as a tier). With a
/// manifest written, each line prewarm writes names the kernel's source record where one
/// passes the API's rules and is of its key (the given manifest's, or the given bundle's, put
/// into the cache folder's `sources/`).
pub fn prewarm(device: crate::Device, path: &Path) -> Result<PrewarmResult, Error> {
    let path = c_path(path)?;
    let mut result = PrewarmResult::default();
    // SAFETY: a valid out pointer laid out as jb_prewarm_result, a device handle (devices live
    // for the process) and a NUL-terminated path that outlives the call.
    check_status(unsafe { ffi::jb_prewarm(&mut result, device.raw(), path.as_ptr()) })?;
    Ok(result)
}

/// The first argument that makes a program a compile farm worker ([`build_worker_main`]).
pub const BUILD_WORKER_ARG: &str = "__build-worker";
/// The most worker processes [`prewarm_build`] runs at once.
pub const MAX_BUILD_JOBS: usize = 1024;

/// The number of processors this process may run on (`sched_getaffinity`), at least 1.
pub fn usable_processors() -> usize {
    // SAFETY: no arguments; reads the calling thread's affinity only.
    unsafe { ffi::jb_usable_processors() as usize }
}

/// The compile farm: builds every kernel of the manifest or bundle at `path` that `device` lacks
/// (in neither the module cache nor the cache folder) from its source record, in up to `jobs`
/// worker processes at once (`None`: [`usable_processors`]), each storing into the cache
/// folder under the host's leases; then loads the manifest's kernels as [`prewarm`] does, so
/// that this process compiles nothing for what the workers built. A worker is the program at
/// `worker` (`None`: `$JITBRIDGE_BUILD_WORKER`), started with `posix_spawn` and
/// [`BUILD_WORKER_ARG`] (the `jitbridge` command is one; another program's `main` calls
/// [`build_worker_main`]). A kernel a worker did not build (failed, crashed, hung past the
/// compile timeout, killed) compiles at its first use here, nothing else. `InvalidArgument` for
/// `jobs` out of 1 to [`MAX_BUILD_JOBS`] or a worker that is not an absolute path;
/// `Unsupported` in a setuid or setgid program, or with the cache folder off; `Sealed` in a
/// process sealed to refuse compiles; `System` when the manifest or bundle cannot be read or no
/// worker can start. Blocks until the workers are done.
pub fn prewarm_build(
    device: crate::Device,
    path: &Path,
    jobs: Option<usize>,
    worker: Option<&Path>,
) -> Result<PrewarmBuildResult, Error> {
    let (path, jobs, worker) = build_arguments(path, jobs, worker)?;
    let mut result = PrewarmBuildResult::default();
    // SAFETY: a valid out pointer laid out as jb_prewarm_build_result, a device handle (devices
    // live for the process), NUL-terminated strings (or NULL) that outlive the call.
    check_status(unsafe {
        ffi::jb_prewarm_build(
            &mut result,
            device.raw(),
            path.as_ptr(),
            jobs,
            worker.as_ref().map_or(std::ptr::null(), |w| w.as_ptr()),
        )
    })?;
    Ok(result)
}

/// The farm's arguments as C takes them: the path, the jobs count (`None`: the usable
/// processors; out of range stays out of range, never wraps into it) and the worker.
fn build_arguments(
    path: &Path,
    jobs: Option<usize>,
    worker: Option<&Path>,
) -> Result<(std::ffi::CString, u32, Option<std::ffi::CString>), Error> {
    let path = c_path(path)?;
    let worker = worker.map(c_path).transpose()?;
    let jobs = u32::try_from(jobs.unwrap_or_else(usable_processors)).unwrap_or(u32::MAX);
    Ok((path, jobs, worker))
}

/// [`prewarm_build`] in the background: the same refusals come back at once, then the build
/// runs on a thread of its own (every signal blocked there) while this process serves. A launch
/// that misses a kernel a worker is building waits for that worker's lease and loads what it
/// stored: the kernel is compiled once. End it with [`PrewarmBuild::wait`] or
/// [`PrewarmBuild::detach`]; dropping it waits.
pub fn prewarm_build_start(
    device: crate::Device,
    path: &Path,
    jobs: Option<usize>,
    worker: Option<&Path>,
) -> Result<PrewarmBuild, Error> {
    let (path, jobs, worker) = build_arguments(path, jobs, worker)?;
    let mut job = std::ptr::null_mut();
    // SAFETY: a valid out pointer, a device handle (devices live for the process), NUL-terminated
    // strings (or NULL) that the C function copies before it returns.
    check_status(unsafe {
        ffi::jb_prewarm_build_start(
            &mut job,
            device.raw(),
            path.as_ptr(),
            jobs,
            worker.as_ref().map_or(std::ptr::null(), |w| w.as_ptr()),
        )
    })?;
    let job = std::ptr::NonNull::new(job).ok_or_else(|| {
        Error::new(crate::ErrorCode::System, "jb_prewarm_build_start gave no job")
    })?;
    Ok(PrewarmBuild { job })
}

/// A build under way ([`prewarm_build_start`]): its counters, then its result. Dropped, it waits.
#[derive(Debug)]
pub struct PrewarmBuild {
    job: std::ptr::NonNull<ffi::jb_prewarm_build_job>,
}

// SAFETY: the C job may be polled, waited for or detached from any thread; its counters are
// atomics, and wait/detach take the handle by value, so no two of them meet.
unsafe impl Send for PrewarmBuild {}
// SAFETY: `progress` only reads the job's atomic counters.
unsafe impl Sync for PrewarmBuild {}

impl PrewarmBuild {
    /// The counters now: kernels given to workers, built, failed, pending, and whether it is over.
    pub fn progress(&self) -> PrewarmBuildProgress {
        let mut out = PrewarmBuildProgress::default();
        // SAFETY: a live job (not yet waited for or detached: those consume self) and a valid
        // out pointer laid out as jb_prewarm_build_progress; the call cannot fail with both.
        unsafe { ffi::jb_prewarm_build_poll(self.job.as_ptr(), &mut out) };
        out
    }

    /// Waits for the build and the load after it: what [`prewarm_build`] would have returned.
    pub fn wait(self) -> Result<PrewarmBuildResult, Error> {
        let job = std::mem::ManuallyDrop::new(self).job;
        let mut result = PrewarmBuildResult::default();
        // SAFETY: a live job, waited for once (self is consumed, its drop skipped), which frees
        // it; a valid out pointer laid out as jb_prewarm_build_result.
        check_status(unsafe { ffi::jb_prewarm_build_wait(job.as_ptr(), &mut result) })?;
        Ok(result)
    }

    /// Lets the build go on without a waiter: it frees itself when it is over.
    pub fn detach(self) {
        let job = std::mem::ManuallyDrop::new(self).job;
        // SAFETY: a live job, ended once (self is consumed, its drop skipped).
        unsafe { ffi::jb_prewarm_build_detach(job.as_ptr()) };
    }
}

impl Drop for PrewarmBuild {
    fn drop(&mut self) {
        // SAFETY: a live job, waited for once here (wait and detach skip this drop); NULL out.
        unsafe { ffi::jb_prewarm_build_wait(self.job.as_ptr(), std::ptr::null_mut()) };
    }
}

/// A compile farm worker's whole `main`, for a program started by [`prewarm_build`]: `args` is
/// its whole argument list (the program, [`BUILD_WORKER_ARG`], the device, then the kernels).
/// Reports each kernel on stdout; returns the exit status (2 for arguments it cannot use).
pub fn build_worker_main(args: &[String]) -> i32 {
    let Ok(owned) =
        args.iter().map(|a| std::ffi::CString::new(a.as_str())).collect::<Result<Vec<_>, _>>()
    else {
        return 2; // an argument with a NUL is none the farm wrote
    };
    let Ok(argc) = i32::try_from(owned.len()) else {
        return 2;
    };
    let mut argv: Vec<*mut c_char> = owned.iter().map(|a| a.as_ptr().cast_mut()).collect();
    argv.push(std::ptr::null_mut());
    // SAFETY: argc NUL-terminated strings that outlive the call, then a NULL; the C function
    // only reads them.
    unsafe { ffi::jb_prewarm_build_worker_main(argc, argv.as_mut_ptr()) }
}

/// Reads and checks every source record the manifest at `path` names (what rebuilds each
/// kernel, kept in the cache folder's `sources/`), compiling and loading nothing: each must hash
/// to its name, be at most 4 MiB, pass the rules of a kernel made through the API, be of its
/// line's kernel, and make the line's key again where this host has a device of the line's
/// backend and architecture. Returns (lines whose record passed, lines whose key was made again
/// here from their record). `InvalidArgument` names the first bad record and what is wrong (nothing on disk is
/// changed); `Unsupported` when the cache folder is off.
pub fn check_sources(path: &Path) -> Result<(u64, u64), Error> {
    let path = c_path(path)?;
    let (mut checked, mut keyed) = (0, 0);
    // SAFETY: valid out pointers and a NUL-terminated path that outlives the call.
    check_status(unsafe {
        ffi::jb_manifest_sources_check(&mut checked, &mut keyed, path.as_ptr())
    })?;
    Ok((checked, keyed))
}

/// Sets the remote tier: `url` is `redis://HOST:PORT[/DB]` or `unix:///PATH` (an absolute
/// socket path), either followed by `?mode=read-only` (values are loaded, none written, no
/// lease taken) or `?mode=read-write` (the default). `key_file` holds the fleet's key: a regular
/// file of 32 to 4096 bytes owned by this user, neither readable nor writable by group or
/// others (`chmod 600`), read now. Nothing connects until a build needs the tier; builds under
/// way keep the tier they started with.
///
/// Errors, with the tier left as it was: `InvalidArgument` for a malformed URL, credentials in
/// it, a NUL byte in either argument, or a key file refused (the message says why); `System`
/// when the key file cannot be opened; `Unsupported` when the Redis client (hiredis) cannot be
/// loaded. A path that is not UTF-8 is used as its bytes, as the system takes it.
pub fn set_remote(url: &str, key_file: &Path) -> Result<(), Error> {
    if url.is_empty() {
        return Err(Error::new(
            crate::ErrorCode::InvalidArgument,
            "set_remote: the URL is empty (clear_remote turns the tier off)",
        ));
    }
    let url = std::ffi::CString::new(url).map_err(|_| {
        Error::new(
            crate::ErrorCode::InvalidArgument,
            format!("set_remote: the URL {url:?} contains a NUL byte"),
        )
    })?;
    let key_file = c_path(key_file)?;
    // SAFETY: two NUL-terminated strings that outlive the call; the library copies what it keeps.
    check_status(unsafe { ffi::jb_remote_cache_set(url.as_ptr(), key_file.as_ptr()) })
}

/// Turns the remote tier off (whether set by [`set_remote`] or by the variables), for the rest
/// of the process or until the next [`set_remote`]; builds under way keep the tier they started
/// with.
pub fn clear_remote() {
    // SAFETY: NULL turns the tier off; it cannot fail.
    let status = unsafe { ffi::jb_remote_cache_set(std::ptr::null(), std::ptr::null()) };
    debug_assert_eq!(status, ffi::JB_OK);
}

/// What [`check_remote`] found of the remote tier.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteCheck {
    /// A tier is set (by the variables or [`set_remote`]).
    pub configured: bool,
    /// `?mode=read-only`: values are loaded, none written.
    pub read_only: bool,
    /// The Redis client (hiredis) was loaded.
    pub client_loaded: bool,
    /// Every PING was answered.
    pub reachable: bool,
    /// PINGs answered.
    pub pings: u64,
    /// The fastest PING's round trip in milliseconds (the connect excluded).
    pub round_trip_ms: f64,
    /// The connect before the first PING, in milliseconds.
    pub connect_ms: f64,
    /// The URL with its password and option values masked ("" when none was given).
    pub url: String,
    /// Why the tier is not set or not reachable ("" when it is both).
    pub why: String,
}

/// Looks at the remote tier without building anything: the tier in force (read from the
/// variables first, as a build would), whether the client loads, and `pings` PINGs (1 to 100)
/// through the library's own client. A failed PING neither trips the breaker nor counts.
pub fn check_remote(pings: u32) -> Result<RemoteCheck, Error> {
    let pings = i32::try_from(pings).unwrap_or(i32::MAX);
    // SAFETY: jb_remote_check is plain data; all zeros is a valid value.
    let mut raw: ffi::jb_remote_check = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out pointer laid out as jb_remote_check.
    check_status(unsafe { ffi::jb_remote_cache_check(&mut raw, pings) })?;
    Ok(RemoteCheck {
        configured: raw.configured != 0,
        read_only: raw.read_only != 0,
        client_loaded: raw.client_loaded != 0,
        reachable: raw.reachable != 0,
        pings: raw.pings,
        round_trip_ms: raw.round_trip_ms,
        connect_ms: raw.connect_ms,
        url: c_str(raw.url.as_ptr()),
        why: c_str(raw.why.as_ptr()),
    })
}

/// What [`export_remote`] or [`import_remote`] did, entry by entry.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RemoteTransfer {
    /// Written: to the store (export), into the cache folder (import).
    pub stored: u64,
    /// Export: too large for a remote value; import: in the cache folder already.
    pub skipped: u64,
    /// Export: bad entries of the folder or bundle; import: values that failed their checks.
    pub rejected: u64,
    /// Import: named by the manifest but not in the store.
    pub missing: u64,
}

impl From<ffi::jb_remote_transfer> for RemoteTransfer {
    fn from(t: ffi::jb_remote_transfer) -> Self {
        RemoteTransfer {
            stored: t.stored,
            skipped: t.skipped,
            rejected: t.rejected,
            missing: t.missing,
        }
    }
}

/// Seeds the remote tier with every good entry of the bundle at `bundle`, or of the cache folder
/// when `None`, each signed and written as a compile's store writes it. `stored`: written;
/// `skipped`: too large for a remote value; `rejected`: bad entries of the source. An error
/// when no tier is set, the tier is read-only (nothing is written), the source is refused, or
/// the store fails partway.
pub fn export_remote(bundle: Option<&Path>) -> Result<RemoteTransfer, Error> {
    let bundle = bundle.map(c_path).transpose()?;
    let mut out = ffi::jb_remote_transfer::default();
    let bundle_ptr = bundle.as_ref().map_or(std::ptr::null(), |b| b.as_ptr());
    // SAFETY: a valid out pointer and a NUL-terminated path (or NULL) that outlives the call.
    check_status(unsafe { ffi::jb_remote_cache_export(&mut out, bundle_ptr) })?;
    Ok(out.into())
}

/// Fills the cache folder (created if needed) from the remote tier with the kernels the
/// manifest at `manifest` names, each value checked as a build's remote load checks it.
/// `stored`: written into the folder; `skipped`: there already; `rejected`: values that failed
/// their checks; `missing`: not in the store. An error when no tier is set, the manifest or
/// folder cannot be used, or the store fails partway.
pub fn import_remote(manifest: &Path) -> Result<RemoteTransfer, Error> {
    let manifest = c_path(manifest)?;
    let mut out = ffi::jb_remote_transfer::default();
    // SAFETY: a valid out pointer and a NUL-terminated path that outlives the call.
    check_status(unsafe { ffi::jb_remote_cache_import(&mut out, manifest.as_ptr()) })?;
    Ok(out.into())
}
