//! The kernel images the backend chooses from: SASS that ptxas compiled ahead of time for one
//! architecture each (loads in milliseconds), and the PTX that the driver JIT-compiles for a GPU
//! with no matching cubin (seconds, then cached by the driver).
//!
//! A GPU of compute capability X.Y loads the sm_XY cubin, or else the cubin of major X with the
//! highest minor below Y (SASS runs on any GPU of its major with an equal or higher minor), or
//! else the PTX. When the driver rejects a cubin, or `KMEANS_KNN_FORCE_PTX=1`, the PTX is loaded
//! (test builds make the driver reject it with `KMEANS_KNN_FAULTS=wrong-cubin`).

use super::{cuda, describe};
use crate::error::Result;
use cudarc::driver::{CudaContext, CudaModule};
use cudarc::nvrtc::Ptx;
use std::sync::Arc;

/// The kernels, compiled from `kernels-gpu` by `cargo xtask ptx` for sm_70 (every GPU from
/// Volta on).
pub static PTX: &str = include_str!("../../../ptx/kernels.ptx");
/// The same kernels plus the tensor-core ones, compiled for sm_80; loaded on compute capability
/// 8.0 and later.
pub static PTX_SM80: &str = include_str!("../../../ptx/kernels_sm80.ptx");
/// The ptxas release that compiled the cubins (pinned for `cargo xtask ptx`).
pub const PTXAS_VERSION: &str = include_str!("../../../ptx/ptxas-version").trim_ascii();
/// Set to `1` to load the PTX even where a cubin matches (tests the JIT path on any GPU).
pub const FORCE_PTX_VAR: &str = "KMEANS_KNN_FORCE_PTX";

/// SASS for one architecture: `sm` is `10 × major + minor`.
struct Cubin {
    sm: i32,
    bytes: &'static [u8],
}

/// The cubins, compiled by `cargo xtask ptx` (sm_7x from the sm_70 PTX, sm_80 … sm_89 from
/// sm_80's, sm_90 from the sm_90a build, which adds Hopper's warpgroup kernels).
/// A static, not a const: one copy of the 8 MB in the binary, whatever uses it.
static CUBINS: [Cubin; 6] = [
    cubin(70, include_bytes!("../../../ptx/kernels_sm70.cubin")),
    cubin(75, include_bytes!("../../../ptx/kernels_sm75.cubin")),
    cubin(80, include_bytes!("../../../ptx/kernels_sm80.cubin")),
    cubin(86, include_bytes!("../../../ptx/kernels_sm86.cubin")),
    cubin(89, include_bytes!("../../../ptx/kernels_sm89.cubin")),
    cubin(90, include_bytes!("../../../ptx/kernels_sm90a.cubin")),
];

const fn cubin(sm: i32, bytes: &'static [u8]) -> Cubin {
    Cubin { sm, bytes }
}

/// Machine code or PTX.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum ImageKind {
    #[serde(rename = "SASS")]
    Sass,
    #[serde(rename = "PTX")]
    Ptx,
}

/// The kernel image a GPU backend loaded, e.g. `SASS sm_90 (ptxas 12.9.86)` or
/// `PTX sm_80 (JIT: no cubin for sm_100)`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct KernelImage {
    pub kind: ImageKind,
    /// The architecture it was compiled for, e.g. `sm_90`.
    pub arch: String,
    /// For SASS the compiler (`ptxas 12.9.86`); for PTX why it was loaded (`JIT: …`).
    pub detail: String,
}

impl std::fmt::Display for KernelImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            ImageKind::Sass => "SASS",
            ImageKind::Ptx => "PTX",
        };
        write!(f, "{kind} {} ({})", self.arch, self.detail)
    }
}

