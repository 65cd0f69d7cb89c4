//! Starting a GPU ahead of a long-lived process's first request.

use crate::device::Device;
use crate::distances::DistanceMetric;
use crate::error::Result;
use crate::kmeans::KMeans;
use crate::knn::KnnIndex;
use crate::matrix::MatrixView;

/// Starts `device` now and runs a tiny fit and a tiny search on each of its GPUs, so that the
/// process's first real fit or search costs what a later one does; returns what it started, as
/// [`Device::describe`]. Starting a GPU is the driver and the context (~0.3 s with one GPU
/// visible); the first fit and search on it also pay one-time costs of their own (page-locked
/// buffers, the memory pool's first growth, the first launches: ~10 ms on an H100), which the
/// tiny jobs take on. On the CPU, or where `auto` settles on it, it only resolves the device.
pub fn warm_up(device: Device) -> Result<String> {
    let device = device.resolve()?;
    let ordinals = match device {
        Device::Cuda(ordinal) => vec![ordinal],
        Device::Gpus(set) => set.ordinals()?,
        Device::Cpu | Device::Auto => vec![],
    };
    // 64 distinct rows of 8 values, the same in every process.
    let values: Vec<f32> = (0..64 * 8).map(|i| ((i * 37) % 101) as f32).collect();
    let rows = MatrixView::new(&values, 64, 8)?;
    for ordinal in ordinals {
        let gpu = Device::Cuda(ordinal);
        KMeans::params(2).device(gpu).seed(0).fit(&rows)?;
        let index = KnnIndex::new(&rows, DistanceMetric::Euclidean, gpu)?;
        index.search(&MatrixView::new(&values[..8 * 8], 8, 8)?, 3)?;
    }
    device.describe()
}
