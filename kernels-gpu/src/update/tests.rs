//! The update kernels in the emulator against the CPU twin's formulas (`backend::cpu::kmeans::
//! accumulate`, `Partial::finish`, `math::normalize`): fixed-point sums and weights, then means.

use super::*;
use crate::exec::emu::launch;
use crate::fixed::{inv_pow2_f64, pow2_f32, scale_exponent, weight_units};
use crate::params::tests::{dev, dev_mut};

/// Values on a coarse grid (repeats and ties), a few of them large.
fn values(len: usize, seed: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 7919 + seed * 104_729) % 17) as f32 * 0.625 - 5.0)
        .collect()
}

/// A shape of the test: points, dimensions, clusters (some left empty), sample weights.
struct Case {
    x: Vec<f32>,
    labels: Vec<u32>,
    weights: Option<Vec<f32>>,
    n: usize,
    d: usize,
    k: usize,
    scales: Vec<f32>,
    inv_scales: Vec<f64>,
}

impl Case {
    fn new(n: usize, d: usize, k: usize, weighted: bool) -> Case {
        let x = values(n * d, d);
        // Cluster k − 1 stays empty when k > 1.
        let labels = (0..n).map(|i| ((i * 5) % (k - 1).max(1)) as u32).collect();
        let weights = weighted.then(|| (0..n).map(|i| (i % 4) as f32 * 0.5).collect());
        let exps: Vec<i32> = (0..d).map(|_| scale_exponent(5.0, n)).collect();
        Case {
            x,
            labels,
            weights,
            n,
            d,
            k,
            scales: exps.iter().map(|&s| pow2_f32(s)).collect(),
            inv_scales: exps.iter().map(|&s| inv_pow2_f64(s)).collect(),
        }
    }

    /// The twin's sums and weights: every point's fixed-point coordinates times its units.
    fn sums(&self) -> (Vec<i64>, Vec<u64>) {
        let (mut sums, mut counts) = (vec![0i64; self.k * self.d], vec![0u64; self.k]);
        for i in 0..self.n {
            let units = weight_units(self.weights.as_ref().map(|w| w[i]));
            let c = self.labels[i] as usize;
            counts[c] += units as u64;
            for j in 0..self.d {
                let q = to_fixed(self.x[i * self.d + j], self.scales[j]);
                sums[c * self.d + j] = sums[c * self.d + j].wrapping_add(weighted(q, units));
            }
        }
        (sums, counts)
    }

    fn weights(&self) -> DevPtr<f32> {
        self.weights.as_deref().map_or(DevPtr::NULL, dev)
    }
}

/// The twin's means: a cluster with weight takes its mean, one without keeps its old row.
fn means(case: &Case, sums: &[i64], counts: &[u64], old: &[f32]) -> Vec<f32> {
    (0..case.k * case.d)
        .map(|e| match counts[e / case.d] {
            0 => old[e],
            w => mean(sums[e], case.inv_scales[e % case.d], w),
        })
        .collect()
}

/// Runs `kmeans_finalize` over `parts` partial sums; returns the centroids, sizes and empties.
fn finalize_parts(
    case: &Case,
    part_sums: &[i64],
    part_counts: &[u64],
    parts: usize,
    old: &[f32],
) -> (Vec<f32>, Vec<u64>, u32) {
    let (k, d) = (case.k, case.d);
    let mut next = vec![f32::NAN; k * d];
    let mut sizes = vec![u64::MAX; k];
    let mut empty = [0u32];
    let p = FinalizeParams {
        part_sums: dev(part_sums),
        part_counts: dev(part_counts),
        parts: parts as u32,
        k: k as u32,
        d: d as u32,
        inv_scales: dev(&case.inv_scales),
        old_centroids: dev(old),
        new_centroids: dev_mut(&mut next),
        sizes: dev_mut(&mut sizes),
        empty: dev_mut(&mut empty),
    };
    let threads = 64;
    launch(3, threads, 16 * threads, |e| unsafe { finalize(e, &p) });
    (next, sizes, empty[0])
}

