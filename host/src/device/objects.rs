//! The backend objects a device makes for the algorithms, over one device or a GPU set: the
//! algorithms hold them as traits of [`backend`](crate::backend) and never name the backend or
//! the scale mechanism ([`backend::multi`](crate::backend::multi)) behind them.

use super::Device;
use crate::backend::vocab::{KnnLayout, REPLICATE_MAX_BYTES};
use crate::backend::{KnnSearch, SumGroup, multi};
use crate::error::Result;
use crate::matrix::MatrixView;
use kernels_gpu::knn::PairMetric;

impl Device {
    /// An exact kNN index over `train` (validated) on this device: over a GPU set (a copy or a
    /// part per GPU, as the set's [`KnnLayout`] says), resident, or streamed (`true`, some copy
    /// or part exceeds `budget` bytes of its GPU; default
    /// [`DEFAULT_BUDGET_SHARE`](crate::backend::DEFAULT_BUDGET_SHARE) of the free memory).
    /// `KnnLayout::Auto` copies rows of at most [`REPLICATE_MAX_BYTES`] that each GPU holds
    /// resident, and cuts the rest into parts.
    pub(crate) fn knn_index(
        self,
        train: MatrixView<'_>,
        metric: PairMetric,
        budget: Option<usize>,
    ) -> Result<(Box<dyn KnnSearch>, bool)> {
        match self.several_gpus()? {
            Some(ordinals) => {
                let backend_of = |i: usize| Device::Cuda(ordinals[i]).backend();
                let layout = match self {
                    Device::Gpus(set) => set.knn_layout(),
                    _ => KnnLayout::Auto,
                };
                let (n, d) = (train.rows(), train.cols());
                // Auto copies small rows only where every GPU holds them resident.
                let every_gpu_holds_them = || -> Result<bool> {
                    for i in 0..ordinals.len() {
                        if multi::exceeded_budget(&*backend_of(i)?, n, d, budget)?.is_some() {
                            return Ok(false);
                        }
                    }
                    Ok(true)
                };
                let copy = match layout {
                    KnnLayout::Replicate => true,
                    KnnLayout::Shard => false,
                    KnnLayout::Auto => n * d * 4 <= REPLICATE_MAX_BYTES && every_gpu_holds_them()?,
                };
                if copy {
                    let copies = multi::GpuReplicas::new(
                        &train,
                        metric,
                        ordinals.len(),
                        &backend_of,
                        budget,
                    )?;
                    let streamed = copies.streamed();
                    return Ok((Box::new(copies), streamed));
                }
                let parts =
                    multi::GpuParts::new(&train, metric, ordinals.len(), &backend_of, budget)?;
                let streamed = parts.streamed();
                Ok((Box::new(parts), streamed))
            }
            None => multi::place(self.backend()?, train, metric, budget),
        }
    }

    /// What adds the k-means sums of a fit with a shard on each of `devices` on the devices
    /// themselves: NCCL, when they are two or more distinct GPUs (each holding its rows
    /// resident, which the caller knows) and NCCL is installed; `None` otherwise, or while
    /// another fit holds the same GPUs' communicator (the sums are then added on the host, to
    /// the same result).
    pub(crate) fn sum_group(devices: &[Device]) -> Option<Box<dyn SumGroup>> {
        let ordinals: Vec<usize> = (devices.iter())
            .map(|d| match d {
                Device::Cuda(o) => Some(*o),
                _ => None,
            })
            .collect::<Option<_>>()?;
        multi::nccl_group(&ordinals)
    }
}
