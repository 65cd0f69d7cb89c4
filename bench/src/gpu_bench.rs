//! GPU benchmark: one Lloyd iteration (assign + update) per k-means case, timed with CUDA events
//! after warm-up, and a kNN search per kNN case; prints medians and writes JSON lines for
//! `torch_baseline.py` to compare against.
//!
//! ```text
//! usage: gpu-bench [--cases A,B,C,C1,D,E,S,S512,F] [--reps N] [--json FILE] [--device gpu|cpu]
//!                  [--precision tf32] [--knn-exact] [--whole] [--whole-only] [--gpus gpu:0,1]
//!                  [--stream N,D,M,K,BUDGET_MIB] [--stream-kmeans N,D,K,BUDGET_MIB]
//!                  [--stream-kmeans-widths BUDGET_MIB]
//!                  [--stream-kmeans-fit N,D,K,BUDGET_MIB,MAX_ITER[,cpu][,l1][,kmeans|||random]]
//!                  [--all-paths] [--radius] [--precision-shapes N]
//! ```
//!
//! `--reps` (default 30) timed runs per case after warm-up; kNN cases of 10^9 distances or more
//! take at most 5.
//!
//! kNN cases are timed with CUDA events around `KnnIndex::search` (query upload, every kernel,
//! key download; the wall clock of the whole call is printed next to it). `--knn-exact` adds a
//! `-fp32` row per kNN case with the TF32 prefilter off (every distance exact FP32).
//!
//! `--all-paths` times, for each kNN case instead of its row, the search with `Selection::Auto`
//! and every path on its own (radix, bitonic and k-min selection, each with the TF32 prefilter
//! and on the exact FP32 path), and prints one JSON line per (case, path): median, minimum,
//! spread (median / minimum), which path `Auto` took and the sample timings it chose from (see
//! `all_paths.rs`).
//!
//! `--whole` adds whole-job rows per k-means case (wall clock around the public API): the
//! seeding alone (`init ms`, k-means++ and, for D and E, k-means‖) and a whole `fit` from the
//! default init to convergence and with 20 fixed iterations (`fit ms`, with the init's share);
//! E runs k-means‖. `--reps` applies (at most 3 for D and E). `--whole-only` prints those rows
//! alone (no per-step rows: a profiler's launch count then starts at the fits).
//!
//! `--gpus SET` (e.g. `gpu:0,1`, `gpu:all`) instead times each k-means case's Lloyd step and each
//! kNN case's search on that GPU set against its first GPU (wall clock; see `gpus.rs`), says
//! whether the answers are identical, and exits; case `E4` (4 × 10^7 × 128, k = 1024) is there
//! for it.
//!
//! `--stream N,D,M,K,BUDGET_MIB` instead times a kNN search of M queries (k = K) against N × D
//! uniform training rows kept in host memory and streamed through the GPU within BUDGET_MIB,
//! against one upload of those rows (through the page-locked staging buffers, as the stream
//! copies them: the floor; and by the driver's pageable path) and the resident search when the
//! rows fit, and exits. `--stream-kmeans N,D,K,BUDGET_MIB` likewise times a Lloyd step of k-means
//! on N × D uniform rows streamed in batches within BUDGET_MIB, against the same uploads and the
//! resident step.
//!
//! `--stream-kmeans-widths BUDGET_MIB` runs `--stream-kmeans` for d = 3, 16 and 128 (k = 16) with
//! rows of four times the budget: the streamed step's time and its host→device rate (rows and
//! labels) against the copy rate of the rows alone.
//!
//! `--stream-kmeans-fit N,D,K,BUDGET_MIB,MAX_ITER[,cpu][,l1][,kmeans|||random]` fits N × D
//! uniform rows made in the process (k-means++ unless `kmeans||` or `random` points, seed 0;
//! squared L2 unless `l1`) streamed within BUDGET_MIB, and with `cpu` also on the CPU, and says
//! whether the two are the same bit for bit (e.g. `200000000,3,8,8192,20,cpu`, and
//! `2000000000,3,8,8192,20` where host memory holds no CPU fit beside it). It breaks the fit
//! down by phase (seeding, Lloyd steps, the rest: wall ms, passes over the rows, requests, and
//! the rate of rows crossing to the GPU per pass against a staged upload of all rows timed in
//! the same run), counts the bytes the batches moved up and down at their turns, and ends with
//! the case as one JSON line.
//!
//! `--radius` adds a `-radius` row per kNN case: a radius search whose radius gives about k
//! neighbours a query (the median k-th neighbour distance), against the k-nearest search (wall
//! clock; `bench/src/radius.rs`).
//!
//! `--precision-shapes N` instead times one Lloyd step with each precision over a grid of
//! dimensions and cluster counts at N uniform points (`precision_shapes.rs`), and exits.
//!
//! With `--precision tf32`, every k-means case is also timed with `Precision::Tf32` (a `-tf32`
//! row after the exact one) with its speed-up over exact and the share of labels identical to
//! exact's after one assignment from the same centroids.

