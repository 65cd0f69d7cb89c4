//! The per-step summary, reduced in one block in a fixed order so it is the same float run
//! after run: changed labels, empty clusters, inertia and centroid shift, copied back together.

use crate::gpu::{self, block_sum_f64, shared};
use crate::tile::load_vec4s;

/// Writes `out = [counters[0], counters[1], Σ block_inertia, Σ (next − current)²]` as f64 and
/// zeroes the counters for the next step (so no step needs a memset before it).
/// Every thread sums a fixed set of elements in a fixed order, then a fixed tree combines the
/// threads.
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
    let (len, bd) = (len as usize, gpu::block_dim());
    // One block reads all k × d values of both matrices, so what bounds it is the bytes in
    // flight: with 16-byte alignment, thread t takes the quads t, t + B, … (four quads of each
    // matrix loaded before their in-order adds), the rest one value at a time.
    let mut e = t;
    if (next as usize).is_multiple_of(16) && (current as usize).is_multiple_of(16) {
        let quads = len / 4;
        let mut qd = t;
        while qd + 3 * bd < quads {
            let mut diff = [0f64; 16];
            for u in 0..4 {
                let at = 4 * (qd + u * bd);
                let (a, b): ([f32; 4], [f32; 4]) =
                    unsafe { (load_vec4s(next.add(at)), load_vec4s(current.add(at))) };
                for w in 0..4 {
                    diff[4 * u + w] = a[w] as f64 - b[w] as f64;
                }
            }
            for v in diff {
                shift += v * v;
            }
            qd += 4 * bd;
        }
        while qd < quads {
            let (a, b): ([f32; 4], [f32; 4]) = unsafe {
                (
                    load_vec4s(next.add(4 * qd)),
                    load_vec4s(current.add(4 * qd)),
                )
            };
            for w in 0..4 {
                let v = a[w] as f64 - b[w] as f64;
                shift += v * v;
            }
            qd += bd;
        }
        e = 4 * quads + t;
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
