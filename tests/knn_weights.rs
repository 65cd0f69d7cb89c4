//! kNN with sample weights: votes and averages scaled by the training rows' weights match a
//! plain reference on the CPU, weights of one change nothing, the GPU matches the CPU bit for
//! bit, and bad weights are typed errors.

use kmeans_knn::{
    Device, DistanceMetric, Error, KnnClassifier, KnnRegressor, MatrixView, Weights,
    pairwise_distances,
};
use kmeans_knn_tests::{gpu, lattice, sample_weights, uniform};

fn view(data: &[f32], d: usize) -> MatrixView<'_> {
    MatrixView::new(data, data.len() / d, d).unwrap()
}

/// Every query's k nearest (a stable sort of all distances, ties by index), with the f64
/// weight `sample weight × (1 or 1/distance)` of each, as the module documentation says.
fn weighted_neighbours(
    train: &[f32],
    queries: &[f32],
    d: usize,
    k: usize,
    weights: Weights,
    sample: &[f32],
) -> Vec<Vec<(usize, f64)>> {
    let dist = pairwise_distances(
        view(queries, d),
        view(train, d),
        DistanceMetric::L1,
        Device::Cpu,
    )
    .unwrap();
    dist.outer_iter()
        .map(|row| {
            let mut order: Vec<usize> = (0..row.len()).collect();
            order.sort_by(|&a, &b| row[a].total_cmp(&row[b]));
            let near = &order[..k];
            let nearest = row[near[0]] as f64;
            near.iter()
                .map(|&i| {
                    let base = match weights {
                        Weights::Uniform => 1.0,
                        Weights::Distance if nearest == 0.0 => f64::from(u8::from(row[i] == 0.0)),
                        Weights::Distance => nearest / row[i] as f64,
                    };
                    (i, base * sample[i] as f64)
                })
                .collect()
        })
        .collect()
}

#[test]
fn classifier_votes_are_scaled_by_sample_weights() {
    let (n, d, classes) = (400, 3, 4);
    let train = uniform(n, d, 1);
    let queries = uniform(60, d, 2);
    let labels: Vec<u32> = (0..n as u32).map(|i| (i * 7 + i / 3) % classes).collect();
    let sample = sample_weights(n, false, 3);
    for weights in [Weights::Uniform, Weights::Distance] {
        for k in [1, 5, 16] {
            let clf = KnnClassifier::fit(
                view(&train, d),
                &labels,
                k,
                weights,
                DistanceMetric::L1,
                Device::Cpu,
            )
            .unwrap()
            .with_sample_weight(&sample)
            .unwrap();
            let proba = clf.predict_proba(view(&queries, d)).unwrap();
            let predicted = clf.predict(view(&queries, d)).unwrap();
            let near = weighted_neighbours(&train, &queries, d, k, weights, &sample);
            for (q, near) in near.iter().enumerate() {
                let mut votes = vec![0f64; classes as usize];
                for &(i, w) in near {
                    votes[labels[i] as usize] += w;
                }
                let total: f64 = votes.iter().sum();
                let case = format!("{weights} k={k} query {q}");
                for c in 0..classes as usize {
                    let want = if total > 0.0 { votes[c] / total } else { 0.0 };
                    assert!((proba[[q, c]] as f64 - want).abs() <= 1e-6, "{case}");
                }
                let best = votes.iter().cloned().fold(0.0, f64::max);
                let winner = predicted[q] as usize;
                assert!(votes[winner] >= best * (1.0 - 1e-9), "{case}: {votes:?}");
            }
        }
    }
}

