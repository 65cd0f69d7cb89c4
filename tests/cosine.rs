//! Spherical k-means (`Metric::Cosine`): unit centroids, labels by largest inner product,
//! inertia Σ (1 − cos), queries normalised by predict, zero rows as typed errors, and the GPU
//! equal to the CPU bit for bit on awkward shapes.

use kmeans_knn::{
    Device, Error, Init, KMeans, KMeansModel, KMeansParams, MatrixView, Metric, Precision,
};
use kmeans_knn_tests::{assert_same_fit, gpu, lattice, uniform};

fn fit(data: &[f32], d: usize, params: &KMeansParams) -> KMeansModel {
    params
        .fit(MatrixView::new(data, data.len() / d, d).unwrap())
        .unwrap()
}

fn unit(row: &[f32]) -> Vec<f64> {
    let norm = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>().sqrt();
    row.iter().map(|&v| v as f64 / norm).collect()
}

fn dot(a: &[f64], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(x, &y)| x * y as f64).sum()
}

#[test]
fn spherical_fit_has_unit_centroids_max_inner_product_labels_and_cosine_inertia() {
    let (n, d, k) = (1500, 6, 7);
    let data = uniform(n, d, 1);
    let params = KMeans::params(k)
        .metric(Metric::Cosine)
        .tol(0.0)
        .max_iter(200)
        .device(Device::Cpu);
    let model = fit(&data, d, &params);
    assert!(model.converged);
    for c in 0..k {
        let norm: f64 = model.centroid(c).iter().map(|&v| v as f64 * v as f64).sum();
        assert!(
            (norm - 1.0).abs() <= 1e-6,
            "centroid {c} has squared norm {norm}"
        );
    }
    let mut inertia = 0.0;
    for (i, row) in data.chunks_exact(d).enumerate() {
        let x = unit(row);
        let cos: Vec<f64> = (0..k).map(|c| dot(&x, model.centroid(c))).collect();
        let label = model.labels[i] as usize;
        let best = cos.iter().cloned().fold(f64::MIN, f64::max);
        assert!(
            cos[label] >= best - 1e-6,
            "row {i}: label {label} is not the nearest"
        );
        inertia += 1.0 - cos[label];
    }
    let rel = (model.inertia - inertia).abs() / inertia;
    assert!(rel <= 1e-5, "inertia {} vs {inertia}", model.inertia);
    // A converged centroid is the normalised mean of its unit rows.
    for c in 0..k {
        let mut mean = vec![0f64; d];
        for (row, &l) in data.chunks_exact(d).zip(&model.labels) {
            if l as usize == c {
                mean.iter_mut().zip(unit(row)).for_each(|(m, v)| *m += v);
            }
        }
        let norm = mean.iter().map(|v| v * v).sum::<f64>().sqrt();
        for (m, &got) in mean.iter().zip(model.centroid(c)) {
            assert!((m / norm - got as f64).abs() <= 1e-5);
        }
    }
}

#[test]
fn scale_of_a_row_does_not_matter() {
    let (n, d) = (600, 4);
    let data = uniform(n, d, 2);
    let scaled: Vec<f32> = data
        .chunks_exact(d)
        .enumerate()
        .flat_map(|(i, row)| row.iter().map(move |&v| v * (1 + i % 7) as f32 * 0.5))
        .collect();
    let params = KMeans::params(5).metric(Metric::Cosine).device(Device::Cpu);
    let model = fit(&data, d, &params);
    let x = MatrixView::new(&scaled, n, d).unwrap();
    // Rows scaled by 0.5, 1, 1.5, … normalise to nearly the same unit rows.
    let predicted = model.predict_on(&x, Device::Cpu).unwrap();
    let agree = predicted
        .iter()
        .zip(&model.labels)
        .filter(|(a, b)| a == b)
        .count();
    assert!(agree >= n - 2, "{agree} of {n}");
    let doubled: Vec<f32> = data.iter().map(|v| v * 2.0).collect();
    let x2 = MatrixView::new(&doubled, n, d).unwrap();
    assert_eq!(model.predict_on(&x2, Device::Cpu).unwrap(), model.labels);
    let t = model.transform(&x2).unwrap();
    for (i, row) in t.rows().into_iter().enumerate() {
        let c = model.labels[i] as usize;
        let want = 1.0 - dot(&unit(&data[i * d..(i + 1) * d]), model.centroid(c));
        assert!((row[c] as f64 - want).abs() <= 1e-6);
    }
}

