//! Which backend runs the work: the GPU when there is one, else the CPU.

use crate::backend::{Backend, cpu::CpuBackend, cuda};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// Where to compute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Device {
    /// The first CUDA GPU when libcuda and a device are present, else the CPU.
    #[default]
    Auto,
    /// The CPU, with rayon.
    Cpu,
    /// The CUDA GPU with this ordinal; an error when it is not usable.
    Cuda(usize),
}

impl Device {
    /// The backend for this choice; the CUDA context and module are made once per GPU.
    pub(crate) fn backend(self) -> Result<Arc<dyn Backend>> {
        match self {
            Device::Cpu => CpuBackend::shared(),
            Device::Cuda(ordinal) => Ok(cuda::CudaBackend::shared(ordinal)?),
            Device::Auto => match cuda::CudaBackend::shared(0) {
                Ok(gpu) => Ok(gpu),
                Err(_) => CpuBackend::shared(),
            },
        }
    }

    /// The concrete device `Auto` resolves to on this machine.
    pub fn resolve(self) -> Result<Device> {
        match self {
            Device::Auto => Ok(if cuda::CudaBackend::shared(0).is_ok() {
                Device::Cuda(0)
            } else {
                Device::Cpu
            }),
            Device::Cuda(n) => cuda::CudaBackend::shared(n).map(|_| self),
            Device::Cpu => Ok(self),
        }
    }

    /// A description of the backend this choice runs on, e.g. `cuda:0 (NVIDIA H100 80GB HBM3)`.
    pub fn describe(self) -> Result<String> {
        Ok(self.backend()?.describe())
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Auto => f.write_str("auto"),
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "gpu:{n}"),
        }
    }
}

impl FromStr for Device {
    type Err = Error;

    /// `auto`, `cpu`, `gpu`, `gpu:N` (also `cuda`, `cuda:N`).
    fn from_str(s: &str) -> Result<Self> {
        let lower = s.trim().to_ascii_lowercase();
        match lower.as_str() {
            "auto" => return Ok(Device::Auto),
            "cpu" => return Ok(Device::Cpu),
            "gpu" | "cuda" => return Ok(Device::Cuda(0)),
            _ => {}
        }
        let ordinal = lower
            .strip_prefix("gpu:")
            .or_else(|| lower.strip_prefix("cuda:"))
            .and_then(|n| n.parse().ok());
        ordinal.map(Device::Cuda).ok_or_else(|| {
            Error::invalid(
                "device",
                format!("'{s}' is not one of auto, cpu, gpu, gpu:N"),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_device_names() {
        assert_eq!("auto".parse::<Device>().unwrap(), Device::Auto);
        assert_eq!("CPU".parse::<Device>().unwrap(), Device::Cpu);
        assert_eq!("gpu".parse::<Device>().unwrap(), Device::Cuda(0));
        assert_eq!("gpu:2".parse::<Device>().unwrap(), Device::Cuda(2));
        assert!("tpu".parse::<Device>().is_err());
        for d in [Device::Auto, Device::Cpu, Device::Cuda(3)] {
            assert_eq!(d.to_string().parse::<Device>().unwrap(), d);
        }
    }
}
