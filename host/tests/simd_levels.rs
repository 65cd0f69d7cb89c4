//! The CPU kernels at every SIMD level this CPU has (forced lower with `KMEANS_KNN_CPU_SIMD`)
//! give the same files, byte for byte: a k-means fit (k-means++, then Lloyd, squared L2 and L1)
//! and a kNN search. A level the CPU lacks, or an unknown name, is a clear error.
//!
//! `KMEANS_KNN_BIN` points the tests at another build of the binary (as in `driver.rs`).

use kmeans_knn::{CPU_SIMD_VAR, SimdLevel};
use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> PathBuf {
    std::env::var_os("KMEANS_KNN_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_kmeans-knn")),
        PathBuf::from,
    )
}

fn run(dir: &Path, level: &str, args: &[&str]) -> std::process::Output {
    Command::new(bin())
        .args(args)
        .current_dir(dir)
        .env("RAYON_NUM_THREADS", "2")
        .env(CPU_SIMD_VAR, level)
        .output()
        .expect("the binary runs")
}

/// Rows of pseudo-random values with many exact ties (coarse steps), as CSV.
fn points(n: usize, d: usize, seed: u64) -> String {
    let mut state = seed;
    let mut out = String::new();
    for _ in 0..n {
        let row: Vec<String> = (0..d)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                format!("{}", ((state >> 40) % 64) as f32 / 8.0)
            })
            .collect();
        out += &row.join(",");
        out.push('\n');
    }
    out
}

/// Every output file of the jobs, run at `level`.
fn outputs(dir: &Path, level: &str) -> Vec<Vec<u8>> {
    let mut files = vec![];
    for (metric, tag) in [("sqeuclidean", "l2"), ("manhattan", "l1")] {
        let (labels, centroids) = (format!("{tag}-labels.csv"), format!("{tag}-c.npy"));
        let args = [
            "kmeans",
            "train.csv",
            "--k",
            "37",
            "--seed",
            "5",
            "--device",
            "cpu",
            "--metric",
            metric,
            "--labels-out",
            &labels,
            "--centroids-out",
            &centroids,
        ];
        let out = run(dir, level, &args);
        assert!(out.status.success(), "{level} {tag}: {out:?}");
        files.push(std::fs::read(dir.join(&labels)).unwrap());
        files.push(std::fs::read(dir.join(&centroids)).unwrap());
    }
    let args = [
        "knn",
        "--train",
        "train.csv",
        "--query",
        "query.csv",
        "--k",
        "11",
        "--device",
        "cpu",
        "--indices-out",
        "i.npy",
        "--distances-out",
        "dist.npy",
    ];
    let out = run(dir, level, &args);
    assert!(out.status.success(), "{level} knn: {out:?}");
    files.push(std::fs::read(dir.join("i.npy")).unwrap());
    files.push(std::fs::read(dir.join("dist.npy")).unwrap());
    files
}

#[test]
fn every_simd_level_gives_the_same_files() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("train.csv"), points(1_999, 21, 1)).unwrap();
    std::fs::write(t.path().join("query.csv"), points(133, 21, 2)).unwrap();
    let portable = outputs(t.path(), "portable");
    let detected = SimdLevel::detected();
    for level in [SimdLevel::Avx2, SimdLevel::Avx512] {
        if level <= detected {
            assert!(
                outputs(t.path(), level.name()) == portable,
                "{} differs from portable",
                level.name()
            );
        } else {
            eprintln!("skipped: this CPU has no {}", level.name());
        }
    }
}

#[test]
fn an_unknown_or_unavailable_level_is_an_error() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("train.csv"), points(10, 2, 1)).unwrap();
    let args = ["kmeans", "train.csv", "--k", "2", "--device", "cpu"];
    let out = run(t.path(), "sse9", &args);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(CPU_SIMD_VAR) && err.contains("'sse9' is not one of"),
        "{err}"
    );
    if SimdLevel::detected() < SimdLevel::Avx512 {
        let out = run(t.path(), "avx512", &args);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
    }
}