#[test]
fn zero_rows_and_tf32_are_typed_errors() {
    let mut data = uniform(20, 3, 3);
    data[7 * 3..8 * 3].fill(0.0);
    let params = KMeans::params(2).metric(Metric::Cosine).device(Device::Cpu);
    let x = MatrixView::new(&data, 20, 3).unwrap();
    match params.fit(&x) {
        Err(Error::ZeroVector {
            what: "the data",
            row: 7,
        }) => {}
        other => panic!("{other:?}"),
    }
    let good = uniform(20, 3, 4);
    let model = fit(&good, 3, &params);
    assert!(matches!(
        model.predict_on(&x, Device::Cpu),
        Err(Error::ZeroVector { row: 7, .. })
    ));
    let zero_init = params
        .clone()
        .init(Init::Centroids(vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0]));
    assert!(matches!(
        zero_init.fit(MatrixView::new(&good, 20, 3).unwrap()),
        Err(Error::ZeroVector {
            what: "the initial centroids",
            row: 1
        })
    ));
    assert!(matches!(
        params
            .precision(Precision::Tf32)
            .fit(MatrixView::new(&good, 20, 3).unwrap()),
        Err(Error::InvalidParameter {
            name: "precision",
            ..
        })
    ));
}

/// Awkward shapes (d = 1, k = 1, k = n, duplicates and ties, n not a multiple of the block,
/// narrow and wide tiles, global sums, every initialisation, an empty cluster).
fn cases() -> Vec<(&'static str, Vec<f32>, usize, KMeansParams)> {
    let p = |k| {
        KMeans::params(k)
            .seed(8)
            .max_iter(30)
            .metric(Metric::Cosine)
    };
    vec![
        ("n=1000 d=3 k=5", uniform(1000, 3, 1), 3, p(5)),
        ("d=1 n=257 k=2", uniform(257, 1, 2), 1, p(2)),
        ("k=1 n=300 d=4", uniform(300, 4, 3), 4, p(1)),
        ("k=n=60 d=3", uniform(60, 3, 4), 3, p(60)),
        (
            "lattice ties n=900 d=3 k=9",
            lattice(900, 3, 3, 5).iter().map(|v| v + 1.0).collect(),
            3,
            p(9),
        ),
        ("wide n=700 d=100 k=40", uniform(700, 100, 6), 100, p(40)),
        (
            "global sums n=1500 d=100 k=100",
            uniform(1500, 100, 7),
            100,
            p(100),
        ),
        (
            "k-means|| n=999 d=5",
            uniform(999, 5, 8),
            5,
            p(8).init(Init::KMeansParallel),
        ),
        (
            "random labels n=999 d=5",
            uniform(999, 5, 9),
            5,
            p(8).init(Init::RandomLabels),
        ),
        (
            "empty cluster n=400 d=2",
            uniform(400, 2, 10).iter().map(|v| v.abs() + 0.1).collect(),
            2,
            p(3).init(Init::Centroids(vec![1.0, 0.2, 0.2, 1.0, -1.0, -1.0])),
        ),
    ]
}

fn check_gpu_matches_cpu(test: &str, cases: Vec<(&'static str, Vec<f32>, usize, KMeansParams)>) {
    let Some(device) = gpu(test) else { return };
    for (case, data, d, params) in cases {
        let cpu = fit(&data, d, &params.clone().device(Device::Cpu));
        let dev = fit(&data, d, &params.device(device));
        assert!(
            dev.device.starts_with("cuda"),
            "{case}: ran on {}",
            dev.device
        );
        assert_same_fit(case, &cpu, &dev);
        let x = MatrixView::new(&data, data.len() / d, d).unwrap();
        assert_eq!(
            cpu.predict_on(&x, device).unwrap(),
            cpu.predict_on(&x, Device::Cpu).unwrap(),
            "{case}: predict"
        );
    }
}

#[test]
fn gpu_matches_cpu_for_cosine() {
    check_gpu_matches_cpu("gpu_matches_cpu_for_cosine", cases());
}

/// Some of the shapes for three iterations: the spherical assign (narrow and wide, shared and
/// global sums) and the normalisation kernel under compute-sanitizer.
#[test]
fn sanitize_cosine_kernels() {
    let small = [
        "d=1 n=257 k=2",
        "k=n=60 d=3",
        "wide n=700 d=100 k=40",
        "global sums n=1500 d=100 k=100",
        "empty cluster n=400 d=2",
    ];
    let cases = cases()
        .into_iter()
        .filter(|c| small.contains(&c.0))
        .map(|(case, data, d, params)| (case, data, d, params.max_iter(3)))
        .collect();
    check_gpu_matches_cpu("sanitize_cosine_kernels", cases);
}
