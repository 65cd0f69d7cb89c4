//! Which backend runs the work: the GPU when there is one, else the CPU.

pub mod cpu_rate;
mod objects;
pub mod visible;

use crate::backend::vocab::KnnLayout;
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
    /// Several CUDA GPUs of this machine (`gpu:0,1`, `gpu:all`): a k-means fit and a kNN index
    /// shard their rows over them (see [`KMeansParams::device`](crate::KMeansParams::device)
    /// and [`KnnIndex::new`](crate::KnnIndex::new)); what takes one device (mini-batch k-means,
    /// `predict`, pairwise distances) runs on the first.
    Gpus(GpuSet),
}

/// The GPUs of [`Device::Gpus`]: every visible one, or up to [`GpuSet::MAX`] ordinals in the
/// order given (an ordinal may repeat: its GPU then holds several shards, which tests use to
/// run the multi-GPU path on one GPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GpuSet {
    /// Ordinals in `ordinals[..len]`; `len == 0`: every visible GPU.
    ordinals: [u8; GpuSet::MAX],
    len: u8,
    /// How a kNN index spreads over the set.
    #[serde(default)]
    knn_layout: KnnLayout,
}

impl GpuSet {
    /// The most GPUs a set names.
    pub const MAX: usize = 16;

    /// Every GPU the driver shows.
    pub const ALL: GpuSet = GpuSet {
        ordinals: [0; GpuSet::MAX],
        len: 0,
        knn_layout: KnnLayout::Auto,
    };

    /// These ordinals (1 to [`GpuSet::MAX`] of them, each below 256).
    pub fn new(ordinals: &[usize]) -> Result<GpuSet> {
        if ordinals.is_empty() || ordinals.len() > Self::MAX {
            return Err(Error::invalid(
                "device",
                format!("a GPU set names 1 to {} GPUs", Self::MAX),
            ));
        }
        let mut set = GpuSet {
            ordinals: [0; Self::MAX],
            len: ordinals.len() as u8,
            knn_layout: KnnLayout::Auto,
        };
        for (slot, &o) in set.ordinals.iter_mut().zip(ordinals) {
            *slot = u8::try_from(o)
                .map_err(|_| Error::invalid("device", format!("GPU {o} is not an ordinal")))?;
        }
        Ok(set)
    }

    /// This set, with a kNN index over it held as `layout` (default [`KnnLayout::Auto`]).
    pub fn with_knn_layout(self, layout: KnnLayout) -> GpuSet {
        GpuSet {
            knn_layout: layout,
            ..self
        }
    }

    /// How a kNN index over this set holds its training rows.
    pub fn knn_layout(self) -> KnnLayout {
        self.knn_layout
    }

    /// The ordinals: those given, or every visible GPU's (an error when there is none).
    pub fn ordinals(self) -> Result<Vec<usize>> {
        if self.len > 0 {
            return Ok(self.ordinals[..self.len as usize]
                .iter()
                .map(|&o| o as usize)
                .collect());
        }
        match cuda::device_count() {
            0 => Err(cuda::CudaBackend::shared(0)
                .err()
                .unwrap_or_else(|| Error::invalid("device", "gpu:all found no GPU"))),
            n => Ok((0..n).collect()),
        }
    }
}

/// Multiply-adds one CPU thread does per second in the distance loops, as [`pair_work`] counts
/// them, until this host has timed a fit of its own ([`cpu_rate`]): seed 000's fit (63,504 × 75, k = 80) took 0.36 s on 16 threads of the H200 host
/// (2026-11-27), 4.3 × 10^10 of them.
const CPU_MADDS_PER_THREAD: f64 = 7.5e9;

/// Threads past which the estimate stops scaling: on the 64-core host the seeds' fits were no
/// faster on 64 threads than on 16 (quantise 1.14 s against 0.69 s, 2026-11-27).
const CPU_SCALING_THREADS: usize = 16;

/// Dimensions below which a pair costs the CPU no less: its loops run whole SIMD registers and a
/// comparison per pair (10^6 × 9, k = 16 took 0.69 s on 16 threads, 4 × the work its 9
/// dimensions alone would count).
const CPU_MIN_PAIR_DIMS: usize = 32;

/// The work of `pairs` distances in `d` dimensions: multiply-adds (at least
/// [`CPU_MIN_PAIR_DIMS`]), a pair's comparison and bookkeeping counted as 8.
pub(crate) fn pair_work(pairs: f64, d: usize) -> f64 {
    pairs * (d.max(CPU_MIN_PAIR_DIMS) as f64 + 8.0)
}

