//! `kmeans_assign_l2_full_pass`: every centroid scored exactly for the points that the TF32
//! kernels' shortlists could not settle ([`super::shortlist::Shortlist::needs_full_pass`]).
//!
//! The TF32 kernel queues such a point's index instead of labelling it, so that a rare point
//! (near-ties of three or more, duplicated centroids, non-finite tiles) no longer holds its
//! block for `k` dot products while the block's other points wait. This kernel, launched right
//! after it, takes the queue [`FULL_PASS_POINTS`] points at a time per block: every thread
//! scores centroids `t, t + BLOCK, …` for all of them (one centroid load, several independent
//! FMA chains), the block keeps the exact path's first minimum of each, and writes its label and
//! distance, adding to the changed count and to the inertia of the TF32 block that owns the
//! point — integer sums, so the queue's order changes nothing.
//!
//! The queue (`flagged`) is `[count, tickets, ids…]`, zero between steps: the last block of this
//! kernel to take a ticket (after every block has read the count) sets both words back to zero.

use super::*;
#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
use crate::{
    exec::{atomic_add_i64, atomic_fetch_add_u32, fence_device},
    tile::load_vec4s,
};

/// The `kmeans_assign_l2_full_pass` entry point (built for sm_80 and later, beside the TF32
/// kernels). CPU twin: `backend::cpu::kmeans::nearest`.
pub const KMEANS_ASSIGN_L2_FULL_PASS: Kernel<FullPassParams> =
    Kernel::new("kmeans_assign_l2_full_pass").only_sm80();

kernel_params! {
    /// `kmeans_assign_l2_full_pass`'s parameters: the TF32 kernel's, less its bound's, plus the
    /// queue it filled.
    pub struct FullPassParams {
        pub x: DevPtr<f32>,
        pub x_sq_norms: DevPtr<f32>,
        pub d: u32,
        pub centroids: DevPtr<f32>,
        pub c_sq_norms: DevPtr<f32>,
        pub k: u32,
        pub flagged: DevPtr<u32>,
        pub labels: DevPtr<u32>,
        pub min_dist: DevPtr<f32>,
        pub changed: DevPtr<u32>,
        pub block_inertia: DevPtr<i64>,
        pub inertia_scale: f32,
        pub weights: DevPtr<f32>,
    }
    entries: full_pass_entry;
}

/// Words before the queued point indices in `flagged`: the count, then the tickets of the
/// blocks of `kmeans_assign_l2_full_pass` that have read it.
pub const FLAGGED_HEADER: usize = 2;

/// Points one block of `kmeans_assign_l2_full_pass` scores together (a thread's centroid load
/// feeds that many FMA chains).
pub const FULL_PASS_POINTS: usize = 4;

/// Most blocks of `kmeans_assign_l2_full_pass`: more than a wave of any GPU; each block takes
/// every `grid`-th group of queued points.
const FULL_PASS_MAX_BLOCKS: usize = 1024;

/// Words of the queue for `n` points.
pub const fn flagged_len(n: usize) -> usize {
    n + FLAGGED_HEADER
}

/// Blocks of `kmeans_assign_l2_full_pass` for `n` points (the queue's length is known only on
/// the device).
pub const fn full_pass_grid(n: usize) -> usize {
    let groups = n.div_ceil(FULL_PASS_POINTS);
    if groups == 0 {
        1
    } else if groups < FULL_PASS_MAX_BLOCKS {
        groups
    } else {
        FULL_PASS_MAX_BLOCKS
    }
}

/// Dynamic shared memory of `kmeans_assign_l2_full_pass`: each warp's best (score bits, centroid)
/// per point.
pub const fn full_pass_shared_bytes() -> usize {
    crate::launch::BLOCK as usize / 32 * FULL_PASS_POINTS * 2 * 4
}

full_pass_entry! {
    /// Labels the points queued in `flagged` (see the module) with their nearest of the `k`
    /// centroids, scoring all of them as the exact path does, and writes their distances; adds
    /// the changed labels of points with weight to `changed` (non-null) and each point's
    /// fixed-point inertia to `block_inertia[i / TF32_POINTS]` (non-null). Leaves the queue's
    /// header zero.
    ///
    /// # Safety
    /// Pointers valid for the TF32 kernel's sizes, `flagged` for [`flagged_len`]`(n)`; `BLOCK`
    /// threads, [`full_pass_grid`]`(n)` blocks and [`full_pass_shared_bytes`]`()` of dynamic
    /// shared memory; launched after the TF32 kernel that filled the queue.
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
    fn kmeans_assign_l2_full_pass(params) {
        unsafe { full_pass(Gpu, &params) }
    }
}

