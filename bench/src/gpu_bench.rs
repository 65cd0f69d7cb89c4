//! GPU benchmark: one Lloyd iteration (assign + update) per case, timed with CUDA events after
//! warm-up; prints the median and writes JSON lines for `torch_baseline.py` to compare against.
//!
//! usage: gpu-bench [--cases A,B,C,D,E] [--reps N] [--json FILE] [--device gpu|cpu]

use kmeans_knn::bench::lloyd_iteration_ms;
use kmeans_knn::{Device, MatrixView, Metric};
use kmeans_knn_bench::data::CASES;
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
    let cases = opt("--cases").unwrap_or_else(|| "A,B,C,D,E".into());
    let reps: usize = opt("--reps").map_or(Ok(10), |r| r.parse())?;
    let device: Device = opt("--device").unwrap_or_else(|| "gpu".into()).parse()?;
    let json_path = opt("--json");
    let mut json = match &json_path {
        Some(p) => Some(std::fs::File::create(p)?),
        None => None,
    };
    println!("device: {}", device.describe()?);
    println!(
        "{:<4} {:>10} {:>5} {:>5} {:>12} {:>12} {:>10}",
        "case", "n", "d", "k", "median ms", "min ms", "GFLOP/s"
    );
    for case in CASES
        .iter()
        .filter(|c| cases.split(',').any(|n| n == c.name))
    {
        let (data, centroids) = case.data();
        let x = MatrixView::new(&data, case.n, case.d)?;
        let mut ms = lloyd_iteration_ms(device, &x, &centroids, Metric::L2, 3, reps)?;
        ms.sort_by(f64::total_cmp);
        let median = ms[ms.len() / 2];
        let flops = case.assign_flops();
        println!(
            "{:<4} {:>10} {:>5} {:>5} {:>12.3} {:>12.3} {:>10.0}   {}",
            case.name,
            case.n,
            case.d,
            case.k,
            median,
            ms[0],
            flops / median / 1e6,
            case.origin
        );
        if let Some(f) = json.as_mut() {
            let line = serde_json::json!({
                "case": case.name, "n": case.n, "d": case.d, "k": case.k,
                "median_ms": median, "min_ms": ms[0], "device": device.describe()?,
            });
            writeln!(f, "{line}")?;
        }
    }
    Ok(())
}
