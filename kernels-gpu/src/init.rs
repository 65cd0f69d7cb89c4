//! Seeding kernels: greedy k-means++ with all the trials of a step in one pass, and the rounds
//! of k-means‖. One thread per point; the candidate rows are staged through shared memory
//! `SEED_DIMS` dimensions at a time and every distance is accumulated in dimension order with
//! [`crate::math::step`], as `kernels_gpu::math::distance` does on the CPU. Weights are the
//! exact integers of [`crate::seeding`] times each point's sample-weight units (`weights`, null:
//! one each), so every sum is order-free. CPU twins: `host/src/backend/cpu/init.rs`.

use crate::fixed::units_at;
use crate::gpu::{self, atomic_add_u64, atomic_fetch_add_u32, shared, sync_threads, warp_sum_u64};
use crate::launch::{BLOCK, SEED_CANDIDATES, SEED_DIMS};
use crate::math::{AssignMetric, step};
use crate::seeding::{NO_ROW, WeightScale, sampled, uniform32};

/// Distances from point `i` (when `live`) to the `count ≤ SEED_CANDIDATES` rows `row(c)`.
/// Every thread of the block calls this.
#[inline(always)]
unsafe fn distances<const M: u32>(
    x: *const f32,
    d: usize,
    i: usize,
    live: bool,
    count: usize,
    row: impl Fn(usize) -> u32,
) -> [f32; SEED_CANDIDATES] {
    let metric = AssignMetric::from_id(M);
    let tile = shared::<f32>();
    let t = gpu::thread();
    let mut acc = [0f32; SEED_CANDIDATES];
    let mut j0 = 0;
    while j0 < d {
        let width = SEED_DIMS.min(d - j0);
        let mut e = t;
        while e < count * SEED_DIMS {
            let (c, j) = (e / SEED_DIMS, e % SEED_DIMS);
            if j < width {
                unsafe { *tile.add(e) = *x.add(row(c) as usize * d + j0 + j) };
            }
            e += BLOCK as usize;
        }
        sync_threads();
        if live {
            let point = unsafe { x.add(i * d + j0) };
            for j in 0..width {
                let v = unsafe { *point.add(j) };
                for (c, a) in acc.iter_mut().enumerate() {
                    if c < count {
                        *a = step(metric, *a, v, unsafe { *tile.add(c * SEED_DIMS + j) });
                    }
                }
            }
        }
        sync_threads();
        j0 += SEED_DIMS;
    }
    acc
}

/// Adds `v` (one per thread) into the block's shared sum `slot`: warp sums, one atomic per warp.
#[inline(always)]
unsafe fn add_to_block(slot: *mut u64, v: u64) {
    let total = warp_sum_u64(v);
    if gpu::thread() % 32 == 0 {
        unsafe { atomic_add_u64(slot, total) };
    }
}

/// The block sums after the candidate tile.
#[inline(always)]
fn block_slots() -> *mut u64 {
    unsafe {
        shared::<f32>()
            .add(SEED_CANDIDATES * SEED_DIMS)
            .cast::<u64>()
    }
}

