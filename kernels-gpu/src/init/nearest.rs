//! The body of `seed_nearest_*` (k-means‖'s nearest-seed update, and the first seed of every
//! k-means++ run): a block's `BLOCK` points against the candidate rows, GEMM-style. Both tiles
//! stream through shared memory [`NEAR_DIMS`] dimensions at a time, transposed; thread
//! `(point group, candidate group)` accumulates [`NEAR_POINTS`] points × [`NEAR_CANDIDATES`]
//! candidates in registers, so a dimension costs four 16-byte shared loads for 64 multiply-adds
//! (one point per thread took a shared load per four candidates). The next chunk's copies (with
//! `cp.async` on sm_80 and later, plain loads before) go out while the current one is
//! multiplied. Every accumulator is [`crate::seeding::distance_from`]'s, over the dimensions in
//! order, so the distances are the CPU twin's floats; each thread meets its candidates in index
//! order, and the candidate groups merge with [`better`], so ties keep the earlier candidate.
//! Generic over [`Exec`] so that the host tests run it in the emulator.
//!
//! Launched for 2 blocks per multiprocessor. On an H100, E's k-means‖ seeding (10^7 × 128,
//! k = 1024, whose rounds are mostly this pass) went from 2,148 ms with the one-thread-per-point
//! direct form to 1,440–1,483 ms (`gpu-bench --cases E --whole`, session 13).

use super::SeedRows;
use crate::exec::Exec;
use crate::launch::BLOCK;
use crate::math::{AssignMetric, assign_step, better};
use crate::seeding::distance_from;
use crate::tile::load_vec4s;

/// Points per thread (a point group's) in the register tile.
pub const NEAR_POINTS: usize = 8;
/// Candidates per thread in the register tile.
pub const NEAR_CANDIDATES: usize = 8;
/// Consecutive threads that share a point group, each with candidates of its own: `BLOCK`
/// threads over `BLOCK` points make as many groups as a thread has points.
pub const NEAR_GROUPS: usize = NEAR_POINTS;
/// Candidates per tile: thread `(p, g)` holds columns `h·4·NEAR_GROUPS + g·4 + r` (slot
/// `4h + r`), so the candidate groups of a quarter warp read 32 consecutive words per 16-byte
/// load (no bank conflicts) and every thread's slots ascend with the candidate index.
pub const NEAR_TILE: usize = NEAR_GROUPS * NEAR_CANDIDATES;
/// Dimensions per staged chunk.
pub const NEAR_DIMS: usize = 16;
/// Row stride (f32) of the transposed point tile: +4 keeps rows 16-byte aligned.
pub const NEAR_X_STRIDE: usize = BLOCK as usize + 4;
/// Row stride (f32) of the transposed candidate tile.
pub const NEAR_C_STRIDE: usize = NEAR_TILE + 4;
/// Floats of one staged chunk of the candidate tile.
pub const NEAR_C_CHUNK: usize = NEAR_DIMS * NEAR_C_STRIDE;
/// Floats of one staged chunk of the point tile.
pub const NEAR_X_CHUNK: usize = NEAR_DIMS * NEAR_X_STRIDE;
/// Floats of shared memory before the point chunks: two candidate chunks, two slots of candidate
/// norms, the block's point norms, and the block's weight sum (a u64, [`sum_slot`]; padded to 16
/// bytes).
const NEAR_HEAD: usize = 2 * NEAR_C_CHUNK + 2 * NEAR_TILE + BLOCK as usize + 4;

/// Dynamic shared memory of `seed_nearest_*`, in bytes: `NEAR_HEAD`, then two point chunks,
/// which are the merge area once the sweep is over.
pub const NEAREST_SHARED_BYTES: usize = (NEAR_HEAD + 2 * NEAR_X_CHUNK) * 4;

/// Rows a thread's staging copies are apart (a thread copies one dimension of each).
const ROWS_APART: usize = BLOCK as usize / NEAR_DIMS;

