//! `kmeans-knn info`: what this machine offers.

use super::{CliError, Ui};
use crate::Device;
use crate::backend::cuda::{CudaBackend, describe_gpu, image};
use crate::device::visible;
use serde_json::json;

pub const EXAMPLES: &str = "\
Examples:
  kmeans-knn info
  kmeans-knn info --json
  kmeans-knn info --device gpu:1";

/// Arguments of `info`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Which GPU to describe: gpu or gpu:N (default: the one `auto` would use).
    #[arg(long, value_name = "DEVICE", default_value = "auto")]
    pub(super) device: Device,
    /// Print one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

/// The `.target` line of the embedded PTX, e.g. `sm_70`.
pub fn ptx_target() -> String {
    crate::ptx()
        .lines()
        .find_map(|l| l.trim().strip_prefix(".target "))
        .map(|t| t.trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

fn ptx_version() -> String {
    crate::ptx()
        .lines()
        .find_map(|l| l.trim().strip_prefix(".version "))
        .map(|t| t.trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

fn driver(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

pub fn run(a: Args, _ui: Ui) -> Result<(), CliError> {
    // Loading NCCL (~40 ms) overlaps asking NVML or the driver about the GPU.
    let nccl = std::thread::spawn(|| match crate::Nccl::shared() {
        Ok(n) => Ok((
            n.path.display().to_string(),
            crate::Nccl::version_text(n.version),
        )),
        Err(e) => Err(e.to_string()),
    });
    let ordinal = match a.device {
        Device::Cuda(n) => n,
        _ => 0,
    };
    // What NVML (or, where it cannot say, the driver) tells without starting a context; free
    // memory only where this process has already started the GPU.
    let gpu = crate::gpu_info(ordinal);
    let memory = CudaBackend::is_started(ordinal)
        .then(|| crate::gpu_memory(ordinal))
        .and_then(|m| m.ok());
    let backend = match (a.device, &gpu) {
        (Device::Cpu, _) | (Device::Auto, Err(_)) => Ok(Device::Cpu),
        (Device::Auto | Device::Cuda(_), Ok(_)) => Ok(Device::Cuda(ordinal)),
        (Device::Cuda(_), Err(e)) => Err(e.to_string()),
        (set @ Device::Gpus(_), _) => set.resolve().map_err(|e| e.to_string()),
    };
    let threads = rayon::current_num_threads();
    let nccl = nccl
        .join()
        .unwrap_or_else(|_| Err("loading NCCL failed".to_string()));
    let simd = crate::SimdLevel::active();
    let simd_text = match &simd {
        Ok(l) => l.name().to_string(),
        Err(e) => format!("none ({e})"),
    };
    // What the driver starts (or has started) in this process, asked without starting it.
    let started = crate::backend::cuda::visible_gpu_count();
    let host = crate::backend::cuda::driver::host_gpus();
    let narrowed = super::narrowed();
    let gpus_text = match (host, narrowed) {
        (None, _) => "none (no NVIDIA driver files)".to_string(),
        (Some(host), Some((value, asked))) => format!(
            "the driver starts {started} of {host} ({}={value}, set for --device {asked})",
            visible::VISIBLE_VAR
        ),
        (Some(host), None) => format!("the driver starts {started} of {host}"),
    };
    let chosen = match (&backend, &gpu) {
        (Ok(Device::Cuda(_)), Ok(g)) => describe_gpu(g),
        (Ok(d), _) => d.describe().unwrap_or_else(|_| d.to_string()),
        (Err(e), _) => format!("none ({e})"),
    };
    if a.json {
        let gpu_json = match &gpu {
            Ok(g) => json!({
                "ordinal": g.ordinal,
                "name": g.name,
                "compute_capability": format!("{}.{}", g.compute_capability.0, g.compute_capability.1),
                "total_memory": g.total_memory,
                "free_memory": memory.map(|m| m.0),
                "multiprocessors": g.multiprocessors,
                "driver_version": driver(g.driver_version),
                "kernels": g.kernels,
                "kernels_text": g.kernels.to_string(),
            }),
            Err(e) => json!({ "error": e.to_string() }),
        };
        return super::print_json(&json!({
            "backend": chosen,
            "device": backend.as_ref().map(|d| d.to_string()).unwrap_or_default(),
            "gpu": gpu_json,
            "ptx_target": ptx_target(),
            "ptx_version": ptx_version(),
            "cubins": image::cubin_archs(),
            "ptxas_version": image::PTXAS_VERSION,
            "gpus": {
                "host": host,
                "started": started,
                "cuda_visible_devices": std::env::var(visible::VISIBLE_VAR).ok(),
                "set_for_device": narrowed.map(|(_, asked)| asked.to_string()),
            },
            "cpu_threads": threads,
            "cpu_simd": simd_text,
            "nccl": match &nccl {
                Ok((path, version)) => json!({ "path": path, "version": version }),
                Err(e) => json!({ "error": e }),
            },
            "cpu_simd_detected": crate::SimdLevel::detected().name(),
            "min_driver": driver(crate::MIN_DRIVER_VERSION),
            "driver_entry_points": crate::DRIVER_ENTRY_POINTS
                .iter()
                .map(|&(name, since)| json!({ "name": name, "since": driver(since) }))
                .collect::<Vec<_>>(),
            "version": env!("CARGO_PKG_VERSION"),
        }));
    }
    let mut s = format!("kmeans-knn {}\n", env!("CARGO_PKG_VERSION"));
    s += &format!("  backend        {chosen}\n");
    s += &format!("  GPUs           {gpus_text}\n");
    match &gpu {
        Ok(g) => {
            s += &format!("  GPU {}          {}\n", g.ordinal, g.name);
            s += &format!(
                "  compute cap.   {}.{} ({} multiprocessors)\n",
                g.compute_capability.0, g.compute_capability.1, g.multiprocessors
            );
            let gib = |b: usize| b as f64 / (1u64 << 30) as f64;
            match &memory {
                Some((free, total)) => {
                    s += &format!(
                        "  memory         {:.1} GiB free of {:.1} GiB\n",
                        gib(*free),
                        gib(*total)
                    )
                }
                None => s += &format!("  memory         {:.1} GiB\n", gib(g.total_memory)),
            }
            s += &format!("  kernels        {}\n", g.kernels);
            s += &format!(
                "  driver         CUDA {} (CUDA {}+ supported)\n",
                driver(g.driver_version),
                driver(crate::MIN_DRIVER_VERSION)
            );
        }
        Err(e) => s += &format!("  GPU            none — {e}\n"),
    }
    s += &format!(
        "  cubins         {} (ptxas {})\n",
        image::cubin_archs().join(" "),
        image::PTXAS_VERSION
    );
    s += &format!(
        "  PTX target     {} and sm_80 (PTX ISA {}; JIT-compiled where no cubin fits)\n",
        ptx_target(),
        ptx_version()
    );
    match &nccl {
        Ok((path, version)) => s += &format!("  NCCL           {version} ({path})\n"),
        Err(e) => s += &format!("  NCCL           none — {e}\n"),
    }
    s += &format!(
        "  CPU threads    {threads} (rayon; --threads N or RAYON_NUM_THREADS to change)\n"
    );
    s += &format!(
        "  CPU SIMD       {simd_text} (detected {}; set {} to lower it)\n",
        crate::SimdLevel::detected().name(),
        crate::CPU_SIMD_VAR
    );
    super::print_stdout(&s)
}
