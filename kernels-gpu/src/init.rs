//! Seeding kernels: greedy k-means++ with all the trials of a step in one pass (and, for the
//! device-side step loop, a kernel that settles a step's winner and locates the next step's
//! draws), and the rounds of k-means‖. The trials, locating and drawing kernels run one thread
//! per point: a block's points and the candidate rows are staged through shared memory
//! `SEED_DIMS` dimensions at a time with coalesced loads. The nearest pass (a k-means‖ round's
//! new candidates, thousands of them) is register-tiled GEMM-style instead ([`nearest`]). Every
//! distance is [`crate::seeding::distance_from`] of an accumulator run in dimension order with
//! [`crate::math::assign_step`] (squared L2 in the expanded form, from the rows' squared norms
//! `norms`), as `kernels_gpu::seeding::row_distance` gives it on the CPU. Weights are the exact
//! integers of [`crate::seeding`] times each point's units (`counts` when given, else the sample
//! weights' `weights`, null: one each), so every sum is order-free. CPU twins:
//! `host/src/backend/cpu/init.rs` (each kernel names its own); the host fills the parameter
//! structs in `backend::cuda::init`.

#[cfg(test)]
mod emulated;
pub mod nearest;

#[cfg(target_arch = "nvptx64")]
use crate::exec::Gpu;
use crate::exec::{Exec, atomic_add_u64, atomic_fetch_add_u32, shfl_xor_u64};
use crate::fixed::units_at;
use crate::launch::{BLOCK, Kernel, SEED_CANDIDATES};
use crate::math::{AssignMetric, assign_step};
use crate::params::DevPtr;
use crate::seeding::{NO_ROW, WeightScale, distance_from, draw, sampled, uniform32};
use crate::tile::load_vec4s;
pub use nearest::NEAREST_SHARED_BYTES;

/// The rows a seeding pass reads: `x` row-major with `d` values a row (the points are rows
/// `0..n`; candidates may lie past them, in a GPU's scratch rows), and every row's squared norm
/// (read for squared L2 only).
#[derive(Clone, Copy)]
pub struct SeedRows {
    pub x: *const f32,
    pub norms: *const f32,
    pub n: usize,
    pub d: usize,
}

/// Dimensions of the candidates a seeding block stages in shared memory at a time.
pub const SEED_DIMS: usize = 32;
/// Row stride (in f32) of the seeding kernels' point tile: `SEED_DIMS + 1`, so that the threads
/// of a warp, each reading its own point, hit 32 different banks.
pub const SEED_POINT_STRIDE: usize = SEED_DIMS + 1;
/// Stride (in f32) of the candidate tile, which holds dimension `j` of every candidate in one
/// row (`j · SEED_CANDIDATE_STRIDE + c`): a thread reads a dimension of four candidates as one
/// 16-byte load. Four more than the candidates keeps rows 16-byte aligned and spreads the
/// staging stores of a warp (one candidate, 32 dimensions) over 8 banks.
pub const SEED_CANDIDATE_STRIDE: usize = SEED_CANDIDATES + 4;
/// Dynamic shared memory of the one-thread-per-point seeding kernels that compare points with
/// candidate rows (`seed_trials_*`, `seed_locate_*`, `seed_greedy_draw_*`) for points of more
/// than [`SEED_DIRECT_D`] dimensions: the staged candidates (`SEED_DIMS` rows of
/// [`SEED_CANDIDATE_STRIDE`]), one u64 sum per candidate, the candidates' squared norms, then
/// the staged points (`BLOCK` rows of stride [`SEED_POINT_STRIDE`]). The locating search's
/// scratch (`BLOCK + 2` u64) overlaps the candidate tile. `seed_nearest_*` takes
/// [`NEAREST_SHARED_BYTES`]; `seed_sample_*` and `seed_owner_weights` none.
pub const SEED_SHARED_BYTES: usize = SEED_CANDIDATE_BYTES + BLOCK as usize * SEED_POINT_STRIDE * 4;

/// The shared memory before the point tile: candidates, their sums and their norms.
const SEED_CANDIDATE_BYTES: usize =
    SEED_DIMS * SEED_CANDIDATE_STRIDE * 4 + SEED_CANDIDATES * 8 + SEED_CANDIDATES * 4;

/// Points of at most this many dimensions are read by each thread straight from global memory
/// into the distance loop instead of being staged (a warp's rows are a few contiguous lines):
/// such a block needs no point tile, so eight blocks of `BLOCK` fit a multiprocessor instead of
/// five, and no thread waits for the staging of its point. On seed 003's pixels (d = 3) the
/// staged trials pass took 60 µs a step on an H200, eleven times its memory traffic.
pub const SEED_DIRECT_D: usize = 16;

/// Dynamic shared memory of the seeding kernels that [`SEED_SHARED_BYTES`] names, for points
/// of `d` dimensions.
pub const fn seed_shared_bytes(d: usize) -> usize {
    if d <= SEED_DIRECT_D {
        SEED_CANDIDATE_BYTES
    } else {
        SEED_SHARED_BYTES
    }
}

/// Blocks of `BLOCK` threads of the one-thread-per-point seeding launches (`seed_nearest_*`,
/// `seed_trials_*`, `seed_sample_*`, `seed_owner_weights`) over `n` points: also the number of
/// block weight sums per candidate that the locating kernels search (`nb`). `seed_locate_*`
/// runs one block per draw, `seed_greedy_draw_*` one per trial.
pub const fn point_blocks(n: usize) -> usize {
    n.div_ceil(BLOCK as usize)
}

/// The units of point `i`: `counts[i]` when `counts` is given (k-means‖ candidates, which
/// stand for the points nearest to them), else its sample weight's.
///
/// # Safety
/// `counts` null or holding more than `i` values; `weights` as for [`units_at`].
#[inline(always)]
unsafe fn units_of(weights: *const f32, counts: *const u64, i: usize) -> u64 {
    if counts.is_null() {
        unsafe { units_at(weights, i) as u64 }
    } else {
        unsafe { *counts.add(i) }
    }
}

