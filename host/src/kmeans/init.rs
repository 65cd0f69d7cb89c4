//! Initial centroids or labels. Runs on the host for both backends, so a seed gives the same
//! start on the CPU and the GPU.

use super::Metric;
use crate::backend::cpu::CHUNK;
use crate::matrix::MatrixView;
use kernels_gpu::math::distance;
use rand::Rng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

/// Where a run starts.
pub(super) enum Start {
    Centroids(Vec<f32>),
    Labels(Vec<u32>),
}

/// `k` distinct points drawn uniformly.
pub(super) fn random_points(data: &MatrixView<'_>, k: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
    gather(data, &sample(rng, data.rows(), k).into_vec())
}

/// A uniformly random label for every point.
pub(super) fn random_labels(n: usize, k: usize, rng: &mut ChaCha8Rng) -> Vec<u32> {
    (0..n).map(|_| rng.random_range(0..k as u32)).collect()
}

/// Greedy k-means++: each new centroid is the best of `2 + ⌊ln k⌋` candidates drawn with
/// probability proportional to the squared distance to the nearest chosen centroid.
pub(super) fn kmeans_plus_plus(
    data: &MatrixView<'_>,
    k: usize,
    metric: Metric,
    rng: &mut ChaCha8Rng,
) -> Vec<f32> {
    let n = data.rows();
    let trials = 2 + (k as f64).ln().floor() as usize;
    let first = rng.random_range(0..n);
    let mut chosen = vec![first];
    let mut closest = weights_to(data, first, metric, None);
    while chosen.len() < k {
        let cumulative = prefix_sums(&closest);
        let total = *cumulative.last().unwrap();
        let mut best: Option<(f64, usize, Vec<f64>)> = None;
        for _ in 0..trials {
            let candidate = if total > 0.0 {
                let r = rng.random::<f64>() * total;
                cumulative.partition_point(|&c| c <= r).min(n - 1)
            } else {
                // Every point coincides with a chosen centroid: any point is as good.
                rng.random_range(0..n)
            };
            let updated = weights_to(data, candidate, metric, Some(&closest));
            let potential = ordered_sum(&updated);
            if best.as_ref().is_none_or(|(p, _, _)| potential < *p) {
                best = Some((potential, candidate, updated));
            }
        }
        let (_, candidate, updated) = best.expect("at least two trials");
        chosen.push(candidate);
        closest = updated;
    }
    gather(data, &chosen)
}

/// The k-means++ weight of every point towards point `p` (squared L2, or squared L1), lowered to
/// `current` where that is smaller.
fn weights_to(
    data: &MatrixView<'_>,
    p: usize,
    metric: Metric,
    current: Option<&[f64]>,
) -> Vec<f64> {
    let centre = data.row(p);
    let mut out = vec![0.0; data.rows()];
    out.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(ci, chunk)| {
            for (r, w) in chunk.iter_mut().enumerate() {
                let i = ci * CHUNK + r;
                let dist = distance(metric.assign(), data.row(i), centre) as f64;
                let weight = match metric {
                    Metric::L2 => dist,
                    Metric::L1 => dist * dist,
                };
                *w = current.map_or(weight, |c| weight.min(c[i]));
            }
        });
    out
}

fn prefix_sums(values: &[f64]) -> Vec<f64> {
    let mut acc = 0.0;
    values
        .iter()
        .map(|v| {
            acc += v;
            acc
        })
        .collect()
}

/// Σ values in chunk order: the same float whatever the thread count.
fn ordered_sum(values: &[f64]) -> f64 {
    let partial: Vec<f64> = values
        .par_chunks(CHUNK)
        .map(|c| c.iter().sum::<f64>())
        .collect();
    partial.iter().sum()
}

/// The rows at `indices`, row-major.
fn gather(data: &MatrixView<'_>, indices: &[usize]) -> Vec<f32> {
    indices
        .iter()
        .flat_map(|&i| data.row(i).iter().copied())
        .collect()
}
