//! Cluster sums for shapes with several points per cluster whose chunks are too small to sort:
//! each block takes a slice of `cols` columns of every cluster's sums into shared memory, adds
//! the matching columns of its chunk of points there (a group of `cols` lanes per point), then
//! adds each nonzero sum to the global sums with one atomic. A chunk of `rows` points thus
//! makes about `rows / k` times fewer global atomics than `kmeans_accumulate_global`'s one per
//! coordinate, whose contention bounded the TF32 step's update at 200,000 points. Integer sums
//! do not depend on the order of their terms, so the sums are the twin's whatever the split.

use crate::exec::{Exec, atomic_add_i64, atomic_add_u64, shared_add_i64, shared_add_u64};
use crate::fixed::{to_fixed, units_at, weighted};
use crate::launch::{BLOCK, Kernel, resident_blocks};
use crate::params::DevPtr;

/// Points a lane loads before adding them: loads in flight per lane.
const ROWS_IN_FLIGHT: usize = 4;

/// Dynamic shared memory of a `kmeans_accumulate_columns` block: `cols` fixed-point sums and
/// one u64 weight per cluster.
pub const fn accumulate_columns_bytes(k: usize, cols: usize) -> usize {
    8 * k * (cols + 1)
}

/// How `kmeans_accumulate_columns` splits the sums of `n` points: `cols` columns a block, the
/// slices of `d` side by side, and `rows` points a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnPlan {
    pub cols: usize,
    pub rows: usize,
}

impl ColumnPlan {
    /// Slices of `cols` columns over `d`.
    pub const fn slices(self, d: usize) -> usize {
        d.div_ceil(self.cols)
    }

    /// Blocks of the launch: every slice of every chunk of `rows` points.
    pub const fn grid(self, n: usize, d: usize) -> usize {
        self.slices(d) * n.div_ceil(self.rows)
    }
}

/// The split of `kmeans_accumulate_columns` for `n` points in `k` clusters of `d` dimensions
/// on `multiprocessors` with `max_shared` bytes of shared memory per block, if it pays there:
/// the widest slice (up to a warp, and no wider than `d` rounded up to a power of two) that
/// leaves at least two blocks a multiprocessor to hide the loads' latency (one where none
/// does), one wave of blocks, and at least four points per cluster in a chunk on average (else
/// the global sums' one atomic per coordinate does as well).
pub fn column_plan(
    n: usize,
    k: usize,
    d: usize,
    multiprocessors: usize,
    max_shared: usize,
) -> Option<ColumnPlan> {
    let per_sm = |cols| resident_blocks(max_shared, accumulate_columns_bytes(k, cols));
    let fits = |cols: &usize| {
        *cols <= d.max(1).next_power_of_two() && accumulate_columns_bytes(k, *cols) <= max_shared
    };
    let mut widths = [32, 16, 8, 4, 2, 1].into_iter().filter(fits);
    let cols = widths
        .clone()
        .find(|&c| per_sm(c) >= 2)
        .or(widths.next_back())?;
    let slots = per_sm(cols) * multiprocessors.max(1);
    let chunks = (slots / d.div_ceil(cols)).max(1);
    let rows = n.div_ceil(chunks);
    (rows >= 4 * k).then_some(ColumnPlan { cols, rows })
}

/// The `kmeans_accumulate_columns` entry point. CPU twin: `backend::cpu::kmeans::accumulate`.
pub const KMEANS_ACCUMULATE_COLUMNS: Kernel<AccumulateColumnsParams> =
    Kernel::new("kmeans_accumulate_columns");

kernel_params! {
    /// `kmeans_accumulate_columns`'s parameters: those of `kmeans_accumulate_global`, with `k`
    /// and the split ([`ColumnPlan`]).
    pub struct AccumulateColumnsParams {
        pub x: DevPtr<f32>,
        pub n: u32,
        pub d: u32,
        pub labels: DevPtr<u32>,
        pub k: u32,
        pub cols: u32,
        pub rows: u32,
        pub weights: DevPtr<f32>,
        pub scales: DevPtr<f32>,
        pub sums: DevPtr<i64>,
        pub counts: DevPtr<u64>,
    }
    entries: accumulate_columns_entry;
}