const _: () = {
    assert!(BLOCK as usize / NEAR_POINTS * NEAR_GROUPS == BLOCK as usize);
    assert!(
        NEAR_POINTS.is_multiple_of(4) && NEAR_CANDIDATES.is_multiple_of(4),
        "16-byte loads"
    );
    assert!(
        NEAR_HEAD.is_multiple_of(4)
            && NEAR_C_CHUNK.is_multiple_of(4)
            && NEAR_X_CHUNK.is_multiple_of(4),
        "aligned tiles"
    );
    assert!((BLOCK as usize).is_multiple_of(NEAR_DIMS) && NEAR_TILE <= BLOCK as usize);
    assert!(
        2 * BLOCK as usize * NEAR_GROUPS <= NEAR_X_CHUNK,
        "the merge fits one point chunk"
    );
};

/// What a nearest pass reads and lowers.
#[derive(Clone, Copy)]
pub struct Nearest {
    pub data: SeedRows,
    /// Every point's seeding distance and nearest seed id (`n` each), lowered in place.
    pub min_dist: *mut f32,
    pub owner: *mut u32,
    /// The `count` candidates: row indices of `data`.
    pub rows: *const u32,
    pub count: usize,
    /// The id of candidate 0 (candidate `c` is seed `first_id + c`).
    pub first_id: u32,
    /// Every point starts from +∞ (its `min_dist` and `owner` are not read).
    pub fresh: bool,
}

/// Lowers the seeding distance of each point of this block (`block · BLOCK + thread`) to its
/// distance to each candidate, recording `first_id + c` where candidate `c` is strictly nearer
/// (ties keep the earlier candidate, and the point's seed on a tie with it); returns the point's
/// new distance (`None` past `n`).
///
/// # Safety
/// `BLOCK` threads, `point_blocks(n)` blocks, [`NEAREST_SHARED_BYTES`] of 16-byte-aligned
/// dynamic shared memory; every candidate a row of `data.x`, the pointers valid for the sizes
/// above. Every thread of the block calls this.
#[inline(always)]
pub unsafe fn nearest_points<const M: u32, E: Exec>(e: E, a: Nearest) -> Option<f32> {
    let first = e.block() * BLOCK as usize;
    let (best, index) = unsafe { sweep::<M, E>(e, &a, first) };
    unsafe { merge(e, &a, first, best, index) }
}

/// The block's weight sum, which the body leaves alone (see `NEAR_HEAD`).
#[inline(always)]
pub fn sum_slot<E: Exec>(e: E) -> *mut u64 {
    unsafe { Layout::of(e).x_norms.add(BLOCK as usize).cast::<u64>() }
}

/// Where the body keeps what in shared memory.
#[derive(Clone, Copy)]
struct Layout {
    /// Two candidate chunks of [`NEAR_C_CHUNK`] floats (step `s` in `s % 2`).
    cands: *mut f32,
    /// Two slots of [`NEAR_TILE`] candidate norms (tile `i` in slot `i % 2`).
    c_norms: *mut f32,
    /// The block's `BLOCK` point norms.
    x_norms: *mut f32,
    /// Two point chunks of [`NEAR_X_CHUNK`] floats (step `s` in `s % 2`); then the merge area.
    points: *mut f32,
}

impl Layout {
    #[inline(always)]
    fn of<E: Exec>(e: E) -> Self {
        let cands = e.shared::<f32>();
        let c_norms = unsafe { cands.add(2 * NEAR_C_CHUNK) };
        let x_norms = unsafe { c_norms.add(2 * NEAR_TILE) };
        let points = unsafe { cands.add(NEAR_HEAD) };
        Layout {
            cands,
            c_norms,
            x_norms,
            points,
        }
    }

    /// The candidate chunk of step `s`.
    #[inline(always)]
    fn cand_chunk(self, s: usize) -> *mut f32 {
        unsafe { self.cands.add((s % 2) * NEAR_C_CHUNK) }
    }

    /// The point chunk of step `s`.
    #[inline(always)]
    fn point_chunk(self, s: usize) -> *mut f32 {
        unsafe { self.points.add((s % 2) * NEAR_X_CHUNK) }
    }
}