/// The staged candidates (`SEED_DIMS` rows of `SEED_CANDIDATE_STRIDE`, dimension-major).
#[inline(always)]
fn candidate_tile<E: Exec>(e: E) -> *mut f32 {
    e.shared::<f32>()
}

/// The block sums after the candidate tile.
#[inline(always)]
fn block_slots<E: Exec>(e: E) -> *mut u64 {
    unsafe {
        candidate_tile(e)
            .add(SEED_DIMS * SEED_CANDIDATE_STRIDE)
            .cast::<u64>()
    }
}

/// The candidates' squared norms after the block sums.
#[inline(always)]
fn candidate_norms<E: Exec>(e: E) -> *mut f32 {
    unsafe { block_slots(e).add(SEED_CANDIDATES).cast::<f32>() }
}

/// The staged points (`BLOCK` rows of stride `SEED_POINT_STRIDE`) after the candidate norms.
#[inline(always)]
fn point_tile<E: Exec>(e: E) -> *mut f32 {
    unsafe { candidate_norms(e).add(SEED_CANDIDATES) }
}

/// Distances from the `BLOCK` points from row `first < n` (thread `t` gets point `first + t`'s,
/// meaningless past `n`) to the `count ≤ SEED_CANDIDATES` rows `row(c)` (entries from `count`
/// on are meaningless). The inner loop is unrolled for `count` rounded up to 4, 6, 8, 10, 12, 16
/// or `SEED_CANDIDATES` (a k-means++ pass tries `3 + ⌊ln k⌋` rows): testing every candidate of
/// a full tile costs more than the distances themselves. Every thread of the block calls this,
/// with [`seed_shared_bytes`]`(d)` of dynamic shared memory.
///
/// # Safety
/// `data` valid for its sizes, every `row(c)` (`c < count`) a row of `data.x`.
#[inline(always)]
pub unsafe fn distances<const M: u32, E: Exec>(
    e: E,
    data: SeedRows,
    first: usize,
    count: usize,
    row: impl Fn(usize) -> u32,
) -> [f32; SEED_CANDIDATES] {
    let mut acc = [0f32; SEED_CANDIDATES];
    let acc_ = &mut acc;
    unsafe {
        match count {
            0..=4 => distances_of::<M, 4, E>(e, data, first, count, row, acc_),
            5..=6 => distances_of::<M, 6, E>(e, data, first, count, row, acc_),
            7..=8 => distances_of::<M, 8, E>(e, data, first, count, row, acc_),
            9..=10 => distances_of::<M, 10, E>(e, data, first, count, row, acc_),
            11..=12 => distances_of::<M, 12, E>(e, data, first, count, row, acc_),
            13..=16 => distances_of::<M, 16, E>(e, data, first, count, row, acc_),
            _ => distances_of::<M, SEED_CANDIDATES, E>(e, data, first, count, row, acc_),
        }
    }
    acc
}

/// [`distances`] with the first `C ≥ count` candidates accumulated into `acc` (zeros), then
/// finished into distances (squared L2: with the point's norm and the candidates', staged with
/// the first chunk) before the last barrier, so that a later call may restage them. Both tiles
/// (the candidates only, for points of at most [`SEED_DIRECT_D`] dimensions, which each thread
/// reads itself) are loaded row segment by row segment (a warp reads 32 consecutive floats of a
/// row, see [`stage`]). `C ≤ SEED_CANDIDATES`.
#[inline(always)]
unsafe fn distances_of<const M: u32, const C: usize, E: Exec>(
    e: E,
    data: SeedRows,
    first: usize,
    count: usize,
    row: impl Fn(usize) -> u32,
    acc: &mut [f32; SEED_CANDIDATES],
) {
    let metric = AssignMetric::from_id(M);
    let l2 = metric == AssignMetric::SqL2;
    let SeedRows { x, norms, n, d } = data;
    let (cands, points, c_norms) = (candidate_tile(e), point_tile(e), candidate_norms(e));
    let t = e.thread();
    let lane = t % SEED_DIMS;
    let rows = (n - first).min(BLOCK as usize);
    let direct = d <= SEED_DIRECT_D;
    let mut j0 = 0;
    while j0 < d {
        let width = SEED_DIMS.min(d - j0);
        if lane < width {
            let cand_dst = unsafe { cands.add(lane * SEED_CANDIDATE_STRIDE) };
            unsafe { stage(e, x, d, j0 + lane, count, C, &row, cand_dst, 1) };
        }
        if lane < width && !direct {
            let point_rows = |p: usize| (first + p) as u32;
            let point_dst = unsafe { points.add(lane) };
            let stride = SEED_POINT_STRIDE;
            unsafe {
                stage(
                    e,
                    x,
                    d,
                    j0 + lane,
                    rows,
                    rows,
                    &point_rows,
                    point_dst,
                    stride,
                )
            };
        }
        if l2 && j0 == 0 && t < count {
            unsafe { *c_norms.add(t) = *norms.add(row(t) as usize) };
        }
        staged();
        e.sync();
        if t < rows {
            let point = if direct {
                unsafe { x.add((first + t) * d + j0) }
            } else {
                unsafe { points.add(t * SEED_POINT_STRIDE) }
            };
            for j in 0..width {
                let v = unsafe { *point.add(j) };
                let dim: [f32; C] = unsafe { load_vec4s(cands.add(j * SEED_CANDIDATE_STRIDE)) };
                // An index loop over the constant `C` unrolls and keeps `acc` in registers (an
                // iterator chain left it in local memory).
                #[allow(clippy::needless_range_loop)]
                for c in 0..C {
                    acc[c] = assign_step(metric, acc[c], v, dim[c]);
                }
            }
            if l2 && j0 + width == d {
                let x_sq = unsafe { *norms.add(first + t) };
                let c_sq: [f32; C] = unsafe { load_vec4s(c_norms) };
                #[allow(clippy::needless_range_loop)]
                for c in 0..C {
                    acc[c] = distance_from(metric, acc[c], x_sq, c_sq[c]);
                }
            }
        }
        e.sync();
        j0 += SEED_DIMS;
    }
}