use kmeans_knn::bench::{knn_search_ms, lloyd_iteration_ms};
use kmeans_knn::{Device, DistanceMetric, KnnIndex, KnnLayout, MatrixView, Metric, Precision};
use kmeans_knn::{Init, KMeans};
use kmeans_knn_bench::data::{CASES, KNN_CASES, uniform};
use kmeans_knn_bench::{all_paths, gpus, precision_shapes, whole};
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
    let cases = opt("--cases").unwrap_or_else(|| "A,B,C,C1,D,E,S,S512,F".into());
    let reps: usize = opt("--reps").map_or(Ok(30), |r| r.parse())?;
    let device: Device = opt("--device").unwrap_or_else(|| "gpu".into()).parse()?;
    let json_path = opt("--json");
    // `--knn-exact`: also time every kNN case with the prefilter off (`-fp32` rows).
    let exact_too = args.iter().any(|a| a == "--knn-exact");
    let whole_jobs = args.iter().any(|a| a == "--whole");
    let radius_too = args.iter().any(|a| a == "--radius");
    let tf32 = match opt("--precision").as_deref() {
        None | Some("exact") => false,
        Some("tf32") => true,
        Some(other) => return Err(format!("--precision {other}: exact or tf32").into()),
    };
    let mut json = match &json_path {
        Some(p) => Some(std::fs::File::create(p)?),
        None => None,
    };
    if let Some(shape) = opt("--stream") {
        return streamed_rows(&shape, device, reps.min(5));
    }
    if let Some(shape) = opt("--stream-kmeans") {
        return streamed_fit_rows(&shape, device, reps.min(3));
    }
    if let Some(budget) = opt("--stream-kmeans-widths") {
        let budget_mib: usize = budget.parse()?;
        for d in [3, 16, 128] {
            let n = (budget_mib << 20) / d;
            streamed_fit_rows(&format!("{n},{d},16,{budget_mib}"), device, reps.min(3))?;
        }
        return Ok(());
    }
    if let Some(shape) = opt("--stream-kmeans-fit") {
        return fit_against_cpu_rows(&shape, device);
    }
    if let Some(n) = opt("--precision-shapes") {
        return precision_shapes::rows(device, n.parse()?, reps.min(10), json.as_mut());
    }
    if let Some(set) = opt("--gpus") {
        return gpu_set_rows(set.parse()?, &cases, reps.min(5), json.as_mut());
    }
    if args.iter().any(|a| a == "--whole-only") {
        return whole_job_rows(&cases, reps, device, json.as_mut());
    }
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
        let timing = lloyd_iteration_ms(
            device,
            &x,
            &centroids,
            case.metric,
            Precision::Exact,
            3,
            reps,
        )?;
        let (mut ms, exact_labels) = (timing.ms, timing.labels);
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
                "metric": format!("{:?}", case.metric),
                "median_ms": median, "min_ms": ms[0], "device": device.describe()?,
                "tflops": tflops, "tbytes_per_s": tbytes, "device_mib": mib,
            });
            writeln!(f, "{line}")?;
        }
        if tf32 && case.metric == Metric::L2 {
            let with_tf32 =
                lloyd_iteration_ms(device, &x, &centroids, Metric::L2, Precision::Tf32, 3, reps)?;
            let mut ms = with_tf32.ms.clone();
            let labels = &with_tf32.labels;
            ms.sort_by(f64::total_cmp);
            let tf32_median = ms[ms.len() / 2];
            let same = labels
                .iter()
                .zip(&exact_labels)
                .filter(|(a, b)| a == b)
                .count();
            let agreement = same as f64 / case.n as f64;
            let name = format!("{}-tf32", case.name);
            println!(
                "{:<4} {:>10} {:>5} {:>5} {:>11.3} {:>11.3} {:>9.2} {:>8.3} {:>9}   {:.2}× exact, labels {:.5} identical ({} differ)",
                name,
                case.n,
                case.d,
                case.k,
                tf32_median,
                ms[0],
                case.assign_flops() / tf32_median / 1e9,
                case.data_bytes() / tf32_median / 1e9,
                with_tf32.device_bytes.map_or("-".into(), |b| format!(
                    "{:.0}",
                    b as f64 / (1 << 20) as f64
                )),
                median / tf32_median,
                agreement,
                case.n - same
            );
            if let Some(f) = json.as_mut() {
                let line = serde_json::json!({
                    "case": name, "n": case.n, "d": case.d, "k": case.k,
                    "median_ms": tf32_median, "min_ms": ms[0], "device": device.describe()?,
                    "precision": "tf32", "speedup_over_exact": median / tf32_median,
                    "label_agreement": agreement,
                });
                writeln!(f, "{line}")?;
            }
        }
    }
    if whole_jobs {
        whole_job_rows(&cases, reps, device, json.as_mut())?;
    }
    let knn: Vec<_> = KNN_CASES
        .iter()
        .filter(|c| cases.split(',').any(|n| n == c.name))
        .collect();
    if args.iter().any(|a| a == "--all-paths") {
        for case in knn {
            for line in all_paths::rows(case, device, reps)? {
                if let Some(f) = json.as_mut() {
                    writeln!(f, "{line}")?;
                }
            }
        }
        return Ok(());
    }
    if !knn.is_empty() {
        println!(
            "{:<5} {:>7} {:>9} {:>5} {:>5} {:>10} {:>10} {:>10} {:>10}  path",
            "knn", "m", "n", "d", "k", "median ms", "min ms", "wall ms", "selection"
        );
    }
    for case in knn {
        let train = uniform(case.n * case.d, 2);
        let queries = uniform(case.m * case.d, 3);
        let q = MatrixView::new(&queries, case.m, case.d)?;
        for prefilter in [true, false] {
            if !prefilter && !exact_too {
                continue;
            }
            let index = KnnIndex::new(
                MatrixView::new(&train, case.n, case.d)?,
                DistanceMetric::SqEuclidean,
                device,
            )?
            .with_prefilter(prefilter);
            // CUDA-event time of `search` (query upload, kernels, key download; see
            // `KnnTiming`), after two searches that warm up and make the selection choice.
            // Searches of 10^9 distances or more take tens of milliseconds: five suffice.
            let large = case.m * case.n >= 1_000_000_000;
            let timing = knn_search_ms(
                &index,
                &q,
                case.k,
                2,
                if large { reps.min(5) } else { reps },
            )?;
            let (mut ms, mut wall) = (timing.ms.clone(), timing.wall_ms.clone());
            ms.sort_by(f64::total_cmp);
            wall.sort_by(f64::total_cmp);
            let (median, wall_median) = (ms[ms.len() / 2], wall[wall.len() / 2]);
            let selection = timing.result.selection.to_string();
            let path = match timing.result.prefilter {
                Some(p) => format!(
                    "tf32 prefilter ({}, {} exact fallbacks)",
                    if p.stored > 0 { "stored" } else { "two scans" },
                    p.exact_fallbacks
                ),
                None => "exact fp32".to_string(),
            };
            let name = if prefilter {
                case.name.to_string()
            } else {
                format!("{}-fp32", case.name)
            };
            println!(
                "{:<5} {:>7} {:>9} {:>5} {:>5} {:>10.3} {:>10.3} {:>10.3} {:>10}  {}; {}",
                name,
                case.m,
                case.n,
                case.d,
                case.k,
                median,
                ms[0],
                wall_median,
                selection,
                path,
                case.origin
            );
            if let Some(f) = json.as_mut() {
                let line = serde_json::json!({
                    "case": name, "m": case.m, "n": case.n, "d": case.d, "k": case.k,
                    "median_ms": median, "min_ms": ms[0], "wall_median_ms": wall_median,
                    "selection": selection, "path": path, "device": device.describe()?,
                    "timing": "cuda events around KnnIndex::search: query upload + kernels + key download",
                });
                writeln!(f, "{line}")?;
            }
        }
    }
    if radius_too {
        for case in KNN_CASES
            .iter()
            .filter(|c| cases.split(',').any(|n| n == c.name))
        {
            let large = case.m * case.n >= 1_000_000_000;
            let reps = if large { reps.min(5) } else { reps };
            kmeans_knn_bench::radius::radius_row(case, device, reps, json.as_mut())?;
        }
    }
    Ok(())
}

