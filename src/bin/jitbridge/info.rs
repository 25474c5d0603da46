//! `jitbridge info`: what this build and this host have: backends, devices (with their idle
//! caps), the compiler, the disk cache (its folder, state and size) and the seal mode; with
//! `--json`, the same as one object of docs/JSON.md's schema, with every counter by its name.

use crate::args::{Command, Opt, no_positional, parse_args, print_help};
use crate::cache::readable_bytes;
use crate::json::{Object, json_list};
use crate::rows::SCHEMA;
use crate::{Failure, Outcome, VERSION};
use jitbridge::{Counters, Device, SealMode, disk_cache, sys_tools};

pub const INFO: Command = Command {
    name: "info",
    usage: "jitbridge info [--json]",
    about: "print the backends, the devices, the compiler, the disk cache and the seal mode",
    details: "  --json        one JSON object (docs/JSON.md): the same facts, and this process's
                counters by their names (`Counters::fields`: a server reads its own the
                same way; in a new process they are all 0)",
};

pub fn info_command(args: &[String]) -> Outcome {
    let Some(args) = parse_args(&INFO, args, &[Opt { flag: "--json", value: None }])? else {
        print_help(&INFO);
        return Ok(true);
    };
    no_positional(&INFO, &args)?;
    if args.has("--json") {
        info_json()?;
    } else {
        info()?;
    }
    Ok(true)
}

fn seal_name(mode: SealMode) -> &'static str {
    match mode {
        SealMode::Off => "off",
        SealMode::Warn => "warn",
        SealMode::Error => "error",
    }
}

fn info_json() -> Result<(), Failure> {
    let backends: Vec<String> = jitbridge::gpu_backends()
        .iter()
        .map(|b| Object::new().text("name", b.name).text("state", &b.state()).build())
        .collect();
    let mut devices = Vec::new();
    for d in Device::all()? {
        devices.push(
            Object::new()
                .count("index", d.index() as u64)
                .text("spec", &d.spec())
                .text("name", &d.name())
                .text("arch", &d.arch())
                .count("memory_bytes", d.total_memory())
                .count("idle_cap_bytes", d.idle_cap())
                .build(),
        );
    }
    let mut cache =
        Object::new().text("dir", &disk_cache::dir()).text("state", &disk_cache::state());
    if let Ok((entries, bytes)) = disk_cache::stats() {
        cache = cache.count("entries", entries).count("bytes", bytes);
    }
    let counters = Counters::read()
        .fields()
        .iter()
        .fold(Object::new(), |object, (name, value)| object.count(name, *value));
    out!(
        "{}",
        Object::new()
            .count("schema", u64::from(SCHEMA))
            .text("command", "info")
            .text("jitbridge", VERSION)
            .text("gpu_backend", &jitbridge::gpu_backend())
            .text("cpu_compiler", &jitbridge::cpu_compiler())
            .raw("backends", json_list(backends))
            .raw("devices", json_list(devices))
            .raw("disk_cache", cache.build())
            .text("seal", seal_name(jitbridge::seal_mode()))
            .count("removed_locks", sys_tools::removed_locks() as u64)
            .raw("counters", counters.build())
            .build()
    );
    Ok(())
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
    out!("sealed       {}", seal_name(jitbridge::seal_mode()));
    if sys_tools::removed_locks() != 0 {
        out!("WARNING      test-only build without locks (mask {})", sys_tools::removed_locks());
    }
    Ok(())
}