/// Rows a warp of a seeding block stages are this many apart: a block's warps take consecutive
/// rows, a lane one dimension.
const ROWS_APART: usize = BLOCK as usize / SEED_DIMS;

/// Stages dimension `col` of rows `row(r)` (zero for `r ≥ live`), `r` from this thread's warp
/// (`r ≡ warp (mod ROWS_APART)`) below `slots`, into `dst[r · stride]`. On sm_80 and later
/// with `cp.async`: every copy of the thread is in flight at once and takes no register (one
/// load at a time, each waited for, left the staging bound by memory latency); [`staged`]
/// waits for them, then the caller synchronises the block.
///
/// # Safety
/// `x` holds rows of `d` values, `col < d`, every `row(r)` with `r < live` a row of it; `dst`
/// shared memory with room for `slots` rows of `stride`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn stage<E: Exec>(
    e: E,
    x: *const f32,
    d: usize,
    col: usize,
    live: usize,
    slots: usize,
    row: &impl Fn(usize) -> u32,
    dst: *mut f32,
    stride: usize,
) {
    let mut r = e.thread() / SEED_DIMS;
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
    {
        use crate::cp_async::{copy_4, shared_addr};
        let base = shared_addr(dst);
        while r < slots {
            let (src, bytes) = if r < live {
                (unsafe { x.add(row(r) as usize * d + col) }, 4)
            } else {
                (x, 0)
            };
            unsafe { copy_4(base + (4 * r * stride) as u32, src, bytes) };
            r += ROWS_APART;
        }
    }
    #[cfg(not(all(target_arch = "nvptx64", target_feature = "sm_80")))]
    while r < slots {
        let v = if r < live {
            unsafe { *x.add(row(r) as usize * d + col) }
        } else {
            0.0
        };
        unsafe { *dst.add(r * stride) = v };
        r += ROWS_APART;
    }
}

/// Waits for this thread's [`stage`] copies (all of them at once: they are in flight together).
#[inline(always)]
fn staged() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
    crate::cp_async::wait_all();
}

/// Adds `v` (one per thread) into the block's shared sum `slot`: warp sums, one atomic per warp.
#[allow(clippy::manual_is_multiple_of)]
#[inline(always)]
unsafe fn add_to_block<E: Exec>(e: E, slot: *mut u64, v: u64) {
    let total = warp_sum_u64(e, v);
    if e.thread() % 32 == 0 {
        unsafe { atomic_add_u64(slot, total) };
    }
}

/// One k-means++ step: first lowers `min_dist` to the previous winner `*pending` (unless
/// `pending` is null or holds [`NO_ROW`]), then for each trial `t` writes the potential
/// `Σ_i weight_of(min(min_dist_i, dist(i, candidates[t])), units_i)` of this block to
/// `block_sums[t · gridDim + block]` and adds it to `potentials[t]` (zeroed before). Does
/// nothing once `*stop` (when not null) is set.
///
/// # Safety
/// `ceil(n / BLOCK)` blocks of `BLOCK` threads, [`seed_shared_bytes`]`(d)` of dynamic shared memory;
/// `data` valid for its rows (the points and every row named here), `weights` null or `n`,
/// `counts` null or `n`, `min_dist` `n`, `candidates` `trials` rows of `data`, `*pending`
/// [`NO_ROW`] or a row of `data`, `trials + 1 ≤ SEED_CANDIDATES`, `block_sums`
/// `trials × gridDim`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn trials<const M: u32, E: Exec>(
    e: E,
    data: SeedRows,
    weights: *const f32,
    counts: *const u64,
    min_dist: *mut f32,
    candidates: *const u32,
    trials: u32,
    pending: *const u32,
    stop: *const u32,
    ws: WeightScale,
    block_sums: *mut u64,
    potentials: *mut u64,
) {
    if !stop.is_null() && unsafe { *stop } != 0 {
        return;
    }
    let metric = AssignMetric::from_id(M);
    let (t, b) = (e.thread(), e.block());
    let i = b * BLOCK as usize + t;
    let live = i < data.n;
    let trials = trials as usize;
    let pending = if pending.is_null() {
        NO_ROW
    } else {
        unsafe { *pending }
    };
    let count = trials + usize::from(pending != NO_ROW);
    let slots = block_slots(e);
    if t < SEED_CANDIDATES {
        unsafe { *slots.add(t) = 0 };
    }
    let acc = unsafe {
        distances::<M, _>(e, data, b * BLOCK as usize, count, |c| {
            if c < trials {
                *candidates.add(c)
            } else {
                pending
            }
        })
    };
    let mut old = if live {
        unsafe { *min_dist.add(i) }
    } else {
        0.0
    };
    if live && pending != NO_ROW {
        // A loop, not `acc[trials]`: a dynamic index would move `acc` to local memory.
        for (c, &a) in acc.iter().enumerate() {
            if c == trials && a < old {
                old = a;
            }
        }
        unsafe { *min_dist.add(i) = old };
    }
    let units = if live {
        unsafe { units_of(weights, counts, i) }
    } else {
        0
    };
    for (c, &a) in acc.iter().enumerate() {
        if c < trials {
            let w = ws.weight_of(metric, if a < old { a } else { old }, units);
            unsafe { add_to_block(e, slots.add(c), w) };
        }
    }
    e.sync();
    if t < trials {
        let sum = unsafe { *slots.add(t) };
        unsafe {
            *block_sums.add(t * e.grid_dim() + b) = sum;
            atomic_add_u64(potentials.add(t), sum);
        }
    }
}

