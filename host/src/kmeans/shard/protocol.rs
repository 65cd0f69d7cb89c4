//! What a sharded fit's client asks of its shards ([`Request`]) and what they answer
//! ([`Reply`]); [`Request::to_bytes`] and [`Reply::to_bytes`] (in `codec`) put them on a wire.
//!
//! Rows are counted in the whole data set; a shard answers for the rows it holds.

use super::{Farthest, Moments, Partial, Tally};
use crate::kmeans::{Metric, Precision};
use kernels_gpu::seeding::WeightScale;

/// What a fit's shards hold resident for it (their rows on their backend).
#[derive(Clone, Debug, PartialEq)]
pub struct Prepare {
    /// Clusters.
    pub k: usize,
    /// Assignment metric.
    pub metric: Metric,
    /// Assignment arithmetic.
    pub precision: Precision,
    /// Fixed-point exponents of the cluster sums, from all rows ([`super::scale_exponents`]).
    pub scales: Vec<i32>,
    /// Seeds that a seeding pass takes at once (a hint for staging them on a GPU).
    pub seeds_at_once: usize,
    /// The exponent of the fixed-point inertia, from all rows
    /// (`kernels_gpu::fixed::inertia_exponent`).
    pub inertia_exponent: i32,
}

/// A request to a shard.
#[derive(Clone, Debug, PartialEq)]
pub enum Request {
    /// Where the shard's rows sit, how many columns they have and each column's largest
    /// magnitude: [`Reply::Columns`]. Starts a fit: with `unit_rows` (spherical k-means) the
    /// shard's rows scaled to unit length stand for its rows in every request until the next
    /// `Columns` (a row of norm 0 is an [`Error::ZeroVector`](crate::Error) naming its row in
    /// the whole data set).
    Columns { unit_rows: bool },
    /// Exact column moments under these exponents: [`Reply::Moments`].
    Moments { scales: Vec<i32> },
    /// Holds the rows for a fit (replacing any earlier one): [`Reply::Done`].
    Prepare(Prepare),
    /// Assigns every row to its nearest of these centroids: [`Reply::Assigned`].
    Assign { centroids: Vec<f32> },
    /// Assigns to these centroids, then sums the rows per cluster: [`Reply::Partial`].
    Step { centroids: Vec<f32> },
    /// Sums the rows per cluster of their current labels: [`Reply::Partial`].
    Accumulate,
    /// Sets the labels of the shard's rows: [`Reply::Done`].
    SetLabels { labels: Vec<u32> },
    /// The `count` rows farthest from their centroids: [`Reply::Farthest`].
    Farthest { count: usize },
    /// Cluster sizes of the last assignment: [`Reply::Tally`].
    Tally,
    /// The labels of the last assignment: [`Reply::Labels`].
    Labels,
    /// Each row's distance to its centroid in the last assignment: [`Reply::Distances`].
    Distances,
    /// Those of these rows that the shard holds: [`Reply::Points`].
    Gather { rows: Vec<u64> },
    /// Lowers every row's seeding distance to its distance to each of `points` (ids from
    /// `first_id`; from +∞ with `fresh`): [`Reply::Weights`] with the shard's total weight.
    SeedNearest {
        points: Vec<f32>,
        first_id: u32,
        fresh: bool,
        weights: WeightScale,
    },
    /// After accepting trial `accept` of the last step (when given), the rows that these draws
    /// (each below the shard's weight) pick: [`Reply::Points`].
    SeedLocate {
        accept: Option<usize>,
        draws: Vec<u64>,
        weights: WeightScale,
    },
    /// After accepting trial `accept` (when given), the shard's potential of each trial point:
    /// [`Reply::Weights`].
    SeedTrials {
        accept: Option<usize>,
        points: Vec<f32>,
        weights: WeightScale,
    },
    /// k-means‖ round `round`: the rows sampled with probability `min(1, ell · weight / phi)`:
    /// [`Reply::Rows`].
    SeedSample {
        seed: u64,
        round: u32,
        ell: u64,
        phi: u64,
        weights: WeightScale,
    },
    /// Units of the rows whose nearest seed is each of the ids `0..ids`: [`Reply::Counts`].
    SeedOwnerCounts { ids: usize },
}

impl Request {
    /// Whether answering reads the shard's rows on its device (a pass over them).
    pub(crate) fn reads_rows(&self) -> bool {
        matches!(
            self,
            Request::Step { .. }
                | Request::Accumulate
                | Request::Assign { .. }
                | Request::SeedNearest { .. }
                | Request::SeedTrials { .. }
                | Request::SeedSample { .. }
        )
    }
}

/// A shard's answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// The request is done.
    Done,
    /// The shard's first row, row count, column count, column maxima and backend.
    Columns {
        first_row: u64,
        rows: u64,
        max_abs: Vec<f32>,
        device: String,
    },
    /// Column moments.
    Moments(Moments),
    /// Labels changed by an assignment and its fixed-point inertia.
    Assigned { changed: u64, inertia: i64 },
    /// Exact partial sums of a step.
    Partial(Partial),
    /// Rows farthest from their centroids.
    Farthest(Vec<Farthest>),
    /// Sizes.
    Tally(Tally),
    /// Labels, one per row.
    Labels(Vec<u32>),
    /// Distances, one per row.
    Distances(Vec<f32>),
    /// Rows and their values (`rows.len() × d`).
    Points { rows: Vec<u64>, points: Vec<f32> },
    /// Exact integer seeding weights.
    Weights(Vec<u64>),
    /// Rows, ascending.
    Rows(Vec<u64>),
    /// Units per id.
    Counts(Vec<u64>),
}
