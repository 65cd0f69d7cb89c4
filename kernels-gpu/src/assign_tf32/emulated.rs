//! `kmeans_assign_l2_tf32` and the full pass after it run whole in the emulator (its `mma`s over
//! the PTX fragment layout, its `cp.async` ring landing only when waited for) against the CPU
//! twin's exact assignment: whatever the order of the tensor cores' sums, labels, distances and
//! block totals are the exact path's, bit for bit.

use super::full_pass::{
    FLAGGED_HEADER, FullPassParams, flagged_len, full_pass, full_pass_grid, full_pass_shared_bytes,
};
use super::*;
use crate::exec::emu::launch;
use crate::fixed::inertia_term;
use crate::math::{assign_score, sq_norm};
use crate::params::DevPtr;

/// The CPU twin (`backend::cpu::kmeans::nearest`): the first centroid of the lowest score, each
/// accumulated over the dimensions in order.
fn nearest(row: &[f32], centroids: &[f32]) -> (u32, f32) {
    let metric = AssignMetric::SqL2;
    let (mut best, mut label) = (f32::INFINITY, 0);
    for (c, cr) in centroids.chunks(row.len()).enumerate() {
        let mut acc = 0.0;
        for (&a, &b) in row.iter().zip(cr) {
            acc = assign_step(metric, acc, a, b);
        }
        let score = assign_score(metric, acc, sq_norm(cr));
        if score < best {
            (best, label) = (score, c as u32);
        }
    }
    (label, assign_distance(metric, sq_norm(row), best))
}

/// Runs the kernel and the full pass on `x` (`d` columns) and `centroids` with sample `weights`
/// (empty: one unit each), compares every output with the twin's and returns how many points
/// the full pass took.
fn check(x: &[f32], centroids: &[f32], d: usize, weights: &[f32], what: &str) -> usize {
    let (n, k) = (x.len() / d, centroids.len() / d);
    let x_sq: Vec<f32> = x.chunks(d).map(sq_norm).collect();
    let (c_sq, tile_maxima) = bound::tile_maxima_of(centroids, d);
    let old_labels: Vec<u32> = (0..n as u32).map(|i| i % 3).collect();
    let mut labels = old_labels.clone();
    let mut min_dist = vec![f32::NAN; n];
    let mut changed = [0u32];
    let mut block_inertia = vec![i64::MIN; tf32_grid(n)];
    let mut flagged = vec![0u32; flagged_len(n)];
    let inertia_scale = 4096.0;
    let ptr = |v: &[f32]| {
        if v.is_empty() {
            core::ptr::null()
        } else {
            v.as_ptr()
        }
    };
    let a = Tf32AssignArgs {
        x: x.as_ptr(),
        x_sq_norms: x_sq.as_ptr(),
        n,
        d,
        centroids: centroids.as_ptr(),
        c_sq_norms: c_sq.as_ptr(),
        tile_maxima: tile_maxima.as_ptr(),
        k,
        labels: labels.as_mut_ptr(),
        min_dist: min_dist.as_mut_ptr(),
        changed: changed.as_mut_ptr(),
        block_inertia: block_inertia.as_mut_ptr(),
        inertia_scale,
        weights: ptr(weights),
        flagged: flagged.as_mut_ptr(),
    };
    /// The arguments, shared by the emulated threads (which synchronise their own accesses).
    struct Shared(Tf32AssignArgs);
    unsafe impl Sync for Shared {}
    impl Shared {
        fn args(&self) -> Tf32AssignArgs {
            self.0
        }
    }
    let shared = Shared(a);
    // As the entry point: 16-byte staging when every row starts 16-byte aligned.
    launch(
        tf32_grid(n),
        BLOCK as usize,
        tf32_shared_bytes(),
        |e| unsafe {
            let a = shared.args();
            if d.is_multiple_of(4) {
                run::<true, _>(e, a)
            } else {
                run::<false, _>(e, a)
            }
        },
    );
    let queued = flagged[0] as usize;
    let mut ids = flagged[FLAGGED_HEADER..FLAGGED_HEADER + queued].to_vec();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), queued, "{what}: each point queued once");
    let params = FullPassParams {
        x: DevPtr::from_ptr(x.as_ptr()),
        x_sq_norms: DevPtr::from_ptr(x_sq.as_ptr()),
        d: d as u32,
        centroids: DevPtr::from_ptr(centroids.as_ptr()),
        c_sq_norms: DevPtr::from_ptr(c_sq.as_ptr()),
        k: k as u32,
        flagged: DevPtr::from_ptr(flagged.as_mut_ptr()),
        labels: DevPtr::from_ptr(labels.as_mut_ptr()),
        min_dist: DevPtr::from_ptr(min_dist.as_mut_ptr()),
        changed: DevPtr::from_ptr(changed.as_mut_ptr()),
        block_inertia: DevPtr::from_ptr(block_inertia.as_mut_ptr()),
        inertia_scale,
        weights: DevPtr::from_ptr(ptr(weights)),
    };
    // Fewer blocks than groups too (a block takes every `grid`-th group): the same outputs.
    let before = (
        labels.clone(),
        min_dist.clone(),
        changed,
        block_inertia.clone(),
    );
    let mut outputs = Vec::new();
    for grid in [full_pass_grid(n), 1] {
        labels.copy_from_slice(&before.0);
        min_dist.copy_from_slice(&before.1);
        changed = before.2;
        block_inertia.copy_from_slice(&before.3);
        flagged[0] = queued as u32;
        launch(grid, BLOCK as usize, full_pass_shared_bytes(), |e| unsafe {
            full_pass(e, &params)
        });
        assert_eq!(
            flagged[..FLAGGED_HEADER],
            [0, 0],
            "{what}: the queue's header cleared"
        );
        let dist_bits: Vec<u32> = min_dist.iter().map(|v| v.to_bits()).collect();
        outputs.push((labels.clone(), dist_bits, changed, block_inertia.clone()));
    }
    assert_eq!(outputs[0], outputs[1], "{what}: one block or many");
    let mut want_changed = 0;
    let mut want_inertia = vec![0i64; tf32_grid(n)];
    for i in 0..n {
        let (label, dist) = nearest(&x[i * d..(i + 1) * d], centroids);
        assert_eq!(
            (labels[i], min_dist[i].to_bits()),
            (label, dist.to_bits()),
            "{what}: n={n} d={d} k={k} point {i} (distance {} vs {dist})",
            min_dist[i]
        );
        let units = unsafe { units_at(ptr(weights), i) };
        want_changed += u32::from(label != old_labels[i] && units != 0);
        want_inertia[i / TF32_POINTS] += inertia_term(dist, inertia_scale, units);
    }
    assert_eq!(changed[0], want_changed, "{what}: changed labels");
    assert_eq!(block_inertia, want_inertia, "{what}: block inertia");
    queued
}

