//! The centroid scan of the small step: every thread scores all centroids for its points, a few
//! centroids at a time, keeping each point's first minimum in centroid order.

use crate::exec::{Exec, shfl_xor_f32};
use crate::math::{AssignMetric, assign_score, assign_step, better};
use crate::tile::load_vec4s;

/// The centroid scan of one thread: staged centroids (rows of `d4` words, zero-padded) and,
/// for squared L2, their squared norms.
#[derive(Clone, Copy)]
pub(super) struct SharedCentroidScan {
    pub(super) metric: AssignMetric,
    pub(super) centroids: *const f32,
    pub(super) norms: *const f32,
    pub(super) k: u32,
    pub(super) d4: u32,
}

impl SharedCentroidScan {
    /// Each point's best score and its centroid: every centroid in order, `CU` at a time, over
    /// the dimensions `0..WD` of the first `quads` quads (`LAST` of the last quad's lanes), in
    /// the CPU's order per (point, centroid); the first minimum in centroid order wins (strict
    /// `<`, from centroid 0). Padding dimensions are 0 in both operands and leave the
    /// accumulators unchanged.
    ///
    /// # Safety
    /// `WD ≤ MAXD`, `quads ≤ WD / 4`, `4 · quads ≤ d4`; the staged rows hold `k × d4` words.
    #[inline(always)]
    pub(super) unsafe fn run<
        const MAXD: usize,
        const P: usize,
        const CU: usize,
        const WD: usize,
        const LAST: usize,
    >(
        self,
        xr: &[[f32; MAXD]; P],
        quads: usize,
    ) -> ([f32; P], [u32; P]) {
        let mut best = [f32::INFINITY; P];
        let mut label = [0u32; P];
        // Rows of whole quads are `WD` words apart: constant offsets from a running pointer.
        let d4 = if 4 * quads == WD {
            WD
        } else {
            self.d4 as usize
        };
        let grouped = self.k - self.k % CU as u32;
        let (mut c, mut row) = (0, self.centroids);
        while c < grouped {
            unsafe {
                self.group::<MAXD, P, CU, WD, LAST>(xr, quads, c, row, d4, &mut best, &mut label)
            };
            c += CU as u32;
            row = unsafe { row.add(CU * d4) };
        }
        while c < self.k {
            unsafe {
                self.group::<MAXD, P, 1, WD, LAST>(xr, quads, c, row, d4, &mut best, &mut label)
            };
            c += 1;
            row = unsafe { row.add(d4) };
        }
        (best, label)
    }

    /// Scores centroids `c..c + G` (staged from `row`, `d4` words apart) against the thread's
    /// points and keeps the better ones. With fewer than four dimensions the squared norm is
    /// the last word of the centroid's quad (see [`super::stage::centroid_norms`]).
    ///
    /// # Safety
    /// As for [`SharedCentroidScan::run`], with `c + G ≤ k`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn group<
        const MAXD: usize,
        const P: usize,
        const G: usize,
        const WD: usize,
        const LAST: usize,
    >(
        self,
        xr: &[[f32; MAXD]; P],
        quads: usize,
        c: u32,
        row: *const f32,
        d4: usize,
        best: &mut [f32; P],
        label: &mut [u32; P],
    ) {
        let mut acc = [[0f32; G]; P];
        let mut c_sq = [0f32; G];
        for j4 in 0..WD / 4 {
            if j4 < quads {
                let lanes = if j4 + 1 == WD / 4 { LAST } else { 4 };
                for u in 0..G {
                    let v: [f32; 4] = unsafe { load_vec4s(row.add(u * d4 + 4 * j4)) };
                    for q in 0..4 {
                        if q < lanes {
                            for p in 0..P {
                                acc[p][u] =
                                    assign_step(self.metric, acc[p][u], xr[p][4 * j4 + q], v[q]);
                            }
                        }
                    }
                    if WD == 4 && LAST < 4 {
                        c_sq[u] = v[3];
                    }
                }
            }
        }
        if !(WD == 4 && LAST < 4) {
            c_sq = unsafe { self.norms::<G>(c) };
        }
        let mut second = [f32::INFINITY; P];
        unsafe { self.keep_better::<P, G, false>(&acc, &c_sq, c, best, label, &mut second) };
    }

