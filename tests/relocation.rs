//! scikit-learn's empty-cluster rule ([`EmptyClusters::TakeFarthestPoint`]): the farthest
//! points leave their clusters with their weight, the results of scikit-learn's own cases, and
//! the same bits on the CPU, the GPU, a GPU set, streamed batches and shards of any split.

use kmeans_knn::kmeans::shard::Shard;
use kmeans_knn::{
    Device, EmptyClusters, GpuSet, Init, KMeans, KMeansModel, KMeansParams, MatrixView, Stop,
};
use kmeans_knn_tests::{fit_rows as fit, gpu, repeat_rows, sample_weights, uniform};

fn take(k: usize, start: &[f32]) -> KMeansParams {
    KMeans::params(k)
        .init(Init::Centroids(start.to_vec()))
        .empty_clusters(EmptyClusters::TakeFarthestPoint)
        .device(Device::Cpu)
}

fn assert_same(case: &str, a: &KMeansModel, b: &KMeansModel) {
    let bits = |m: &KMeansModel| m.centroids.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(a), bits(b), "{case}: centroids");
    assert_eq!(a.labels, b.labels, "{case}: labels");
    assert_eq!(a.inertia.to_bits(), b.inertia.to_bits(), "{case}: inertia");
    assert_eq!(a.n_iter, b.n_iter, "{case}: iterations");
    assert_eq!(a.cluster_sizes, b.cluster_sizes, "{case}: sizes");
}

/// scikit-learn's `test_kmeans_relocated_clusters`: the point that leaves the first cluster
/// takes its weight with it, so the next assignment splits the rows in two halves.
#[test]
fn the_farthest_point_leaves_its_cluster_as_in_scikit_learn() {
    let data = [0.0, 0.0, 0.5, 0.0, 0.5, 1.0, 1.0, 1.0];
    let model = fit(&data, 2, &take(2, &[0.5, 0.5, 3.0, 3.0]), None);
    assert_eq!(model.labels, [1, 1, 0, 0]);
    assert_eq!(model.centroids, [0.75, 1.0, 0.25, 0.0]);
    assert_eq!(model.inertia, 0.25);
    // scikit-learn's n_iter_ of 3 counts the assignment that found the labels unchanged.
    assert_eq!((model.n_iter, model.stop), (2, Some(Stop::Unchanged)));
    // After one step the first cluster is the mean of the three points left; the engine's
    // default rule leaves the moved point in it.
    let first = |rule| {
        let params = take(2, &[0.5, 0.5, 3.0, 3.0]).max_iter(1);
        fit(&data, 2, &params.empty_clusters(rule), None).centroids
    };
    assert_eq!(
        first(EmptyClusters::TakeFarthestPoint),
        [2.0 / 3.0, 2.0 / 3.0, 0.0, 0.0]
    );
    assert_eq!(first(EmptyClusters::FarthestPoint), [0.5, 0.5, 0.0, 0.0]);
}

/// scikit-learn's `test_relocate_empty_clusters` through a fit: the two farthest points go to
/// the two empty clusters, farthest first, and the first cluster keeps the mean of the rest; a
/// weight of 3 counts three times in that mean (as three copies, bit for bit), as
/// scikit-learn 1.9.1 gives [-5.6, 10, 9.5].
#[test]
fn several_empty_clusters_take_the_farthest_points_in_order_with_their_weights() {
    let data = [-10.0, -9.5, -9.0, -8.5, -8.0, -1.0, 1.0, 9.0, 9.5, 10.0];
    let params = take(3, &[-10.0; 3]).max_iter(1);
    let plain = fit(&data, 1, &params, None);
    assert_eq!(plain.centroids, [-4.5, 10.0, 9.5]);
    let mut w = vec![1.0f32; 10];
    w[0] = 3.0;
    let weighted = fit(&data, 1, &params, Some(&w));
    assert_eq!(weighted.centroids, [-5.6, 10.0, 9.5]);
    assert_eq!(weighted.labels, [0, 0, 0, 0, 0, 0, 0, 2, 2, 1]);
    let copies = fit(&repeat_rows(&data, 1, &w), 1, &params, None);
    assert_eq!(weighted.centroids, copies.centroids);
}

