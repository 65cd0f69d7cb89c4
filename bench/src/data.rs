//! Benchmark data shared by `gpu-bench` and the CPU criterion benches.

use kmeans_knn::Metric;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

/// One benchmark shape: `n` points of `d` dimensions, `k` clusters, assigned by `metric`.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub name: &'static str,
    pub n: usize,
    pub d: usize,
    pub k: usize,
    pub metric: Metric,
    pub origin: &'static str,
}

impl Case {
    /// Floating-point operations of one assign step (`2·n·k·d`).
    pub fn assign_flops(&self) -> f64 {
        2.0 * (self.n * self.k * self.d) as f64
    }

    /// Bytes of the data, the memory floor's count (`n·d·4`).
    pub fn data_bytes(&self) -> f64 {
        4.0 * (self.n * self.d) as f64
    }

    /// The case's data (uniform in [0, 1), seed 1) and its initial centroids (the first `k` rows).
    pub fn data(&self) -> (Vec<f32>, Vec<f32>) {
        let data = uniform(self.n * self.d, 1);
        let centroids = data[..self.k * self.d].to_vec();
        (data, centroids)
    }
}

/// The benchmark cases; E is GPU-only in practice. C1 is C with the L1 metric, as seed 003 runs
/// it (scikit-learn has no L1 k-means; C is the squared-L2 peer).
pub const CASES: &[Case] = &[
    Case {
        name: "A",
        n: 63_504,
        d: 75,
        k: 80,
        metric: Metric::L2,
        origin: "image patches, 5 × 5 × 3",
    },
    Case {
        name: "B",
        n: 1_000_000,
        d: 9,
        k: 16,
        metric: Metric::L2,
        origin: "colour quantisation",
    },
    Case {
        name: "C",
        n: 1_048_576,
        d: 3,
        k: 255,
        metric: Metric::L2,
        origin: "pixels (seed 003's shape, squared L2)",
    },
    Case {
        name: "C1",
        n: 1_048_576,
        d: 3,
        k: 255,
        metric: Metric::L1,
        origin: "pixels, seed 003's L1 segmentation",
    },
    Case {
        name: "D",
        n: 200_000,
        d: 128,
        k: 1024,
        metric: Metric::L2,
        origin: "embeddings",
    },
    Case {
        name: "E",
        n: 10_000_000,
        d: 128,
        k: 1024,
        metric: Metric::L2,
        origin: "embeddings, large",
    },
    Case {
        name: "E4",
        n: 40_000_000,
        d: 128,
        k: 1024,
        metric: Metric::L2,
        origin: "embeddings, 4 × E (several GPUs)",
    },
];

/// One kNN benchmark shape: `m` queries against `n` training points of `d` dimensions.
#[derive(Clone, Copy, Debug)]
pub struct KnnCase {
    pub name: &'static str,
    pub m: usize,
    pub n: usize,
    pub d: usize,
    pub k: usize,
    pub origin: &'static str,
}

/// The kNN cases: a mid-sized search (1,200 queries × 32,768 × 256) at its k and at a k past its
/// crossover, and a large one; then the mid-sized search's sweep of k (`S1` … `S2048`, with `S`
/// and `S512`) and `F2500`, which run when asked for by name.
pub const KNN_CASES: &[KnnCase] = &[
    KnnCase {
        name: "S",
        m: 1200,
        n: 32_768,
        d: 256,
        k: 25,
        origin: "intrusion-detection sized",
    },
    KnnCase {
        name: "S512",
        m: 1200,
        n: 32_768,
        d: 256,
        k: 512,
        origin: "the same, k = 512",
    },
    KnnCase {
        name: "F",
        m: 10_000,
        n: 1_000_000,
        d: 128,
        k: 100,
        origin: "large",
    },
    s_with_k("S1", 1),
    s_with_k("S100", 100),
    s_with_k("S1024", 1024),
    s_with_k("S2048", 2048),
    KnnCase {
        name: "F2500",
        m: 2_500,
        n: 1_000_000,
        d: 128,
        k: 100,
        origin: "F's first quarter of queries: one GPU's share of F on four copies",
    },
];

/// Case S with another k.
const fn s_with_k(name: &'static str, k: usize) -> KnnCase {
    KnnCase {
        name,
        m: 1200,
        n: 32_768,
        d: 256,
        k,
        origin: "the sweep of k on S",
    }
}

/// The case called `name`.
pub fn case(name: &str) -> Option<&'static Case> {
    CASES.iter().find(|c| c.name == name)
}

/// Uniform values in [0, 1), generated in parallel from per-chunk seeds (reproducible).
pub fn uniform(len: usize, seed: u64) -> Vec<f32> {
    const CHUNK: usize = 1 << 20;
    let mut out = vec![0f32; len];
    out.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(i, chunk)| {
            let mut rng =
                ChaCha8Rng::seed_from_u64(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            chunk.iter_mut().for_each(|v| *v = rng.random());
        });
    out
}