/// The `--stream` row (see the module documentation).
fn streamed_rows(
    shape: &str,
    device: Device,
    reps: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let v: Vec<usize> = shape.split(',').map(str::parse).collect::<Result<_, _>>()?;
    let &[n, d, m, k, budget_mib] = v.as_slice() else {
        return Err(format!("--stream {shape}: N,D,M,K,BUDGET_MIB").into());
    };
    let s = gpus::streamed_search(n, d, m, k, budget_mib << 20, device, reps)?;
    println!("device: {}", device.describe()?);
    println!(
        "stream: {n} × {d} training rows ({:.2} GB), {m} queries, k = {k}, budget {budget_mib} MiB",
        s.bytes / 1e9
    );
    print_streamed(&s, "search", budget_mib);
    Ok(())
}

/// The `--stream-kmeans` row (see the module documentation).
fn streamed_fit_rows(
    shape: &str,
    device: Device,
    reps: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let v: Vec<usize> = shape.split(',').map(str::parse).collect::<Result<_, _>>()?;
    let &[n, d, k, budget_mib] = v.as_slice() else {
        return Err(format!("--stream-kmeans {shape}: N,D,K,BUDGET_MIB").into());
    };
    let (s, fitted_on) = gpus::streamed_fit(n, d, k, budget_mib << 20, device, reps)?;
    println!("device: {}", device.describe()?);
    println!(
        "stream-kmeans: {n} × {d} rows ({:.2} GB), k = {k}, budget {budget_mib} MiB",
        s.bytes / 1e9
    );
    print_streamed(&s, "step  ", budget_mib);
    println!("  fitted on            {fitted_on}");
    Ok(())
}

