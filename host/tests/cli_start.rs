//! The command line's first moments: what it prints, the GPUs it lets the driver start, and the
//! start cost it keeps in the user's cache. The GPU tests skip visibly without a GPU (and fail
//! under `KMEANS_KNN_REQUIRE_GPU=1`).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output};

/// The binary under test: `KMEANS_KNN_BIN` (the GPU bundle's), else the one cargo built.
fn bin() -> String {
    std::env::var("KMEANS_KNN_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_kmeans-knn").into())
}

fn run(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .current_dir(dir)
        .env("RAYON_NUM_THREADS", "2")
        .env("KMEANS_KNN_CACHE_DIR", dir.join("cache"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("the binary runs")
}

#[track_caller]
fn ok(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let out = run(dir, args, env);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    assert!(
        out.status.success(),
        "{args:?}: {}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    (text(&out.stdout), text(&out.stderr))
}

/// 300 points in 3 dimensions, as CSV.
fn points(dir: &Path) -> String {
    let path = dir.join("points.csv");
    let mut f = std::fs::File::create(&path).unwrap();
    for i in 0..300u32 {
        let v = |m: u32| ((i * m) % 97) as f32 / 9.0;
        writeln!(f, "{},{},{}", v(7), v(13), v(29)).unwrap();
    }
    path.display().to_string()
}

fn info(dir: &Path, device: &str, env: &[(&str, &str)]) -> serde_json::Value {
    let (stdout, _) = ok(dir, &["info", "--json", "--device", device], env);
    serde_json::from_str(&stdout).expect("info --json prints one JSON object")
}

/// The machine's GPU count, or `None` after a visible SKIPPED line (a failure when the GPU is
/// required).
fn gpus_or_skip(dir: &Path, test: &str) -> Option<u64> {
    let gpus = info(dir, "cpu", &[])["gpus"]["host"]
        .as_u64()
        .filter(|&n| n > 0);
    if gpus.is_none() {
        assert!(
            std::env::var("KMEANS_KNN_REQUIRE_GPU").is_err(),
            "{test}: a GPU is required but the machine has none"
        );
        let _ = writeln!(std::io::stderr(), "SKIPPED (no GPU): {test}");
    }
    gpus
}

#[test]
fn flags_in_the_wrong_case_are_pointed_to_their_lower_case_name() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), &["kmeans", "x.csv", "--K", "3"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("write '--k', not '--K'"), "{err}");
    // A flag that is wrong in any case gets clap's message alone.
    let out = run(dir.path(), &["kmeans", "x.csv", "--zzz", "3"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("lower case"));
}

#[test]
fn a_fit_without_output_files_prints_its_labels_as_knn_prints_its_neighbours() {
    let dir = tempfile::tempdir().unwrap();
    let input = points(dir.path());
    let (stdout, stderr) = ok(
        dir.path(),
        &["kmeans", &input, "--k", "4", "--device", "cpu"],
        &[],
    );
    let labels: Vec<u32> = stdout.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(labels.len(), 300);
    assert!(labels.iter().all(|&l| l < 4));
    assert!(
        stderr.contains("k-means:") && stderr.contains("labels on stdout"),
        "{stderr}"
    );
    // The labels are the fit's: the same as --labels-out writes.
    let (stdout, _) = ok(
        dir.path(),
        &[
            "kmeans",
            &input,
            "--k",
            "4",
            "--device",
            "cpu",
            "--labels-out",
            "l.csv",
        ],
        &[],
    );
    assert!(stdout.contains("wrote"), "{stdout}");
    let written = std::fs::read_to_string(dir.path().join("l.csv")).unwrap();
    let written: Vec<u32> = written.lines().filter_map(|l| l.parse().ok()).collect();
    assert_eq!(written, labels);
    // mini-batch k-means follows the same rule.
    let (stdout, _) = ok(
        dir.path(),
        &["minibatch", &input, "--k", "4", "--device", "cpu"],
        &[],
    );
    assert_eq!(stdout.lines().count(), 300);
}

#[test]
fn info_says_which_gpus_the_driver_started() {
    let dir = tempfile::tempdir().unwrap();
    let json = info(dir.path(), "cpu", &[]);
    let gpus = &json["gpus"];
    assert!(gpus["started"].is_u64(), "{json}");
    let Some(host) = gpus_or_skip(dir.path(), "info_says_which_gpus_the_driver_started") else {
        assert_eq!(gpus["started"], 0);
        return;
    };
    for ordinal in 0..host {
        let json = info(dir.path(), &format!("gpu:{ordinal}"), &[]);
        let gpus = &json["gpus"];
        assert_eq!(gpus["started"], 1, "asking for one GPU starts one: {json}");
        if host > 1 {
            assert_eq!(gpus["cuda_visible_devices"], ordinal.to_string());
            assert_eq!(gpus["set_for_device"], format!("gpu:{ordinal}"));
        }
        assert!(
            json["backend"]
                .as_str()
                .unwrap()
                .contains("the driver started 1")
        );
    }
    // A list the user set is narrowed by its own entries.
    let json = info(
        dir.path(),
        "gpu:0",
        &[("CUDA_VISIBLE_DEVICES", &(host - 1).to_string())],
    );
    assert_eq!(json["gpus"]["started"], 1);
    assert_eq!(json["gpus"]["cuda_visible_devices"], (host - 1).to_string());
}

#[test]
fn the_same_fit_whichever_gpus_are_visible() {
    let dir = tempfile::tempdir().unwrap();
    let Some(host) = gpus_or_skip(dir.path(), "the_same_fit_whichever_gpus_are_visible") else {
        return;
    };
    let input = points(dir.path());
    let fit = |name: &str, device: &str, env: &[(&str, &str)]| {
        let labels = format!("{name}-labels.npy");
        let centroids = format!("{name}-centroids.npy");
        let args = [
            "kmeans",
            &input,
            "--k",
            "7",
            "--device",
            device,
            "--labels-out",
            &labels,
        ];
        ok(
            dir.path(),
            &[&args[..], &["--centroids-out", &centroids]].concat(),
            env,
        );
        let read = |f: &str| std::fs::read(dir.path().join(f)).unwrap();
        (read(&labels), read(&centroids))
    };
    let cpu = fit("cpu", "cpu", &[]);
    for ordinal in 0..host {
        let named = fit(&format!("gpu{ordinal}"), &format!("gpu:{ordinal}"), &[]);
        assert!(named == cpu, "gpu:{ordinal} differs from the CPU");
        let env = [("CUDA_VISIBLE_DEVICES", ordinal.to_string())];
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let shown = fit(&format!("shown{ordinal}"), "gpu", &env);
        assert!(
            shown == cpu,
            "gpu with CUDA_VISIBLE_DEVICES={ordinal} differs from the CPU"
        );
    }
    let all = fit("all", "gpu:all", &[]);
    assert!(all == cpu, "gpu:all differs from the CPU");
    // Each process timed its GPU start and kept it for `auto` in the cache folder.
    let kept = std::fs::read_dir(dir.path().join("cache"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|name| name.starts_with("gpu-start-") && name.ends_with("-1-gpus"))
        .expect("a gpu-start entry for one GPU");
    let text = std::fs::read_to_string(dir.path().join("cache").join(kept)).unwrap();
    let seconds: Vec<f64> = text
        .split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect();
    assert!(!seconds.is_empty() && seconds.len() <= 5, "{text}");
    assert!(seconds.iter().all(|&s| s > 0.0 && s < 60.0), "{text}");
}

/// The rows of `rows × cols` uniform values, as `.npy`.
fn uniform_npy(dir: &Path, rows: usize, cols: usize) -> String {
    let path = dir.join("uniform.npy");
    let header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    let pad = 64 - (10 + header.len() + 1) % 64;
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend(((header.len() + pad + 1) as u16).to_le_bytes());
    bytes.extend(header.bytes().chain(std::iter::repeat_n(b' ', pad)));
    bytes.push(b'\n');
    let mut state = 1u32;
    for _ in 0..rows * cols {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        bytes.extend(((state >> 8) as f32 / (1u32 << 24) as f32).to_le_bytes());
    }
    std::fs::write(&path, bytes).unwrap();
    path.display().to_string()
}

#[test]
fn a_cpu_fit_long_enough_to_time_keeps_its_rate_for_auto() {
    let dir = tempfile::tempdir().unwrap();
    let rows = uniform_npy(dir.path(), 20_000, 16);
    let args = [
        "kmeans", &rows, "--k", "64", "--device", "cpu", "--json", "--quiet",
    ];
    let (out, _) = ok(dir.path(), &args, &[]);
    let seconds = serde_json::from_str::<serde_json::Value>(&out).unwrap()["seconds"]
        .as_f64()
        .expect("the fit's seconds");
    let kept = std::fs::read_dir(dir.path().join("cache"))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .find(|name| name.starts_with("cpu-rate-") && name.ends_with("-2-threads"))
        })
        .ok()
        .flatten();
    // Fits under 0.05 s are not timed (their time is mostly the threads' wake-up); the job's
    // seconds also count reading the file, so a job near the bound may go either way.
    if seconds < 0.05 {
        assert!(kept.is_none(), "a {seconds} s fit kept a rate");
        return;
    }
    if seconds < 0.1 && kept.is_none() {
        return;
    }
    let kept = kept.expect("a cpu-rate entry for two threads");
    let text = std::fs::read_to_string(dir.path().join("cache").join(kept)).unwrap();
    let rates: Vec<f64> = text
        .split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(rates.len(), 1, "{text}");
    assert!(rates[0] > 1e6 && rates[0] < 1e13, "{text}");
}
