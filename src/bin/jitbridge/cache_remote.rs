//! `jitbridge cache remote`: the remote tier as this process sees it (JITBRIDGE_REMOTE_CACHE and
//! JITBRIDGE_REMOTE_KEY_FILE), whether its store answers, and how fast; `export` and `import`
//! move entries between it and a bundle or the cache folder.

use crate::{Failure, Outcome};
use jitbridge::disk_cache;
use std::path::Path;

/// `cache remote`, `cache remote export [BUNDLE]`, `cache remote import MANIFEST`.
pub fn remote(rest: &[&str]) -> Outcome {
    let usage = |message: String| Failure::Usage(message, &crate::cache::CACHE);
    match rest {
        [] => show(),
        ["export"] | ["export", _] => {
            let bundle = rest.get(1).map(Path::new);
            let t = disk_cache::export_remote(bundle)?;
            let from = bundle.map_or(disk_cache::dir(), |b| b.display().to_string());
            out!("stored   {} entries from {from} in the remote tier", t.stored);
            out!("skipped  {} (too large for a remote value)", t.skipped);
            out!("rejected {} (bad entries, not sent)", t.rejected);
            Ok(t.rejected == 0)
        }
        ["import", manifest] => {
            let t = disk_cache::import_remote(Path::new(manifest))?;
            out!("stored   {} entries from the remote tier in {}", t.stored, disk_cache::dir());
            out!("skipped  {} (in the cache folder already)", t.skipped);
            out!("missing  {} (not in the remote tier)", t.missing);
            out!("rejected {} (values that failed their checks, not loaded)", t.rejected);
            Ok(t.rejected == 0)
        }
        ["import"] => Err(usage("cache remote import needs a MANIFEST".into())),
        [action, ..] if !matches!(*action, "export" | "import") => Err(usage(format!(
            "unknown cache remote action '{action}' (export [BUNDLE] or import MANIFEST)"
        ))),
        [action, _, extra, ..] => {
            Err(usage(format!("unexpected argument '{extra}' after `cache remote {action}`")))
        }
        _ => Err(usage("cache remote: export [BUNDLE] or import MANIFEST".into())),
    }
}

/// PINGs timed: the fastest is the round trip a lookup pays on top of the store's own work.
const PINGS: u32 = 5;

/// The tier's URL, mode, client and reachability, then this process's remote counters. No tier,
/// or a store that does not answer, is an error (exit status 2) after what could be shown.
fn show() -> Outcome {
    let check = disk_cache::check_remote(PINGS)?;
    if !check.configured {
        if !check.url.is_empty() {
            out!("url        {}", check.url);
        }
        return Err(Failure::Error(format!("no remote tier: {}", check.why)));
    }
    out!("url        {}", check.url);
    out!("mode       {}", if check.read_only { "read-only" } else { "read-write" });
    out!("client     {}", if check.client_loaded { "hiredis loaded" } else { "not loaded" });
    if check.reachable {
        out!(
            "reachable  yes: {} PINGs, fastest round trip {:.3} ms (connect {:.3} ms)",
            check.pings,
            check.round_trip_ms,
            check.connect_ms
        );
    } else {
        out!("reachable  no: {}", check.why);
    }
    let c = jitbridge::Counters::read();
    out!(
        "counters   remote_hits {} remote_misses {} remote_rejected {} remote_stores {} \
         remote_breaker_trips {} remote_lease_waits {} remote_lease_timeouts {}",
        c.remote_hits,
        c.remote_misses,
        c.remote_rejected,
        c.remote_stores,
        c.remote_breaker_trips,
        c.remote_lease_waits,
        c.remote_lease_timeouts
    );
    if !check.reachable {
        return Err(Failure::Error(format!(
            "the remote cache {} is unreachable: {}",
            check.url, check.why
        )));
    }
    Ok(true)
}
