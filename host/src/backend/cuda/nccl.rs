//! NCCL, loaded at run time and checked before use, so that the binary starts on machines
//! without it and a missing or incomplete library is an error that says what to install.
//!
//! cudarc's own NCCL loader never tries `libnccl.so.2` (the only file of the `nvidia-nccl-cu12`
//! and `-cu13` Python packages that PyTorch installs) and panics when a symbol is missing, so the
//! library is found here: [`NCCL_VAR`] (a file or a folder), then `libnccl.so.2` and `libnccl.so`
//! on the loader's search path, then the `nvidia/nccl/lib` folder of the Python environments
//! found on this machine. Every entry point in [`ENTRY_POINTS`] is looked up at load.

use super::CudaBackend;
use crate::error::{Error, Result};
use cudarc::driver::{CudaSlice, DevicePtrMut};
use libloading::Library;
use std::ffi::{CStr, OsStr, c_char, c_int, c_void};
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

/// `ncclUniqueId`: what the ranks of a communicator share to find each other.
#[repr(C)]
#[derive(Clone, Copy)]
struct UniqueId([c_char; 128]);

/// `ncclComm_t`.
type RawComm = *mut c_void;

/// `ncclInt64`, `ncclUint64` (`ncclDataType_t`) and `ncclSum` (`ncclRedOp_t`).
const INT64: c_int = 4;
const UINT64: c_int = 5;
const SUM: c_int = 0;

/// The entry points a GPU set calls, resolved at load.
struct Api {
    get_error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> c_int,
    comm_init_rank: unsafe extern "C" fn(*mut RawComm, c_int, UniqueId, c_int) -> c_int,
    comm_destroy: unsafe extern "C" fn(RawComm) -> c_int,
    #[allow(clippy::type_complexity)]
    all_reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        RawComm,
        cudarc::driver::sys::CUstream,
    ) -> c_int,
    group_start: unsafe extern "C" fn() -> c_int,
    group_end: unsafe extern "C" fn() -> c_int,
}

/// A loaded NCCL library.
pub struct Nccl {
    /// Held for the life of the process: the entry points are resolved from it.
    _lib: Library,
    api: Api,
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
    // SAFETY: each symbol has the C signature of its field (NCCL 2.18's `nccl.h`), and the
    // pointers are used only while `lib`, kept beside them in `Nccl`, stays loaded.
    let api = unsafe {
        Api {
            get_error_string: *lib.get(b"ncclGetErrorString").map_err(|e| e.to_string())?,
            get_unique_id: *lib.get(b"ncclGetUniqueId").map_err(|e| e.to_string())?,
            comm_init_rank: *lib.get(b"ncclCommInitRank").map_err(|e| e.to_string())?,
            comm_destroy: *lib.get(b"ncclCommDestroy").map_err(|e| e.to_string())?,
            all_reduce: *lib.get(b"ncclAllReduce").map_err(|e| e.to_string())?,
            group_start: *lib.get(b"ncclGroupStart").map_err(|e| e.to_string())?,
            group_end: *lib.get(b"ncclGroupEnd").map_err(|e| e.to_string())?,
        }
    };
    Ok(Nccl {
        _lib: lib,
        api,
        path: path.to_path_buf(),
        version,
    })
}

impl Nccl {
    /// `rc` as a result; an error names `what` and NCCL's reason.
    fn check(&self, rc: c_int, what: &str) -> Result<()> {
        if rc == 0 {
            return Ok(());
        }
        // SAFETY: ncclGetErrorString returns a static NUL-terminated string for any code.
        let reason = unsafe { CStr::from_ptr((self.api.get_error_string)(rc)) };
        Err(Error::Cuda {
            context: what.into(),
            message: format!("NCCL error {rc}: {}", reason.to_string_lossy()),
        })
    }
}

/// One GPU's rank in an NCCL communicator over the GPUs of a set.
pub(crate) struct Rank {
    nccl: &'static Nccl,
    comm: RawComm,
    /// This GPU's place in the set (0: the rank that reads the totals back).
    pub(crate) rank: usize,
}

