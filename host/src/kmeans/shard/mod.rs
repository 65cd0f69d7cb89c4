//! k-means over data split into shards (Dask partitions, GPUs, batches): the per-shard
//! primitives and the exact arithmetic that makes the result independent of the split.
//!
//! A fit over shards equals, bit for bit, [`KMeansParams::fit`](super::KMeansParams::fit) on
//! the concatenated rows with the same parameters, whatever the number and sizes of the shards,
//! because every quantity that decides the result is computed from exact integers or from a
//! single place:
//!
//! * the fixed-point scales of the cluster sums, from the column maxima of all rows
//!   ([`column_max_abs`], [`merge_max_abs`], [`scale_exponents`]);
//! * `tol`, from exact integer column moments ([`Moments`], added up, then the single-process
//!   fit's formula);
//! * each step's cluster sums and weights ([`Partial`]: exact 64-bit fixed-point sums, added in
//!   any order), finished into the next centroids by [`Partial::finish`], the arithmetic of
//!   every backend's update, and the squared shift by [`squared_shift`];
//! * empty clusters, which take the rows farthest from their centroids ([`farthest`],
//!   [`merge_farthest`]: ties by lowest row of the whole data set);
//! * the inertia that picks the best of `n_init` runs and is reported: the kernels' exact
//!   fixed-point integer (its exponent chosen by the client from all rows and sent in
//!   [`Prepare`]), which the shards' parts add up to;
//! * seeding: k-means++ and k-means‖ draw on exact integer weights, and k-means‖'s per-row
//!   uniforms are keyed by the row of the whole data set.
//!
//! Spherical k-means (cosine) shards too: the [`Request::Columns`] that starts a fit asks every
//! shard for its rows scaled to unit length, each row by its own arithmetic, so the unit rows are
//! the single process's whatever the split. Sample weights shard where one process holds them all
//! (a GPU set): it quantises them into units as a single-process fit does and gives each shard
//! its rows' units, which its `Columns`, `Moments` and steps weigh the rows by. A client that
//! does not hold them all (Dask's) cannot yet: the quantisation depends on all of them (their
//! exact sum), which the protocol does not carry.
//!
//! **Roles.** A [`Shard`] holds some rows on its backend for as long as it lives and answers
//! [`Request`]s with [`Reply`]s (both have a byte form for a wire). The client,
//! [`KMeansParams::fit_sharded`](super::KMeansParams::fit_sharded), runs the same Lloyd loop as
//! a single-process fit over all shards at once, through a [`Transport`] that carries requests
//! to the shards: per step it sends the `k × d` centroids to each shard and gets back `k × d`
//! exact sums, `k` cluster weights (units) and two numbers ([`Partial`]), then finishes the step
//! itself.
//!
//! **Where it sits.** The protocol, its client and [`Shard`] are algorithm-level: they are the
//! Lloyd loop of a single-process fit, spoken over a wire, and they hold a backend only as the
//! traits of `backend` that [`Device`](crate::Device) makes (a [`Shard`] holds a `Lloyd`). So
//! they stay here, with Dask's Python package as their other client, and import no concrete
//! backend. What a GPU set or a streamed fit adds to them, the threads per device, the batches'
//! turns and the NCCL sums, is a scale mechanism and lives in `backend::multi`; `gpus` hands it
//! the shards.
//!
//! ```
//! use kmeans_knn::{Device, KMeans, MatrixView, kmeans::shard::Shard};
//! let points: Vec<f32> = (0..400).map(|i| (i % 37) as f32 * 0.5).collect();
//! let whole = KMeans::params(3).seed(1).fit(MatrixView::new(&points, 200, 2)?)?;
//! // The same rows as three shards (here in this process; Dask workers in the Python package).
//! let mut shards = Vec::new();
//! for (first, rows) in [(0, 50), (50, 1), (51, 149)] {
//!     let part = points[2 * first..2 * (first + rows)].to_vec();
//!     let data = MatrixView::from_vec(part, rows, 2)?;
//!     shards.push(Shard::new(data, first as u64, Device::Auto)?);
//! }
//! let sharded = KMeans::params(3).seed(1).fit_sharded(&mut shards)?;
//! assert_eq!(sharded.centroids, whole.centroids);
//! assert_eq!(sharded.inertia, whole.inertia);
//! # Ok::<(), kmeans_knn::Error>(())
//! ```

mod client;
mod codec;
mod columns;
pub(crate) mod gpus;
pub(crate) mod phases;
mod protocol;
mod resident;

pub use crate::backend::{Farthest, Partial, Tally, farthest, merge_farthest, squared_shift};
pub use client::Transport;
pub(crate) use client::fit;
pub use columns::{Moments, column_max_abs, merge_max_abs, scale_exponents};
/// The scale of seeding weights in [`Request`]s.
pub use kernels_gpu::seeding::WeightScale;
pub use protocol::{Prepare, Reply, Request};
pub use resident::Shard;