/// One k-means++ step: first lowers `min_dist` to the previous winner `pending` (unless
/// [`NO_ROW`]), then for each trial `t` writes the potential `Σ_i weight_of(min(min_dist_i,
/// dist(i, candidates[t])), units_i)` of this block to `block_sums[t · gridDim + block]` and
/// adds it to `potentials[t]` (zeroed by the host). CPU twin: `cpu::init::trials`.
///
/// # Safety
/// `ceil(n / BLOCK)` blocks of `BLOCK` threads, `SEED_SHARED_BYTES` of dynamic shared memory;
/// `x` holds `n × d`, `weights` null or `n`, `min_dist` `n`, `candidates` `trials` row indices
/// `< n`, `trials + (pending != NO_ROW) ≤ SEED_CANDIDATES`, `block_sums` `trials × gridDim`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn trials<const M: u32>(
    x: *const f32,
    n: u32,
    d: u32,
    weights: *const f32,
    min_dist: *mut f32,
    candidates: *const u32,
    trials: u32,
    pending: u32,
    ws: WeightScale,
    block_sums: *mut u64,
    potentials: *mut u64,
) {
    let metric = AssignMetric::from_id(M);
    let (t, b) = (gpu::thread(), gpu::block());
    let i = b * BLOCK as usize + t;
    let live = i < n as usize;
    let trials = trials as usize;
    let count = trials + usize::from(pending != NO_ROW);
    let slots = block_slots();
    if t < SEED_CANDIDATES {
        unsafe { *slots.add(t) = 0 };
    }
    let acc = unsafe {
        distances::<M>(x, d as usize, i, live, count, |c| {
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
        unsafe { units_at(weights, i) as u64 }
    } else {
        0
    };
    for (c, &a) in acc.iter().enumerate() {
        if c < trials {
            let w = ws.weight_of(metric, if a < old { a } else { old }, units);
            unsafe { add_to_block(slots.add(c), w) };
        }
    }
    sync_threads();
    if t < trials {
        let sum = unsafe { *slots.add(t) };
        unsafe {
            *block_sums.add(t * gpu::grid_dim() + b) = sum;
            atomic_add_u64(potentials.add(t), sum);
        }
    }
}

/// Seeding rows nearest: lowers every point's `min_dist` (from +∞ with `fresh`) to its
/// distance to each of the `count` rows `rows`, recording `first_id + c` in `owner` where a
/// row is strictly nearer (ties keep the earlier row); writes this block's weight sum to
/// `block_sums[block]` and adds it to `total` (zeroed by the host). CPU twin:
/// `cpu::init::nearest`.
///
/// # Safety
/// As [`trials`], with `rows` holding `count` row indices `< n`, `owner` `n` values and
/// `block_sums` `gridDim`; `count` may exceed `SEED_CANDIDATES` (groups are taken in order).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn nearest<const M: u32>(
    x: *const f32,
    n: u32,
    d: u32,
    weights: *const f32,
    min_dist: *mut f32,
    owner: *mut u32,
    rows: *const u32,
    count: u32,
    first_id: u32,
    fresh: u32,
    ws: WeightScale,
    block_sums: *mut u64,
    total: *mut u64,
) {
    let metric = AssignMetric::from_id(M);
    let (t, b) = (gpu::thread(), gpu::block());
    let i = b * BLOCK as usize + t;
    let live = i < n as usize;
    let slots = block_slots();
    if t == 0 {
        unsafe { *slots = 0 };
    }
    let (mut best, mut who) = if live && fresh == 0 {
        unsafe { (*min_dist.add(i), *owner.add(i)) }
    } else {
        (f32::INFINITY, first_id)
    };
    let mut g = 0;
    while g < count as usize {
        let group = SEED_CANDIDATES.min(count as usize - g);
        let acc = unsafe { distances::<M>(x, d as usize, i, live, group, |c| *rows.add(g + c)) };
        for (c, &a) in acc.iter().enumerate() {
            if c < group && a < best {
                best = a;
                who = first_id + (g + c) as u32;
            }
        }
        g += group;
    }
    if live {
        unsafe {
            *min_dist.add(i) = best;
            *owner.add(i) = who;
        }
    }
    let w = if live {
        ws.weight_of(metric, best, unsafe { units_at(weights, i) } as u64)
    } else {
        0
    };
    unsafe { add_to_block(slots, w) };
    sync_threads();
    if t == 0 {
        unsafe {
            *block_sums.add(b) = *slots;
            atomic_add_u64(total, *slots);
        }
    }
}

/// For each draw `r = draws[block]` (< the total weight), the first point whose cumulative
/// weight exceeds `r`, where a point's weight is that of `min(min_dist, dist(point, pending))`
/// (the previous winner not yet applied; [`NO_ROW`]: none) and `sums` holds the weight sums of
/// the `BLOCK`-point blocks (`nb` of them). Writes `out[block]`. CPU twin: `cpu::init::locate`.
///
/// # Safety
/// One block of `BLOCK` threads per draw, `SEED_SHARED_BYTES` of dynamic shared memory; `sums`
/// the block sums of exactly these weights.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn locate<const M: u32>(
    x: *const f32,
    n: u32,
    d: u32,
    weights: *const f32,
    min_dist: *const f32,
    pending: u32,
    sums: *const u64,
    nb: u32,
    draws: *const u64,
    ws: WeightScale,
    out: *mut u32,
) {
    let metric = AssignMetric::from_id(M);
    let t = gpu::thread();
    let bs = BLOCK as usize;
    let scratch = shared::<u64>();
    let found = unsafe { scratch.add(bs) };
    let r = unsafe { *draws.add(gpu::block()) };
    // Each thread sums a contiguous segment of block sums; thread 0 walks the segments, then the
    // blocks of its segment, then the points of that block.
    let per = (nb as usize).div_ceil(bs);
    let (from, to) = ((t * per).min(nb as usize), ((t + 1) * per).min(nb as usize));
    let mut s = 0u64;
    for e in from..to {
        s += unsafe { *sums.add(e) };
    }
    unsafe { *scratch.add(t) = s };
    sync_threads();
    if t == 0 {
        let mut rest = r;
        let mut seg = 0;
        while seg + 1 < bs && rest >= unsafe { *scratch.add(seg) } {
            rest -= unsafe { *scratch.add(seg) };
            seg += 1;
        }
        let mut blk = (seg * per).min(nb as usize - 1);
        while blk + 1 < nb as usize && rest >= unsafe { *sums.add(blk) } {
            rest -= unsafe { *sums.add(blk) };
            blk += 1;
        }
        unsafe {
            *found = blk as u64;
            *found.add(1) = rest;
        }
    }
    sync_threads();
    let (blk, rest) = unsafe { (*found as usize, *found.add(1)) };
    let i = blk * bs + t;
    let w = if i < n as usize {
        let mut m = unsafe { *min_dist.add(i) };
        if pending != NO_ROW {
            let row = unsafe { x.add(i * d as usize) };
            let c = unsafe { x.add(pending as usize * d as usize) };
            let mut acc = 0.0;
            for j in 0..d as usize {
                acc = step(metric, acc, unsafe { *row.add(j) }, unsafe { *c.add(j) });
            }
            if acc < m {
                m = acc;
            }
        }
        ws.weight_of(metric, m, unsafe { units_at(weights, i) } as u64)
    } else {
        0
    };
    sync_threads();
    unsafe { *scratch.add(t) = w };
    sync_threads();
    if t == 0 {
        let mut rest = rest;
        let mut p = 0;
        while p + 1 < bs && rest >= unsafe { *scratch.add(p) } {
            rest -= unsafe { *scratch.add(p) };
            p += 1;
        }
        unsafe { *out.add(gpu::block()) = (blk * bs + p).min(n as usize - 1) as u32 };
    }
}

