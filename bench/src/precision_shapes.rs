//! `gpu-bench --precision-shapes N`: one Lloyd step with `Precision::Exact` and with
//! `Precision::Tf32` over a grid of dimensions and cluster counts at `n` uniform points, the
//! speed-up and whether the labels agree, to place `Precision::Auto`'s shape rule.

use kmeans_knn::bench::lloyd_iteration_ms;
use kmeans_knn::{Device, MatrixView, Metric, Precision};
use std::io::Write;

/// The grid's dimensions and cluster counts.
const DIMS: [usize; 7] = [16, 32, 64, 97, 128, 256, 512];
const KS: [usize; 6] = [32, 64, 128, 256, 1024, 4096];

fn median(mut ms: Vec<f64>) -> f64 {
    ms.sort_by(f64::total_cmp);
    ms[ms.len() / 2]
}

/// Prints a row per (d, k) and writes it to `json`.
pub fn rows(
    device: Device,
    n: usize,
    reps: usize,
    mut json: Option<&mut std::fs::File>,
) -> Result<(), Box<dyn std::error::Error>> {
    println!("device: {}, n = {n}", device.describe()?);
    println!(
        "{:>5} {:>6} {:>10} {:>10} {:>9} {:>10}",
        "d", "k", "exact ms", "tf32 ms", "speed-up", "identical"
    );
    for d in DIMS {
        let data = crate::data::uniform(n * d, 1);
        let x = MatrixView::new(&data, n, d)?;
        for k in KS {
            let centroids = &data[..k * d];
            let time = |p| lloyd_iteration_ms(device, &x, centroids, Metric::L2, p, 3, reps);
            let (exact, tf32) = (time(Precision::Exact)?, time(Precision::Tf32)?);
            let same = exact.labels == tf32.labels;
            let (e, t) = (median(exact.ms), median(tf32.ms));
            println!(
                "{d:>5} {k:>6} {e:>10.3} {t:>10.3} {:>8.2}× {same:>10}",
                e / t
            );
            if let Some(f) = json.as_deref_mut() {
                let row = serde_json::json!({"n": n, "d": d, "k": k, "exact_ms": e,
                    "tf32_ms": t, "identical": same});
                writeln!(f, "{row}")?;
            }
        }
    }
    Ok(())
}
