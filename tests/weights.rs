//! k-means with sample weights: integer weights give exactly the fit of the data with rows
//! repeated (on the CPU and on the GPU), weights of one give exactly the unweighted fit,
//! fractional weights give the weighted means of a plain reference, the GPU matches the CPU bit
//! for bit on awkward shapes, and bad weights are typed errors.

use kmeans_knn::{
    Device, EmptyClusters, Error, Init, KMeans, KMeansModel, KMeansParams, MatrixView, Metric,
};
use kmeans_knn_tests::{
    assert_same_fit, fit_rows as fit, gpu, lattice, repeat_rows, same_partition, sample_weights,
    uniform,
};

type Case = (&'static str, Vec<f32>, usize, KMeansParams);

/// Shapes for the repetition test (inits that draw by weight: k-means++ and given centroids;
/// k-means‖ samples rows independently and random points draws distinct rows, so neither
/// repeats): d = 1, k = 1, ties, L1, cosine, an empty cluster relocated, restarts, and on the GPU
/// the small step, the tiled assign with per-block and with global sums.
fn repetition_cases() -> Vec<Case> {
    let p = |k| KMeans::params(k).seed(4).max_iter(40);
    vec![
        ("n=500 d=3 k=6", uniform(500, 3, 1), 3, p(6)),
        ("d=1 n=257 k=4", uniform(257, 1, 2), 1, p(4)),
        ("k=1 n=90 d=5", uniform(90, 5, 3), 5, p(1)),
        ("lattice ties n=400 d=2 k=8", lattice(400, 2, 4, 4), 2, p(8)),
        (
            "l1 n=300 d=5 k=7",
            uniform(300, 5, 5),
            5,
            p(7).metric(Metric::L1),
        ),
        (
            "cosine n=300 d=6 k=5",
            uniform(300, 6, 6),
            6,
            p(5).metric(Metric::Cosine),
        ),
        (
            "relocated empty cluster n=400 d=2 k=3",
            uniform(400, 2, 7),
            2,
            p(3).init(Init::Centroids(vec![-0.5, 0.0, 0.5, 0.0, 1000.0, 1000.0])),
        ),
        (
            "n_init=3 n=300 d=4 k=5",
            uniform(300, 4, 8),
            4,
            p(5).n_init(3),
        ),
        ("tiled n=300 d=120 k=20", uniform(300, 120, 9), 120, p(20)),
        (
            "global sums n=400 d=100 k=100",
            uniform(400, 100, 10),
            100,
            p(100),
        ),
    ]
}

/// Integer weights (zeros included) against the rows repeated: the same fit bit for bit, every
/// repeated row labelled as its original.
fn check_repetition(device: Device) {
    for (case, data, d, params) in repetition_cases() {
        let params = params.device(device);
        let n = data.len() / d;
        let w = sample_weights(n, true, n as u64);
        let repeated = repeat_rows(&data, d, &w);
        let weighted = fit(&data, d, &params, Some(&w));
        let plain = fit(&repeated, d, &params, None);
        // The weighted fit's labels, each as often as its weight, are the repeated fit's.
        let expanded: Vec<u32> = weighted
            .labels
            .iter()
            .zip(&w)
            .flat_map(|(&l, &w)| std::iter::repeat_n(l, w as usize))
            .collect();
        assert_eq!(expanded, plain.labels, "{case}: labels");
        let bits = |m: &KMeansModel| m.centroids.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&weighted), bits(&plain), "{case}: centroids");
        assert_eq!(
            weighted.inertia.to_bits(),
            plain.inertia.to_bits(),
            "{case}: inertia {} vs {}",
            weighted.inertia,
            plain.inertia
        );
        assert_eq!(weighted.n_iter, plain.n_iter, "{case}: iterations");
        assert_eq!(weighted.converged, plain.converged, "{case}");
    }
}

#[test]
fn integer_weights_equal_repeated_rows_on_the_cpu() {
    check_repetition(Device::Cpu);
}

#[test]
fn integer_weights_equal_repeated_rows_on_the_gpu() {
    if let Some(device) = gpu("integer_weights_equal_repeated_rows_on_the_gpu") {
        check_repetition(device);
    }
}

