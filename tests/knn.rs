//! Pairwise distances, kNN search and kNN classification: the CPU matches a sort-everything
//! reference; the GPU matches the CPU (identical indices and labels, distances within 1e-5
//! relative — in fact bit for bit); classification on the Iris data predicts exactly what a
//! straightforward reference predicts; bad input gets typed errors.
//!
//! GPU tests skip with a visible message without a GPU (and fail with
//! `KMEANS_KNN_REQUIRE_GPU=1`); every GPU test has a `sanitize_` twin on small shapes that runs
//! every kNN kernel, for compute-sanitizer.

use kmeans_knn::{
    Device, DistanceMetric, Error, KnnClassifier, KnnIndex, KnnLayout, KnnResult, MatrixView,
    Scaler, Selection, TieBreak, Weights, pairwise_distances, pairwise_distances_blocks,
};
use kmeans_knn_tests::{blobs, copies_of_one_point, gpu, lattice, uniform};

const METRICS: [DistanceMetric; 6] = DistanceMetric::ALL;

// ---- references ----------------------------------------------------------------------------

/// The documented distance, written out independently of the library: dot products and squared
/// norms accumulated in dimension order with fused multiply-adds, L1 accumulated directly,
/// Chebyshev the largest difference.
fn ref_distance(metric: DistanceMetric, x: &[f32], y: &[f32]) -> f32 {
    if metric == DistanceMetric::Chebyshev {
        return x
            .iter()
            .zip(y)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
    }
    if metric == DistanceMetric::L1 {
        let mut acc = 0f32;
        for (a, b) in x.iter().zip(y) {
            acc += (a - b).abs();
        }
        return acc;
    }
    let (mut dot, mut xn, mut yn) = (0f32, 0f32, 0f32);
    for (&a, &b) in x.iter().zip(y) {
        dot = a.mul_add(b, dot);
        xn = a.mul_add(a, xn);
        yn = b.mul_add(b, yn);
    }
    let sq = || {
        let v = xn + (-2f32).mul_add(dot, yn);
        if v > 0.0 { v } else { 0.0 }
    };
    match metric {
        DistanceMetric::SqEuclidean => sq(),
        DistanceMetric::Euclidean => sq().sqrt(),
        DistanceMetric::InnerProduct => -dot,
        DistanceMetric::Cosine => {
            let den = xn.sqrt() * yn.sqrt();
            if den > 0.0 {
                (1.0 - dot / den).clamp(0.0, 2.0)
            } else {
                1.0
            }
        }
        DistanceMetric::L1 | DistanceMetric::Chebyshev | DistanceMetric::Minkowski(_) => {
            unreachable!("not in METRICS or handled above")
        }
    }
}

/// Sort-everything kNN: every distance, sorted by (distance, index), first k.
fn ref_knn(
    train: &[f32],
    queries: &[f32],
    d: usize,
    k: usize,
    metric: DistanceMetric,
) -> (Vec<u32>, Vec<f32>) {
    let mut idx = Vec::new();
    let mut dist = Vec::new();
    for q in queries.chunks_exact(d) {
        let mut all: Vec<(f32, u32)> = train
            .chunks_exact(d)
            .enumerate()
            .map(|(j, y)| (ref_distance(metric, q, y) + 0.0, j as u32))
            .collect();
        all.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap().then(a.1.cmp(&b.1)));
        for &(dd, j) in &all[..k] {
            idx.push(j);
            dist.push(dd);
        }
    }
    (idx, dist)
}

fn view(data: &[f32], d: usize) -> MatrixView<'_> {
    MatrixView::new(data, data.len() / d, d).unwrap()
}

fn assert_close(case: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{case}: lengths");
    for (e, (&g, &w)) in got.iter().zip(want).enumerate() {
        let rel = (g - w).abs() / w.abs().max(f32::MIN_POSITIVE);
        assert!(
            g == w || rel <= 1e-5,
            "{case}: element {e}: {g} vs {w} (rel {rel:e})"
        );
    }
}

fn assert_same_neighbours(case: &str, got: &KnnResult, want_idx: &[u32], want_dist: &[f32]) {
    let idx: Vec<u32> = got.indices.iter().copied().collect();
    let mismatch = idx.iter().zip(want_idx).position(|(a, b)| a != b);
    assert!(
        mismatch.is_none() && idx.len() == want_idx.len(),
        "{case}: indices differ first at {mismatch:?}"
    );
    let dist: Vec<f32> = got.distances.iter().copied().collect();
    assert_close(case, &dist, want_dist);
}

/// A search case: training rows, query rows, d, k.
struct Case {
    name: String,
    train: Vec<f32>,
    queries: Vec<f32>,
    d: usize,
    k: usize,
}

fn case(name: &str, train: Vec<f32>, queries: Vec<f32>, d: usize, k: usize) -> Case {
    Case {
        name: name.to_string(),
        train,
        queries,
        d,
        k,
    }
}

/// Random shapes with awkward sizes, d = 1, k = 1, k = n, duplicates and ties. `small` keeps
/// them quick under compute-sanitizer while still reaching every kernel path: several tiles,
/// k at the streaming limit (2048) and past it (sorted rows).
fn search_cases(small: bool) -> Vec<Case> {
    let mut with_zero = uniform(200, 6, 21);
    with_zero[..6].fill(0.0); // a zero vector (cosine distance 1 to everything)
    let mut cases = vec![
        case("n=1 d=1 k=1", vec![0.25], vec![3.0, -1.0], 1, 1),
        case("n=97 d=1 k=1", uniform(97, 1, 1), uniform(13, 1, 2), 1, 1),
        case("k=n=61 d=5", uniform(61, 5, 3), uniform(9, 5, 4), 5, 61),
        case("zero row d=6 k=7", with_zero, uniform(11, 6, 22), 6, 7),
        case(
            "lattice ties n=700 d=2 k=40",
            lattice(700, 2, 3, 5),
            lattice(17, 2, 3, 6),
            2,
            40,
        ),
        case(
            "4200 points k=2100 (sorted rows)",
            uniform(4200, 3, 7),
            uniform(3, 3, 8),
            3,
            2100,
        ),
    ];
    if small {
        cases.push(case(
            "two tiles n=4500 d=2 k=3",
            lattice(4500, 2, 6, 9),
            lattice(4, 2, 6, 10),
            2,
            3,
        ));
    } else {
        cases.extend([
            case(
                "several tiles n=10001 d=33 k=25",
                uniform(10_001, 33, 11),
                uniform(300, 33, 12),
                33,
                25,
            ),
            case(
                "lattice across tiles n=9000 d=2 k=100",
                lattice(9000, 2, 3, 13),
                lattice(150, 2, 3, 14),
                2,
                100,
            ),
            case(
                "k=2048 n=5000 d=16",
                uniform(5000, 16, 15),
                uniform(40, 16, 16),
                16,
                2048,
            ),
            case(
                "k=2049 n=5000 d=5",
                uniform(5000, 5, 17),
                uniform(40, 5, 18),
                5,
                2049,
            ),
            case(
                "k=n=5000 d=2",
                lattice(5000, 2, 10, 19),
                lattice(20, 2, 10, 20),
                2,
                5000,
            ),
            case(
                "d=300 n=2000 k=10",
                uniform(2000, 300, 23),
                uniform(70, 300, 24),
                300,
                10,
            ),
            case(
                "d=1 n=20000 k=64",
                uniform(20_000, 1, 25),
                uniform(257, 1, 26),
                1,
                64,
            ),
        ]);
    }
    cases
}

// ---- CPU against the references --------------------------------------------------------------

