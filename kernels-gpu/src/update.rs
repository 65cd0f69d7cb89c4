//! Centroid update: fixed-point per-cluster sums and weights, then means.
//!
//! Sums are 64-bit integers (see [`crate::fixed`]), so the result does not depend on which thread
//! or block adds first: per-block partials live in shared memory and are combined across blocks
//! in block order by `kmeans_finalize`. With sample weights (`weights` not null: each point's
//! integer units) a point adds `units · q` to the sums and `units` to its cluster's weight;
//! without them, `q` and 1 (the count).

pub mod columns;
pub mod sorted;

use crate::exec::{
    Exec, atomic_add_i64, atomic_add_u32, atomic_add_u64, shared_add_i64, shared_add_u64,
};
use crate::fixed::{mean, to_fixed, units_at, weighted};
use crate::launch::{BLOCK, DEFAULT_SHARED_BYTES, Kernel};
use crate::math::normalize;
use crate::params::DevPtr;

/// Dynamic shared memory of a `kmeans_accumulate_shared` block: the `k × d` fixed-point sums
/// and `k` u64 weights of its part ([`sums_fit_shared`] checks that they fit).
pub const fn accumulate_shared_bytes(k: usize, d: usize) -> usize {
    8 * k * d + 8 * k
}

/// The `kmeans_accumulate_shared` entry point. CPU twin: `backend::cpu::kmeans::accumulate`.
pub const KMEANS_ACCUMULATE_SHARED: Kernel<AccumulateSharedParams> =
    Kernel::new("kmeans_accumulate_shared");

kernel_params! {
    /// `kmeans_accumulate_shared`'s parameters.
    pub struct AccumulateSharedParams {
        pub x: DevPtr<f32>,
        pub n: u32,
        pub d: u32,
        pub labels: DevPtr<u32>,
        pub k: u32,
        pub weights: DevPtr<f32>,
        pub scales: DevPtr<f32>,
        pub part_sums: DevPtr<i64>,
        pub part_counts: DevPtr<u64>,
    }
    entries: accumulate_shared_entry;
}

/// Whether per-block fixed-point sums of `k × d` values (plus `k` u64 cluster weights) fit in
/// shared memory: the `8·k·d + 8·k` bytes of `kmeans_accumulate_shared`.
pub fn sums_fit_shared(k: usize, d: usize) -> bool {
    d.checked_add(1)
        .and_then(|d1| k.checked_mul(d1))
        .and_then(|cells| cells.checked_mul(8))
        .is_some_and(|b| b <= DEFAULT_SHARED_BYTES)
}

accumulate_shared_entry! {
    /// Per-block partial sums: block `b` sums the labels' (weighted) coordinates of its contiguous
    /// chunk of points into shared memory (`k × d` i64 then `k` u64 weights) and writes them to
    /// `part_sums[b]`, `part_counts[b]`.
    ///
    /// # Safety
    /// Pointers valid for `n × d` / `n` / `d` / `grid × k × d` / `grid × k` elements, `weights` null
    /// or `n`; labels `< k`; dynamic shared memory of `8·k·d + 8·k` bytes.
    fn kmeans_accumulate_shared(params) {
        unsafe { accumulate_shared(crate::exec::Gpu, &params) }
    }
}

