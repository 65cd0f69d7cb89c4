//! Mini-batch k-means steps on the CPU: the twin of `kernels_gpu::minibatch`'s assign, update
//! and shift kernels (same distances, tie rule, fixed-point sums and learning-rate update).

use super::kmeans::{CentroidBlocks, CpuLloyd, accumulate, nearest, tiled};
use super::simd::{self, Panels};
use crate::backend::vocab::CHUNK;
use crate::backend::vocab::Metric;
use crate::backend::{BatchReport, Lloyd, LloydSpec, MiniBatch, Readback};
use crate::error::Result;
use crate::matrix::MatrixView;
use kernels_gpu::fixed::{inv_pow2_f64, pow2_f32};
use kernels_gpu::math::AssignMetric;
use kernels_gpu::minibatch::{learning_rate_update, row_shift};
use rayon::prelude::*;

pub(crate) struct CpuMiniBatch<'a> {
    /// The resident rows, and the assignment of all of them at the end of a fit.
    lloyd: CpuLloyd<'a>,
    x: &'a [f32],
    d: usize,
    k: usize,
    metric: AssignMetric,
    scales: Vec<f32>,
    inv_scales: Vec<f64>,
    current: Vec<f32>,
    next: Vec<f32>,
    counts: Vec<u64>,
}

impl<'a> CpuMiniBatch<'a> {
    pub(crate) fn new(data: &'a MatrixView<'a>, k: usize, metric: Metric, scales: &[i32]) -> Self {
        let d = data.cols();
        CpuMiniBatch {
            lloyd: CpuLloyd::new(data, &LloydSpec::predict(k, d, metric), 0),
            x: data.as_slice(),
            d,
            k,
            metric: metric.assign(),
            scales: scales.iter().map(|&s| pow2_f32(s)).collect(),
            inv_scales: scales.iter().map(|&s| inv_pow2_f64(s)).collect(),
            current: vec![0.0; k * d],
            next: vec![0.0; k * d],
            counts: vec![0; k],
        }
    }
}

/// Labels and distances of the contiguous rows `x` (squared norms `x_sq`) against `centroids`,
/// as the Lloyd assignment computes them.
pub(crate) fn assign_rows(
    metric: AssignMetric,
    x: &[f32],
    x_sq: &[f32],
    centroids: &[f32],
    d: usize,
) -> (Vec<u32>, Vec<f32>) {
    let n = x_sq.len();
    let (mut labels, mut dists) = (vec![0u32; n], vec![0f32; n]);
    // Rows are independent: any split gives the same answer, so a batch uses every thread.
    let per_task = n
        .div_ceil(4 * rayon::current_num_threads())
        .clamp(16, CHUNK);
    let tasks = labels
        .par_chunks_mut(per_task)
        .zip(dists.par_chunks_mut(per_task))
        .enumerate();
    if let Some(w) = simd::width() {
        let panels = Panels::new(centroids, d, w);
        tasks.for_each(|(t, (labels, dists))| {
            let rows = t * per_task..t * per_task + labels.len();
            let xs = &x[rows.start * d..rows.end * d];
            tiled::assign_rows(metric, xs, &x_sq[rows], &panels, labels, dists);
        });
    } else {
        let blocks = CentroidBlocks::new(centroids, d);
        tasks.for_each(|(t, (labels, dists))| {
            for (r, (label, dist)) in labels.iter_mut().zip(dists).enumerate() {
                let i = t * per_task + r;
                (*label, *dist) = nearest(metric, &x[i * d..(i + 1) * d], x_sq[i], &blocks);
            }
        });
    }
    (labels, dists)
}

/// `next` = centroid `current` after a batch of `batch` rows summing to `sums` (unchanged when the
/// batch has none of its rows), by [`learning_rate_update`].
#[inline(always)]
fn update_row_generic(
    next: &mut [f32],
    current: &[f32],
    sums: &[i64],
    inv_scales: &[f64],
    seen: u64,
    batch: u32,
) {
    if batch == 0 {
        next.copy_from_slice(current);
        return;
    }
    let per_dim = current.iter().zip(sums).zip(inv_scales);
    for (next, ((&current, &sum), &inv_scale)) in next.iter_mut().zip(per_dim) {
        *next = learning_rate_update(current, seen, sum, inv_scale, batch);
    }
}

