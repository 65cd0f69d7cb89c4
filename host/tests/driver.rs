//! The binary on machines whose CUDA driver cannot run it: no libcuda, a driver older than CUDA
//! 12.0, a driver lacking an entry point, no visible device, and GPU faults in the middle of a
//! run. Each ends in a typed error with exit code 1 and no output file, never a panic, and
//! `--device auto` falls back to the CPU.
//!
//! Fake drivers are small C libraries built here with `cc` and found first through
//! `LD_LIBRARY_PATH`. `KMEANS_KNN_BIN` points the tests at another build of the binary (the GPU
//! bundle's fault-injection build).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn bin() -> PathBuf {
    std::env::var_os("KMEANS_KNN_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_kmeans-knn")),
        PathBuf::from,
    )
}

fn run(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let out = Command::new(bin())
        .args(args)
        .current_dir(dir)
        .envs(env.iter().copied())
        .output()
        .expect("the binary runs");
    let r = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        !r.stderr.contains("panicked"),
        "{args:?} panicked: {}",
        r.stderr
    );
    r
}

fn listing(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// A folder with `points.csv`: 60 points in three groups.
fn data_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut csv = String::new();
    for i in 0..60 {
        let c = (i % 3) as f32 * 10.0;
        csv += &format!("{},{}\n", c + (i as f32) * 0.01, c - (i as f32) * 0.02);
    }
    std::fs::write(dir.path().join("points.csv"), csv).unwrap();
    dir
}

/// Builds `libcuda.so` (and `.so.1`) in a new folder: every entry point the library calls except
/// `omit`, returning CUDA_ERROR_UNKNOWN, with `cuInit` succeeding and `cuDriverGetVersion`
/// reporting `version`.
fn fake_driver(version: i32, omit: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut c = String::new();
    for &(name, _) in kmeans_knn::DRIVER_ENTRY_POINTS {
        if omit.contains(&name) {
            continue;
        }
        c += &match name {
            "cuInit" => "int cuInit(unsigned f) { (void)f; return 0; }\n".to_string(),
            "cuDriverGetVersion" => {
                format!("int cuDriverGetVersion(int *v) {{ *v = {version}; return 0; }}\n")
            }
            _ => format!("int {name}(void) {{ return 999; }}\n"),
        };
    }
    let src = dir.path().join("fake_cuda.c");
    std::fs::write(&src, c).unwrap();
    let lib = dir.path().join("libcuda.so");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .expect("cc (a C compiler) builds the fake driver");
    assert!(status.success(), "cc failed");
    std::fs::copy(&lib, dir.path().join("libcuda.so.1")).unwrap();
    dir
}

fn library_path(first: &Path) -> String {
    let rest = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    format!("{}:{rest}", first.display())
}

/// `info` reports the driver problem, `--device gpu` fails with it (exit 1, no output file),
/// `--device auto` runs on the CPU.
fn assert_unusable_driver(env: &[(&str, &str)], needles: &[&str]) {
    let dir = data_dir();
    let info = run(dir.path(), &["info"], env);
    assert_eq!(info.code, 0, "info: {}", info.stderr);
    for n in needles {
        assert!(info.stdout.contains(n), "info lacks {n:?}: {}", info.stdout);
    }
    let before = listing(dir.path());
    let args = ["kmeans", "points.csv", "--k", "3", "--labels-out", "l.csv"];
    let gpu = run(dir.path(), &[&args[..], &["--device", "gpu"]].concat(), env);
    assert_eq!(gpu.code, 1, "--device gpu: {}", gpu.stderr);
    for n in needles {
        assert!(gpu.stderr.contains(n), "stderr lacks {n:?}: {}", gpu.stderr);
    }
    assert_eq!(listing(dir.path()), before, "a failed run left files");
    let auto = run(
        dir.path(),
        &[&args[..], &["--device", "auto"]].concat(),
        env,
    );
    assert_eq!(auto.code, 0, "--device auto: {}", auto.stderr);
    assert!(dir.path().join("l.csv").exists());
}

#[test]
fn a_driver_older_than_cuda_12_is_refused_by_name() {
    let fake = fake_driver(11080, &[]);
    let path = library_path(fake.path());
    assert_unusable_driver(
        &[("LD_LIBRARY_PATH", &path)],
        &["unsupported CUDA driver", "CUDA 11.8", "CUDA 12.0", "R525"],
    );
}

