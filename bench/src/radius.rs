//! `gpu-bench --radius`: radius search beside the k-nearest search of the same kNN case
//! (issue #38's target: F's shape, 10^4 queries × 10^6 × 128, a radius giving about k
//! neighbours a query, within 1.5× of the k = 100 search).

use crate::data::{KnnCase, uniform};
use kmeans_knn::{Device, DistanceMetric, KnnIndex, MatrixView};
use std::io::Write;
use std::time::Instant;

/// Wall-clock milliseconds of `reps` runs of `work` after one warm-up, sorted.
fn wall_ms(
    reps: usize,
    mut work: impl FnMut() -> kmeans_knn::Result<()>,
) -> kmeans_knn::Result<Vec<f64>> {
    work()?;
    let mut ms = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        work()?;
        ms.push(start.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(f64::total_cmp);
    Ok(ms)
}

/// Times the case's k-nearest search and a radius search whose radius is the median over the
/// queries of the k-th neighbour's distance (so about k neighbours a query), both wall clock
/// around the public call (the answer is on the host at its end); prints a row and writes a
/// JSON line, both naming the radius search's path (the TF32 prefilter and its exact
/// fallbacks, or the exact path).
pub fn radius_row(
    case: &KnnCase,
    device: Device,
    reps: usize,
    json: Option<&mut std::fs::File>,
) -> Result<(), Box<dyn std::error::Error>> {
    let train = uniform(case.n * case.d, 2);
    let queries = uniform(case.m * case.d, 3);
    let q = MatrixView::new(&queries, case.m, case.d)?;
    let train = MatrixView::new(&train, case.n, case.d)?;
    let index = KnnIndex::new(train, DistanceMetric::SqEuclidean, device)?;
    let found = index.search(&q, case.k)?;
    let mut kth: Vec<f32> = found.distances.column(case.k - 1).to_vec();
    kth.sort_by(f32::total_cmp);
    let radius = kth[kth.len() / 2];
    let knn = wall_ms(reps, || index.search(&q, case.k).map(drop))?;
    let (mut neighbours, mut prefilter) = (0, None);
    let within = wall_ms(reps, || {
        let found = index.radius_search(&q, radius)?;
        (neighbours, prefilter) = (found.indices.len(), found.prefilter);
        Ok(())
    })?;
    let path = match prefilter {
        Some(p) => format!(
            "TF32 prefilter, {} of {} queries by the exact path",
            p.exact_fallbacks, p.queries
        ),
        None => "exact (whole distance rows)".to_string(),
    };
    let (knn_median, radius_median) = (knn[knn.len() / 2], within[within.len() / 2]);
    let per_query = neighbours as f64 / case.m as f64;
    println!(
        "{}-radius: m {} n {} d {}: radius {radius} ({per_query:.1} neighbours a query): \
         {radius_median:.3} ms (min {:.3}) against k = {} search {knn_median:.3} ms: {:.2}×; \
         radius path: {path}",
        case.name,
        case.m,
        case.n,
        case.d,
        within[0],
        case.k,
        radius_median / knn_median
    );
    if let Some(f) = json {
        let line = serde_json::json!({
            "case": format!("{}-radius", case.name), "m": case.m, "n": case.n, "d": case.d,
            "k": case.k, "radius": radius, "neighbours_per_query": per_query,
            "median_ms": radius_median, "min_ms": within[0], "knn_median_ms": knn_median,
            "ratio": radius_median / knn_median, "device": device.describe()?,
            "radius_path": if prefilter.is_some() { "prefilter" } else { "exact" },
            "exact_fallbacks": prefilter.map(|p| p.exact_fallbacks),
            "timing": "wall clock around KnnIndex::radius_search and KnnIndex::search",
        });
        writeln!(f, "{line}")?;
    }
    Ok(())
}
