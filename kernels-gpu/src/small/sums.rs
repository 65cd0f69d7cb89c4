//! The update side of the small step: the block's points added to the global fixed-point sums,
//! and the finalize that turns the sums into means and the step's summary.

use super::halt::{HaltRule, halted};
use super::prune::f32_up;
use super::{Smem, Step};
use crate::exec::{Exec, block_totals, exclusive_scan, fence_device, shfl_xor_u64};
use crate::fixed::{mean, to_fixed, units_at, weighted};
use crate::launch::BLOCK;
use crate::math::sqrt_f64;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Adds the block's points that `take` to the global cluster sums and weights of their `label`
/// (see the module comment), each point counted as many times as its units; with `negate`,
/// subtracts them instead.
#[inline(always)]
pub(super) unsafe fn accumulate<const P: usize, E: Exec>(
    e: E,
    s: &Step,
    label: &[u32; P],
    take: &[bool; P],
    negate: bool,
    m: &Smem,
    point: impl Fn(usize) -> usize,
) {
    let (counts, offsets, order) = (m.counts, m.offsets, m.order);
    let (t, threads) = (e.thread(), BLOCK as usize);
    let first = point(0) - t;
    let mut c = t;
    while c < s.k {
        unsafe { *counts.add(c) = 0 };
        c += threads;
    }
    if t < s.d {
        unsafe { *m.scales.add(t) = *s.scales.add(t) };
    }
    e.sync();
    // Counting sort by label; the order within a cluster does not matter for integer sums.
    let mut slot = [0u32; P];
    for p in 0..P {
        if point(p) < s.n && take[p] {
            let count = unsafe { AtomicU32::from_ptr(counts.add(label[p] as usize)) };
            slot[p] = count.fetch_add(1, Ordering::Relaxed);
        }
    }
    e.sync();
    unsafe { exclusive_scan(e, counts, offsets, s.k, m.scratch) };
    for p in 0..P {
        if point(p) < s.n && take[p] {
            unsafe {
                let at = *offsets.add(label[p] as usize) + slot[p];
                *order.add(at as usize) = (point(p) - first) as u32;
            }
        }
    }
    e.sync();
    // One thread per (cluster, dimension), reading the staged points. Cell `c·d + j` steps by
    // `threads` as (c, j) by (threads / d, threads % d) with a carry: no division a cell.
    let (d, th) = (s.d as u32, threads as u32);
    let (dc, dj) = (th / d, th % d);
    let (mut c, mut j) = (t as u32 / d, t as u32 % d);
    while (c as usize) < s.k {
        let (cell, cluster, dim) = ((c * d + j) as usize, c as usize, j as usize);
        let (from, count) = unsafe { (*offsets.add(cluster), *counts.add(cluster)) };
        if count > 0 {
            let scale = unsafe { *m.scales.add(dim) };
            let value = |q: u32| {
                let r = unsafe { *order.add(q as usize) } as usize;
                (
                    r,
                    to_fixed(unsafe { *m.points.add(r * m.point_stride + dim) }, scale),
                )
            };
            let mut sum = 0i64;
            if s.weights.is_null() {
                for q in from..from + count {
                    sum += value(q).1;
                }
            } else {
                for q in from..from + count {
                    let (r, v) = value(q);
                    sum = sum.wrapping_add(weighted(v, unsafe { units_at(s.weights, first + r) }));
                }
            }
            let total = unsafe { AtomicU64::from_ptr(s.sums.add(cell).cast::<u64>()) };
            let sum = if negate { sum.wrapping_neg() } else { sum };
            total.fetch_add(sum as u64, Ordering::Relaxed);
        }
        (c, j) = (c + dc, j + dj);
        if j >= d {
            (c, j) = (c + 1, j - d);
        }
    }
    let mut c = t;
    while c < s.k {
        let (from, count) = unsafe { (*offsets.add(c), *counts.add(c)) };
        let weight = if s.weights.is_null() {
            count as u64
        } else {
            let mut units = 0u64;
            for q in from..from + count {
                let r = unsafe { *order.add(q as usize) } as usize;
                units += unsafe { units_at(s.weights, first + r) } as u64;
            }
            units
        };
        if weight > 0 {
            let total = unsafe { AtomicU64::from_ptr(s.counts.add(c)) };
            match negate {
                true => total.fetch_sub(weight, Ordering::Relaxed),
                false => total.fetch_add(weight, Ordering::Relaxed),
            };
        }
        c += threads;
    }
}

