//! Lloyd iterations on the CPU: the twin of the GPU's assign / accumulate / finalize kernels.

use super::CHUNK;
use crate::backend::{AssignStats, Lloyd};
use crate::error::Result;
use crate::matrix::MatrixView;
use kernels_gpu::fixed::{inv_pow2_f64, mean, pow2_f32, to_fixed};
use kernels_gpu::math::{AssignMetric, step};
use rayon::prelude::*;

pub(crate) struct CpuLloyd<'a> {
    x: &'a [f32],
    n: usize,
    d: usize,
    k: usize,
    metric: AssignMetric,
    scales: Vec<f32>,
    inv_scales: Vec<f64>,
    centroids: Vec<f32>,
    next: Vec<f32>,
    labels: Vec<u32>,
    min_dist: Vec<f32>,
    sizes: Vec<u32>,
}

impl<'a> CpuLloyd<'a> {
    pub(crate) fn new(
        data: &'a MatrixView<'a>,
        k: usize,
        metric: AssignMetric,
        scales: &[i32],
    ) -> Self {
        let (n, d) = (data.rows(), data.cols());
        CpuLloyd {
            x: data.as_slice(),
            n,
            d,
            k,
            metric,
            scales: scales.iter().map(|&s| pow2_f32(s)).collect(),
            inv_scales: scales.iter().map(|&s| inv_pow2_f64(s)).collect(),
            centroids: vec![0.0; k * d],
            next: vec![0.0; k * d],
            labels: vec![0; n],
            min_dist: vec![0.0; n],
            sizes: vec![0; k],
        }
    }
}

/// The nearest of `centroids` (row-major, `d` columns) to `row`: first minimum in index order,
/// four centroids per pass over the row as in the GPU kernel.
#[inline(always)]
fn nearest_generic(metric: AssignMetric, row: &[f32], centroids: &[f32], d: usize) -> (u32, f32) {
    let k = centroids.len() / d;
    let (mut best, mut label) = (f32::INFINITY, 0u32);
    let mut offer = |dist: f32, c: usize| {
        if dist < best {
            best = dist;
            label = c as u32;
        }
    };
    let mut c = 0;
    while c + 4 <= k {
        let base = &centroids[c * d..(c + 4) * d];
        let (c0, rest) = base.split_at(d);
        let (c1, rest) = rest.split_at(d);
        let (c2, c3) = rest.split_at(d);
        let (mut a0, mut a1, mut a2, mut a3) = (0.0, 0.0, 0.0, 0.0);
        for j in 0..d {
            let v = row[j];
            a0 = step(metric, a0, v, c0[j]);
            a1 = step(metric, a1, v, c1[j]);
            a2 = step(metric, a2, v, c2[j]);
            a3 = step(metric, a3, v, c3[j]);
        }
        offer(a0, c);
        offer(a1, c + 1);
        offer(a2, c + 2);
        offer(a3, c + 3);
        c += 4;
    }
    while c < k {
        offer(
            kernels_gpu::math::distance(metric, row, &centroids[c * d..(c + 1) * d]),
            c,
        );
        c += 1;
    }
    (label, best)
}

/// [`nearest_generic`] compiled with FMA instructions, for CPUs that have them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn nearest_fma(metric: AssignMetric, row: &[f32], centroids: &[f32], d: usize) -> (u32, f32) {
    nearest_generic(metric, row, centroids, d)
}

/// The nearest centroid to `row` and its distance. Without hardware FMA, `mul_add` falls back to
/// the C library's exact `fmaf`: slower, same bits.
pub(crate) fn nearest(
    metric: AssignMetric,
    row: &[f32],
    centroids: &[f32],
    d: usize,
) -> (u32, f32) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("fma") && std::is_x86_feature_detected!("avx2") {
        // SAFETY: the features were just detected.
        return unsafe { nearest_fma(metric, row, centroids, d) };
    }
    nearest_generic(metric, row, centroids, d)
}

