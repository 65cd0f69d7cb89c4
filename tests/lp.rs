//! The Chebyshev and general Minkowski metrics: CPU distances against an f64 reference, the CPU
//! search against sorting its own distances, and the GPU (distances, every selection, the
//! whole-row sort above k = 2048, streamed parts, a GPU set, radius, votes, regression) equal to
//! the CPU bit for bit on awkward shapes: n not a multiple of a block, d = 1, k = 1, k = n,
//! duplicate rows and tied distances.
//!
//! GPU tests skip with a visible message without a GPU (and fail with
//! `KMEANS_KNN_REQUIRE_GPU=1`); `sanitize_lp_matches_cpu` runs the same on small shapes, for
//! compute-sanitizer.

use kmeans_knn::{
    Device, DistanceMetric, GpuSet, KnnClassifier, KnnIndex, KnnRegressor, MatrixView, Selection,
    Weights, pairwise_distances,
};
use kmeans_knn_tests::{gpu, lattice, uniform};

fn view(x: &[f32], d: usize) -> MatrixView<'_> {
    MatrixView::new(x, x.len() / d, d).unwrap()
}

/// Chebyshev and Minkowski at a few exponents (1.5 and 7.25 are not integers; 3 is the common
/// one).
fn metrics() -> Vec<DistanceMetric> {
    let mut m = vec![DistanceMetric::Chebyshev];
    m.extend([1.5, 3.0, 7.25].map(|p| DistanceMetric::minkowski(p).unwrap()));
    m
}

/// The distance in f64 with libm's `powf`.
fn reference(metric: DistanceMetric, x: &[f32], y: &[f32]) -> f64 {
    let diffs = x.iter().zip(y).map(|(&a, &b)| (a as f64 - b as f64).abs());
    match metric {
        DistanceMetric::Chebyshev => diffs.fold(0.0, f64::max),
        DistanceMetric::Minkowski(p) => {
            let p = p.get();
            diffs.map(|t| t.powf(p)).sum::<f64>().powf(1.0 / p)
        }
        m => unreachable!("{m}"),
    }
}

#[test]
fn cpu_distances_are_close_to_f64() {
    let (a, b) = (uniform(37, 19, 1), uniform(23, 19, 2));
    for metric in metrics() {
        let m = pairwise_distances(view(&a, 19), view(&b, 19), metric, Device::Cpu).unwrap();
        for i in 0..37 {
            for j in 0..23 {
                let want = reference(metric, &a[i * 19..][..19], &b[j * 19..][..19]);
                let got = m[[i, j]] as f64;
                // One f32 rounding of a value good to ~1e-15, and f32 differences for Chebyshev.
                let rel = ((got - want) / want).abs();
                assert!(rel <= 6e-8, "{metric} ({i}, {j}): {got} vs {want}");
            }
        }
    }
    // Duplicate rows are at distance 0 exactly.
    let m = pairwise_distances(view(&a, 19), view(&a, 19), metrics()[2], Device::Cpu).unwrap();
    assert!((0..37).all(|i| m[[i, i]] == 0.0));
}

#[test]
fn minkowski_of_one_and_two_are_l1_and_l2() {
    let (train, queries) = (uniform(300, 5, 3), uniform(20, 5, 4));
    for (p, same) in [(1.0, DistanceMetric::L1), (2.0, DistanceMetric::Euclidean)] {
        let metric = DistanceMetric::minkowski(p).unwrap();
        assert_eq!(metric, same);
        let a = KnnIndex::new(view(&train, 5), metric, Device::Cpu).unwrap();
        let b = KnnIndex::new(view(&train, 5), same, Device::Cpu).unwrap();
        assert_eq!(
            a.search(view(&queries, 5), 7).unwrap(),
            b.search(view(&queries, 5), 7).unwrap()
        );
    }
}

