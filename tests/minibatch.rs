//! Mini-batch k-means: CPU and GPU agree bit for bit (labels, centroids, inertia, counts, steps)
//! for fits and for partial fits; fits are reproducible and independent of the thread count; the
//! quality is close to Lloyd's; bad input gets typed errors.

use kmeans_knn::{
    Device, Error, Init, KMeans, MatrixView, Metric, MiniBatchKMeans, MiniBatchKMeansModel,
    MiniBatchParams,
};
use kmeans_knn_tests::{blobs, gpu, lattice, same_partition, uniform};

type Case = (&'static str, Vec<f32>, usize, usize, MiniBatchParams);

fn fit(data: &[f32], n: usize, d: usize, params: &MiniBatchParams) -> MiniBatchKMeansModel {
    params.fit(MatrixView::new(data, n, d).unwrap()).unwrap()
}

/// Fits `params` on `data` cut into pieces of `sizes` rows (repeated while data is left).
fn partial_fits(
    data: &[f32],
    d: usize,
    sizes: &[usize],
    params: &MiniBatchParams,
) -> MiniBatchKMeansModel {
    let (mut model, mut at) = (None, 0);
    for &rows in sizes.iter().cycle() {
        let end = (at + rows * d).min(data.len());
        let piece = MatrixView::new(&data[at..end], (end - at) / d, d).unwrap();
        model = Some(params.partial_fit(model.as_ref(), &piece).unwrap());
        at = end;
        if at == data.len() {
            break;
        }
    }
    model.expect("at least one piece")
}

/// Every number of the two models is the same, bit for bit.
fn assert_same(case: &str, a: &MiniBatchKMeansModel, b: &MiniBatchKMeansModel) {
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let mismatches = a
        .labels
        .iter()
        .zip(&b.labels)
        .filter(|(x, y)| x != y)
        .count();
    assert_eq!(mismatches, 0, "{case}: {mismatches} label mismatches");
    assert_eq!(bits(&a.centroids), bits(&b.centroids), "{case}: centroids");
    assert_eq!(a.inertia.to_bits(), b.inertia.to_bits(), "{case}: inertia");
    assert_eq!(a.n_steps, b.n_steps, "{case}: steps");
    assert_eq!(a.n_iter, b.n_iter, "{case}: epochs");
    assert_eq!(a.converged, b.converged, "{case}");
    assert_eq!(a.counts, b.counts, "{case}: counts");
    assert_eq!(a.since_reassign, b.since_reassign, "{case}");
    assert_eq!(a.cluster_sizes, b.cluster_sizes, "{case}");
}

/// Three 2-D centroids, the last far from every point of [-1, 1)²: it gets no rows, so it is
/// reassigned.
fn far_centroid_init() -> Init {
    Init::Centroids(vec![-0.5, 0.0, 0.5, 0.0, 1000.0, 1000.0])
}

/// Shapes and settings that reach every kernel path: batch not a multiple of the assign block's
/// rows, d = 1, d > 256, k = 1, k = batch, k > the block's threads, repeats and exact ties, L1,
/// the shift kernel (tol > 0), reassignment, every initialisation.
fn cases() -> Vec<Case> {
    let p = |k: usize, batch: usize| {
        MiniBatchKMeans::params(k)
            .seed(5)
            .batch_size(batch)
            .max_iter(3)
    };
    vec![
        (
            "n=1000 d=3 k=5 b=100",
            uniform(1000, 3, 1),
            1000,
            3,
            p(5, 100),
        ),
        ("n=1 d=1 k=1", vec![4.5], 1, 1, p(1, 1024)),
        ("d=1 n=257 k=3 b=50", uniform(257, 1, 2), 257, 1, p(3, 50)),
        ("k=1 n=777 d=9 b=13", uniform(777, 9, 3), 777, 9, p(1, 13)),
        ("k=b=64 n=300 d=4", uniform(300, 4, 4), 300, 4, p(64, 64)),
        (
            "d=257 n=300 k=7 b=37",
            uniform(300, 257, 5),
            300,
            257,
            p(7, 37),
        ),
        (
            "k=300 n=1200 d=8 b=300",
            uniform(1200, 8, 6),
            1200,
            8,
            p(300, 300),
        ),
        (
            "lattice ties n=2000 d=2 k=10",
            lattice(2000, 2, 4, 7),
            2000,
            2,
            p(10, 100),
        ),
        (
            "l1 n=500 d=20 k=7 b=61",
            uniform(500, 20, 8),
            500,
            20,
            p(7, 61).metric(Metric::L1),
        ),
        (
            "tol n=800 d=5 k=6 b=40",
            uniform(800, 5, 9),
            800,
            5,
            p(6, 40).tol(1e-3).max_iter(20),
        ),
        (
            "reassign every step n=600 d=3 k=20 b=30",
            uniform(600, 3, 10),
            600,
            3,
            p(20, 30).reassignment_ratio(1.0),
        ),
        (
            "far centroid reassigned n=400 d=2",
            uniform(400, 2, 11),
            400,
            2,
            p(3, 50).init(far_centroid_init()),
        ),
        (
            "random n_init=3 n=900 d=4 k=8",
            uniform(900, 4, 12),
            900,
            4,
            p(8, 64).init(Init::RandomPoints),
        ),
        (
            "kmeans|| n=900 d=4 k=8",
            uniform(900, 4, 13),
            900,
            4,
            p(8, 64).init(Init::KMeansParallel),
        ),
        (
            "k-means++ n_init=2 init_size=50 n=900 d=6 k=9",
            uniform(900, 6, 14),
            900,
            6,
            p(9, 64).n_init(Some(2)).init_size(Some(50)),
        ),
    ]
}

fn assert_backends_agree(cases: Vec<Case>, gpu: Device) {
    for (case, data, n, d, params) in cases {
        let cpu = fit(&data, n, d, &params.clone().device(Device::Cpu));
        let dev = fit(&data, n, d, &params.clone().device(gpu));
        assert!(
            dev.device.starts_with("cuda"),
            "{case}: ran on {}",
            dev.device
        );
        assert_same(case, &cpu, &dev);

        // The same data as pieces: the first at least k rows, then ragged ones.
        let k = params.k();
        let sizes = [k.max(n / 3), 1, 7.max(n / 5)];
        let cpu = partial_fits(&data, d, &sizes, &params.clone().device(Device::Cpu));
        let dev = partial_fits(&data, d, &sizes, &params.clone().device(gpu));
        assert_same(&format!("{case}, partial fits"), &cpu, &dev);
    }
}

/// Small shapes that run every mini-batch kernel; the GPU bundle runs this under
/// compute-sanitizer.
#[test]
fn sanitize_minibatch_kernels_match_cpu() {
    let Some(gpu) = gpu("sanitize_minibatch_kernels_match_cpu") else {
        return;
    };
    assert_backends_agree(cases(), gpu);
}

/// The cases of the GPU test, twice on the CPU: every one runs, and reproducibly.
#[test]
fn cpu_cases_are_reproducible() {
    for (case, data, n, d, params) in cases() {
        let params = params.device(Device::Cpu);
        assert_same(case, &fit(&data, n, d, &params), &fit(&data, n, d, &params));
        let sizes = [params.k().max(n / 3), 1, 7.max(n / 5)];
        let a = partial_fits(&data, d, &sizes, &params);
        assert_same(case, &a, &partial_fits(&data, d, &sizes, &params));
    }
}

#[test]
fn gpu_minibatch_matches_cpu_on_an_embedding_shape() {
    let Some(gpu) = gpu("gpu_minibatch_matches_cpu_on_an_embedding_shape") else {
        return;
    };
    let (n, d, k) = (20_000, 128, 256);
    let params = MiniBatchKMeans::params(k)
        .seed(3)
        .max_iter(2)
        .max_no_improvement(None);
    assert_backends_agree(
        vec![("20000×128 k=256", uniform(n, d, 21), n, d, params)],
        gpu,
    );
}

#[test]
fn gpu_minibatch_is_reproducible() {
    let Some(gpu) = gpu("gpu_minibatch_is_reproducible") else {
        return;
    };
    let (n, d) = (3000, 7);
    let data = uniform(n, d, 31);
    let params = MiniBatchKMeans::params(12)
        .seed(9)
        .batch_size(200)
        .device(gpu);
    assert_same(
        "gpu",
        &fit(&data, n, d, &params),
        &fit(&data, n, d, &params),
    );
}

#[test]
fn cpu_minibatch_is_reproducible_with_any_thread_count() {
    let (n, d) = (3000, 7);
    let data = uniform(n, d, 31);
    let params = MiniBatchKMeans::params(12)
        .seed(9)
        .batch_size(200)
        .tol(1e-4)
        .device(Device::Cpu);
    let a = fit(&data, n, d, &params);
    let one_thread = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let b = one_thread.install(|| fit(&data, n, d, &params));
    assert_same("cpu, 1 thread against all", &a, &b);
    let sizes = [100, 17, 450];
    let c = partial_fits(&data, d, &sizes, &params);
    let e = one_thread.install(|| partial_fits(&data, d, &sizes, &params));
    assert_same("cpu partial fits", &c, &e);
    assert_eq!(c.n_steps, 18);
    assert_eq!(
        c.counts.iter().sum::<u64>() as usize,
        n,
        "every row counted once"
    );
}

#[test]
fn labels_and_inertia_belong_to_the_returned_centroids() {
    let (n, d) = (2000, 5);
    let data = uniform(n, d, 41);
    let model = fit(
        &data,
        n,
        d,
        &MiniBatchKMeans::params(10)
            .batch_size(100)
            .device(Device::Cpu),
    );
    let x = MatrixView::new(&data, n, d).unwrap();
    assert_eq!(model.predict_on(&x, Device::Cpu).unwrap(), model.labels);
    let distances = model.transform(&x).unwrap();
    let inertia: f64 = model
        .labels
        .iter()
        .enumerate()
        .map(|(i, &l)| (distances[[i, l as usize]] as f64).powi(2))
        .sum();
    assert!((inertia - model.inertia).abs() <= 1e-4 * model.inertia);
    assert_eq!(model.cluster_sizes.iter().sum::<u32>() as usize, n);
}

#[test]
fn well_separated_blobs_are_recovered() {
    let (k, per, d) = (6, 300, 3);
    let (data, truth) = blobs(k, per, d, 5);
    let params = MiniBatchKMeans::params(k)
        .batch_size(64)
        .seed(1)
        .device(Device::Cpu);
    let model = fit(&data, k * per, d, &params);
    assert!(
        same_partition(&model.labels, &truth),
        "sizes {:?}",
        model.cluster_sizes
    );
}

#[test]
fn inertia_is_close_to_lloyds() {
    let (n, d, k) = (20_000, 8, 16);
    let data = uniform(n, d, 51);
    let x = MatrixView::new(&data, n, d).unwrap();
    let lloyd = KMeans::params(k).device(Device::Cpu).fit(&x).unwrap();
    let params = MiniBatchKMeans::params(k).device(Device::Cpu);
    let model = params.fit(&x).unwrap();
    // scikit-learn's MiniBatchKMeans lands 2.8–3.5 % above Lloyd on this shape (seeds 0–4).
    let ratio = model.inertia / lloyd.inertia;
    assert!(ratio < 1.05, "mini-batch inertia {ratio} × Lloyd's");
    assert!(model.converged, "stops early on the smoothed inertia");
    assert!(model.n_steps < 100 * n / 1024);
}

#[test]
fn bad_parameters_and_data_are_typed_errors() {
    let data = uniform(100, 3, 61);
    let x = MatrixView::new(&data, 100, 3).unwrap();
    let p = || MiniBatchKMeans::params(4).device(Device::Cpu);
    let invalid = |params: MiniBatchParams, name: &str| {
        let err = params.fit(&x).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidParameter { name: n, .. } if *n == name),
            "{name}: {err}"
        );
        let err = params.partial_fit(None, &x).unwrap_err();
        assert!(matches!(&err, Error::InvalidParameter { name: n, .. } if *n == name));
    };
    invalid(MiniBatchKMeans::params(0), "k");
    invalid(MiniBatchKMeans::params(101), "k");
    invalid(p().batch_size(0), "batch_size");
    invalid(p().max_iter(0), "max_iter");
    invalid(p().tol(f64::NAN), "tol");
    invalid(p().tol(-1.0), "tol");
    invalid(p().init_size(Some(0)), "init_size");
    invalid(p().n_init(Some(0)), "n_init");
    invalid(p().reassignment_ratio(1.5), "reassignment_ratio");
    invalid(p().reassignment_ratio(f64::NAN), "reassignment_ratio");
    invalid(p().init(Init::RandomLabels), "init");
    invalid(p().init(Init::Centroids(vec![0.0; 11])), "init");
    let non_finite = p().init(Init::Centroids(vec![f32::INFINITY; 12])).fit(&x);
    assert!(matches!(non_finite, Err(Error::NonFinite { .. })));

    let mut nan = data.clone();
    nan[7] = f32::NAN;
    let nan = MatrixView::new(&nan, 100, 3).unwrap();
    assert!(matches!(p().fit(&nan), Err(Error::NonFinite { .. })));

    // Continuing: the piece's columns, the model's k and metric must match; any piece size.
    let model = p().partial_fit(None, &x).unwrap();
    let two_columns = MatrixView::new(&data[..20], 10, 2).unwrap();
    let err = p().partial_fit(Some(&model), &two_columns).unwrap_err();
    assert!(matches!(err, Error::DimensionMismatch { .. }), "{err}");
    let other_k = MiniBatchKMeans::params(5).device(Device::Cpu);
    assert!(matches!(
        other_k.partial_fit(Some(&model), &x),
        Err(Error::InvalidParameter { name: "model", .. })
    ));
    let l1 = p().metric(Metric::L1);
    assert!(l1.partial_fit(Some(&model), &x).is_err());
    let mut broken = model.clone();
    broken.counts.pop();
    assert!(p().partial_fit(Some(&broken), &x).is_err());
    let mut overflowing = model.clone();
    overflowing.counts[0] = u64::MAX;
    overflowing.since_reassign = usize::MAX;
    assert!(p().partial_fit(Some(&overflowing), &x).is_err());
    overflowing.counts[0] = 1 << 53;
    assert!(p().partial_fit(Some(&overflowing), &x).is_ok());
    let one_row = MatrixView::new(&data[..3], 1, 3).unwrap();
    assert!(p().partial_fit(Some(&model), &one_row).is_ok());
    assert!(matches!(
        p().partial_fit(None, &one_row),
        Err(Error::InvalidParameter { name: "k", .. })
    ));
}
