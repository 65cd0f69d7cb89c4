//! k-means: CPU and GPU agree bit for bit on labels, centroids and inertia; fits are
//! reproducible; bad input gets typed errors.

use kmeans_knn::{
    Device, EmptyClusters, Error, Init, KMeans, KMeansModel, KMeansParams, MatrixView, Metric,
};
use kmeans_knn_tests::{assert_same_fit, blobs, gpu, lattice, same_partition, uniform};

// In this test binary rather than its own: every test binary embeds the kernels (~12 MB), and
// the GPU bundle carries each one.
mod queued;
mod sharded;
mod streamed;

fn fit(data: &[f32], n: usize, d: usize, params: &KMeansParams) -> KMeansModel {
    params.fit(MatrixView::new(data, n, d).unwrap()).unwrap()
}

/// Fits on the CPU and on `gpu`; labels, centroids, inertia (an exact fixed-point sum on both),
/// iteration counts and sizes must be identical.
fn assert_backends_agree(
    case: &str,
    data: &[f32],
    n: usize,
    d: usize,
    params: KMeansParams,
    gpu: Device,
) {
    let cpu = fit(data, n, d, &params.clone().device(Device::Cpu));
    let dev = fit(data, n, d, &params.device(gpu));
    assert!(
        dev.device.starts_with("cuda"),
        "{case}: ran on {}",
        dev.device
    );
    assert_same_fit(case, &cpu, &dev);
}

/// Shapes chosen to hit every kernel path: n not a multiple of the block, d = 1, d = 257, k = 1,
/// k = n, the fused small step for every dimension bucket, the register-tiled assign (narrow and
/// wide, L2 and L1) with per-block sums in shared memory and in global memory (k·d·8 > 48 KiB),
/// duplicates and exact ties.
fn cross_cases() -> Vec<(&'static str, Vec<f32>, usize, usize, KMeansParams)> {
    let p = |k| KMeans::params(k).seed(3).max_iter(50);
    vec![
        ("n=1000 d=3 k=5", uniform(1000, 3, 1), 1000, 3, p(5)),
        ("n=1 d=1 k=1", vec![4.5], 1, 1, p(1)),
        ("n=257 d=1 k=3", uniform(257, 1, 2), 257, 1, p(3)),
        ("n=300 d=257 k=7", uniform(300, 257, 3), 300, 257, p(7)),
        ("k=n=97 d=4", uniform(97, 4, 4), 97, 4, p(97)),
        ("k=1 n=777 d=9", uniform(777, 9, 5), 777, 9, p(1)),
        (
            "lattice ties n=2000 d=2 k=10",
            lattice(2000, 2, 4, 6),
            2000,
            2,
            p(10),
        ),
        (
            "global sums k=100 d=100",
            uniform(1500, 100, 7),
            1500,
            100,
            p(100),
        ),
        (
            "tiled, centroids too big for the small step k=1500 d=30",
            uniform(3000, 30, 14),
            3000,
            30,
            p(1500),
        ),
        (
            "small d32 n=800 d=20 k=30",
            uniform(800, 20, 15),
            800,
            20,
            p(30),
        ),
        (
            "small d96 n=700 d=75 k=20",
            uniform(700, 75, 19),
            700,
            75,
            p(20),
        ),
        (
            "small d96 n=500 d=90 k=9",
            uniform(500, 90, 20),
            500,
            90,
            p(9),
        ),
        (
            // Rows of an even number of quads (padded in shared memory), ties and duplicates.
            "small d96 lattice k=n n=90 d=64 k=90",
            lattice(90, 64, 3, 21),
            90,
            64,
            p(90),
        ),
        (
            "small d96 l1 n=600 d=50 k=12",
            uniform(600, 50, 16),
            600,
            50,
            p(12).metric(Metric::L1),
        ),
        (
            "l1 wide n=700 d=100 k=40",
            uniform(700, 100, 17),
            700,
            100,
            p(40).metric(Metric::L1),
        ),
        (
            "l1 narrow n=500 d=120 k=5",
            uniform(500, 120, 18),
            500,
            120,
            p(5).metric(Metric::L1),
        ),
        (
            // d > 176: too many dimensions for a resident point tile (two blocks per SM).
            "wide streamed n=300 d=200 k=40",
            uniform(300, 200, 21),
            300,
            200,
            p(40),
        ),
        (
            "global tile d=12000 k=3",
            uniform(40, 12000, 8),
            40,
            12000,
            p(3),
        ),
        (
            "l1 n=1025 d=3 k=16",
            uniform(1025, 3, 9),
            1025,
            3,
            p(16).metric(Metric::L1),
        ),
        (
            "small d16 l1 n=900 d=9 k=16",
            uniform(900, 9, 22),
            900,
            9,
            p(16).metric(Metric::L1),
        ),
        (
            "random points n=999 d=5",
            uniform(999, 5, 10),
            999,
            5,
            p(8).init(Init::RandomPoints),
        ),
        (
            "random labels n=999 d=5",
            uniform(999, 5, 11),
            999,
            5,
            p(8).init(Init::RandomLabels),
        ),
        (
            "n_init=3 n=600 d=6",
            uniform(600, 6, 12),
            600,
            6,
            p(6).n_init(3),
        ),
        (
            "keep empty n=400 d=2",
            uniform(400, 2, 13),
            400,
            2,
            p(3).init(far_centroid_init())
                .empty_clusters(EmptyClusters::KeepPrevious),
        ),
        (
            "relocate empty n=400 d=2",
            uniform(400, 2, 13),
            400,
            2,
            p(3).init(far_centroid_init()),
        ),
    ]
}

