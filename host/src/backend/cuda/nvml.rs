//! A GPU's facts from NVML (`libnvidia-ml`), which answers in ~20 ms where the CUDA driver's
//! start (`cuInit`) costs ~0.2 s even on a one-GPU host with persistence mode on (H100, measured
//! 2026-11-27). `info` reads them, so that asking what the machine has does not pay for a
//! driver start the next command pays again.
//!
//! NVML numbers GPUs by PCI bus; CUDA numbers them fastest first unless `CUDA_DEVICE_ORDER` is
//! `PCI_BUS_ID`, and after `CUDA_VISIBLE_DEVICES`. [`cuda_to_nvml`] maps one to the other only
//! where the answer is certain; elsewhere the caller asks the CUDA driver.

use libloading::Library;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

/// What NVML tells of one GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NvmlGpu {
    pub name: String,
    pub total_memory: usize,
    pub compute_capability: (i32, i32),
    /// CUDA cores, where the driver reports them.
    pub cores: Option<u32>,
}

/// NVML's `nvmlMemory_t`.
#[repr(C)]
#[derive(Default)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

type Handle = *mut c_void;

/// Every GPU NVML sees, in its (PCI bus) order, read once a process; `None` without NVML or
/// when it fails.
pub(crate) fn gpus() -> Option<&'static [NvmlGpu]> {
    static GPUS: OnceLock<Option<Vec<NvmlGpu>>> = OnceLock::new();
    GPUS.get_or_init(read).as_deref()
}

fn read() -> Option<Vec<NvmlGpu>> {
    // SAFETY: loading libnvidia-ml runs only its initialisers; each symbol below is called with
    // the signature of NVML's API (nvml.h), with pointers to locals of the declared types.
    unsafe {
        let lib = Library::new("libnvidia-ml.so.1").ok()?;
        let init = lib
            .get::<unsafe extern "C" fn() -> c_int>(b"nvmlInit_v2")
            .ok()?;
        let shutdown = lib
            .get::<unsafe extern "C" fn() -> c_int>(b"nvmlShutdown")
            .ok()?;
        if init() != 0 {
            return None;
        }
        let found = read_gpus(&lib);
        shutdown();
        found
    }
}

/// The GPUs' facts; NVML is initialised.
unsafe fn read_gpus(lib: &Library) -> Option<Vec<NvmlGpu>> {
    type Count = unsafe extern "C" fn(*mut c_uint) -> c_int;
    type ByIndex = unsafe extern "C" fn(c_uint, *mut Handle) -> c_int;
    type Name = unsafe extern "C" fn(Handle, *mut c_char, c_uint) -> c_int;
    type MemoryInfo = unsafe extern "C" fn(Handle, *mut Memory) -> c_int;
    type Capability = unsafe extern "C" fn(Handle, *mut c_int, *mut c_int) -> c_int;
    type Cores = unsafe extern "C" fn(Handle, *mut c_uint) -> c_int;
    // SAFETY (the whole body): as in `gpus`.
    unsafe {
        let count = lib.get::<Count>(b"nvmlDeviceGetCount_v2").ok()?;
        let by_index = lib.get::<ByIndex>(b"nvmlDeviceGetHandleByIndex_v2").ok()?;
        let name_of = lib.get::<Name>(b"nvmlDeviceGetName").ok()?;
        let memory_of = lib.get::<MemoryInfo>(b"nvmlDeviceGetMemoryInfo").ok()?;
        let capability = lib
            .get::<Capability>(b"nvmlDeviceGetCudaComputeCapability")
            .ok()?;
        // Newer than the rest (R520): optional.
        let cores_of = lib.get::<Cores>(b"nvmlDeviceGetNumGpuCores").ok();
        let mut n: c_uint = 0;
        if count(&mut n) != 0 {
            return None;
        }
        (0..n)
            .map(|i| {
                let mut h: Handle = std::ptr::null_mut();
                if by_index(i, &mut h) != 0 {
                    return None;
                }
                let mut name = [0 as c_char; 96];
                if name_of(h, name.as_mut_ptr(), name.len() as c_uint) != 0 {
                    return None;
                }
                let name = std::ffi::CStr::from_ptr(name.as_ptr()).to_string_lossy();
                let mut memory = Memory::default();
                let (mut major, mut minor) = (0, 0);
                if memory_of(h, &mut memory) != 0 || capability(h, &mut major, &mut minor) != 0 {
                    return None;
                }
                let mut cores: c_uint = 0;
                let cores = cores_of
                    .as_ref()
                    .filter(|f| f(h, &mut cores) == 0 && cores > 0)
                    .map(|_| cores);
                Some(NvmlGpu {
                    name: name.into_owned(),
                    total_memory: memory.total as usize,
                    compute_capability: (major, minor),
                    cores,
                })
            })
            .collect()
    }
}

