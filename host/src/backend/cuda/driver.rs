//! Which CUDA drivers the library runs on, checked before the first real driver call.
//!
//! cudarc (built with its `cuda-12000` bindings and dynamic loading) resolves each driver
//! function on its first call and panics when the symbol is missing. So before any of them runs,
//! [`check`] loads libcuda, asks its version, and looks up every entry point in
//! [`ENTRY_POINTS`]: a missing driver becomes [`Error::NoGpu`], one too old or incomplete
//! [`Error::UnsupportedDriver`] (and `Device::Auto` falls back to the CPU), never a panic.

use crate::error::{Error, Result};
use cudarc::driver::sys::CUresult;

/// The oldest driver API the library supports: CUDA 12.0 (Linux driver R525 and later). The
/// host crate builds cudarc's `cuda-12000` bindings, so it cannot call anything newer.
pub const MIN_DRIVER_VERSION: i32 = 12000;

/// What to tell a user whose driver cannot run the library.
const INSTALL: &str = "install NVIDIA driver R525 or later (CUDA 12.0+), or use --device cpu";

/// Every driver entry point the library can call, with the CUDA version that introduced it
/// (`major × 1000 + minor × 10`, as `cuDriverGetVersion` reports). The GPU bundle's run checks
/// this list against the symbols a full GPU test run actually resolves from libcuda.
pub const ENTRY_POINTS: &[(&str, i32)] = &[
    ("cuInit", 2000),
    ("cuDriverGetVersion", 2020),
    ("cuGetErrorName", 6000),
    ("cuGetErrorString", 6000),
    ("cuDeviceGet", 2000),
    ("cuDeviceGetCount", 2000),
    ("cuDeviceGetName", 2000),
    ("cuDeviceGetAttribute", 2000),
    ("cuDeviceTotalMem_v2", 3020),
    ("cuDeviceGetDefaultMemPool", 11020),
    ("cuDevicePrimaryCtxRetain", 7000),
    ("cuDevicePrimaryCtxRelease_v2", 11000),
    ("cuCtxGetCurrent", 4000),
    ("cuCtxSetCurrent", 4000),
    ("cuCtxDestroy_v2", 4000),
    ("cuModuleLoad", 2000),
    ("cuModuleLoadData", 2000),
    ("cuModuleUnload", 2000),
    ("cuModuleGetFunction", 2000),
    ("cuFuncSetAttribute", 9000),
    ("cuLaunchKernel", 4000),
    ("cuMemAlloc_v2", 3020),
    ("cuMemFree_v2", 3020),
    ("cuMemAllocAsync", 11020),
    ("cuMemFreeAsync", 11020),
    ("cuMemGetInfo_v2", 3020),
    ("cuMemHostAlloc", 2020),
    ("cuMemFreeHost", 2000),
    ("cuMemHostGetDevicePointer_v2", 3020),
    ("cuMemcpyHtoDAsync_v2", 3020),
    ("cuMemcpyDtoHAsync_v2", 3020),
    ("cuMemcpyDtoDAsync_v2", 3020),
    ("cuMemcpyPeerAsync", 4000),
    ("cuMemsetD8Async", 3020),
    ("cuMemPoolGetAttribute", 11020),
    ("cuMemPoolSetAttribute", 11020),
    ("cuMemPoolTrimTo", 11020),
    ("cuStreamCreate", 2000),
    ("cuStreamSynchronize", 2000),
    ("cuStreamWaitEvent", 3020),
    ("cuStreamDestroy_v2", 4000),
    ("cuEventCreate", 2000),
    ("cuEventRecord", 2000),
    ("cuEventSynchronize", 2000),
    ("cuEventElapsedTime", 2000),
    ("cuEventDestroy_v2", 4000),
];

/// `12020` → `"12.2"`.
pub fn version_text(version: i32) -> String {
    format!("{}.{}", version / 1000, (version % 1000) / 10)
}

