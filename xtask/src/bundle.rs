//! `cargo xtask gpu-bundle`: one folder to carry to the GPU machine and run there.
//!
//! gpu-bundle/
//!   run.sh              runs every test with KMEANS_KNN_REQUIRE_GPU=1, compute-sanitizer over the
//!                       GPU tests, then the benchmark; exits non-zero on any failure
//!   tests/NAME          release test executables (the PTX is embedded in them)
//!   bin/NAME            the command-line tool and the GPU benchmark; kmeans-knn-faults is the tool
//!                       with test fault injection, for the driver tests
//!   kernels.ptx         the PTX they embed (sm_70, and kernels_sm80.ptx for compute capability
//!                       8.0+) and the cubins compiled from it (kernels_sm*.cubin), for
//!                       inspection (ptxas -v, cuobjdump)
//!   torch_baseline.py   the PyTorch version of the benchmark's cases, for the speed-up
//!   seed_jobs.sh        the seeds' jobs through the CLI, GPU against CPU
//!                       (`bash seed_jobs.sh bin/kmeans-knn`)
//!   whole_scale.sh      whole jobs past one GPU (`bash whole_scale.sh bin/kmeans-knn`)
//!   python/             the kmeans_knn wheel, its pytest suite (tests/), bench.py,
//!                       minibatch.py, dask_bench.py, first_call.py and timeline.py, and wheels/: dask and distributed with their
//!                       dependencies for CPython KMEANS_KNN_BUNDLE_PYTHON (default 3.12) on
//!                       x86-64 Linux (pure Python but for four small compiled ones); run.sh
//!                       installs them offline (pip --no-index) into a temporary folder;
//!                       KMEANS_KNN_BUNDLE_DASK=0 leaves the dask wheels out (run.sh then skips
//!                       the Dask steps, as it does on fewer than two GPUs)
//!
//! Carry it compressed with `XZ_OPT="-9 -T1" tar cJf gpu-bundle.tar.xz gpu-bundle` (about 11 MB
//! without the dask wheels; their size with them was not measured after the merge with main).

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const RUN_SH: &str = include_str!("run.sh");

pub fn write() -> Result<()> {
    crate::ptx::build()?;
    let root = crate::root();
    let out = root.join("gpu-bundle");
    if out.exists() {
        std::fs::remove_dir_all(&out)?;
    }
    std::fs::create_dir_all(out.join("tests"))?;
    std::fs::create_dir_all(out.join("bin"))?;

    for (name, kind, exe) in built_executables(&["test", "--release", "--workspace", "--no-run"])? {
        // The command-line tests run the binary at its build path, which does not travel (they
        // need no GPU). The binary built with the tests has fault injection (the tests crate
        // turns the feature on): the driver tests run it as `KMEANS_KNN_BIN`.
        match (kind.as_str(), name.as_str()) {
            ("bin", "kmeans-knn") => copy(&exe, &out.join("bin/kmeans-knn-faults"))?,
            ("bin" | "bin-test", _) | (_, "cli") => {}
            _ => copy(&exe, &out.join("tests").join(name))?,
        }
    }
    for (name, _, exe) in built_executables(&["build", "--release", "--workspace", "--bins"])? {
        if name != "xtask" {
            copy(&exe, &out.join("bin").join(name))?;
        }
    }
    for path in crate::ptx::committed_paths() {
        copy(&path, &out.join(path.file_name().unwrap()))?;
    }
    std::fs::write(out.join("run.sh"), RUN_SH)?;
    for script in ["torch_baseline.py", "seed_jobs.sh", "whole_scale.sh"] {
        copy(&root.join("bench").join(script), &out.join(script))?;
    }
    write_python(&root, &out.join("python"))?;
    eprintln!(
        "xtask: wrote {}; run it there with `bash gpu-bundle/run.sh`",
        out.display()
    );
    Ok(())
}

