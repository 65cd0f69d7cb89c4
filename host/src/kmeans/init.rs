//! Initial centroids or labels. k-means++ and k-means‖ run on the backend, on the data the
//! [`Lloyd`](crate::backend::Lloyd) object holds, through [`Seeding`]; the random numbers come
//! from the host's ChaCha8 stream, and every choice is made on exact integer weights
//! ([`WeightScale`]), so a seed gives the same start on the CPU and the GPU.

use super::Metric;
use super::lloyd::Setup;
use crate::backend::cpu::Seeder;
use crate::backend::{Lloyd, Picks, Seeding, Seeds};
use crate::error::Result;
use kernels_gpu::launch::SEED_CANDIDATES;
use kernels_gpu::seeding::WeightScale;
use rand::Rng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;

/// Rounds of k-means‖ (as Spark and cuML).
pub(super) const PARALLEL_ROUNDS: u32 = 5;

/// Where a run starts.
pub(super) enum Start {
    Centroids(Vec<f32>),
    Labels(Vec<u32>),
}

/// `k` distinct rows of `n` drawn uniformly.
pub(super) fn random_rows(n: usize, k: usize, rng: &mut ChaCha8Rng) -> Vec<usize> {
    sample(rng, n, k).into_vec()
}

/// A uniformly random label for every point.
pub(super) fn random_labels(n: usize, k: usize, rng: &mut ChaCha8Rng) -> Vec<u32> {
    (0..n).map(|_| rng.random_range(0..k as u32)).collect()
}

/// The weight scale for `n` points of data whose coordinates are at most `max_abs` per column:
/// no seeding distance exceeds the distance across that bounding box.
pub(super) fn weight_scale(max_abs: &[f32], n: usize, metric: Metric) -> WeightScale {
    let bound = match metric {
        Metric::L2 => max_abs
            .iter()
            .map(|&m| 4.0 * m as f64 * m as f64)
            .sum::<f64>(),
        Metric::L1 => max_abs.iter().map(|&m| 2.0 * m as f64).sum::<f64>().powi(2),
    };
    WeightScale::new(bound, n)
}

/// Trials per greedy k-means++ step: `2 + ⌊ln k⌋` (as scikit-learn), within one pass's
/// candidates (the previous winner takes a slot).
fn trials_for(k: usize) -> usize {
    (2 + (k as f64).ln().floor() as usize).min(SEED_CANDIDATES - 1)
}

/// Greedy k-means++ over the `n` rows of `seeding`: the first seed uniform, then each seed the
/// best of `2 + ⌊ln k⌋` candidates drawn with probability proportional to their integer weight
/// (draws uniform in `[0, total)`, located in the cumulative weights); the lowest potential
/// wins, ties to the earliest trial. Returns the chosen rows.
pub(super) fn kmeans_plus_plus(
    seeding: &mut dyn Seeding,
    n: usize,
    k: usize,
    ws: WeightScale,
    rng: &mut ChaCha8Rng,
) -> Result<Vec<usize>> {
    let trials = trials_for(k);
    let first = rng.random_range(0..n);
    let mut chosen = vec![first];
    let mut total = seeding.seed_nearest(Seeds::Rows(&[first as u32]), 0, true, ws)?;
    while chosen.len() < k {
        let step = if total > 0 {
            let draws: Vec<u64> = (0..trials).map(|_| rng.random_range(0..total)).collect();
            seeding.seed_trials(Picks::Draws(&draws), ws)?
        } else {
            // Every point sits on a seed: any point is as good.
            let rows: Vec<u32> = (0..trials).map(|_| rng.random_range(0..n) as u32).collect();
            seeding.seed_trials(Picks::Seeds(Seeds::Rows(&rows)), ws)?
        };
        let best = (0..trials)
            .min_by_key(|&t| (step.potentials[t], t))
            .expect("at least two trials");
        seeding.seed_accept(best);
        chosen.push(step.candidates[best] as usize);
        total = step.potentials[best];
    }
    Ok(chosen)
}

/// k-means‖ (Bahmani et al. 2012): a uniform first seed, then [`PARALLEL_ROUNDS`] rounds that
/// each sample every point independently with probability `min(1, ℓ·weight/φ)`, ℓ = 2k, by a
/// counter-based uniform of (seed, round, row); the candidates, weighted by the points nearest
/// to each, are then reduced to `k` by weighted greedy k-means++ on the host's CPU. Returns the
/// chosen rows.
pub(super) fn kmeans_parallel(
    seeding: &mut dyn Lloyd,
    setup: &Setup,
    k: usize,
    metric: Metric,
    rng: &mut ChaCha8Rng,
) -> Result<Vec<usize>> {
    let (n, d, ws) = (setup.n, setup.d, setup.weights);
    let first = rng.random_range(0..n) as u32;
    let stream: u64 = rng.random();
    let ell = 2 * k as u64;
    let mut candidates = vec![first];
    let mut phi = seeding.seed_nearest(Seeds::Rows(&candidates), 0, true, ws)?;
    for round in 0..PARALLEL_ROUNDS {
        if phi == 0 {
            break;
        }
        // A candidate has weight 0, so it is never sampled again.
        let new = seeding.seed_sample(stream, round, ell, phi, ws)?;
        if !new.is_empty() {
            phi = seeding.seed_nearest(Seeds::Rows(&new), candidates.len() as u32, false, ws)?;
            candidates.extend(new);
        }
    }
    if candidates.len() < k {
        // Too few points with weight (duplicates): distinct random others make up the number.
        let mut taken = vec![false; n];
        candidates.iter().for_each(|&c| taken[c as usize] = true);
        let free: Vec<u32> = (0..n as u32).filter(|&i| !taken[i as usize]).collect();
        let extra: Vec<u32> = sample(rng, free.len(), k - candidates.len())
            .into_iter()
            .map(|i| free[i])
            .collect();
        seeding.seed_nearest(Seeds::Rows(&extra), candidates.len() as u32, false, ws)?;
        candidates.extend(extra);
    }
    let counts = seeding.seed_owner_counts(candidates.len())?;
    let rows: Vec<usize> = candidates.iter().map(|&c| c as usize).collect();
    let local = seeding.gather(&rows)?;
    let mut weighted = Seeder::new(&local, d, metric.assign(), 0).weighted(counts);
    let picked = kmeans_plus_plus(&mut weighted, rows.len(), k, ws, rng)?;
    Ok(picked.into_iter().map(|p| rows[p]).collect())
}