/// Two clusters start empty and the farthest point weighs 3: like its three copies, it takes
/// both of them in turn.
#[test]
fn a_heavy_farthest_point_takes_several_empty_clusters_like_its_copies() {
    let mut data = uniform(60, 2, 14);
    data[..2].copy_from_slice(&[9.0, 9.0]);
    let mut w = vec![1.0f32; 60];
    w[0] = 3.0;
    let start = vec![-0.5, 0.0, 0.5, 0.0, 1000.0, 1000.0, 2000.0, 2000.0];
    for device in [Device::Cpu].into_iter().chain(gpu(
        "a_heavy_farthest_point_takes_several_empty_clusters_like_its_copies",
    )) {
        let params = KMeans::params(4)
            .init(Init::Centroids(start.clone()))
            .max_iter(1)
            .device(device);
        let weighted = fit(&data, 2, &params, Some(&w));
        let plain = fit(&repeat_rows(&data, 2, &w), 2, &params, None);
        let bits = |m: &KMeansModel| m.centroids.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&weighted), bits(&plain), "{device:?}");
        assert_eq!(weighted.centroid(2), &[9.0, 9.0]);
        assert_eq!(weighted.centroid(3), &[9.0, 9.0]);
    }
}

#[test]
fn weights_of_one_are_the_unweighted_fit() {
    let (n, d) = (700, 4);
    let data = uniform(n, d, 11);
    for init in [
        Init::KMeansPlusPlus,
        Init::KMeansParallel,
        Init::RandomPoints,
        Init::RandomLabels,
    ] {
        for metric in [Metric::L2, Metric::L1, Metric::Cosine] {
            let params = KMeans::params(9)
                .init(init.clone())
                .metric(metric)
                .n_init(2)
                .device(Device::Cpu);
            let case = format!("{init:?} {metric}");
            let ones = fit(&data, d, &params, Some(&vec![1.0; n]));
            assert_same_fit(&case, &ones, &fit(&data, d, &params, None));
        }
    }
}

/// Weighted Lloyd in f64, written out plainly, from the same start for `iters` iterations.
fn reference(data: &[f32], d: usize, w: &[f32], start: &[f32], iters: usize) -> (Vec<f64>, f64) {
    let k = start.len() / d;
    let mut c: Vec<f64> = start.iter().map(|&v| v as f64).collect();
    let nearest = |c: &[f64], row: &[f32]| {
        (0..k)
            .map(|j| {
                let dist: f64 = row
                    .iter()
                    .zip(&c[j * d..(j + 1) * d])
                    .map(|(&x, &y)| (x as f64 - y) * (x as f64 - y))
                    .sum();
                (dist, j)
            })
            .fold((f64::INFINITY, 0), |a, b| if b.0 < a.0 { b } else { a })
    };
    for _ in 0..iters {
        let (mut sums, mut weight) = (vec![0f64; k * d], vec![0f64; k]);
        for (row, &wi) in data.chunks_exact(d).zip(w) {
            let (_, j) = nearest(&c, row);
            weight[j] += wi as f64;
            for q in 0..d {
                sums[j * d + q] += wi as f64 * row[q] as f64;
            }
        }
        for j in (0..k).filter(|&j| weight[j] > 0.0) {
            for q in 0..d {
                c[j * d + q] = sums[j * d + q] / weight[j];
            }
        }
    }
    let inertia = data
        .chunks_exact(d)
        .zip(w)
        .map(|(row, &wi)| wi as f64 * nearest(&c, row).0)
        .sum();
    (c, inertia)
}

#[test]
fn fractional_weights_give_weighted_means() {
    let (n, d, k) = (600, 3, 5);
    let data = uniform(n, d, 12);
    let w = sample_weights(n, false, 12);
    let start = data[..k * d].to_vec();
    let params = KMeans::params(k)
        .init(Init::Centroids(start.clone()))
        .max_iter(8)
        .tol(0.0)
        .device(Device::Cpu);
    let model = fit(&data, d, &params, Some(&w));
    let (want, inertia) = reference(&data, d, &w, &start, model.n_iter);
    for (got, want) in model.centroids.iter().zip(&want) {
        assert!((*got as f64 - want).abs() <= 1e-5, "{got} vs {want}");
    }
    let rel = (model.inertia - inertia).abs() / inertia;
    assert!(rel <= 1e-5, "inertia {} vs {inertia}", model.inertia);
}