    /// As [`SharedCentroidScan::run`], reading each point's row (zero-padded to whole quads) from shared
    /// memory a quad at a time instead of holding it in registers; with `SECOND`, also each
    /// point's least score among the other centroids (+∞ without one).
    ///
    /// # Safety
    /// `xrows` are 16-byte aligned rows of `4 · quads ≤ d4` words.
    #[inline(always)]
    pub(super) unsafe fn run_rows<const P: usize, const CU: usize, const SECOND: bool>(
        self,
        xrows: &[*const f32; P],
        quads: usize,
    ) -> ([f32; P], [u32; P], [f32; P]) {
        let mut best = [f32::INFINITY; P];
        let mut label = [0u32; P];
        let mut second = [f32::INFINITY; P];
        let ranks = (&mut best, &mut label, &mut second);
        let grouped = self.k - self.k % CU as u32;
        let mut c = 0;
        while c < grouped {
            unsafe { self.group_rows::<P, CU, SECOND>(xrows, quads, c, ranks.0, ranks.1, ranks.2) };
            c += CU as u32;
        }
        while c < self.k {
            unsafe { self.group_rows::<P, 1, SECOND>(xrows, quads, c, ranks.0, ranks.1, ranks.2) };
            c += 1;
        }
        (best, label, second)
    }

    /// As [`SharedCentroidScan::group`], with the points' rows in shared memory.
    ///
    /// # Safety
    /// As for [`SharedCentroidScan::run_rows`], with `c + G ≤ k`.
    #[inline(always)]
    unsafe fn group_rows<const P: usize, const G: usize, const SECOND: bool>(
        self,
        xrows: &[*const f32; P],
        quads: usize,
        c: u32,
        best: &mut [f32; P],
        label: &mut [u32; P],
        second: &mut [f32; P],
    ) {
        let mut acc = [[0f32; G]; P];
        let crows: [*const f32; G] = core::array::from_fn(|u| unsafe {
            self.centroids.add(((c + u as u32) * self.d4) as usize)
        });
        for j4 in 0..quads {
            let xv: [[f32; 4]; P] =
                core::array::from_fn(|p| unsafe { load_vec4s(xrows[p].add(4 * j4)) });
            for (u, row) in crows.iter().enumerate() {
                let v: [f32; 4] = unsafe { load_vec4s(row.add(4 * j4)) };
                for q in 0..4 {
                    for p in 0..P {
                        acc[p][u] = assign_step(self.metric, acc[p][u], xv[p][q], v[q]);
                    }
                }
            }
        }
        let c_sq = unsafe { self.norms::<G>(c) };
        unsafe { self.keep_better::<P, G, SECOND>(&acc, &c_sq, c, best, label, second) };
    }

    /// The squared norms of centroids `c..c + G` (zeros for L1, which does not use them).
    ///
    /// # Safety
    /// `c + G ≤ k`.
    #[inline(always)]
    unsafe fn norms<const G: usize>(self, c: u32) -> [f32; G] {
        let mut c_sq = [0f32; G];
        if self.metric == AssignMetric::SqL2 {
            for (u, c_sq) in c_sq.iter_mut().enumerate() {
                *c_sq = unsafe { *self.norms.add(c as usize + u) };
            }
        }
        c_sq
    }

    /// Ranks centroids `c..c + G` (squared norms `c_sq`) by their finished accumulators, in
    /// centroid order, keeping each point's first minimum (and with `SECOND` the least score
    /// of the others).
    ///
    /// # Safety
    /// `c + G ≤ k`.
    #[inline(always)]
    unsafe fn keep_better<const P: usize, const G: usize, const SECOND: bool>(
        self,
        acc: &[[f32; G]; P],
        c_sq: &[f32; G],
        c: u32,
        best: &mut [f32; P],
        label: &mut [u32; P],
        second: &mut [f32; P],
    ) {
        for u in 0..G {
            for p in 0..P {
                let score = assign_score(self.metric, acc[p][u], c_sq[u]);
                if score < best[p] {
                    if SECOND {
                        second[p] = best[p];
                    }
                    best[p] = score;
                    label[p] = c + u as u32;
                } else if SECOND && score < second[p] {
                    second[p] = score;
                }
            }
        }
    }
}

/// Points a lane scores at once in [`SharedCentroidScan::run_warp_tiles`].
const TILE_POINTS: usize = 4;
/// Centroids a lane scores at once in [`SharedCentroidScan::run_warp_tiles`].
const TILE_CENTROIDS: usize = 4;
/// Lanes that share a tile's points, each scoring its own centroids.
const TILE_LANES: usize = 4;