/// The body of `kmeans_assign_l2_full_pass`.
///
/// # Safety
/// As for `kmeans_assign_l2_full_pass`.
#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
// Index loops over the points: iterators over the small arrays leave them in local memory.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
pub(super) unsafe fn full_pass<E: Exec>(e: E, params: &FullPassParams) {
    const P: usize = FULL_PASS_POINTS;
    let FullPassParams {
        x,
        x_sq_norms,
        d,
        centroids,
        c_sq_norms,
        k,
        flagged,
        labels,
        min_dist,
        changed,
        block_inertia,
        inertia_scale,
        weights,
    } = *params;
    let (x, centroids, c_sq_norms) = (x.as_ptr(), centroids.as_ptr(), c_sq_norms.as_ptr());
    let (flagged, weights) = (flagged.as_mut_ptr(), weights.as_ptr());
    let (changed, block_inertia) = (changed.as_mut_ptr(), block_inertia.as_mut_ptr());
    let (d, k) = ((d as usize).max(1), k as usize);
    let t = e.thread();
    let (warp, lane) = (t / 32, t % 32);
    let warp_best = e.shared::<u32>();
    let count = unsafe { *flagged } as usize;
    // Every thread has read the count before thread 0 takes the block's ticket; the last block
    // to take one clears the header for the next step.
    e.sync();
    if t == 0 {
        fence_device();
        let ticket = unsafe { atomic_fetch_add_u32(flagged.add(1), 1) } as usize;
        if ticket + 1 == e.grid_dim() {
            unsafe {
                *flagged = 0;
                *flagged.add(1) = 0;
            }
        }
    }
    let ids = unsafe { flagged.add(FLAGGED_HEADER) }.cast_const();
    let groups = count.div_ceil(P);
    let mut group = e.block();
    while group < groups {
        let first = group * P;
        // A short last group repeats its last point (scored, not written).
        let mut rows = [x; P];
        for p in 0..P {
            let i = unsafe { *ids.add((first + p).min(count - 1)) } as usize;
            rows[p] = unsafe { x.add(i * d) };
        }
        let (mut best, mut label) = ([f32::INFINITY; P], [u32::MAX; P]);
        let mut c = t;
        while c < k {
            let dots = unsafe { exact_dots(rows, centroids.add(c * d), d) };
            let c_sq = unsafe { *c_sq_norms.add(c) };
            for p in 0..P {
                let score = l2_score(dots[p], c_sq);
                if better(score, c as u32, best[p], label[p]) {
                    (best[p], label[p]) = (score, c as u32);
                }
            }
            c += BLOCK as usize;
        }
        for p in 0..P {
            // (Halving a mask, not a loop over an array: the array would live in local memory.)
            let mut mask = 16;
            while mask > 0 {
                let (ob, ol) = (
                    shfl_xor_f32(e, best[p], mask),
                    e.shfl_xor_u32(label[p], mask),
                );
                if better(ob, ol, best[p], label[p]) {
                    (best[p], label[p]) = (ob, ol);
                }
                mask /= 2;
            }
            if lane == 0 {
                unsafe {
                    *warp_best.add((warp * P + p) * 2) = best[p].to_bits();
                    *warp_best.add((warp * P + p) * 2 + 1) = label[p];
                }
            }
        }
        e.sync();
        if t < P && first + t < count {
            let i = unsafe { *ids.add(first + t) } as usize;
            let (mut score, mut label) = (f32::INFINITY, u32::MAX);
            for w in 0..BLOCK as usize / 32 {
                let (ob, ol) = unsafe {
                    (
                        f32::from_bits(*warp_best.add((w * P + t) * 2)),
                        *warp_best.add((w * P + t) * 2 + 1),
                    )
                };
                if better(ob, ol, score, label) {
                    (score, label) = (ob, ol);
                }
            }
            let (label, dist) = settle(score, label, unsafe { *x_sq_norms.as_ptr().add(i) });
            let units = unsafe { units_at(weights, i) };
            unsafe {
                if !changed.is_null() && *labels.as_ptr().add(i) != label && units != 0 {
                    atomic_add_u32(changed, 1);
                }
                *labels.as_mut_ptr().add(i) = label;
                *min_dist.as_mut_ptr().add(i) = dist;
                if !block_inertia.is_null() {
                    let term = inertia_term(dist, inertia_scale, units);
                    atomic_add_i64(block_inertia.add(i / TF32_POINTS), term);
                }
            }
        }
        // The warps' slots are written again for the next group.
        e.sync();
        group += e.grid_dim();
    }
}

/// [`exact_dot`] of each row with `c`: the same chains, one per row, sharing the centroid's
/// loads.
///
/// # Safety
/// The rows and `c` are valid for `d` values.
#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
#[allow(clippy::manual_is_multiple_of, clippy::needless_range_loop)]
#[inline(always)]
unsafe fn exact_dots<const P: usize>(rows: [*const f32; P], c: *const f32, d: usize) -> [f32; P] {
    /// Centroid values loaded before their FMAs (four 16-byte loads in flight; more leave the
    /// unrolled loop's arrays in local memory).
    const AHEAD: usize = 16;
    let mut acc = [0.0f32; P];
    let mut aligned = d % 4 == 0 && (c as usize) % 16 == 0;
    for p in 0..P {
        aligned &= (rows[p] as usize) % 16 == 0;
    }
    let mut j = 0;
    if aligned {
        while j + AHEAD <= d {
            let cv: [f32; AHEAD] = unsafe { load_vec4s(c.add(j)) };
            let mut xv = [[0.0; AHEAD]; P];
            for p in 0..P {
                xv[p] = unsafe { load_vec4s(rows[p].add(j)) };
            }
            for h in 0..AHEAD {
                for p in 0..P {
                    acc[p] = assign_step(AssignMetric::SqL2, acc[p], xv[p][h], cv[h]);
                }
            }
            j += AHEAD;
        }
    }
    while j < d {
        let cj = unsafe { *c.add(j) };
        for p in 0..P {
            acc[p] = assign_step(AssignMetric::SqL2, acc[p], unsafe { *rows[p].add(j) }, cj);
        }
        j += 1;
    }
    acc
}