#[test]
fn zero_weights_leave_rows_out_but_label_them() {
    let (n, d) = (400, 2);
    let data = uniform(n, d, 13);
    let mut w = vec![1.0f32; n];
    // Far-away rows of weight 0: they move no centroid and are never seeds.
    let mut far = data.clone();
    for i in (0..n).step_by(5) {
        w[i] = 0.0;
        far[i * d] += 1e6;
    }
    let params = KMeans::params(4).n_init(2).device(Device::Cpu);
    let weighted = fit(&far, d, &params, Some(&w));
    let kept: Vec<f32> = repeat_rows(&far, d, &w);
    let plain = fit(&kept, d, &params, None);
    let bits = |m: &KMeansModel| m.centroids.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&weighted), bits(&plain));
    assert_eq!(weighted.inertia.to_bits(), plain.inertia.to_bits());
    let x = MatrixView::new(&far, n, d).unwrap();
    assert_eq!(
        weighted.predict_on(&x, Device::Cpu).unwrap(),
        weighted.labels
    );
    assert!(weighted.centroids.iter().all(|v| v.abs() <= 1.0));
}

#[test]
fn heavier_points_pull_centroids() {
    // Two groups; weighting one point heavily moves its cluster's centroid onto it.
    let data = [0.0f32, 1.0, 2.0, 10.0, 11.0, 12.0];
    let w = [1.0, 1.0, 1e6, 1.0, 1.0, 1.0];
    let params = KMeans::params(2).device(Device::Cpu);
    let model = fit(&data, 1, &params, Some(&w));
    let low = model.labels[0] as usize;
    assert!(same_partition(&model.labels, &[0, 0, 0, 1, 1, 1]));
    assert!(
        (model.centroid(low)[0] - 2.0).abs() < 1e-4,
        "{:?}",
        model.centroids
    );
}

#[test]
fn bad_weights_are_typed_errors() {
    let data = uniform(10, 2, 1);
    let x = || MatrixView::new(&data, 10, 2).unwrap();
    let params = KMeans::params(3).device(Device::Cpu);
    let err = |w: &[f32]| params.fit_weighted(x(), w).unwrap_err();
    assert!(matches!(
        err(&[1.0; 9]),
        Error::SampleWeightCount {
            weights: 9,
            rows: 10
        }
    ));
    let mut w = vec![1.0f32; 10];
    for (bad, row) in [(-0.5f32, 4), (f32::NAN, 7), (f32::INFINITY, 0)] {
        w.fill(1.0);
        w[row] = bad;
        match err(&w) {
            Error::InvalidSampleWeight { row: r, .. } => assert_eq!(r, row),
            other => panic!("{other:?}"),
        }
        assert!(err(&w).to_string().contains(&format!("row {row}")));
    }
    assert!(matches!(err(&[0.0; 10]), Error::ZeroSampleWeights));
    assert!(err(&[0.0; 10]).to_string().contains("weight is zero"));
    let two = [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.5, 0.0];
    let too_few = err(&two).to_string();
    assert!(
        too_few.contains("k = 3 is larger than the number of points with a positive weight (2)"),
        "{too_few}"
    );
    // Data errors come first, as without weights.
    let bad_data = vec![f32::NAN; 20];
    assert!(matches!(
        params.fit_weighted(MatrixView::new(&bad_data, 10, 2).unwrap(), &[1.0; 10]),
        Err(Error::NonFinite { .. })
    ));
}