/// The wheel, the Python tests and benchmarks, and the wheels of dask and distributed.
fn write_python(root: &Path, out: &Path) -> Result<()> {
    let venv = crate::python::venv()?;
    let wheel = crate::python::build_wheel(&venv)?;
    if std::env::var("KMEANS_KNN_BUNDLE_DASK").as_deref() != Ok("0") {
        download_dask(&venv, &out.join("wheels"))?;
    }
    std::fs::create_dir_all(out.join("tests"))?;
    copy(&wheel, &out.join(wheel.file_name().expect("a wheel file")))?;
    copy_python_files(&root.join("python/tests"), &out.join("tests"))?;
    for bench in [
        "bench.py",
        "minibatch.py",
        "dask_bench.py",
        "first_call.py",
        "timeline.py",
    ] {
        copy(&root.join("python/bench").join(bench), &out.join(bench))?;
    }
    Ok(())
}

/// Copies the `.py` files of `from` and of its folders (the scikit-learn suite's plugin) to `to`.
fn copy_python_files(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let path = entry?.path();
        let name = path.file_name().unwrap();
        if path.is_dir() && name != "__pycache__" {
            copy_python_files(&path, &to.join(name))?;
        } else if path.extension().is_some_and(|e| e == "py") {
            copy(&path, &to.join(name))?;
        }
    }
    Ok(())
}

/// Downloads (from PyPI) the wheels of dask and distributed, at the versions
/// `python/requirements-dev.txt` pins, and of their dependencies, for the GPU machine's Python
/// (`KMEANS_KNN_BUNDLE_PYTHON`, default 3.12), which has no network.
fn download_dask(venv: &Path, out: &Path) -> Result<()> {
    let requirements = std::fs::read_to_string(crate::root().join("python/requirements-dev.txt"))?;
    let pins: Vec<&str> = requirements
        .lines()
        .filter(|l| l.starts_with("dask==") || l.starts_with("distributed=="))
        .collect();
    if pins.len() != 2 {
        bail!("python/requirements-dev.txt must pin dask and distributed");
    }
    let python = std::env::var("KMEANS_KNN_BUNDLE_PYTHON").unwrap_or_else(|_| "3.12".into());
    let abi = format!("cp{}", python.replace('.', ""));
    let status = Command::new(venv.join("bin/python"))
        .args(["-m", "pip", "download", "-q", "--disable-pip-version-check"])
        .args(["--only-binary", ":all:", "--implementation", "cp"])
        .args(["--python-version", &python, "--abi", &abi])
        .args(["--platform", "manylinux2014_x86_64"])
        .args(["--platform", "manylinux_2_17_x86_64"])
        .args(["--platform", "manylinux_2_28_x86_64"])
        .arg("-d")
        .arg(out)
        .args(&pins)
        .status()
        .context("running pip download")?;
    if !status.success() {
        bail!("pip download of {} failed ({status})", pins.join(" "));
    }
    Ok(())
}

/// Runs cargo with `--message-format=json`; returns (name, target kind, executable) triples.
fn built_executables(args: &[&str]) -> Result<Vec<(String, String, PathBuf)>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(args)
        .arg("--message-format=json")
        .current_dir(crate::root())
        .stderr(Stdio::inherit())
        .output()?;
    if !output.status.success() {
        bail!("cargo {} failed ({})", args.join(" "), output.status);
    }
    let mut found = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        if let Some(exe) = msg["executable"].as_str() {
            let name = msg["target"]["name"].as_str().unwrap_or("unnamed");
            let kind = msg["target"]["kind"][0].as_str().unwrap_or("");
            // A binary's own test harness shares the binary's name and kind; keep them apart.
            let kind = if kind == "bin" && msg["profile"]["test"] == true {
                "bin-test"
            } else {
                kind
            };
            // Unit-test executables of libraries share their crate's name; keep them apart.
            let name = if kind == "lib" {
                format!("{name}-unit")
            } else {
                name.to_string()
            };
            found.push((name, kind.to_string(), PathBuf::from(exe)));
        }
    }
    Ok(found)
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}
