//! What scikit-learn's estimators need of the engine: why a Lloyd run stopped and the iteration
//! that confirms unchanged labels (scikit-learn's `n_iter_`), mini-batch fits with sample
//! weights (rows drawn in proportion to their weight; CPU and GPU bit for bit), the mini-batch
//! steps' early-stopping reasons, and `compute_labels`.

use kmeans_knn::{
    Device, Init, Iteration, KMeans, MatrixView, MiniBatchKMeans, MiniBatchKMeansModel,
    MiniBatchParams, MiniBatchStep, Stop,
};
use kmeans_knn_tests::{blobs, gpu, sample_weights, uniform};
use std::sync::{Arc, Mutex};

/// scikit-learn's `test_kmeans_results`: the first update already gives the final labels, the
/// second assignment confirms them (scikit-learn's n_iter_ = 2: one update, then the check).
#[test]
fn lloyd_reports_the_assignment_that_confirms_the_labels() {
    let x = [0.0, 0.0, 0.5, 0.0, 0.5, 1.0, 1.0, 1.0];
    let seen: Arc<Mutex<Vec<Iteration>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let model = KMeans::params(2)
        .init(Init::Centroids(vec![0.0, 0.0, 1.0, 1.0]))
        .device(Device::Cpu)
        .on_iteration(move |it| sink.lock().unwrap().push(*it))
        .fit_weighted(MatrixView::new(&x, 4, 2).unwrap(), &[3.0, 1.0, 1.0, 3.0])
        .unwrap();
    assert_eq!(model.labels, [0, 0, 1, 1]);
    assert_eq!(model.n_iter, 1);
    assert_eq!(model.stop, Some(Stop::Unchanged));
    assert!(model.converged);
    let seen = seen.lock().unwrap();
    let stops: Vec<(usize, Option<Stop>)> = seen.iter().map(|it| (it.iteration, it.stop)).collect();
    assert_eq!(stops, [(1, None), (2, Some(Stop::Unchanged))]);
    assert_eq!(seen[1].changed, 0);
    assert_eq!(seen[1].inertia.to_bits(), model.inertia.to_bits());
}

#[test]
fn lloyd_reports_tolerance_and_max_iter_stops() {
    let (x, _) = blobs(4, 200, 3, 1);
    let data = MatrixView::new(&x, 800, 3).unwrap();
    let params = KMeans::params(4).seed(3).device(Device::Cpu);
    let capped = params.clone().max_iter(1).tol(0.0).fit(&data).unwrap();
    assert_eq!((capped.n_iter, capped.stop), (1, Some(Stop::MaxIter)));
    assert!(!capped.converged);
    let loose = params.tol(1e6).fit(&data).unwrap();
    assert_eq!((loose.n_iter, loose.stop), (1, Some(Stop::Tolerance)));
}