/// k-means‖ sampling: appends to `out` (slot from `count`, zeroed by the host) every point
/// sampled with probability `min(1, ell · weight / phi)` by its uniform
/// `uniform32(seed, round, first_row + i)` (`first_row`: the row of the whole data set that
/// point 0 is). The order of `out` varies; the set does not. CPU twin: `cpu::init::sample`.
///
/// # Safety
/// `ceil(n / BLOCK)` blocks of `BLOCK` threads; `min_dist` holds `n`, `out` room for `n`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn sample<const M: u32>(
    weights: *const f32,
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
    let i = gpu::block() * BLOCK as usize + gpu::thread();
    if i >= n as usize {
        return;
    }
    let units = unsafe { units_at(weights, i) } as u64;
    let w = ws.weight_of(AssignMetric::from_id(M), unsafe { *min_dist.add(i) }, units);
    if sampled(uniform32(seed, round, first_row + i as u32), w, ell, phi) {
        unsafe { *out.add(atomic_fetch_add_u32(count, 1) as usize) = i as u32 };
    }
}

/// `totals[owner[i]] += units_i` for every point (the k-means‖ candidate weights; `weights`
/// null: one unit each). CPU twin: `cpu::init::seed_owner_weights`.
///
/// # Safety
/// `ceil(n / BLOCK)` blocks of `BLOCK` threads; `weights` null or `n` values; every `owner` value
/// indexes `totals` (zeroed).
#[unsafe(no_mangle)]
pub unsafe extern "gpu-kernel" fn seed_owner_weights(
    owner: *const u32,
    n: u32,
    weights: *const f32,
    totals: *mut u64,
) {
    let i = gpu::block() * BLOCK as usize + gpu::thread();
    if i < n as usize {
        unsafe {
            let units = units_at(weights, i) as u64;
            atomic_add_u64(totals.add(*owner.add(i) as usize), units);
        }
    }
}

