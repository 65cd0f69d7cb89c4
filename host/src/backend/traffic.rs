//! Bytes that streamed k-means batches move between host and device memory at their turns (rows,
//! per-row state, seeding state), counted process-wide for the benchmarks' phase breakdown
//! (`bench::stream_counters`). Relaxed atomics: a count, not a synchronisation.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

static UP: AtomicU64 = AtomicU64::new(0);
static DOWN: AtomicU64 = AtomicU64::new(0);

/// Counts `bytes` copied to the device.
pub(crate) fn up(bytes: usize) {
    UP.fetch_add(bytes as u64, Relaxed);
}

/// Counts `bytes` copied back to the host.
pub(crate) fn down(bytes: usize) {
    DOWN.fetch_add(bytes as u64, Relaxed);
}

/// The bytes counted up and down since the last call with `reset`.
pub(crate) fn totals(reset: bool) -> (u64, u64) {
    match reset {
        true => (UP.swap(0, Relaxed), DOWN.swap(0, Relaxed)),
        false => (UP.load(Relaxed), DOWN.load(Relaxed)),
    }
}