/// The `--stream-kmeans-fit` rows (see the module documentation): readable lines, then the
/// case as one JSON line.
fn fit_against_cpu_rows(shape: &str, device: Device) -> Result<(), Box<dyn std::error::Error>> {
    let usage = || {
        format!(
            "--stream-kmeans-fit {shape}: N,D,K,BUDGET_MIB,MAX_ITER[,cpu][,l1][,kmeans|||random]"
        )
    };
    let parts: Vec<&str> = shape.split(',').collect();
    if parts.len() < 5 {
        return Err(usage().into());
    }
    let v: Vec<usize> = parts[..5]
        .iter()
        .map(|p| p.parse())
        .collect::<Result<_, _>>()?;
    let mut fit = gpus::WholeFit {
        n: v[0],
        d: v[1],
        k: v[2],
        budget: v[3] << 20,
        max_iter: v[4],
        init: Init::KMeansPlusPlus,
        metric: Metric::L2,
        cpu: false,
    };
    for option in &parts[5..] {
        match *option {
            "cpu" => fit.cpu = true,
            "l1" => fit.metric = Metric::L1,
            "kmeans||" => fit.init = Init::KMeansParallel,
            "random" => fit.init = Init::RandomPoints,
            _ => return Err(usage().into()),
        }
    }
    let r = gpus::fit_against_cpu(&fit, device)?;
    let (n, d, k) = (fit.n, fit.d, fit.k);
    let rows_gb = (n * d * 4) as f64 / 1e9;
    let upload_gbps = rows_gb / (r.upload_ms / 1e3);
    println!("device: {}", device.describe()?);
    println!(
        "stream-kmeans-fit: {n} × {d} rows ({rows_gb:.2} GB), k = {k}, {:?}, {:?}, budget {} MiB",
        fit.init,
        fit.metric,
        fit.budget >> 20
    );
    println!(
        "  staged upload of all rows {:>10.1} ms  {upload_gbps:>7.2} GB/s",
        r.upload_ms
    );
    println!(
        "  streamed fit              {:>10.1} ms  {} iterations, inertia {}",
        r.gpu_ms, r.model.n_iter, r.model.inertia
    );
    let mut phases = serde_json::Map::new();
    for (phase, t) in &r.counters.phases {
        // Rows crossing to the device per second of the phase, against the staged upload's rate.
        let gbps = t.passes as f64 * rows_gb / t.seconds.max(1e-9);
        println!(
            "  {:<25} {:>10.1} ms  {:>4} passes over the rows in {:>5} requests, {gbps:>7.2} GB/s of rows ({:.0} % of the upload's rate)",
            format!("{phase:?}").to_lowercase(),
            t.seconds * 1e3,
            t.passes,
            t.requests,
            100.0 * gbps / upload_gbps,
        );
        phases.insert(
            format!("{phase:?}").to_lowercase(),
            serde_json::json!({
                "seconds": t.seconds, "passes": t.passes, "requests": t.requests,
                "rows_gbps": gbps,
            }),
        );
    }
    let mut requests = serde_json::Map::new();
    for (name, t) in &r.counters.requests {
        println!(
            "    {name:<23} {:>10.1} ms  in {:>5} requests",
            t.seconds * 1e3,
            t.requests
        );
        requests.insert(
            name.to_string(),
            serde_json::json!({ "seconds": t.seconds, "requests": t.requests }),
        );
    }
    let (up, down) = (
        r.counters.up_bytes as f64 / 1e9,
        r.counters.down_bytes as f64 / 1e9,
    );
    println!(
        "  traffic                   {up:>10.2} GB up, {down:.2} GB down at the batches' turns ({:.2} GB/s up over the fit)",
        up / (r.gpu_ms / 1e3)
    );
    let t = r.counters.turns;
    println!(
        "  streamed turns            {:>10.1} ms answering, {:.1} ms releasing (state read back), {:.1} ms waiting for the next rows",
        t.answer * 1e3,
        t.release * 1e3,
        t.upload_wait * 1e3
    );
    println!("  fitted on                 {}", r.model.device);
    match (r.cpu_ms, r.identical) {
        (Some(ms), Some(same)) => {
            println!("  CPU fit                   {ms:>10.1} ms");
            println!("  identical to the CPU      {same}");
        }
        _ => println!("  CPU fit                   (not run: add ,cpu)"),
    }
    let line = serde_json::json!({
        "mode": "stream-kmeans-fit", "device": device.describe()?, "n": n, "d": d, "k": k,
        "init": format!("{:?}", fit.init), "metric": format!("{:?}", fit.metric),
        "budget_mib": fit.budget >> 20, "max_iter": fit.max_iter,
        "fit_ms": r.gpu_ms, "n_iter": r.model.n_iter, "fitted_on": r.model.device,
        "upload_ms": r.upload_ms, "upload_gbps": upload_gbps,
        "phases": phases, "requests": requests, "up_bytes": r.counters.up_bytes, "down_bytes": r.counters.down_bytes,
        "turn_seconds": {"answer": t.answer, "release": t.release, "upload_wait": t.upload_wait},
        "cpu_ms": r.cpu_ms, "identical_to_cpu": r.identical,
    });
    println!("{line}");
    Ok(())
}