/// [`update_row_generic`] with the FMA instruction (else `mul_add` calls the C library's `fma`:
/// slower, same bits).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
fn update_row_fma(
    next: &mut [f32],
    current: &[f32],
    sums: &[i64],
    inv_scales: &[f64],
    seen: u64,
    batch: u32,
) {
    update_row_generic(next, current, sums, inv_scales, seen, batch)
}

pub(crate) fn update_row(
    next: &mut [f32],
    current: &[f32],
    sums: &[i64],
    inv_scales: &[f64],
    seen: u64,
    batch: u32,
) {
    #[cfg(target_arch = "x86_64")]
    if super::simd::level() >= super::simd::SimdLevel::Avx2 {
        // SAFETY: the active level (AVX2 includes FMA and SSE4.1) is never above the detected one.
        return unsafe { update_row_fma(next, current, sums, inv_scales, seen, batch) };
    }
    update_row_generic(next, current, sums, inv_scales, seen, batch)
}

impl MiniBatch for CpuMiniBatch<'_> {
    fn set_centroids(&mut self, centroids: &[f32]) -> Result<()> {
        self.current.copy_from_slice(centroids);
        Ok(())
    }

    fn set_counts(&mut self, counts: &[u64]) -> Result<()> {
        self.counts.copy_from_slice(counts);
        Ok(())
    }

    fn step(&mut self, rows: &[u32]) -> Result<BatchReport> {
        let d = self.d;
        let mut batch = Vec::with_capacity(rows.len() * d);
        for &r in rows {
            batch.extend_from_slice(&self.x[r as usize * d..(r as usize + 1) * d]);
        }
        let all_norms = self.lloyd.row_norms();
        let norms: Vec<f32> = rows.iter().map(|&r| all_norms[r as usize]).collect();
        let (labels, distances) = assign_rows(self.metric, &batch, &norms, &self.current, d);
        let (mut sums, mut weights) = (vec![0i64; self.k * d], vec![0u64; self.k]);
        accumulate(&batch, &labels, None, &self.scales, &mut sums, &mut weights);
        // Unweighted: each cluster's weight is its row count, at most the batch's.
        let counts: Vec<u32> = weights.iter().map(|&w| w as u32).collect();
        let rows = self.next.par_chunks_mut(d).zip(self.current.par_chunks(d));
        let per_centroid = sums.par_chunks(d).zip(&counts).zip(&mut self.counts);
        let inv_scales = &self.inv_scales;
        rows.zip(per_centroid)
            .for_each(|((next, current), ((sums, &batch), seen))| {
                update_row(next, current, sums, inv_scales, *seen, batch);
                *seen += u64::from(batch);
            });
        Ok(BatchReport { distances, counts })
    }

    fn relocate(&mut self, cluster: usize, row: usize) -> Result<()> {
        let d = self.d;
        self.next[cluster * d..(cluster + 1) * d].copy_from_slice(&self.x[row * d..(row + 1) * d]);
        Ok(())
    }

    fn shifts(&mut self) -> Result<Vec<f64>> {
        let d = self.d;
        Ok(self
            .next
            .chunks_exact(d)
            .zip(self.current.chunks_exact(d))
            .map(|(next, current)| row_shift(next, current))
            .collect())
    }

    fn commit(&mut self) {
        std::mem::swap(&mut self.current, &mut self.next);
    }

    fn centroids(&self) -> Result<Vec<f32>> {
        Ok(self.current.clone())
    }

    fn assign_all(&mut self) -> Result<(Vec<u32>, Vec<f32>)> {
        self.lloyd.set_centroids(&self.current)?;
        self.lloyd.assign()?;
        Ok((self.lloyd.labels()?, self.lloyd.min_distances()?))
    }
}