/// The seconds `threads` CPU threads, each doing `rate` multiply-adds a second, take for `work`
/// ([`pair_work`]).
fn cpu_seconds(work: f64, threads: usize, rate: f64) -> f64 {
    work / (rate * scaling_threads(threads) as f64)
}

/// The threads the estimate counts: at least one, at most [`CPU_SCALING_THREADS`].
pub(crate) fn scaling_threads(threads: usize) -> usize {
    threads.clamp(1, CPU_SCALING_THREADS)
}

impl Device {
    /// The device for a job of `pairs` distances in `d` dimensions. For `Auto`: the CPU when no
    /// GPU has started in this process yet and the CPU's threads would be done before the
    /// driver is up (a fresh process searching 1,200 queries among 32,768 rows takes 0.1 s on
    /// 16 threads against 0.4 s on the GPU, nearly all of it the driver's start); the answers
    /// are the same bits on either backend. The start's cost is this machine's, for the GPUs
    /// the driver would start (measured by the CUDA backend, for [`visible::gpus_to_start`]). Any other
    /// choice is kept.
    pub fn for_pairs(self, pairs: f64, d: usize) -> Device {
        self.for_job(pairs, d, None)
    }

    /// [`Device::for_pairs`] for a job whose CPU time this host may have recorded under `shape`
    /// ([`cpu_rate`]): the median of those seconds, where there are any, instead of the estimate.
    pub(crate) fn for_job(self, pairs: f64, d: usize, shape: Option<&str>) -> Device {
        let small = || {
            let gpus = visible::gpus_to_start().unwrap_or(1);
            let threads = rayon::current_num_threads();
            let on_cpu = shape
                .and_then(|shape| cpu_rate::seconds_of(shape, threads))
                .unwrap_or_else(|| {
                    let rate = cpu_rate::madds_per_thread(threads, CPU_MADDS_PER_THREAD);
                    cpu_seconds(pair_work(pairs, d), threads, rate)
                });
            !cuda::CudaBackend::is_started(0) && on_cpu < cuda::start_cost::expected_seconds(gpus)
        };
        if self == Device::Auto && small() {
            Device::Cpu
        } else {
            self
        }
    }

    /// The backend for this choice; the CUDA context and module are made once per GPU.
    pub(crate) fn backend(self) -> Result<Arc<dyn Backend>> {
        match self {
            Device::Cpu => CpuBackend::shared(),
            Device::Cuda(ordinal) => Ok(cuda::CudaBackend::shared(ordinal)?),
            Device::Auto => match cuda::CudaBackend::shared(0) {
                Ok(gpu) => Ok(gpu),
                Err(_) => CpuBackend::shared(),
            },
            // What takes one device (mini-batch, predict, distances) runs on the first.
            Device::Gpus(set) => Ok(cuda::CudaBackend::shared(set.ordinals()?[0])?),
        }
    }

    /// The GPUs a k-means fit shards its rows over: more than one, else `None` (one device).
    pub(crate) fn several_gpus(self) -> Result<Option<Vec<usize>>> {
        match self {
            Device::Gpus(set) => Ok(Some(set.ordinals()?).filter(|o| o.len() > 1)),
            _ => Ok(None),
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
            Device::Gpus(set) => {
                let ordinals = set.ordinals()?;
                for &o in &ordinals {
                    cuda::CudaBackend::shared(o)?;
                }
                let resolved = GpuSet::new(&ordinals)?.with_knn_layout(set.knn_layout);
                Ok(Device::Gpus(resolved))
            }
        }
    }

    /// A description of the backend this choice runs on, e.g. `cuda:0 (NVIDIA H100 80GB HBM3)`
    /// (for several GPUs, each one's, joined by `; `).
    pub fn describe(self) -> Result<String> {
        match self.several_gpus()? {
            Some(ordinals) => Ok(ordinals
                .iter()
                .map(|&o| Ok(cuda::CudaBackend::shared(o)?.describe()))
                .collect::<Result<Vec<_>>>()?
                .join("; ")),
            None => Ok(self.backend()?.describe()),
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Auto => f.write_str("auto"),
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "gpu:{n}"),
            Device::Gpus(set) if set.len == 0 => f.write_str("gpu:all"),
            Device::Gpus(set) => {
                let names: Vec<String> = set.ordinals[..set.len as usize]
                    .iter()
                    .map(u8::to_string)
                    .collect();
                write!(f, "gpu:{}", names.join(","))
            }
        }
    }
}

impl FromStr for Device {
    type Err = Error;