/// The driver's variable that lists the GPUs a process sees (ordinals, UUIDs or MIG names).
pub const VISIBLE_VAR: &str = "CUDA_VISIBLE_DEVICES";

/// The NVIDIA GPUs in this machine, counted from the driver's files without starting it
/// (`/proc/driver/nvidia/gpus/*`, else the `/dev/nvidiaN` device files); `None` when neither
/// is there (no NVIDIA driver).
pub fn host_gpus() -> Option<usize> {
    let count = |dir: &str, keep: fn(&str) -> bool| {
        std::fs::read_dir(dir).ok().map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter(|e| keep(&e.file_name().to_string_lossy()))
                .count()
        })
    };
    count("/proc/driver/nvidia/gpus", |_| true)
        .filter(|&n| n > 0)
        .or_else(|| {
            count("/dev", |name| {
                name.strip_prefix("nvidia")
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            })
        })
        .filter(|&n| n > 0)
}

/// Loads libcuda and checks that it can run the library; returns its CUDA version.
pub(super) fn check() -> Result<i32> {
    super::start_cost::driver_called();
    if !libcuda_present() {
        return Err(Error::NoGpu(format!(
            "the CUDA driver library (libcuda.so) is not installed; {INSTALL}"
        )));
    }
    // SAFETY: `libcuda_present` just loaded the library under one of these names, so cudarc's
    // own load (the same names in the same order) finds it and does not panic.
    let lib = unsafe { cudarc::driver::sys::culib() };
    let missing: Vec<&str> = ENTRY_POINTS
        .iter()
        .map(|&(name, _)| name)
        // SAFETY: only looks the symbol up; nothing is called through the pointer.
        .filter(|name| unsafe { lib.get::<unsafe extern "C" fn()>(name.as_bytes()) }.is_err())
        .collect();
    // Without cuDriverGetVersion the version cannot even be asked.
    if missing.contains(&"cuDriverGetVersion") {
        return Err(Error::UnsupportedDriver(format!(
            "the CUDA driver library lacks cuDriverGetVersion; {INSTALL}"
        )));
    }
    let version = driver_version()?;
    if version < MIN_DRIVER_VERSION {
        return Err(Error::UnsupportedDriver(format!(
            "the installed driver supports CUDA {}, but CUDA {} is needed; {INSTALL}",
            version_text(version),
            version_text(MIN_DRIVER_VERSION)
        )));
    }
    if !missing.is_empty() {
        return Err(Error::UnsupportedDriver(format!(
            "the CUDA {} driver library lacks {}; {INSTALL}",
            version_text(version),
            missing.join(", ")
        )));
    }
    Ok(version)
}

/// Whether libcuda can be loaded (under the names cudarc tries), unless a test build forces it
/// to look absent.
fn libcuda_present() -> bool {
    if super::faults::libcuda_hidden() {
        return false;
    }
    // SAFETY: only probes whether the driver library can be loaded.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

fn driver_version() -> Result<i32> {
    let mut version = 0;
    // SAFETY: writes one int; the symbol was found by `check`.
    let rc = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) };
    if rc != CUresult::CUDA_SUCCESS {
        return Err(Error::UnsupportedDriver(format!(
            "the CUDA driver did not report its version ({rc:?}); {INSTALL}"
        )));
    }
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_point_exists_in_the_oldest_supported_driver() {
        for &(name, since) in ENTRY_POINTS {
            assert!(since <= MIN_DRIVER_VERSION, "{name} needs CUDA {since}");
        }
        let mut names: Vec<_> = ENTRY_POINTS.iter().map(|e| e.0).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(
            names.len(),
            ENTRY_POINTS.len(),
            "an entry point is listed twice"
        );
    }

    #[test]
    fn versions_read_as_major_minor() {
        assert_eq!(version_text(12000), "12.0");
        assert_eq!(version_text(12020), "12.2");
        assert_eq!(version_text(13000), "13.0");
        assert_eq!(version_text(11080), "11.8");
    }
}
