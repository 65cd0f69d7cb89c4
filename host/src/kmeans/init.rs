//! Initial centroids or labels. k-means++ and k-means‖ run on the backend, on the data the
//! [`Lloyd`] object holds, through [`Seeding`]; the random numbers come
//! from the host's ChaCha8 stream, and every choice is made on exact integer weights
//! ([`WeightScale`], times the sample weights' units), so a seed gives the same start on the CPU
//! and the GPU. Rows are drawn by their units (uniformly without sample weights): a row of
//! weight 3 is as likely as three copies of it, and with integer weights k-means++ picks the
//! same points as on the data with rows repeated.

use super::Metric;
use super::weights::Weighting;
use crate::backend::{GreedyPlan, Lloyd, Seeding, Seeds, host_seeding};
use crate::error::{Error, Result};
use crate::matrix::MatrixView;
use kernels_gpu::launch::SEED_CANDIDATES;
use kernels_gpu::seeding::{WeightScale, draw};
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

/// `k` distinct rows, drawn in proportion to their weights (uniformly without weights).
pub(super) fn random_rows(k: usize, weights: &Weighting, rng: &mut ChaCha8Rng) -> Vec<usize> {
    weights.draw_distinct(k, rng)
}

/// `k` distinct points of `data`, drawn as [`random_rows`] draws them.
pub(super) fn random_points(
    data: &MatrixView<'_>,
    k: usize,
    weights: &Weighting,
    rng: &mut ChaCha8Rng,
) -> Vec<f32> {
    gather(data, &random_rows(k, weights, rng))
}

/// The rows at `indices`, row-major.
pub(super) fn gather(data: &MatrixView<'_>, indices: &[usize]) -> Vec<f32> {
    indices
        .iter()
        .flat_map(|&i| data.row(i).iter().copied())
        .collect()
}

/// A uniformly random label for every point.
pub(super) fn random_labels(n: usize, k: usize, rng: &mut ChaCha8Rng) -> Vec<u32> {
    (0..n).map(|_| rng.random_range(0..k as u32)).collect()
}

/// The weight scale for `total` units of weight on points whose coordinates are at most
/// `max_abs` per column: no seeding distance exceeds the distance across that bounding box.
/// Cosine seeds by squared L2 between unit rows (`2 − 2·cos`).
pub(super) fn weight_scale(max_abs: &[f32], total: u64, metric: Metric) -> WeightScale {
    let bound = match metric {
        Metric::L2 | Metric::Cosine => max_abs
            .iter()
            .map(|&m| 4.0 * m as f64 * m as f64)
            .sum::<f64>(),
        Metric::L1 => max_abs.iter().map(|&m| 2.0 * m as f64).sum::<f64>().powi(2),
    };
    WeightScale::new(bound, total as usize)
}

/// The row that a uniform picks when seeding weights cannot (every point already sits on a
/// seed): by sample weight, or uniformly among k-means‖'s candidates.
pub(super) type FallbackRow<'d> = &'d dyn Fn(u64) -> usize;

/// Trials per greedy k-means++ step: `2 + ⌊ln k⌋` (as scikit-learn), within one pass's
/// candidates (the previous winner takes a slot).
fn trials_for(k: usize) -> usize {
    (2 + (k as f64).ln().floor() as usize).min(SEED_CANDIDATES - 1)
}

/// Greedy k-means++ over the rows of `seeding`, weighted by `weights`: the first seed drawn by
/// sample weight, then as [`greedy_from`]. Returns the chosen rows.
pub(super) fn kmeans_plus_plus(
    seeding: &mut dyn Seeding,
    weights: &Weighting,
    k: usize,
    ws: WeightScale,
    rng: &mut ChaCha8Rng,
) -> Result<Vec<usize>> {
    let first = weights.draw(rng);
    let by_weight = |u: u64| weights.row_of(draw(u, weights.total()));
    greedy_from(seeding, first, &by_weight, k, ws, rng)
}

