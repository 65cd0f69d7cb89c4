//! Helpers of the cross-backend tests: the GPU-or-skip gate and reproducible test data.

use kmeans_knn::{Device, KMeansModel, KMeansParams, MatrixView};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::Write;

/// The GPU device when one is usable. Without one, writes a visible "SKIPPED" line to stderr
/// (bypassing the test harness's capture) and returns `None` — unless
/// `KMEANS_KNN_REQUIRE_GPU=1`, in which case the test fails.
pub fn gpu(test: &str) -> Option<Device> {
    match Device::Cuda(0).resolve() {
        Ok(device) => Some(device),
        Err(err) => {
            if std::env::var("KMEANS_KNN_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                panic!("{test}: KMEANS_KNN_REQUIRE_GPU=1 but {err}");
            }
            let _ = writeln!(std::io::stderr(), "SKIPPED (no GPU): {test}: {err}");
            None
        }
    }
}

/// `n × d` uniform values in `[-1, 1)`.
pub fn uniform(n: usize, d: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n * d).map(|_| rng.random_range(-1.0..1.0)).collect()
}

/// `n × d` integer-valued points in `0..levels`: many exact duplicates and distance ties.
pub fn lattice(n: usize, d: usize, levels: u32, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n * d)
        .map(|_| rng.random_range(0..levels) as f32)
        .collect()
}

/// `k` well-separated Gaussian-ish blobs of `per` points each in `d` dimensions, with the true
/// label of every point. Centres sit on a lattice 100 apart; points within ±1 of their centre.
pub fn blobs(k: usize, per: usize, d: usize, seed: u64) -> (Vec<f32>, Vec<u32>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut data = Vec::with_capacity(k * per * d);
    let mut labels = Vec::with_capacity(k * per);
    for i in 0..k * per {
        let c = i % k;
        for j in 0..d {
            let centre = if j == 0 {
                c as f32 * 100.0
            } else {
                ((c * 7 + j) % 5) as f32 * 100.0
            };
            data.push(centre + rng.random_range(-1.0..1.0));
        }
        labels.push(c as u32);
    }
    (data, labels)
}

/// Whether two labelings describe the same partition (equal up to renaming clusters).
pub fn same_partition(a: &[u32], b: &[u32]) -> bool {
    use std::collections::HashMap;
    let mut ab = HashMap::new();
    let mut ba = HashMap::new();
    a.iter()
        .zip(b)
        .all(|(&x, &y)| *ab.entry(x).or_insert(y) == y && *ba.entry(y).or_insert(x) == x)
}

/// Asserts that two fits are the same bit for bit: labels, centroids, inertia, iterations,
/// convergence and cluster sizes.
pub fn assert_same_fit(case: &str, a: &KMeansModel, b: &KMeansModel) {
    let mismatches = a
        .labels
        .iter()
        .zip(&b.labels)
        .filter(|(x, y)| x != y)
        .count();
    assert_eq!(
        a.labels.len(),
        b.labels.len(),
        "{case}: label counts differ"
    );
    assert_eq!(mismatches, 0, "{case}: {mismatches} label mismatches");
    let bits = |m: &KMeansModel| m.centroids.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(a), bits(b), "{case}: centroids differ");
    assert_eq!(
        a.inertia.to_bits(),
        b.inertia.to_bits(),
        "{case}: inertia {} vs {}",
        a.inertia,
        b.inertia
    );
    assert_eq!(a.n_iter, b.n_iter, "{case}: iteration counts differ");
    assert_eq!(a.converged, b.converged, "{case}");
    assert_eq!(a.cluster_sizes, b.cluster_sizes, "{case}");
}

/// Sample weights for `n` rows: integers 0..=3 (every fourth row or so weighs nothing) when
/// `integer`, else fractions that no power of two makes exact, with zeros too.
pub fn sample_weights(n: usize, integer: bool, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let w = rng.random_range(0..4u32) as f32;
            if integer || w == 0.0 {
                w
            } else {
                w * 0.3 + rng.random_range(0.0..0.1f32)
            }
        })
        .collect()
}

/// The rows of `data` (`d` columns) repeated as many times as their integer weights say, in
/// order: what integer sample weights stand for.
pub fn repeat_rows(data: &[f32], d: usize, weights: &[f32]) -> Vec<f32> {
    data.chunks_exact(d)
        .zip(weights)
        .flat_map(|(row, &w)| std::iter::repeat_n(row, w as usize).flatten().copied())
        .collect()
}

/// The fit of `data` (rows of `d`) under `params`, weighted by `weights` when given.
pub fn fit_rows(
    data: &[f32],
    d: usize,
    params: &KMeansParams,
    weights: Option<&[f32]>,
) -> KMeansModel {
    let x = MatrixView::new(data, data.len() / d, d).unwrap();
    match weights {
        Some(w) => params.fit_weighted(x, w),
        None => params.fit(x),
    }
    .unwrap()
}

/// `n × d` uniform rows (seed 91) of which `copies`, from the eighth on, are one point `p`
/// (returned too): queries on `p` have more candidates than a prefilter's list holds.
pub fn copies_of_one_point(n: usize, copies: usize, d: usize) -> (Vec<f32>, Vec<f32>) {
    let mut train = uniform(n, d, 91);
    let p: Vec<f32> = (0..d).map(|j| 0.25 + j as f32 * 0.01).collect();
    for row in train.chunks_mut(d).skip(7).take(copies) {
        row.copy_from_slice(&p);
    }
    (train, p)
}
