//! kNN regression: the CPU matches a sort-everything reference; the GPU matches the CPU bit for
//! bit (the search is identical on both and the average is taken on the host in a fixed order).
//!
//! GPU tests skip with a visible message without a GPU (and fail with
//! `KMEANS_KNN_REQUIRE_GPU=1`).

use kmeans_knn::{
    Device, DistanceMetric, KnnRegressor, MatrixView, Selection, Weights, pairwise_distances,
};
use kmeans_knn_tests::{gpu, lattice, uniform};

/// The prediction written out independently: all distances, a stable sort by distance (ties by
/// index), then the scikit-learn weighted mean of the first k.
fn reference(
    train: MatrixView<'_>,
    targets: &[f32],
    t: usize,
    queries: MatrixView<'_>,
    k: usize,
    weights: Weights,
    metric: DistanceMetric,
) -> Vec<f32> {
    let d = pairwise_distances(&queries, &train, metric, Device::Cpu).unwrap();
    let mut out = Vec::new();
    for row in d.outer_iter() {
        let mut order: Vec<usize> = (0..row.len()).collect();
        order.sort_by(|&a, &b| row[a].total_cmp(&row[b]));
        let near = &order[..k];
        let any_zero = near.iter().any(|&i| row[i] == 0.0);
        let w = |i: usize| match weights {
            Weights::Uniform => 1.0,
            Weights::Distance if any_zero => f64::from(u8::from(row[i] == 0.0)),
            Weights::Distance => 1.0 / f64::from(row[i]),
        };
        let total: f64 = near.iter().map(|&i| w(i)).sum();
        for c in 0..t {
            let s: f64 = near
                .iter()
                .map(|&i| w(i) * f64::from(targets[i * t + c]))
                .sum();
            out.push((s / total) as f32);
        }
    }
    out
}

/// Awkward shapes: n not a multiple of 256, d = 1, k = 1 and k = n, duplicate rows (lattice).
fn cases() -> Vec<(usize, usize, usize, bool)> {
    // (n, d, k, duplicates)
    vec![
        (300, 1, 1, true),
        (257, 3, 7, true),
        (100, 5, 100, false),
        (513, 17, 16, false),
        (50, 2, 50, true),
    ]
}

fn data(n: usize, d: usize, dup: bool, seed: u64) -> Vec<f32> {
    if dup {
        lattice(n, d, 3, seed)
    } else {
        uniform(n, d, seed)
    }
}

const METRICS: [DistanceMetric; 3] = [
    DistanceMetric::Euclidean,
    DistanceMetric::L1,
    DistanceMetric::Cosine,
];

#[test]
fn cpu_matches_the_sort_everything_reference() {
    for (n, d, k, dup) in cases() {
        let (x, q) = (data(n, d, dup, 1), data(40, d, dup, 2));
        let t = 2;
        let y = uniform(n, t, 3);
        let (train, queries) = (
            MatrixView::new(&x, n, d).unwrap(),
            MatrixView::new(&q, 40, d).unwrap(),
        );
        let targets = MatrixView::new(&y, n, t).unwrap();
        for metric in METRICS {
            for weights in [Weights::Uniform, Weights::Distance] {
                let reg =
                    KnnRegressor::fit(&train, &targets, k, weights, metric, Device::Cpu).unwrap();
                let got: Vec<f32> = reg.predict(&queries).unwrap().into_iter().collect();
                let want = reference(train.clone(), &y, t, queries.clone(), k, weights, metric);
                assert_eq!(got, want, "n {n} d {d} k {k} {metric} {weights}");
            }
        }
    }
}

fn gpu_against_cpu(device: Device, selections: &[Selection]) {
    for (n, d, k, dup) in cases() {
        let (x, q) = (data(n, d, dup, 4), data(33, d, dup, 5));
        let y = uniform(n, 3, 6);
        let train = MatrixView::new(&x, n, d).unwrap();
        let queries = MatrixView::new(&q, 33, d).unwrap();
        let targets = MatrixView::new(&y, n, 3).unwrap();
        for metric in METRICS {
            for weights in [Weights::Uniform, Weights::Distance] {
                let fit = |dev, sel| {
                    KnnRegressor::fit(&train, &targets, k, weights, metric, dev)
                        .unwrap()
                        .with_selection(sel)
                        .predict(&queries)
                        .unwrap()
                };
                let cpu = fit(Device::Cpu, Selection::Auto);
                for &sel in selections {
                    let on_gpu = fit(device, sel);
                    let bits = |a: &[f32]| a.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(on_gpu.as_slice().unwrap()),
                        bits(cpu.as_slice().unwrap()),
                        "n {n} d {d} k {k} {metric} {weights} {sel}"
                    );
                }
            }
        }
    }
}

#[test]
fn gpu_regression_matches_cpu_bit_for_bit() {
    if let Some(device) = gpu("gpu_regression_matches_cpu_bit_for_bit") {
        gpu_against_cpu(
            device,
            &[
                Selection::Auto,
                Selection::KMin,
                Selection::Bitonic,
                Selection::Radix,
            ],
        );
    }
}