impl Lloyd for CpuLloyd<'_> {
    fn set_centroids(&mut self, centroids: &[f32]) -> Result<()> {
        self.centroids.copy_from_slice(centroids);
        Ok(())
    }

    fn set_labels(&mut self, labels: &[u32]) -> Result<()> {
        self.labels.copy_from_slice(labels);
        Ok(())
    }

    fn assign(&mut self) -> Result<AssignStats> {
        let (x, d, metric, centroids) = (self.x, self.d, self.metric, &self.centroids);
        let per_chunk: Vec<(u64, f64)> = self
            .labels
            .par_chunks_mut(CHUNK)
            .zip(self.min_dist.par_chunks_mut(CHUNK))
            .enumerate()
            .map(|(ci, (labels, dists))| {
                let (mut changed, mut inertia) = (0u64, 0f64);
                for (r, (label, dist)) in labels.iter_mut().zip(dists.iter_mut()).enumerate() {
                    let i = ci * CHUNK + r;
                    let (best, best_dist) = nearest(metric, &x[i * d..(i + 1) * d], centroids, d);
                    changed += u64::from(*label != best);
                    *label = best;
                    *dist = best_dist;
                    inertia += best_dist as f64;
                }
                (changed, inertia)
            })
            .collect();
        let changed = per_chunk.iter().map(|p| p.0).sum();
        let inertia = per_chunk.iter().map(|p| p.1).sum();
        Ok(AssignStats { changed, inertia })
    }

    fn update(&mut self) -> Result<usize> {
        let (d, k) = (self.d, self.k);
        let rows_per_task = CHUNK.max(self.n.div_ceil(4 * rayon::current_num_threads()));
        let scales = &self.scales;
        let zero = || (vec![0i64; k * d], vec![0u32; k]);
        let (sums, counts) = self
            .x
            .par_chunks(rows_per_task * d)
            .zip(self.labels.par_chunks(rows_per_task))
            .fold(zero, |(mut sums, mut counts), (xs, labels)| {
                for (row, &label) in xs.chunks_exact(d).zip(labels) {
                    let acc = &mut sums[label as usize * d..(label as usize + 1) * d];
                    for ((a, &v), &s) in acc.iter_mut().zip(row).zip(scales) {
                        *a += to_fixed(v, s);
                    }
                    counts[label as usize] += 1;
                }
                (sums, counts)
            })
            .reduce(zero, |(mut s1, mut c1), (s2, c2)| {
                s1.iter_mut().zip(&s2).for_each(|(a, b)| *a += b);
                c1.iter_mut().zip(&c2).for_each(|(a, b)| *a += b);
                (s1, c1)
            });
        let mut empty = 0;
        for c in 0..k {
            let row = c * d..(c + 1) * d;
            if counts[c] == 0 {
                empty += 1;
                self.next[row.clone()].copy_from_slice(&self.centroids[row]);
            } else {
                for j in 0..d {
                    self.next[c * d + j] = mean(sums[c * d + j], self.inv_scales[j], counts[c]);
                }
            }
        }
        self.sizes = counts;
        Ok(empty)
    }

    fn relocate(&mut self, cluster: usize, point: usize) -> Result<()> {
        let d = self.d;
        self.next[cluster * d..(cluster + 1) * d]
            .copy_from_slice(&self.x[point * d..(point + 1) * d]);
        Ok(())
    }

    fn commit(&mut self) -> Result<f64> {
        let shift = self
            .next
            .iter()
            .zip(&self.centroids)
            .map(|(&a, &b)| {
                let diff = a as f64 - b as f64;
                diff * diff
            })
            .sum();
        std::mem::swap(&mut self.centroids, &mut self.next);
        Ok(shift)
    }

    fn min_distances(&self) -> Result<Vec<f32>> {
        Ok(self.min_dist.clone())
    }

    fn sizes(&self) -> Result<Vec<u32>> {
        Ok(self.sizes.clone())
    }

    fn centroids(&self) -> Result<Vec<f32>> {
        Ok(self.centroids.clone())
    }

    fn labels(&self) -> Result<Vec<u32>> {
        Ok(self.labels.clone())
    }
}