/// The body of `kmeans_accumulate_shared`.
///
/// # Safety
/// As for `kmeans_accumulate_shared`.
#[inline(always)]
pub unsafe fn accumulate_shared<E: Exec>(ex: E, params: &AccumulateSharedParams) {
    let AccumulateSharedParams {
        x,
        n,
        d,
        labels,
        k,
        weights,
        scales,
        part_sums,
        part_counts,
    } = *params;
    let (x, labels, weights, scales, part_sums, part_counts) = (
        x.as_ptr(),
        labels.as_ptr(),
        weights.as_ptr(),
        scales.as_ptr(),
        part_sums.as_mut_ptr(),
        part_counts.as_mut_ptr(),
    );
    // `max(1)` lets the compiler drop the division-by-zero panics; the host never passes 0.
    let (n, d, k) = (n as usize, (d as usize).max(1), k as usize);
    let (t, threads, b) = (ex.thread(), ex.block_dim(), ex.block());
    let chunk = n.div_ceil(ex.grid_dim().max(1));
    let start = (b * chunk).min(n);
    let end = (start + chunk).min(n);
    let sums = ex.shared::<i64>();
    let counts = unsafe { sums.add(k * d) }.cast::<u64>();
    unsafe {
        let mut e = t;
        while e < k * d {
            *sums.add(e) = 0;
            e += threads;
        }
        let mut c = t;
        while c < k {
            *counts.add(c) = 0;
            c += threads;
        }
        ex.sync();

        let mut e = t;
        while e < (end - start) * d {
            let i = start + e / d;
            let j = e % d;
            let label = *labels.add(i) as usize;
            let q = to_fixed(*x.add(start * d + e), *scales.add(j));
            let q = if weights.is_null() {
                q
            } else {
                weighted(q, units_at(weights, i))
            };
            shared_add_i64(sums.add(label * d + j), q);
            e += threads;
        }
        let mut i = start + t;
        while i < end {
            shared_add_u64(
                counts.add(*labels.add(i) as usize),
                units_at(weights, i) as u64,
            );
            i += threads;
        }
        ex.sync();

        let mut e = t;
        while e < k * d {
            *part_sums.add(b * k * d + e) = *sums.add(e);
            e += threads;
        }
        let mut c = t;
        while c < k {
            *part_counts.add(b * k + c) = *counts.add(c);
            c += threads;
        }
    }
}

/// Blocks of `kmeans_accumulate_global` for `n` points of `d` dimensions (a grid-stride loop
/// over the coordinates): one thread per coordinate, at most 8 blocks per multiprocessor.
pub const fn accumulate_global_grid(n: usize, d: usize, multiprocessors: usize) -> usize {
    let blocks = (n * d).div_ceil(BLOCK as usize);
    let cap = 8 * multiprocessors;
    if blocks < cap { blocks } else { cap }
}

/// The `kmeans_accumulate_global` entry point. CPU twin: `backend::cpu::kmeans::accumulate`.
pub const KMEANS_ACCUMULATE_GLOBAL: Kernel<AccumulateGlobalParams> =
    Kernel::new("kmeans_accumulate_global");

kernel_params! {
    /// `kmeans_accumulate_global`'s parameters.
    pub struct AccumulateGlobalParams {
        pub x: DevPtr<f32>,
        pub n: u32,
        pub d: u32,
        pub labels: DevPtr<u32>,
        pub weights: DevPtr<f32>,
        pub scales: DevPtr<f32>,
        pub sums: DevPtr<i64>,
        pub counts: DevPtr<u64>,
    }
    entries: accumulate_global_entry;
}

accumulate_global_entry! {
    /// Sums straight into global `sums` (`k × d`) and weights `counts` (`k`), zeroed by the host; for
    /// shapes whose per-block sums do not fit in shared memory. Grid-stride over all `n × d` values.
    ///
    /// # Safety
    /// As for [`kmeans_accumulate_shared`], with `sums`/`counts` of `k × d` / `k` elements.
    fn kmeans_accumulate_global(params) {
        unsafe { accumulate_global(crate::exec::Gpu, &params) }
    }
}

/// The body of `kmeans_accumulate_global`.
///
/// # Safety
/// As for `kmeans_accumulate_global`.
#[inline(always)]
pub unsafe fn accumulate_global<E: Exec>(ex: E, params: &AccumulateGlobalParams) {
    let AccumulateGlobalParams {
        x,
        n,
        d,
        labels,
        weights,
        scales,
        sums,
        counts,
    } = *params;
    let (x, labels, weights, scales, sums, counts) = (
        x.as_ptr(),
        labels.as_ptr(),
        weights.as_ptr(),
        scales.as_ptr(),
        sums.as_mut_ptr(),
        counts.as_mut_ptr(),
    );
    let (n, d) = (n as usize, (d as usize).max(1));
    let stride = ex.grid_dim() * ex.block_dim();
    let first = ex.block() * ex.block_dim() + ex.thread();
    if d >= WARP {
        // A warp per row: its label is read once, the row's values coalesced, and no division
        // per value (integer sums: any order gives the same result).
        let (lane, warps) = (first % WARP, stride / WARP);
        let mut i = first / WARP;
        while i < n {
            unsafe {
                let label = *labels.add(i) as usize;
                let units = units_at(weights, i);
                let mut j = lane;
                while j < d {
                    let q = to_fixed(*x.add(i * d + j), *scales.add(j));
                    let q = if weights.is_null() {
                        q
                    } else {
                        weighted(q, units)
                    };
                    atomic_add_i64(sums.add(label * d + j), q);
                    j += WARP;
                }
                if lane == 0 {
                    atomic_add_u64(counts.add(label), units as u64);
                }
            }
            i += warps;
        }
        return;
    }
    unsafe {
        let mut e = first;
        while e < n * d {
            let i = e / d;
            let j = e % d;
            let label = *labels.add(i) as usize;
            let q = to_fixed(*x.add(e), *scales.add(j));
            let q = if weights.is_null() {
                q
            } else {
                weighted(q, units_at(weights, i))
            };
            atomic_add_i64(sums.add(label * d + j), q);
            e += stride;
        }
        let mut i = first;
        while i < n {
            atomic_add_u64(
                counts.add(*labels.add(i) as usize),
                units_at(weights, i) as u64,
            );
            i += stride;
        }
    }
}

