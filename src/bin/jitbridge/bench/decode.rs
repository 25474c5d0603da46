//! Section 7 of the bench: the soak's decode step alone and while other workers first-launch
//! new kernels (a short soak, without the fork), its p99's rise judged against the raw
//! control's in the same run.

use super::Context;
use crate::rows::{Row, Unit};
use crate::soak::{self, DecodeMode, Workers};

pub fn decode_under_load(
    context: &mut Context<'_>,
    rows: &mut Vec<Row>,
) -> Result<(), jitbridge::Error> {
    let seconds = context.scale.soak_seconds;
    let others = Workers { fork: false, ..Workers::ALL };
    let soak = soak::run(
        context.device,
        seconds,
        others,
        DecodeMode::Library,
        context.device.max_stream_priority(),
        false,
    )?;
    if !soak.exact() {
        let first = soak.first_errors.first().cloned().unwrap_or_default();
        return Err(jitbridge::Error::new_other(format!(
            "the soak's outputs were not exact: {first}"
        )));
    }
    if soak.decode_alone.steps == 0 || soak.decode_together.steps == 0 {
        return Err(jitbridge::Error::new_other("the soak measured no decode step in a phase"));
    }
    let section = "decode under load";
    let (alone, together) = (&soak.decode_alone, &soak.decode_together);
    let measure = |quantile: &str| {
        format!("step {quantile}, with first launches vs alone ({seconds} s soak)")
    };
    rows.push(
        Row::new(section, measure("p50"), together.p50_ns as f64, Unit::Ns)
            .against(alone.p50_ns as f64),
    );
    rows.extend(soak.decode_rows(section, &format!("first launches, {seconds} s soak")));
    Ok(())
}
