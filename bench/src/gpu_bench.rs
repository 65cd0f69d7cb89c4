//! GPU benchmark: one Lloyd iteration (assign + update) per k-means case, timed with CUDA events
//! after warm-up, and a kNN search per kNN case; prints medians and writes JSON lines for
//! `torch_baseline.py` to compare against.
//!
//! usage: gpu-bench [--cases A,B,C,D,E,S,S512,F] [--reps N] [--json FILE] [--device gpu|cpu]

use kmeans_knn::bench::lloyd_iteration_ms;
use kmeans_knn::{Device, DistanceMetric, KnnIndex, MatrixView, Metric};
use kmeans_knn_bench::data::{CASES, KNN_CASES, uniform};
use std::io::Write;

fn main() {
    if let Err(e) = run() {
        eprintln!("gpu-bench: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .map(|i| args[i + 1].clone())
    };
    let cases = opt("--cases").unwrap_or_else(|| "A,B,C,D,E,S,S512,F".into());
    let reps: usize = opt("--reps").map_or(Ok(10), |r| r.parse())?;
    let device: Device = opt("--device").unwrap_or_else(|| "gpu".into()).parse()?;
    let json_path = opt("--json");
    let mut json = match &json_path {
        Some(p) => Some(std::fs::File::create(p)?),
        None => None,
    };
    println!("device: {}", device.describe()?);
    println!(
        "{:<4} {:>10} {:>5} {:>5} {:>11} {:>11} {:>9} {:>8} {:>9}",
        "case", "n", "d", "k", "median ms", "min ms", "TFLOP/s", "TB/s", "GPU MiB"
    );
    for case in CASES
        .iter()
        .filter(|c| cases.split(',').any(|n| n == c.name))
    {
        let (data, centroids) = case.data();
        let x = MatrixView::new(&data, case.n, case.d)?;
        let timing = lloyd_iteration_ms(device, &x, &centroids, Metric::L2, 3, reps)?;
        let mut ms = timing.ms;
        ms.sort_by(f64::total_cmp);
        let median = ms[ms.len() / 2];
        // Achieved rates against the floor's two counts: 2·n·k·d flops, n·d·4 bytes.
        let tflops = case.assign_flops() / median / 1e9;
        let tbytes = case.data_bytes() / median / 1e9;
        let mib = timing.device_bytes.map(|b| b as f64 / (1 << 20) as f64);
        println!(
            "{:<4} {:>10} {:>5} {:>5} {:>11.3} {:>11.3} {:>9.2} {:>8.3} {:>9}   {}",
            case.name,
            case.n,
            case.d,
            case.k,
            median,
            ms[0],
            tflops,
            tbytes,
            mib.map_or("-".into(), |m| format!("{m:.0}")),
            case.origin
        );
        if let Some(f) = json.as_mut() {
            let line = serde_json::json!({
                "case": case.name, "n": case.n, "d": case.d, "k": case.k,
                "median_ms": median, "min_ms": ms[0], "device": device.describe()?,
                "tflops": tflops, "tbytes_per_s": tbytes, "device_mib": mib,
            });
            writeln!(f, "{line}")?;
        }
    }
    let knn: Vec<_> = KNN_CASES
        .iter()
        .filter(|c| cases.split(',').any(|n| n == c.name))
        .collect();
    if !knn.is_empty() {
        println!(
            "{:<5} {:>7} {:>9} {:>5} {:>5} {:>12} {:>12} {:>10}",
            "knn", "m", "n", "d", "k", "median ms", "min ms", "selection"
        );
    }
    for case in knn {
        let train = uniform(case.n * case.d, 2);
        let queries = uniform(case.m * case.d, 3);
        let index = KnnIndex::new(
            MatrixView::new(&train, case.n, case.d)?,
            DistanceMetric::SqEuclidean,
            device,
        )?;
        let q = MatrixView::new(&queries, case.m, case.d)?;
        // Wall clock of the whole synchronous search (queries up, results down), after the
        // first call has made the automatic selection choice.
        let mut ms = Vec::new();
        let mut selection = String::new();
        for rep in 0..2 + reps.min(5) {
            let start = std::time::Instant::now();
            let found = index.search(&q, case.k)?;
            if rep >= 2 {
                ms.push(start.elapsed().as_secs_f64() * 1e3);
            }
            selection = format!("{:?}", found.selection).to_lowercase();
        }
        ms.sort_by(f64::total_cmp);
        let median = ms[ms.len() / 2];
        println!(
            "{:<5} {:>7} {:>9} {:>5} {:>5} {:>12.3} {:>12.3} {:>10}   {}",
            case.name, case.m, case.n, case.d, case.k, median, ms[0], selection, case.origin
        );
        if let Some(f) = json.as_mut() {
            let line = serde_json::json!({
                "case": case.name, "m": case.m, "n": case.n, "d": case.d, "k": case.k,
                "median_ms": median, "min_ms": ms[0], "selection": selection,
                "device": device.describe()?,
            });
            writeln!(f, "{line}")?;
        }
    }
    Ok(())
}
