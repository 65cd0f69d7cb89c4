//! Timing hooks for the benchmarks (not part of the stable API).

use crate::device::Device;
use crate::error::Result;
use crate::kmeans::{Metric, Precision};
use crate::matrix::MatrixView;
use kernels_gpu::fixed::scale_exponent;

/// Times `reps` Lloyd iterations (assign + update) after `warmup` untimed ones, each starting
/// from the same `centroids`; returns the milliseconds of every timed iteration.
pub fn lloyd_iteration_ms(
    device: Device,
    data: &MatrixView<'_>,
    centroids: &[f32],
    metric: Metric,
    warmup: usize,
    reps: usize,
) -> Result<Vec<f64>> {
    let (times, _) = lloyd_iteration_ms_with(
        device,
        data,
        centroids,
        metric,
        Precision::Exact,
        warmup,
        reps,
    )?;
    Ok(times)
}

/// [`lloyd_iteration_ms`] with the assignment's `precision`; also returns the labels of the
/// last iteration's assignment (from `centroids`).
pub fn lloyd_iteration_ms_with(
    device: Device,
    data: &MatrixView<'_>,
    centroids: &[f32],
    metric: Metric,
    precision: Precision,
    warmup: usize,
    reps: usize,
) -> Result<(Vec<f64>, Vec<u32>)> {
    let (n, d) = (data.rows(), data.cols());
    let k = centroids.len() / d;
    let backend = device.backend()?;
    let mut max_abs = vec![0f32; d];
    for row in data.as_slice().chunks_exact(d) {
        for (m, v) in max_abs.iter_mut().zip(row) {
            *m = m.max(v.abs());
        }
    }
    let scales: Vec<i32> = max_abs.iter().map(|&m| scale_exponent(m, n)).collect();
    let mut lloyd = backend.lloyd(data, k, metric.assign(), precision, &scales)?;
    let mut times = Vec::with_capacity(reps);
    for rep in 0..warmup + reps {
        lloyd.set_centroids(centroids)?;
        let ms = backend.time_ms(&mut || {
            lloyd.step()?;
            Ok(())
        })?;
        if rep >= warmup {
            times.push(ms);
        }
    }
    Ok((times, lloyd.labels()?))
}

/// One assignment of every point of `data` to its nearest of `centroids` (`k × d`) with
/// `precision`: the labels and each point's distance to its centroid (for tests and the
/// benchmark's agreement figures).
pub fn assign_once(
    device: Device,
    data: &MatrixView<'_>,
    centroids: &[f32],
    metric: Metric,
    precision: Precision,
) -> Result<(Vec<u32>, Vec<f32>)> {
    let (n, d) = (data.rows(), data.cols());
    let k = centroids.len() / d;
    let backend = device.backend()?;
    let scales = vec![scale_exponent(1.0, n); d];
    let mut lloyd = backend.lloyd(data, k, metric.assign(), precision, &scales)?;
    lloyd.set_centroids(centroids)?;
    lloyd.assign()?;
    Ok((lloyd.labels()?, lloyd.min_distances()?))
}
