//! Thin device helpers for the kernels not yet written over [`Exec`]: the same thread indices,
//! barrier and dynamic shared memory as [`Gpu`]'s, plus fixed-order block reductions and
//! atomics. This module builds on `exec`, never the other way round.

use crate::exec::{Exec, Gpu};
pub use crate::exec::{atomic_add_i64, atomic_add_u32, atomic_add_u64, atomic_fetch_add_u32};

#[inline(always)]
pub fn thread() -> usize {
    Gpu.thread()
}

#[inline(always)]
pub fn block() -> usize {
    Gpu.block()
}

#[inline(always)]
pub fn block_dim() -> usize {
    Gpu.block_dim()
}

#[inline(always)]
pub fn grid_dim() -> usize {
    Gpu.grid_dim()
}

#[inline(always)]
pub fn sync_threads() {
    Gpu.sync()
}

/// The launch's dynamic shared memory, viewed as `T`.
#[inline(always)]
pub fn shared<T>() -> *mut T {
    Gpu.shared::<T>()
}

/// Sums one f64 per thread in a fixed tree order; the total is valid in every thread.
///
/// # Safety
/// `scratch` holds `block_dim()` f64 of shared memory, `block_dim()` is a power of two, and all
/// threads of the block call this.
#[inline(always)]
pub unsafe fn block_sum_f64(scratch: *mut f64, value: f64) -> f64 {
    unsafe { crate::exec::block_sum_f64(Gpu, block_dim(), scratch, value) }
}

/// Sums one i64 per thread (order-free: integers); the total is valid in every thread.
///
/// # Safety
/// As for [`block_sum_f64`].
#[inline(always)]
pub unsafe fn block_sum_i64(scratch: *mut f64, value: i64) -> i64 {
    unsafe { crate::exec::block_sum_i64(Gpu, block_dim(), scratch, value) }
}

/// The sum of `v` over the 32 lanes of the warp (every lane gets it); all lanes call this.
#[inline(always)]
pub fn warp_sum_u64(mut v: u64) -> u64 {
    let mut mask = 16;
    while mask > 0 {
        let (lo, hi) = (v as u32, (v >> 32) as u32);
        let other = (shfl_xor(lo, mask) as u64) | ((shfl_xor(hi, mask) as u64) << 32);
        v = v.wrapping_add(other);
        mask /= 2;
    }
    v
}

#[inline(always)]
fn shfl_xor(v: u32, mask: u32) -> u32 {
    let r: u32;
    // SAFETY: every lane of the warp executes this (full member mask).
    unsafe {
        core::arch::asm!("shfl.sync.bfly.b32 {r}, {v}, {m}, 31, -1;", r = out(reg32) r,
            v = in(reg32) v, m = in(reg32) mask, options(nomem, nostack));
    }
    r
}