accumulate_columns_entry! {
    /// Block `b` adds columns `(b mod slices) · cols ..` of points `(b / slices) · rows ..` (at
    /// most `rows`) into global `sums` (`k × d`), and the blocks of the first slice their
    /// weights into `counts` (`k`), both zeroed by the host, as the module comment describes.
    ///
    /// # Safety
    /// `BLOCK` threads, [`ColumnPlan::grid`] blocks, [`accumulate_columns_bytes`]`(k, cols)` of
    /// dynamic shared memory; `cols` a power of two up to 32; labels `< k`; pointers
    /// valid for `n × d` / `n` / `d` / `k × d` / `k` elements, `weights` null or `n`.
    fn kmeans_accumulate_columns(params) {
        unsafe { accumulate_columns(crate::exec::Gpu, &params) }
    }
}

/// The body of `kmeans_accumulate_columns`.
///
/// # Safety
/// As for `kmeans_accumulate_columns`.
#[inline(always)]
pub unsafe fn accumulate_columns<E: Exec>(e: E, params: &AccumulateColumnsParams) {
    let AccumulateColumnsParams {
        x,
        n,
        d,
        labels,
        k,
        cols,
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
    // Shifts and masks, not divisions: `cols` is a power of two.
    let shift = cols.max(1).trailing_zeros();
    let cols = 1usize << shift;
    let (t, threads) = (e.thread(), BLOCK as usize);
    let slices = d.div_ceil(cols);
    let (slice, chunk) = (e.block() % slices, e.block() / slices);
    let first = chunk * rows as usize;
    let len = n.saturating_sub(first).min(rows as usize);
    let base = slice * cols;
    let shared_sums = e.shared::<i64>();
    let shared_counts = unsafe { shared_sums.add(k * cols) }.cast::<u64>();

    let mut c = t;
    while c < k * (cols + 1) {
        unsafe { *shared_sums.add(c) = 0 };
        c += threads;
    }
    e.sync();

    // Lane `t mod cols` of each group holds column `base + t mod cols` of the group's points.
    let (col, group, groups) = (t & (cols - 1), t >> shift, threads >> shift);
    let j = base + col;
    let scale = if j < d {
        unsafe { *scales.add(j) }
    } else {
        0.0
    };
    let counting = slice == 0 && col == 0;
    let mut r = group;
    while r < len {
        // Loads of several points first, so that their latencies overlap.
        let mut label = [0u32; ROWS_IN_FLIGHT];
        let mut value = [0f32; ROWS_IN_FLIGHT];
        let mut units = [0i64; ROWS_IN_FLIGHT];
        for u in 0..ROWS_IN_FLIGHT {
            let q = r + u * groups;
            if q < len {
                let i = first + q;
                label[u] = unsafe { *labels.add(i) };
                units[u] = unsafe { units_at(weights, i) };
                if j < d {
                    value[u] = unsafe { *x.add(i * d + j) };
                }
            }
        }
        for u in 0..ROWS_IN_FLIGHT {
            if r + u * groups < len {
                let cluster = label[u] as usize;
                if j < d {
                    let v = to_fixed(value[u], scale);
                    let v = if weights.is_null() {
                        v
                    } else {
                        weighted(v, units[u])
                    };
                    unsafe { shared_add_i64(shared_sums.add((cluster << shift) + col), v) };
                }
                if counting {
                    unsafe { shared_add_u64(shared_counts.add(cluster), units[u] as u64) };
                }
            }
        }
        r += ROWS_IN_FLIGHT * groups;
    }
    e.sync();

    // Consecutive threads take consecutive columns of a cluster: coalesced atomics.
    let mut s = t;
    while s < k * cols {
        let (cluster, j) = (s >> shift, base + (s & (cols - 1)));
        let v = unsafe { *shared_sums.add(s) };
        if j < d && v != 0 {
            unsafe { atomic_add_i64(sums.add(cluster * d + j), v) };
        }
        s += threads;
    }
    if slice == 0 {
        let mut c = t;
        while c < k {
            let v = unsafe { *shared_counts.add(c) };
            if v != 0 {
                unsafe { atomic_add_u64(counts.add(c), v) };
            }
            c += threads;
        }
    }
}