/// Moves the block's relabelled points (`old` → `label`) between the global cluster sums and
/// weights, which hold the sums of the old labels: the steps with bounds
/// ([`super::prune`]) keep the sums from step to step, and integer sums do not depend on the
/// order of their terms, so they end as [`accumulate`] would make them afresh.
#[inline(always)]
pub(super) unsafe fn move_changed<const P: usize, E: Exec>(
    e: E,
    s: &Step,
    old: &[u32; P],
    label: &[u32; P],
    m: &Smem,
    point: impl Fn(usize) -> usize,
) {
    let (t, threads) = (e.thread(), BLOCK as usize);
    for p in 0..P {
        let i = point(p);
        if i < s.n && old[p] != label[p] {
            let units = unsafe { units_at(s.weights, i) };
            let row = unsafe { m.points.add((t + p * threads) * m.point_stride) };
            let (from, to) = (old[p] as usize * s.d, label[p] as usize * s.d);
            let add = |cell: usize, v: i64| {
                let total = unsafe { AtomicU64::from_ptr(s.sums.add(cell).cast::<u64>()) };
                total.fetch_add(v as u64, Ordering::Relaxed);
            };
            for j in 0..s.d {
                let v = weighted(
                    to_fixed(unsafe { *row.add(j) }, unsafe { *s.scales.add(j) }),
                    units,
                );
                add(to + j, v);
                add(from + j, v.wrapping_neg());
            }
            let weight = |c: u32| unsafe { AtomicU64::from_ptr(s.counts.add(c as usize)) };
            weight(label[p]).fetch_add(units as u64, Ordering::Relaxed);
            weight(old[p]).fetch_sub(units as u64, Ordering::Relaxed);
        }
    }
}

/// The summary of a small step: means of the sums (a cluster without weight keeps its
/// centroid), cluster weights, `out = [changed, empty clusters, fixed-point inertia, squared
/// shift]` with the same reductions as `kmeans_summary`; then zeroes the sums, weights and the
/// changed-label counter for the next step. Each block takes the cells of
/// `finalize_centroids` consecutive centroids and a share of the inertia partials; the last
/// block to finish adds the blocks' totals up (`parts`).
#[derive(Clone, Copy)]
pub struct Finalize {
    pub sums: *mut i64,
    pub counts: *mut u64,
    pub k: usize,
    pub d: usize,
    pub inv_scales: *const f64,
    pub current: *const f32,
    pub next: *mut f32,
    pub sizes: *mut u64,
    /// The changed-label counter; read, then zeroed for the next step.
    pub changed: *mut u32,
    pub block_inertia: *const i64,
    pub blocks: usize,
    pub out: *mut f64,
    /// The halt word of steps queued back to back (null for a step on its own): nothing is done
    /// when it is set, and it is set when the step meets `rule` ([`super::halt`]).
    pub halt: *mut u32,
    pub rule: HaltRule,
    /// How far each centroid moved, `k` values rounded up, written here (null: not computed);
    /// the cells' squared differences pass through shared memory ([`finalize_shared_bytes`]).
    /// With it, the sums and weights stay for the next step (see `move_changed`).
    pub drift: *mut f32,
    /// [`finalize_small_parts`]: each block's three totals, then the count of blocks done
    /// (zero between launches: the last block puts it back).
    pub parts: *mut u64,
}

/// Cells (centroid coordinates) that one block of the finalize takes, about: a multiprocessor
/// issues the whole finalize of one block, ~100 instructions a cell (the divisions), so a
/// fit's centroids spread over several blocks.
const FINALIZE_CELLS: usize = 1024;