/// The lines of a streamed job whose pass is a `pass` (a search, a step), within `budget_mib`.
fn print_streamed(s: &gpus::Streamed, pass: &str, budget_mib: usize) {
    let gbps = |ms: f64| s.bytes / ms / 1e6;
    println!(
        "  upload of all rows   {:>10.1} ms  {:>7.2} GB/s  (staged; pageable {:.1} ms, {:.2} GB/s)",
        s.upload_ms,
        gbps(s.upload_ms),
        s.pageable_ms,
        gbps(s.pageable_ms)
    );
    println!(
        "  streamed {pass}      {:>10.1} ms  {:>7.2} GB/s  ({:.0} % of the upload's rate)",
        s.streamed_ms,
        gbps(s.streamed_ms),
        100.0 * s.upload_ms / s.streamed_ms
    );
    if s.state_down > 0.0 {
        let up = (s.bytes + s.state_up) / s.streamed_ms / 1e6;
        println!(
            "  host→device          {up:>18.2} GB/s  ({:.0} % of the upload's rate; rows and \
             {:.0} MB of state up, {:.0} MB of labels and distances down a {pass})",
            100.0 * up / gbps(s.upload_ms),
            s.state_up / 1e6,
            s.state_down / 1e6,
        );
    }
    if let Some(t) = s.turns {
        println!(
            "  a step's turns        answering {:.1} ms, releasing {:.1} ms, then waiting for \
             the next rows {:.1} ms",
            1e3 * t.answer,
            1e3 * t.release,
            1e3 * t.upload_wait
        );
    }
    match s.resident_ms {
        Some(ms) if ms > 0.0 => println!("  resident {pass}      {ms:>10.1} ms"),
        // A step of a few ms, timed as the difference of two whole fits, can fall under their
        // noise.
        Some(_) => println!("  resident {pass}      under the noise of the fits it is timed from"),
        None => println!("  resident {pass}      (the rows do not fit the default budget)"),
    }
    println!("  identical            {}", s.identical);
    if let Some(peak) = s.peak_bytes {
        println!(
            "  peak device memory   {:>10.0} MiB  (budget {budget_mib} MiB)",
            peak as f64 / (1 << 20) as f64
        );
    }
}