/// Three 2-D centroids, the last far from every point of [-1, 1)²: its cluster starts empty.
fn far_centroid_init() -> Init {
    Init::Centroids(vec![-0.5, 0.0, 0.5, 0.0, 1000.0, 1000.0])
}

#[test]
fn gpu_matches_cpu_on_awkward_shapes() {
    let Some(gpu) = gpu("gpu_matches_cpu_on_awkward_shapes") else {
        return;
    };
    for (case, data, n, d, params) in cross_cases() {
        assert_backends_agree(case, &data, n, d, params, gpu);
    }
}

#[test]
fn gpu_matches_cpu_on_seed_000_shape() {
    let Some(gpu) = gpu("gpu_matches_cpu_on_seed_000_shape") else {
        return;
    };
    let (n, d) = (63_504, 75);
    let data = uniform(n, d, 42);
    assert_backends_agree(
        "63504×75 k=80",
        &data,
        n,
        d,
        KMeans::params(80).max_iter(20),
        gpu,
    );
}

/// Small shapes that run every k-means kernel; the GPU bundle runs these under compute-sanitizer.
#[test]
fn sanitize_kmeans_kernels() {
    let Some(gpu) = gpu("sanitize_kmeans_kernels") else {
        return;
    };
    let cases = cross_cases();
    let small = [
        "n=257 d=1 k=3",
        "k=1 n=777 d=9",
        "small d32 n=800 d=20 k=30",
        "small d96 n=700 d=75 k=20",
        "small d96 n=500 d=90 k=9",
        "small d96 l1 n=600 d=50 k=12",
        "small d96 lattice k=n n=90 d=64 k=90",
        "global sums k=100 d=100",
        "global tile d=12000 k=3",
        "wide streamed n=300 d=200 k=40",
        "l1 wide n=700 d=100 k=40",
        "l1 narrow n=500 d=120 k=5",
        "relocate empty n=400 d=2",
        "l1 n=1025 d=3 k=16",
        "small d16 l1 n=900 d=9 k=16",
        "random labels n=999 d=5",
    ];
    for (case, data, n, d, params) in cases.into_iter().filter(|c| small.contains(&c.0)) {
        assert_backends_agree(case, &data, n, d, params.max_iter(3), gpu);
    }
}

#[test]
fn gpu_fits_are_reproducible() {
    let Some(gpu) = gpu("gpu_fits_are_reproducible") else {
        return;
    };
    assert_reproducible(gpu);
}

