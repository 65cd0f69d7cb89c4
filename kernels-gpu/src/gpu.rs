//! Thin device helpers for the kernels not yet written over [`Exec`]: the same thread indices,
//! barrier and dynamic shared memory as [`Gpu`]'s, plus fixed-order block reductions and
//! atomics. This module builds on `exec`, never the other way round.

use crate::exec::{Exec, Gpu};
use core::arch::nvptx;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

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
    // SAFETY: reads a special register.
    unsafe { nvptx::_block_dim_x() as usize }
}

#[inline(always)]
pub fn grid_dim() -> usize {
    // SAFETY: reads a special register.
    unsafe { nvptx::_grid_dim_x() as usize }
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

/// Integer add into shared or global memory; integer sums do not depend on the order.
///
/// # Safety
/// `p` is valid, aligned and shared only through atomics.
#[inline(always)]
pub unsafe fn atomic_add_i64(p: *mut i64, v: i64) {
    unsafe { AtomicU64::from_ptr(p.cast::<u64>()) }.fetch_add(v as u64, Ordering::Relaxed);
}

/// See [`atomic_add_i64`].
///
/// # Safety
/// As for [`atomic_add_i64`].
#[inline(always)]
pub unsafe fn atomic_add_u32(p: *mut u32, v: u32) {
    unsafe { AtomicU32::from_ptr(p) }.fetch_add(v, Ordering::Relaxed);
}

/// Adds `v` to the u64 at `p` and returns nothing; integer sums do not depend on the order.
///
/// # Safety
/// As for [`atomic_add_i64`].
#[inline(always)]
pub unsafe fn atomic_add_u64(p: *mut u64, v: u64) {
    unsafe { AtomicU64::from_ptr(p) }.fetch_add(v, Ordering::Relaxed);
}

/// Adds `v` to the u32 at `p` and returns the value it held (a slot in an output list).
///
/// # Safety
/// As for [`atomic_add_i64`].
#[inline(always)]
pub unsafe fn atomic_fetch_add_u32(p: *mut u32, v: u32) -> u32 {
    unsafe { AtomicU32::from_ptr(p) }.fetch_add(v, Ordering::Relaxed)
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