#[test]
fn weights_of_one_change_no_vote_and_no_average() {
    let (n, d) = (300, 2);
    let train = lattice(n, d, 5, 4);
    let queries = lattice(50, d, 5, 5);
    let labels: Vec<u32> = (0..n as u32).map(|i| i % 3).collect();
    let targets = uniform(n, 2, 6);
    for weights in [Weights::Uniform, Weights::Distance] {
        let clf = |ones: bool| {
            let c = KnnClassifier::fit(
                view(&train, d),
                &labels,
                7,
                weights,
                DistanceMetric::Euclidean,
                Device::Cpu,
            )
            .unwrap();
            if ones {
                c.with_sample_weight(&vec![1.0; n]).unwrap()
            } else {
                c
            }
        };
        let q = view(&queries, d);
        assert_eq!(
            clf(true).predict(&q).unwrap(),
            clf(false).predict(&q).unwrap()
        );
        assert_eq!(
            clf(true).predict_proba(&q).unwrap(),
            clf(false).predict_proba(&q).unwrap()
        );
        let reg = |ones: bool| {
            let r = KnnRegressor::fit(
                view(&train, d),
                view(&targets, 2),
                7,
                weights,
                DistanceMetric::Euclidean,
                Device::Cpu,
            )
            .unwrap();
            if ones {
                r.with_sample_weight(&vec![1.0; n]).unwrap()
            } else {
                r
            }
        };
        assert_eq!(
            reg(true).predict(&q).unwrap(),
            reg(false).predict(&q).unwrap()
        );
    }
}

#[test]
fn regressor_averages_are_weighted() {
    let (n, d) = (200, 3);
    let train = uniform(n, d, 7);
    let queries = uniform(30, d, 8);
    let targets = uniform(n, 1, 9);
    let sample = sample_weights(n, false, 10);
    for weights in [Weights::Uniform, Weights::Distance] {
        let k = 6;
        let reg = KnnRegressor::fit(
            view(&train, d),
            view(&targets, 1),
            k,
            weights,
            DistanceMetric::L1,
            Device::Cpu,
        )
        .unwrap()
        .with_sample_weight(&sample)
        .unwrap();
        let got = reg.predict(view(&queries, d)).unwrap();
        let near = weighted_neighbours(&train, &queries, d, k, weights, &sample);
        for (q, near) in near.iter().enumerate() {
            let total: f64 = near.iter().map(|p| p.1).sum();
            let want = if total > 0.0 {
                near.iter()
                    .map(|&(i, w)| w * targets[i] as f64)
                    .sum::<f64>()
                    / total
            } else {
                // No neighbour with weight: the average without sample weights.
                let unit = weighted_neighbours(&train, &queries, d, k, weights, &vec![1.0; n]);
                let total: f64 = unit[q].iter().map(|p| p.1).sum();
                unit[q]
                    .iter()
                    .map(|&(i, w)| w * targets[i] as f64)
                    .sum::<f64>()
                    / total
            };
            let g = got[[q, 0]] as f64;
            assert!(
                (g - want).abs() <= 1e-6 * want.abs().max(1.0),
                "{weights} query {q}: {g} vs {want}"
            );
        }
    }
    // A query whose neighbours all weigh nothing gets their plain average, not NaN.
    let zero_near = KnnRegressor::fit(
        view(&[0.0, 1.0, 10.0], 1),
        view(&[1.0, 3.0, 100.0], 1),
        2,
        Weights::Uniform,
        DistanceMetric::L1,
        Device::Cpu,
    )
    .unwrap()
    .with_sample_weight(&[0.0, 0.0, 1.0])
    .unwrap();
    assert_eq!(zero_near.predict(view(&[0.5], 1)).unwrap()[[0, 0]], 2.0);
}

#[test]
fn bad_sample_weights_are_typed_errors() {
    let train = uniform(10, 2, 1);
    let labels = vec![0u32; 10];
    let clf = || {
        KnnClassifier::fit(
            view(&train, 2),
            &labels,
            3,
            Weights::Uniform,
            DistanceMetric::L1,
            Device::Cpu,
        )
        .unwrap()
    };
    assert!(matches!(
        clf().with_sample_weight(&[1.0; 11]),
        Err(Error::SampleWeightCount {
            weights: 11,
            rows: 10
        })
    ));
    let mut w = vec![1.0f32; 10];
    w[6] = -1.0;
    assert!(matches!(
        clf().with_sample_weight(&w),
        Err(Error::InvalidSampleWeight { row: 6, .. })
    ));
    assert!(matches!(
        clf().with_sample_weight(&[0.0; 10]),
        Err(Error::ZeroSampleWeights)
    ));
    let reg = KnnRegressor::fit(
        view(&train, 2),
        view(&train, 2),
        3,
        Weights::Uniform,
        DistanceMetric::L1,
        Device::Cpu,
    )
    .unwrap();
    w[6] = f32::NAN;
    assert!(matches!(
        reg.with_sample_weight(&w),
        Err(Error::InvalidSampleWeight { row: 6, .. })
    ));
}

