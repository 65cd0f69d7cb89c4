//! What this machine's CPU threads did in the fits `Device::Auto` weighs against the GPU's
//! start, kept in the user's cache folder ([`crate::user_cache`]) beside that start.
//!
//! The same kind of host can run a fit at half the speed from one day to the next (seed 000's
//! patches on 64 threads of a 4 × H200 host: 0.40 s on 2026-11-26, 0.81 s a day later), and a
//! fit's iterations are not known before it runs (the 10^6 × 9 colour fit takes ~150, the model
//! assumes 100), so a fixed figure sends work to the slower device. A CPU fit long enough to time
//! records, per host and thread count, its seconds under its shape (the rows, dimensions, k,
//! metric and stopping rules) and the multiply-adds a thread did per second. `Auto` weighs the
//! median seconds of the same shape, else the median rate over this host's fits, else the model.

use crate::user_cache;

/// Figures kept per key: enough for a median that one slow fit does not move.
const KEPT: usize = 5;

/// Fits shorter than this are not recorded: their time is mostly the threads' wake-up.
const SHORTEST_SECONDS: f64 = 0.05;

/// The median multiply-adds a thread did per second in this host's recorded CPU fits on
/// `threads` threads, else `model`.
pub fn madds_per_thread(threads: usize, model: f64) -> f64 {
    user_cache::median(user_cache::figures(&entry(threads, None), RATES)).unwrap_or(model)
}

/// The median seconds of this host's recorded CPU fits of `shape` on `threads` threads.
pub fn seconds_of(shape: &str, threads: usize) -> Option<f64> {
    user_cache::median(user_cache::figures(&entry(threads, Some(shape)), SECONDS))
}

/// Records a CPU fit of `shape`, `work` multiply-adds on `threads` threads of which `effective`
/// count (the model's scaling limit), that took `seconds`.
pub fn record(shape: &str, work: f64, threads: usize, effective: usize, seconds: f64) {
    if seconds < SHORTEST_SECONDS || work <= 0.0 || !work.is_finite() {
        return;
    }
    let rate = work / (seconds * effective.max(1) as f64);
    user_cache::keep_figure(&entry(threads, None), RATES, rate, KEPT);
    user_cache::keep_figure(&entry(threads, Some(shape)), SECONDS, seconds, KEPT);
}

/// Plausible multiply-adds a thread per second.
const RATES: std::ops::Range<f64> = 1e6..1e13;
/// Plausible seconds of a fit.
const SECONDS: std::ops::Range<f64> = SHORTEST_SECONDS..1e6;

/// The cache entry for this host and thread count: the rate, or a shape's seconds.
fn entry(threads: usize, shape: Option<&str>) -> String {
    let (host, threads) = (user_cache::host(), format!("{threads}-threads"));
    match shape {
        None => user_cache::entry_name(&["cpu-rate", &host, &threads]),
        Some(shape) => user_cache::entry_name(&["cpu-fit", &host, &threads, shape]),
    }
}