    /// `auto`, `cpu`, `gpu`, `gpu:N`, `gpu:N,M,…`, `gpu:all` (also `cuda…`).
    fn from_str(s: &str) -> Result<Self> {
        let lower = s.trim().to_ascii_lowercase();
        match lower.as_str() {
            "auto" => return Ok(Device::Auto),
            "cpu" => return Ok(Device::Cpu),
            "gpu" | "cuda" => return Ok(Device::Cuda(0)),
            "gpu:all" | "cuda:all" => return Ok(Device::Gpus(GpuSet::ALL)),
            _ => {}
        }
        let not_one = || {
            Error::invalid(
                "device",
                format!("'{s}' is not one of auto, cpu, gpu, gpu:N, gpu:N,M,…, gpu:all"),
            )
        };
        let list = lower
            .strip_prefix("gpu:")
            .or_else(|| lower.strip_prefix("cuda:"))
            .ok_or_else(not_one)?;
        let ordinals: Vec<usize> = list
            .split(',')
            .map(|n| n.trim().parse().map_err(|_| not_one()))
            .collect::<Result<_>>()?;
        match ordinals.as_slice() {
            &[one] => Ok(Device::Cuda(one)),
            _ => GpuSet::new(&ordinals).map(Device::Gpus),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_auto_moves_to_the_cpu_and_only_for_small_work() {
        let model = |work, threads| cpu_seconds(work, threads, CPU_MADDS_PER_THREAD);
        // Seed 004's search on 16 threads: below one GPU's start; 10^10 pairs never are.
        let seed_004 = pair_work(1200.0 * 32768.0, 256);
        assert!(model(seed_004, 16) < 0.2);
        assert!(model(pair_work(1e10, 128), 128) > 1.0);
        // One thread takes 16 times as long as sixteen, and 64 no less than 16.
        assert!(model(seed_004, 1) > 0.2);
        assert!(model(seed_004 * 3.0, 64) > 0.2);
        // A start that costs more (four GPUs started) leaves more to the CPU.
        assert!(model(seed_004 * 3.0, 16) < 1.0);
        // The seeds' fits (100 iterations + 3 passes assumed), against the 4 × H200 host's start
        // of one GPU (~0.45 s with the exit, measured 2026-11-27): seed 000's patches on the CPU
        // (0.37 s there against 0.50 on the GPU), the colour and pixel fits on the GPU.
        let fit = |n: f64, k: f64, d| pair_work(n * k * 103.0, d);
        assert!(model(fit(63_504.0, 80.0, 75), 64) < 0.45);
        assert!(model(fit(1e6, 16.0, 9), 64) > 0.45);
        assert!(model(fit(262_144.0, 255.0, 3), 64) > 0.45);
        // A host whose recorded fits ran at half the model's rate sends seed 000's to the GPU.
        let slow = CPU_MADDS_PER_THREAD / 2.0;
        assert!(cpu_seconds(fit(63_504.0, 80.0, 75), 64, slow) > 0.45);
        for device in [Device::Cpu, Device::Cuda(1), Device::Gpus(GpuSet::ALL)] {
            assert_eq!(device.for_pairs(1.0, 1), device);
            assert_eq!(device.for_pairs(1e18, 1), device);
        }
        assert_eq!(Device::Auto.for_pairs(1e18, 1), Device::Auto);
        // Small work stays on the GPU only once its driver has started (it never stops).
        let small = Device::Auto.for_pairs(1.0, 1);
        assert!(small == Device::Cpu || cuda::CudaBackend::is_started(0));
    }

    #[test]
    fn parses_device_names() {
        assert_eq!("auto".parse::<Device>().unwrap(), Device::Auto);
        assert_eq!("CPU".parse::<Device>().unwrap(), Device::Cpu);
        assert_eq!("gpu".parse::<Device>().unwrap(), Device::Cuda(0));
        assert_eq!("gpu:2".parse::<Device>().unwrap(), Device::Cuda(2));
        assert!("tpu".parse::<Device>().is_err());
        assert!("gpu:1,x".parse::<Device>().is_err());
        assert!("gpu:0,256".parse::<Device>().is_err());
        let pair = Device::Gpus(GpuSet::new(&[1, 0]).unwrap());
        assert_eq!("GPU:1, 0".parse::<Device>().unwrap(), pair);
        assert_eq!(
            "cuda:all".parse::<Device>().unwrap(),
            Device::Gpus(GpuSet::ALL)
        );
        let seventeen = vec!["0"; GpuSet::MAX + 1].join(",");
        assert!(format!("gpu:{seventeen}").parse::<Device>().is_err());
        for d in [
            Device::Auto,
            Device::Cpu,
            Device::Cuda(3),
            pair,
            Device::Gpus(GpuSet::ALL),
        ] {
            assert_eq!(d.to_string().parse::<Device>().unwrap(), d);
        }
    }
}