/// Threads per warp; [`kmeans_finalize`] gives each centroid coordinate one warp.
const WARP: usize = 32;

/// Dynamic shared memory of a `kmeans_finalize` block: 16 bytes per thread.
pub const FINALIZE_SHARED_BYTES: usize = 16 * BLOCK as usize;

/// The `kmeans_finalize` entry point. CPU twin: `backend::cpu::partial::Partial::finish`.
pub const KMEANS_FINALIZE: Kernel<FinalizeParams> = Kernel::new("kmeans_finalize");

kernel_params! {
    /// `kmeans_finalize`'s parameters.
    pub struct FinalizeParams {
        pub part_sums: DevPtr<i64>,
        pub part_counts: DevPtr<u64>,
        pub parts: u32,
        pub k: u32,
        pub d: u32,
        pub inv_scales: DevPtr<f64>,
        pub old_centroids: DevPtr<f32>,
        pub new_centroids: DevPtr<f32>,
        pub sizes: DevPtr<u64>,
        pub empty: DevPtr<u32>,
    }
    entries: finalize_entry;
}

/// Blocks of `kmeans_finalize` for `k × d` coordinates from `parts` partial sums (a grid-stride
/// loop): one warp per coordinate (one thread with a single part), at most 16 blocks per
/// multiprocessor.
pub const fn finalize_grid(k: usize, d: usize, parts: usize, multiprocessors: usize) -> usize {
    let per_block = if parts == 1 {
        BLOCK as usize
    } else {
        BLOCK as usize / 32
    };
    let blocks = (k * d).div_ceil(per_block);
    let cap = 16 * multiprocessors;
    if blocks < cap { blocks } else { cap }
}

finalize_entry! {
    /// Combines the `parts` partial sums and weights and writes the means to `new_centroids`; a
    /// cluster without weight keeps its `old_centroids` row and is counted in `empty`. Writes each
    /// cluster's weight to `sizes`. One warp per centroid coordinate: lanes add every 32nd part, then
    /// lane 0 adds the lanes' totals in lane order (integer sums: exact in any order, so
    /// reproducible). With one part, one thread per coordinate.
    ///
    /// # Safety
    /// `part_sums`: `parts × k × d`; `part_counts`: `parts × k`; `inv_scales`: `d`; centroid
    /// buffers `k × d`; `sizes`: `k`; `empty`: one u32 zeroed by the host; blocks of a multiple of
    /// 32 threads with `16 × block size` bytes of dynamic shared memory.
    fn kmeans_finalize(params) {
        unsafe { finalize(crate::exec::Gpu, &params) }
    }
}

