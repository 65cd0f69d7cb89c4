//! Which GPUs the CUDA driver will start, known before it starts.
//!
//! `cuInit` starts every GPU the process may see, and its cost grows with them (0.15 s with one
//! H200 visible, 0.56–1.03 s with four, measured 2026-11-26). A process that uses one GPU should
//! let the driver see one: `CUDA_VISIBLE_DEVICES` does that, but only if it is set before the
//! driver's first call. The library never sets it (a host process's environment is its own);
//! the `kmeans-knn` command line does, through [`narrowed`], and Python users may.

use super::{Device, GpuSet};
pub use crate::backend::cuda::driver::VISIBLE_VAR;
use crate::backend::cuda::driver::host_gpus;

/// The GPUs the driver will start in this process: those `CUDA_VISIBLE_DEVICES` lists (at most
/// the machine's), else the machine's; `None` without an NVIDIA driver.
pub fn gpus_to_start() -> Option<usize> {
    let host = host_gpus()?;
    Some(match std::env::var(VISIBLE_VAR) {
        Ok(list) => entries(&list).len().min(host),
        Err(_) => host,
    })
}

/// The entries of a `CUDA_VISIBLE_DEVICES` value, as the driver reads them.
fn entries(list: &str) -> Vec<&str> {
    list.split(',')
        .map(str::trim)
        .take_while(|e| !e.is_empty())
        .collect()
}

/// What to show the driver so that it starts only the GPUs `device` uses: the new value of
/// `CUDA_VISIBLE_DEVICES` and the same device renumbered in it (`gpu:2` becomes `gpu:0` with
/// `CUDA_VISIBLE_DEVICES=2`). `visible` is the variable's current value, `host` the machine's
/// GPU count when known. `None` when nothing would change or the device names a GPU that is
/// not there (the driver's own error then says so): `cpu`, `gpu:all`, a one-GPU machine.
pub fn narrowed(device: Device, visible: Option<&str>, host: Option<usize>) -> Option<Narrowed> {
    let ordinals: Vec<usize> = match device {
        Device::Auto => vec![0],
        Device::Cuda(n) => vec![n],
        Device::Gpus(set) if set != GpuSet::ALL => set.ordinals().ok()?,
        Device::Cpu | Device::Gpus(_) => return None,
    };
    let seen: Vec<String> = match visible {
        Some(list) => entries(list).iter().map(|e| e.to_string()).collect(),
        None => (0..host?).map(|n| n.to_string()).collect(),
    };
    // The GPUs used, each once, in order of first use; each ordinal then becomes its place.
    let mut kept: Vec<usize> = Vec::new();
    for &o in &ordinals {
        if o >= seen.len() {
            return None;
        }
        if !kept.contains(&o) {
            kept.push(o);
        }
    }
    if kept.len() == seen.len() && kept.iter().enumerate().all(|(i, &o)| i == o) {
        return None;
    }
    let place = |o: usize| {
        kept.iter()
            .position(|&k| k == o)
            .expect("kept holds every ordinal")
    };
    let device = match device {
        Device::Gpus(_) => {
            let renumbered: Vec<usize> = ordinals.iter().map(|&o| place(o)).collect();
            Device::Gpus(GpuSet::new(&renumbered).ok()?)
        }
        Device::Auto => Device::Auto,
        _ => Device::Cuda(0),
    };
    let value = kept
        .iter()
        .map(|&o| seen[o].as_str())
        .collect::<Vec<_>>()
        .join(",");
    Some(Narrowed { value, device })
}

/// A narrower `CUDA_VISIBLE_DEVICES` and the device renumbered in it (see [`narrowed`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Narrowed {
    /// The variable's new value.
    pub value: String,
    /// The device as the driver will number it.
    pub device: Device,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ordinals: &[usize]) -> Device {
        Device::Gpus(GpuSet::new(ordinals).unwrap())
    }

    fn narrow(
        device: Device,
        visible: Option<&str>,
        host: Option<usize>,
    ) -> Option<(String, Device)> {
        narrowed(device, visible, host).map(|n| (n.value, n.device))
    }

    #[test]
    fn one_gpu_of_four_is_shown_alone_and_renumbered() {
        let four = Some(4);
        assert_eq!(
            narrow(Device::Cuda(2), None, four),
            Some(("2".into(), Device::Cuda(0)))
        );
        assert_eq!(
            narrow(Device::Auto, None, four),
            Some(("0".into(), Device::Auto))
        );
        assert_eq!(
            narrow(set(&[3, 1]), None, four),
            Some(("3,1".into(), set(&[0, 1])))
        );
        // A repeated ordinal (several shards on one GPU) keeps its repeats.
        assert_eq!(
            narrow(set(&[2, 2]), None, four),
            Some(("2".into(), set(&[0, 0])))
        );
    }

    #[test]
    fn an_existing_list_is_narrowed_by_its_own_entries() {
        let visible = Some("4,5, GPU-1234 ,7");
        assert_eq!(
            narrow(Device::Cuda(2), visible, Some(8)),
            Some(("GPU-1234".into(), Device::Cuda(0)))
        );
        assert_eq!(
            narrow(set(&[3, 0]), visible, Some(8)),
            Some(("7,4".into(), set(&[0, 1])))
        );
        // The driver stops reading the list at an empty entry.
        assert_eq!(narrow(Device::Cuda(1), Some("3,,5"), Some(8)), None);
    }

    #[test]
    fn nothing_changes_where_nothing_would_be_saved_or_the_gpu_is_missing() {
        assert_eq!(narrow(Device::Cpu, None, Some(4)), None);
        assert_eq!(narrow(Device::Gpus(GpuSet::ALL), None, Some(4)), None);
        assert_eq!(narrow(Device::Auto, None, Some(1)), None);
        assert_eq!(narrow(set(&[0, 1]), None, Some(2)), None);
        assert_eq!(narrow(Device::Cuda(4), None, Some(4)), None);
        assert_eq!(narrow(Device::Cuda(0), None, None), None);
        assert_eq!(narrow(Device::Cuda(0), Some(""), Some(2)), None);
    }
}
