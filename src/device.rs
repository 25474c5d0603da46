//! Devices: process-global, never freed, so a [`Device`] is a plain copyable reference.

use crate::counters::MemoryStats;
use crate::error::{Error, ErrorCode, c_str, check, take_drop_error};
use crate::ffi;
use std::ffi::CString;
use std::fmt;
use std::str::FromStr;

/// Whether a device is the host CPU or a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// The cpu backend: kernels compiled by the system C compiler.
    Cpu,
    /// A GPU of a GPU backend this crate was built with (features `cuda`, `rocm`).
    Gpu,
}

impl DeviceKind {
    fn raw(self) -> i32 {
        match self {
            DeviceKind::Cpu => ffi::JB_DEVICE_CPU,
            DeviceKind::Gpu => ffi::JB_DEVICE_GPU,
        }
    }
}

/// A compute device. Cheap to copy: devices live as long as the process.
///
/// ```
/// let cpu = jitbridge::Device::cpu()?;
/// assert_eq!(cpu.backend(), "cpu");
/// # Ok::<(), jitbridge::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Device {
    raw: *mut ffi::jb_device,
}

// SAFETY: the C device table is filled once and never changes or moves; every function that
// takes a device may be called from any thread (jitbridge.h).
unsafe impl Send for Device {}
// SAFETY: as above; a Device has no interior state on the Rust side.
unsafe impl Sync for Device {}