/// The body of `kmeans_finalize`.
///
/// # Safety
/// As for `kmeans_finalize`.
#[inline(always)]
pub unsafe fn finalize<E: Exec>(ex: E, params: &FinalizeParams) {
    let FinalizeParams {
        part_sums,
        part_counts,
        parts,
        k,
        d,
        inv_scales,
        old_centroids,
        new_centroids,
        sizes,
        empty,
    } = *params;
    let (part_sums, part_counts, inv_scales, old_centroids, new_centroids, sizes, empty) = (
        part_sums.as_ptr(),
        part_counts.as_ptr(),
        inv_scales.as_ptr(),
        old_centroids.as_ptr(),
        new_centroids.as_mut_ptr(),
        sizes.as_mut_ptr(),
        empty.as_mut_ptr(),
    );
    let (parts, k, d) = (parts as usize, k as usize, (d as usize).max(1));
    let (t, threads) = (ex.thread(), ex.block_dim());
    let (warp, lane) = (t / WARP, t % WARP);
    let warps_per_block = threads / WARP;
    if parts == 1 {
        // One part (the global sums): a thread per coordinate, no cross-lane combining.
        let stride = ex.grid_dim() * threads;
        let mut e = ex.block() * threads + t;
        while e < k * d {
            let (c, j) = (e / d, e % d);
            unsafe {
                let count = *part_counts.add(c);
                *new_centroids.add(e) = if count > 0 {
                    mean(*part_sums.add(e), *inv_scales.add(j), count)
                } else {
                    *old_centroids.add(e)
                };
                if j == 0 {
                    *sizes.add(c) = count;
                    if count == 0 {
                        atomic_add_u32(empty, 1);
                    }
                }
            }
            e += stride;
        }
        return;
    }
    let lane_sums = ex.shared::<i64>();
    let lane_counts = unsafe { lane_sums.add(threads) }.cast::<u64>();
    // Uniform trip count across the block, so the barriers below are reached by every thread.
    let mut base = ex.block() * warps_per_block;
    while base < k * d {
        let e = base + warp;
        let (mut sum, mut count) = (0i64, 0u64);
        if e < k * d {
            let c = e / d;
            let mut p = lane;
            while p < parts {
                unsafe {
                    sum += *part_sums.add(p * k * d + e);
                    count += *part_counts.add(p * k + c);
                }
                p += WARP;
            }
        }
        unsafe {
            *lane_sums.add(t) = sum;
            *lane_counts.add(t) = count;
        }
        ex.sync();
        if lane == 0 && e < k * d {
            let (c, j) = (e / d, e % d);
            let (mut sum, mut count) = (0i64, 0u64);
            for l in 0..WARP {
                unsafe {
                    sum += *lane_sums.add(t + l);
                    count += *lane_counts.add(t + l);
                }
            }
            unsafe {
                *new_centroids.add(e) = if count > 0 {
                    mean(sum, *inv_scales.add(j), count)
                } else {
                    *old_centroids.add(e)
                };
                if j == 0 {
                    *sizes.add(c) = count;
                    if count == 0 {
                        atomic_add_u32(empty, 1);
                    }
                }
            }
        }
        ex.sync();
        base += ex.grid_dim() * warps_per_block;
    }
}

/// The `kmeans_normalize_rows` entry point. CPU twin: [`crate::math::normalize`].
pub const KMEANS_NORMALIZE_ROWS: Kernel<NormalizeRowsParams> = Kernel::new("kmeans_normalize_rows");

kernel_params! {
    /// `kmeans_normalize_rows`'s parameters.
    pub struct NormalizeRowsParams {
        pub centroids: DevPtr<f32>,
        pub sizes: DevPtr<u64>,
        pub k: u32,
        pub d: u32,
    }
    entries: normalize_rows_entry;
}

/// Blocks of `kmeans_normalize_rows` for `k` centroids: a thread per centroid.
pub const fn normalize_rows_grid(k: usize) -> usize {
    k.div_ceil(BLOCK as usize)
}

normalize_rows_entry! {
    /// Spherical k-means: scales every centroid row `c` with weight (`sizes[c] > 0`) to unit length
    /// with [`normalize`], as the CPU twin does after its update (rows without weight keep theirs).
    /// One thread per row.
    ///
    /// # Safety
    /// `centroids` holds `k × d` values, `sizes` `k`; at least `k` threads in all.
    fn kmeans_normalize_rows(params) {
        unsafe { normalize_rows(crate::exec::Gpu, &params) }
    }
}

/// The body of `kmeans_normalize_rows`.
///
/// # Safety
/// As for `kmeans_normalize_rows`.
#[inline(always)]
pub unsafe fn normalize_rows<E: Exec>(ex: E, params: &NormalizeRowsParams) {
    let NormalizeRowsParams {
        centroids,
        sizes,
        k,
        d,
    } = *params;
    let (centroids, sizes) = (centroids.as_mut_ptr(), sizes.as_ptr());
    let c = ex.block() * ex.block_dim() + ex.thread();
    let d = d as usize;
    if c < k as usize && unsafe { *sizes.add(c) } > 0 {
        normalize(unsafe { core::slice::from_raw_parts_mut(centroids.add(c * d), d) });
    }
}

#[cfg(test)]
mod tests;