#[test]
fn cpu_fits_are_reproducible() {
    assert_reproducible(Device::Cpu);
}

fn assert_reproducible(device: Device) {
    let (n, d) = (5000, 7);
    let data = uniform(n, d, 77);
    let params = KMeans::params(12).seed(9).n_init(2).device(device);
    let a = fit(&data, n, d, &params);
    let b = fit(&data, n, d, &params);
    assert_eq!(a.labels, b.labels);
    let bits = |m: &KMeansModel| m.centroids.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a), bits(&b));
    assert_eq!(a.inertia.to_bits(), b.inertia.to_bits());
}

#[test]
fn well_separated_blobs_are_recovered_exactly() {
    let (k, per, d) = (6, 200, 3);
    let (data, truth) = blobs(k, per, d, 5);
    // Random initialisations land in local minima on separated blobs (as in scikit-learn);
    // k-means++ must not.
    {
        let init = Init::KMeansPlusPlus;
        let model = fit(
            &data,
            k * per,
            d,
            &KMeans::params(k)
                .init(init.clone())
                .n_init(10)
                .device(Device::Cpu),
        );
        assert!(
            same_partition(&model.labels, &truth),
            "{init:?} sizes {:?}",
            model.cluster_sizes
        );
        assert!(model.converged);
        assert!(model.cluster_sizes.iter().all(|&s| s as usize == per));
    }
}

#[test]
fn l1_metric_recovers_blobs() {
    let (k, per, d) = (4, 100, 2);
    let (data, truth) = blobs(k, per, d, 8);
    let params = KMeans::params(k)
        .metric(Metric::L1)
        .n_init(4)
        .device(Device::Cpu);
    let model = fit(&data, k * per, d, &params);
    assert!(same_partition(&model.labels, &truth));
}

#[test]
fn empty_cluster_policies() {
    let data = uniform(400, 2, 13);
    let keep = KMeans::params(3)
        .init(far_centroid_init())
        .empty_clusters(EmptyClusters::KeepPrevious);
    let model = fit(&data, 400, 2, &keep.device(Device::Cpu));
    assert_eq!(model.cluster_sizes[2], 0);
    assert_eq!(model.centroid(2), &[1000.0, 1000.0]);

    let relocate = KMeans::params(3)
        .init(far_centroid_init())
        .device(Device::Cpu);
    let model = fit(&data, 400, 2, &relocate);
    assert!(
        model.cluster_sizes.iter().all(|&s| s > 0),
        "{:?}",
        model.cluster_sizes
    );
    assert!(model.centroid(2)[0].abs() <= 1.0);
}

#[test]
fn predict_and_transform_agree_with_fit() {
    let (n, d) = (800, 4);
    let data = uniform(n, d, 21);
    let x = MatrixView::new(&data, n, d).unwrap();
    for metric in [Metric::L2, Metric::L1, Metric::Cosine] {
        let model = KMeans::params(5)
            .metric(metric)
            .device(Device::Cpu)
            .fit(&x)
            .unwrap();
        assert_eq!(model.predict_on(&x, Device::Cpu).unwrap(), model.labels);
        let t = model.transform(&x).unwrap();
        assert_eq!(t.dim(), (n, 5));
        for (i, row) in t.rows().into_iter().enumerate() {
            let argmin = (0..5).fold(0, |b, c| if row[c] < row[b] { c } else { b });
            assert_eq!(argmin as u32, model.labels[i]);
        }
        let (p, c) = (data[..d].to_vec(), model.centroid(0).to_vec());
        let expected = match metric {
            Metric::L2 => p
                .iter()
                .zip(&c)
                .map(|(a, b)| (a - b) * (a - b))
                .sum::<f32>()
                .sqrt(),
            Metric::L1 => p.iter().zip(&c).map(|(a, b)| (a - b).abs()).sum::<f32>(),
            Metric::Cosine => {
                let norm = |v: &[f32]| v.iter().map(|a| a * a).sum::<f32>().sqrt();
                let dot: f32 = p.iter().zip(&c).map(|(a, b)| a * b).sum();
                1.0 - dot / (norm(&p) * norm(&c))
            }
        };
        approx::assert_relative_eq!(t[[0, 0]], expected, max_relative = 1e-5);
    }
}

