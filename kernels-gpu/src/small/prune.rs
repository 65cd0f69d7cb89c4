//! Pruning of the wide small step's centroid scan by lower bounds per point and group of
//! centroids (Yinyang k-means' group filter), exact to the bit: a point skips a group only when
//! its FP32 scores are proven to rank its current centroid above every centroid of the group;
//! the groups it cannot skip are scanned with the same arithmetic as the full scan. Labels,
//! distances, sums and inertia are those of the full step.
//!
//! The centroids fall into [`groups`] runs of [`group_size`] consecutive indices. Each point
//! holds, per group, `lower`: a lower bound on its Euclidean distance to every centroid of the
//! group but its own. A scan of the group sets it from the group's best score (its second-best
//! in the point's own group); after each update it drops by the farthest any centroid of the
//! group moved (`drift`, from [`super::finalize`]), by the triangle inequality. The step
//! computes every point's score `s_a` to its current centroid `a` (for its distance and inertia
//! anyway) and skips a group when `lower² − ‖x‖² − E > s_a`. The groups scanned, in index order,
//! and `a` give the first minimum in centroid order, as the full scan.
//!
//! # The bound
//! With `u = 2^-24`, the FP32 dot product of `d` terms and the squared norms are within
//! `γ = d·u / (1 − d·u)` of the exact ones relative to `Σ|x_j c_j| ≤ ‖x‖‖c‖` and `‖·‖²`; the score
//! `s_c = fma(−2, dot, ‖c‖²)` adds one rounding. So `|s_c − (‖c‖² − 2 x·c)| ≤ (γ + 2u)(‖x‖ + ‖c‖)²
//! ≤ E = κ (‖x‖ + C)²` with `κ = 4 (d + 4) u` (twice what it takes) and `C²` the largest FP32
//! squared centroid norm times `1 + κ`. Every centroid `c ≠ a` of a group then scores at least
//! `lower² − ‖x‖² − E`, where `‖x‖² ≤ x_sq · (1 + κ)`: if that exceeds `s_a`, none of them is
//! the scan's first minimum. The tests run in f64, whose rounding (≈ 2^-53 of the same terms)
//! the factor two of `κ` absorbs; bounds are stored in f32 rounded down, drifts rounded up.

use super::scan::SharedCentroidScan;
use super::{Smem, Step};
use crate::exec::Exec;
use crate::launch::BLOCK;
use crate::math::{better, fma, l2_score, sqrt_f64};
use crate::tile::load_vec4s;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// What the bounded scan found for a thread's points: scores, labels and squared norms.
pub(super) struct Pruned<const P: usize> {
    pub best: [f32; P],
    pub label: [u32; P],
    pub x_sq: [f32; P],
}

/// Most groups of centroids: `4 · MAX_GROUPS` bytes of bounds a point.
pub const MAX_GROUPS: usize = 10;

/// Centroids per group for `k` centroids: a multiple of 8 (the wide step's unroll), at most
/// [`MAX_GROUPS`] groups.
pub const fn group_size(k: usize) -> usize {
    let size = k.div_ceil(MAX_GROUPS).div_ceil(8) * 8;
    if size < 8 { 8 } else { size }
}

/// Groups of centroids for `k` centroids.
pub const fn groups(k: usize) -> usize {
    k.div_ceil(group_size(k))
}

/// Words of [`SmallLayout::pending`](super::SmallLayout::pending) for `points` points a block:
/// each point's best (score, label) key, the (point, group) scans by group ([`SCANS_A_THREAD`]
/// a thread at most), the groups' drifts, then the [`ZEROED_WORDS`] counters: scans per group,
/// scans placed per group, pending points, the largest centroid norm and relabelled points.
pub const fn pending_words(points: usize) -> usize {
    (2 + SCANS_A_THREAD) * points + MAX_GROUPS + ZEROED_WORDS
}

/// Most (point, group) scans a thread runs; a block with more scans every group of its
/// pending points.
pub const SCANS_A_THREAD: usize = 4;

/// The last words of [`pending_words`], which the step zeroes before its first barrier.
pub const ZEROED_WORDS: usize = 2 * MAX_GROUPS + 3;

/// How many of the block's points the last [`assign`] relabelled (after a barrier).
///
/// # Safety
/// `m` is the step's shared memory for `points` points a block.
#[inline(always)]
pub(super) unsafe fn relabelled(m: &Smem, points: usize) -> u32 {
    unsafe { *m.pending.add(pending_words(points) - 1) }
}

