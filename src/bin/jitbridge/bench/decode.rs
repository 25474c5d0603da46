//! Section 7 of the bench: the soak's decode step alone and while other workers first-launch
//! new kernels (a short soak, without the fork).

use super::Context;
use crate::rows::{H200, Row, Target, Unit};
use crate::soak::{self, DecodeMode, MAX_P99_RATIO, Workers};

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
    rows.push(
        Row::new(section, measure("p99"), together.p99_ns as f64, Unit::Ns)
            .against(alone.p99_ns as f64)
            .target(Target {
                max_value: None,
                max_ratio: Some(MAX_P99_RATIO),
                text: "<= 1.1x",
                set_for: H200,
            }),
    );
    Ok(())
}