/// A cluster that the move leaves without weight sits on the heaviest cluster's mean (as
/// scikit-learn 1.9.1: [0.5, 0.5, 5]).
#[test]
fn a_cluster_left_without_weight_sits_on_the_heaviest() {
    let model = fit(
        &[0.0, 1.0, 5.0],
        1,
        &take(3, &[0.5, 8.0, 100.0]).max_iter(1),
        None,
    );
    assert_eq!(model.centroids, [0.5, 0.5, 5.0]);
}

/// Three far clusters empty at once, fractional weights with zeros: every backend and split
/// gives the CPU's bits.
#[test]
fn every_backend_and_split_takes_the_same_points() {
    let (n, d) = (600, 3);
    let data = uniform(n, d, 31);
    let mut start = data[..3 * d].to_vec();
    start.extend([500.0, 0.0, 0.0, 0.0, 700.0, 0.0, 0.0, 0.0, 900.0]);
    let weights = sample_weights(n, false, 32);
    for (w, max_iter) in [None, Some(weights.as_slice())]
        .into_iter()
        .flat_map(|w| [(w, 1), (w, 30)])
    {
        let params = take(6, &start).max_iter(max_iter);
        let cpu = fit(&data, d, &params, w);
        if max_iter == 1 {
            let rule = params.clone().empty_clusters(EmptyClusters::FarthestPoint);
            let default = fit(&data, d, &rule, w);
            assert_ne!(cpu.centroids, default.centroids, "the rules differ here");
        }
        let case = format!(
            "{} max_iter {max_iter}",
            if w.is_some() { "weighted" } else { "plain" }
        );
        if w.is_none() {
            for sizes in [vec![n], vec![1, n - 1], vec![250, 7, 343]] {
                let mut first = 0;
                let mut shards: Vec<Shard> = sizes
                    .iter()
                    .map(|&rows| {
                        let part = data[first * d..(first + rows) * d].to_vec();
                        let view = MatrixView::from_vec(part, rows, d).unwrap();
                        let shard = Shard::new(view, first as u64, Device::Cpu).unwrap();
                        first += rows;
                        shard
                    })
                    .collect();
                let sharded = params.fit_sharded(&mut shards).unwrap();
                let labels = cpu.labels.clone();
                assert_same(
                    &format!("shards {sizes:?}"),
                    &KMeansModel { labels, ..sharded },
                    &cpu,
                );
            }
        }
        let Some(gpu) = gpu("every_backend_and_split_takes_the_same_points") else {
            continue;
        };
        let Device::Cuda(ordinal) = gpu else {
            unreachable!("a GPU device")
        };
        let set = Device::Gpus(GpuSet::new(&[ordinal, ordinal]).unwrap());
        for (name, device) in [
            ("gpu", params.clone().device(gpu)),
            ("set", params.clone().device(set)),
        ] {
            assert_same(&format!("{case} {name}"), &fit(&data, d, &device, w), &cpu);
        }
        // Budgets from what holds every row down past what holds the fit's own buffers: each
        // fit equals the CPU's or is refused for its budget, and some stream.
        let mut streamed = 0;
        for budget in (64..=256).rev().step_by(8).map(|kib| kib << 10) {
            let x = MatrixView::new(&data, n, d).unwrap();
            let on = params.clone().device(gpu).memory_budget(budget);
            let model = match w {
                Some(w) => on.fit_weighted(x, w),
                None => on.fit(x),
            };
            match model {
                Ok(m) => {
                    streamed += usize::from(m.device.contains("streamed"));
                    assert_same(&format!("{case} budget {budget}"), &m, &cpu);
                }
                Err(kmeans_knn::Error::InvalidParameter { name, .. }) => {
                    assert_eq!(name, "memory budget")
                }
                Err(e) => panic!("{case} budget {budget}: {e}"),
            }
        }
        assert!(streamed > 0, "{case}: no budget streamed");
    }
}