/// Seeding rows nearest: lowers every point's `min_dist` (from +∞ with `fresh`) to its
/// distance to each of the `count` rows `rows`, recording `first_id + c` in `owner` where a
/// row is strictly nearer (ties keep the earlier row), with the register tile of
/// [`nearest::nearest_points`]; writes this block's weight sum to `block_sums[block]` and adds
/// it to `total` (zeroed by the host).
///
/// # Safety
/// `ceil(n / BLOCK)` blocks of `BLOCK` threads, [`NEAREST_SHARED_BYTES`] of dynamic shared
/// memory; `a` as [`nearest::nearest_points`] asks, `weights` and `counts` as for [`trials`],
/// `block_sums` `gridDim` values.
#[inline(always)]
unsafe fn nearest_pass<const M: u32, E: Exec>(
    e: E,
    a: nearest::Nearest,
    weights: *const f32,
    counts: *const u64,
    ws: WeightScale,
    block_sums: *mut u64,
    total: *mut u64,
) {
    let (t, b) = (e.thread(), e.block());
    let slot = nearest::sum_slot(e);
    if t == 0 {
        unsafe { *slot = 0 };
    }
    // The body's barriers order the zeroing before every thread's addition.
    let w = match unsafe { nearest::nearest_points::<M, _>(e, a) } {
        Some(m) => {
            let units = unsafe { units_of(weights, counts, b * BLOCK as usize + t) };
            ws.weight_of(AssignMetric::from_id(M), m, units)
        }
        None => 0,
    };
    unsafe { add_to_block(e, slot, w) };
    e.sync();
    if t == 0 {
        unsafe {
            *block_sums.add(b) = *slot;
            atomic_add_u64(total, *slot);
        }
    }
}

/// Inclusive prefix sums of one u64 per thread over the block (Hillis–Steele through
/// `scratch`, `BLOCK` values); every thread gets its own. All threads call this.
#[inline(always)]
unsafe fn inclusive_scan<E: Exec>(e: E, scratch: *mut u64, v: u64) -> u64 {
    let t = e.thread();
    let mut acc = v;
    unsafe { *scratch.add(t) = acc };
    e.sync();
    let mut offset = 1;
    while offset < BLOCK as usize {
        let add = if t >= offset {
            unsafe { *scratch.add(t - offset) }
        } else {
            0
        };
        e.sync();
        acc += add;
        unsafe { *scratch.add(t) = acc };
        e.sync();
        offset *= 2;
    }
    acc
}

/// With one value per thread: the first thread whose inclusive prefix sum exceeds `r` (the last
/// thread when none does) and `r` less the sum before that thread, in every thread. `scratch`
/// holds `BLOCK + 2` u64 of shared memory; all threads call this.
#[inline(always)]
unsafe fn find_in_block<E: Exec>(e: E, scratch: *mut u64, v: u64, r: u64) -> (usize, u64) {
    let t = e.thread();
    let found = unsafe { scratch.add(BLOCK as usize) };
    let through = unsafe { inclusive_scan(e, scratch, v) };
    let before = through - v;
    // The prefix sums never decrease, so exactly one thread sees `r` fall in its range.
    if before <= r && (t == BLOCK as usize - 1 || through > r) {
        unsafe {
            *found = t as u64;
            *found.add(1) = r - before;
        }
    }
    e.sync();
    let out = unsafe { (*found as usize, *found.add(1)) };
    e.sync();
    out
}

/// The first point whose cumulative weight exceeds `r` (< the total weight), where a point's
/// weight is that of `min(min_dist, dist(point, pending))` (the previous winner not yet applied;
/// [`NO_ROW`]: none) and `sums` holds the weight sums of the `nb` blocks of `BLOCK` points.
/// The block is found by narrowing ranges of block sums `BLOCK` segments at a time, the point by
/// recomputing that block's weights. Every thread of the block calls this and gets the row.
/// CPU twin: `backend::cpu::init::Seeder::locate` (host crate).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn locate_draw<const M: u32, E: Exec>(
    e: E,
    data: SeedRows,
    weights: *const f32,
    counts: *const u64,
    min_dist: *const f32,
    pending: u32,
    sums: *const u64,
    nb: usize,
    r: u64,
    ws: WeightScale,
) -> u32 {
    let metric = AssignMetric::from_id(M);
    let (t, bs) = (e.thread(), BLOCK as usize);
    let scratch = e.shared::<u64>();
    let (mut lo, mut hi, mut rest) = (0, nb, r);
    while hi - lo > 1 {
        let per = (hi - lo).div_ceil(bs);
        let from = (lo + t * per).min(hi);
        let to = (from + per).min(hi);
        let mut s = 0u64;
        for at in from..to {
            s += unsafe { *sums.add(at) };
        }
        let (segment, left) = unsafe { find_in_block(e, scratch, s, rest) };
        lo = (lo + segment * per).min(hi - 1);
        hi = (lo + per).min(hi);
        rest = left;
    }
    // The block's distances to the pending row, staged as the trials pass stages them (the
    // tiles overlap `scratch`, which is not in use until the next search).
    let to_pending = if pending == NO_ROW {
        f32::INFINITY
    } else {
        unsafe { distances::<M, _>(e, data, lo * bs, 1, |_| pending)[0] }
    };
    let n = data.n;
    let i = lo * bs + t;
    let w = if i < n {
        let mut m = unsafe { *min_dist.add(i) };
        if to_pending < m {
            m = to_pending;
        }
        ws.weight_of(metric, m, unsafe { units_of(weights, counts, i) })
    } else {
        0
    };
    let (p, _) = unsafe { find_in_block(e, scratch, w, rest) };
    (lo * bs + p).min(n - 1) as u32
}

/// For each draw `r = draws[block]`, the point [`locate_draw`] finds in the weights whose block
/// sums are `sums`, with `pending` applied; writes `out[block]`.
///
/// # Safety
/// One block of `BLOCK` threads per draw, [`seed_shared_bytes`]`(d)` of dynamic shared memory; `sums`
/// the `nb` block sums of exactly these weights, every draw below their total.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn locate<const M: u32, E: Exec>(
    e: E,
    data: SeedRows,
    weights: *const f32,
    counts: *const u64,
    min_dist: *const f32,
    pending: u32,
    sums: *const u64,
    nb: u32,
    draws: *const u64,
    ws: WeightScale,
    out: *mut u32,
) {
    let r = unsafe { *draws.add(e.block()) };
    let row = unsafe {
        locate_draw::<M, E>(
            e,
            data,
            weights,
            counts,
            min_dist,
            pending,
            sums,
            nb as usize,
            r,
            ws,
        )
    };
    if e.thread() == 0 {
        unsafe { *out.add(e.block()) = row };
    }
}