impl SharedCentroidScan {
    /// As [`SharedCentroidScan::run_rows`] for one point a thread, the point of row `t` of the
    /// staged block, computed in register tiles: each lane scores 4 points × 4 centroids a
    /// round, 4 lanes sharing the points and splitting the centroids, so a quad of 8 shared
    /// loads feeds 64 multiply-adds (one point against one centroid at a time: 5). Each
    /// accumulator still runs over the dimensions in order, and the first minima of the four
    /// lanes are merged by (score, centroid) — the first minimum in centroid order. Every lane
    /// of the warp calls it; rows past `rows` read the last row and are not used.
    ///
    /// # Safety
    /// `points` holds `rows ≥ 1` staged rows `stride` words apart (16-byte aligned, zero-padded
    /// to `quads` whole quads, `4 · quads ≤ d4`); the block's threads are whole warps.
    #[inline(always)]
    pub(super) unsafe fn run_warp_tiles<E: Exec>(
        self,
        e: E,
        points: *const f32,
        stride: usize,
        rows: usize,
        quads: usize,
    ) -> (f32, u32) {
        let t = e.thread();
        let lane = t % 32;
        let (group, part) = (lane / TILE_LANES, lane % TILE_LANES);
        // The lanes of group `g` score the warp's rows g, g + 8, g + 16, g + 24: a load of the
        // eight groups reads eight consecutive rows, which the stride spreads over the banks.
        let groups = 32 / TILE_LANES;
        let xrows: [*const f32; TILE_POINTS] = core::array::from_fn(|p| unsafe {
            points.add((t - lane + group + groups * p).min(rows - 1) * stride)
        });
        let mut best = [f32::INFINITY; TILE_POINTS];
        let mut label = [0u32; TILE_POINTS];
        let chunk = (TILE_LANES * TILE_CENTROIDS) as u32;
        let mut c0 = 0;
        while c0 < self.k {
            // Lane `part` scores centroids c0 + part + 4·u; the ones past k repeat the last.
            let ids: [u32; TILE_CENTROIDS] =
                core::array::from_fn(|u| c0 + part as u32 + (TILE_LANES * u) as u32);
            let crows: [*const f32; TILE_CENTROIDS] = core::array::from_fn(|u| unsafe {
                self.centroids
                    .add((ids[u].min(self.k - 1) * self.d4) as usize)
            });
            let mut acc = [[0f32; TILE_CENTROIDS]; TILE_POINTS];
            for j4 in 0..quads {
                let xv: [[f32; 4]; TILE_POINTS] =
                    core::array::from_fn(|p| unsafe { load_vec4s(xrows[p].add(4 * j4)) });
                let cv: [[f32; 4]; TILE_CENTROIDS] =
                    core::array::from_fn(|u| unsafe { load_vec4s(crows[u].add(4 * j4)) });
                for q in 0..4 {
                    for (acc, xv) in acc.iter_mut().zip(&xv) {
                        for (a, cv) in acc.iter_mut().zip(&cv) {
                            *a = assign_step(self.metric, *a, xv[q], cv[q]);
                        }
                    }
                }
            }
            for (u, &id) in ids.iter().enumerate() {
                if id < self.k {
                    let c_sq = match self.metric {
                        AssignMetric::SqL2 => unsafe { *self.norms.add(id as usize) },
                        AssignMetric::L1 => 0.0,
                    };
                    for p in 0..TILE_POINTS {
                        let score = assign_score(self.metric, acc[p][u], c_sq);
                        if score < best[p] {
                            best[p] = score;
                            label[p] = id;
                        }
                    }
                }
            }
            c0 += chunk;
        }
        // Merge the four lanes' minima of each point; every lane ends with all four.
        for mask in [1, 2] {
            for p in 0..TILE_POINTS {
                let other = shfl_xor_f32(e, best[p], mask);
                let other_label = e.shfl_xor_u32(label[p], mask);
                if better(other, other_label, best[p], label[p]) {
                    best[p] = other;
                    label[p] = other_label;
                }
            }
        }
        // Lane l's row, l % 8 + 8 · (l / 8), is point l / 8 of group l % 8, whose lane
        // 4 · (l % 8) + l / 8 offers it.
        let mut offered = (best[0], label[0]);
        for p in 1..TILE_POINTS {
            if p == part {
                offered = (best[p], label[p]);
            }
        }
        let from = (TILE_LANES * (lane % groups) + lane / groups) as u32;
        (
            f32::from_bits(e.shfl_idx_u32(offered.0.to_bits(), from)),
            e.shfl_idx_u32(offered.1, from),
        )
    }
}
