//! Developer tasks: `cargo xtask ptx [--check]`, `build`, `test`, `gpu-bundle`.

mod bundle;
mod cubin;
mod ptx;
mod python;

use anyhow::{Result, bail};
use std::path::PathBuf;
use std::process::Command;

const USAGE: &str = "usage: cargo xtask <command>

commands:
  ptx [--check]   build the device kernels to host/ptx/ (PTX, and cubins with the pinned ptxas)
                  (--check: fail if a committed file is stale)
  build           ptx, then the host library and command-line tool in release
  test            ptx --check, the workspace tests (GPU tests run where a GPU is present), then
                  the Python package: wheel built into target/py-venv, pytest over python/tests
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
            let mut cmd = vec!["test", "--workspace"];
            cmd.extend_from_slice(rest);
            cargo(&cmd)?;
            python::test()
        }
        ["gpu-bundle"] => bundle::write(),
        _ => bail!("{USAGE}"),
    }
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

/// Runs the cargo that runs xtask (the workspace's stable toolchain) in the workspace root.
fn cargo(args: &[&str]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(args)
        .current_dir(root())
        .status()?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}
