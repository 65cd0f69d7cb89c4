//! Timing hooks for the benchmarks (not part of the stable API).

use crate::device::Device;
use crate::error::Result;
use crate::kmeans::Metric;
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
    let mut lloyd = backend.lloyd(data, k, metric.assign(), &scales)?;
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
    Ok(times)
}
