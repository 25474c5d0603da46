//! The command's arguments: each subcommand's help text and options, parsed and checked one way.

use crate::Failure;
use jitbridge::Device;

/// A command's help: its usage line, what it does in a line, and the details.
pub struct Command {
    pub name: &'static str,
    pub usage: &'static str,
    pub about: &'static str,
    pub details: &'static str,
}

pub fn print_help(c: &Command) {
    out!("usage: {}", c.usage);
    out!();
    out!("{}", c.about);
    if !c.details.is_empty() {
        out!();
        out!("{}", c.details);
    }
}

/// An option a command takes: its flag, and for one that takes a value, what the value is.
pub struct Opt {
    pub flag: &'static str,
    pub value: Option<&'static str>,
}

pub const DEVICE_OPT: Opt =
    Opt { flag: "--device", value: Some("a device: cpu, gpu, cuda or rocm, with an optional :N") };

/// A command's arguments, checked against its options. `None` when help was asked for.
pub struct Args {
    options: Vec<(&'static str, String)>,
    pub positional: Vec<String>,
}

impl Args {
    pub fn get(&self, flag: &str) -> Option<&str> {
        self.options.iter().rev().find(|(f, _)| *f == flag).map(|(_, v)| v.as_str())
    }
    pub fn has(&self, flag: &str) -> bool {
        self.options.iter().any(|(f, _)| *f == flag)
    }
}

pub fn parse_args(
    c: &'static Command,
    args: &[String],
    opts: &[Opt],
) -> Result<Option<Args>, Failure> {
    let usage = |message: String| Failure::Usage(message, c);
    let mut parsed = Args { options: Vec::new(), positional: Vec::new() };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--help" || arg == "-h" {
            return Ok(None);
        }
        if !arg.starts_with('-') || arg == "-" {
            parsed.positional.push(arg.clone());
            continue;
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag, Some(value.to_string())),
            None => (arg.as_str(), None),
        };
        let opt = opts
            .iter()
            .find(|o| o.flag == flag)
            .ok_or_else(|| usage(format!("unknown option '{flag}' for `jitbridge {}`", c.name)))?;
        let value = match (opt.value, inline) {
            (None, None) => String::new(),
            (None, Some(_)) => return Err(usage(format!("{flag} takes no value"))),
            (Some(_), Some(value)) => value,
            (Some(what), None) => {
                it.next().cloned().ok_or_else(|| usage(format!("{flag} needs a value: {what}")))?
            }
        };
        parsed.options.push((opt.flag, value));
    }
    Ok(Some(parsed))
}

pub fn no_positional(c: &'static Command, args: &Args) -> Result<(), Failure> {
    match args.positional.first() {
        None => Ok(()),
        Some(extra) => Err(Failure::Usage(format!("unexpected argument '{extra}'"), c)),
    }
}

/// A whole number from 1 to `max` for `flag`.
pub fn parse_count(flag: &str, text: &str, max: u64) -> Result<usize, String> {
    let range = format!("{flag} takes a whole number from 1 to {max}");
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{range}, not '{text}'"));
    }
    match text.parse::<u64>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n as usize),
        _ => Err(format!("{range}; {text} is out of range")),
    }
}

/// `cpu`, `gpu`, `cuda`, `rocm`, each with an optional `:N` (see `Device::lookup`).
pub fn parse_device(spec: &str) -> Result<Device, Failure> {
    Ok(Device::lookup(spec)?)
}

pub fn device_or_default(spec: Option<&str>) -> Result<Device, Failure> {
    match spec {
        Some(spec) => parse_device(spec),
        None => Ok(Device::default_device()?),
    }
}

/// The arguments as text; one that is not UTF-8 (no option, device or size is) is a usage error,
/// never a panic.
pub fn text_args() -> Result<Vec<String>, Failure> {
    std::env::args_os()
        .skip(1)
        .map(|arg| {
            arg.into_string().map_err(|arg| {
                Failure::Usage(format!("argument {arg:?} is not valid UTF-8"), &crate::help::MAIN)
            })
        })
        .collect()
}