#[test]
fn emulated_update_steps_equal_the_twins() {
    // n not a multiple of the block, d = 1, k = 1, k = n, weights with zeros.
    for (n, d, k, weighted) in [
        (1, 1, 1, false),
        (37, 1, 3, true),
        (70, 3, 5, false),
        (33, 5, 33, true),
        (100, 7, 4, true),
    ] {
        let case = Case::new(n, d, k, weighted);
        let tag = format!("n={n} d={d} k={k} weighted={weighted}");
        let (want_sums, want_counts) = case.sums();
        let old = values(k * d, 3);
        let want = means(&case, &want_sums, &want_counts, &old);
        let want_empty = want_counts.iter().filter(|&&c| c == 0).count() as u32;

        // Per-block parts in shared memory, then the fixed-order combination.
        let parts = 3;
        let mut part_sums = vec![i64::MIN; parts * k * d];
        let mut part_counts = vec![u64::MAX; parts * k];
        let p = AccumulateSharedParams {
            x: dev(&case.x),
            n: n as u32,
            d: d as u32,
            labels: dev(&case.labels),
            k: k as u32,
            weights: case.weights(),
            scales: dev(&case.scales),
            part_sums: dev_mut(&mut part_sums),
            part_counts: dev_mut(&mut part_counts),
        };
        launch(parts, 32, accumulate_shared_bytes(k, d), |e| unsafe {
            accumulate_shared(e, &p)
        });
        let (next, sizes, empty) = finalize_parts(&case, &part_sums, &part_counts, parts, &old);
        assert_eq!(next, want, "shared sums, {tag}");
        assert_eq!((sizes, empty), (want_counts.clone(), want_empty), "{tag}");

        // One global set by atomics, then the one-part finalize.
        let mut sums = vec![0i64; k * d];
        let mut counts = vec![0u64; k];
        let p = AccumulateGlobalParams {
            x: dev(&case.x),
            n: n as u32,
            d: d as u32,
            labels: dev(&case.labels),
            weights: case.weights(),
            scales: dev(&case.scales),
            sums: dev_mut(&mut sums),
            counts: dev_mut(&mut counts),
        };
        launch(2, 64, 0, |e| unsafe { accumulate_global(e, &p) });
        assert_eq!(
            (&sums, &counts),
            (&want_sums, &want_counts),
            "global sums, {tag}"
        );
        let (mut next, sizes, empty) = finalize_parts(&case, &sums, &counts, 1, &old);
        assert_eq!(next, want, "one part, {tag}");
        assert_eq!((&sizes, empty), (&want_counts, want_empty), "{tag}");

        // Spherical k-means: rows with weight to unit length.
        let mut want_unit = want.clone();
        for (c, row) in want_unit.chunks_mut(d).enumerate() {
            if want_counts[c] > 0 {
                normalize(row);
            }
        }
        let p = NormalizeRowsParams {
            centroids: dev_mut(&mut next),
            sizes: dev(&sizes),
            k: k as u32,
            d: d as u32,
        };
        launch(k.div_ceil(32), 32, 0, |e| unsafe { normalize_rows(e, &p) });
        assert_eq!(next, want_unit, "normalized, {tag}");
    }
}

#[test]
fn shared_sums_count_their_u64_weights() {
    // 8·k·d + 8·k bytes: k = 1, d = 6143 fills 48 KiB exactly; one more dimension does not.
    assert!(sums_fit_shared(1, 6143));
    assert!(!sums_fit_shared(1, 6144));
    assert!(sums_fit_shared(64, 95) && !sums_fit_shared(64, 96));
    assert!(!sums_fit_shared(usize::MAX, 2));
}

#[test]
fn emulated_sorted_sums_equal_the_twin() {
    // Chunks not a multiple of the block (or odd), d = 1, d past one pass of the lanes
    // (`WARP · LANE_DIMS` = 128), k = 1 (one run over every warp and block), k = n, weights.
    for (n, d, k, rows, weighted) in [
        (1, 1, 1, 1, false),
        (1000, 1, 1, 300, true),
        (777, 33, 5, 100, false),
        (500, 200, 7, 37, true),
        (300, 40, 300, 64, false),
        (2000, 129, 3, 2000, true),
    ] {
        let case = Case::new(n, d, k, weighted);
        let tag = format!("n={n} d={d} k={k} rows={rows} weighted={weighted}");
        let (want_sums, want_counts) = case.sums();
        let mut sums = vec![0i64; k * d];
        let mut counts = vec![0u64; k];
        let p = sorted::AccumulateSortedParams {
            x: dev(&case.x),
            n: n as u32,
            d: d as u32,
            labels: dev(&case.labels),
            k: k as u32,
            rows: rows as u32,
            weights: case.weights(),
            scales: dev(&case.scales),
            sums: dev_mut(&mut sums),
            counts: dev_mut(&mut counts),
        };
        let grid = n.div_ceil(rows);
        let bytes = sorted::accumulate_sorted_bytes(k, rows);
        launch(grid, BLOCK as usize, bytes, |e| unsafe {
            sorted::accumulate_sorted(e, &p)
        });
        assert_eq!((&sums, &counts), (&want_sums, &want_counts), "{tag}");
    }
}