// SAFETY: an NCCL communicator may be used from any thread, one thread at a time; `Rank` is
// used through `&mut` or by the one thread of its GPU.
unsafe impl Send for Rank {}
unsafe impl Sync for Rank {}

impl Rank {
    /// A communicator over `gpus` (distinct GPUs of this process), one rank each in order. The
    /// ranks join on a thread each, as NCCL asks of ranks in one process without a group call.
    /// NVLink multicast stays off (`NCCL_NVLS_ENABLE=0` unless set otherwise).
    pub(crate) fn for_gpus(gpus: &[&CudaBackend]) -> Result<Vec<Rank>> {
        let nccl = Nccl::shared()?;
        if std::env::var_os("NCCL_NVLS_ENABLE").is_none() {
            // SAFETY: NCCL reads its variables when a communicator is made, below; no other
            // thread of this library reads or writes the environment meanwhile.
            unsafe { std::env::set_var("NCCL_NVLS_ENABLE", "0") };
        }
        let mut id = UniqueId([0; 128]);
        // SAFETY: writes the 128-byte id.
        nccl.check(
            unsafe { (nccl.api.get_unique_id)(&mut id) },
            "making an NCCL id",
        )?;
        let ranks = gpus.len() as c_int;
        std::thread::scope(|scope| {
            let joining: Vec<_> = (gpus.iter().enumerate())
                .map(|(rank, gpu)| {
                    scope.spawn(move || -> Result<Rank> {
                        gpu.bind()?;
                        let mut comm: RawComm = std::ptr::null_mut();
                        // SAFETY: every rank gets the same id and count, and its own rank, on
                        // a thread with its GPU's context current.
                        let rc = unsafe {
                            (nccl.api.comm_init_rank)(&mut comm, ranks, id, rank as c_int)
                        };
                        nccl.check(rc, "joining an NCCL communicator")?;
                        Ok(Rank { nccl, comm, rank })
                    })
                })
                .collect();
            (joining.into_iter())
                .map(|j| {
                    j.join().unwrap_or_else(|_| {
                        Err(Error::Shard("a thread joining NCCL panicked".into()))
                    })
                })
                .collect()
        })
    }

    /// Sums `sums` and `weights` (their first `sums_len` and `weights_len` elements) over every
    /// rank, in place, queued on `gpu`'s stream. Every rank must call it with the same lengths.
    pub(crate) fn sum_in_place(
        &self,
        gpu: &CudaBackend,
        sums: &mut CudaSlice<i64>,
        sums_len: usize,
        weights: &mut CudaSlice<u64>,
        weights_len: usize,
    ) -> Result<()> {
        gpu.bind()?;
        let stream = gpu.stream();
        let (s, _s) = sums.device_ptr_mut(stream);
        let (w, _w) = weights.device_ptr_mut(stream);
        let api = &self.nccl.api;
        let what = "adding the cluster sums across GPUs (NCCL)";
        // SAFETY: both buffers hold at least the lengths given and live until the all-reduces
        // are done (the caller reads them back on the same stream); the group queues both.
        unsafe {
            self.nccl.check((api.group_start)(), what)?;
            let a = (api.all_reduce)(
                s as *const c_void,
                s as *mut c_void,
                sums_len,
                INT64,
                SUM,
                self.comm,
                stream.cu_stream(),
            );
            let b = (api.all_reduce)(
                w as *const c_void,
                w as *mut c_void,
                weights_len,
                UINT64,
                SUM,
                self.comm,
                stream.cu_stream(),
            );
            let end = (api.group_end)();
            self.nccl.check(a, what)?;
            self.nccl.check(b, what)?;
            self.nccl.check(end, what)
        }
    }
}

impl Drop for Rank {
    fn drop(&mut self) {
        // SAFETY: the communicator is this rank's and is not used after this.
        unsafe { (self.nccl.api.comm_destroy)(self.comm) };
    }
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
