//! `gpu-bench --all-paths`: every way through a kNN case's search timed on its own (each
//! selection with the TF32 prefilter and on the exact FP32 path), beside the search with
//! `Selection::Auto`, and which path `Auto` took and from what timings. One JSON line per
//! (case, path) on stdout (and in `--json`): CUDA-event medians and minimums after warm-up,
//! their spread (median over minimum), every timed search in order (`ms`), and the host's cores
//! and rayon threads.

use crate::data::{KnnCase, uniform};
use kmeans_knn::bench::{KnnTiming, knn_search_ms};
use kmeans_knn::{AutoSource, Device, DistanceMetric, KnnIndex, MatrixView, Selection};
use serde_json::{Value, json};

/// The fixed selections, in the order `Auto` breaks ties in.
const SELECTIONS: [Selection; 3] = [Selection::Radix, Selection::Bitonic, Selection::KMin];

/// Median, minimum and wall-clock median of a timing, in milliseconds.
fn figures(timing: &KnnTiming) -> (f64, f64, f64) {
    let sorted = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v
    };
    let (ms, wall) = (sorted(&timing.ms), sorted(&timing.wall_ms));
    (ms[ms.len() / 2], ms[0], wall[wall.len() / 2])
}

/// A path's name: the selection and `tf32` (the prefilter ran) or `fp32`.
fn path_name(selection: Selection, prefilter: bool) -> String {
    format!("{selection} {}", if prefilter { "tf32" } else { "fp32" })
}

/// Times every path of `case` and `Auto` on `device`, `reps` timed searches each after a
/// warm-up; returns the JSON lines (also printed).
pub fn rows(case: &KnnCase, device: Device, reps: usize) -> kmeans_knn::Result<Vec<Value>> {
    // Searches of 10^9 distances or more take tens of milliseconds: five suffice.
    let reps = if case.m * case.n >= 1_000_000_000 {
        reps.min(5)
    } else {
        reps
    };
    let train = uniform(case.n * case.d, 2);
    let queries = uniform(case.m * case.d, 3);
    let q = MatrixView::new(&queries, case.m, case.d)?;
    let x = MatrixView::new(&train, case.n, case.d)?;
    let cores = std::thread::available_parallelism().map_or(0, |c| c.get());
    let base = json!({
        "case": case.name, "m": case.m, "n": case.n, "d": case.d, "k": case.k,
        "device": device.describe()?, "cores": cores,
        "rayon_threads": rayon::current_num_threads(),
        "timing": "cuda events around KnnIndex::search: query upload + kernels + key download",
    });
    let row = |path: &str, timing: &KnnTiming, extra: Value| {
        let (median, min, wall) = figures(timing);
        let mut row = base.clone();
        let fields = json!({
            "path": path, "median_ms": median, "min_ms": min, "spread": median / min,
            "wall_median_ms": wall, "reps": timing.ms.len(), "ms": timing.ms,
        });
        for source in [fields, extra] {
            if let (Some(row), Value::Object(more)) = (row.as_object_mut(), source) {
                row.extend(more);
            }
        }
        row
    };
    // `Auto` first, in a fresh index: its first search makes (or reads) the choice.
    let index = KnnIndex::new(x, DistanceMetric::SqEuclidean, device)?;
    let auto = knn_search_ms(&index, &q, case.k, 2, reps)?;
    let took = path_name(auto.result.selection, auto.result.prefilter.is_some());
    let report = index.auto_report(case.k);
    let mut timed = Vec::new();
    let mut index = index;
    for prefilter in [true, false] {
        for selection in SELECTIONS {
            index = index.with_prefilter(prefilter).with_selection(selection);
            let timing = knn_search_ms(&index, &q, case.k, 2, reps)?;
            // Where the prefilter does not apply, its path is the exact one: timed once.
            let ran = path_name(timing.result.selection, timing.result.prefilter.is_some());
            if timed
                .iter()
                .any(|(name, _): &(String, KnnTiming)| *name == ran)
            {
                continue;
            }
            timed.push((ran, timing));
        }
    }
    let best = (timed.iter())
        .map(|(_, t)| figures(t).0)
        .fold(f64::INFINITY, f64::min);
    let mut lines = Vec::new();
    let auto_sample = report.as_ref().map(|r| {
        let paths = r.timings.iter().map(|t| {
            json!({"path": path_name(t.selection, t.prefilter), "warmup_ms": t.warmup_ms,
                   "min_ms": t.min_ms, "median_ms": t.median_ms})
        });
        json!({
            "source": match r.source { AutoSource::Timed => "timed", AutoSource::Cached => "user cache" },
            "paths": paths.collect::<Vec<_>>(),
        })
    });
    let (auto_median, _, _) = figures(&auto);
    lines.push(row(
        "auto",
        &auto,
        json!({"auto_took": took, "auto_over_best_median": auto_median / best,
               "auto_sample": auto_sample}),
    ));
    for (name, timing) in &timed {
        let is_auto = *name == took;
        lines.push(row(name, timing, json!({"auto_took_this": is_auto})));
    }
    for line in &lines {
        println!("{line}");
    }
    Ok(lines)
}