/// Where the device-side k-means++ loop keeps its state between kernels.
#[derive(Clone, Copy)]
struct Greedy {
    /// `k` rows; the host writes `chosen[0]`, [`greedy_draw`] each step's winner.
    chosen: *mut u32,
    /// The pre-generated uniforms, `trials` per step from step 1.
    uniforms: *const u64,
    /// The last trials pass's candidates and potentials (read), and the next pass's (written;
    /// the potentials zeroed).
    last_candidates: *const u32,
    last_potentials: *const u64,
    next_candidates: *mut u32,
    next_potentials: *mut u64,
    /// 0 while the loop runs; the number of rows chosen once a step's winner left no weight.
    stop: *mut u32,
}

/// Step `step` of greedy k-means++ on the device (one block per trial): from step 2 on, picks
/// the winner of the last trials pass (lowest potential, ties to the earliest trial), writes it
/// to `chosen[step − 1]` and takes its potential as the total (step 1: `first_total`, after the
/// first seed); then, unless `step == k`, locates trial `block`'s draw
/// [`draw`]`(uniforms[(step − 1) · trials + block], total)` in the winner's block sums, with the
/// winner applied, into `next_candidates[block]`. A total of 0 sets `stop` to `step`: every point
/// sits on a seed and the host decides the rest. Does nothing once `stop` is set.
///
/// # Safety
/// `trials ≤ SEED_CANDIDATES − 1` blocks of `BLOCK` threads, [`seed_shared_bytes`]`(d)` of dynamic
/// shared memory; `block_sums` holds `trials × nb` sums of the last pass (step 1: one row, of
/// the nearest pass), `2 ≤ step ≤ k` reads `trials` last candidates and potentials, `uniforms`
/// holds `(k − 1) · trials` values; the rest as [`trials`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn greedy_draw<const M: u32, E: Exec>(
    e: E,
    data: SeedRows,
    weights: *const f32,
    counts: *const u64,
    min_dist: *const f32,
    block_sums: *const u64,
    nb: u32,
    trials: u32,
    step: u32,
    k: u32,
    first_total: u64,
    g: Greedy,
    ws: WeightScale,
) {
    if unsafe { *g.stop } != 0 {
        return;
    }
    let (t, b) = (e.thread(), e.block());
    let trials = trials as usize;
    let (total, pending, row) = if step == 1 {
        (first_total, NO_ROW, 0)
    } else {
        let mut best = 0;
        for c in 1..trials {
            if unsafe { *g.last_potentials.add(c) < *g.last_potentials.add(best) } {
                best = c;
            }
        }
        let won = unsafe { (*g.last_potentials.add(best), *g.last_candidates.add(best)) };
        (won.0, won.1, best)
    };
    if step >= 2 && b == 0 && t == 0 {
        unsafe { *g.chosen.add(step as usize - 1) = pending };
    }
    if step >= k {
        return;
    }
    if total == 0 {
        // Every block returns here; block 0 records where the loop stopped (a block of this
        // launch that reads the flag first returns early, as it would here).
        if b == 0 && t == 0 {
            unsafe { *g.stop = step };
        }
        return;
    }
    if b == 0 && t < trials {
        unsafe { *g.next_potentials.add(t) = 0 };
    }
    let u = unsafe { *g.uniforms.add((step as usize - 1) * trials + b) };
    let sums = unsafe { block_sums.add(row * nb as usize) };
    let found = unsafe {
        locate_draw::<M, E>(
            e,
            data,
            weights,
            counts,
            min_dist,
            pending,
            sums,
            nb as usize,
            draw(u, total),
            ws,
        )
    };
    if t == 0 {
        unsafe { *g.next_candidates.add(b) = found };
    }
}

/// k-means‖ sampling: appends to `out` (slot from `count`, zeroed by the host) every point
/// sampled with probability `min(1, ell · weight / phi)` by its uniform
/// `uniform32(seed, round, first_row + i)` (`first_row`: the row of the whole data set that
/// point 0 is). The order of `out` varies; the set does not.
///
/// # Safety
/// `ceil(n / BLOCK)` blocks of `BLOCK` threads; `weights` and `counts` as for [`trials`],
/// `min_dist` holds `n`, `out` room for `n`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn sample<const M: u32, E: Exec>(
    e: E,
    weights: *const f32,
    counts: *const u64,
    min_dist: *const f32,
    n: u32,
    seed: u64,
    round: u32,
    first_row: u32,
    ell: u64,
    phi: u64,
    ws: WeightScale,
    out: *mut u32,
    count: *mut u32,
) {
    let i = e.block() * BLOCK as usize + e.thread();
    if i >= n as usize {
        return;
    }
    let units = unsafe { units_of(weights, counts, i) };
    let w = ws.weight_of(AssignMetric::from_id(M), unsafe { *min_dist.add(i) }, units);
    if sampled(uniform32(seed, round, first_row + i as u32), w, ell, phi) {
        unsafe { *out.add(atomic_fetch_add_u32(count, 1) as usize) = i as u32 };
    }
}

/// The `seed_owner_weights` entry point. CPU twin:
/// `backend::cpu::init::Seeder::seed_owner_weights`.
pub const SEED_OWNER_WEIGHTS: Kernel<OwnerWeightsParams> = Kernel::new("seed_owner_weights");

kernel_params! {
    /// `seed_owner_weights`'s parameters.
    pub struct OwnerWeightsParams {
        pub owner: DevPtr<u32>,
        pub n: u32,
        pub weights: DevPtr<f32>,
        pub counts: DevPtr<u64>,
        pub totals: DevPtr<u64>,
    }
    entries: owner_weights_entry;
}

owner_weights_entry! {
    /// `totals[owner[i]] += units_i` for every point (the k-means‖ candidate weights; units as
    /// [`units_of`] gives them). CPU twin: `backend::cpu::init::Seeder::seed_owner_weights` (host
    /// crate).
    ///
    /// # Safety
    /// `ceil(n / BLOCK)` blocks of `BLOCK` threads; `weights` and `counts` null or `n` values; every
    /// `owner` value indexes `totals` (zeroed).
    fn seed_owner_weights(params) {
        unsafe { owner_weights_kernel(Gpu, &params) }
    }
}