/// The NVML indices of the GPUs CUDA numbers 0, 1, …, when that is certain: `visible` is
/// `CUDA_VISIBLE_DEVICES` (ordinals only; UUIDs and MIG names give `None`), `pci_order` whether
/// `CUDA_DEVICE_ORDER=PCI_BUS_ID`. Without it CUDA puts the fastest first, which is PCI order
/// only when every GPU is the same model (then which one is which does not change its facts).
pub(crate) fn cuda_to_nvml(
    gpus: &[NvmlGpu],
    visible: Option<&str>,
    pci_order: bool,
) -> Option<Vec<usize>> {
    let same_model = gpus.windows(2).all(|w| w[0].name == w[1].name);
    if !pci_order && !same_model {
        return None;
    }
    let Some(list) = visible else {
        return Some((0..gpus.len()).collect());
    };
    // The driver reads the list up to its first entry that names no GPU.
    let mut picked = Vec::new();
    for entry in list.split(',').map(str::trim) {
        if entry.starts_with("GPU-") || entry.starts_with("MIG-") {
            return None;
        }
        match entry.parse::<usize>() {
            Ok(i) if i < gpus.len() && !picked.contains(&i) => picked.push(i),
            _ => break,
        }
    }
    Some(picked)
}

/// Streaming multiprocessors from CUDA cores: the cores a multiprocessor has on each
/// architecture (CUDA C++ Programming Guide, "Arithmetic Instructions"); `None` where unknown.
pub(crate) fn multiprocessors(cores: u32, (major, minor): (i32, i32)) -> Option<usize> {
    let per_sm = match (major, minor) {
        (7, _) | (8, 0) => 64,
        (8, 6..=9) | (9, 0) | (10..=12, _) => 128,
        _ => return None,
    };
    cores
        .is_multiple_of(per_sm)
        .then_some((cores / per_sm) as usize)
}

/// The dynamic shared memory a block may opt into, by compute capability (CUDA C++
/// Programming Guide, "Technical Specifications per Compute Capability"); `None` where unknown.
pub(crate) fn max_shared_per_block((major, minor): (i32, i32)) -> Option<usize> {
    Some(match (major, minor) {
        (7, 0) | (7, 2) => 96 * 1024,
        (7, 5) => 64 * 1024,
        (8, 0) | (8, 7) => 163 * 1024,
        (8, 6) | (8, 9) | (12, 0) => 99 * 1024,
        (9, 0) | (10, 0) => 227 * 1024,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(name: &str) -> NvmlGpu {
        NvmlGpu {
            name: name.into(),
            total_memory: 1 << 30,
            compute_capability: (9, 0),
            cores: Some(16896),
        }
    }

    #[test]
    fn cuda_ordinals_map_to_nvml_only_where_certain() {
        let same = [gpu("H100"), gpu("H100"), gpu("H100")];
        assert_eq!(cuda_to_nvml(&same, None, false), Some(vec![0, 1, 2]));
        assert_eq!(cuda_to_nvml(&same, Some("2,0"), false), Some(vec![2, 0]));
        // The driver stops at the first entry that names no GPU, and counts each GPU once.
        assert_eq!(cuda_to_nvml(&same, Some("1,7,0"), false), Some(vec![1]));
        assert_eq!(cuda_to_nvml(&same, Some("1,1"), false), Some(vec![1]));
        assert_eq!(cuda_to_nvml(&same, Some(""), false), Some(vec![]));
        assert_eq!(cuda_to_nvml(&same, Some("GPU-1234"), false), None);
        assert_eq!(cuda_to_nvml(&same, Some("0,MIG-1"), false), None);
        let mixed = [gpu("H100"), gpu("A100")];
        assert_eq!(cuda_to_nvml(&mixed, None, false), None);
        assert_eq!(cuda_to_nvml(&mixed, Some("1"), true), Some(vec![1]));
    }

    #[test]
    fn multiprocessors_follow_the_architecture() {
        assert_eq!(multiprocessors(16896, (9, 0)), Some(132)); // H100 SXM
        assert_eq!(multiprocessors(6912, (8, 0)), Some(108)); // A100
        assert_eq!(multiprocessors(5120, (7, 0)), Some(80)); // V100
        assert_eq!(multiprocessors(100, (9, 0)), None);
        assert_eq!(multiprocessors(128, (6, 1)), None);
        assert_eq!(max_shared_per_block((9, 0)), Some(232_448));
        assert_eq!(max_shared_per_block((6, 1)), None);
    }
}