#[test]
fn a_driver_lacking_an_entry_point_names_it() {
    let fake = fake_driver(12020, &["cuMemAllocAsync", "cuMemPoolTrimTo"]);
    let path = library_path(fake.path());
    assert_unusable_driver(
        &[("LD_LIBRARY_PATH", &path)],
        &["lacks cuMemAllocAsync, cuMemPoolTrimTo", "R525"],
    );
}

#[test]
fn a_driver_without_a_version_query_is_refused() {
    let fake = fake_driver(12020, &["cuDriverGetVersion"]);
    let path = library_path(fake.path());
    assert_unusable_driver(&[("LD_LIBRARY_PATH", &path)], &["lacks cuDriverGetVersion"]);
}

#[test]
fn no_visible_device_is_an_error_and_auto_uses_the_cpu() {
    let dir = data_dir();
    let env = [("CUDA_VISIBLE_DEVICES", "")];
    let info = run(dir.path(), &["info", "--json"], &env);
    assert_eq!(info.code, 0, "{}", info.stderr);
    assert!(info.stdout.contains("\"backend\""), "{}", info.stdout);
    let gpu = run(
        dir.path(),
        &["kmeans", "points.csv", "--k", "3", "--device", "gpu"],
        &env,
    );
    assert_eq!(gpu.code, 1, "{}", gpu.stderr);
    // Without libcuda the driver message comes first; with it, the empty device list.
    assert!(
        gpu.stderr
            .contains("sees no device (CUDA_VISIBLE_DEVICES is '')")
            || gpu.stderr.contains("libcuda.so) is not installed"),
        "{}",
        gpu.stderr
    );
}

#[test]
fn an_invalid_device_ordinal_is_an_error() {
    let dir = data_dir();
    let r = run(
        dir.path(),
        &["kmeans", "points.csv", "--k", "3", "--device", "gpu:99"],
        &[],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("GPU 99 was asked for")
            || r.stderr.contains("libcuda.so) is not installed"),
        "{}",
        r.stderr
    );
}

#[cfg(feature = "fault-injection")]
mod injected {
    use super::*;

    #[test]
    fn missing_libcuda_says_what_to_install() {
        assert_unusable_driver(
            &[("KMEANS_KNN_FAULTS", "no-libcuda")],
            &["libcuda.so) is not installed", "R525"],
        );
    }

    /// Whether this process sees a GPU; without one the GPU-fault tests skip visibly (and fail
    /// under `KMEANS_KNN_REQUIRE_GPU=1`).
    fn has_gpu(test: &str) -> bool {
        match kmeans_knn::Device::Cuda(0).resolve() {
            Ok(_) => true,
            Err(e) if std::env::var("KMEANS_KNN_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
                panic!("{test}: KMEANS_KNN_REQUIRE_GPU=1 but {e}")
            }
            Err(e) => {
                // Past the harness's capture, as the other GPU tests do.
                use std::io::Write;
                let _ = writeln!(std::io::stderr(), "SKIPPED (no GPU): {test}: {e}");
                false
            }
        }
    }

    /// A GPU fault in the middle of a fit: exit 1 with the fault's message, no output file; the
    /// same command then succeeds.
    fn assert_fault_leaves_nothing(fault: &str, needle: &str) {
        let dir = data_dir();
        let before = listing(dir.path());
        let args = [
            "kmeans",
            "points.csv",
            "--k",
            "3",
            "--device",
            "gpu",
            "--labels-out",
            "l.csv",
            "--save-model",
            "m.json",
        ];
        let r = run(dir.path(), &args, &[("KMEANS_KNN_FAULTS", fault)]);
        assert_eq!(r.code, 1, "{fault}: {}", r.stderr);
        assert!(r.stderr.contains(needle), "{fault}: {}", r.stderr);
        assert_eq!(listing(dir.path()), before, "{fault} left files");
        let again = run(dir.path(), &args, &[]);
        assert_eq!(again.code, 0, "after {fault}: {}", again.stderr);
    }

    #[test]
    fn gpu_fault_out_of_memory_mid_fit_leaves_no_file() {
        if has_gpu("gpu_fault_out_of_memory_mid_fit_leaves_no_file") {
            assert_fault_leaves_nothing("alloc:4", "out of GPU memory");
        }
    }

    #[test]
    fn gpu_fault_launch_failure_mid_fit_leaves_no_file() {
        if has_gpu("gpu_fault_launch_failure_mid_fit_leaves_no_file") {
            assert_fault_leaves_nothing("launch:3", "launching kernel");
        }
    }
}