/// The body of `seed_owner_weights`.
///
/// # Safety
/// As the entry point.
#[inline(always)]
pub unsafe fn owner_weights_kernel<E: Exec>(e: E, params: &OwnerWeightsParams) {
    let OwnerWeightsParams {
        owner,
        n,
        weights,
        counts,
        totals,
    } = *params;
    let (owner, weights, counts, totals) = (
        owner.as_ptr(),
        weights.as_ptr(),
        counts.as_ptr(),
        totals.as_mut_ptr(),
    );
    let i = e.block() * BLOCK as usize + e.thread();
    if i < n as usize {
        unsafe {
            let units = units_of(weights, counts, i);
            atomic_add_u64(totals.add(*owner.add(i) as usize), units);
        }
    }
}

kernel_params! {
    /// The parameters of both `seed_trials_*` entry points (see `trials`).
    pub struct TrialsParams {
        pub x: DevPtr<f32>,
        pub norms: DevPtr<f32>,
        pub n: u32,
        pub d: u32,
        pub weights: DevPtr<f32>,
        pub counts: DevPtr<u64>,
        pub min_dist: DevPtr<f32>,
        pub candidates: DevPtr<u32>,
        pub count: u32,
        pub pending: DevPtr<u32>,
        pub stop: DevPtr<u32>,
        pub scale: f64,
        pub cap: u64,
        pub block_sums: DevPtr<u64>,
        pub potentials: DevPtr<u64>,
    }
    entries: trials_entry;
}

kernel_params! {
    /// The parameters of both `seed_nearest_*` entry points (see `nearest_pass`).
    pub struct NearestParams {
        pub x: DevPtr<f32>,
        pub norms: DevPtr<f32>,
        pub n: u32,
        pub d: u32,
        pub weights: DevPtr<f32>,
        pub counts: DevPtr<u64>,
        pub min_dist: DevPtr<f32>,
        pub owner: DevPtr<u32>,
        pub rows: DevPtr<u32>,
        pub count: u32,
        pub first_id: u32,
        pub fresh: u32,
        pub scale: f64,
        pub cap: u64,
        pub block_sums: DevPtr<u64>,
        pub total: DevPtr<u64>,
    }
    entries: nearest_entry;
}

kernel_params! {
    /// The parameters of both `seed_locate_*` entry points (see `locate`).
    pub struct LocateParams {
        pub x: DevPtr<f32>,
        pub norms: DevPtr<f32>,
        pub n: u32,
        pub d: u32,
        pub weights: DevPtr<f32>,
        pub counts: DevPtr<u64>,
        pub min_dist: DevPtr<f32>,
        pub pending: u32,
        pub sums: DevPtr<u64>,
        pub nb: u32,
        pub draws: DevPtr<u64>,
        pub scale: f64,
        pub cap: u64,
        pub out: DevPtr<u32>,
    }
    entries: locate_entry;
}

kernel_params! {
    /// The parameters of both `seed_greedy_draw_*` entry points (see `greedy_draw`).
    pub struct GreedyDrawParams {
        pub x: DevPtr<f32>,
        pub norms: DevPtr<f32>,
        pub n: u32,
        pub d: u32,
        pub weights: DevPtr<f32>,
        pub counts: DevPtr<u64>,
        pub min_dist: DevPtr<f32>,
        pub block_sums: DevPtr<u64>,
        pub nb: u32,
        pub trials: u32,
        pub step: u32,
        pub k: u32,
        pub first_total: u64,
        pub chosen: DevPtr<u32>,
        pub uniforms: DevPtr<u64>,
        pub last_candidates: DevPtr<u32>,
        pub last_potentials: DevPtr<u64>,
        pub next_candidates: DevPtr<u32>,
        pub next_potentials: DevPtr<u64>,
        pub stop: DevPtr<u32>,
        pub scale: f64,
        pub cap: u64,
    }
    entries: greedy_draw_entry;
}

kernel_params! {
    /// The parameters of both `seed_sample_*` entry points (see `sample`).
    pub struct SampleParams {
        pub weights: DevPtr<f32>,
        pub counts: DevPtr<u64>,
        pub min_dist: DevPtr<f32>,
        pub n: u32,
        pub seed: u64,
        pub round: u32,
        pub first_row: u32,
        pub ell: u64,
        pub phi: u64,
        pub scale: f64,
        pub cap: u64,
        pub out: DevPtr<u32>,
        pub count: DevPtr<u32>,
    }
    entries: sample_entry;
}

/// The sum of `v` over the 32 lanes of the warp (every lane gets it); all lanes call this.
#[inline(always)]
fn warp_sum_u64<E: Exec>(e: E, mut v: u64) -> u64 {
    let mut mask = 16;
    while mask > 0 {
        v = v.wrapping_add(shfl_xor_u64(e, v, mask));
        mask /= 2;
    }
    v
}

/// The rows of a seeding kernel's arguments.
#[inline(always)]
fn seed_rows(x: DevPtr<f32>, norms: DevPtr<f32>, n: u32, d: u32) -> SeedRows {
    SeedRows {
        x: x.as_ptr(),
        norms: norms.as_ptr(),
        n: n as usize,
        d: d as usize,
    }
}

/// The body of the `seed_trials_*` entries: `trials` of their parameters.
///
/// # Safety
/// As `trials`.
#[inline(always)]
pub unsafe fn trials_kernel<const M: u32, E: Exec>(e: E, params: &TrialsParams) {
    let TrialsParams {
        x,
        norms,
        n,
        d,
        weights,
        counts,
        min_dist,
        candidates,
        count,
        pending,
        stop,
        scale,
        cap,
        block_sums,
        potentials,
    } = *params;
    unsafe {
        trials::<M, E>(
            e,
            seed_rows(x, norms, n, d),
            weights.as_ptr(),
            counts.as_ptr(),
            min_dist.as_mut_ptr(),
            candidates.as_ptr(),
            count,
            pending.as_ptr(),
            stop.as_ptr(),
            WeightScale { scale, cap },
            block_sums.as_mut_ptr(),
            potentials.as_mut_ptr(),
        )
    }
}