/// The `--gpus` rows: each case on the set and on its first GPU.
fn gpu_set_rows(
    set: Device,
    cases: &str,
    reps: usize,
    mut json: Option<&mut std::fs::File>,
) -> Result<(), Box<dyn std::error::Error>> {
    let Device::Gpus(gpus) = set else {
        return Err(format!("--gpus {set}: name several GPUs, e.g. gpu:0,1 or gpu:all").into());
    };
    let one = Device::Cuda(gpus.ordinals()?[0]);
    println!("GPU set: {}", set.describe()?);
    println!(
        "{:<5} {:>10} {:>12} {:>12} {:>9} {:>10}  peak GiB: one GPU / each of the set",
        "case", "n", "one GPU ms", "set ms", "speed-up", "identical"
    );
    let wanted = |name: &str| cases.split(',').any(|c| c == name);
    for case in CASES.iter().filter(|c| wanted(c.name)) {
        let (data, centroids) = case.data();
        let x = MatrixView::new(&data, case.n, case.d)?;
        let ((t1, m1), peak1) =
            gpus::with_peak(one, || gpus::step_ms(case, &x, &centroids, one, reps))?;
        let ((ts, ms), peaks) =
            gpus::with_peak(set, || gpus::step_ms(case, &x, &centroids, set, reps))?;
        let same = m1.centroids == ms.centroids && m1.labels == ms.labels;
        println!(
            "{:<5} {:>10} {t1:>12.3} {ts:>12.3} {:>8.2}× {same:>10}  {} / {}",
            case.name,
            case.n,
            t1 / ts,
            gib(&peak1),
            gib(&peaks)
        );
        println!("      fitted on {}", ms.device);
        if let Some(f) = json.as_deref_mut() {
            let row = serde_json::json!({"case": case.name, "gpus": set.to_string(),
                "step_ms_one": t1, "step_ms_set": ts, "identical": same,
                "peak_bytes_one": peak1, "peak_bytes_set": peaks});
            writeln!(f, "{row}")?;
        }
    }
    for case in KNN_CASES.iter().filter(|c| wanted(c.name)) {
        let ((t1, i1, _), peak1) = gpus::with_peak(one, || gpus::knn_ms(case, one, reps, None))?;
        let ordinals = gpus.ordinals()?;
        // The layout `Auto` takes, then the other one.
        let mut layouts = vec![KnnLayout::Auto];
        while let Some(&layout) = layouts.last() {
            let set = Device::Gpus(gpus.with_knn_layout(layout));
            let ((ts, is, took), peaks) =
                gpus::with_peak(set, || gpus::knn_ms(case, set, reps, None))?;
            let took = took.expect("a GPU set's index has a layout");
            let name = match layout {
                KnnLayout::Auto => format!("{} (auto: {took})", case.name),
                _ => format!("{} ({took})", case.name),
            };
            println!(
                "{name:<5} {:>10} {t1:>12.3} {ts:>12.3} {:>8.2}× {:>10}  {} / {}",
                case.n,
                t1 / ts,
                i1 == is,
                gib(&peak1),
                gib(&peaks)
            );
            // Each GPU's peak against its bound: its share of one GPU's, plus the fixed
            // overhead of docs/SCALE.md.
            let overhead = kmeans_knn::bench::knn_set_overhead_bytes(
                case.n,
                case.d,
                case.m,
                case.k,
                ordinals.len(),
                took,
            );
            let bounds: Vec<Option<usize>> = (0..ordinals.len())
                .map(|i| {
                    let rows = (i + 1) * case.n / ordinals.len() - i * case.n / ordinals.len();
                    peak1[0].map(|p| p * rows / case.n + overhead)
                })
                .collect();
            let within = (peaks.iter().zip(&bounds))
                .all(|(p, b)| matches!((p, b), (Some(p), Some(b)) if p <= b));
            println!(
                "      peak bound (share of one GPU's + {:.2} GiB overhead): {} GiB; within: {within}",
                overhead as f64 / (1u64 << 30) as f64,
                gib(&bounds)
            );
            // Each GPU's part searched alone (for parts: the sharded search if they ran side
            // by side without slowing each other), and every GPU's work at once without the set.
            let mut parts = Vec::new();
            if took == KnnLayout::Shard {
                parts = (ordinals.iter().enumerate())
                    .map(|(i, &o)| {
                        let rows = i * case.n / ordinals.len()..(i + 1) * case.n / ordinals.len();
                        Ok(gpus::knn_ms(case, Device::Cuda(o), reps, Some(rows))?.0)
                    })
                    .collect::<kmeans_knn::Result<Vec<f64>>>()?;
                let alone = parts.iter().map(|ms| format!("{ms:.3}"));
                println!(
                    "      each GPU's part alone: {} ms",
                    alone.collect::<Vec<_>>().join(", ")
                );
            }
            let at_once = gpus::knn_side_by_side_ms(case, &ordinals, took, reps)?;
            println!(
                "      every GPU's work at once, indexes of their own, without the set: \
                 {at_once:.3} ms"
            );
            let side_by_side = Some(at_once);
            if let Some(f) = json.as_deref_mut() {
                let row = serde_json::json!({"case": case.name, "gpus": set.to_string(),
                    "layout": took.to_string(), "auto": layout == KnnLayout::Auto,
                    "search_ms_one": t1, "search_ms_set": ts, "identical": i1 == is,
                    "part_alone_ms": parts, "at_once_ms": side_by_side,
                    "peak_bytes_one": peak1, "peak_bytes_set": peaks,
                    "peak_bound_bytes": bounds});
                writeln!(f, "{row}")?;
            }
            layouts.push(match (layout, took) {
                (KnnLayout::Auto, KnnLayout::Shard) => KnnLayout::Replicate,
                (KnnLayout::Auto, _) => KnnLayout::Shard,
                _ => break,
            });
        }
    }
    Ok(())
}