/// Every candidate against this thread's points: the nearest of its own candidates per point
/// (`u32::MAX` and +∞ when none). Step `s` multiplies chunk `s % chunks` of tile `s / chunks`
/// from buffers `s % 2` while the copies of step `s + 1` fill the others: one barrier a step.
/// A tile's candidate norms come with its first chunk.
#[inline(always)]
unsafe fn sweep<const M: u32, E: Exec>(
    e: E,
    a: &Nearest,
    first: usize,
) -> ([f32; NEAR_POINTS], [u32; NEAR_POINTS]) {
    let metric = AssignMetric::from_id(M);
    let l = Layout::of(e);
    let t = e.thread();
    let (p, g) = (t / NEAR_GROUPS, t % NEAR_GROUPS);
    if metric == AssignMetric::SqL2 && first + t < a.data.n {
        unsafe { *l.x_norms.add(t) = *a.data.norms.add(first + t) };
    }
    let chunks = a.data.d.div_ceil(NEAR_DIMS);
    let steps = a.count.div_ceil(NEAR_TILE) * chunks;
    let mut best = [f32::INFINITY; NEAR_POINTS];
    let mut index = [u32::MAX; NEAR_POINTS];
    let mut acc = [[0f32; NEAR_CANDIDATES]; NEAR_POINTS];
    if steps > 0 {
        unsafe { stage::<M, E>(e, a, &l, first, 0, 0, 0) };
    }
    let (mut tile, mut kc) = (0, 0);
    for s in 0..steps {
        // This thread's copies of step `s` have landed; after the barrier everybody's have, and
        // every thread is done with the buffer of step `s − 1`, which the next copies refill.
        staged();
        e.sync();
        let last = kc + 1 == chunks;
        if s + 1 < steps {
            let (next_tile, next_kc) = if last { (tile + 1, 0) } else { (tile, kc + 1) };
            unsafe { stage::<M, E>(e, a, &l, first, s + 1, next_tile, next_kc) };
        }
        let xs = l.point_chunk(s);
        let cs = l.cand_chunk(s);
        let width = NEAR_DIMS.min(a.data.d - kc * NEAR_DIMS);
        // A full chunk has a constant trip count, so it unrolls and the shared loads of one
        // dimension overlap the multiply-adds of the previous one.
        if width == NEAR_DIMS {
            for jj in 0..NEAR_DIMS {
                unsafe { accumulate(metric, &mut acc, xs, cs, jj, p, g) };
            }
        } else {
            for jj in 0..width {
                unsafe { accumulate(metric, &mut acc, xs, cs, jj, p, g) };
            }
        }
        if last {
            unsafe { rank(metric, a, &l, tile, p, g, &acc, &mut best, &mut index) };
            acc = [[0f32; NEAR_CANDIDATES]; NEAR_POINTS];
            (tile, kc) = (tile + 1, 0);
        } else {
            kc += 1;
        }
    }
    (best, index)
}

/// Adds dimension `jj` of the staged chunks `xs` (points) and `cs` (candidates) to the thread's
/// accumulators (point group `p`, candidate group `g`).
///
/// # Safety
/// `xs` and `cs` hold staged chunks, 16-byte aligned.
#[inline(always)]
unsafe fn accumulate(
    metric: AssignMetric,
    acc: &mut [[f32; NEAR_CANDIDATES]; NEAR_POINTS],
    xs: *const f32,
    cs: *const f32,
    jj: usize,
    p: usize,
    g: usize,
) {
    let xv: [f32; NEAR_POINTS] =
        unsafe { load_vec4s(xs.add(jj * NEAR_X_STRIDE + p * NEAR_POINTS)) };
    let cs = unsafe { cs.add(jj * NEAR_C_STRIDE + g * 4) };
    let mut cv = [0f32; NEAR_CANDIDATES];
    for h in 0..NEAR_CANDIDATES / 4 {
        let v: [f32; 4] = unsafe { load_vec4s(cs.add(h * 4 * NEAR_GROUPS)) };
        cv[4 * h..4 * h + 4].copy_from_slice(&v);
    }
    // Index loops over constants unroll and keep `acc` in registers.
    #[allow(clippy::needless_range_loop)]
    for i in 0..NEAR_POINTS {
        for q in 0..NEAR_CANDIDATES {
            acc[i][q] = assign_step(metric, acc[i][q], xv[i], cv[q]);
        }
    }
}

