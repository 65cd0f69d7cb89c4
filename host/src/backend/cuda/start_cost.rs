//! What a process pays for the GPU before its first kernel, measured on this machine.
//!
//! The first backend a process makes times its start (from the first driver call to the module
//! loaded: `cuInit`, the primary context, the kernel image) and keeps the last few figures in the
//! user's cache ([`crate::user_cache`]), keyed by the host and the number of GPUs the driver
//! started, which is what the start grows with. `Device::Auto` weighs a job's CPU time against
//! [`expected_seconds`]: the first process on a machine uses a model, later ones read what the
//! machine did.

use crate::user_cache;
use std::sync::OnceLock;
use std::time::Instant;

/// Figures kept per key: enough for a median that one slow start does not move.
const KEPT: usize = 5;

/// What a GPU process pays outside its own clock (the context's teardown at exit, the driver's
/// loading), which no process can time itself: the seed jobs' wall clock less their own clock
/// was 0.13–0.15 s on the GPU against 0.02–0.03 s on the CPU (H200 hosts, 2026-11-27).
const EXIT_SECONDS: f64 = 0.12;

/// The model before any measurement: `cuInit`, a context and the module, per GPU started
/// (0.2–0.3 s with one visible on the H100 and H200 machines, ~1 s with four).
const MODEL_SECONDS_PER_GPU: f64 = 0.25;

/// When the process first called into the driver.
static FIRST_CALL: OnceLock<Instant> = OnceLock::new();

/// Notes the first driver call (later calls keep the first instant).
pub(super) fn driver_called() {
    FIRST_CALL.get_or_init(Instant::now);
}

/// Records that the process's first backend is ready, `gpus` having been started.
pub(super) fn first_backend_ready(gpus: usize) {
    if let Some(first) = FIRST_CALL.get() {
        let seconds = first.elapsed().as_secs_f64();
        let name = entry(gpus);
        let mut kept = parse(user_cache::read(&name).as_deref().unwrap_or(""));
        kept.push(seconds);
        let kept = &kept[kept.len().saturating_sub(KEPT)..];
        let text: Vec<String> = kept.iter().map(|s| format!("{s:.4}")).collect();
        user_cache::write(&name, &text.join(" "));
    }
}

/// Seconds a fresh process is expected to pay for starting `gpus` GPUs and, at its exit, for
/// their teardown: the median of this machine's recorded starts, else the model.
pub fn expected_seconds(gpus: usize) -> f64 {
    let recorded = parse(user_cache::read(&entry(gpus)).as_deref().unwrap_or(""));
    EXIT_SECONDS + median(recorded).unwrap_or(MODEL_SECONDS_PER_GPU * gpus.max(1) as f64)
}

/// The cache entry for this host and GPU count.
fn entry(gpus: usize) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    user_cache::entry_name(&["gpu-start", host.trim(), &format!("{gpus}-gpus")])
}

/// The figures of an entry; anything that is not a plausible number of seconds is dropped.
fn parse(text: &str) -> Vec<f64> {
    text.split_whitespace()
        .filter_map(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && (0.0..600.0).contains(s))
        .collect()
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_entry_is_read_as_no_measurement() {
        assert_eq!(parse("0.21 x 0.25 -1 NaN 1e9 0.3"), vec![0.21, 0.25, 0.3]);
        assert_eq!(median(parse("0.9 0.2 0.3")), Some(0.3));
        assert_eq!(median(parse("garbage")), None);
    }
}