/// Greedy k-means++ over the rows of `seeding` from the seed `first`: each further seed the best
/// of `2 + ⌊ln k⌋` candidates drawn with probability proportional to their integer weight, the
/// lowest potential winning (ties to the earliest trial). Every step's uniforms are taken from
/// `rng` up front, `trials` per step, so the backend can run the steps without a round trip: a
/// candidate is the first point whose cumulative weight exceeds
/// [`draw`]`(uniform, total)`. Once no weight is left, seed `s` is `fallback` of its step's
/// first uniform. Returns the chosen rows.
fn greedy_from(
    seeding: &mut dyn Seeding,
    first: usize,
    fallback: FallbackRow<'_>,
    k: usize,
    ws: WeightScale,
    rng: &mut ChaCha8Rng,
) -> Result<Vec<usize>> {
    let trials = trials_for(k);
    let uniforms: Vec<u64> = (0..k.saturating_sub(1) * trials)
        .map(|_| rng.random())
        .collect();
    let first = u32::try_from(first).map_err(|_| Error::invalid("rows", "too many rows"))?;
    let total = seeding.seed_nearest(Seeds::Rows(&[first]), 0, true, ws)?;
    let mut chosen: Vec<usize> = if total > 0 && k > 1 {
        let plan = GreedyPlan {
            first,
            total,
            k,
            trials,
            uniforms: &uniforms,
        };
        let rows = seeding.seed_greedy(&plan, ws)?;
        if rows.first() != Some(&first) || rows.len() > k {
            return Err(Error::invalid(
                "seeding",
                "the backend's k-means++ loop went astray",
            ));
        }
        rows.into_iter().map(|r| r as usize).collect()
    } else {
        vec![first as usize]
    };
    // Every point sits on a seed: all trials weigh 0, and the first of each step wins.
    while chosen.len() < k {
        chosen.push(fallback(uniforms[(chosen.len() - 1) * trials]));
    }
    Ok(chosen)
}

