//! NCCL, loaded at run time and checked before use, so that the binary starts on machines
//! without it and a missing or incomplete library is an error that says what to install.
//!
//! cudarc's own NCCL loader never tries `libnccl.so.2` (the only file of the `nvidia-nccl-cu12`
//! and `-cu13` Python packages that PyTorch installs) and panics when a symbol is missing, so the
//! library is found here: [`NCCL_VAR`] (a file or a folder), then `libnccl.so.2` and `libnccl.so`
//! on the loader's search path, then the `nvidia/nccl/lib` folder of the Python environments
//! found on this machine. Every entry point in [`ENTRY_POINTS`] is looked up at load.

use crate::error::{Error, Result};
use libloading::Library;
use std::ffi::{OsStr, c_int};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The environment variable naming the NCCL library to load (a file, or a folder holding
/// `libnccl.so.2`).
pub const NCCL_VAR: &str = "KMEANS_KNN_NCCL";

/// The oldest NCCL the library runs with: 2.18 (`ncclCommInitRankConfig` and 64-bit integer
/// all-reduce are older; 2.18 is the first release with CUDA 12 support).
pub const MIN_NCCL_VERSION: i32 = 21800;

/// The NCCL entry points the library needs (to all-reduce exact partial sums across GPUs).
pub const ENTRY_POINTS: &[&str] = &[
    "ncclGetVersion",
    "ncclGetErrorString",
    "ncclGetUniqueId",
    "ncclCommInitRank",
    "ncclCommDestroy",
    "ncclAllReduce",
    "ncclGroupStart",
    "ncclGroupEnd",
];

const INSTALL: &str = "install NCCL 2.18 or later (e.g. `pip install nvidia-nccl-cu12`), \
                       or name the library with KMEANS_KNN_NCCL";

/// A loaded NCCL library.
pub struct Nccl {
    /// Held for the life of the process: the entry points are resolved from it.
    _lib: Library,
    /// The file it was loaded from, or the name the dynamic loader resolved.
    pub path: PathBuf,
    /// `major × 10000 + minor × 100 + patch`, as `ncclGetVersion` reports it.
    pub version: i32,
}

impl Nccl {
    /// The process's NCCL, loaded on first use; the error (the same every time) says which files
    /// were tried and what to install.
    pub fn shared() -> Result<&'static Nccl> {
        static NCCL: OnceLock<std::result::Result<Nccl, String>> = OnceLock::new();
        NCCL.get_or_init(load)
            .as_ref()
            .map_err(|reason| Error::NoNccl(reason.clone()))
    }

    /// `22809` → `"2.28.9"`.
    pub fn version_text(version: i32) -> String {
        format!(
            "{}.{}.{}",
            version / 10000,
            (version % 10000) / 100,
            version % 100
        )
    }
}

fn load() -> std::result::Result<Nccl, String> {
    let candidates = candidates(
        std::env::var_os(NCCL_VAR).as_deref(),
        &python_library_folders(),
    );
    let mut tried = vec![];
    for candidate in &candidates {
        // SAFETY: loading NCCL runs only its static initialisers, which have no preconditions.
        match unsafe { Library::new(candidate) } {
            Ok(lib) => return check(lib, candidate),
            Err(_) => tried.push(candidate.display().to_string()),
        }
    }
    Err(format!(
        "no NCCL library could be loaded (tried {}); {INSTALL}",
        tried.join(", ")
    ))
}

/// Where to look, in order: the variable's file (or `libnccl.so.2` in its folder) alone when it
/// is set; otherwise the loader's search path, then each Python library folder.
fn candidates(var: Option<&OsStr>, python_folders: &[PathBuf]) -> Vec<PathBuf> {
    if let Some(v) = var.filter(|v| !v.is_empty()) {
        let path = PathBuf::from(v);
        return vec![if path.is_dir() {
            path.join("libnccl.so.2")
        } else {
            path
        }];
    }
    let mut out = vec![PathBuf::from("libnccl.so.2"), PathBuf::from("libnccl.so")];
    out.extend(
        python_folders
            .iter()
            .map(|f| f.join("nvidia/nccl/lib/libnccl.so.2")),
    );
    out
}

/// The site-packages and dist-packages folders of the Python environments that may hold NCCL's
/// wheel: the active virtual or conda environment, `PYTHONPATH`, the user's and the system's.
fn python_library_folders() -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = ["VIRTUAL_ENV", "CONDA_PREFIX"]
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from)
        .collect();
    if let Some(home) = std::env::var_os("HOME") {
        prefixes.push(Path::new(&home).join(".local"));
    }
    prefixes.extend(["/usr/local", "/usr", "/opt/conda"].map(PathBuf::from));
    let mut folders: Vec<PathBuf> = std::env::var_os("PYTHONPATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for prefix in prefixes {
        let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else {
            continue;
        };
        let mut pythons: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .map(|e| e.path())
            .collect();
        pythons.sort();
        for python in pythons {
            folders.push(python.join("site-packages"));
            folders.push(python.join("dist-packages"));
        }
    }
    folders.retain(|f| f.is_dir());
    folders
}

/// Looks up every entry point and asks the version.
fn check(lib: Library, path: &Path) -> std::result::Result<Nccl, String> {
    let missing: Vec<&str> = ENTRY_POINTS
        .iter()
        .copied()
        // SAFETY: only looks the symbol up; nothing is called through the pointer.
        .filter(|name| unsafe { lib.get::<unsafe extern "C" fn()>(name.as_bytes()) }.is_err())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{} lacks {}; {INSTALL}",
            path.display(),
            missing.join(", ")
        ));
    }
    let mut version: c_int = 0;
    // SAFETY: `ncclGetVersion(int*)` writes one int; the symbol was just found.
    let rc = unsafe {
        let get: libloading::Symbol<unsafe extern "C" fn(*mut c_int) -> c_int> =
            lib.get(b"ncclGetVersion").map_err(|e| e.to_string())?;
        get(&mut version)
    };
    if rc != 0 {
        return Err(format!(
            "{}: ncclGetVersion failed (code {rc}); {INSTALL}",
            path.display()
        ));
    }
    if version < MIN_NCCL_VERSION {
        return Err(format!(
            "{} is NCCL {}, older than {}; {INSTALL}",
            path.display(),
            Nccl::version_text(version),
            Nccl::version_text(MIN_NCCL_VERSION)
        ));
    }
    Ok(Nccl {
        _lib: lib,
        path: path.to_path_buf(),
        version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_alone_is_tried_when_set() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            candidates(Some(dir.path().as_os_str()), &[PathBuf::from("/p")]),
            vec![dir.path().join("libnccl.so.2")]
        );
        assert_eq!(
            candidates(Some(OsStr::new("/x/libnccl.so.2.28.9")), &[]),
            vec![PathBuf::from("/x/libnccl.so.2.28.9")]
        );
    }

    #[test]
    fn without_the_variable_the_search_path_comes_before_python_packages() {
        let found = candidates(
            Some(OsStr::new("")),
            &[PathBuf::from("/venv/site-packages")],
        );
        assert_eq!(
            found,
            [
                "libnccl.so.2",
                "libnccl.so",
                "/venv/site-packages/nvidia/nccl/lib/libnccl.so.2"
            ]
            .map(PathBuf::from)
        );
    }

    #[test]
    fn versions_read_as_major_minor_patch() {
        assert_eq!(Nccl::version_text(22809), "2.28.9");
        assert_eq!(Nccl::version_text(MIN_NCCL_VERSION), "2.18.0");
    }
}