/// The order of `(score, label)` pairs by (score, then label) as one integer: the first
/// minimum in centroid order is the least key. Scores are never NaN here (the scans keep none),
/// nor −0, which would rank below +0: `fma(−2, dot, ‖c‖²)` rounds an exact zero to +0 and
/// `‖c‖²` is a sum of squares from +0.
#[inline(always)]
pub(super) fn rank_key(score: f32, label: u32) -> u64 {
    let bits = score.to_bits();
    let ordered = if bits >> 31 == 1 {
        !bits
    } else {
        bits | 1 << 31
    };
    (ordered as u64) << 32 | label as u64
}

/// The (score, label) of a [`rank_key`].
#[inline(always)]
pub(super) fn from_key(key: u64) -> (f32, u32) {
    let ordered = (key >> 32) as u32;
    let bits = if ordered >> 31 == 1 {
        ordered & !(1 << 31)
    } else {
        !ordered
    };
    (f32::from_bits(bits), key as u32)
}

/// `κ` of the module comment for `d` dimensions.
#[inline(always)]
fn kappa(d: usize) -> f64 {
    4.0 * (d as f64 + 4.0) * (1.0 / 16_777_216.0)
}

/// The bound `E` of the module comment for one block's centroids, whose part from the largest
/// centroid norm (`C`) is computed once.
#[derive(Clone, Copy)]
pub struct ErrorBound {
    kappa: f64,
    c_root: f64,
}

impl ErrorBound {
    /// For `d` dimensions and the largest FP32 squared centroid norm `c_sq_max`.
    #[inline(always)]
    pub fn new(d: usize, c_sq_max: f32) -> Self {
        let kappa = kappa(d);
        ErrorBound {
            kappa,
            c_root: sqrt_f64(c_sq_max as f64 * (1.0 + kappa)),
        }
    }

    /// The terms of a point whose FP32 squared norm is `x_sq`.
    #[inline(always)]
    pub fn point(self, x_sq: f32) -> PointBound {
        let x_hi = x_sq as f64 * (1.0 + self.kappa);
        let root = sqrt_f64(x_hi) + self.c_root;
        PointBound {
            x_lo: x_sq as f64 * (1.0 - self.kappa),
            x_hi,
            e: self.kappa * root * root,
        }
    }
}

/// One point's terms of the tests: bounds on `‖x‖²` either way, and `E`.
#[derive(Clone, Copy)]
pub struct PointBound {
    x_lo: f64,
    x_hi: f64,
    e: f64,
}

impl PointBound {
    /// Whether the point may skip a group whose bound is `lower`, its current centroid scoring
    /// `score`.
    #[inline(always)]
    pub fn skips(self, lower: f32, score: f32) -> bool {
        let lower = lower as f64;
        lower > 0.0 && lower * lower > self.x_hi + self.e + score as f64
    }

    /// A lower bound on the distance to every centroid that scores at least `score` (+∞: none),
    /// rounded down to f32.
    #[inline(always)]
    pub fn lower(self, score: f32) -> f32 {
        let sq = self.x_lo + score as f64 - self.e;
        if sq > 0.0 {
            f32_down(sqrt_f64(sq))
        } else {
            0.0
        }
    }
}

/// `lower − drift`, rounded down to f32 (0 when not positive).
#[inline(always)]
pub fn moved_lower(lower: f32, drift: f32) -> f32 {
    let v = lower as f64 - drift as f64;
    if v > 0.0 { f32_down(v) } else { 0.0 }
}

/// The largest f32 not above `v > 0` (+∞ stays).
#[inline(always)]
fn f32_down(v: f64) -> f32 {
    let f = v as f32;
    if f as f64 > v {
        f32::from_bits(f.to_bits() - 1)
    } else {
        f
    }
}

/// The least f32 not below `v ≥ 0`.
#[inline(always)]
pub(super) fn f32_up(v: f64) -> f32 {
    let f = v as f32;
    if (f as f64) < v {
        f32::from_bits(f.to_bits() + 1)
    } else {
        f
    }
}

