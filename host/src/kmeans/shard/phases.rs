//! Where a fit over shards in this process (a GPU set, a streamed device) spends its wall time,
//! by phase of the fit: seeding, Lloyd steps and the rest (columns, moments, labels, gathers).
//! Counted process-wide per request the client sends, for the benchmarks' breakdown of a
//! streamed fit (`bench::stream_counters`); relaxed atomics, a count and not a synchronisation.

use super::Request;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// A phase of a fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// k-means++ or k-means‖ (every `Seed…` request).
    Seeding,
    /// Lloyd steps: assignments and accumulations.
    Steps,
    /// Everything else: columns, moments, preparing, labels, gathers, farthest rows.
    Other,
}

impl Phase {
    const ALL: [Phase; 3] = [Phase::Seeding, Phase::Steps, Phase::Other];

    /// The phase `request` belongs to.
    pub fn of(request: &Request) -> Phase {
        match request {
            Request::SeedNearest { .. }
            | Request::SeedLocate { .. }
            | Request::SeedTrials { .. }
            | Request::SeedSample { .. }
            | Request::SeedOwnerCounts { .. } => Phase::Seeding,
            Request::Step { .. } | Request::Accumulate | Request::Assign { .. } => Phase::Steps,
            _ => Phase::Other,
        }
    }
}

/// One phase's totals since the last reset.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PhaseTotals {
    /// Wall seconds of its requests, from sending each to the last shard's reply.
    pub seconds: f64,
    /// Requests sent (each to every shard).
    pub requests: u64,
    /// Requests that read every row (a pass over the rows: for a streamed device, an upload of
    /// all of them).
    pub passes: u64,
}

struct Counter {
    nanos: AtomicU64,
    requests: AtomicU64,
    passes: AtomicU64,
}

static COUNTERS: [Counter; 3] = [const {
    Counter {
        nanos: AtomicU64::new(0),
        requests: AtomicU64::new(0),
        passes: AtomicU64::new(0),
    }
}; 3];

/// Counts `request`, answered by every shard in `elapsed`.
pub(crate) fn record(request: &Request, elapsed: Duration) {
    let c = &COUNTERS[Phase::of(request) as usize];
    c.nanos.fetch_add(elapsed.as_nanos() as u64, Relaxed);
    c.requests.fetch_add(1, Relaxed);
    c.passes.fetch_add(u64::from(request.reads_rows()), Relaxed);
}

/// The totals of seeding, steps and the rest (in [`Phase`]'s order) since the last call with
/// `reset`.
pub(crate) fn totals(reset: bool) -> [(Phase, PhaseTotals); 3] {
    let take = |a: &AtomicU64| {
        if reset {
            a.swap(0, Relaxed)
        } else {
            a.load(Relaxed)
        }
    };
    Phase::ALL.map(|phase| {
        let c = &COUNTERS[phase as usize];
        let totals = PhaseTotals {
            seconds: take(&c.nanos) as f64 / 1e9,
            requests: take(&c.requests),
            passes: take(&c.passes),
        };
        (phase, totals)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_count_in_their_phase() {
        assert_eq!(Phase::of(&Request::Accumulate), Phase::Steps);
        assert_eq!(Phase::of(&Request::Labels), Phase::Other);
        let locate = Request::SeedLocate {
            accept: None,
            draws: vec![],
            weights: kernels_gpu::seeding::WeightScale { scale: 1.0, cap: 1 },
        };
        assert_eq!(Phase::of(&locate), Phase::Seeding);
        // A locate reads no rows: it is not a pass.
        assert!(!locate.reads_rows());
    }
}
