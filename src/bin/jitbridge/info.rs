//! `jitbridge info`: what this build and this host have: backends, devices (with their idle
//! caps), the compiler and the disk cache (its folder, state and size).

use crate::args::{Command, no_positional, parse_args, print_help};
use crate::cache::readable_bytes;
use crate::{Failure, Outcome, VERSION};
use jitbridge::{Device, disk_cache, sys_tools};

pub const INFO: Command = Command {
    name: "info",
    usage: "jitbridge info",
    about: "print the backends, the devices, the compiler and the disk cache",
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
    let mib = |bytes: u64| bytes as f64 / (1u64 << 20) as f64;
    for device in Device::all()? {
        out!(
            "device {:<5} {:<7} {} ({}), {:.1} GiB, idle cap {:.1} MiB",
            device.index(),
            device.spec(),
            device.name(),
            device.arch(),
            device.total_memory() as f64 / (1u64 << 30) as f64,
            mib(device.idle_cap())
        );
    }
    // What is on disk, not this process's counters: a new process has built nothing yet.
    out!("disk cache   {}", disk_cache::dir());
    out!("cache state  {}", disk_cache::state());
    match disk_cache::stats() {
        Ok((entries, bytes)) => {
            let noun = if entries == 1 { "entry" } else { "entries" };
            out!("cache size   {entries} {noun}, {}", readable_bytes(bytes));
        }
        Err(e) => out!("cache size   unknown: {e}"),
    }
    if sys_tools::removed_locks() != 0 {
        out!("WARNING      test-only build without locks (mask {})", sys_tools::removed_locks());
    }
    Ok(())
}