/// Lowers each of this thread's points' best to its distances to the finished tile `tile`.
/// Branch-free, so the loops unroll and `acc` stays in registers; the slots ascend with the
/// candidate index, so a strict `<` keeps the earlier candidate on ties.
///
/// # Safety
/// The tile's norms (squared L2) and the block's point norms are in shared memory.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn rank(
    metric: AssignMetric,
    a: &Nearest,
    l: &Layout,
    tile: usize,
    p: usize,
    g: usize,
    acc: &[[f32; NEAR_CANDIDATES]; NEAR_POINTS],
    best: &mut [f32; NEAR_POINTS],
    index: &mut [u32; NEAR_POINTS],
) {
    let l2 = metric == AssignMetric::SqL2;
    let c0 = tile * NEAR_TILE;
    let mut x_sq = [0f32; NEAR_POINTS];
    let mut c_sq = [0f32; NEAR_CANDIDATES];
    if l2 {
        x_sq = unsafe { load_vec4s(l.x_norms.add(p * NEAR_POINTS)) };
        let norms = unsafe { l.c_norms.add((tile % 2) * NEAR_TILE + g * 4) };
        for h in 0..NEAR_CANDIDATES / 4 {
            let v: [f32; 4] = unsafe { load_vec4s(norms.add(h * 4 * NEAR_GROUPS)) };
            c_sq[4 * h..4 * h + 4].copy_from_slice(&v);
        }
    }
    let column = |q: usize| c0 + (q / 4) * 4 * NEAR_GROUPS + g * 4 + q % 4;
    #[allow(clippy::needless_range_loop)]
    for i in 0..NEAR_POINTS {
        for q in 0..NEAR_CANDIDATES {
            let dist = distance_from(metric, acc[i][q], x_sq[i], c_sq[q]);
            let take = column(q) < a.count && dist < best[i];
            best[i] = if take { dist } else { best[i] };
            index[i] = if take { column(q) as u32 } else { index[i] };
        }
    }
}

/// Merges the candidate groups' best per point (lowest distance, then lowest candidate) and
/// lowers the point's seeding distance with it; returns the new distance of this thread's
/// point (`None` past `n`).
///
/// # Safety
/// Every thread calls this after its sweep; the point chunks become the merge area.
#[inline(always)]
unsafe fn merge<E: Exec>(
    e: E,
    a: &Nearest,
    first: usize,
    best: [f32; NEAR_POINTS],
    index: [u32; NEAR_POINTS],
) -> Option<f32> {
    let t = e.thread();
    let (p, g) = (t / NEAR_GROUPS, t % NEAR_GROUPS);
    let dists = Layout::of(e).points;
    let ids = unsafe { dists.add(BLOCK as usize * NEAR_GROUPS) }.cast::<u32>();
    // Every thread is done with the chunks.
    e.sync();
    for i in 0..NEAR_POINTS {
        let slot = (p * NEAR_POINTS + i) * NEAR_GROUPS + g;
        unsafe {
            *dists.add(slot) = best[i];
            *ids.add(slot) = index[i];
        }
    }
    e.sync();
    let i = first + t;
    if i >= a.data.n {
        return None;
    }
    let (mut nd, mut nc) = (f32::INFINITY, u32::MAX);
    for slot in t * NEAR_GROUPS..(t + 1) * NEAR_GROUPS {
        let (d, c) = unsafe { (*dists.add(slot), *ids.add(slot)) };
        if better(d, c, nd, nc) {
            (nd, nc) = (d, c);
        }
    }
    let (mut m, mut o) = if a.fresh {
        (f32::INFINITY, a.first_id)
    } else {
        unsafe { (*a.min_dist.add(i), *a.owner.add(i)) }
    };
    if nd < m {
        (m, o) = (nd, a.first_id + nc);
    }
    unsafe {
        *a.min_dist.add(i) = m;
        *a.owner.add(i) = o;
    }
    Some(m)
}