/// Centroids a block of the finalize takes for `d` dimensions (whole centroids, so that each
/// centroid's drift is one block's).
const fn finalize_centroids(d: usize) -> usize {
    let c = FINALIZE_CELLS / if d == 0 { 1 } else { d };
    if c == 0 { 1 } else { c }
}

/// Blocks of the finalize for `k` centroids of `d` dimensions.
pub const fn finalize_small_grid(k: usize, d: usize) -> usize {
    let g = k.div_ceil(finalize_centroids(d));
    if g == 0 { 1 } else { g }
}

/// Words of [`Finalize::parts`] for `k` centroids of `d` dimensions.
pub const fn finalize_small_parts(k: usize, d: usize) -> usize {
    3 * finalize_small_grid(k, d) + 1
}

/// The body of `kmeans_finalize_small` (the kernel): [`finalize_small_grid`] blocks.
///
/// # Safety
/// [`finalize_small_grid`]`(k, d)` blocks of `threads` (a multiple of 32 up to 1,024) threads with
/// `finalize_shared_bytes(k, d, !drift.is_null())` of dynamic shared memory; pointers valid for
/// the sizes.
#[inline(always)]
pub unsafe fn finalize<E: Exec>(e: E, threads: usize, f: Finalize) {
    // Every load that does not depend on another goes out before the first wait: the halt word
    // (a halted finalize writes nothing, but may read), the changed-label counter (final since
    // the step), the inertia partials and the first cells.
    let is_halted = unsafe { halted(f.halt) };
    let (t, b, grid) = (e.thread(), e.block(), e.grid_dim());
    let changed = if t == 0 { unsafe { *f.changed } } else { 0 };
    let scratch = e.shared::<u64>();
    let last_flag = unsafe { scratch.add(TOTALS_WORDS) };
    let diffs = unsafe { scratch.add(TOTALS_WORDS + 1).cast::<f32>() };
    let per = finalize_centroids(f.d);
    let (c0, c1) = (b * per, ((b + 1) * per).min(f.k));
    // This block's share of the inertia partials.
    let mut inertia = 0i64;
    let mut j = b * threads + t;
    while j < f.blocks {
        inertia = inertia.wrapping_add(unsafe { *f.block_inertia.add(j) });
        j += grid * threads;
    }
    let (mut shift, mut empty) = (0.0f64, 0.0f64);
    // The block's cells t, t + threads, … in order, their loads issued four cells at a time (one
    // round trip per four instead of one per cell).
    const BATCH: usize = 4;
    let (from, to, d, th) = (
        (c0 * f.d) as u32,
        (c1 * f.d) as u32,
        f.d as u32,
        threads as u32,
    );
    let mut first = from + t as u32;
    while first < to {
        let cell = |u: usize| first + u as u32 * th;
        let mut loaded = [(0u64, 0f32, 0i64, 0f64); BATCH];
        for (u, l) in loaded.iter_mut().enumerate() {
            let i = cell(u);
            if i < to {
                let (c, j) = (i / d, i % d);
                *l = unsafe {
                    (
                        *f.counts.add(c as usize),
                        *f.current.add(i as usize),
                        *f.sums.add(i as usize),
                        *f.inv_scales.add(j as usize),
                    )
                };
            }
        }
        if is_halted {
            return;
        }
        for (u, &(count, old, sum, inv_scale)) in loaded.iter().enumerate() {
            let i = cell(u);
            if i < to {
                let new = if count > 0 {
                    mean(sum, inv_scale, count)
                } else {
                    old
                };
                unsafe { *f.next.add(i as usize) = new };
                if f.drift.is_null() {
                    unsafe { *f.sums.add(i as usize) = 0 };
                }
                let diff = new as f64 - old as f64;
                shift += diff * diff;
                if !f.drift.is_null() {
                    unsafe { *diffs.add((i - from) as usize) = (diff * diff) as f32 };
                }
                if i % d == 0 {
                    unsafe { *f.sizes.add((i / d) as usize) = count };
                    empty += (count == 0) as u32 as f64;
                }
            }
        }
        first += BATCH as u32 * th;
    }
    if is_halted {
        return;
    }
    if !f.drift.is_null() {
        e.sync();
        // A centroid per warp, its lanes over the dimensions; the squared differences were
        // rounded to f32, whence the margin.
        let (warp, lane) = (t / 32, t % 32);
        let mut c = c0 + warp;
        while c < c1 {
            let mut sq = 0.0f64;
            let mut j = lane;
            while j < f.d {
                sq += unsafe { *diffs.add((c - c0) * f.d + j) } as f64;
                j += 32;
            }
            let mut mask = 16;
            while mask > 0 {
                sq += f64::from_bits(shfl_xor_u64(e, sq.to_bits(), mask));
                mask /= 2;
            }
            if lane == 0 {
                let moved = sqrt_f64(sq * (1.0 + 1.0 / 1_048_576.0)) * (1.0 + 1.0 / 1_048_576.0);
                unsafe { *f.drift.add(c) = f32_up(moved) };
            }
            c += threads / 32;
        }
    }
    // The inertia wraps as the blocks' partials do; the shift's order is this kernel's own (the
    // Lloyd loop asks the host's exact shift where the order could decide the tolerance test).
    let add = |i: usize, a: u64, b: u64| match i {
        0 => (a as i64).wrapping_add(b as i64) as u64,
        _ => (f64::from_bits(a) + f64::from_bits(b)).to_bits(),
    };
    let values = [inertia as u64, shift.to_bits(), empty.to_bits()];
    let mut totals = unsafe { block_totals(e, threads, scratch, values, add) };
    // Every thread has read the block's counts (the barriers above); clear them for the next
    // step (steps with bounds keep them).
    let mut c = c0 + t;
    while c < c1 && f.drift.is_null() {
        unsafe { *f.counts.add(c) = 0 };
        c += threads;
    }
    if grid > 1 {
        // The blocks' totals meet in the last block to finish, which adds them in block order.
        let done = unsafe { f.parts.add(3 * grid) };
        if t == 0 {
            for (w, &v) in totals.iter().enumerate() {
                unsafe { f.parts.add(3 * b + w).write_volatile(v) };
            }
            fence_device();
            let before = unsafe { AtomicU64::from_ptr(done) }.fetch_add(1, Ordering::Relaxed);
            unsafe { *last_flag = (before + 1 == grid as u64) as u64 };
        }
        e.sync();
        if unsafe { *last_flag } == 0 {
            return;
        }
        fence_device();
        let mut parts = [0u64; 3];
        let mut j = t;
        while j < grid {
            for (w, p) in parts.iter_mut().enumerate() {
                *p = add(w, *p, unsafe { f.parts.add(3 * j + w).read_volatile() });
            }
            j += threads;
        }
        totals = unsafe { block_totals(e, threads, scratch, parts, add) };
        if t == 0 {
            unsafe { done.write_volatile(0) };
        }
    }
    let [inertia, shift, empty] = totals;
    let (inertia, shift, empty) = (inertia as i64, f64::from_bits(shift), f64::from_bits(empty));
    if t == 0 {
        unsafe {
            *f.out = changed as f64;
            *f.changed = 0;
            *f.out.add(1) = empty;
            *f.out.add(2) = inertia as f64;
            *f.out.add(3) = shift;
            if !f.halt.is_null() && f.rule.halts(changed, empty as u32, shift) {
                *f.halt = 1;
            }
        }
    }
}

/// Words of [`block_totals`]' scratch for the finalize's three totals.
const TOTALS_WORDS: usize = 33 * 3;

/// Dynamic shared memory of [`finalize`] for `k × d` cells: [`block_totals`]' scratch and the
/// last block's flag, then with `drift` the squared differences of a block's cells.
pub const fn finalize_shared_bytes(k: usize, d: usize, drift: bool) -> usize {
    let per = finalize_centroids(d);
    let centroids = if k < per { k } else { per };
    (TOTALS_WORDS + 1) * 8 + if drift { centroids * d * 4 } else { 0 }
}
