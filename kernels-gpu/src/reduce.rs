//! The per-step summary, reduced in a fixed order so it is the same float run after run:
//! changed labels, empty clusters, fixed-point inertia and centroid shift, copied back together.

use crate::exec::{Exec, block_sum_f64, block_sum_i64};
use crate::launch::{BLOCK, Kernel, REDUCE_BLOCK};
use crate::params::DevPtr;
use crate::tile::load_vec4s;

/// Centroid coordinates per block of `kmeans_shift_parts` (`BLOCK` threads, four quads each).
pub const SHIFT_PART: usize = 16 * BLOCK as usize;

/// Dynamic shared memory of a `kmeans_shift_parts` block: an f64 per thread.
pub const SHIFT_PARTS_SHARED_BYTES: usize = 8 * BLOCK as usize;
/// Dynamic shared memory of the `kmeans_summary` block: an f64 per thread.
pub const SUMMARY_SHARED_BYTES: usize = 8 * REDUCE_BLOCK as usize;

/// The `kmeans_shift_parts` entry point. CPU twin: `backend::cpu::partial::squared_shift`.
pub const KMEANS_SHIFT_PARTS: Kernel<ShiftPartsParams> = Kernel::new("kmeans_shift_parts");

kernel_params! {
    /// `kmeans_shift_parts`'s parameters.
    pub struct ShiftPartsParams {
        pub next: DevPtr<f32>,
        pub current: DevPtr<f32>,
        pub len: u32,
        pub parts: DevPtr<f64>,
    }
    entries: shift_parts_entry;
}

/// Blocks of `kmeans_shift_parts` (and parts it writes) for `len` coordinates: one per
/// `SHIFT_PART`.
pub const fn shift_parts_grid(len: usize) -> usize {
    len.div_ceil(SHIFT_PART)
}

shift_parts_entry! {
    /// `parts[b] = Σ (next − current)²` over block `b`'s slice `b·SHIFT_PART..(b + 1)·SHIFT_PART`
    /// (clipped to `len`), in f64, in a fixed order; [`kmeans_summary`] adds the parts in block
    /// order. Spread over blocks because one block converting every coordinate to f64 took tens of
    /// microseconds for 1024 × 128 centroids.
    ///
    /// # Safety
    /// `ceil(len / SHIFT_PART)` blocks of `BLOCK` threads with `8 · BLOCK` bytes of dynamic shared
    /// memory; `next` and `current` hold `len` values, `parts` one per block.
    fn kmeans_shift_parts(params) {
        unsafe { shift_parts(crate::exec::Gpu, &params) }
    }
}

/// The body of `kmeans_shift_parts`.
///
/// # Safety
/// As for `kmeans_shift_parts`.
#[inline(always)]
pub unsafe fn shift_parts<E: Exec>(ex: E, params: &ShiftPartsParams) {
    let ShiftPartsParams {
        next,
        current,
        len,
        parts,
    } = *params;
    let (next, current, parts) = (next.as_ptr(), current.as_ptr(), parts.as_mut_ptr());
    let (t, bd) = (ex.thread(), ex.block_dim());
    let from = ex.block() * SHIFT_PART;
    let to = (from + SHIFT_PART).min(len as usize);
    let aligned = (next as usize).is_multiple_of(16) && (current as usize).is_multiple_of(16);
    let mut shift = 0.0;
    if aligned && to - from == SHIFT_PART {
        // A whole slice: every thread loads its four quads of both matrices before the adds.
        const QUADS: usize = 4;
        let mut diff = [0f64; 4 * QUADS];
        for u in 0..QUADS {
            let at = from + 4 * (t + u * bd);
            let (a, b): ([f32; 4], [f32; 4]) =
                unsafe { (load_vec4s(next.add(at)), load_vec4s(current.add(at))) };
            for w in 0..4 {
                diff[4 * u + w] = a[w] as f64 - b[w] as f64;
            }
        }
        for v in diff {
            shift += v * v;
        }
    } else {
        let mut e = from + t;
        while e < to {
            let v = unsafe { *next.add(e) as f64 - *current.add(e) as f64 };
            shift += v * v;
            e += bd;
        }
    }
    let total = unsafe { block_sum_f64(ex, ex.block_dim(), ex.shared::<f64>(), shift) };
    if t == 0 {
        unsafe { *parts.add(ex.block()) = total };
    }
}

/// The `kmeans_summary` entry point. CPU twin: `backend::cpu::kmeans::CpuLloyd::total`.
pub const KMEANS_SUMMARY: Kernel<SummaryParams> =
    Kernel::new("kmeans_summary").threads(REDUCE_BLOCK);

