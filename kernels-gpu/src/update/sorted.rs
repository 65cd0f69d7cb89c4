//! Cluster sums for shapes with many points per cluster: each block sorts its chunk of points
//! by label in shared memory (a counting sort), then each warp walks a share of the sorted
//! points, adds a run of points of one cluster in registers (a lane per dimension) and adds the
//! run's totals to the global sums with one atomic per coordinate. A chunk of `rows` points over
//! `k` clusters thus makes about `rows / k` times fewer global atomics than
//! `kmeans_accumulate_global`'s one per coordinate, which bound the TF32 step's update at
//! 10^7 points. Integer sums do not depend on the order of their terms, so the sums are the
//! twin's whatever the split of the runs between warps and blocks.

use crate::exec::{
    Exec, atomic_add_i64, atomic_add_u32, atomic_add_u64, atomic_fetch_add_u32, exclusive_scan,
};
use crate::fixed::{to_fixed, units_at, weighted};
use crate::launch::{BLOCK, Kernel, resident_blocks};
use crate::params::DevPtr;

/// Most points of a block: a sorted entry packs the point's row within the chunk into its low
/// [`ROW_BITS`] bits and its label above them.
pub const SORTED_MAX_ROWS: usize = 1 << ROW_BITS;

/// Bits of a sorted entry that hold the row within the chunk.
const ROW_BITS: u32 = 14;

/// Most clusters the sorted sums take: the labels above [`ROW_BITS`] and the counts and offsets
/// in shared memory.
pub const SORTED_MAX_K: usize = 4096;

/// Lanes of a warp, each adding the coordinates `lane + WARP · m` of a run.
const WARP: usize = 32;

/// Coordinates a lane holds in registers per pass over its share of the points (`d` up to
/// `WARP · LANE_DIMS` in one pass; wider rows take several).
const LANE_DIMS: usize = 4;

/// Sorted points a warp loads before adding them: loads in flight per lane.
const ROWS_IN_FLIGHT: usize = 4;

/// Dynamic shared memory of a `kmeans_accumulate_sorted` block: the clusters' counts and
/// offsets, the sorted entries of `rows` points and the scan's scratch (8-byte aligned).
pub const fn accumulate_sorted_bytes(k: usize, rows: usize) -> usize {
    8 * k + 4 * rows.next_multiple_of(2) + 8 * BLOCK as usize
}

/// Points per block of `kmeans_accumulate_sorted` for `n` points in `k` clusters of `d`
/// dimensions on `multiprocessors` with `max_shared` bytes of shared memory per block, if the
/// sorted sums pay there: whole waves of resident blocks, each with as many points as fit, and
/// at least four points per cluster in a chunk on average (else the runs are single points and
/// the global sums' one atomic per coordinate does as well); rows of at least a warp's width.
pub fn sorted_rows(
    n: usize,
    k: usize,
    d: usize,
    multiprocessors: usize,
    max_shared: usize,
) -> Option<usize> {
    if k > SORTED_MAX_K || d < WARP {
        return None;
    }
    let fit = (max_shared.saturating_sub(accumulate_sorted_bytes(k, 0)) / 8 * 2)
        .clamp(1, SORTED_MAX_ROWS);
    let per_sm = resident_blocks(max_shared, accumulate_sorted_bytes(k, fit));
    let slots = per_sm * multiprocessors.max(1);
    let waves = n.div_ceil(slots * fit).max(1);
    let rows = n.div_ceil(waves * slots);
    (rows >= 4 * k).then_some(rows)
}

/// The `kmeans_accumulate_sorted` entry point. CPU twin: `backend::cpu::kmeans::accumulate`.
pub const KMEANS_ACCUMULATE_SORTED: Kernel<AccumulateSortedParams> =
    Kernel::new("kmeans_accumulate_sorted");

kernel_params! {
    /// `kmeans_accumulate_sorted`'s parameters: those of `kmeans_accumulate_global`, with `k`
    /// and the points per block.
    pub struct AccumulateSortedParams {
        pub x: DevPtr<f32>,
        pub n: u32,
        pub d: u32,
        pub labels: DevPtr<u32>,
        pub k: u32,
        pub rows: u32,
        pub weights: DevPtr<f32>,
        pub scales: DevPtr<f32>,
        pub sums: DevPtr<i64>,
        pub counts: DevPtr<u64>,
    }
    entries: accumulate_sorted_entry;
}

accumulate_sorted_entry! {
    /// Adds block `b`'s points `b · rows ..` (at most `rows`) into global `sums` (`k × d`) and
    /// weights `counts` (`k`), zeroed by the host, as the module comment describes.
    ///
    /// # Safety
    /// `BLOCK` threads, `ceil(n / rows)` blocks, [`accumulate_sorted_bytes`]`(k, rows)` of
    /// dynamic shared memory; `rows ≤ SORTED_MAX_ROWS`, `k ≤ SORTED_MAX_K`; labels `< k`;
    /// pointers valid for `n × d` / `n` / `d` / `k × d` / `k` elements, `weights` null or `n`.
    fn kmeans_accumulate_sorted(params) {
        unsafe { accumulate_sorted(crate::exec::Gpu, &params) }
    }
}

