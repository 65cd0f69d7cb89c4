//! Lloyd steps queued back to back on the GPU (the small path runs up to 64 without reading
//! each step's summary, halting on the device): a fit stops where steps taken one at a time
//! stop, with the CPU's labels, centroids, inertia and iteration count, and the same report
//! for every iteration.

use super::far_centroid_init;
use kmeans_knn::{
    Device, EmptyClusters, Init, Iteration, KMeans, KMeansModel, KMeansParams, MatrixView, Metric,
    Stop,
};
use kmeans_knn_tests::{assert_same_fit, gpu, lattice, sample_weights, uniform};
use std::sync::{Arc, Mutex};

/// An iteration's report but its shift, which the GPU sums in an order of its own.
type Report = (usize, usize, u64, u64, Option<Stop>);

fn fit_reporting(
    data: &[f32],
    d: usize,
    weights: Option<&[f32]>,
    params: KMeansParams,
) -> (KMeansModel, Vec<Report>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let params = params.on_iteration(move |it: &Iteration| {
        let report = (
            it.run,
            it.iteration,
            it.changed,
            it.inertia.to_bits(),
            it.stop,
        );
        sink.lock().unwrap().push(report);
    });
    let x = MatrixView::new(data, data.len() / d, d).unwrap();
    let model = match weights {
        Some(w) => params.fit_weighted(x, w),
        None => params.fit(x),
    }
    .unwrap();
    let reports = seen.lock().unwrap().clone();
    (model, reports)
}

#[test]
fn queued_steps_stop_where_single_steps_do() {
    let Some(gpu) = gpu("queued_steps_stop_where_single_steps_do") else {
        return;
    };
    let p = |k| KMeans::params(k).seed(5);
    let long = uniform(20_000, 3, 21);
    let mut cases: Vec<(String, Vec<f32>, usize, KMeansParams)> = vec![
        // Hundreds of steps: runs of 8, 16, 32, then 64.
        (
            "tol 0".into(),
            long.clone(),
            3,
            p(40).tol(0.0).max_iter(1000),
        ),
        ("default tol".into(), long.clone(), 3, p(40)),
        (
            "L1".into(),
            long.clone(),
            3,
            p(25).metric(Metric::L1).tol(0.0),
        ),
        ("d 75".into(), uniform(3000, 75, 22), 75, p(30).tol(0.0)),
        // Wide rows take the pruned scan, whose bounds and kept sums restarts must drop.
        (
            "d 40, three runs".into(),
            uniform(3000, 40, 29),
            40,
            p(12).n_init(3),
        ),
        // No label changes at the first step from centroids (k = 1), which must not halt.
        ("k 1".into(), uniform(500, 5, 23), 5, p(1).tol(0.0)),
        // From labels the first step may already stop.
        (
            "random labels".into(),
            uniform(999, 5, 24),
            5,
            p(8).init(Init::RandomLabels).tol(0.0),
        ),
        (
            "three runs".into(),
            uniform(4000, 9, 25),
            9,
            p(16).n_init(3),
        ),
        (
            "ties on a lattice".into(),
            lattice(3000, 2, 4, 26),
            2,
            p(10).tol(0.0),
        ),
    ];
    // Runs that end on every side of a queued run's end (8, 8 + 16, …).
    for max_iter in [1, 2, 7, 8, 9, 23, 24, 25, 56, 57] {
        let params = p(40).tol(0.0).max_iter(max_iter);
        cases.push((format!("max_iter {max_iter}"), long.clone(), 3, params));
    }
    for policy in [
        EmptyClusters::FarthestPoint,
        EmptyClusters::TakeFarthestPoint,
        EmptyClusters::KeepPrevious,
    ] {
        let params = p(3).init(far_centroid_init()).empty_clusters(policy);
        let name = format!("empty clusters, {policy:?}");
        cases.push((name, uniform(400, 2, 13), 2, params.max_iter(30)));
        // The same on the pruned scan: a relocation drops its bounds and kept sums.
        let params = p(3).init(far_centroids(36)).empty_clusters(policy);
        let name = format!("empty clusters, d 36, {policy:?}");
        cases.push((name, uniform(400, 36, 14), 36, params.max_iter(30)));
    }
    for (case, data, d, params) in cases {
        let (cpu, cpu_reports) = fit_reporting(&data, d, None, params.clone().device(Device::Cpu));
        let (dev, dev_reports) = fit_reporting(&data, d, None, params.device(gpu));
        assert!(
            dev.device.starts_with("cuda"),
            "{case}: ran on {}",
            dev.device
        );
        assert_same_fit(&case, &cpu, &dev);
        assert_eq!(cpu_reports, dev_reports, "{case}: reports differ");
    }
    // Weights: points without weight never count as changed (d 40: the pruned scan moves
    // weighted points between its kept sums).
    for d in [4, 40] {
        let data = uniform(5000, d, 27);
        let w = sample_weights(5000, false, 28);
        let params = p(12).tol(0.0);
        let cpu_params = params.clone().device(Device::Cpu);
        let (cpu, cpu_reports) = fit_reporting(&data, d, Some(&w), cpu_params);
        let (dev, dev_reports) = fit_reporting(&data, d, Some(&w), params.device(gpu));
        assert_same_fit(&format!("weights, d {d}"), &cpu, &dev);
        assert_eq!(cpu_reports, dev_reports, "weights, d {d}: reports differ");
    }
}

/// Three centroids of `d` dimensions: two among the points of [−1, 1)^d, one far from all.
fn far_centroids(d: usize) -> Init {
    let mut c = vec![-0.5; 3 * d];
    c[d..2 * d].fill(0.5);
    c[2 * d..].fill(1000.0);
    Init::Centroids(c)
}
