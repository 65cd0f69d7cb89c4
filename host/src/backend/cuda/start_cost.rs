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
        user_cache::keep_figure(&entry(gpus), PLAUSIBLE, seconds, KEPT);
    }
}

/// Seconds a fresh process is expected to pay for starting `gpus` GPUs and, at its exit, for
/// their teardown: the median of this machine's recorded starts, else the model.
pub fn expected_seconds(gpus: usize) -> f64 {
    let recorded = user_cache::median(user_cache::figures(&entry(gpus), PLAUSIBLE));
    EXIT_SECONDS + recorded.unwrap_or(MODEL_SECONDS_PER_GPU * gpus.max(1) as f64)
}

/// Plausible seconds of a start.
const PLAUSIBLE: std::ops::Range<f64> = 0.0..600.0;

/// The cache entry for this host and GPU count.
fn entry(gpus: usize) -> String {
    user_cache::entry_name(&["gpu-start", &user_cache::host(), &format!("{gpus}-gpus")])
}
