//! Per-thread helpers of the tensor-core kernels (sm_80 and later): TF32 rounding and 16-byte
//! shared loads. The warp-wide `mma` and shuffles are [`crate::exec::Exec`]'s, copies are in
//! `cp_async`.

#[cfg(target_arch = "nvptx64")]
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
/// [`crate::math::tf32_round`].
#[inline(always)]
pub fn to_tf32(v: f32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    let r = {
        let r: u32;
        // SAFETY: a register-only conversion.
        unsafe {
            asm!("cvt.rna.tf32.f32 {r}, {v};", r = out(reg32) r, v = in(reg32) v,
                options(pure, nomem, nostack))
        };
        r
    };
    #[cfg(not(target_arch = "nvptx64"))]
    let r = crate::math::tf32_round(v).to_bits();
    r
}