impl Device {
    /// The `ordinal`-th device of `kind`.
    pub fn get(kind: DeviceKind, ordinal: i32) -> Result<Device, Error> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out pointer.
        check(unsafe { ffi::jb_device_get(&mut raw, kind.raw(), ordinal) })?;
        Ok(Device { raw })
    }

    /// The cpu device.
    pub fn cpu() -> Result<Device, Error> {
        Device::get(DeviceKind::Cpu, 0)
    }

    /// GPU `ordinal` of the first GPU backend that has devices (cuda, then rocm). Without one,
    /// [`ErrorCode::NoDevice`] says what was not found and which variable to set; in a build
    /// without a GPU backend, [`ErrorCode::Unsupported`] names the feature that adds one.
    pub fn gpu(ordinal: i32) -> Result<Device, Error> {
        Device::get(DeviceKind::Gpu, ordinal)
    }

    /// The device called `name`: `cpu`, `gpu`, `cuda` or `rocm`, each with an optional `:N`
    /// (`gpu:N` is GPU N of the first GPU backend that has devices). Also `name.parse()`.
    /// A backend this build lacks (`gpu`: every GPU backend) is [`ErrorCode::Unsupported`], a
    /// device the backend does not have [`ErrorCode::NoDevice`], a malformed name
    /// [`ErrorCode::InvalidArgument`].
    ///
    /// ```
    /// let cpu = jitbridge::Device::lookup("cpu:0")?;
    /// assert_eq!(cpu.spec(), "cpu:0");
    /// assert!(jitbridge::Device::lookup("tpu:0").is_err());
    /// # Ok::<(), jitbridge::Error>(())
    /// ```
    pub fn lookup(name: &str) -> Result<Device, Error> {
        let name_c = CString::new(name).map_err(|_| {
            Error::new(ErrorCode::InvalidArgument, format!("device name {name:?} contains NUL"))
        })?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out pointer and `name_c` a NUL-terminated string.
        check(unsafe { ffi::jb_device_lookup(&mut raw, name_c.as_ptr()) })?;
        Ok(Device { raw })
    }

    /// GPU 0 of the first GPU backend that has devices, else the cpu.
    pub fn default_device() -> Result<Device, Error> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out pointer.
        check(unsafe { ffi::jb_device_default(&mut raw) })?;
        Ok(Device { raw })
    }

    /// How many devices of `kind` there are.
    pub fn count(kind: DeviceKind) -> Result<usize, Error> {
        let mut n = 0;
        // SAFETY: `n` is a valid out pointer.
        check(unsafe { ffi::jb_device_count(&mut n, kind.raw()) })?;
        Ok(n as usize)
    }

    /// Every device: the GPUs of each GPU backend (cuda, then rocm), then the cpu.
    pub fn all() -> Result<Vec<Device>, Error> {
        let mut devices = Vec::new();
        for backend in gpu_backends() {
            for ordinal in 0..backend.devices.unwrap_or(0) {
                devices.push(Device::lookup(&format!("{}:{ordinal}", backend.name))?);
            }
        }
        devices.push(Device::cpu()?);
        Ok(devices)
    }

    /// The process-wide index that prefixes this device's module cache keys.
    pub fn index(&self) -> i32 {
        // SAFETY: `raw` came from the library and is valid for the process.
        unsafe { ffi::jb_device_index(self.raw) }
    }

    /// The device's number among its backend's devices: the N of `cuda:N`.
    pub fn ordinal(&self) -> i32 {
        // SAFETY: as in `index`.
        unsafe { ffi::jb_device_ordinal(self.raw) }
    }

    /// The device's name for [`Device::lookup`]: `cpu:0`, `cuda:1`, `rocm:0`.
    pub fn spec(&self) -> String {
        format!("{}:{}", self.backend(), self.ordinal())
    }

    /// CPU or GPU.
    pub fn kind(&self) -> DeviceKind {
        // SAFETY: as in `index`.
        match unsafe { ffi::jb_device_get_kind(self.raw) } {
            ffi::JB_DEVICE_GPU => DeviceKind::Gpu,
            _ => DeviceKind::Cpu,
        }
    }

    /// The device's name (the CPU model, or the GPU's marketing name).
    pub fn name(&self) -> String {
        // SAFETY: as in `index`.
        c_str(unsafe { ffi::jb_device_name(self.raw) })
    }

    /// The compile target: `sm_XY`, a gcnArchName, or the CPU's machine and OS.
    pub fn arch(&self) -> String {
        // SAFETY: as in `index`.
        c_str(unsafe { ffi::jb_device_arch(self.raw) })
    }

    /// "cpu", "cuda" or "rocm".
    pub fn backend(&self) -> String {
        // SAFETY: as in `index`.
        c_str(unsafe { ffi::jb_device_backend_name(self.raw) })
    }

    /// The most urgent stream priority the device offers ([`Stream::with_priority`](crate::Stream::with_priority));
    /// 0 when it has none above normal.
    pub fn max_stream_priority(&self) -> i32 {
        // SAFETY: as in `index`.
        unsafe { ffi::jb_device_max_stream_priority(self.raw) }
    }

    /// Device memory in bytes (0 where unknown).
    pub fn total_memory(&self) -> u64 {
        // SAFETY: as in `index`.
        unsafe { ffi::jb_device_total_memory(self.raw) }
    }

    /// Frees every idle buffer of the device (memory of freed arrays, kept for reuse) and
    /// returns the bytes given back to the driver. Buffers that queued work still uses are not
    /// idle until that work is done and its stream let go of them
    /// ([`Stream::synchronize`](crate::Stream::synchronize) does). Also destroys the device's
    /// spare events (those streams and the pool keep for later launches) but a few.
    pub fn trim(&self) -> Result<u64, Error> {
        let mut freed = 0;
        // SAFETY: `freed` is a valid out pointer; `raw` is valid for the process.
        check(unsafe { ffi::jb_device_trim(&mut freed, self.raw) })?;
        Ok(freed)
    }

    /// Sets how many idle bytes the device keeps for reuse at most; idle buffers past it (the
    /// oldest first) are freed at once. The default is 1/16 of the device's memory, or
    /// `JITBRIDGE_IDLE_CAP` (bytes, optionally with K, M, G or T: "512M", "2GiB").
    pub fn set_idle_cap(&self, bytes: u64) -> Result<(), Error> {
        // SAFETY: as in `index`.
        check(unsafe { ffi::jb_device_set_idle_cap(self.raw, bytes) })
    }

    /// The device's idle cap in bytes.
    pub fn idle_cap(&self) -> u64 {
        // SAFETY: as in `index`.
        unsafe { ffi::jb_device_idle_cap(self.raw) }
    }

    /// This device's memory statistics, all read at one instant under the device's lock:
    /// unlike the `mem_` fields of [`Counters`](crate::Counters), which sum every device's,
    /// they move only with this device's buffers. Safe from any thread.
    pub fn memory_stats(&self) -> MemoryStats {
        let mut stats = MemoryStats::default();
        // SAFETY: `stats` is a valid out pointer of the size passed, laid out as
        // jb_memory_stats; `raw` is valid for the process.
        let status = unsafe {
            ffi::jb_device_memory_stats(&mut stats, std::mem::size_of::<MemoryStats>(), self.raw)
        };
        debug_assert_eq!(
            status,
            ffi::JB_OK,
            "the C library's jb_memory_stats is smaller than ours"
        );
        stats
    }

    /// The first error a handle on this device met while being dropped, since the last call:
    /// `Drop` cannot return it, so it is kept here (cudarc's way) and taken by this call.
    ///
    /// A dropped [`Stream`](crate::Stream) waits for its work, which can fail on a faulted GPU;
    /// a dropped [`DefaultStreamGuard`](crate::DefaultStreamGuard) uninstalls its stream. Arrays
    /// and kernels have nothing to report: their frees wait for nothing and cannot fail.
    pub fn check_drop_errors(&self) -> Result<(), Error> {
        take_drop_error(self.index()).map_or(Ok(()), Err)
    }

    pub(crate) fn raw(&self) -> *mut ffi::jb_device {
        self.raw
    }

    pub(crate) fn from_raw(raw: *mut ffi::jb_device) -> Device {
        Device { raw }
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("index", &self.index())
            .field("backend", &self.backend())
            .field("name", &self.name())
            .finish()
    }
}

