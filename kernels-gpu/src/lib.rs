//! Device kernels of kmeans-knn and the plain math they share with the host.
//!
//! On `nvptx64-nvidia-cuda` this crate is `no_std` and its `extern "gpu-kernel"` functions become
//! PTX entry points (`cargo xtask ptx`). On every other target only the shared modules are
//! compiled, so the host's CPU backend uses the very same distance steps, tie-break order and
//! fixed-point arithmetic as the GPU, which is what makes the two backends agree bit for bit.
#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", allow(internal_features))]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(
        abi_gpu_kernel,
        stdarch_nvptx,
        gpu_intrinsics,
        gpu_launch_sized_workgroup_mem,
        core_float_math,
        core_intrinsics,
        // Inline PTX: `cvt.rni` in `fixed`, and `mma`, `cvt.rna.tf32`, `shfl`, `cp.async` in
        // the sm_80 build's tensor-core kernels.
        asm_experimental_arch
    )
)]

pub mod assign;
pub mod assign_tf32;
pub mod bitonic;
pub mod centroids;
pub mod distance;
pub mod exec;
pub mod fixed;
pub mod knn;
pub mod knn_tf32;
pub mod launch;
pub mod math;
pub mod minibatch;
pub mod norms;
pub mod reduce;
pub mod seeding;
pub mod select;
pub mod small;
pub mod tile;
pub mod update;
pub mod vote;

#[cfg(target_arch = "nvptx64")]
mod gpu;

#[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
mod cp_async;
#[cfg(target_arch = "nvptx64")]
pub mod init;
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
pub mod mma;

#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: aborts the kernel; nothing runs after it.
    unsafe { core::arch::nvptx::trap() }
}
