//! Developer tasks: `cargo xtask ptx [--check]`, `build`, `test`, `gpu-bundle`.

mod bundle;
mod cubin;
mod ptx;
mod python;
mod summary;

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

const USAGE: &str = "usage: cargo xtask <command>

commands:
  ptx [--check]   build the device kernels to host/ptx/ (PTX, and cubins with the pinned ptxas)
                  (--check: fail if a committed file is stale)
  build           ptx, then the host library and command-line tool in release
  test            ptx --check, the workspace tests (GPU tests run where a GPU is present), then
                  the Python package: wheel built into target/py-venv, pytest over python/tests;
                  the last line sums up what passed, failed and was skipped (and why)
  gpu-bundle      write gpu-bundle/: test and benchmark executables, the PTX and run.sh";

fn main() {
    if let Err(err) = run() {
        eprintln!("xtask: {err:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["ptx"] => ptx::build(),
        ["ptx", "--check"] => ptx::check(),
        ["build"] => {
            ptx::build()?;
            cargo(&["build", "--release", "-p", "kmeans-knn"])
        }
        ["test", rest @ ..] => {
            ptx::check()?;
            let mut args = vec!["test", "--workspace"];
            args.extend_from_slice(rest);
            let (status, lines) = summary::run_teed(&mut cargo_command(&args))?;
            let rust = summary::rust(&lines);
            if !status.success() {
                println!("{rust}");
                bail!("cargo {} failed ({status})", args.join(" "));
            }
            let (status, lines) = python::test()?;
            println!("{rust}; {}", summary::python(&lines));
            if !status.success() {
                bail!("pytest failed ({status})");
            }
            Ok(())
        }
        ["gpu-bundle"] => bundle::write(),
        _ => bail!("{USAGE}"),
    }
}

/// Writes `bytes` to `path` unless it already holds them, so that an unchanged kernel image keeps
/// its modification time and does not rebuild everything that embeds it; says whether it wrote.
pub fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<bool> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(false);
    }
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))?;
    Ok(true)
}

/// The committed file `file` of the kernel images' folder, `host/ptx/` (PTX, cubins, the
/// pinned ptxas version), which the host embeds them from.
fn committed_path(file: &str) -> PathBuf {
    root().join("host/ptx").join(file)
}

/// The workspace root (xtask lives one level below it). Read at run time (`cargo run` sets it)
/// so that a binary built from another checkout sharing the target folder cannot point there.
fn root() -> PathBuf {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    manifest
        .parent()
        .expect("xtask sits inside the workspace")
        .to_path_buf()
}

/// The cargo that runs xtask (the workspace's stable toolchain), in the workspace root.
fn cargo_command(args: &[&str]) -> Command {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(args).current_dir(root());
    cmd
}

/// Runs [`cargo_command`].
fn cargo(args: &[&str]) -> Result<()> {
    let status = cargo_command(args).status()?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}
