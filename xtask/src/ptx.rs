//! Builds `kernels-gpu` for nvptx64 on the pinned nightly and keeps `host/ptx/kernels.ptx`.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The nightly that compiles the device crate (also in kernels-gpu/rust-toolchain.toml).
pub const NIGHTLY: &str = "nightly-2026-05-20";
/// Oldest architecture the PTX targets; the driver JIT-compiles it for every later GPU.
pub const TARGET_CPU: &str = "sm_70";

/// Where the host embeds the PTX from.
pub fn committed_path() -> PathBuf {
    crate::root().join("host/ptx/kernels.ptx")
}

/// `cargo xtask ptx`: regenerate the committed PTX.
pub fn build() -> Result<()> {
    let ptx = compile()?;
    let path = committed_path();
    std::fs::create_dir_all(path.parent().unwrap())?;
    std::fs::write(&path, ptx).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("xtask: wrote {}", path.display());
    Ok(())
}

/// `cargo xtask ptx --check`: fail when the committed PTX differs from a fresh build.
pub fn check() -> Result<()> {
    let fresh = compile()?;
    let path = committed_path();
    let committed = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {} (run `cargo xtask ptx`)", path.display()))?;
    if committed != fresh {
        bail!(
            "{} is stale: the kernels changed; run `cargo xtask ptx` and commit the result",
            path.display()
        );
    }
    eprintln!("xtask: {} is up to date", path.display());
    Ok(())
}

fn compile() -> Result<String> {
    ensure_nightly()?;
    let root = crate::root();
    let target_dir = root.join("target/ptx");
    let status = rustup_cargo()
        .current_dir(root.join("kernels-gpu"))
        .args([
            "rustc",
            "--quiet",
            "--profile",
            "ptx",
            "--target",
            "nvptx64-nvidia-cuda",
            "-Zbuild-std=core",
            "--crate-type",
            "staticlib",
            "--target-dir",
        ])
        .arg(&target_dir)
        .args([
            "--",
            "-C",
            &format!("target-cpu={TARGET_CPU}"),
            "--emit=asm",
            // Register tiles are arrays indexed in loops that must unroll fully to stay in
            // registers rather than local memory.
            "-C",
            "llvm-args=-unroll-threshold=4000",
        ])
        .status()
        .context("running cargo for the nvptx64 kernels")?;
    if !status.success() {
        bail!("building the kernels for nvptx64 failed ({status})");
    }
    let out = newest_asm(&target_dir.join("nvptx64-nvidia-cuda/ptx/deps"))?;
    std::fs::read_to_string(&out).with_context(|| format!("reading {}", out.display()))
}

/// `rustup run NIGHTLY cargo`, with the variables of the outer (stable) cargo removed so that
/// they cannot pick the toolchain or compiler.
fn rustup_cargo() -> Command {
    let mut cmd = Command::new("rustup");
    cmd.args(["run", NIGHTLY, "cargo"]);
    for var in [
        "RUSTUP_TOOLCHAIN",
        "RUSTC",
        "RUSTDOC",
        "CARGO",
        "RUSTC_WRAPPER",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// Installs the pinned nightly with rust-src when it is missing (RUSTUP_AUTO_INSTALL may be 0).
fn ensure_nightly() -> Result<()> {
    let list = Command::new("rustup")
        .args(["toolchain", "list"])
        .output()
        .context("running rustup (is it installed?)")?;
    let have = String::from_utf8_lossy(&list.stdout)
        .lines()
        .any(|l| l.starts_with(NIGHTLY));
    if have {
        return Ok(());
    }
    eprintln!("xtask: installing {NIGHTLY} with rust-src for the device kernels");
    let status = Command::new("rustup")
        .args(["toolchain", "install", NIGHTLY, "--profile", "minimal"])
        .args(["--component", "rust-src"])
        .status()?;
    if !status.success() {
        bail!("installing {NIGHTLY} failed ({status})");
    }
    Ok(())
}

/// The most recently written `kernels_gpu-*.s` (the emitted PTX).
fn newest_asm(dir: &Path) -> Result<PathBuf> {
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().unwrap().to_string_lossy();
        if name.starts_with("kernels_gpu-") && name.ends_with(".s") {
            let modified = path.metadata()?.modified()?;
            if best.as_ref().is_none_or(|(t, _)| modified > *t) {
                best = Some((modified, path));
            }
        }
    }
    best.map(|(_, p)| p)
        .with_context(|| format!("no PTX (.s) emitted in {}", dir.display()))
}