/// Issues the copies of step `s` (chunk `kc` of tile `tile`) into its buffers: dimension
/// `t % NEAR_DIMS` of every `ROWS_APART`-th candidate and point from `t / NEAR_DIMS`, so
/// consecutive threads read consecutive words of a row; with the tile's first chunk, its
/// candidate norms (squared L2) into slot `tile % 2`.
/// Rows past `n` and candidates past `count` are left as they are (no result reads them).
///
/// # Safety
/// As [`nearest_points`]; every thread calls this between the same barriers.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn stage<const M: u32, E: Exec>(
    e: E,
    a: &Nearest,
    l: &Layout,
    first: usize,
    s: usize,
    tile: usize,
    kc: usize,
) {
    let SeedRows { x, norms, n, d } = a.data;
    let t = e.thread();
    let (r0, jj) = (t / NEAR_DIMS, t % NEAR_DIMS);
    let j0 = kc * NEAR_DIMS;
    let c0 = tile * NEAR_TILE;
    if jj < d - j0 {
        let col = unsafe { x.add(j0 + jj) };
        let cs = Shared::new(l.cand_chunk(s));
        let candidates = (a.count - c0).min(NEAR_TILE);
        let mut r = r0;
        while r < candidates {
            let row = unsafe { *a.rows.add(c0 + r) } as usize;
            unsafe { cs.copy(jj * NEAR_C_STRIDE + r, col.add(row * d)) };
            r += ROWS_APART;
        }
        let xs = Shared::new(l.point_chunk(s));
        let points = (n - first).min(BLOCK as usize);
        let mut r = r0;
        while r < points {
            unsafe { xs.copy(jj * NEAR_X_STRIDE + r, col.add((first + r) * d)) };
            r += ROWS_APART;
        }
    }
    let l2 = AssignMetric::from_id(M) == AssignMetric::SqL2;
    if l2 && kc == 0 && t < NEAR_TILE && c0 + t < a.count {
        let slot = Shared::new(unsafe { l.c_norms.add((tile % 2) * NEAR_TILE) });
        let row = unsafe { *a.rows.add(c0 + t) } as usize;
        unsafe { slot.copy(t, norms.add(row)) };
    }
}

/// A shared-memory destination of staging copies: asynchronous (`cp.async`) on sm_80 and later,
/// a load and a store before.
#[derive(Clone, Copy)]
struct Shared {
    #[cfg(not(all(target_arch = "nvptx64", target_feature = "sm_80")))]
    p: *mut f32,
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
    addr: u32,
}

impl Shared {
    #[inline(always)]
    fn new(p: *mut f32) -> Self {
        Shared {
            #[cfg(not(all(target_arch = "nvptx64", target_feature = "sm_80")))]
            p,
            #[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
            addr: crate::cp_async::shared_addr(p),
        }
    }

    /// Copies the f32 at `src` to word `at`.
    ///
    /// # Safety
    /// `src` valid; word `at` inside the destination.
    #[inline(always)]
    unsafe fn copy(self, at: usize, src: *const f32) {
        #[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
        unsafe {
            crate::cp_async::copy_4(self.addr + 4 * at as u32, src, 4)
        };
        #[cfg(not(all(target_arch = "nvptx64", target_feature = "sm_80")))]
        unsafe {
            *self.p.add(at) = *src
        };
    }
}