/// Reproducible values in `[-1, 1)`.
fn values(len: usize, seed: usize) -> Vec<f32> {
    (0..len)
        .map(|i| (((i + 1) * 2_654_435_761 + seed * 40_503) % 2001) as f32 / 1000.0 - 1.0)
        .collect()
}

#[test]
fn emulated_tf32_assign_equals_the_exact_path() {
    // n not a multiple of the block's points, d not a multiple of 4 (word copies), k below a
    // tile; weights with zero-unit points (not counted as moved).
    let weights: Vec<f32> = (0..200).map(|i| [1.0, 0.0, 3.0][i % 3]).collect();
    check(
        &values(200 * 5, 1),
        &values(7 * 5, 2),
        5,
        &weights,
        "random",
    );
    // d = 1, k = 1.
    check(&values(130, 3), &values(1, 4), 1, &[], "d = 1, k = 1");
    // k = n: every point is a centroid (distance 0), duplicates tie to the lowest index.
    let mut x = values(40 * 8, 5);
    x.copy_within(0..8, 9 * 8);
    x.copy_within(3 * 8..4 * 8, 30 * 8);
    check(&x, &x, 8, &[], "k = n with duplicates");
    // Exact ties between centroids and near-ties on a coarse grid.
    let grid = |len: usize, seed: usize| -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7919 + seed * 104_729) % 9) as f32 * 0.5 - 2.0)
            .collect()
    };
    check(
        &grid(150 * 16, 6),
        &grid(37 * 16, 7),
        16,
        &[],
        "coarse grid",
    );
    // Large norms, small differences: the TF32 scores cannot tell the centroids apart, so the
    // shortlists overflow and the block-wide exact pass decides.
    let far = |len: usize, seed: usize| -> Vec<f32> {
        values(len, seed)
            .iter()
            .map(|v| 1000.0 + v * 1e-2)
            .collect()
    };
    let queued = check(&far(150 * 3, 8), &far(20 * 3, 9), 3, &[], "large norms");
    assert!(queued > 0, "the full pass is exercised");
    // The same over more centroids than threads (the full pass takes several a thread), with
    // 16-byte rows and with word rows.
    let queued = check(
        &far(40 * 36, 12),
        &far(600 * 36, 13),
        36,
        &[],
        "large norms, k = 600, d = 36",
    );
    assert!(queued > 0, "the full pass is exercised");
    check(
        &far(40 * 7, 14),
        &far(300 * 7, 15),
        7,
        &[],
        "large norms, k = 300, d = 7",
    );
}

#[test]
fn emulated_tf32_assign_over_tiles_and_dimension_slices() {
    // Two centroid tiles (the second one centroid) and more dimensions than the point tile
    // holds (the points restaged per slice).
    let d = TF32_POINT_DIMS + 4;
    check(
        &values(60 * d, 10),
        &values((TF32_CENTROIDS + 1) * d, 11),
        d,
        &[],
        "tiles",
    );
}