/// The body of `kmeans_accumulate_sorted`.
///
/// # Safety
/// As for `kmeans_accumulate_sorted`.
#[inline(always)]
pub unsafe fn accumulate_sorted<E: Exec>(e: E, params: &AccumulateSortedParams) {
    let AccumulateSortedParams {
        x,
        n,
        d,
        labels,
        k,
        rows,
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
    let (n, d, k) = (n as usize, (d as usize).max(1), k as usize);
    let (t, threads) = (e.thread(), BLOCK as usize);
    let first = e.block() * rows as usize;
    let len = n.saturating_sub(first).min(rows as usize);
    let per_cluster = e.shared::<u32>();
    let (offsets, order) = unsafe { (per_cluster.add(k), per_cluster.add(2 * k)) };
    let scratch = unsafe { order.add((rows as usize).next_multiple_of(2)).cast::<f64>() };

    // Counting sort by label: counts, their exclusive scan, then each point takes the next slot
    // of its cluster (any order within a cluster: integer sums).
    let mut c = t;
    while c < k {
        unsafe { *per_cluster.add(c) = 0 };
        c += threads;
    }
    e.sync();
    let mut r = t;
    while r < len {
        unsafe { atomic_add_u32(per_cluster.add(*labels.add(first + r) as usize), 1) };
        r += threads;
    }
    e.sync();
    unsafe { exclusive_scan(e, per_cluster, offsets, k, scratch) };
    let mut r = t;
    while r < len {
        unsafe {
            let label = *labels.add(first + r);
            let slot = atomic_fetch_add_u32(offsets.add(label as usize), 1);
            *order.add(slot as usize) = (label << ROW_BITS) | r as u32;
        }
        r += threads;
    }
    e.sync();

    // Each warp takes an equal share of the sorted points; a cluster's run split between two
    // warps (or blocks) is added by both.
    let (lane, warp, warps) = (t % WARP, t / WARP, threads / WARP);
    let (from, to) = (warp * len / warps, (warp + 1) * len / warps);
    let mut base = 0;
    while base < d {
        let dims: [usize; LANE_DIMS] = core::array::from_fn(|m| base + lane + WARP * m);
        let scale: [f32; LANE_DIMS] = core::array::from_fn(|m| {
            if dims[m] < d {
                unsafe { *scales.add(dims[m]) }
            } else {
                0.0
            }
        });
        let mut run = Run::of(NO_RUN);
        let flush = |run: &Run| {
            if run.label == NO_RUN {
                return;
            }
            let row = run.label as usize * d;
            for (&j, &sum) in dims.iter().zip(&run.sums) {
                if j < d {
                    unsafe { atomic_add_i64(sums.add(row + j), sum) };
                }
            }
            if base == 0 && lane == 0 {
                unsafe { atomic_add_u64(counts.add(run.label as usize), run.units as u64) };
            }
        };
        let mut q = from;
        while q < to {
            // Loads of several points first, so that their latencies overlap.
            let mut entry = [u32::MAX; ROWS_IN_FLIGHT];
            let mut values = [[0f32; LANE_DIMS]; ROWS_IN_FLIGHT];
            let mut units = [0i64; ROWS_IN_FLIGHT];
            for u in 0..ROWS_IN_FLIGHT {
                if q + u < to {
                    entry[u] = unsafe { *order.add(q + u) };
                    let i = first + (entry[u] & ((1 << ROW_BITS) - 1)) as usize;
                    units[u] = unsafe { units_at(weights, i) };
                    for m in 0..LANE_DIMS {
                        if dims[m] < d {
                            values[u][m] = unsafe { *x.add(i * d + dims[m]) };
                        }
                    }
                }
            }
            for u in 0..ROWS_IN_FLIGHT {
                if q + u < to {
                    let label = entry[u] >> ROW_BITS;
                    if label != run.label {
                        flush(&run);
                        run = Run::of(label);
                    }
                    for m in 0..LANE_DIMS {
                        let v = to_fixed(values[u][m], scale[m]);
                        let v = if weights.is_null() {
                            v
                        } else {
                            weighted(v, units[u])
                        };
                        run.sums[m] = run.sums[m].wrapping_add(v);
                    }
                    run.units += units[u];
                }
            }
            q += ROWS_IN_FLIGHT;
        }
        flush(&run);
        base += WARP * LANE_DIMS;
    }
}

/// The label of a warp's run before its first point.
const NO_RUN: u32 = u32::MAX;

/// A warp's run of sorted points of one cluster: the lane's coordinate sums and the points'
/// units.
struct Run {
    label: u32,
    sums: [i64; LANE_DIMS],
    units: i64,
}

impl Run {
    /// An empty run of `label`.
    #[inline(always)]
    fn of(label: u32) -> Run {
        Run {
            label,
            sums: [0; LANE_DIMS],
            units: 0,
        }
    }
}