/// The wide step's assignment with bounds (squared L2, rows staged in shared memory, centroids
/// and norms staged with a barrier passed). Each thread tests its points' groups; the
/// (point, group) scans left are sorted by group, one a thread, so that a warp reads the same
/// centroids, and merged per point by the least [`rank_key`]. A block with more scans than
/// [`SCANS_A_THREAD`] a thread, or whose bounds are not valid yet (`s.drift` null), scans every
/// group of its pending points instead, the points packed into its first threads. Every scan is
/// the full step's ([`SharedCentroidScan::run_rows`], keeping the second-best score too).
/// Writes the points' new bounds.
///
/// # Safety
/// As for [`super::step`] with `s.lower` non-null; `old` are the points' labels (`< k` unless
/// `s.drift` is null); the [`ZEROED_WORDS`] zeroed before the step's first barrier; every
/// thread of the block calls this.
#[inline(always)]
pub(super) unsafe fn assign<const P: usize, const CU: usize, E: Exec>(
    e: E,
    s: &Step,
    m: &Smem,
    scan: SharedCentroidScan,
    old: &[u32; P],
    point: impl Fn(usize) -> usize,
) -> Pruned<P> {
    let (t, threads) = (e.thread(), BLOCK as usize);
    let quads = s.d.div_ceil(4);
    let d4 = 4 * quads;
    let points = P * threads;
    let (size, groups) = (group_size(s.k), groups(s.k));
    let keys = m.pending.cast::<u64>();
    let scans_end = (2 + SCANS_A_THREAD) * points;
    let (items, group_drift, per_group) = unsafe {
        (
            m.pending.add(2 * points),
            m.pending.add(scans_end).cast::<f32>(),
            m.pending.add(scans_end + MAX_GROUPS),
        )
    };
    let placed = unsafe { per_group.add(MAX_GROUPS) };
    let (count, c_max, moved) = unsafe {
        (
            AtomicU32::from_ptr(placed.add(MAX_GROUPS)),
            AtomicU32::from_ptr(placed.add(MAX_GROUPS + 1)),
            AtomicU32::from_ptr(placed.add(MAX_GROUPS + 2)),
        )
    };
    let key = |r: usize| unsafe { AtomicU64::from_ptr(keys.add(r)) };
    let row = |r: usize| unsafe { m.points.add(r * m.point_stride).cast_const() };
    let bound = |g: usize, i: usize| unsafe { s.lower.add(g * s.n + i) };
    // The scan of group `g` for row `r`: best score, its label and the second-best score.
    let scan_group = |g: usize, r: usize| {
        let from = g * size;
        let group = SharedCentroidScan {
            centroids: unsafe { scan.centroids.add(from * d4) },
            norms: unsafe { scan.norms.add(from) },
            k: (s.k - from).min(size) as u32,
            ..scan
        };
        let (b, l, second) = unsafe { group.run_rows::<1, CU, true>(&[row(r)], quads) };
        (b[0], l[0] + from as u32, second[0])
    };
    let fresh = s.drift.is_null();
    let mut out = Pruned {
        best: [0f32; P],
        label: *old,
        x_sq: [0f32; P],
    };
    for (p, &a) in old.iter().enumerate() {
        if point(p) < s.n {
            let xrow = row(t + p * threads);
            out.x_sq[p] = unsafe { super::stage::quads_sq_norm(xrow, quads) };
            if !fresh {
                // The score of the current centroid, as the scan computes it.
                let crow = unsafe { m.centroids.add(a as usize * d4) };
                let mut acc = 0f32;
                for j4 in 0..quads {
                    let (xv, cv): ([f32; 4], [f32; 4]) =
                        unsafe { (load_vec4s(xrow.add(4 * j4)), load_vec4s(crow.add(4 * j4))) };
                    for q in 0..4 {
                        acc = fma(xv[q], cv[q], acc);
                    }
                }
                out.best[p] = l2_score(acc, unsafe { *m.norms.add(a as usize) });
            }
        }
    }
    // The norms are non-negative: their bits order as they do (a NaN above all).
    let mut c = t;
    while c < s.k {
        c_max.fetch_max(unsafe { *m.norms.add(c) }.to_bits(), Ordering::Relaxed);
        c += threads;
    }
    if !fresh && t < groups {
        let mut most = 0f32;
        for c in t * size..((t + 1) * size).min(s.k) {
            most = most.max(unsafe { *s.drift.add(c) });
        }
        unsafe { *group_drift.add(t) = most };
    }
    e.sync();
    let error = ErrorBound::new(s.d, f32::from_bits(c_max.load(Ordering::Relaxed)));
    let all_groups = (1u32 << groups) - 1;
    let mut to_scan = [0u32; P];
    for p in 0..P {
        let i = point(p);
        if i < s.n {
            let r = t + p * threads;
            to_scan[p] = all_groups;
            if !fresh {
                // Every group's bound loaded at once, so that their latencies overlap.
                let mut lower = [0f32; MAX_GROUPS];
                for (g, l) in lower.iter_mut().enumerate() {
                    if g < groups {
                        *l = unsafe { *bound(g, i) };
                    }
                }
                let terms = error.point(out.x_sq[p]);
                for (g, &l) in lower.iter().enumerate() {
                    if g < groups {
                        let moved = moved_lower(l, unsafe { *group_drift.add(g) });
                        if terms.skips(moved, out.best[p]) {
                            to_scan[p] &= !(1 << g);
                            unsafe { *bound(g, i) = moved };
                        }
                    }
                }
            }
            if to_scan[p] != 0 {
                // The current centroid competes as itself when its group goes unscanned.
                let a_kept = !fresh && to_scan[p] & (1 << (old[p] as usize / size)) == 0;
                let start = match a_kept {
                    true => rank_key(out.best[p], old[p]),
                    false => rank_key(f32::INFINITY, 0),
                };
                key(r).store(start, Ordering::Relaxed);
                let slot = count.fetch_add(1, Ordering::Relaxed) as usize;
                unsafe { *m.order.add(slot) = r as u32 };
                for g in 0..groups {
                    if to_scan[p] & (1 << g) != 0 {
                        unsafe { AtomicU32::from_ptr(per_group.add(g)) }
                            .fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
    e.sync();
    let scans = (0..groups)
        .map(|g| unsafe { *per_group.add(g) } as usize)
        .sum::<usize>();
    // Block-wide: every thread reads the same counts.
    let sparse = !fresh && scans <= SCANS_A_THREAD * threads;
    // The scans this thread ran in the sparse case: (row, group, label, the group's bound should
    // the label be the point's: from the second-best score).
    let mut ran = [(0usize, usize::MAX, 0u32, 0f32); SCANS_A_THREAD];
    if sparse {
        // Counting sort of the scans by group (the counts are final after the barrier).
        for (p, &groups_left) in to_scan.iter().enumerate() {
            let mut offset = 0;
            for g in 0..groups {
                if groups_left & (1 << g) != 0 {
                    let next = unsafe { AtomicU32::from_ptr(placed.add(g)) };
                    let slot = offset + next.fetch_add(1, Ordering::Relaxed) as usize;
                    unsafe { *items.add(slot) = ((t + p * threads) << 4 | g) as u32 };
                }
                offset += unsafe { *per_group.add(g) } as usize;
            }
        }
        e.sync();
        for (n_item, ran) in ran.iter_mut().enumerate() {
            let item = t + n_item * threads;
            if item < scans {
                let packed = unsafe { *items.add(item) } as usize;
                let (r, g) = (packed >> 4, packed & 15);
                let i = point(0) - t + r;
                let terms = error.point(unsafe { super::stage::quads_sq_norm(row(r), quads) });
                let (b, l, second) = scan_group(g, r);
                unsafe { *bound(g, i) = terms.lower(b) };
                key(r).fetch_min(rank_key(b, l), Ordering::Relaxed);
                *ran = (r, g, l, terms.lower(second));
            }
        }
    } else {
        let pending = count.load(Ordering::Relaxed) as usize;
        let mut slot = t;
        while slot < pending {
            let r = unsafe { *m.order.add(slot) } as usize;
            let i = point(0) - t + r;
            let terms = error.point(unsafe { super::stage::quads_sq_norm(row(r), quads) });
            let mut best = from_key(key(r).load(Ordering::Relaxed));
            let (mut best_group, mut second) = (usize::MAX, f32::INFINITY);
            for g in 0..groups {
                let (b, l, sec) = scan_group(g, r);
                unsafe { *bound(g, i) = terms.lower(b) };
                if better(b, l, best.0, best.1) {
                    (best, best_group, second) = ((b, l), g, sec);
                }
            }
            if best_group < groups {
                // The label's own group: bounded by the others in it.
                unsafe { *bound(best_group, i) = terms.lower(second) };
            }
            key(r).store(rank_key(best.0, best.1), Ordering::Relaxed);
            slot += threads;
        }
    }
    e.sync();
    for &(r, g, l, own_group_bound) in &ran {
        if g < groups && from_key(key(r).load(Ordering::Relaxed)).1 == l {
            // The label's own group: bounded by the others in it.
            unsafe { *bound(g, point(0) - t + r) = own_group_bound };
        }
    }
    for p in 0..P {
        let i = point(p);
        if i < s.n && to_scan[p] != 0 {
            let (best, label) = from_key(key(t + p * threads).load(Ordering::Relaxed));
            let (a, s_a) = (old[p], out.best[p]);
            let a_group = a as usize / size;
            if !fresh && to_scan[p] & (1 << a_group) == 0 && label != a {
                // The old label's group, unscanned, now also bounds the distance to `a`.
                let with_a = error.point(out.x_sq[p]).lower(s_a);
                unsafe { *bound(a_group, i) = (*bound(a_group, i)).min(with_a) };
            }
            (out.best[p], out.label[p]) = (best, label);
            if !fresh && label != a {
                moved.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    out
}
