//! Bytes that streamed k-means batches move between host and device memory at their turns (rows,
//! per-row state, seeding state), and where a turn's wall time goes, counted process-wide for
//! the benchmarks' phase breakdown (`bench::stream_counters`). Relaxed atomics: a count, not a
//! synchronisation.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

static UP: AtomicU64 = AtomicU64::new(0);
static DOWN: AtomicU64 = AtomicU64::new(0);
static TURN_NANOS: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];

/// Wall seconds of streamed batches' turns, split by what the turn's thread was doing.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TurnSeconds {
    /// Answering the request (its kernels and the reply's read-back).
    pub answer: f64,
    /// Releasing the batch: its per-row state read back, its buffers freed.
    pub release: f64,
    /// Waiting, after both, for the next batch's rows to finish going up.
    pub upload_wait: f64,
}

/// Counts `bytes` copied to the device.
pub(crate) fn up(bytes: usize) {
    UP.fetch_add(bytes as u64, Relaxed);
}

/// Counts `bytes` copied back to the host.
pub(crate) fn down(bytes: usize) {
    DOWN.fetch_add(bytes as u64, Relaxed);
}

/// Counts one turn's split ([`TurnSeconds`]).
pub(crate) fn turn(answer: Duration, release: Duration, upload_wait: Duration) {
    for (total, part) in TURN_NANOS.iter().zip([answer, release, upload_wait]) {
        total.fetch_add(part.as_nanos() as u64, Relaxed);
    }
}

/// A counter's value, zeroed with `reset` (the start of a new count).
pub(crate) fn take(counter: &AtomicU64, reset: bool) -> u64 {
    match reset {
        true => counter.swap(0, Relaxed),
        false => counter.load(Relaxed),
    }
}

/// The turns' split since the last call with `reset`.
pub(crate) fn turn_totals(reset: bool) -> TurnSeconds {
    let [answer, release, upload_wait] = TURN_NANOS.each_ref().map(|a| take(a, reset) as f64 / 1e9);
    TurnSeconds {
        answer,
        release,
        upload_wait,
    }
}

/// The bytes counted up and down since the last call with `reset`.
pub(crate) fn totals(reset: bool) -> (u64, u64) {
    (take(&UP, reset), take(&DOWN, reset))
}