/// Shapes that run every k-means kernel with weights: n not a multiple of the block, d = 1, k =
/// 1, k = n, duplicates and ties, every small-step bucket, the tiled assign (narrow and wide, L2
/// and L1) with per-block and with global sums, cosine, every initialisation, both empty-cluster
/// policies.
fn gpu_cases() -> Vec<Case> {
    let p = |k| KMeans::params(k).seed(5).max_iter(30);
    let far = || Init::Centroids(vec![-0.5, 0.0, 0.5, 0.0, 1000.0, 1000.0]);
    vec![
        ("n=1000 d=3 k=5", uniform(1000, 3, 1), 3, p(5)),
        ("n=1 d=1 k=1", vec![4.5], 1, p(1)),
        ("n=257 d=1 k=3", uniform(257, 1, 2), 1, p(3)),
        ("k=n=97 d=4", uniform(97, 4, 4), 4, p(97)),
        (
            "lattice ties n=2000 d=2 k=10",
            lattice(2000, 2, 4, 6),
            2,
            p(10),
        ),
        ("small d16 n=900 d=9 k=16", uniform(900, 9, 22), 9, p(16)),
        ("small d32 n=800 d=20 k=30", uniform(800, 20, 15), 20, p(30)),
        ("small d96 n=700 d=75 k=20", uniform(700, 75, 19), 75, p(20)),
        (
            "small d96 l1 n=600 d=50 k=12",
            uniform(600, 50, 16),
            50,
            p(12).metric(Metric::L1),
        ),
        (
            "tiled narrow n=500 d=120 k=5",
            uniform(500, 120, 18),
            120,
            p(5),
        ),
        (
            "tiled wide n=700 d=100 k=40",
            uniform(700, 100, 17),
            100,
            p(40),
        ),
        (
            "tiled l1 n=700 d=100 k=40",
            uniform(700, 100, 17),
            100,
            p(40).metric(Metric::L1),
        ),
        (
            "global sums n=1500 d=100 k=100",
            uniform(1500, 100, 7),
            100,
            p(100),
        ),
        (
            "global tile n=40 d=12000 k=3",
            uniform(40, 12000, 8),
            12000,
            p(3),
        ),
        (
            "cosine n=800 d=5 k=7",
            uniform(800, 5, 23),
            5,
            p(7).metric(Metric::Cosine),
        ),
        (
            "k-means|| n=999 d=5",
            uniform(999, 5, 10),
            5,
            p(8).init(Init::KMeansParallel),
        ),
        (
            "k-means|| l1 n=500 d=3",
            lattice(500, 3, 4, 9),
            3,
            p(20).init(Init::KMeansParallel).metric(Metric::L1),
        ),
        (
            "random points n=999 d=5",
            uniform(999, 5, 10),
            5,
            p(8).init(Init::RandomPoints),
        ),
        (
            "random labels n=999 d=5",
            uniform(999, 5, 11),
            5,
            p(8).init(Init::RandomLabels),
        ),
        ("n_init=3 n=600 d=6", uniform(600, 6, 12), 6, p(6).n_init(3)),
        (
            "keep empty n=400 d=2",
            uniform(400, 2, 13),
            2,
            p(3).init(far()).empty_clusters(EmptyClusters::KeepPrevious),
        ),
        (
            "relocate empty n=400 d=2",
            uniform(400, 2, 13),
            2,
            p(3).init(far()),
        ),
    ]
}

/// Fits every case with integer weights (when `integer`) and with fractional ones on the CPU
/// and on the GPU: the same fit bit for bit.
fn check_gpu_matches_cpu(test: &str, cases: Vec<Case>, integer: bool) {
    let Some(device) = gpu(test) else { return };
    for (case, data, d, params) in cases {
        let n = data.len() / d;
        for integer in [false].into_iter().chain(integer.then_some(true)) {
            let mut w = sample_weights(n, integer, 3);
            // At least k rows of weight (every row when k = n).
            w.iter_mut().take(params.k()).for_each(|v| *v += 1.0);
            let case = format!("{case} integer weights {integer}");
            let cpu = fit(&data, d, &params.clone().device(Device::Cpu), Some(&w));
            let dev = fit(&data, d, &params.clone().device(device), Some(&w));
            assert!(
                dev.device.starts_with("cuda"),
                "{case}: ran on {}",
                dev.device
            );
            assert_same_fit(&case, &cpu, &dev);
        }
    }
}

#[test]
fn gpu_matches_cpu_with_weights() {
    check_gpu_matches_cpu("gpu_matches_cpu_with_weights", gpu_cases(), true);
}

/// Small shapes that run every weighted k-means and seeding kernel; the GPU bundle runs these
/// under compute-sanitizer.
#[test]
fn sanitize_weighted_kmeans_kernels() {
    let small = [
        "n=257 d=1 k=3",
        "small d16 n=900 d=9 k=16",
        "small d96 l1 n=600 d=50 k=12",
        "tiled narrow n=500 d=120 k=5",
        "tiled l1 n=700 d=100 k=40",
        "global sums n=1500 d=100 k=100",
        "cosine n=800 d=5 k=7",
        "k-means|| l1 n=500 d=3",
        "random labels n=999 d=5",
        "relocate empty n=400 d=2",
    ];
    let cases = gpu_cases()
        .into_iter()
        .filter(|c| small.contains(&c.0))
        .map(|(case, data, d, params)| (case, data, d, params.max_iter(3)))
        .collect();
    check_gpu_matches_cpu("sanitize_weighted_kmeans_kernels", cases, false);
}