#[test]
fn cpu_pairwise_matches_the_reference_formula() {
    let a = uniform(37, 19, 1);
    let mut b = uniform(23, 19, 2);
    b[..19].copy_from_slice(&a[..19]); // an exact duplicate
    for metric in METRICS {
        let m = pairwise_distances(view(&a, 19), view(&b, 19), metric, Device::Cpu).unwrap();
        for i in 0..37 {
            for j in 0..23 {
                let want = ref_distance(metric, &a[i * 19..(i + 1) * 19], &b[j * 19..(j + 1) * 19]);
                assert_eq!(m[[i, j]].to_bits(), want.to_bits(), "{metric} {i} {j}");
            }
        }
    }
}

#[test]
fn cpu_search_matches_sort_everything() {
    for c in search_cases(true) {
        for metric in METRICS {
            let (idx, dist) = ref_knn(&c.train, &c.queries, c.d, c.k, metric);
            for sel in [
                Selection::Auto,
                Selection::KMin,
                Selection::Bitonic,
                Selection::Radix,
            ] {
                let index = KnnIndex::new(view(&c.train, c.d), metric, Device::Cpu)
                    .unwrap()
                    .with_selection(sel);
                let r = index.search(view(&c.queries, c.d), c.k).unwrap();
                assert_ne!(r.selection, Selection::Auto);
                assert_same_neighbours(&format!("{} {metric} {sel}", c.name), &r, &idx, &dist);
            }
        }
    }
}

#[test]
fn distances_are_accurate() {
    // The GEMM form against f64 on well-separated data.
    let a = uniform(20, 8, 3);
    let b = uniform(30, 8, 4);
    let m = pairwise_distances(
        view(&a, 8),
        view(&b, 8),
        DistanceMetric::Euclidean,
        Device::Cpu,
    )
    .unwrap();
    for i in 0..20 {
        for j in 0..30 {
            let exact: f64 = (0..8)
                .map(|t| (a[i * 8 + t] as f64 - b[j * 8 + t] as f64).powi(2))
                .sum::<f64>()
                .sqrt();
            assert!(
                (m[[i, j]] as f64 - exact).abs() <= 1e-5 * exact.max(1.0),
                "{i} {j}"
            );
        }
    }
}

// ---- bad input -----------------------------------------------------------------------------

/// A large query matrix's values are checked while the search runs: a bad value far into it is
/// still its typed error, naming the row and column, from searches, wide searches and votes;
/// the same matrix made good is answered.
fn large_bad_queries_are_refused(device: Device) {
    let (n, m, d) = (500, 70_000, 4);
    let train = uniform(n, d, 3);
    let labels: Vec<u32> = (0..n as u32).map(|i| i % 3).collect();
    let index = KnnIndex::new(view(&train, d), DistanceMetric::SqEuclidean, device).unwrap();
    let clf = KnnClassifier::fit(
        view(&train, d),
        &labels,
        3,
        Weights::Uniform,
        DistanceMetric::SqEuclidean,
        device,
    )
    .unwrap();
    let good = uniform(m, d, 4);
    assert_eq!(
        index.search(view(&good, d), 3).unwrap().indices.dim(),
        (m, 3)
    );
    for bad in [f32::NAN, f32::INFINITY] {
        let mut q = good.clone();
        q[69_000 * d + 2] = bad;
        let named = |e: Error| {
            matches!(
                e,
                Error::NonFinite {
                    row: 69_000,
                    col: 2,
                    ..
                }
            )
        };
        assert!(named(index.search(view(&q, d), 3).unwrap_err()), "{device}");
        assert!(
            named(index.search_i64(view(&q, d), 3).unwrap_err()),
            "{device}"
        );
        assert!(named(clf.predict(view(&q, d)).unwrap_err()), "{device}");
    }
}

#[test]
fn large_bad_queries_are_refused_on_the_cpu() {
    large_bad_queries_are_refused(Device::Cpu);
}

#[test]
fn large_bad_queries_are_refused_on_gpus() {
    let Some(device) = gpu("large_bad_queries_are_refused_on_gpus") else {
        return;
    };
    let Device::Cuda(o) = device else {
        unreachable!("the gate resolves to a GPU")
    };
    large_bad_queries_are_refused(device);
    large_bad_queries_are_refused(Device::Gpus(kmeans_knn::GpuSet::new(&[o, o]).unwrap()));
}

#[test]
fn bad_input_gets_typed_errors() {
    let train = uniform(10, 3, 1);
    let index = KnnIndex::new(view(&train, 3), DistanceMetric::Euclidean, Device::Cpu).unwrap();
    let q = uniform(2, 3, 2);
    assert!(matches!(
        index.search(view(&q, 3), 0),
        Err(Error::InvalidParameter { name: "k", .. })
    ));
    assert!(matches!(
        index.search(view(&q, 3), 11),
        Err(Error::InvalidParameter { name: "k", .. })
    ));
    assert!(matches!(
        index.search(view(&uniform(2, 4, 2), 4), 1),
        Err(Error::DimensionMismatch {
            expected: 3,
            got: 4,
            ..
        })
    ));
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut q = q.clone();
        q[4] = bad;
        assert!(matches!(
            index.search(view(&q, 3), 1),
            Err(Error::NonFinite { row: 1, col: 1, .. })
        ));
        let mut t = train.clone();
        t[0] = bad;
        assert!(matches!(
            KnnIndex::new(view(&t, 3), DistanceMetric::L1, Device::Cpu),
            Err(Error::NonFinite { row: 0, col: 0, .. })
        ));
        assert!(matches!(
            pairwise_distances(view(&t, 3), view(&q, 3), DistanceMetric::L1, Device::Cpu),
            Err(Error::NonFinite { .. })
        ));
    }
    assert!(matches!(
        pairwise_distances(
            view(&train, 3),
            view(&uniform(2, 2, 3), 2),
            DistanceMetric::L1,
            Device::Cpu
        ),
        Err(Error::DimensionMismatch { .. })
    ));
    let labels = vec![0u32; 9];
    assert!(matches!(
        KnnClassifier::fit(
            view(&train, 3),
            &labels,
            3,
            Weights::Uniform,
            DistanceMetric::L1,
            Device::Cpu
        ),
        Err(Error::LabelCount {
            labels: 9,
            rows: 10
        })
    ));
    let labels = vec![0u32; 10];
    for k in [0, 11] {
        assert!(matches!(
            KnnClassifier::fit(
                view(&train, 3),
                &labels,
                k,
                Weights::Uniform,
                DistanceMetric::L1,
                Device::Cpu
            ),
            Err(Error::InvalidParameter { name: "k", .. })
        ));
    }
    assert!(matches!(
        KnnIndex::new(
            MatrixView::new(&[], 0, 3).unwrap(),
            DistanceMetric::L1,
            Device::Cpu
        ),
        Err(Error::EmptyData)
    ));
    assert!("bogus".parse::<DistanceMetric>().is_err());
    assert!("bogus".parse::<Selection>().is_err());
}

// ---- Iris ----------------------------------------------------------------------------------

/// The Iris data (tests/data/iris.csv) in tenths of a centimetre — integers, so every distance
/// below is exact in f32 and f64 alike — and the species as 0, 1, 2.
fn iris() -> (Vec<f32>, Vec<u32>) {
    let text = include_str!("data/iris.csv");
    let mut x = Vec::new();
    let mut y = Vec::new();
    for line in text.lines().skip(1).filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split(',').collect();
        for f in &fields[..4] {
            x.push((f.parse::<f32>().unwrap() * 10.0).round());
        }
        y.push(match fields[4] {
            "setosa" => 0,
            "versicolor" => 1,
            "virginica" => 2,
            other => panic!("unknown species {other}"),
        });
    }
    assert_eq!(y.len(), 150);
    (x, y)
}

