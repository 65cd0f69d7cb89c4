//! Builds `kernels-gpu` for nvptx64 on the pinned nightly and keeps `host/ptx/kernels.ptx`
//! (sm_70, every GPU from Volta on) and `host/ptx/kernels_sm80.ptx` (sm_80: the same kernels
//! plus the tensor-core ones, loaded on compute capability 8.0 and later), then compiles them
//! to the committed cubins (`crate::cubin`).

use anyhow::{Context, Result, bail};
use kernels_gpu::KERNELS;
use kernels_gpu::launch::Kernel;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The nightly that compiles the device crate (also in kernels-gpu/rust-toolchain.toml).
pub const NIGHTLY: &str = "nightly-2026-05-20";
/// The PTX builds: target-cpu and the file (under `host/ptx/`) the host embeds. The first is the
/// oldest architecture supported (the driver JIT-compiles it for every later GPU); the second
/// adds the kernels that need `mma` on TF32 (`cfg(target_feature = "sm_80")`); the third, for
/// Hopper's sm_90a only, adds those on `wgmma` (`cfg(target_feature = "sm_90a")`) and is
/// compiled to the sm_90 cubin, not embedded as PTX.
pub const TARGETS: [(&str, &str); 3] = [
    ("sm_70", "kernels.ptx"),
    ("sm_80", "kernels_sm80.ptx"),
    ("sm_90a", "kernels_sm90a.ptx"),
];

/// Every committed PTX file and cubin.
pub fn committed_paths() -> Vec<PathBuf> {
    let ptx = TARGETS.iter().map(|(_, f)| crate::committed_path(f));
    let cubins = crate::cubin::CUBINS
        .iter()
        .map(|(arch, _)| crate::cubin::committed_path(arch));
    ptx.chain(cubins).collect()
}

/// `cargo xtask ptx`: regenerate the committed PTX files and the cubins made from them.
pub fn build() -> Result<()> {
    for (cpu, file) in TARGETS {
        let ptx = compile(cpu)?;
        let path = crate::committed_path(file);
        std::fs::create_dir_all(path.parent().unwrap())?;
        if crate::write_if_changed(&path, ptx.as_ref())? {
            eprintln!("xtask: wrote {}", path.display());
        }
    }
    crate::cubin::build()
}

/// `cargo xtask ptx --check`: fail when a committed PTX file or cubin differs from a fresh build.
pub fn check() -> Result<()> {
    for (cpu, file) in TARGETS {
        let fresh = compile(cpu)?;
        let path = crate::committed_path(file);
        let committed = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {} (run `cargo xtask ptx`)", path.display()))?;
        if committed != fresh {
            bail!(
                "{} is stale: the kernels changed; run `cargo xtask ptx` and commit the result",
                path.display()
            );
        }
        eprintln!("xtask: {} is up to date", path.display());
    }
    // The committed PTX now equals a fresh build, so the cubins are checked against it.
    crate::cubin::check()
}

fn compile(target_cpu: &str) -> Result<String> {
    ensure_nightly()?;
    let root = crate::root();
    // One target directory per architecture, so the two builds never share (or race for) the
    // emitted `.s` file.
    let target_dir = root.join("target/ptx").join(target_cpu);
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
            &format!("target-cpu={target_cpu}"),
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
    let ptx =
        std::fs::read_to_string(&out).with_context(|| format!("reading {}", out.display()))?;
    let mut ptx = ptx;
    for kernel in KERNELS.iter().filter(|k| k.min_blocks_per_sm > 0) {
        ptx = with_directives(&ptx, kernel.name, &launch_bounds(kernel))?;
    }
    Ok(ptx)
}

/// `.maxntid` and `.minnctapersm` for a kernel whose `Kernel` const asks ptxas to fit
/// `min_blocks_per_sm` blocks of its `block` threads on a multiprocessor (Rust has no
/// `__launch_bounds__`; the bounds live next to their kernels in `kernels-gpu`).
fn launch_bounds(kernel: &Kernel) -> String {
    format!(
        ".maxntid {}, 1, 1\n.minnctapersm {}\n",
        kernel.block, kernel.min_blocks_per_sm
    )
}

/// `ptx` with `directives` between the parameter list and the body of entry `kernel` (left
/// unchanged when the build has no such entry, e.g. sm_70).
fn with_directives(ptx: &str, kernel: &str, directives: &str) -> Result<String> {
    let Some(entry) = ptx.find(&format!(".entry {kernel}(")) else {
        return Ok(ptx.to_string());
    };
    let body = ptx[entry..]
        .find(")\n{")
        .with_context(|| format!("no body after .entry {kernel} in the PTX"))?;
    let at = entry + body + 2;
    Ok(format!("{}{directives}{}", &ptx[..at], &ptx[at..]))
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
