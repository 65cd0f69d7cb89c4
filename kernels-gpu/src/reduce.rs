//! Single-block reductions in a fixed order, so a total is the same float run after run.

use crate::gpu::{self, block_sum_f64, shared};

/// `out[0] = Σ values[0..len]`: thread `t` sums `t, t + B, …` in order, then a fixed tree.
///
/// # Safety
/// One block of a power-of-two size `B`, `8·B` bytes of dynamic shared memory.
#[unsafe(no_mangle)]
pub unsafe extern "gpu-kernel" fn sum_f64(values: *const f64, len: u32, out: *mut f64) {
    let mut acc = 0.0;
    let mut e = gpu::thread();
    while e < len as usize {
        acc += unsafe { *values.add(e) };
        e += gpu::block_dim();
    }
    let total = unsafe { block_sum_f64(shared::<f64>(), acc) };
    if gpu::thread() == 0 {
        unsafe { *out = total };
    }
}

/// `out[0] = Σ (a[e] − b[e])²` in f64, in the same fixed order as [`sum_f64`]: the centroid shift.
///
/// # Safety
/// As for [`sum_f64`]; `a`, `b` hold `len` values.
#[unsafe(no_mangle)]
pub unsafe extern "gpu-kernel" fn sum_sq_diff(
    a: *const f32,
    b: *const f32,
    len: u32,
    out: *mut f64,
) {
    let mut acc = 0.0;
    let mut e = gpu::thread();
    while e < len as usize {
        let diff = unsafe { *a.add(e) as f64 - *b.add(e) as f64 };
        acc += diff * diff;
        e += gpu::block_dim();
    }
    let total = unsafe { block_sum_f64(shared::<f64>(), acc) };
    if gpu::thread() == 0 {
        unsafe { *out = total };
    }
}
