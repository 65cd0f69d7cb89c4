//! One job over several devices, or through one device past its memory budget: the scale
//! mechanisms that sit over the [`cpu`](super::cpu) and [`cuda`](super::cuda) backends, a module
//! each.
//!
//! * [`gpu_set`]: a job over a GPU set, a thread per device: a kNN index with a part of the
//!   training rows per GPU, searched at once ([`GpuParts`]); any caller's members in a group per
//!   device ([`on_each`], [`answer_in_turns`]: a k-means fit's shards).
//! * [`replicas`]: a kNN index copied whole to every GPU of a set, each search's queries shared
//!   out between the copies ([`GpuReplicas`]), on threads kept from search to search
//!   ([`drivers`]).
//! * [`stream`]: a kNN index over training rows past one device's budget, streamed through it
//!   part by part; [`place`] picks it or a resident index.
//! * [`batches`]: a k-means fit's rows past one device's budget, cut into batches
//!   ([`batches::plan`]) that take turns on it ([`Turn`], [`batches::turns`]).
//! * [`merge`]: what the kNN parts of either share: every query's running k nearest, merged in
//!   the order of a single index, and the vote over them.
//! * [`sums`]: the NCCL communicators that add a GPU set's k-means sums on the GPUs.
//!
//! Every mechanism gives the single device's answer bit for bit: kNN parts merge by (distance,
//! training row), the order of one index, and k-means adds exact integer sums, which any split
//! adds up to the same totals. The algorithms reach them only through the objects that
//! [`Device`](crate::Device) makes (`Device::knn_index`, `Device::sum_group`), the traits of
//! [`backend`](super) (`KnnSearch`, `Backend::lloyd_batches`, `SumGroup`) and the generic
//! runners it passes on (`Turn`, `answer_in_turns`, `on_each`), which take the caller's own
//! members and name no backend.
//!
//! The k-means fit over a GPU set is the sharded protocol of `kmeans::shard` (the one Dask's
//! workers speak) with every shard in this process: that protocol, its client and the shard
//! that answers it are algorithm-level (they run the Lloyd loop and import no concrete backend),
//! so they stay in `kmeans`; from here a GPU set's fit takes its batches, its threads and turns,
//! and its communicator.

pub(crate) mod batches;
pub(crate) mod drivers;
pub(crate) mod gpu_set;
pub(crate) mod merge;
pub(crate) mod replicas;
pub(crate) mod stream;
pub(crate) mod sums;

pub(crate) use batches::Turn;
pub(crate) use gpu_set::{GpuParts, answer_in_turns, on_each};
pub(crate) use replicas::GpuReplicas;
pub(crate) use stream::{exceeded_budget, place};
pub(crate) use sums::nccl_group;

/// What the unit tests of the GPU-set layouts share: the layouts run over CPU backends where
/// there is no GPU, against one CPU index over the same rows.
#[cfg(test)]
pub(crate) mod fixture {
    use crate::backend::cpu::CpuBackend;
    use crate::backend::{Backend, KnnSearch};
    use crate::error::Result;
    use crate::matrix::MatrixView;
    use kernels_gpu::knn::PairMetric;
    use std::sync::Arc;

    /// `n × d` training rows on a small lattice (ties across parts and copies).
    pub(crate) fn lattice(n: usize, d: usize) -> Vec<f32> {
        (0..n * d).map(|i| ((i * 7) % 5) as f32).collect()
    }

    /// The CPU backend, for every device of a set.
    pub(crate) fn cpu(_: usize) -> Result<Arc<dyn Backend>> {
        CpuBackend::shared()
    }

    /// One CPU index over `train`; it and `set` get a class (of three) and a weight per row.
    pub(crate) fn one_index_voting_as(
        train: &MatrixView<'_>,
        metric: PairMetric,
        set: &mut dyn KnnSearch,
    ) -> Box<dyn KnnSearch> {
        let n = train.rows();
        let classes: Vec<u32> = (0..n as u32).map(|i| i % 3).collect();
        let weights: Vec<f32> = (0..n).map(|i| 1.0 / (1 + i % 4) as f32).collect();
        let votes = |index: &mut dyn KnnSearch| {
            index.set_labels(&classes, 3).unwrap();
            index.set_row_weights(&weights).unwrap();
        };
        let mut one = cpu(0).unwrap().knn_index(train, metric).unwrap();
        votes(one.as_mut());
        votes(set);
        one
    }
}