kernel_params! {
    /// `kmeans_summary`'s parameters.
    pub struct SummaryParams {
        pub counters: DevPtr<u32>,
        pub block_inertia: DevPtr<i64>,
        pub blocks: u32,
        pub shift_parts: DevPtr<f64>,
        pub parts: u32,
        pub out: DevPtr<f64>,
    }
    entries: summary_entry;
}

summary_entry! {
    /// Writes `out = [counters[0], counters[1], Σ block_inertia, Σ shift_parts]` as f64 and zeroes
    /// the counters for the next step (so no step needs a memset before it). Every thread sums a
    /// fixed set of elements in a fixed order, then a fixed tree combines the threads; the inertia
    /// partials are fixed-point integers (exact in any order), converted once at the end.
    ///
    /// # Safety
    /// One block of a power-of-two size `B`, `8·B` bytes of dynamic shared memory; `counters` holds
    /// 2 values, `block_inertia` `blocks`, `shift_parts` `parts`, `out` 4.
    fn kmeans_summary(params) {
        unsafe { summary(crate::exec::Gpu, &params) }
    }
}

/// The body of `kmeans_summary`.
///
/// # Safety
/// As for `kmeans_summary`.
#[inline(always)]
pub unsafe fn summary<E: Exec>(ex: E, params: &SummaryParams) {
    let SummaryParams {
        counters,
        block_inertia,
        blocks,
        shift_parts,
        parts,
        out,
    } = *params;
    let (counters, block_inertia, shift_parts, out) = (
        counters.as_mut_ptr(),
        block_inertia.as_ptr(),
        shift_parts.as_ptr(),
        out.as_mut_ptr(),
    );
    let t = ex.thread();
    let scratch = ex.shared::<f64>();
    let mut inertia = 0i64;
    let mut e = t;
    while e < blocks as usize {
        inertia = inertia.wrapping_add(unsafe { *block_inertia.add(e) });
        e += ex.block_dim();
    }
    let inertia = unsafe { block_sum_i64(ex, ex.block_dim(), scratch, inertia) };
    let mut shift = 0.0;
    let mut e = t;
    while e < parts as usize {
        shift += unsafe { *shift_parts.add(e) };
        e += ex.block_dim();
    }
    let shift = unsafe { block_sum_f64(ex, ex.block_dim(), scratch, shift) };
    if t == 0 {
        unsafe {
            *out = *counters as f64;
            *out.add(1) = *counters.add(1) as f64;
            *counters = 0;
            *counters.add(1) = 0;
            *out.add(2) = inertia as f64;
            *out.add(3) = shift;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::emu::launch;
    use crate::params::tests::{dev, dev_mut};

    /// Coordinates whose differences are multiples of 1/4 below 8: every square and every sum
    /// of them is exact in f64, so any order of the additions gives the twin's value.
    fn coords(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 31 + seed * 7) % 29) as f32 * 0.25 - 3.0)
            .collect()
    }

    #[test]
    fn emulated_shift_and_summary_equal_the_twins() {
        // One partial block, one whole block plus a partial one.
        for len in [1, 37, SHIFT_PART + 100] {
            let (next, current) = (coords(len, 1), coords(len, 2));
            // The twin: `backend::cpu::partial::squared_shift`, in row-major order.
            let want: f64 = next
                .iter()
                .zip(&current)
                .map(|(&a, &b)| (a as f64 - b as f64) * (a as f64 - b as f64))
                .sum();
            let grid = shift_parts_grid(len);
            let mut parts = vec![f64::NAN; grid];
            let p = ShiftPartsParams {
                next: dev(&next),
                current: dev(&current),
                len: len as u32,
                parts: dev_mut(&mut parts),
            };
            let threads = BLOCK as usize;
            launch(grid, threads, 8 * threads, |e| unsafe {
                shift_parts(e, &p)
            });
            assert_eq!(parts.iter().sum::<f64>(), want, "len={len}");

            // The step's four numbers, and the counters cleared for the next step.
            let mut counters = [7u32, 2];
            let block_inertia: Vec<i64> = (0..45).map(|b| b * 1_000_003 - 9).collect();
            let mut out = [f64::NAN; 4];
            let p = SummaryParams {
                counters: dev_mut(&mut counters),
                block_inertia: dev(&block_inertia),
                blocks: block_inertia.len() as u32,
                shift_parts: dev(&parts),
                parts: grid as u32,
                out: dev_mut(&mut out),
            };
            launch(1, 32, 8 * 32, |e| unsafe { summary(e, &p) });
            let inertia = block_inertia.iter().sum::<i64>() as f64;
            assert_eq!(out, [7.0, 2.0, inertia, want], "len={len}");
            assert_eq!(counters, [0, 0]);
        }
    }
}
