//! NCCL is found and checked at run time: `info` names the file loaded and its version, and a
//! missing or incomplete library is an error naming what was tried, never a crash.
//!
//! `KMEANS_KNN_BIN` points the tests at another build of the binary (as in `driver.rs`).
//! Where no NCCL is installed the loading test is skipped visibly, unless
//! `KMEANS_KNN_REQUIRE_NCCL=1` (the GPU bundle sets it: its machines have NCCL).

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

fn bin() -> PathBuf {
    std::env::var_os("KMEANS_KNN_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_kmeans-knn")),
        PathBuf::from,
    )
}

/// `info --json`'s `nccl` object, run with `KMEANS_KNN_NCCL` set to `var` (or unset).
fn nccl_info(var: Option<&str>) -> serde_json::Value {
    let mut cmd = Command::new(bin());
    cmd.args(["info", "--json", "--device", "cpu"]);
    match var {
        Some(v) => cmd.env("KMEANS_KNN_NCCL", v),
        None => cmd.env_remove("KMEANS_KNN_NCCL"),
    };
    let out = cmd.output().expect("the binary runs");
    assert!(out.status.success(), "{out:?}");
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    info["nccl"].clone()
}

#[test]
fn a_named_library_that_is_missing_is_an_error_naming_it() {
    let nccl = nccl_info(Some("/nonexistent/libnccl.so.2"));
    let err = nccl["error"].as_str().expect("an error");
    assert!(err.contains("tried /nonexistent/libnccl.so.2"), "{err}");
    assert!(err.contains("pip install nvidia-nccl-cu12"), "{err}");
}

#[test]
fn a_library_that_is_not_nccl_is_an_error_naming_the_missing_entry_points() {
    // libm is on every Linux machine and has none of NCCL's symbols.
    let nccl = nccl_info(Some("libm.so.6"));
    let err = nccl["error"].as_str().expect("an error");
    assert!(
        err.contains("libm.so.6 lacks ncclGetVersion") && err.contains("ncclAllReduce"),
        "{err}"
    );
}

#[test]
fn nccl_loads_where_installed() {
    let nccl = nccl_info(None);
    if let Some(err) = nccl["error"].as_str() {
        if std::env::var("KMEANS_KNN_REQUIRE_NCCL").is_ok_and(|v| v == "1") {
            panic!("KMEANS_KNN_REQUIRE_NCCL=1 but {err}");
        }
        let _ = writeln!(std::io::stderr(), "SKIPPED (no NCCL): {err}");
        return;
    }
    let version = nccl["version"].as_str().unwrap();
    let parts: Vec<u32> = version.split('.').map(|p| p.parse().unwrap()).collect();
    assert!(parts[0] > 2 || (parts[0] == 2 && parts[1] >= 18), "{nccl}");
    assert!(
        nccl["path"].as_str().unwrap().contains("libnccl.so"),
        "{nccl}"
    );
}
