//! Where a fit over shards in this process (a GPU set, a streamed device) spends its wall time,
//! by phase of the fit (seeding, Lloyd steps and the rest: columns, moments, labels, gathers)
//! and by request.
//! Counted process-wide per request the client sends, for the benchmarks' breakdown of a
//! streamed fit (`bench::stream_counters`); relaxed atomics, a count and not a synchronisation.

use super::Request;
use super::codec::REQUESTS;
use crate::backend::traffic::take;
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

static COUNTERS: [Counter; 3] = [const { Counter::new() }; 3];
static BY_REQUEST: [Counter; REQUESTS.len()] = [const { Counter::new() }; REQUESTS.len()];

impl Counter {
    const fn new() -> Self {
        Counter {
            nanos: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            passes: AtomicU64::new(0),
        }
    }

    fn add(&self, request: &Request, elapsed: Duration) {
        self.nanos.fetch_add(elapsed.as_nanos() as u64, Relaxed);
        self.requests.fetch_add(1, Relaxed);
        self.passes
            .fetch_add(u64::from(request.reads_rows()), Relaxed);
    }

    fn totals(&self, reset: bool) -> PhaseTotals {
        PhaseTotals {
            seconds: take(&self.nanos, reset) as f64 / 1e9,
            requests: take(&self.requests, reset),
            passes: take(&self.passes, reset),
        }
    }
}

/// Counts `request`, answered by every shard in `elapsed`.
pub(crate) fn record(request: &Request, elapsed: Duration) {
    COUNTERS[Phase::of(request) as usize].add(request, elapsed);
    BY_REQUEST[request.tag()].add(request, elapsed);
}

/// The totals of seeding, steps and the rest (in [`Phase`]'s order) since the last call with
/// `reset`.
pub(crate) fn totals(reset: bool) -> [(Phase, PhaseTotals); 3] {
    Phase::ALL.map(|phase| (phase, COUNTERS[phase as usize].totals(reset)))
}

/// The totals of each request sent since the last call with `reset`, by name.
pub(crate) fn by_request(reset: bool) -> Vec<(&'static str, PhaseTotals)> {
    REQUESTS
        .iter()
        .zip(&BY_REQUEST)
        .map(|(&name, c)| (name, c.totals(reset)))
        .filter(|(_, t)| t.requests > 0)
        .collect()
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