/// Training rows, queries, d and the ks searched.
type Shape = (&'static str, Vec<f32>, Vec<f32>, usize, Vec<usize>);

fn shapes(small: bool) -> Vec<Shape> {
    let mut s: Vec<Shape> = vec![
        ("n=1 d=1", uniform(1, 1, 5), uniform(3, 1, 6), 1, vec![1]),
        (
            "d=1 lattice",
            lattice(257, 1, 5, 7),
            lattice(9, 1, 5, 8),
            1,
            vec![1, 4, 257],
        ),
        (
            "lattice ties",
            lattice(300, 3, 3, 9),
            lattice(17, 3, 3, 10),
            3,
            vec![1, 7, 300],
        ),
        (
            "uniform",
            uniform(129, 17, 11),
            uniform(33, 17, 12),
            17,
            vec![1, 5, 129],
        ),
    ];
    if !small {
        s.extend([
            (
                "n=4099",
                uniform(4099, 33, 13),
                uniform(70, 33, 14),
                33,
                vec![1, 64, 700],
            ),
            (
                "k > 2048",
                lattice(2500, 4, 4, 15),
                lattice(11, 4, 4, 16),
                4,
                vec![2100, 2500],
            ),
        ]);
    }
    s
}

/// The k smallest (distance, index) of every query, from the CPU's own distances.
fn sorted_rows(dist: &[f32], cols: usize, k: usize) -> (Vec<u32>, Vec<u32>) {
    let (mut idx, mut bits) = (Vec::new(), Vec::new());
    for row in dist.chunks_exact(cols) {
        let mut all: Vec<(f32, u32)> = row
            .iter()
            .enumerate()
            .map(|(j, &v)| (v, j as u32))
            .collect();
        all.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap().then(a.1.cmp(&b.1)));
        idx.extend(all[..k].iter().map(|p| p.1));
        bits.extend(all[..k].iter().map(|p| p.0.to_bits()));
    }
    (idx, bits)
}

fn bits<'a>(v: impl IntoIterator<Item = &'a f32>) -> Vec<u32> {
    v.into_iter().map(|x| x.to_bits()).collect()
}

const SELECTIONS: [Selection; 4] = [
    Selection::Auto,
    Selection::KMin,
    Selection::Bitonic,
    Selection::Radix,
];

#[test]
fn cpu_search_matches_sorting_its_distances() {
    for (name, train, queries, d, ks) in shapes(true) {
        for metric in metrics() {
            let all = pairwise_distances(view(&queries, d), view(&train, d), metric, Device::Cpu)
                .unwrap();
            for &k in &ks {
                let want = sorted_rows(all.as_slice().unwrap(), train.len() / d, k);
                for sel in SELECTIONS {
                    let index = KnnIndex::new(view(&train, d), metric, Device::Cpu)
                        .unwrap()
                        .with_selection(sel);
                    let r = index.search(view(&queries, d), k).unwrap();
                    let got = (r.indices.iter().copied().collect(), bits(&r.distances));
                    assert_eq!(got, want, "{name} {metric} k={k} {sel}");
                }
            }
        }
    }
}

/// Everything one device answers for a shape and metric: distances, searches under every
/// selection, radius neighbours, votes and regression, as bits.
fn answers(
    device: Device,
    train: &[f32],
    queries: &[f32],
    d: usize,
    ks: &[usize],
    metric: DistanceMetric,
) -> Vec<Vec<u32>> {
    let n = train.len() / d;
    let mut out = Vec::new();
    let all = pairwise_distances(view(queries, d), view(train, d), metric, device).unwrap();
    out.push(bits(&all));
    for &k in ks {
        for sel in SELECTIONS {
            let index = KnnIndex::new(view(train, d), metric, device)
                .unwrap()
                .with_selection(sel);
            let r = index.search(view(queries, d), k).unwrap();
            out.push(r.indices.iter().copied().collect());
            out.push(bits(&r.distances));
        }
        // A budget of about 40 training rows: the rows stream through the GPU in parts.
        let streamed =
            KnnIndex::with_memory_budget(view(train, d), metric, device, Some(40 * 4 * (d + 4)))
                .unwrap();
        let r = streamed.search(view(queries, d), k).unwrap();
        out.push(r.indices.iter().copied().collect());
        out.push(bits(&r.distances));
        let classes: Vec<u32> = (0..n as u32).map(|i| i % 3).collect();
        for weights in [Weights::Uniform, Weights::Distance] {
            let clf =
                KnnClassifier::fit(view(train, d), &classes, k, weights, metric, device).unwrap();
            out.push(clf.predict(view(queries, d)).unwrap());
            out.push(bits(&clf.predict_proba(view(queries, d)).unwrap()));
        }
        let targets: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
        let reg = KnnRegressor::fit(
            view(train, d),
            MatrixView::new(&targets, n, 1).unwrap(),
            k,
            Weights::Distance,
            metric,
            device,
        )
        .unwrap();
        out.push(bits(&reg.predict(view(queries, d)).unwrap()));
    }
    // Radii: 0, the first query's nearest, median and farthest distances (ties at exactly the
    // radius), everything.
    let first: Vec<f32> = {
        let mut row: Vec<f32> = all.row(0).to_vec();
        row.sort_by(f32::total_cmp);
        row
    };
    let index = KnnIndex::new(view(train, d), metric, device).unwrap();
    for radius in [0.0, first[0], first[n / 2], first[n - 1], f32::INFINITY] {
        let r = index.radius_search(view(queries, d), radius).unwrap();
        out.push(r.offsets.iter().map(|&o| o as u32).collect());
        out.push(r.indices);
        out.push(bits(&r.distances));
    }
    out
}