/// The body of the `seed_nearest_*` entries: `nearest_pass` of their parameters.
///
/// # Safety
/// As `nearest_pass`.
#[inline(always)]
pub unsafe fn nearest_kernel<const M: u32, E: Exec>(e: E, params: &NearestParams) {
    let NearestParams {
        x,
        norms,
        n,
        d,
        weights,
        counts,
        min_dist,
        owner,
        rows,
        count,
        first_id,
        fresh,
        scale,
        cap,
        block_sums,
        total,
    } = *params;
    let a = nearest::Nearest {
        data: seed_rows(x, norms, n, d),
        min_dist: min_dist.as_mut_ptr(),
        owner: owner.as_mut_ptr(),
        rows: rows.as_ptr(),
        count: count as usize,
        first_id,
        fresh: fresh != 0,
    };
    let ws = WeightScale { scale, cap };
    unsafe {
        nearest_pass::<M, E>(
            e,
            a,
            weights.as_ptr(),
            counts.as_ptr(),
            ws,
            block_sums.as_mut_ptr(),
            total.as_mut_ptr(),
        )
    }
}

/// The body of the `seed_locate_*` entries: `locate` of their parameters.
///
/// # Safety
/// As `locate`.
#[inline(always)]
pub unsafe fn locate_kernel<const M: u32, E: Exec>(e: E, params: &LocateParams) {
    let LocateParams {
        x,
        norms,
        n,
        d,
        weights,
        counts,
        min_dist,
        pending,
        sums,
        nb,
        draws,
        scale,
        cap,
        out,
    } = *params;
    unsafe {
        locate::<M, E>(
            e,
            seed_rows(x, norms, n, d),
            weights.as_ptr(),
            counts.as_ptr(),
            min_dist.as_ptr(),
            pending,
            sums.as_ptr(),
            nb,
            draws.as_ptr(),
            WeightScale { scale, cap },
            out.as_mut_ptr(),
        )
    }
}

/// The body of the `seed_greedy_draw_*` entries: `greedy_draw` of their parameters.
///
/// # Safety
/// As `greedy_draw`.
#[inline(always)]
pub unsafe fn greedy_draw_kernel<const M: u32, E: Exec>(e: E, params: &GreedyDrawParams) {
    let GreedyDrawParams {
        x,
        norms,
        n,
        d,
        weights,
        counts,
        min_dist,
        block_sums,
        nb,
        trials,
        step,
        k,
        first_total,
        chosen,
        uniforms,
        last_candidates,
        last_potentials,
        next_candidates,
        next_potentials,
        stop,
        scale,
        cap,
    } = *params;
    let g = Greedy {
        chosen: chosen.as_mut_ptr(),
        uniforms: uniforms.as_ptr(),
        last_candidates: last_candidates.as_ptr(),
        last_potentials: last_potentials.as_ptr(),
        next_candidates: next_candidates.as_mut_ptr(),
        next_potentials: next_potentials.as_mut_ptr(),
        stop: stop.as_mut_ptr(),
    };
    unsafe {
        greedy_draw::<M, E>(
            e,
            seed_rows(x, norms, n, d),
            weights.as_ptr(),
            counts.as_ptr(),
            min_dist.as_ptr(),
            block_sums.as_ptr(),
            nb,
            trials,
            step,
            k,
            first_total,
            g,
            WeightScale { scale, cap },
        )
    }
}

/// The body of the `seed_sample_*` entries: `sample` of their parameters.
///
/// # Safety
/// As `sample`.
#[inline(always)]
pub unsafe fn sample_kernel<const M: u32, E: Exec>(e: E, params: &SampleParams) {
    let SampleParams {
        weights,
        counts,
        min_dist,
        n,
        seed,
        round,
        first_row,
        ell,
        phi,
        scale,
        cap,
        out,
        count,
    } = *params;
    unsafe {
        sample::<M, E>(
            e,
            weights.as_ptr(),
            counts.as_ptr(),
            min_dist.as_ptr(),
            n,
            seed,
            round,
            first_row,
            ell,
            phi,
            WeightScale { scale, cap },
            out.as_mut_ptr(),
            count.as_mut_ptr(),
        )
    }
}

/// The five seeding kernels of metric `$m`, each with its `Kernel` constant named after it.
macro_rules! seeding_kernels {
    (
        $m:expr,
        $TRIALS:ident $trials:ident,
        $NEAREST:ident $nearest:ident,
        $LOCATE:ident $locate:ident,
        $GREEDY:ident $greedy:ident,
        $SAMPLE:ident $sample:ident $(,)?
    ) => {
        #[doc = concat!("The `", stringify!($trials), "` entry point. CPU twin: `backend::cpu::init::Seeder::seed_trials`.")]
        pub const $TRIALS: Kernel<TrialsParams> = Kernel::new(stringify!($trials));

        trials_entry! {
            /// [`trials`] for this metric. CPU twin: `backend::cpu::init::Seeder::seed_trials` (host
            /// crate).
            ///
            /// # Safety
            /// As [`trials`].
            fn $trials(params) {
                unsafe { trials_kernel::<{ $m }, _>(Gpu, &params) }
            }
        }

        #[doc = concat!("The `", stringify!($nearest), "` entry point. CPU twin: `backend::cpu::init::Seeder::seed_nearest`.")]
        pub const $NEAREST: Kernel<NearestParams> = Kernel::new(stringify!($nearest)).min_blocks(2);

        nearest_entry! {
            /// [`nearest_pass`] for this metric. CPU twin: `backend::cpu::init::Seeder::seed_nearest`
            /// (host crate).
            ///
            /// # Safety
            /// As [`nearest_pass`].
            fn $nearest(params) {
                unsafe { nearest_kernel::<{ $m }, _>(Gpu, &params) }
            }
        }

        #[doc = concat!("The `", stringify!($locate), "` entry point. CPU twin: `backend::cpu::init::Seeder::locate_all`.")]
        pub const $LOCATE: Kernel<LocateParams> = Kernel::new(stringify!($locate));

        locate_entry! {
            /// [`locate`] for this metric. CPU twin: `backend::cpu::init::Seeder::locate_all` (host
            /// crate).
            ///
            /// # Safety
            /// As [`locate`].
            fn $locate(params) {
                unsafe { locate_kernel::<{ $m }, _>(Gpu, &params) }
            }
        }

        #[doc = concat!("The `", stringify!($greedy), "` entry point. Host twin: `backend::greedy_steps` over `backend::cpu::init::Seeder`.")]
        pub const $GREEDY: Kernel<GreedyDrawParams> = Kernel::new(stringify!($greedy));

        greedy_draw_entry! {
            /// [`greedy_draw`] for this metric. Host twin: `backend::greedy_steps` (host crate: one
            /// round trip per step, over `backend::cpu::init::Seeder` or a GPU).
            ///
            /// # Safety
            /// As [`greedy_draw`].
            fn $greedy(params) {
                unsafe { greedy_draw_kernel::<{ $m }, _>(Gpu, &params) }
            }
        }

        #[doc = concat!("The `", stringify!($sample), "` entry point. CPU twin: `backend::cpu::init::Seeder::seed_sample`.")]
        pub const $SAMPLE: Kernel<SampleParams> = Kernel::new(stringify!($sample));

        sample_entry! {
            /// [`sample`] for this metric. CPU twin: `backend::cpu::init::Seeder::seed_sample` (host
            /// crate).
            ///
            /// # Safety
            /// As [`sample`].
            fn $sample(params) {
                unsafe { sample_kernel::<{ $m }, _>(Gpu, &params) }
            }
        }
    };
}

