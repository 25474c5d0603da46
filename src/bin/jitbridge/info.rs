//! `jitbridge info`: what this build and this host have: backends, devices, the compiler, the
//! disk cache, the counters and device memory.

use crate::args::{Command, no_positional, parse_args, print_help};
use crate::{Failure, Outcome, VERSION};
use jitbridge::{Counters, Device, sys_tools};

pub const INFO: Command = Command {
    name: "info",
    usage: "jitbridge info",
    about: "print the backend, the devices, the compiler, the disk cache and the counters",
    details: "",
};

pub fn info_command(args: &[String]) -> Outcome {
    let Some(args) = parse_args(&INFO, args, &[])? else {
        print_help(&INFO);
        return Ok(true);
    };
    no_positional(&INFO, &args)?;
    info()?;
    Ok(true)
}

pub fn info() -> Result<(), Failure> {
    out!("jitbridge {VERSION}");
    out!("gpu backend  {}", jitbridge::gpu_backend());
    out!("cpu compiler {}", jitbridge::cpu_compiler());
    for backend in jitbridge::gpu_backends() {
        out!("{:<12} {}", backend.name, backend.state());
    }
    for device in Device::all()? {
        out!(
            "device {:<5} {:<7} {} ({}), {:.1} GiB",
            device.index(),
            device.spec(),
            device.name(),
            device.arch(),
            device.total_memory() as f64 / (1u64 << 30) as f64
        );
    }
    out!("disk cache   {} ({})", jitbridge::disk_cache::dir(), jitbridge::disk_cache::state());
    let c = Counters::read();
    out!(
        "counters     builds {} failures {} hits {} misses {} configures {} build time {:.1} ms",
        c.builds,
        c.build_failures,
        c.hits,
        c.misses,
        c.configures,
        c.build_ns as f64 / 1e6
    );
    let mib = |bytes: u64| bytes as f64 / (1u64 << 20) as f64;
    let caps: Vec<String> = Device::all()?
        .iter()
        .map(|d| format!("{} {:.1} MiB", d.index(), mib(d.idle_cap())))
        .collect();
    out!(
        "memory       live {:.1} MiB (peak {:.1}) reserved {:.1} idle {:.1} (cap per device {}) \
         allocations {} frees {} reuses {} retries {}",
        mib(c.mem_live_bytes),
        mib(c.mem_peak_live_bytes),
        mib(c.mem_reserved_bytes),
        mib(c.mem_idle_bytes),
        caps.join(", "),
        c.mem_allocations,
        c.mem_frees,
        c.mem_reuses,
        c.mem_retries
    );
    for device in Device::all()? {
        let s = device.memory_stats();
        out!(
            "  on {:<9} live {:.1} MiB (peak {:.1}) reserved {:.1} idle {:.1} \
             allocations {} frees {} reuses {} retries {}",
            device.spec(),
            mib(s.live_bytes),
            mib(s.peak_live_bytes),
            mib(s.reserved_bytes),
            mib(s.idle_bytes),
            s.allocations,
            s.frees,
            s.reuses,
            s.retries
        );
    }
    if sys_tools::removed_locks() != 0 {
        out!("WARNING      test-only build without locks (mask {})", sys_tools::removed_locks());
    }
    Ok(())
}