#[test]
fn gpu_predict_matches_cpu() {
    let Some(gpu) = gpu("gpu_predict_matches_cpu") else {
        return;
    };
    let (n, d) = (3001, 11);
    let data = uniform(n, d, 31);
    let x = MatrixView::new(&data, n, d).unwrap();
    let model = KMeans::params(9).device(Device::Cpu).fit(&x).unwrap();
    assert_eq!(
        model.predict_on(&x, gpu).unwrap(),
        model.predict_on(&x, Device::Cpu).unwrap()
    );
}

#[test]
fn stopping_rules() {
    let (n, d) = (2000, 3);
    let data = uniform(n, d, 17);
    let one = fit(
        &data,
        n,
        d,
        &KMeans::params(8).max_iter(1).tol(0.0).device(Device::Cpu),
    );
    assert_eq!(one.n_iter, 1);
    assert!(!one.converged);
    let loose = fit(&data, n, d, &KMeans::params(8).tol(1e9).device(Device::Cpu));
    assert_eq!(loose.n_iter, 1);
    assert!(loose.converged);
    let strict = fit(
        &data,
        n,
        d,
        &KMeans::params(8)
            .tol(0.0)
            .max_iter(1000)
            .device(Device::Cpu),
    );
    assert!(strict.converged, "tol 0 stops only when no label changes");
    let again = KMeans::params(8)
        .init(Init::Centroids(strict.centroids.clone()))
        .device(Device::Cpu);
    let again = fit(&data, n, d, &again);
    assert_eq!(again.labels, strict.labels);
    assert!(again.n_iter <= 1);
}

#[test]
fn more_restarts_never_raise_inertia() {
    let (n, d) = (1500, 5);
    let data = uniform(n, d, 23);
    let one = fit(&data, n, d, &KMeans::params(10).seed(4).device(Device::Cpu));
    let five = fit(
        &data,
        n,
        d,
        &KMeans::params(10).seed(4).n_init(5).device(Device::Cpu),
    );
    assert!(five.inertia <= one.inertia);
}

#[test]
fn inertia_is_the_sum_of_squared_distances() {
    let (n, d) = (500, 3);
    let data = uniform(n, d, 29);
    let model = fit(&data, n, d, &KMeans::params(4).device(Device::Cpu));
    let mut expected = 0f64;
    for i in 0..n {
        let c = model.centroid(model.labels[i] as usize);
        expected += data[i * d..(i + 1) * d]
            .iter()
            .zip(c)
            .map(|(a, b)| ((a - b) * (a - b)) as f64)
            .sum::<f64>();
    }
    approx::assert_relative_eq!(model.inertia, expected, max_relative = 1e-5);
}