impl FromStr for Device {
    type Err = Error;

    fn from_str(name: &str) -> Result<Device, Error> {
        Device::lookup(name)
    }
}

/// The GPU backends this crate was built with, in device order: "cuda", "rocm", "cuda,rocm"
/// or "none".
pub fn gpu_backend() -> String {
    // SAFETY: returns a static string.
    c_str(unsafe { ffi::jb_gpu_backend_name() })
}

/// A GPU backend and what it found on this machine.
#[derive(Debug, Clone)]
pub struct GpuBackend {
    /// "cuda" or "rocm".
    pub name: &'static str,
    /// Whether this crate was built with it (feature of the same name).
    pub built: bool,
    /// Its device count, or why it has none: what library was not found and which variable
    /// to set, what the driver said, or that the backend was not built.
    pub devices: Result<usize, Error>,
}

impl GpuBackend {
    /// One line for people: "2 device(s)", or why there are none ("libcuda.so.1 not found (is
    /// the NVIDIA driver installed?)", "no device: hipInit failed: ...", "not built ...").
    pub fn state(&self) -> String {
        match &self.devices {
            Ok(n) => format!("{n} device(s)"),
            Err(_) if !self.built => format!("not built (cargo feature '{}')", self.name),
            // The library's reason reads "no device cuda:0: cuda: <why>"; keep the why.
            Err(e) => {
                let marker = format!("{}: ", self.name);
                let msg = e.message();
                msg.rfind(&marker).map_or(msg, |at| &msg[at + marker.len()..]).to_string()
            }
        }
    }
}

/// Every GPU backend jitbridge knows, built or not, with its state (for `jitbridge info`).
pub fn gpu_backends() -> Vec<GpuBackend> {
    ["cuda", "rocm"]
        .into_iter()
        .map(|name| {
            let mut n = 0;
            let name_c = CString::new(name).expect("no NUL");
            // SAFETY: `n` is a valid out pointer and `name_c` a NUL-terminated string.
            let devices = check(unsafe { ffi::jb_backend_device_count(&mut n, name_c.as_ptr()) })
                .map(|()| n as usize);
            let built = !matches!(&devices, Err(e) if e.code() == ErrorCode::Unsupported);
            GpuBackend { name, built, devices }
        })
        .collect()
}

/// The command the cpu backend compiles kernels with (`$CC`, else `cc`). It runs with an
/// environment the library chooses: `PATH`, `HOME`, `LANG`, `LANGUAGE`, `LC_*` and the names
/// `JITBRIDGE_COMPILER_ENV` lists, with `TMPDIR` set to the library's private folder (in a setuid
/// host, `$CC` is ignored and the compiler gets `PATH=/usr/bin:/bin` and `TMPDIR` only).
pub fn cpu_compiler() -> String {
    // SAFETY: returns a string the library owns for the process.
    c_str(unsafe { ffi::jb_cpu_compiler() })
}
