//! Inline-PTX helpers of the tensor-core kernels (sm_80 and later): TF32 rounding, the `m16n8k8`
//! TF32 `mma`, 16-byte shared loads and warp shuffles (copies are in `cp_async`).
//!
//! Fragment layout of [`mma`] (PTX ISA, `mma.m16n8k8` with `.tf32`), for lane `l`, `g = l / 4`,
//! `q = l % 4`: A (16 × 8, row major) `a = [A[g][q], A[g + 8][q], A[g][q + 4], A[g + 8][q + 4]]`;
//! B (8 × 8, column major) `b = [B[q][g], B[q + 4][g]]`; C/D (16 × 8)
//! `c = [C[g][2q], C[g][2q + 1], C[g + 8][2q], C[g + 8][2q + 1]]`. The k index is only summed
//! over, so any relabelling of it that A and B share gives the same products.

use core::arch::asm;

/// Four words of shared memory as one 16-byte load.
///
/// # Safety
/// `p` is 16-byte aligned shared memory.
#[inline(always)]
pub unsafe fn load4(p: *const u32) -> [u32; 4] {
    #[repr(C, align(16))]
    #[derive(Clone, Copy)]
    struct U4([u32; 4]);
    let U4(v) = unsafe { *p.cast::<U4>() };
    v
}

/// `v` rounded to TF32 (round to nearest, ties away from zero), as its bits; the host twin is
/// [`crate::knn_tf32::tf32_round`].
#[inline(always)]
pub fn to_tf32(v: f32) -> u32 {
    let r: u32;
    // SAFETY: a register-only conversion.
    unsafe {
        asm!("cvt.rna.tf32.f32 {r}, {v};", r = out(reg32) r, v = in(reg32) v,
            options(pure, nomem, nostack))
    };
    r
}

/// `acc += a · b` for one 16 × 8 × 8 TF32 tile (FP32 accumulation), warp-wide.
#[inline(always)]
pub fn mma(acc: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
    // SAFETY: register-only; every lane of the warp executes it (no divergence around it).
    unsafe {
        asm!(
            "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {{{0}, {1}, {2}, {3}}}, {{{4}, {5}, {6}, {7}}}, {{{8}, {9}}}, {{{0}, {1}, {2}, {3}}};",
            inout(reg32) acc[0],
            inout(reg32) acc[1],
            inout(reg32) acc[2],
            inout(reg32) acc[3],
            in(reg32) a[0],
            in(reg32) a[1],
            in(reg32) a[2],
            in(reg32) a[3],
            in(reg32) b[0],
            in(reg32) b[1],
            options(nomem, nostack)
        )
    };
}

/// The value of lane `lane ^ mask`, warp-wide.
#[inline(always)]
pub fn shfl_xor_u32(v: u32, mask: u32) -> u32 {
    let r: u32;
    // SAFETY: register-only; every lane of the warp executes it.
    unsafe {
        asm!("shfl.sync.bfly.b32 {r}, {v}, {m}, 31, -1;", r = out(reg32) r, v = in(reg32) v,
            m = in(reg32) mask, options(nomem, nostack))
    };
    r
}

/// See [`shfl_xor_u32`].
#[inline(always)]
pub fn shfl_xor_u64(v: u64, mask: u32) -> u64 {
    let lo = shfl_xor_u32(v as u32, mask) as u64;
    let hi = shfl_xor_u32((v >> 32) as u32, mask) as u64;
    (hi << 32) | lo
}