/// Peak bytes per GPU in GiB, comma-separated (`-` where unknown).
fn gib(peaks: &[Option<usize>]) -> String {
    let each = peaks.iter().map(|p| match p {
        Some(b) => format!("{:.2}", *b as f64 / (1u64 << 30) as f64),
        None => "-".into(),
    });
    each.collect::<Vec<_>>().join(",")
}

/// The `--whole` rows: seeding alone and whole fits (see the module documentation).
fn whole_job_rows(
    cases: &str,
    reps: usize,
    device: Device,
    mut json: Option<&mut std::fs::File>,
) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "{:<4} {:<32} {:>10} {:>10} {:>7} {:>6} {:>14}",
        "case", "whole job", "init ms", "fit ms", "init %", "iters", "inertia"
    );
    for case in CASES
        .iter()
        .filter(|c| cases.split(',').any(|n| n == c.name))
    {
        let (data, _) = case.data();
        let x = MatrixView::new(&data, case.n, case.d)?;
        let reps = if case.n * case.k >= 200_000 * 1024 {
            reps.min(3)
        } else {
            reps.min(10)
        };
        let mut jobs = vec![];
        if matches!(case.name, "D" | "E") {
            for (name, init) in [
                ("init kmeans++ alone", Init::KMeansPlusPlus),
                ("init kmeans|| alone", Init::KMeansParallel),
            ] {
                let p = KMeans::params(case.k).init(init).device(device).max_iter(1);
                let job = whole::measure(name, &x, &p, reps)?;
                jobs.push(whole::WholeJob {
                    fit_ms: f64::NAN,
                    inertia: f64::NAN,
                    n_iter: 0,
                    ..job
                });
            }
        }
        for (name, params) in whole::runs(case, device) {
            jobs.push(whole::measure(&name, &x, &params, reps)?);
        }
        for job in jobs {
            let share = 100.0 * job.init_ms / job.fit_ms;
            println!(
                "{:<4} {:<32} {:>10.1} {:>10.1} {:>7.1} {:>6} {:>14.6e}",
                case.name, job.what, job.init_ms, job.fit_ms, share, job.n_iter, job.inertia
            );
            if let Some(f) = json.as_mut() {
                let line = serde_json::json!({
                    "case": case.name, "whole_job": job.what, "n": case.n, "d": case.d,
                    "k": case.k, "init_ms": job.init_ms,
                    "fit_ms": if job.fit_ms.is_nan() { None } else { Some(job.fit_ms) },
                    "n_iter": job.n_iter, "inertia": job.inertia, "device": device.describe()?,
                    "timing": "wall clock: initial_centroids (seeding, with data upload) and fit",
                });
                writeln!(f, "{line}")?;
            }
        }
    }
    Ok(())
}