/// Weighted classification (and, unless `small`, regression) on the GPU against the CPU: every
/// metric and vote weighting, k = 1 and (unless `small`) k = n, ties (lattice), histograms in
/// shared and in global memory.
fn weighted_against_cpu(device: Device, small: bool) {
    let (n, d) = if small { (300, 3) } else { (3000, 5) };
    let cases = [
        (
            uniform(n, d, 21),
            uniform(if small { 20 } else { 400 }, d, 22),
        ),
        (
            lattice(n, d, 3, 23),
            lattice(if small { 20 } else { 400 }, d, 3, 24),
        ),
    ];
    let labels: Vec<u32> = (0..n as u32).map(|i| (i * 5) % 7).collect();
    let sample = sample_weights(n, false, 25);
    let targets = uniform(n, 2, 26);
    for (train, queries) in &cases {
        let q = view(queries, d);
        for metric in [
            DistanceMetric::Euclidean,
            DistanceMetric::L1,
            DistanceMetric::Cosine,
        ] {
            for weights in [Weights::Uniform, Weights::Distance] {
                for k in [1, 9].into_iter().chain((!small).then_some(n)) {
                    let case = format!("n={n} {metric} {weights} k={k}");
                    let clf = |dev| {
                        KnnClassifier::fit(view(train, d), &labels, k, weights, metric, dev)
                            .unwrap()
                            .with_sample_weight(&sample)
                            .unwrap()
                    };
                    let (cpu, dev) = (clf(Device::Cpu), clf(device));
                    assert_eq!(dev.predict(&q).unwrap(), cpu.predict(&q).unwrap(), "{case}");
                    assert_eq!(
                        dev.predict_proba(&q).unwrap(),
                        cpu.predict_proba(&q).unwrap(),
                        "{case}: probabilities"
                    );
                    if small {
                        // The regressor runs no kernel of its own (the search, then the host).
                        continue;
                    }
                    let reg = |dev| {
                        KnnRegressor::fit(
                            view(train, d),
                            view(&targets, 2),
                            k,
                            weights,
                            metric,
                            dev,
                        )
                        .unwrap()
                        .with_sample_weight(&sample)
                        .unwrap()
                    };
                    assert_eq!(
                        reg(device).predict(&q).unwrap(),
                        reg(Device::Cpu).predict(&q).unwrap(),
                        "{case}: regression"
                    );
                }
            }
        }
    }
    // More classes than a block's shared memory holds: the histograms go to global scratch.
    let many = if small { 4200 } else { 9000 };
    let train = uniform(many, 3, 27);
    let labels: Vec<u32> = (0..many as u32).map(|i| i % 4500).collect();
    let sample = sample_weights(many, false, 28);
    let queries = uniform(7, 3, 29);
    let clf = |dev| {
        KnnClassifier::fit(
            view(&train, 3),
            &labels,
            10,
            Weights::Distance,
            DistanceMetric::Euclidean,
            dev,
        )
        .unwrap()
        .with_sample_weight(&sample)
        .unwrap()
    };
    let q = view(&queries, 3);
    assert_eq!(
        clf(device).predict_proba(&q).unwrap(),
        clf(Device::Cpu).predict_proba(&q).unwrap(),
        "4500 classes"
    );
}

#[test]
fn gpu_weighted_knn_matches_cpu() {
    if let Some(device) = gpu("gpu_weighted_knn_matches_cpu") {
        weighted_against_cpu(device, false);
    }
}

/// The vote kernel with sample weights on small shapes, under compute-sanitizer in the bundle.
#[test]
fn sanitize_weighted_knn_matches_cpu() {
    if let Some(device) = gpu("sanitize_weighted_knn_matches_cpu") {
        weighted_against_cpu(device, true);
    }
}
