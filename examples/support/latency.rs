//! Latency summaries the `*_pod_latency` examples share (each includes this file with
//! `#[path]`; cargo does not build `examples/support/` as an example of its own).

use std::time::Duration;

/// The `p` quantile (0.0 to 1.0) of ascending `sorted`, by nearest rank; `sorted` must not be
/// empty.
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// `d` in milliseconds.
pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
