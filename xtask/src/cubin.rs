//! Compiles the committed PTX to SASS (`host/ptx/kernels_sm*.cubin`) with a pinned `ptxas`, so
//! that no GPU of a supported architecture JIT-compiles the kernels on start-up (9 s on an H100
//! with an empty JIT cache). ptxas comes from NVIDIA's `nvidia-cuda-nvcc-cu12` wheel on PyPI,
//! installed by pip under `target/ptxas/`; its version is pinned in `host/ptx/ptxas-version`,
//! which the library also reports. ptxas output is deterministic, so `--check` compares bytes.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The PyPI package that ships ptxas. Its 12.9 releases still target sm_70 (CUDA 13 dropped it).
const PACKAGE: &str = "nvidia-cuda-nvcc-cu12";
/// Where the package puts ptxas, below the install folder.
const PTXAS_IN_PACKAGE: &str = "nvidia/cuda_nvcc/bin/ptxas";

/// Each cubin: its architecture and the committed PTX it is compiled from (sm_70 and sm_75 from
/// the sm_70 build; Ampere and Ada from the sm_80 build, which has the tensor-core kernels;
/// Hopper from the sm_90a build, which adds the warpgroup ones and runs on compute capability
/// 9.0 only). A GPU of
/// another minor version runs the cubin of its major with the highest minor not above its own.
pub const CUBINS: [(&str, &str); 6] = [
    ("sm_70", "kernels.ptx"),
    ("sm_75", "kernels.ptx"),
    ("sm_80", "kernels_sm80.ptx"),
    ("sm_86", "kernels_sm80.ptx"),
    ("sm_89", "kernels_sm80.ptx"),
    ("sm_90a", "kernels_sm90a.ptx"),
];

/// The committed cubin of architecture `arch` (`sm_90` → `host/ptx/kernels_sm90.cubin`).
pub fn committed_path(arch: &str) -> PathBuf {
    crate::committed_path(&file_name(arch))
}

fn file_name(arch: &str) -> String {
    format!("kernels_{}.cubin", arch.replace('_', ""))
}

/// Compiles every cubin from the committed PTX and writes it.
pub fn build() -> Result<()> {
    for ((arch, _), cubin) in CUBINS.iter().zip(compile_all()?) {
        let path = committed_path(arch);
        if crate::write_if_changed(&path, cubin.as_ref())? {
            eprintln!("xtask: wrote {}", path.display());
        }
    }
    Ok(())
}

/// Fails when a committed cubin differs from what the pinned ptxas makes of the committed PTX.
pub fn check() -> Result<()> {
    for ((arch, _), fresh) in CUBINS.iter().zip(compile_all()?) {
        let path = committed_path(arch);
        let committed = std::fs::read(&path)
            .with_context(|| format!("reading {} (run `cargo xtask ptx`)", path.display()))?;
        if committed != fresh {
            bail!(
                "{} is stale: run `cargo xtask ptx` and commit the result",
                path.display()
            );
        }
        eprintln!("xtask: {} is up to date", path.display());
    }
    Ok(())
}

/// Every cubin of [`CUBINS`], in order. ptxas runs once per architecture, all at the same time;
/// a result whose inputs (PTX, ptxas version, flags) are unchanged since the last run is reused
/// from `target/cubin/`.
fn compile_all() -> Result<Vec<Vec<u8>>> {
    let version = pinned_version()?;
    let ptxas = ensure_ptxas(&version)?;
    let cache = crate::root().join("target/cubin");
    std::fs::create_dir_all(&cache)?;
    let mut running = Vec::new();
    for (arch, ptx_file) in CUBINS {
        let ptx_path = crate::committed_path(ptx_file);
        let ptx =
            std::fs::read(&ptx_path).with_context(|| format!("reading {}", ptx_path.display()))?;
        let args = ["-O3", &format!("-arch={arch}")];
        let key = [
            format!("ptxas {version} {}\n", args.join(" ")).as_bytes(),
            &ptx,
        ]
        .concat();
        let out = cache.join(file_name(arch));
        let key_path = out.with_extension("key");
        if std::fs::read(&key_path).is_ok_and(|k| k == key) && out.exists() {
            running.push((out, None));
            continue;
        }
        let _ = std::fs::remove_file(&key_path);
        let child = Command::new(&ptxas)
            .args(args)
            .arg("-o")
            .arg(&out)
            .arg(&ptx_path)
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("running {}", ptxas.display()))?;
        running.push((out, Some((child, key_path, key, arch))));
    }
    let mut cubins = Vec::new();
    for (out, child) in running {
        if let Some((mut child, key_path, key, arch)) = child {
            let status = child.wait()?;
            if !status.success() {
                bail!("ptxas failed for {arch} ({status})");
            }
            std::fs::write(&key_path, key)?;
        }
        cubins.push(std::fs::read(&out).with_context(|| format!("reading {}", out.display()))?);
    }
    Ok(cubins)
}

/// The ptxas release the cubins are built with (`host/ptx/ptxas-version`).
fn pinned_version() -> Result<String> {
    let path = crate::committed_path("ptxas-version");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text.trim().to_string())
}

/// The pinned ptxas, installed from PyPI into `target/ptxas/VERSION/` when missing.
fn ensure_ptxas(version: &str) -> Result<PathBuf> {
    let dir = crate::root().join("target/ptxas").join(version);
    let ptxas = dir.join(PTXAS_IN_PACKAGE);
    if !ptxas.exists() {
        install(version, &dir)?;
    }
    let out = Command::new(&ptxas)
        .arg("--version")
        .output()
        .with_context(|| format!("running {}", ptxas.display()))?;
    let said = String::from_utf8_lossy(&out.stdout);
    if !said.contains(&format!("V{version}")) {
        bail!(
            "{} is not ptxas {version}: {said}; delete {} and run again",
            ptxas.display(),
            dir.display()
        );
    }
    Ok(ptxas)
}

/// `python3 -m pip install --target` into a scratch folder, then renamed into place, so that an
/// interrupted install never looks complete.
fn install(version: &str, dir: &Path) -> Result<()> {
    let pip_works = Command::new("python3")
        .args(["-m", "pip", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !pip_works {
        bail!(
            "building the cubins needs ptxas {version} from PyPI ({PACKAGE}), which xtask \
             installs with `python3 -m pip`, but that does not run here: install Python 3 with \
             pip (e.g. `apt-get install python3-pip`)"
        );
    }
    let scratch = dir.with_extension("partial");
    if scratch.exists() {
        std::fs::remove_dir_all(&scratch)?;
    }
    eprintln!(
        "xtask: installing ptxas {version} ({PACKAGE} from PyPI) into {}",
        dir.display()
    );
    let status = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(["--no-input", "--no-deps", "--target"])
        .arg(&scratch)
        .arg(format!("{PACKAGE}=={version}"))
        .env("PIP_ROOT_USER_ACTION", "ignore")
        .status()
        .context("running python3 -m pip")?;
    if !status.success() {
        bail!("`python3 -m pip install {PACKAGE}=={version}` failed ({status})");
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::rename(&scratch, dir)
        .with_context(|| format!("moving {} to {}", scratch.display(), dir.display()))?;
    Ok(())
}