/// The image a GPU of compute capability `major.minor` takes: its cubin, else the PTX and why.
enum Plan {
    Cubin(&'static Cubin),
    Ptx(String),
}

fn plan(major: i32, minor: i32) -> Plan {
    if std::env::var(FORCE_PTX_VAR).is_ok_and(|v| v == "1") {
        return Plan::Ptx(format!("{FORCE_PTX_VAR}=1"));
    }
    match cubin_for(major, minor) {
        Some(cubin) => Plan::Cubin(cubin),
        None => Plan::Ptx(format!("no cubin for {}", arch(10 * major + minor))),
    }
}

fn sass_image(cubin: &Cubin) -> KernelImage {
    KernelImage {
        kind: ImageKind::Sass,
        arch: arch(cubin.sm),
        detail: format!("ptxas {PTXAS_VERSION}"),
    }
}

/// The PTX for compute capability `major` and its architecture.
fn ptx_for(major: i32) -> (&'static str, i32) {
    if major >= 8 {
        (PTX_SM80, 80)
    } else {
        (PTX, 70)
    }
}

fn ptx_image(major: i32, why: &str) -> KernelImage {
    KernelImage {
        kind: ImageKind::Ptx,
        arch: arch(ptx_for(major).1),
        detail: format!("JIT: {why}"),
    }
}

/// The image [`load`] will load for compute capability `major.minor`, told without a context
/// (unless the driver then rejects the cubin).
pub(super) fn expected(major: i32, minor: i32) -> KernelImage {
    match plan(major, minor) {
        Plan::Cubin(cubin) => sass_image(cubin),
        Plan::Ptx(why) => ptx_image(major, &why),
    }
}

/// Loads the best image for a GPU of compute capability `major.minor` into `ctx`.
pub(super) fn load(
    ctx: &Arc<CudaContext>,
    major: i32,
    minor: i32,
) -> Result<(Arc<CudaModule>, KernelImage)> {
    let why_ptx = match plan(major, minor) {
        Plan::Cubin(cubin) => {
            // A test build may hand over another major's cubin, for the driver to reject.
            let bytes = if super::faults::wrong_cubin() {
                CUBINS
                    .iter()
                    .find(|c| c.sm / 10 != major)
                    .unwrap_or(cubin)
                    .bytes
            } else {
                cubin.bytes
            };
            match ctx.load_module(Ptx::from_binary(bytes.to_vec())) {
                Ok(module) => return Ok((module, sass_image(cubin))),
                Err(e) => format!("the {} cubin was rejected: {}", arch(cubin.sm), describe(e)),
            }
        }
        Plan::Ptx(why) => why,
    };
    let module = ctx
        .load_module(Ptx::from_src(ptx_for(major).0))
        .map_err(|e| cuda("loading the PTX module", e))?;
    Ok((module, ptx_image(major, &why_ptx)))
}

/// The architectures with a cubin, e.g. `sm_70`.
pub fn cubin_archs() -> Vec<String> {
    CUBINS.iter().map(|c| arch(c.sm)).collect()
}

/// The cubin that runs on compute capability `major.minor`: the same major, the highest minor
/// not above the GPU's.
fn cubin_for(major: i32, minor: i32) -> Option<&'static Cubin> {
    CUBINS
        .iter()
        .filter(|c| c.sm / 10 == major && c.sm % 10 <= minor)
        .max_by_key(|c| c.sm)
}

fn arch(sm: i32) -> String {
    format!("sm_{sm}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_gpu_gets_the_cubin_of_its_major_with_the_nearest_lower_minor() {
        let chosen = |major, minor| cubin_for(major, minor).map(|c| c.sm);
        assert_eq!(chosen(7, 0), Some(70));
        assert_eq!(chosen(7, 2), Some(70)); // Xavier
        assert_eq!(chosen(7, 5), Some(75));
        assert_eq!(chosen(8, 0), Some(80));
        assert_eq!(chosen(8, 6), Some(86));
        assert_eq!(chosen(8, 7), Some(86)); // Orin
        assert_eq!(chosen(8, 9), Some(89));
        assert_eq!(chosen(9, 0), Some(90));
        assert_eq!(chosen(10, 0), None); // Blackwell: the sm_80 PTX
        assert_eq!(chosen(12, 0), None);
        assert_eq!(chosen(6, 1), None);
    }

    /// A cubin's ELF header names its architecture (EM_CUDA, and the SM in the low byte of
    /// e_flags): each embedded file must be the one its name says.
    #[test]
    fn every_cubin_is_sass_for_its_architecture() {
        for c in &CUBINS {
            let b = c.bytes;
            assert_eq!(&b[..4], b"\x7fELF", "sm_{} is not an ELF file", c.sm);
            assert_eq!(
                u16::from_le_bytes([b[18], b[19]]),
                190,
                "sm_{}: not EM_CUDA",
                c.sm
            );
            let flags = u32::from_le_bytes(b[48..52].try_into().unwrap());
            assert_eq!(
                (flags & 0xff) as i32,
                c.sm,
                "sm_{}: e_flags {flags:#x}",
                c.sm
            );
        }
    }

    /// CUDA 12.0 drivers JIT-compile PTX ISA 8.0 at most; the kernels need no more than 7.0.
    #[test]
    fn the_oldest_supported_driver_can_jit_the_ptx() {
        for ptx in [PTX, PTX_SM80] {
            let version = ptx.lines().find_map(|l| l.strip_prefix(".version "));
            assert_eq!(version.map(str::trim), Some("7.0"));
        }
    }

    #[test]
    fn images_describe_themselves() {
        let sass = KernelImage {
            kind: ImageKind::Sass,
            arch: arch(90),
            detail: format!("ptxas {PTXAS_VERSION}"),
        };
        assert!(
            sass.to_string().starts_with("SASS sm_90 (ptxas 12."),
            "{sass}"
        );
        let json = serde_json::to_value(&sass).unwrap();
        assert_eq!(json["kind"], "SASS");
        assert_eq!(json["arch"], "sm_90");
    }
}