/// k-means‖ (Bahmani et al. 2012): a first seed drawn by sample weight, then
/// [`PARALLEL_ROUNDS`] rounds that each sample every point independently with probability
/// `min(1, ℓ·weight/φ)`, ℓ = 2k, by a counter-based uniform of (seed, round, row); the
/// candidates, weighted by the units of the points nearest to each, are then reduced to `k` by
/// weighted greedy k-means++ (its first seed uniform among them), on the backend where it seeds
/// candidates itself, else on the host's CPU. Returns the chosen rows.
pub(super) fn kmeans_parallel(
    seeding: &mut dyn Lloyd,
    k: usize,
    metric: Metric,
    d: usize,
    ws: WeightScale,
    weights: &Weighting,
    rng: &mut ChaCha8Rng,
) -> Result<Vec<usize>> {
    let n = weights.rows();
    let first = weights.draw(rng) as u32;
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
        // Too few points with seeding weight (duplicates): distinct random others with sample
        // weight (there are at least k) make up the number.
        let mut taken = vec![false; n];
        candidates.iter().for_each(|&c| taken[c as usize] = true);
        let free: Vec<u32> = (0..n as u32)
            .filter(|&i| !taken[i as usize] && weights.is_positive(i as usize))
            .collect();
        let extra: Vec<u32> = sample(rng, free.len(), k - candidates.len())
            .into_iter()
            .map(|i| free[i])
            .collect();
        seeding.seed_nearest(Seeds::Rows(&extra), candidates.len() as u32, false, ws)?;
        candidates.extend(extra);
    }
    let units = seeding.seed_owner_weights(candidates.len())?;
    let m = candidates.len();
    let first = rng.random_range(0..m);
    let uniform = |u: u64| draw(u, m as u64) as usize;
    let rows_of = |picked: Vec<usize>| picked.into_iter().map(|p| candidates[p] as usize).collect();
    if let Some(mut on_backend) = seeding.seed_candidates(&candidates, &units)? {
        let picked = greedy_from(on_backend.as_mut(), first, &uniform, k, ws, rng)?;
        return Ok(rows_of(picked));
    }
    let local = seeding.gather(&candidates.iter().map(|&c| c as usize).collect::<Vec<_>>())?;
    let mut weighted = host_seeding(&local, d, metric.assign(), units);
    let picked = greedy_from(weighted.as_mut(), first, &uniform, k, ws, rng)?;
    Ok(rows_of(picked))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::Seeder;
    use crate::backend::greedy_steps;
    use crate::device::Device;
    use crate::kmeans::KMeans;
    use crate::kmeans::KMeansParams;
    use crate::kmeans::prepare::Prepared;
    use kernels_gpu::math::AssignMetric;
    use rand::SeedableRng;

    fn uniforms(count: usize, seed: u64) -> Vec<u64> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..count).map(|_| rng.random()).collect()
    }

    /// Reproducible values in `[-1, 1)`, or integers `0..levels` (duplicates and ties).
    fn points(count: usize, levels: u32, seed: u64) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..count)
            .map(|_| match levels {
                0 => rng.random_range(-1.0..1.0),
                l => rng.random_range(0..l) as f32,
            })
            .collect()
    }

    #[test]
    fn steps_stop_when_every_point_sits_on_a_seed() {
        // Three distinct points, four copies each: the third seed leaves no weight.
        let x: Vec<f32> = (0..12).map(|i| (i % 3) as f32).collect();
        let ws = WeightScale::new(4.0, 12);
        let mut seeder = Seeder::new(&x, 1, AssignMetric::SqL2, 0);
        let total = seeder.seed_nearest(Seeds::Rows(&[4]), 0, true, ws).unwrap();
        let (k, trials) = (6, trials_for(6));
        let uniforms = uniforms((k - 1) * trials, 3);
        let plan = GreedyPlan {
            first: 4,
            total,
            k,
            trials,
            uniforms: &uniforms,
        };
        let rows = greedy_steps(&mut seeder, &plan, ws).unwrap();
        let mut values: Vec<u32> = rows.iter().map(|&r| r % 3).collect();
        values.sort();
        assert_eq!(values, [0, 1, 2]);
    }

    /// The GPU, or `None` after a visible skip note (a failure under
    /// `KMEANS_KNN_REQUIRE_GPU=1`), as the cross-backend tests do.
    fn gpu(test: &str) -> Option<Device> {
        match Device::Cuda(0).resolve() {
            Ok(device) => Some(device),
            Err(err) => {
                if std::env::var("KMEANS_KNN_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                    panic!("{test}: KMEANS_KNN_REQUIRE_GPU=1 but {err}");
                }
                eprintln!("SKIPPED (no GPU): {test}: {err}");
                None
            }
        }
    }

    /// The seeds of the backend's own k-means++ loop (or, with `reference`, of the step by step
    /// loop) on `device`.
    fn greedy_seeds(
        device: Device,
        x: &MatrixView<'_>,
        params: &KMeansParams,
        weights: Option<&[f32]>,
        reference: bool,
    ) -> Vec<u32> {
        let prepared = Prepared::new(params, x, weights).unwrap();
        let backend = device.backend().unwrap();
        let mut lloyd = backend
            .lloyd(&prepared.data, &prepared.spec(params))
            .unwrap();
        let (ws, k) = (prepared.seeding, params.k);
        let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
        let first = prepared.weights.draw(&mut rng) as u32;
        let trials = trials_for(k);
        let uniforms: Vec<u64> = (0..(k - 1) * trials).map(|_| rng.random()).collect();
        let total = lloyd
            .seed_nearest(Seeds::Rows(&[first]), 0, true, ws)
            .unwrap();
        let plan = GreedyPlan {
            first,
            total,
            k,
            trials,
            uniforms: &uniforms,
        };
        if reference {
            greedy_steps(lloyd.as_mut(), &plan, ws).unwrap()
        } else {
            lloyd.seed_greedy(&plan, ws).unwrap()
        }
    }

    /// The device loop (`seed_greedy_draw_*` and the trials kernels) chooses what the step by
    /// step loop chooses, and what the CPU chooses: both metrics, sample weights, several
    /// dimension tiles, and a stop when the weight runs out.
    #[test]
    fn gpu_greedy_loop_matches_step_by_step() {
        let Some(device) = gpu("gpu_greedy_loop_matches_step_by_step") else {
            return;
        };
        let weights = points(300, 4, 9);
        type Case<'w> = (Vec<f32>, usize, usize, KMeansParams, Option<&'w [f32]>);
        let cases: Vec<Case<'_>> = vec![
            (
                points(300 * 37, 0, 1),
                300,
                37,
                KMeans::params(9).seed(1),
                None,
            ),
            (points(257, 0, 2), 257, 1, KMeans::params(4).seed(2), None),
            (
                points(300 * 2, 3, 3),
                300,
                2,
                KMeans::params(12).seed(3),
                None,
            ),
            (
                points(300 * 5, 0, 4),
                300,
                5,
                KMeans::params(7).seed(4).metric(crate::kmeans::Metric::L1),
                Some(&weights),
            ),
            (points(40, 2, 5), 40, 1, KMeans::params(6).seed(5), None),
        ];
        for (data, n, d, params, w) in cases {
            let x = MatrixView::new(&data, n, d).unwrap();
            let own = greedy_seeds(device, &x, &params, w, false);
            let steps = greedy_seeds(device, &x, &params, w, true);
            assert_eq!(own, steps, "n={n} d={d} k={}", params.k);
            let cpu = greedy_seeds(Device::Cpu, &x, &params, w, true);
            assert_eq!(own, cpu, "n={n} d={d} k={}: GPU and CPU", params.k);
        }
    }
}
