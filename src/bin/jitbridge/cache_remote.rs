//! `jitbridge cache remote`: the remote tier as this process sees it (JITBRIDGE_REMOTE_CACHE and
//! JITBRIDGE_REMOTE_KEY_FILE), whether its store answers, and how fast.

use crate::{Failure, Outcome};
use jitbridge::disk_cache;

/// PINGs timed: the fastest is the round trip a lookup pays on top of the store's own work.
const PINGS: u32 = 5;

/// The tier's URL, mode, client and reachability, then this process's remote counters. No tier,
/// or a store that does not answer, is an error (exit status 2) after what could be shown.
pub fn show() -> Outcome {
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
