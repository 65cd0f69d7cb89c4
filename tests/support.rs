//! Helpers of the cross-backend tests: the GPU-or-skip gate and reproducible test data.

use kmeans_knn::Device;
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