/// Waits for this thread's staging copies (on sm_80 and later; before, they are done).
#[inline(always)]
fn staged() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
    crate::cp_async::wait_all();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::emu::{P, launch};
    use crate::init::point_blocks;
    use crate::init::tests::values;
    use crate::math::sq_norm;
    use crate::seeding::row_distance;

    /// Rows of a test and their squared norms.
    struct Case {
        metric: AssignMetric,
        x: Vec<f32>,
        norms: Vec<f32>,
        n: usize,
        d: usize,
    }

    /// Every point's seeding distance and nearest seed.
    type State = (Vec<f32>, Vec<u32>);

    impl Case {
        fn new(metric: AssignMetric, n: usize, d: usize, levels: u32) -> Self {
            let x = values(n * d, levels, (n * 31 + d) as u32);
            let norms = x.chunks(d).map(sq_norm).collect();
            Case {
                metric,
                x,
                norms,
                n,
                d,
            }
        }

        fn row(&self, r: usize) -> &[f32] {
            &self.x[r * self.d..(r + 1) * self.d]
        }

        /// One pass on the CPU, as `backend::cpu::init::Seeder::seed_nearest` makes it: every
        /// candidate in order, a strict `<`.
        fn reference(&self, candidates: &[u32], first_id: u32, fresh: bool, state: &mut State) {
            for i in 0..self.n {
                if fresh {
                    (state.0[i], state.1[i]) = (f32::INFINITY, first_id);
                }
                for (c, &r) in candidates.iter().enumerate() {
                    let r = r as usize;
                    let (x_sq, c_sq) = (self.norms[i], self.norms[r]);
                    let v = row_distance(self.metric, self.row(i), self.row(r), x_sq, c_sq);
                    if v < state.0[i] {
                        (state.0[i], state.1[i]) = (v, first_id + c as u32);
                    }
                }
            }
        }

        /// One pass of the kernel body in the emulator; returns what it reported per point.
        fn emulated(
            &self,
            candidates: &[u32],
            first_id: u32,
            fresh: bool,
            state: &mut State,
        ) -> Vec<f32> {
            let mut reported = vec![f32::NAN; self.n];
            let a = Nearest {
                data: SeedRows {
                    x: self.x.as_ptr(),
                    norms: self.norms.as_ptr(),
                    n: self.n,
                    d: self.d,
                },
                min_dist: state.0.as_mut_ptr(),
                owner: state.1.as_mut_ptr(),
                rows: candidates.as_ptr(),
                count: candidates.len(),
                first_id,
                fresh,
            };
            let args = P(&a as *const Nearest as *mut Nearest);
            let out = P::of(&mut reported);
            let metric = self.metric;
            launch(
                point_blocks(self.n),
                BLOCK as usize,
                NEAREST_SHARED_BYTES,
                |e| {
                    let a = unsafe { *args.get() };
                    let got = unsafe {
                        match metric {
                            AssignMetric::SqL2 => {
                                nearest_points::<{ AssignMetric::SqL2 as u32 }, _>(e, a)
                            }
                            AssignMetric::L1 => {
                                nearest_points::<{ AssignMetric::L1 as u32 }, _>(e, a)
                            }
                        }
                    };
                    if let Some(m) = got {
                        unsafe { *out.get().add(e.block() * BLOCK as usize + e.thread()) = m };
                    }
                },
            );
            reported
        }
    }

    /// Two passes (a fresh one, then one that lowers what it left) over `n × d` rows with
    /// `levels` (0: continuous values), the candidates every `stride`-th row (`count` of them,
    /// wrapping: repeated rows tie), against the CPU's loop.
    fn check(metric: AssignMetric, n: usize, d: usize, levels: u32, count: usize, stride: usize) {
        let case = Case::new(metric, n, d, levels);
        let pick = |from: usize| -> Vec<u32> {
            (0..count)
                .map(|c| ((from + c * stride) % n) as u32)
                .collect()
        };
        let name = format!("{metric:?} n={n} d={d} levels={levels} count={count}");
        let mut want: State = (vec![0f32; n], vec![0u32; n]);
        let mut got: State = (vec![f32::NAN; n], vec![7u32; n]);
        for (pass, (from, first_id, fresh)) in [(0, 0, true), (n / 3, count as u32, false)]
            .into_iter()
            .enumerate()
        {
            let candidates = pick(from);
            case.reference(&candidates, first_id, fresh, &mut want);
            let reported = case.emulated(&candidates, first_id, fresh, &mut got);
            for (i, r) in reported.iter().enumerate() {
                let at = format!("{name} pass {pass} point {i}");
                assert_eq!(got.0[i].to_bits(), want.0[i].to_bits(), "{at}: distance");
                assert_eq!(got.1[i], want.1[i], "{at}: seed");
                assert_eq!(r.to_bits(), want.0[i].to_bits(), "{at}: reported");
            }
        }
    }

    #[test]
    fn emulated_nearest_pass_matches_the_cpu_loop() {
        for metric in [AssignMetric::SqL2, AssignMetric::L1] {
            // n not a multiple of the block, two chunks (the last partial), a partial tile.
            check(metric, 300, 17, 0, 70, 7);
            // d = 1, one candidate.
            check(metric, 257, 1, 0, 1, 1);
            // Ties (an integer lattice; candidates 100 on repeat rows 0, 2, …), more tiles than
            // the buffers, one full chunk.
            check(metric, 200, 16, 2, 150, 2);
            // Mostly duplicate rows.
            check(metric, 100, 3, 2, 40, 1);
            // k = n: every row a candidate, so every point ends at distance 0 on itself.
            check(metric, 130, 5, 0, 130, 1);
        }
        // No candidates: nothing moves.
        check(AssignMetric::SqL2, 40, 3, 0, 0, 1);
    }
}
