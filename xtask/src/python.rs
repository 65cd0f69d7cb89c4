//! The Python package (`python/`): a virtual environment under target/, the wheel, pytest.
//!
//! The environment holds what `python/requirements-dev.txt` pins (maturin, ziglang and the test
//! dependencies, from PyPI). It is made once and reused while that file and the interpreter are
//! unchanged: a stamp file inside it records both.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const REQUIREMENTS: &str = "python/requirements-dev.txt";

/// The workspace's target folder (`CARGO_TARGET_DIR` when set).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| crate::root().join("target"), PathBuf::from)
}

/// Builds the wheel and the command-line tool, installs the wheel into the environment and runs
/// pytest over `python/tests`; returns pytest's status and output lines.
pub fn test() -> Result<(std::process::ExitStatus, Vec<String>)> {
    let start = Instant::now();
    let venv = venv()?;
    let wheel = build_wheel(&venv)?;
    run(Command::new(python(&venv))
        .args(["-m", "pip", "install", "-q", "--no-deps"])
        .args(["--force-reinstall".as_ref(), wheel.as_os_str()]))?;
    crate::cargo(&["build", "-p", "kmeans-knn", "--bin", "kmeans-knn"])?;
    eprintln!(
        "xtask: python environment and wheel ready in {:.0} s",
        start.elapsed().as_secs_f64()
    );
    let cli = target_dir().join("debug").join("kmeans-knn");
    crate::summary::run_teed(
        Command::new(python(&venv))
            .args([
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-rfEsxX",
                "python/tests",
            ])
            .env("KMEANS_KNN_CLI", cli)
            .current_dir(crate::root()),
    )
}

/// The virtual environment with the pinned requirements, made or reused.
pub fn venv() -> Result<PathBuf> {
    let venv = target_dir().join("py-venv");
    let interpreter = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let requirements = std::fs::read_to_string(crate::root().join(REQUIREMENTS))
        .with_context(|| format!("reading {REQUIREMENTS}"))?;
    let version = Command::new(&interpreter)
        .arg("--version")
        .output()
        .with_context(|| {
            format!("running {interpreter} (set PYTHON to a Python 3.10+ interpreter)")
        })?;
    let stamp = format!("{}{requirements}", String::from_utf8_lossy(&version.stdout));
    let stamp_path = venv.join("kmeans-knn-requirements.stamp");
    if python(&venv).exists() && std::fs::read_to_string(&stamp_path).ok() == Some(stamp.clone()) {
        eprintln!("xtask: reusing {}", venv.display());
        return Ok(venv);
    }
    eprintln!(
        "xtask: making {} ({REQUIREMENTS} from PyPI)",
        venv.display()
    );
    if venv.exists() {
        std::fs::remove_dir_all(&venv)?;
    }
    run(Command::new(&interpreter).args(["-m", "venv"]).arg(&venv))?;
    run(Command::new(python(&venv))
        .args([
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "-r",
        ])
        .arg(crate::root().join(REQUIREMENTS)))?;
    std::fs::write(&stamp_path, stamp)?;
    Ok(venv)
}

/// Builds the abi3 wheel (manylinux2014, linked by zig) into target/py-wheel; returns its path.
pub fn build_wheel(venv: &Path) -> Result<PathBuf> {
    let out = target_dir().join("py-wheel");
    if out.exists() {
        std::fs::remove_dir_all(&out)?;
    }
    // maturin finds zig through the environment's `python -m ziglang`, so its bin/ comes first.
    let bin = venv.join("bin");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path =
        std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(&path)))?;
    run(Command::new(bin.join("maturin"))
        .args([
            "build",
            "--release",
            "--zig",
            "--compatibility",
            "manylinux2014",
            "--quiet",
        ])
        .args(["-m", "python/Cargo.toml", "-i"])
        .arg(python(venv))
        .arg("--out")
        .arg(&out)
        .env("PATH", path)
        .current_dir(crate::root()))?;
    let mut wheels: Vec<PathBuf> = std::fs::read_dir(&out)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    match wheels.pop() {
        Some(wheel) if wheels.is_empty() => Ok(wheel),
        _ => bail!("expected one wheel in {}", out.display()),
    }
}

fn python(venv: &Path) -> PathBuf {
    venv.join("bin").join("python")
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("running {:?}", cmd.get_program()))?;
    if !status.success() {
        bail!("{cmd:?} failed ({status})");
    }
    Ok(())
}