/// Searches, votes and radius neighbours of a GPU set (the rows cut into a part per GPU,
/// candidates merged by (distance, index)), as bits.
fn set_answers(
    device: Device,
    train: &[f32],
    queries: &[f32],
    d: usize,
    ks: &[usize],
    metric: DistanceMetric,
) -> Vec<Vec<u32>> {
    let n = train.len() / d;
    let index = KnnIndex::new(view(train, d), metric, device).unwrap();
    let mut out = Vec::new();
    for &k in ks {
        let r = index.search(view(queries, d), k).unwrap();
        out.push(r.indices.iter().copied().collect());
        out.push(bits(&r.distances));
        let classes: Vec<u32> = (0..n as u32).map(|i| i % 3).collect();
        let clf = KnnClassifier::fit(
            view(train, d),
            &classes,
            k,
            Weights::Distance,
            metric,
            device,
        )
        .unwrap();
        out.push(bits(&clf.predict_proba(view(queries, d)).unwrap()));
    }
    let r = index
        .radius_search(view(queries, d), f32::INFINITY)
        .unwrap();
    out.push(r.indices);
    out.push(bits(&r.distances));
    out
}

fn lp_against_cpu(device: Device, small: bool) {
    let Device::Cuda(o) = device else {
        unreachable!("the gate resolves to a GPU")
    };
    // On one GPU the set repeats its ordinal: the same path, two parts on one GPU.
    let set = Device::Gpus(GpuSet::new(&[o, o]).unwrap());
    for (name, train, queries, d, ks) in shapes(small) {
        for metric in metrics() {
            let cpu = answers(Device::Cpu, &train, &queries, d, &ks, metric);
            let got = answers(device, &train, &queries, d, &ks, metric);
            assert_eq!(got.len(), cpu.len());
            for (i, (g, c)) in got.iter().zip(&cpu).enumerate() {
                assert!(g == c, "{name} {metric}: answer {i} differs from the CPU's");
            }
            let cpu = set_answers(Device::Cpu, &train, &queries, d, &ks, metric);
            let got = set_answers(set, &train, &queries, d, &ks, metric);
            for (i, (g, c)) in got.iter().zip(&cpu).enumerate() {
                assert!(
                    g == c,
                    "{name} {metric}: answer {i} of a GPU set differs from the CPU's"
                );
            }
        }
    }
}

#[test]
fn gpu_lp_matches_cpu() {
    if let Some(device) = gpu("gpu_lp_matches_cpu") {
        lp_against_cpu(device, false);
    }
}

/// The lp kernels alone, for compute-sanitizer: every small shape's distances and one search
/// per metric against the CPU's (the whole of [`answers`] takes minutes under racecheck).
#[test]
fn sanitize_lp_matches_cpu() {
    let Some(device) = gpu("sanitize_lp_matches_cpu") else {
        return;
    };
    for (name, train, queries, d, ks) in shapes(true) {
        for metric in metrics() {
            let on = |device| {
                let all = pairwise_distances(view(&queries, d), view(&train, d), metric, device);
                let index = KnnIndex::new(view(&train, d), metric, device).unwrap();
                let r = index.search(view(&queries, d), ks[ks.len() / 2]).unwrap();
                (bits(&all.unwrap()), r.indices, bits(&r.distances))
            };
            assert!(on(device) == on(Device::Cpu), "{name} {metric}");
        }
    }
}