fn weighted(
    params: &MiniBatchParams,
    x: &[f32],
    d: usize,
    w: Option<&[f32]>,
) -> MiniBatchKMeansModel {
    let data = MatrixView::new(x, x.len() / d, d).unwrap();
    match w {
        Some(w) => params.fit_weighted(&data, w).unwrap(),
        None => params.fit(&data).unwrap(),
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn assert_same(case: &str, a: &MiniBatchKMeansModel, b: &MiniBatchKMeansModel) {
    assert_eq!(a.labels, b.labels, "{case}: labels");
    assert_eq!(bits(&a.centroids), bits(&b.centroids), "{case}: centroids");
    assert_eq!(a.inertia.to_bits(), b.inertia.to_bits(), "{case}: inertia");
    assert_eq!(
        (a.n_steps, a.n_iter),
        (b.n_steps, b.n_iter),
        "{case}: steps"
    );
    assert_eq!(a.counts, b.counts, "{case}: counts");
    assert_eq!(a.stop, b.stop, "{case}: stop");
}

fn minibatch(k: usize) -> MiniBatchParams {
    MiniBatchKMeans::params(k)
        .seed(11)
        .batch_size(64)
        .max_iter(5)
        .device(Device::Cpu)
}

#[test]
fn minibatch_unit_weights_are_no_weights_and_scaling_changes_nothing() {
    let x = uniform(500, 3, 4);
    for params in [
        minibatch(6),
        minibatch(6).n_init(Some(3)).init(Init::RandomPoints),
    ] {
        let plain = weighted(&params, &x, 3, None);
        let ones = weighted(&params, &x, 3, Some(&[1.0; 500]));
        assert_same("ones", &plain, &ones);
        let w = sample_weights(500, false, 9);
        let half: Vec<f32> = w.iter().map(|v| v * 0.5).collect();
        let a = weighted(&params, &x, 3, Some(&w));
        let b = weighted(&params, &x, 3, Some(&half));
        assert_eq!(bits(&a.centroids), bits(&b.centroids), "scaled weights");
        assert_eq!(a.labels, b.labels);
        assert_eq!(a.inertia.to_bits(), (2.0 * b.inertia).to_bits());
    }
}

#[test]
fn minibatch_weights_draw_heavy_rows_and_weigh_the_inertia() {
    // Two far groups; the second weighs nothing: its rows are never drawn, so no centroid
    // moves there, and they add nothing to the inertia.
    let mut x = uniform(200, 2, 5);
    x.extend(uniform(200, 2, 6).iter().map(|v| v + 100.0));
    let mut w = vec![1.0f32; 200];
    w.extend([0.0; 200]);
    let params = minibatch(3).init(Init::Centroids(vec![0.0, 0.0, 0.5, 0.5, -0.5, -0.5]));
    let model = weighted(&params, &x, 2, Some(&w));
    assert!(
        model.centroids.iter().all(|c| c.abs() < 2.0),
        "{:?}",
        model.centroids
    );
    let dist = |r: usize| -> f64 {
        let c = model.labels[r] as usize;
        (0..2)
            .map(|j| (x[r * 2 + j] as f64 - model.centroids[c * 2 + j] as f64).powi(2))
            .sum()
    };
    let expect: f64 = (0..200).map(dist).sum();
    assert!(
        (model.inertia - expect).abs() <= 1e-3 * expect,
        "{} vs {expect}",
        model.inertia
    );
}

#[test]
fn minibatch_weights_are_refused_when_bad() {
    let x = uniform(50, 2, 1);
    let data = MatrixView::new(&x, 50, 2).unwrap();
    assert!(minibatch(2).fit_weighted(&data, &[1.0; 49]).is_err());
    assert!(minibatch(2).fit_weighted(&data, &[0.0; 50]).is_err());
    let mut w = vec![1.0; 50];
    w[3] = f32::NAN;
    assert!(minibatch(2).fit_weighted(&data, &w).is_err());
}

#[test]
fn minibatch_steps_report_why_they_stop() {
    let (x, _) = blobs(3, 100, 2, 2);
    let record = |params: MiniBatchParams| {
        let seen: Arc<Mutex<Vec<MiniBatchStep>>> = Arc::default();
        let sink = Arc::clone(&seen);
        let model = weighted(
            &params.on_step(move |s| sink.lock().unwrap().push(*s)),
            &x,
            2,
            None,
        );
        let steps = seen.lock().unwrap().clone();
        (model, steps)
    };
    let base = MiniBatchKMeans::params(3)
        .seed(0)
        .batch_size(20)
        .max_iter(10)
        .device(Device::Cpu);
    let (model, steps) = record(base.clone().tol(1e-4).max_no_improvement(None));
    assert_eq!(model.stop, Some(Stop::Tolerance));
    assert_eq!(steps.last().unwrap().stop, Some(Stop::Tolerance));
    assert!(steps[..steps.len() - 1].iter().all(|s| s.stop.is_none()));
    assert!(steps[0].smoothed.is_none() && steps[1].smoothed == Some(steps[1].inertia));
    let (model, steps) = record(base.clone().max_no_improvement(Some(2)));
    assert_eq!(model.stop, Some(Stop::NoImprovement));
    assert_eq!(steps.last().unwrap().stop, Some(Stop::NoImprovement));
    let (model, steps) = record(base.max_no_improvement(None).max_iter(1));
    assert_eq!(model.stop, Some(Stop::MaxIter));
    assert_eq!(steps.len(), 300 / 20);
    assert_eq!(steps.last().unwrap().stop, Some(Stop::MaxIter));
}

#[test]
fn minibatch_without_labels_keeps_the_smoothed_inertia() {
    let x = uniform(400, 2, 8);
    let w = sample_weights(400, false, 2);
    let total: f64 = w.iter().map(|&v| v as f64).sum();
    let last: Arc<Mutex<Option<f64>>> = Arc::default();
    let sink = Arc::clone(&last);
    let params = minibatch(4).on_step(move |s| *sink.lock().unwrap() = s.smoothed);
    let labelled = weighted(&params, &x, 2, Some(&w));
    let bare = weighted(&params.clone().compute_labels(false), &x, 2, Some(&w));
    assert!(bare.labels.is_empty());
    assert_eq!(bits(&bare.centroids), bits(&labelled.centroids));
    let smoothed = last.lock().unwrap().unwrap();
    assert_eq!(bare.inertia.to_bits(), (smoothed * total).to_bits());
}

#[test]
fn gpu_weighted_minibatch_matches_cpu() {
    let Some(gpu) = gpu("gpu_weighted_minibatch_matches_cpu") else {
        return;
    };
    let x = uniform(3000, 7, 3);
    for (integer, k) in [(true, 1), (false, 9), (false, 64)] {
        let w = sample_weights(3000, integer, k as u64);
        let params = minibatch(k).batch_size(100);
        let cpu = weighted(&params, &x, 7, Some(&w));
        let on_gpu = weighted(&params.clone().device(gpu), &x, 7, Some(&w));
        assert_same(&format!("k={k} integer={integer}"), &cpu, &on_gpu);
    }
}
