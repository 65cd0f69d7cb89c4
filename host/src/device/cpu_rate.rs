//! What this machine's CPU threads did in the fits `Device::Auto` sent them, kept in the user's
//! cache folder ([`crate::user_cache`]) beside the GPU's start.
//!
//! The same kind of host can run a fit at half the speed from one day to the next (seed 000's
//! patches on 64 threads of a 4 × H200 host: 0.40 s on 2026-11-26, 0.81 s a day later), so a
//! fixed figure sends work to the slower device. A CPU fit long enough to time records the
//! multiply-adds a thread did per second, keyed by the host and the thread count; `Auto` weighs
//! the median of the last few against the GPU's start, and the model until there is one.

use crate::user_cache;

/// Figures kept per key: enough for a median that one slow fit does not move.
const KEPT: usize = 5;

/// Fits shorter than this are not recorded: their time is mostly the threads' wake-up.
const SHORTEST_SECONDS: f64 = 0.05;

/// The median multiply-adds a thread did per second in this host's recorded CPU fits on
/// `threads` threads, else `model`.
pub fn madds_per_thread(threads: usize, model: f64) -> f64 {
    median(parse(
        user_cache::read(&entry(threads)).as_deref().unwrap_or(""),
    ))
    .unwrap_or(model)
}

/// Records a CPU fit of `work` multiply-adds on `threads` threads, of which `effective` count
/// (the model's scaling limit), that took `seconds`.
pub fn record(work: f64, threads: usize, effective: usize, seconds: f64) {
    if seconds < SHORTEST_SECONDS || work <= 0.0 || !work.is_finite() {
        return;
    }
    let rate = work / (seconds * effective.max(1) as f64);
    let name = entry(threads);
    let mut kept = parse(user_cache::read(&name).as_deref().unwrap_or(""));
    kept.push(rate);
    let kept = &kept[kept.len().saturating_sub(KEPT)..];
    let text: Vec<String> = kept.iter().map(|r| format!("{r:.4e}")).collect();
    user_cache::write(&name, &text.join(" "));
}

/// The cache entry for this host and thread count.
fn entry(threads: usize) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    user_cache::entry_name(&["cpu-rate", host.trim(), &format!("{threads}-threads")])
}

/// The figures of an entry; anything that is not a plausible rate is dropped.
fn parse(text: &str) -> Vec<f64> {
    text.split_whitespace()
        .filter_map(|s| s.parse::<f64>().ok())
        .filter(|r| r.is_finite() && (1e6..1e13).contains(r))
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
        assert_eq!(parse("7.5e9 x -1 NaN 1e20 3e9"), vec![7.5e9, 3e9]);
        assert_eq!(median(parse("")), None);
        assert_eq!(median(parse("3e9 9e9 5e9")), Some(5e9));
    }
}