/// A straightforward kNN classifier: f64 distances, a full sort, a vote count, and the
/// documented tie rule (the tied class whose member comes first in the neighbour list).
fn ref_classify(
    train: &[f32],
    labels: &[u32],
    queries: &[f32],
    k: usize,
    weights: Weights,
    metric: DistanceMetric,
) -> Vec<u32> {
    let d = 4;
    queries
        .chunks_exact(d)
        .map(|q| {
            let mut all: Vec<(f64, usize)> = train
                .chunks_exact(d)
                .enumerate()
                .map(|(j, y)| {
                    let dist = match metric {
                        DistanceMetric::L1 => q
                            .iter()
                            .zip(y)
                            .map(|(a, b)| (*a as f64 - *b as f64).abs())
                            .sum(),
                        DistanceMetric::SqEuclidean => q
                            .iter()
                            .zip(y)
                            .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
                            .sum(),
                        _ => q
                            .iter()
                            .zip(y)
                            .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
                            .sum::<f64>()
                            .sqrt(),
                    };
                    (dist, j)
                })
                .collect();
            all.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap().then(a.1.cmp(&b.1)));
            let nearest = &all[..k];
            let mut score = [0f64; 3];
            let mut first = [usize::MAX; 3];
            let exact = nearest[0].0 == 0.0;
            for (rank, &(dist, j)) in nearest.iter().enumerate() {
                let c = labels[j] as usize;
                score[c] += match weights {
                    Weights::Uniform => 1.0,
                    _ if exact => f64::from(u8::from(dist == 0.0)),
                    _ => 1.0 / dist,
                };
                first[c] = first[c].min(rank);
            }
            let mut best = 0;
            for c in 1..3 {
                if score[c] > score[best] || (score[c] == score[best] && first[c] < first[best]) {
                    best = c;
                }
            }
            best as u32
        })
        .collect()
}

/// Trains on 4 of every 5 rows and predicts all 150 (so 120 queries have an exact match).
fn iris_agrees_with_reference(device: Device) {
    let (x, y) = iris();
    let (mut train, mut labels) = (Vec::new(), Vec::new());
    for i in 0..150 {
        if i % 5 != 0 {
            train.extend_from_slice(&x[i * 4..(i + 1) * 4]);
            labels.push(y[i]);
        }
    }
    for metric in [
        DistanceMetric::Euclidean,
        DistanceMetric::L1,
        DistanceMetric::SqEuclidean,
    ] {
        for weights in [Weights::Uniform, Weights::Distance] {
            for k in [1, 3, 5, 15, 40, 120] {
                let clf = KnnClassifier::fit(view(&train, 4), &labels, k, weights, metric, device)
                    .unwrap();
                let got = clf.predict(view(&x, 4)).unwrap();
                let want = ref_classify(&train, &labels, &x, k, weights, metric);
                let case = format!("iris {metric} {weights} k={k} on {device}");
                assert_eq!(got, want, "{case}");
                let held_out =
                    |p: &[u32]| (0..150).filter(|i| i % 5 == 0 && p[*i] == y[*i]).count();
                assert_eq!(held_out(&got), held_out(&want), "{case}: accuracy");
                if k == 5 && weights == Weights::Uniform {
                    assert!(
                        held_out(&got) >= 27,
                        "{case}: {} of 30 right",
                        held_out(&got)
                    );
                }
            }
        }
    }
}

#[test]
fn iris_cpu_predicts_like_the_reference() {
    iris_agrees_with_reference(Device::Cpu);
}

#[test]
fn scaling_then_classifying_is_consistent() {
    let (x, y) = iris();
    let fitted = Scaler::ZScore.fit(view(&x, 4)).unwrap();
    let scaled = fitted.transform(view(&x, 4)).unwrap();
    let clf = KnnClassifier::fit(
        view(&scaled, 4),
        &y,
        1,
        Weights::Uniform,
        DistanceMetric::Euclidean,
        Device::Cpu,
    )
    .unwrap();
    // Every training row is its own nearest neighbour... unless an exact duplicate of another
    // class comes first; Iris has none across classes.
    assert_eq!(clf.predict(view(&scaled, 4)).unwrap(), y);
    let p = clf.predict_proba(view(&scaled, 4)).unwrap();
    assert_eq!(p.dim(), (150, 3));
    assert_eq!(clf.classes(), &[0, 1, 2]);
}

// ---- GPU against the CPU ---------------------------------------------------------------------

fn pairwise_against_cpu(device: Device, small: bool) {
    let mut shapes = vec![
        (1usize, 1usize, 1usize),
        (129, 257, 17),
        (5, 300, 1),
        (40, 33, 35),
    ];
    if !small {
        shapes.extend([(1000, 2000, 3), (300, 777, 300), (2, 5000, 64)]);
    }
    for (m, n, d) in shapes {
        let a = uniform(m, d, (m * 31 + d) as u64);
        let mut b = uniform(n, d, (n * 17 + d) as u64);
        b[..d].copy_from_slice(&a[..d]);
        for metric in METRICS {
            let case = format!("pairwise {m}×{n}×{d} {metric}");
            let cpu = pairwise_distances(view(&a, d), view(&b, d), metric, Device::Cpu).unwrap();
            let dev = pairwise_distances(view(&a, d), view(&b, d), metric, device).unwrap();
            assert_close(&case, dev.as_slice().unwrap(), cpu.as_slice().unwrap());
            assert_eq!(dev, cpu, "{case}: not bit-identical");
        }
    }
}

#[test]
fn gpu_pairwise_matches_cpu() {
    if let Some(device) = gpu("gpu_pairwise_matches_cpu") {
        pairwise_against_cpu(device, false);
    }
}

#[test]
fn sanitize_pairwise_matches_cpu() {
    if let Some(device) = gpu("sanitize_pairwise_matches_cpu") {
        pairwise_against_cpu(device, true);
    }
}