#[test]
fn bad_input_gets_typed_errors() {
    let data = uniform(10, 2, 1);
    let x = MatrixView::new(&data, 10, 2).unwrap();
    let cpu = |k| KMeans::params(k).device(Device::Cpu);
    assert!(matches!(
        cpu(3).fit(MatrixView::new(&[], 0, 2).unwrap()),
        Err(Error::EmptyData)
    ));
    assert!(matches!(
        cpu(1).fit(MatrixView::new(&[], 3, 0).unwrap()),
        Err(Error::ZeroDimension)
    ));
    assert!(matches!(
        cpu(0).fit(&x),
        Err(Error::InvalidParameter { name: "k", .. })
    ));
    let too_many = cpu(11).fit(&x).unwrap_err();
    assert!(
        too_many
            .to_string()
            .contains("k = 11 is larger than the number of points (10)")
    );
    let mut bad = data.clone();
    bad[7] = f32::NAN;
    match cpu(2).fit(MatrixView::new(&bad, 10, 2).unwrap()) {
        Err(Error::NonFinite { row: 3, col: 1, .. }) => {}
        other => panic!("{other:?}"),
    }
    bad[7] = f32::INFINITY;
    assert!(cpu(2).fit(MatrixView::new(&bad, 10, 2).unwrap()).is_err());
    assert!(matches!(
        cpu(2).max_iter(0).fit(&x),
        Err(Error::InvalidParameter {
            name: "max_iter",
            ..
        })
    ));
    assert!(matches!(
        cpu(2).tol(-1.0).fit(&x),
        Err(Error::InvalidParameter { name: "tol", .. })
    ));
    assert!(matches!(
        cpu(2).n_init(0).fit(&x),
        Err(Error::InvalidParameter { name: "n_init", .. })
    ));
    let wrong_init = cpu(2).init(Init::Centroids(vec![0.0; 3]));
    assert!(matches!(
        wrong_init.fit(&x),
        Err(Error::InvalidParameter { name: "init", .. })
    ));
    assert!(matches!(
        MatrixView::new(&data, 3, 3),
        Err(Error::ShapeMismatch { .. })
    ));

    let model = cpu(2).fit(&x).unwrap();
    let three_cols = uniform(4, 3, 2);
    let err = model
        .predict_on(MatrixView::new(&three_cols, 4, 3).unwrap(), Device::Cpu)
        .unwrap_err();
    assert!(matches!(
        err,
        Error::DimensionMismatch {
            expected: 2,
            got: 3,
            ..
        }
    ));
    assert!(
        model
            .transform(MatrixView::new(&three_cols, 4, 3).unwrap())
            .is_err()
    );
}

#[test]
fn asking_for_a_missing_gpu_is_an_error_not_a_panic() {
    let data = uniform(10, 2, 1);
    let x = MatrixView::new(&data, 10, 2).unwrap();
    let err = KMeans::params(2)
        .device(Device::Cuda(99))
        .fit(&x)
        .unwrap_err();
    assert!(matches!(err, Error::NoGpu(_)), "{err}");
}

#[test]
fn auto_device_runs_everywhere() {
    let data = uniform(100, 2, 1);
    let x = MatrixView::new(&data, 100, 2).unwrap();
    let model = KMeans::params(3).fit(&x).unwrap();
    assert_eq!(model.labels.len(), 100);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// On any small shape: labels are the nearest centroids, sizes count them, every non-empty
    /// centroid is the mean of its points (the run stops only when no label changes), and
    /// inertia is the sum of squared distances.
    #[test]
    fn fitted_models_are_self_consistent(
        n in 1usize..200,
        d in 1usize..6,
        k_frac in 0.0f64..1.0,
        seed in 0u64..1000,
        l1 in proptest::bool::ANY,
    ) {
        let k = 1 + ((n.min(12) - 1) as f64 * k_frac) as usize;
        let data = lattice(n, d, 5, seed);
        let metric = if l1 { Metric::L1 } else { Metric::L2 };
        let params = KMeans::params(k).seed(seed).tol(0.0).max_iter(500).metric(metric).device(Device::Cpu);
        let model = fit(&data, n, d, &params);
        let x = MatrixView::new(&data, n, d).unwrap();
        proptest::prop_assert_eq!(model.predict_on(&x, Device::Cpu).unwrap(), model.labels.clone());
        let mut sizes = vec![0u32; k];
        for &l in &model.labels {
            sizes[l as usize] += 1;
        }
        proptest::prop_assert_eq!(&sizes, &model.cluster_sizes);
        if model.converged {
            for c in (0..k).filter(|&c| sizes[c] > 0) {
                for j in 0..d {
                    let mean = (0..n).filter(|&i| model.labels[i] as usize == c).map(|i| data[i * d + j] as f64).sum::<f64>() / sizes[c] as f64;
                    proptest::prop_assert!((model.centroid(c)[j] as f64 - mean).abs() <= 1e-5 * mean.abs().max(1.0));
                }
            }
        }
        let t = model.transform(&x).unwrap();
        let expected: f64 = (0..n).map(|i| {
            let v = t[[i, model.labels[i] as usize]] as f64;
            if l1 { v } else { v * v }
        }).sum();
        proptest::prop_assert!((model.inertia - expected).abs() <= 1e-4 * expected.max(1.0));
    }
}