#[test]
fn sorted_rows_take_shapes_with_several_points_per_cluster() {
    // E (10^7 × 128, k = 1,024) on 132 multiprocessors with 227 KiB a block: 16,384 rows fit,
    // three blocks a multiprocessor, two waves of 396 blocks.
    let max_shared = 227 * 1024;
    assert_eq!(
        sorted::sorted_rows(10_000_000, 1024, 128, 132, max_shared),
        Some(10_000_000usize.div_ceil(2 * 396))
    );
    // D (200,000 points): 506 rows a block, under four points per cluster.
    assert_eq!(
        sorted::sorted_rows(200_000, 1024, 128, 132, max_shared),
        None
    );
    // Narrow rows, too many clusters, too little shared memory.
    assert_eq!(
        sorted::sorted_rows(10_000_000, 64, 16, 132, max_shared),
        None
    );
    assert_eq!(
        sorted::sorted_rows(10_000_000, 8192, 128, 132, max_shared),
        None
    );
    assert_eq!(
        sorted::sorted_rows(10_000_000, 1024, 128, 132, 16 * 1024),
        None
    );
    let rows = sorted::sorted_rows(10_000_000, 1024, 128, 132, 48 * 1024).unwrap();
    assert!(sorted::accumulate_sorted_bytes(1024, rows) <= 48 * 1024);
}

#[test]
fn emulated_column_sums_equal_the_twin() {
    // Chunks not a multiple of the block, d = 1, d not a multiple of the slice, one slice
    // wider than d, k = 1 (every lane on one cluster), k = n, weights.
    for (n, d, k, cols, rows, weighted) in [
        (1, 1, 1, 1, 1, false),
        (1000, 1, 1, 1, 300, true),
        (777, 33, 5, 8, 100, false),
        (500, 200, 7, 16, 37, true),
        (300, 40, 300, 32, 64, false),
        (2000, 129, 3, 4, 2000, true),
        (90, 3, 2, 4, 50, true),
    ] {
        let case = Case::new(n, d, k, weighted);
        let tag = format!("n={n} d={d} k={k} cols={cols} rows={rows} weighted={weighted}");
        let (want_sums, want_counts) = case.sums();
        let mut sums = vec![0i64; k * d];
        let mut counts = vec![0u64; k];
        let p = columns::AccumulateColumnsParams {
            x: dev(&case.x),
            n: n as u32,
            d: d as u32,
            labels: dev(&case.labels),
            k: k as u32,
            cols: cols as u32,
            rows: rows as u32,
            weights: case.weights(),
            scales: dev(&case.scales),
            sums: dev_mut(&mut sums),
            counts: dev_mut(&mut counts),
        };
        let plan = columns::ColumnPlan { cols, rows };
        let bytes = columns::accumulate_columns_bytes(k, cols);
        launch(plan.grid(n, d), BLOCK as usize, bytes, |e| unsafe {
            columns::accumulate_columns(e, &p)
        });
        assert_eq!((&sums, &counts), (&want_sums, &want_counts), "{tag}");
    }
}

#[test]
fn column_plans_take_chunks_with_several_points_per_cluster() {
    use columns::{ColumnPlan, column_plan};
    let max_shared = 227 * 1024;
    // D (200,000 × 128, k = 1,024) on 132 multiprocessors: 8 columns (72 KiB) leave three
    // blocks a multiprocessor, 16 slices and 24 chunks of 8,334 points.
    assert_eq!(
        column_plan(200_000, 1024, 128, 132, max_shared),
        Some(ColumnPlan {
            cols: 8,
            rows: 200_000usize.div_ceil(24)
        })
    );
    // k = 64: a warp's 32 columns, 16 KiB, eight blocks a multiprocessor.
    let plan = column_plan(200_000, 64, 128, 132, max_shared).unwrap();
    assert_eq!(plan.cols, 32);
    assert_eq!(
        plan.grid(200_000, 128),
        4 * 200_000usize.div_ceil(plan.rows)
    );
    // Narrow rows take slices no wider than them.
    assert_eq!(
        column_plan(10_000_000, 1024, 3, 132, max_shared)
            .unwrap()
            .cols,
        4
    );
    // Too few points per cluster; too many clusters for one column.
    assert_eq!(column_plan(20_000, 1024, 128, 132, max_shared), None);
    assert_eq!(column_plan(10_000_000, 20_000, 128, 132, max_shared), None);
    let plan = column_plan(10_000_000, 2048, 128, 132, 48 * 1024).unwrap();
    assert!(columns::accumulate_columns_bytes(2048, plan.cols) <= 48 * 1024);
}