fn blocks_against_cpu(device: Device, small: bool) {
    let (m, n, d) = if small { (50, 70, 5) } else { (3000, 1500, 12) };
    let a = lattice(m, d, 5, 1);
    let b = lattice(n, d, 5, 2);
    for metric in [DistanceMetric::SqEuclidean, DistanceMetric::L1] {
        let full = pairwise_distances(view(&a, d), view(&b, d), metric, Device::Cpu).unwrap();
        let mut next = 0;
        let mut blocks = 0;
        pairwise_distances_blocks(
            view(&a, d),
            view(&b, d),
            metric,
            device,
            Some(7 * n * 4 + 3),
            |first, block| {
                assert_eq!(first, next);
                assert!(block.nrows() <= 7);
                let got: Vec<f32> = block.iter().copied().collect();
                let want = &full.as_slice().unwrap()[first * n..(first + block.nrows()) * n];
                assert_eq!(got, want);
                next += block.nrows();
                blocks += 1;
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(next, m);
        assert_eq!(blocks, m.div_ceil(7));
        // An error from the callback stops the work and comes back.
        let mut calls = 0;
        let r = pairwise_distances_blocks(
            view(&a, d),
            view(&b, d),
            metric,
            device,
            Some(n * 4),
            |_, _| {
                calls += 1;
                Err(Error::EmptyData)
            },
        );
        assert!(matches!(r, Err(Error::EmptyData)));
        assert_eq!(calls, 1);
    }
}

#[test]
fn gpu_pairwise_blocks_match_cpu() {
    if let Some(device) = gpu("gpu_pairwise_blocks_match_cpu") {
        blocks_against_cpu(device, false);
    }
}

#[test]
fn sanitize_pairwise_blocks_match_cpu() {
    if let Some(device) = gpu("sanitize_pairwise_blocks_match_cpu") {
        blocks_against_cpu(device, true);
    }
}

/// One block of more than 2^31 distances: 64-bit offsets in the distance kernel.
#[test]
fn gpu_pairwise_output_past_2_pow_31() {
    let Some(device) = gpu("gpu_pairwise_output_past_2_pow_31") else {
        return;
    };
    let (m, n) = (65_536usize, 32_769usize); // 2^31 + 65,536 outputs, 8 GiB
    let a: Vec<f32> = (0..m).map(|i| (i % 1000) as f32 * 0.5).collect();
    let b: Vec<f32> = (0..n).map(|j| (j % 777) as f32 * -0.25).collect();
    let mut checked = 0;
    let mut largest = 0usize;
    pairwise_distances_blocks(
        view(&a, 1),
        view(&b, 1),
        DistanceMetric::L1,
        device,
        None,
        |first, block| {
            let rows = block.nrows();
            largest = largest.max(block.len());
            // The last rows of the block sit past 2^31 elements when the block is large enough.
            for i in [0, rows / 2, rows - 1] {
                for j in [0, n / 3, n - 1] {
                    let want = (a[first + i] - b[j]).abs();
                    assert_eq!(block[[i, j]], want, "row {} col {j}", first + i);
                    checked += 1;
                }
            }
            Ok(())
        },
    )
    .unwrap();
    assert!(checked > 0);
    // With the 8 GiB block (and its copy) in memory, the one block passes 2^31 elements.
    let (free, _) = kmeans_knn::gpu_memory(0).unwrap();
    if free > 24 << 30 {
        assert!(largest > 1 << 31, "largest block {largest} elements");
    }
}

fn search_against_cpu(device: Device, small: bool) {
    for c in search_cases(small) {
        let metrics: &[DistanceMetric] = if small || c.k > 2048 {
            &[
                DistanceMetric::Euclidean,
                DistanceMetric::L1,
                DistanceMetric::Cosine,
            ]
        } else {
            &METRICS
        };
        for &metric in metrics {
            let cpu = KnnIndex::new(view(&c.train, c.d), metric, Device::Cpu)
                .unwrap()
                .search(view(&c.queries, c.d), c.k)
                .unwrap();
            let want_idx: Vec<u32> = cpu.indices.iter().copied().collect();
            let want_dist: Vec<f32> = cpu.distances.iter().copied().collect();
            if small {
                let (ri, rd) = ref_knn(&c.train, &c.queries, c.d, c.k, metric);
                assert_eq!(want_idx, ri, "{}: CPU vs reference", c.name);
                assert_close(&c.name, &want_dist, &rd);
            }
            for sel in [
                Selection::KMin,
                Selection::Bitonic,
                Selection::Radix,
                Selection::Auto,
            ] {
                let index = KnnIndex::new(view(&c.train, c.d), metric, device)
                    .unwrap()
                    .with_selection(sel);
                let r = index.search(view(&c.queries, c.d), c.k).unwrap();
                let case = format!("{} {metric} {sel} → {}", c.name, r.selection);
                assert_ne!(r.selection, Selection::Auto, "{case}");
                if c.k > 2048 {
                    assert_eq!(r.selection, Selection::Bitonic, "{case}");
                } else if sel != Selection::Auto {
                    assert_eq!(r.selection, sel, "{case}");
                }
                assert_same_neighbours(&case, &r, &want_idx, &want_dist);
                assert_eq!(r.distances, cpu.distances, "{case}: not bit-identical");
                // The same answer with i64 indices, split straight out of the GPU's keys.
                let wide = index.search_i64(view(&c.queries, c.d), c.k).unwrap();
                assert_eq!(wide.indices, cpu.indices.mapv(i64::from), "{case}: i64");
                assert_eq!(wide.distances, cpu.distances, "{case}: i64");
            }
        }
    }
}

#[test]
fn gpu_search_matches_cpu() {
    if let Some(device) = gpu("gpu_search_matches_cpu") {
        search_against_cpu(device, false);
    }
}

#[test]
fn sanitize_search_matches_cpu() {
    if let Some(device) = gpu("sanitize_search_matches_cpu") {
        search_against_cpu(device, true);
    }
}

fn batched_against_cpu(device: Device, small: bool) {
    let (n, m, d) = if small { (300, 45, 3) } else { (6000, 3000, 8) };
    let train = lattice(n, d, 4, 31);
    let queries = lattice(m, d, 4, 32);
    for k in [1, 9, 2100.min(n)] {
        let cpu = KnnIndex::new(view(&train, d), DistanceMetric::SqEuclidean, Device::Cpu)
            .unwrap()
            .search(view(&queries, d), k)
            .unwrap();
        for limit in [1usize, 100_000, 3 << 20] {
            let index = KnnIndex::new(view(&train, d), DistanceMetric::SqEuclidean, device)
                .unwrap()
                .with_memory_limit(Some(limit));
            let r = index.search(view(&queries, d), k).unwrap();
            assert_eq!(r.indices, cpu.indices, "k={k} limit={limit}");
            assert_eq!(r.distances, cpu.distances, "k={k} limit={limit}");
            let wide = index.search_i64(view(&queries, d), k).unwrap();
            assert_eq!(
                wide.indices,
                cpu.indices.mapv(i64::from),
                "k={k} limit={limit}"
            );
            assert_eq!(wide.distances, cpu.distances, "k={k} limit={limit}");
        }
    }
}

#[test]
fn gpu_batched_search_matches_cpu() {
    if let Some(device) = gpu("gpu_batched_search_matches_cpu") {
        batched_against_cpu(device, false);
    }
}

#[test]
fn sanitize_batched_search_matches_cpu() {
    if let Some(device) = gpu("sanitize_batched_search_matches_cpu") {
        batched_against_cpu(device, true);
    }
}

/// One index searched again and again (its buffers kept from one search to the next): the same
/// shape twice, another k, the first again, and (with the full shapes) the whole-row sort; in
/// one batch and in several; with the prefilter (squared Euclidean) and without (L1); then a
/// classifier's votes twice and its shares. Every answer is the CPU's.
fn repeated_against_cpu(device: Device, small: bool) {
    let (n, m, d) = if small {
        (700, 40, 5)
    } else {
        (20_000, 900, 32)
    };
    let train = uniform(n, d, 101);
    let queries = uniform(m, d, 102);
    let mut ks = vec![10, 10, 3, 10];
    if !small {
        ks.extend([2100, 2100, 10]);
    }
    for metric in [DistanceMetric::SqEuclidean, DistanceMetric::L1] {
        let cpu = KnnIndex::new(view(&train, d), metric, Device::Cpu).unwrap();
        for limit in [None, Some((m / 3) * (20 << 10))] {
            let index = KnnIndex::new(view(&train, d), metric, device)
                .unwrap()
                .with_memory_limit(limit);
            for &k in &ks {
                let (want, got) = (
                    cpu.search(view(&queries, d), k).unwrap(),
                    index.search(view(&queries, d), k).unwrap(),
                );
                let case = format!("{metric} limit {limit:?} k={k}");
                assert_eq!(got.indices, want.indices, "{case}");
                assert_eq!(got.distances, want.distances, "{case}");
            }
        }
        let labels: Vec<u32> = (0..n as u32).map(|i| (i * 7) % 5).collect();
        let fit = |dev| {
            KnnClassifier::fit(view(&train, d), &labels, 9, Weights::Distance, metric, dev).unwrap()
        };
        let (cpu, dev) = (fit(Device::Cpu), fit(device));
        let q = view(&queries, d);
        let want = cpu.predict(&q).unwrap();
        assert_eq!(dev.predict(&q).unwrap(), want, "{metric}: votes");
        assert_eq!(dev.predict(&q).unwrap(), want, "{metric}: votes again");
        let proba = cpu.predict_proba(&q).unwrap();
        assert_eq!(dev.predict_proba(&q).unwrap(), proba, "{metric}: shares");
        assert_eq!(
            dev.predict(&q).unwrap(),
            want,
            "{metric}: votes after shares"
        );
    }
}

#[test]
fn gpu_repeated_searches_match_cpu() {
    if let Some(device) = gpu("gpu_repeated_searches_match_cpu") {
        repeated_against_cpu(device, false);
    }
}

#[test]
fn sanitize_repeated_searches_match_cpu() {
    if let Some(device) = gpu("sanitize_repeated_searches_match_cpu") {
        repeated_against_cpu(device, true);
    }
}

fn classify_against_cpu(device: Device, small: bool) {
    let (per, nq) = if small { (30, 25) } else { (400, 2000) };
    let (train, labels) = blobs(5, per, 4, 41);
    let labels: Vec<u32> = labels.iter().map(|&l| l * 10 + 3).collect(); // sparse label values
    // Queries between the blobs (close votes) and a lattice copy with exact ties.
    let queries: Vec<f32> = uniform(nq, 4, 42)
        .iter()
        .map(|v| v * 250.0 + 150.0)
        .collect();
    let mut cases = vec![(train.clone(), labels.clone(), queries, 4usize)];
    let tied = lattice(if small { 200 } else { 3000 }, 2, 3, 43);
    let tied_labels: Vec<u32> = (0..tied.len() / 2).map(|i| (i % 4) as u32).collect();
    cases.push((tied.clone(), tied_labels, lattice(nq, 2, 3, 44), 2));
    for (train, labels, queries, d) in cases {
        let n = labels.len();
        for metric in [
            DistanceMetric::Euclidean,
            DistanceMetric::L1,
            DistanceMetric::Cosine,
        ] {
            for (weights, tie) in [Weights::Uniform, Weights::Distance]
                .into_iter()
                .flat_map(|w| [(w, TieBreak::Nearest), (w, TieBreak::SmallestLabel)])
            {
                for k in [1, 7, 64.min(n), n.min(2100)] {
                    let case = format!("classify n={n} {metric} {weights} {tie} k={k}");
                    let fit = |dev| {
                        KnnClassifier::fit(view(&train, d), &labels, k, weights, metric, dev)
                            .unwrap()
                            .with_tie_break(tie)
                    };
                    let (cpu, dev) = (fit(Device::Cpu), fit(device));
                    let q = view(&queries, d);
                    assert_eq!(dev.predict(&q).unwrap(), cpu.predict(&q).unwrap(), "{case}");
                    let (pc, pd) = (
                        cpu.predict_proba(&q).unwrap(),
                        dev.predict_proba(&q).unwrap(),
                    );
                    assert_eq!(pd, pc, "{case}: probabilities");
                }
            }
        }
    }
    // More classes than a block's shared memory holds: the histograms go to global scratch.
    let n = if small { 4200 } else { 9000 };
    let train = uniform(n, 3, 45);
    let labels: Vec<u32> = (0..n as u32).map(|i| i % 4500).collect();
    let queries = uniform(if small { 7 } else { 500 }, 3, 46);
    for k in [3, 10] {
        let fit = |dev| {
            KnnClassifier::fit(
                view(&train, 3),
                &labels,
                k,
                Weights::Distance,
                DistanceMetric::Euclidean,
                dev,
            )
            .unwrap()
            .with_tie_break(if k == 3 {
                TieBreak::SmallestLabel
            } else {
                TieBreak::Nearest
            })
        };
        let (cpu, dev) = (fit(Device::Cpu), fit(device));
        let q = view(&queries, 3);
        assert_eq!(
            dev.predict(&q).unwrap(),
            cpu.predict(&q).unwrap(),
            "4500 classes k={k}"
        );
        assert_eq!(
            dev.predict_proba(&q).unwrap(),
            cpu.predict_proba(&q).unwrap(),
            "4500 classes k={k}"
        );
    }
}

#[test]
fn gpu_classify_matches_cpu() {
    if let Some(device) = gpu("gpu_classify_matches_cpu") {
        classify_against_cpu(device, false);
    }
}

#[test]
fn sanitize_classify_matches_cpu() {
    if let Some(device) = gpu("sanitize_classify_matches_cpu") {
        classify_against_cpu(device, true);
    }
}

#[test]
fn gpu_iris_predicts_like_the_reference() {
    if let Some(device) = gpu("gpu_iris_predicts_like_the_reference") {
        iris_agrees_with_reference(device);
    }
}

#[test]
fn sanitize_iris_predicts_like_the_reference() {
    if let Some(device) = gpu("sanitize_iris_predicts_like_the_reference") {
        let (x, y) = iris();
        for k in [1, 5] {
            let clf = KnnClassifier::fit(
                view(&x, 4),
                &y,
                k,
                Weights::Distance,
                DistanceMetric::Euclidean,
                device,
            )
            .unwrap();
            let want = ref_classify(&x, &y, &x, k, Weights::Distance, DistanceMetric::Euclidean);
            assert_eq!(clf.predict(view(&x, 4)).unwrap(), want);
        }
    }
}

/// `Auto` picks once per shape and sticks to it; all selections agree.
fn auto_is_remembered(device: Device, small: bool) {
    let (n, m) = if small { (600, 20) } else { (50_000, 1000) };
    let train = uniform(n, 8, 51);
    let queries = uniform(m, 8, 52);
    let index = KnnIndex::new(view(&train, 8), DistanceMetric::Euclidean, device).unwrap();
    let first = index.search(view(&queries, 8), 16).unwrap();
    let again = index.search(view(&queries, 8), 16).unwrap();
    assert_eq!(first.selection, again.selection);
    assert_eq!(first, again);
    let other = KnnIndex::new(view(&train, 8), DistanceMetric::Euclidean, device)
        .unwrap()
        .search(view(&queries[..8 * 5], 8), 16)
        .unwrap();
    assert_eq!(
        other.selection, first.selection,
        "remembered per shape, not per index"
    );
}

#[test]
fn gpu_auto_selection_is_remembered() {
    if let Some(device) = gpu("gpu_auto_selection_is_remembered") {
        auto_is_remembered(device, false);
    }
}

#[test]
fn sanitize_auto_selection_is_remembered() {
    if let Some(device) = gpu("sanitize_auto_selection_is_remembered") {
        auto_is_remembered(device, true);
    }
}

#[test]
fn gpu_bad_input_gets_typed_errors() {
    let Some(device) = gpu("gpu_bad_input_gets_typed_errors") else {
        return;
    };
    let train = uniform(10, 3, 1);
    let index = KnnIndex::new(view(&train, 3), DistanceMetric::L1, device).unwrap();
    let q = uniform(2, 3, 2);
    assert!(matches!(
        index.search(view(&q, 3), 0),
        Err(Error::InvalidParameter { name: "k", .. })
    ));
    assert!(matches!(
        index.search(view(&q, 3), 11),
        Err(Error::InvalidParameter { name: "k", .. })
    ));
    assert!(matches!(
        index.search(view(&q[..4], 2), 1),
        Err(Error::DimensionMismatch { .. })
    ));
    let mut nan = q.clone();
    nan[0] = f32::NAN;
    assert!(matches!(
        index.search(view(&nan, 3), 1),
        Err(Error::NonFinite { .. })
    ));
    assert!(matches!(
        KnnClassifier::fit(
            view(&train, 3),
            &[1, 2],
            1,
            Weights::Uniform,
            DistanceMetric::L1,
            device
        ),
        Err(Error::LabelCount {
            labels: 2,
            rows: 10
        })
    ));
}

// ---- TF32 prefilter --------------------------------------------------------------------------

/// Whether the GPU has tensor cores for the prefilter (compute capability ≥ 8.0).
fn tensor_cores() -> bool {
    kmeans_knn::gpu_info(0).is_ok_and(|i| i.compute_capability.0 >= 8)
}

/// Whether the prefilter should run for `n` training rows, `k` and `metric` on such a GPU.
fn prefilter_applies(n: usize, k: usize, metric: DistanceMetric) -> bool {
    matches!(
        metric,
        DistanceMetric::SqEuclidean | DistanceMetric::Euclidean
    ) && k <= 2048
        && n.div_ceil(16) >= 2 * k
}

/// Rows scaled by powers of ten from 10^-3 to 10^3: very different norms.
fn mixed_norms(n: usize, d: usize, seed: u64) -> Vec<f32> {
    let mut v = uniform(n, d, seed);
    for (i, row) in v.chunks_mut(d).enumerate() {
        let s = 10f32.powi((i % 7) as i32 - 3);
        row.iter_mut().for_each(|x| *x *= s);
    }
    v
}

fn prefilter_cases(small: bool) -> Vec<Case> {
    let mut cases = vec![
        case(
            "d=1 n=1000 k=1",
            uniform(1000, 1, 61),
            uniform(37, 1, 62),
            1,
            1,
        ),
        case(
            "d=3 n=1111 k=5",
            uniform(1111, 3, 63),
            uniform(50, 3, 64),
            3,
            5,
        ),
        case(
            "lattice ties d=2 n=1500 k=20",
            lattice(1500, 2, 4, 65),
            lattice(40, 2, 4, 66),
            2,
            20,
        ),
        case(
            "mixed norms d=9 n=900 k=3",
            mixed_norms(900, 9, 67),
            mixed_norms(30, 9, 68),
            9,
            3,
        ),
        case(
            "k=n=300 d=4",
            uniform(300, 4, 69),
            uniform(9, 4, 70),
            4,
            300,
        ),
    ];
    if small {
        cases.push(case(
            "d=129 n=700 k=7",
            uniform(700, 129, 71),
            uniform(20, 129, 72),
            129,
            7,
        ));
    } else {
        cases.extend([
            case(
                "d=129 n=20000 k=100",
                uniform(20_000, 129, 73),
                uniform(300, 129, 74),
                129,
                100,
            ),
            case(
                "d=256 n=33001 k=25 (query tile restaged)",
                uniform(33_001, 256, 75),
                uniform(500, 256, 76),
                256,
                25,
            ),
            case(
                "d=300 n=9000 k=10",
                uniform(9000, 300, 77),
                uniform(130, 300, 78),
                300,
                10,
            ),
            case(
                "k=512 n=20000 d=64",
                uniform(20_000, 64, 79),
                uniform(200, 64, 80),
                64,
                512,
            ),
            case(
                "duplicates and ties n=30000 d=3 k=100",
                lattice(30_000, 3, 40, 81),
                lattice(300, 3, 40, 82),
                3,
                100,
            ),
            case(
                "mixed norms n=10007 d=33 k=64",
                mixed_norms(10_007, 33, 83),
                mixed_norms(257, 33, 84),
                33,
                64,
            ),
            case(
                "positive data n=50000 d=128 k=2048",
                uniform(50_000, 128, 85).iter().map(|v| v + 1.0).collect(),
                uniform(70, 128, 86).iter().map(|v| v + 1.0).collect(),
                128,
                2048,
            ),
        ]);
    }
    cases
}

/// The prefiltered search returns exactly the CPU's keys (indices and distance bits), with
/// every selection, with and without query batches; the exact GPU path agrees too.
fn prefilter_against_cpu(device: Device, small: bool) {
    let tc = tensor_cores();
    // Queries whose candidates came from stored approximations, and from a second scan.
    let (mut stored, mut scanned) = (0, 0);
    for c in prefilter_cases(small) {
        let n = c.train.len() / c.d;
        for metric in [DistanceMetric::SqEuclidean, DistanceMetric::Euclidean] {
            let cpu = KnnIndex::new(view(&c.train, c.d), metric, Device::Cpu)
                .unwrap()
                .search(view(&c.queries, c.d), c.k)
                .unwrap();
            let m = c.queries.len() / c.d;
            let limits = [None, Some(((m / 3).max(1)) * (20 << 10))];
            for sel in [Selection::KMin, Selection::Bitonic, Selection::Radix] {
                for limit in limits {
                    let index = KnnIndex::new(view(&c.train, c.d), metric, device)
                        .unwrap()
                        .with_selection(sel)
                        .with_memory_limit(limit);
                    let r = index.search(view(&c.queries, c.d), c.k).unwrap();
                    let case = format!("{} {metric} {sel} limit {limit:?}", c.name);
                    assert_eq!(r.indices, cpu.indices, "{case}: indices");
                    assert_eq!(
                        r.distances.mapv(f32::to_bits),
                        cpu.distances.mapv(f32::to_bits),
                        "{case}: distance bits"
                    );
                    assert_eq!(r.selection, sel, "{case}");
                    let expect = tc && prefilter_applies(n, c.k, metric);
                    assert_eq!(r.prefilter.is_some(), expect, "{case}: {:?}", r.prefilter);
                    if let Some(p) = r.prefilter {
                        assert_eq!(p.queries, m, "{case}");
                        if limit.is_none() {
                            assert_eq!(p.stored, m, "{case}: n ≤ 2^18 and no limit");
                        }
                        stored += p.stored;
                        scanned += m - p.stored;
                    }
                }
            }
            let exact = KnnIndex::new(view(&c.train, c.d), metric, device)
                .unwrap()
                .with_prefilter(false)
                .search(view(&c.queries, c.d), c.k)
                .unwrap();
            assert!(exact.prefilter.is_none());
            assert_eq!(exact.indices, cpu.indices, "{} exact path", c.name);
        }
    }
    if tc {
        assert!(
            stored > 0 && scanned > 0,
            "stored {stored}, scanned {scanned}"
        );
    }
}

#[test]
fn gpu_prefilter_matches_cpu() {
    if let Some(device) = gpu("gpu_prefilter_matches_cpu") {
        prefilter_against_cpu(device, false);
    }
}

#[test]
fn sanitize_prefilter_matches_cpu() {
    if let Some(device) = gpu("sanitize_prefilter_matches_cpu") {
        prefilter_against_cpu(device, true);
    }
}

/// Thousands of copies of one point: a query on it has more candidates than the re-rank holds
/// and takes the exact path; the others do not; the answer is the CPU's either way: in one batch
/// and in batches of a query or two (a query on the copies in a later batch too), as indices and
/// distances (one GPU), as keys (a GPU set, whose parts each hold more copies than the re-rank)
/// and as votes.
fn prefilter_fallback(device: Device, small: bool) {
    let (n, dup, d) = if small {
        (10_000, 9_000, 3)
    } else {
        (40_000, 20_000, 16)
    };
    let (train, p) = copies_of_one_point(n, dup, d);
    let mut queries = uniform(6, d, 92);
    queries[..d].copy_from_slice(&p); // on the duplicates
    queries[2 * d..3 * d]
        .iter_mut()
        .zip(&p)
        .for_each(|(q, v)| *q = v + 1e-4); // next to them
    queries[5 * d..].copy_from_slice(&p); // on them, in a later batch
    let Device::Cuda(o) = device else {
        unreachable!("the gate resolves to a GPU")
    };
    let set = Device::Gpus(kmeans_knn::GpuSet::new(&[o, o]).unwrap());
    let labels: Vec<u32> = (0..n as u32).map(|i| i % 3).collect();
    for metric in [DistanceMetric::SqEuclidean, DistanceMetric::Euclidean] {
        for k in [1, 10] {
            let cpu = KnnIndex::new(view(&train, d), metric, Device::Cpu)
                .unwrap()
                .search(view(&queries, d), k)
                .unwrap();
            // No limit: one batch; 40 KiB: one or two queries a batch.
            for limit in [None, Some(40 << 10)] {
                for dev in [device, set] {
                    // A fixed selection: `Auto` may time the exact path faster here and skip
                    // the prefilter this test is about.
                    let index = KnnIndex::new(view(&train, d), metric, dev).unwrap();
                    let r = (index.with_memory_limit(limit))
                        .with_selection(Selection::Radix)
                        .search(view(&queries, d), k)
                        .unwrap();
                    let case = format!("{metric} k={k} limit {limit:?} {dev}");
                    assert_eq!(r.indices, cpu.indices, "{case}");
                    assert_eq!(
                        r.distances.mapv(f32::to_bits),
                        cpu.distances.mapv(f32::to_bits),
                        "{case}"
                    );
                    if tensor_cores() {
                        let p = r.prefilter.expect("the prefilter ran");
                        // The queries on the duplicates at least (a random one may reach them
                        // too).
                        assert!(p.exact_fallbacks >= 2, "{case}: {p:?}");
                    }
                }
                let fit = |dev| {
                    KnnClassifier::fit(view(&train, d), &labels, k, Weights::Uniform, metric, dev)
                        .unwrap()
                        .with_memory_limit(limit)
                        .with_selection(Selection::Radix)
                };
                let (cpu, dev) = (fit(Device::Cpu), fit(device));
                let q = view(&queries, d);
                let case = format!("{metric} k={k} limit {limit:?}: votes");
                assert_eq!(dev.predict(&q).unwrap(), cpu.predict(&q).unwrap(), "{case}");
                assert_eq!(
                    dev.predict_proba(&q).unwrap(),
                    cpu.predict_proba(&q).unwrap(),
                    "{case}"
                );
            }
        }
    }
}

#[test]
fn gpu_prefilter_falls_back_on_duplicates() {
    if let Some(device) = gpu("gpu_prefilter_falls_back_on_duplicates") {
        prefilter_fallback(device, false);
    }
}

#[test]
fn sanitize_prefilter_falls_back_on_duplicates() {
    if let Some(device) = gpu("sanitize_prefilter_falls_back_on_duplicates") {
        prefilter_fallback(device, true);
    }
}

/// Classification through the prefilter: the same predictions and probabilities as the CPU.
fn prefilter_classify(device: Device, small: bool) {
    let (n, nq, d) = if small {
        (2000, 30, 5)
    } else {
        (40_000, 2000, 24)
    };
    let train = uniform(n, d, 95);
    let labels: Vec<u32> = (0..n as u32).map(|i| (i * 7 + i / 3) % 5).collect();
    let queries = uniform(nq, d, 96);
    for metric in [DistanceMetric::SqEuclidean, DistanceMetric::Euclidean] {
        for weights in [Weights::Uniform, Weights::Distance] {
            for k in [1, 25] {
                // A fixed selection keeps the prefilter (`Auto` may time the exact path faster).
                let fit = |dev| {
                    KnnClassifier::fit(view(&train, d), &labels, k, weights, metric, dev)
                        .unwrap()
                        .with_selection(Selection::Bitonic)
                };
                let (cpu, dev) = (fit(Device::Cpu), fit(device));
                let q = view(&queries, d);
                let case = format!("{metric} {weights} k={k}");
                assert_eq!(dev.predict(&q).unwrap(), cpu.predict(&q).unwrap(), "{case}");
                assert_eq!(
                    dev.predict_proba(&q).unwrap(),
                    cpu.predict_proba(&q).unwrap(),
                    "{case}"
                );
            }
        }
    }
}

#[test]
fn gpu_prefilter_classify_matches_cpu() {
    if let Some(device) = gpu("gpu_prefilter_classify_matches_cpu") {
        prefilter_classify(device, false);
    }
}

#[test]
fn sanitize_prefilter_classify_matches_cpu() {
    if let Some(device) = gpu("sanitize_prefilter_classify_matches_cpu") {
        prefilter_classify(device, true);
    }
}

/// `Device::Gpus`, both layouts: the training rows cut into a part per GPU, each query's
/// candidates merged by (distance, index), and the rows copied to every GPU, each answering a
/// share of the queries. On one GPU the set repeats its ordinal (the same path, parts or copies
/// on one GPU): searches, votes and averages equal one GPU's and the CPU's bit for bit, with ties
/// across parts and k above a part's rows. `KnnLayout::Auto` copies rows this small.
#[test]
fn a_gpu_set_answers_as_one_gpu_and_the_cpu() {
    let Some(gpu) = gpu("a_gpu_set_answers_as_one_gpu_and_the_cpu") else {
        return;
    };
    let Device::Cuda(o) = gpu else {
        unreachable!("the gate resolves to a GPU")
    };
    let sets = [vec![o; 2], vec![o; 3]];
    let (n, d) = (301, 3);
    let small = uniform(n, d, 91);
    for (layout, chosen) in [
        (KnnLayout::Auto, KnnLayout::Replicate),
        (KnnLayout::Shard, KnnLayout::Shard),
        (KnnLayout::Replicate, KnnLayout::Replicate),
    ] {
        let set = kmeans_knn::GpuSet::new(&sets[0])
            .unwrap()
            .with_knn_layout(layout);
        let index = KnnIndex::new(view(&small, d), DistanceMetric::L1, Device::Gpus(set)).unwrap();
        assert_eq!(index.layout(), Some(chosen), "{layout}");
    }
    let cases = [
        ("uniform", uniform(n, d, 91)),
        ("lattice ties", lattice(n, d, 3, 92)),
    ];
    for (name, train) in &cases {
        let queries = uniform(40, d, 93);
        let classes: Vec<u32> = (0..n as u32).map(|i| i % 4).collect();
        let targets: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
        for metric in METRICS {
            for k in [1, 7, 120, n] {
                let answer = |device: Device| {
                    let index = KnnIndex::new(view(train, d), metric, device).unwrap();
                    let found = index.search(view(&queries, d), k).unwrap();
                    let wide = index.search_i64(view(&queries, d), k).unwrap();
                    assert_eq!(wide.indices, found.indices.mapv(i64::from), "i64");
                    assert_eq!(wide.distances, found.distances, "i64");
                    // Distance weights need a non-negative distance (not the inner product).
                    let weights = if metric.is_non_negative() {
                        Weights::Distance
                    } else {
                        Weights::Uniform
                    };
                    let clf =
                        KnnClassifier::fit(view(train, d), &classes, k, weights, metric, device)
                            .unwrap();
                    let proba = clf.predict_proba(view(&queries, d)).unwrap();
                    let reg = kmeans_knn::KnnRegressor::fit(
                        view(train, d),
                        MatrixView::new(&targets, n, 1).unwrap(),
                        k,
                        Weights::Uniform,
                        metric,
                        device,
                    )
                    .unwrap();
                    let mean = reg.predict(view(&queries, d)).unwrap();
                    let bits: Vec<u32> = found.distances.iter().map(|v| v.to_bits()).collect();
                    let proba: Vec<u32> = proba.iter().map(|v| v.to_bits()).collect();
                    let mean: Vec<u32> = mean.iter().map(|v| v.to_bits()).collect();
                    (
                        found.indices,
                        bits,
                        clf.predict(view(&queries, d)).unwrap(),
                        proba,
                        mean,
                    )
                };
                let cpu = answer(Device::Cpu);
                assert!(cpu == answer(gpu), "{name} {metric} k={k}: one GPU");
                for set in &sets {
                    for layout in [KnnLayout::Shard, KnnLayout::Replicate] {
                        let set = kmeans_knn::GpuSet::new(set)
                            .unwrap()
                            .with_knn_layout(layout);
                        let device = Device::Gpus(set);
                        assert!(
                            cpu == answer(device),
                            "{name} {metric} k={k}: {device} {layout}"
                        );
                    }
                }
            }
        }
    }
}

/// Copies on a GPU set write each share of a large answer straight into the caller's arrays (its
/// pages touched beside the search, then each batch split into them): the whole answer equals
/// one GPU's and the CPU's, in one batch a copy and in several, as `u32` and as `i64` indices;
/// an answer of 3 queries (too small to touch beside the search) too.
#[test]
fn a_gpu_set_of_copies_writes_large_answers_whole() {
    let Some(gpu) = gpu("a_gpu_set_of_copies_writes_large_answers_whole") else {
        return;
    };
    let Device::Cuda(o) = gpu else {
        unreachable!("the gate resolves to a GPU")
    };
    let (n, d, k) = (20_000, 8, 100);
    let train = uniform(n, d, 97);
    // Shares of 1,400 queries: 1.1 MB of keys each.
    for m in [2_801, 3] {
        let queries = uniform(m, d, 98);
        let cpu = KnnIndex::new(view(&train, d), DistanceMetric::SqEuclidean, Device::Cpu)
            .unwrap()
            .search(view(&queries, d), k)
            .unwrap();
        let one = KnnIndex::new(view(&train, d), DistanceMetric::SqEuclidean, gpu).unwrap();
        let one = one.search(view(&queries, d), k).unwrap();
        assert_eq!(one.indices, cpu.indices, "m={m}: one GPU");
        // 2 MiB: a few hundred queries a batch.
        for limit in [None, Some(2 << 20)] {
            let set = kmeans_knn::GpuSet::new(&[o, o])
                .unwrap()
                .with_knn_layout(KnnLayout::Replicate);
            let index = KnnIndex::new(
                view(&train, d),
                DistanceMetric::SqEuclidean,
                Device::Gpus(set),
            )
            .unwrap()
            .with_memory_limit(limit);
            let found = index.search(view(&queries, d), k).unwrap();
            let wide = index.search_i64(view(&queries, d), k).unwrap();
            let case = format!("m={m} limit {limit:?}");
            assert_eq!(found.indices, cpu.indices, "{case}");
            assert_eq!(
                found.distances.mapv(f32::to_bits),
                cpu.distances.mapv(f32::to_bits),
                "{case}"
            );
            assert_eq!(wide.indices, cpu.indices.mapv(i64::from), "{case}: i64");
            assert_eq!(wide.distances, found.distances, "{case}: i64");
        }
    }
}

/// Two searches of one GPU side by side on the threads of one rayon pool (as two Python threads
/// with the same `n_jobs` run them), with answers large enough that taking them back from the
/// GPU runs on the pool: both answer as the CPU does, every time. (A thread that waits there
/// for its part may take up the other search, which then must not wait for a buffer the first
/// one holds; this interleaving is rare, and `shelf.rs`'s unit test pins that a loan inside a
/// loan on one thread does not wait.)
#[test]
fn searches_of_one_gpu_side_by_side_in_one_pool_answer() {
    let Some(gpu) = gpu("searches_of_one_gpu_side_by_side_in_one_pool_answer") else {
        return;
    };
    let (d, k) = (8, 100);
    let train = uniform(20_000, d, 91);
    // 4 MB of keys an answer.
    let queries = uniform(5_000, d, 92);
    let cpu = KnnIndex::new(view(&train, d), DistanceMetric::SqEuclidean, Device::Cpu)
        .unwrap()
        .search(view(&queries, d), k)
        .unwrap();
    let index = KnnIndex::new(view(&train, d), DistanceMetric::SqEuclidean, gpu).unwrap();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(4)
        .build()
        .unwrap();
    for round in 0..20 {
        let search = || index.search(view(&queries, d), k).unwrap();
        let (a, b) = pool.install(|| rayon::join(search, search));
        for found in [a, b] {
            assert_eq!(found.indices, cpu.indices, "round {round}");
            assert_eq!(found.distances, cpu.distances, "round {round}");
        }
    }
}

/// A training set above the memory budget stays in host memory and streams through the GPU at
/// every search: the answer equals the resident index's and the CPU's, whatever the budget
/// (parts of one row, of a few rows, and a budget that holds it all).
#[test]
fn streamed_training_sets_answer_as_resident_ones() {
    let Some(gpu) = gpu("streamed_training_sets_answer_as_resident_ones") else {
        return;
    };
    let (n, d) = (777, 5);
    let queries = uniform(50, d, 95);
    for (name, train) in [
        ("uniform", uniform(n, d, 94)),
        ("lattice", lattice(n, d, 3, 96)),
    ] {
        for metric in METRICS {
            let cpu = KnnIndex::new(view(&train, d), metric, Device::Cpu).unwrap();
            let row = 4 * (d + 4);
            for budget in [4 * 37 * row, 4 * 150 * row, 4 * n * row] {
                let index =
                    KnnIndex::with_memory_budget(view(&train, d), metric, gpu, Some(budget))
                        .unwrap();
                assert_eq!(index.is_streamed(), budget < n * row, "budget {budget}");
                for k in [1, 9, 150, n] {
                    let (a, b) = (
                        cpu.search(view(&queries, d), k).unwrap(),
                        index.search(view(&queries, d), k).unwrap(),
                    );
                    let case = format!("{name} {metric} budget {budget} k={k}");
                    assert_eq!(a.indices, b.indices, "{case}");
                    let bits =
                        |r: &KnnResult| r.distances.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&a), bits(&b), "{case}");
                }
            }
        }
    }
    // A GPU set whose parts stream (two parts on this GPU, each above the budget).
    let Device::Cuda(o) = gpu else {
        unreachable!("the gate resolves to a GPU")
    };
    let set = Device::Gpus(kmeans_knn::GpuSet::new(&[o, o]).unwrap());
    let train = uniform(n, d, 94);
    let budget = Some(4 * 37 * 4 * (d + 4));
    let cpu = KnnIndex::new(view(&train, d), DistanceMetric::Euclidean, Device::Cpu).unwrap();
    let parts =
        KnnIndex::with_memory_budget(view(&train, d), DistanceMetric::Euclidean, set, budget)
            .unwrap();
    assert!(parts.is_streamed());
    let (a, b) = (
        cpu.search(view(&queries, d), 60).unwrap(),
        parts.search(view(&queries, d), 60).unwrap(),
    );
    assert_eq!((a.indices, a.distances), (b.indices, b.distances), "{set}");
    // Votes and averages over a streamed index.
    let train = lattice(n, d, 3, 96);
    let classes: Vec<u32> = (0..n as u32).map(|i| i % 5).collect();
    let targets: Vec<f32> = (0..n).map(|i| (i % 9) as f32).collect();
    let budget = Some(4 * 37 * 4 * (d + 4));
    for device in [Device::Cpu, gpu] {
        let index = |budget| {
            KnnIndex::with_memory_budget(view(&train, d), DistanceMetric::L1, device, budget)
                .unwrap()
        };
        let classify = |index| {
            let clf = KnnClassifier::from_index(index, &classes, 25, Weights::Distance).unwrap();
            let proba = clf.predict_proba(view(&queries, d)).unwrap();
            (clf.predict(view(&queries, d)).unwrap(), proba)
        };
        let regress = |index| {
            let targets = MatrixView::new(&targets, n, 1).unwrap();
            let reg = kmeans_knn::KnnRegressor::from_index(index, targets, 25, Weights::Uniform);
            reg.unwrap().predict(view(&queries, d)).unwrap()
        };
        assert_eq!(classify(index(None)), classify(index(budget)), "{device}");
        assert_eq!(regress(index(None)), regress(index(budget)), "{device}");
        if device == gpu {
            assert!(index(budget).is_streamed());
        }
    }
    // Parts of one row.
    let train = lattice(40, d, 2, 97);
    let cpu = KnnIndex::new(view(&train, d), DistanceMetric::L1, Device::Cpu).unwrap();
    let one_row = 4 * 4 * (d + 4);
    let index =
        KnnIndex::with_memory_budget(view(&train, d), DistanceMetric::L1, gpu, Some(one_row))
            .unwrap();
    for k in [1, 40] {
        let (a, b) = (
            cpu.search(view(&queries, d), k).unwrap(),
            index.search(view(&queries, d), k).unwrap(),
        );
        assert_eq!((a.indices, a.distances), (b.indices, b.distances), "k={k}");
    }
}