macro_rules! seeding_kernels {
    ($m:expr, $trials:ident, $nearest:ident, $locate:ident, $sample:ident) => {
        /// [`trials`] for this metric.
        ///
        /// # Safety
        /// As [`trials`].
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "gpu-kernel" fn $trials(
            x: *const f32,
            n: u32,
            d: u32,
            weights: *const f32,
            min_dist: *mut f32,
            candidates: *const u32,
            count: u32,
            pending: u32,
            scale: f64,
            cap: u64,
            block_sums: *mut u64,
            potentials: *mut u64,
        ) {
            let ws = WeightScale { scale, cap };
            unsafe {
                trials::<{ $m }>(
                    x, n, d, weights, min_dist, candidates, count, pending, ws, block_sums,
                    potentials,
                )
            }
        }

        /// [`nearest`] for this metric.
        ///
        /// # Safety
        /// As [`nearest`].
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "gpu-kernel" fn $nearest(
            x: *const f32,
            n: u32,
            d: u32,
            weights: *const f32,
            min_dist: *mut f32,
            owner: *mut u32,
            rows: *const u32,
            count: u32,
            first_id: u32,
            fresh: u32,
            scale: f64,
            cap: u64,
            block_sums: *mut u64,
            total: *mut u64,
        ) {
            let ws = WeightScale { scale, cap };
            unsafe {
                nearest::<{ $m }>(
                    x, n, d, weights, min_dist, owner, rows, count, first_id, fresh, ws,
                    block_sums, total,
                )
            }
        }

        /// [`locate`] for this metric.
        ///
        /// # Safety
        /// As [`locate`].
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "gpu-kernel" fn $locate(
            x: *const f32,
            n: u32,
            d: u32,
            weights: *const f32,
            min_dist: *const f32,
            pending: u32,
            sums: *const u64,
            nb: u32,
            draws: *const u64,
            scale: f64,
            cap: u64,
            out: *mut u32,
        ) {
            let ws = WeightScale { scale, cap };
            unsafe {
                locate::<{ $m }>(
                    x, n, d, weights, min_dist, pending, sums, nb, draws, ws, out,
                )
            }
        }

        /// [`sample`] for this metric.
        ///
        /// # Safety
        /// As [`sample`].
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "gpu-kernel" fn $sample(
            weights: *const f32,
            min_dist: *const f32,
            n: u32,
            seed: u64,
            round: u32,
            first_row: u32,
            ell: u64,
            phi: u64,
            scale: f64,
            cap: u64,
            out: *mut u32,
            count: *mut u32,
        ) {
            let ws = WeightScale { scale, cap };
            unsafe {
                sample::<{ $m }>(
                    weights, min_dist, n, seed, round, first_row, ell, phi, ws, out, count,
                )
            }
        }
    };
}

seeding_kernels!(
    AssignMetric::SqL2 as u32,
    seed_trials_l2,
    seed_nearest_l2,
    seed_locate_l2,
    seed_sample_l2
);
seeding_kernels!(
    AssignMetric::L1 as u32,
    seed_trials_l1,
    seed_nearest_l1,
    seed_locate_l1,
    seed_sample_l1
);
