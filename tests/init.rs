//! Seeding (k-means++ with batched trials, k-means‖): the GPU picks the same centroids as the
//! CPU bit for bit, and the whole fits agree; seeding is reproducible; k-means‖ is as good as
//! k-means++ on well-separated data.

use kmeans_knn::{Device, Init, KMeans, KMeansParams, MatrixView, Metric};
use kmeans_knn_tests::{blobs, gpu, lattice, uniform};

type Case = (&'static str, Vec<f32>, usize, usize, KMeansParams);

/// Awkward shapes: n not a multiple of the block, d = 1, d > the staged dimensions (several
/// tiles, the last one partial), k = 1, k = n, duplicates with ties (the weight runs out and
/// the host picks the last seeds), L1, cosine, more blocks than a block has threads (the
/// draws are located in two rounds), many steps; each with both seedings.
fn cases() -> Vec<Case> {
    let p = |k: usize| KMeans::params(k).seed(11).max_iter(30);
    let shapes: Vec<(&str, Vec<f32>, usize, usize, KMeansParams)> = vec![
        ("n=1000 d=3 k=7", uniform(1000, 3, 1), 1000, 3, p(7)),
        ("n=257 d=1 k=4", uniform(257, 1, 2), 257, 1, p(4)),
        ("n=300 d=70 k=9", uniform(300, 70, 3), 300, 70, p(9)),
        ("k=1 n=333 d=5", uniform(333, 5, 4), 333, 5, p(1)),
        ("k=n=61 d=3", uniform(61, 3, 5), 61, 3, p(61)),
        (
            "lattice n=900 d=2 k=12",
            lattice(900, 2, 3, 6),
            900,
            2,
            p(12),
        ),
        ("lattice k=n=40 d=1", lattice(40, 1, 2, 7), 40, 1, p(40)),
        (
            "L1 n=700 d=6 k=10",
            uniform(700, 6, 8),
            700,
            6,
            p(10).metric(Metric::L1),
        ),
        (
            "L1 lattice n=500 d=3 k=20",
            lattice(500, 3, 4, 9),
            500,
            3,
            p(20).metric(Metric::L1),
        ),
        (
            "cosine n=600 d=4 k=9",
            uniform(600, 4, 10),
            600,
            4,
            p(9).metric(Metric::Cosine),
        ),
        (
            "blocks n=66000 d=2 k=24",
            uniform(66_000, 2, 11),
            66_000,
            2,
            p(24),
        ),
        (
            "steps n=1200 d=75 k=100",
            uniform(1200, 75, 12),
            1200,
            75,
            p(100),
        ),
    ];
    let mut out = vec![];
    for (name, data, n, d, params) in shapes {
        out.push((
            name,
            data.clone(),
            n,
            d,
            params.clone().init(Init::KMeansPlusPlus),
        ));
        out.push((name, data, n, d, params.init(Init::KMeansParallel)));
    }
    out
}

fn seeds(data: &[f32], n: usize, d: usize, params: &KMeansParams, device: Device) -> Vec<f32> {
    params
        .clone()
        .device(device)
        .initial_centroids(MatrixView::new(data, n, d).unwrap())
        .unwrap()
}

fn check_gpu_matches_cpu(test: &str, cases: Vec<Case>) {
    let Some(device) = gpu(test) else { return };
    for (i, (name, data, n, d, params)) in cases.into_iter().enumerate() {
        let init = if i % 2 == 0 { "kmeans++" } else { "kmeans||" };
        let case = format!("{name} {init}");
        let cpu = seeds(&data, n, d, &params, Device::Cpu);
        let dev = seeds(&data, n, d, &params, device);
        assert_eq!(cpu, dev, "{case}: seeds differ");
        let x = || MatrixView::new(&data, n, d).unwrap();
        let a = params.clone().device(Device::Cpu).fit(x()).unwrap();
        let b = params.clone().device(device).fit(x()).unwrap();
        assert!(b.device.starts_with("cuda"), "{case}: ran on {}", b.device);
        assert_eq!(a.centroids, b.centroids, "{case}: fitted centroids differ");
        assert_eq!(a.labels, b.labels, "{case}: labels differ");
        assert_eq!(a.n_iter, b.n_iter, "{case}");
    }
}

#[test]
fn gpu_seeding_matches_cpu() {
    check_gpu_matches_cpu("gpu_seeding_matches_cpu", cases());
}

/// Small shapes for compute-sanitizer: every seeding kernel, both metrics, with restarts, the
/// two-round locate and the device loop's stop when the weight runs out.
#[test]
fn sanitize_seeding_kernels() {
    let p = |init| KMeans::params(5).seed(2).max_iter(3).n_init(2).init(init);
    let small: Vec<Case> = vec![
        ("pp", uniform(300, 37, 1), 300, 37, p(Init::KMeansPlusPlus)),
        ("par", uniform(300, 37, 1), 300, 37, p(Init::KMeansParallel)),
        (
            "pp l1",
            uniform(130, 2, 2),
            130,
            2,
            p(Init::KMeansPlusPlus).metric(Metric::L1),
        ),
        (
            "par l1",
            lattice(130, 2, 3, 2),
            130,
            2,
            p(Init::KMeansParallel).metric(Metric::L1),
        ),
        (
            "pp blocks",
            uniform(66_000, 2, 3),
            66_000,
            2,
            p(Init::KMeansPlusPlus),
        ),
        (
            "pp runs out",
            lattice(40, 1, 2, 4),
            40,
            1,
            p(Init::KMeansPlusPlus),
        ),
    ];
    check_gpu_matches_cpu("sanitize_seeding_kernels", small);
}

#[test]
fn seeding_is_reproducible_and_seed_dependent() {
    for (name, data, n, d, params) in cases() {
        let a = seeds(&data, n, d, &params, Device::Cpu);
        let b = seeds(&data, n, d, &params, Device::Cpu);
        assert_eq!(a, b, "{name}");
        assert_eq!(a.len(), params.k() * d, "{name}");
        // Every seed is a data point (cosine seeds from the unit rows).
        if name.starts_with("cosine") {
            continue;
        }
        for c in a.chunks_exact(d) {
            assert!(
                data.chunks_exact(d).any(|r| r == c),
                "{name}: seed is not a point"
            );
        }
    }
    let data = uniform(2000, 4, 3);
    let x = || MatrixView::new(&data, 2000, 4).unwrap();
    for init in [Init::KMeansPlusPlus, Init::KMeansParallel] {
        let p = KMeans::params(8).init(init).device(Device::Cpu);
        let s1 = p.clone().seed(1).initial_centroids(x()).unwrap();
        let s2 = p.seed(2).initial_centroids(x()).unwrap();
        assert_ne!(s1, s2);
    }
}

/// k = n on distinct points: every point becomes a seed exactly once.
#[test]
fn seeding_with_k_equal_n_takes_every_distinct_point() {
    let data = uniform(50, 3, 4);
    let x = || MatrixView::new(&data, 50, 3).unwrap();
    for init in [Init::KMeansPlusPlus, Init::KMeansParallel] {
        let s = KMeans::params(50)
            .init(init)
            .device(Device::Cpu)
            .initial_centroids(x())
            .unwrap();
        let mut rows: Vec<Vec<u32>> = s
            .chunks_exact(3)
            .map(|c| c.iter().map(|v| v.to_bits()).collect())
            .collect();
        rows.sort();
        rows.dedup();
        assert_eq!(rows.len(), 50);
    }
}

#[test]
fn kmeans_parallel_is_as_good_as_kmeans_plus_plus_on_blobs() {
    let (data, _) = blobs(20, 200, 5, 12);
    let n = 4000;
    let x = || MatrixView::new(&data, n, 5).unwrap();
    let fit = |init, seed| {
        KMeans::params(20)
            .init(init)
            .seed(seed)
            .device(Device::Cpu)
            .fit(x())
            .unwrap()
            .inertia
    };
    let (mut pp, mut par) = (0.0, 0.0);
    for seed in 0..5 {
        pp += fit(Init::KMeansPlusPlus, seed);
        par += fit(Init::KMeansParallel, seed);
    }
    assert!(par <= 1.05 * pp, "k-means|| {par} vs k-means++ {pp}");
}

#[test]
fn initial_centroids_rejects_random_labels() {
    let data = uniform(10, 2, 1);
    let x = || MatrixView::new(&data, 10, 2).unwrap();
    let err = KMeans::params(2)
        .init(Init::RandomLabels)
        .device(Device::Cpu)
        .initial_centroids(x())
        .unwrap_err();
    assert!(err.to_string().contains("random-labels"), "{err}");
}
