//! The per-step summary, reduced in one block in a fixed order so it is the same float run
//! after run: changed labels, empty clusters, inertia and centroid shift, copied back together.

use crate::gpu::{self, block_sum_f64, shared};

/// Writes `out = [counters[0], counters[1], Σ block_inertia, Σ (next − current)²]` as f64 and
/// zeroes the counters for the next step (so no step needs a memset before it).
/// Thread `t` sums elements `t, t + B, …` in order, then a fixed tree combines the threads.
///
/// # Safety
/// One block of a power-of-two size `B`, `8·B` bytes of dynamic shared memory; `counters` holds
/// 2 values, `block_inertia` `blocks`, `next` and `current` `len`, `out` 4.
#[unsafe(no_mangle)]
pub unsafe extern "gpu-kernel" fn kmeans_summary(
    counters: *mut u32,
    block_inertia: *const f64,
    blocks: u32,
    next: *const f32,
    current: *const f32,
    len: u32,
    out: *mut f64,
) {
    let t = gpu::thread();
    let scratch = shared::<f64>();
    let mut inertia = 0.0;
    let mut e = t;
    while e < blocks as usize {
        inertia += unsafe { *block_inertia.add(e) };
        e += gpu::block_dim();
    }
    let inertia = unsafe { block_sum_f64(scratch, inertia) };
    let mut shift = 0.0;
    let mut e = t;
    let (len, bd) = (len as usize, gpu::block_dim());
    // Eight loads in flight before their (in-order) adds: the same sum, without a memory round
    // trip per element.
    while e + 7 * bd < len {
        let mut v = [0f64; 8];
        for (u, v) in v.iter_mut().enumerate() {
            let at = e + u * bd;
            *v = unsafe { *next.add(at) as f64 - *current.add(at) as f64 };
        }
        for v in v {
            shift += v * v;
        }
        e += 8 * bd;
    }
    while e < len {
        let diff = unsafe { *next.add(e) as f64 - *current.add(e) as f64 };
        shift += diff * diff;
        e += gpu::block_dim();
    }
    let shift = unsafe { block_sum_f64(scratch, shift) };
    if t == 0 {
        unsafe {
            *out = *counters as f64;
            *out.add(1) = *counters.add(1) as f64;
            *counters = 0;
            *counters.add(1) = 0;
            *out.add(2) = inertia;
            *out.add(3) = shift;
        }
    }
}
