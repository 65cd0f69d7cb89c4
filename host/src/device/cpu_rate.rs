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
    median(kept(&entry(threads, None), RATES)).unwrap_or(model)
}

/// The median seconds of this host's recorded CPU fits of `shape` on `threads` threads.
pub fn seconds_of(shape: &str, threads: usize) -> Option<f64> {
    median(kept(&entry(threads, Some(shape)), SECONDS))
}

/// Records a CPU fit of `shape`, `work` multiply-adds on `threads` threads of which `effective`
/// count (the model's scaling limit), that took `seconds`.
pub fn record(shape: &str, work: f64, threads: usize, effective: usize, seconds: f64) {
    if seconds < SHORTEST_SECONDS || work <= 0.0 || !work.is_finite() {
        return;
    }
    keep(
        &entry(threads, None),
        RATES,
        work / (seconds * effective.max(1) as f64),
    );
    keep(&entry(threads, Some(shape)), SECONDS, seconds);
}

/// Plausible multiply-adds a thread per second.
const RATES: std::ops::Range<f64> = 1e6..1e13;
/// Plausible seconds of a fit.
const SECONDS: std::ops::Range<f64> = SHORTEST_SECONDS..1e6;

/// Appends `value` to the entry `name`, keeping the last [`KEPT`].
fn keep(name: &str, plausible: std::ops::Range<f64>, value: f64) {
    let mut values = kept(name, plausible);
    values.push(value);
    let values = &values[values.len().saturating_sub(KEPT)..];
    let text: Vec<String> = values.iter().map(|v| format!("{v:.4e}")).collect();
    user_cache::write(name, &text.join(" "));
}

/// The plausible figures of the entry `name`.
fn kept(name: &str, plausible: std::ops::Range<f64>) -> Vec<f64> {
    parse(user_cache::read(name).as_deref().unwrap_or(""), plausible)
}

/// The cache entry for this host and thread count: the rate, or a shape's seconds.
fn entry(threads: usize, shape: Option<&str>) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let threads = format!("{threads}-threads");
    match shape {
        None => user_cache::entry_name(&["cpu-rate", host.trim(), &threads]),
        Some(shape) => user_cache::entry_name(&["cpu-fit", host.trim(), &threads, shape]),
    }
}

/// The figures of an entry; anything that is not a number in `plausible` is dropped.
fn parse(text: &str, plausible: std::ops::Range<f64>) -> Vec<f64> {
    text.split_whitespace()
        .filter_map(|s| s.parse::<f64>().ok())
        .filter(|v| v.is_finite() && plausible.contains(v))
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
    fn implausible_figures_are_dropped() {
        assert_eq!(parse("7.5e9 x -1 NaN 1e20 3e9", RATES), vec![7.5e9, 3e9]);
        assert_eq!(parse("0.01 0.3 x 2e6 1.5", SECONDS), vec![0.3, 1.5]);
        assert_eq!(median(parse("", RATES)), None);
        assert_eq!(median(parse("3e9 9e9 5e9", RATES)), Some(5e9));
    }
}