seeding_kernels!(
    AssignMetric::SqL2 as u32,
    SEED_TRIALS_L2 seed_trials_l2,
    SEED_NEAREST_L2 seed_nearest_l2,
    SEED_LOCATE_L2 seed_locate_l2,
    SEED_GREEDY_DRAW_L2 seed_greedy_draw_l2,
    SEED_SAMPLE_L2 seed_sample_l2,
);
seeding_kernels!(
    AssignMetric::L1 as u32,
    SEED_TRIALS_L1 seed_trials_l1,
    SEED_NEAREST_L1 seed_nearest_l1,
    SEED_LOCATE_L1 seed_locate_l1,
    SEED_GREEDY_DRAW_L1 seed_greedy_draw_l1,
    SEED_SAMPLE_L1 seed_sample_l1,
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::emu::{P, launch};
    use crate::math::sq_norm;
    use crate::seeding::row_distance;

    /// Reproducible values in `[-1, 1)`, or integers below `levels` (duplicate rows); the
    /// nearest pass's tests use them too.
    pub(super) fn values(count: usize, levels: u32, seed: u32) -> Vec<f32> {
        (0..count as u32)
            .map(|i| {
                let h = (i ^ seed.wrapping_mul(0x9E37_79B9)).wrapping_mul(2_654_435_761) >> 8;
                match levels {
                    0 => (h % 2001) as f32 / 1000.0 - 1.0,
                    l => (h % l) as f32,
                }
            })
            .collect()
    }

    /// The one-thread-per-point distances of the trials, locating and drawing kernels, run in
    /// the emulator, against the CPU's formula for every point and candidate.
    fn check(metric: AssignMetric, n: usize, d: usize, levels: u32, candidates: &[u32]) {
        let x = values(n * d, levels, (n + 7 * d) as u32);
        let norms: Vec<f32> = x.chunks(d).map(sq_norm).collect();
        let count = candidates.len();
        let mut got = vec![f32::NAN; n * count];
        let data = SeedRows {
            x: x.as_ptr(),
            norms: norms.as_ptr(),
            n,
            d,
        };
        let (data, rows, out) = (
            P(&data as *const SeedRows as *mut SeedRows),
            candidates,
            P::of(&mut got),
        );
        launch(point_blocks(n), BLOCK as usize, seed_shared_bytes(d), |e| {
            let data = unsafe { *data.get() };
            let first = e.block() * BLOCK as usize;
            let row = |c: usize| rows[c];
            let acc = unsafe {
                match metric {
                    AssignMetric::SqL2 => {
                        distances::<{ AssignMetric::SqL2 as u32 }, _>(e, data, first, count, row)
                    }
                    AssignMetric::L1 => {
                        distances::<{ AssignMetric::L1 as u32 }, _>(e, data, first, count, row)
                    }
                }
            };
            let i = first + e.thread();
            if i < n {
                for (c, &a) in acc[..count].iter().enumerate() {
                    unsafe { *out.get().add(i * count + c) = a };
                }
            }
        });
        for i in 0..n {
            for (c, &row) in candidates.iter().enumerate() {
                let r = row as usize;
                let (xi, xc) = (&x[i * d..(i + 1) * d], &x[r * d..(r + 1) * d]);
                let want = row_distance(metric, xi, xc, norms[i], norms[r]);
                assert_eq!(
                    got[i * count + c].to_bits(),
                    want.to_bits(),
                    "{metric:?} n={n} d={d} point {i} candidate {c} (row {r})"
                );
            }
        }
    }

    #[test]
    fn emulated_trial_distances_match_the_cpu_formula() {
        for metric in [AssignMetric::SqL2, AssignMetric::L1] {
            // One candidate (a pending winner), d = 1, n not a multiple of the block.
            check(metric, 300, 1, 0, &[17]);
            // Two dimension tiles (the last partial), a repeated candidate.
            check(metric, 257, 40, 0, &[0, 256, 3, 0, 100]);
            // The widest points read straight from memory, and the narrowest staged ones.
            check(metric, 260, SEED_DIRECT_D, 0, &[5, 259, 5, 0]);
            check(metric, 260, SEED_DIRECT_D + 1, 0, &[5, 259, 5, 0]);
            // Duplicate rows (ties), every unrolled width up to a full candidate tile.
            let all: Vec<u32> = (0..SEED_CANDIDATES as u32).map(|c| c * 3 % 90).collect();
            for count in [3, 6, 7, 10, 12, 13, SEED_CANDIDATES] {
                check(metric, 90, 3, 2, &all[..count]);
            }
        }
    }
}
