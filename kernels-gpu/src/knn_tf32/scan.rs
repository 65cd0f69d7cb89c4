//! `knn_tf32_scan`: the tensor-core pass of the prefilter (steps 1 and 4 of [`super`]).
//!
//! A block owns `TF32_ROWS` queries and a run of `tiles` consecutive tiles of `TF32_COLS`
//! training rows. The query tile is staged once (TF32-rounded, `xc` dimensions; restaged per
//! slice when `d > xc`), training chunks of `TF32_KC` dimensions stream through two buffers with
//! `cp.async`. Warp `(wm, wn)` of the 8 owns queries `wm·32..` × training rows `wn·64..` as
//! 2 × 8 `m16n8k8` tiles (the fragment layout of `kmeans_assign_l2_tf32`).

use super::*;
use crate::cp_async::{commit, copy_4, copy_16, shared_addr, wait_all, wait_group};
use crate::gpu::{self, shared, sync_threads};
use crate::knn::{NO_KEY, key};
use crate::mma::{load4, mma, round_in_place, shfl_xor_u64};

const BQ: usize = TF32_ROWS;
const BT: usize = TF32_COLS;
const KC: usize = TF32_KC;
const CS: usize = TF32_CS;
const THREADS: usize = TF32_BLOCK as usize;
const STAGES: usize = TF32_STAGES;

/// Arguments of the scan.
#[derive(Clone, Copy)]
struct Scan {
    q: *const f32,
    q_norms: *const f32,
    m: usize,
    x: *const f32,
    x_norms: *const f32,
    n: usize,
    d: usize,
    xc: usize,
    tiles: usize,
    mode: u32,
    group: usize,
    gkeys: *mut u64,
    ldg: usize,
    t_sq: *const f32,
    counts: *mut u32,
    cand: *mut u32,
    c1: f32,
}

/// The TF32 scan of queries `q` (`m × d`) against training rows `x` (`n × d`), with their
/// squared norms. Block `b` takes query tile `b % ceil(m / 128)` and training tiles
/// `(b / ceil(m / 128))·tiles ..` (at most `tiles`). Mode `SCAN_GROUPS`: writes
/// `gkeys[i · ldg + group]`, the key of the group's smallest approximate distance (`NO_KEY`
/// when the group has no row), groups of `group` (16 or 64) training rows numbered
/// `tile · (128 / group) + …`. Mode `SCAN_CANDIDATES`: appends every `j` that
/// [`may_be_near`] `t_sq[i]` to `cand[i · TF32_CAP ..]`, counting in `counts[i]` (past
/// `TF32_CAP` only counted). `c1` is [`bound_coefficient`]`(d)`.
///
/// # Safety
/// Pointers valid for those sizes; `TF32_BLOCK` threads, `tf32_scan_shared_bytes(xc)` of
/// dynamic shared memory, `xc` a multiple of `TF32_KC`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "gpu-kernel" fn knn_tf32_scan(
    q: *const f32,
    q_norms: *const f32,
    m: u32,
    x: *const f32,
    x_norms: *const f32,
    n: u32,
    d: u32,
    xc: u32,
    tiles: u32,
    mode: u32,
    group: u32,
    gkeys: *mut u64,
    ldg: u64,
    t_sq: *const f32,
    counts: *mut u32,
    cand: *mut u32,
    c1: f32,
) {
    let a = Scan {
        q,
        q_norms,
        m: m as usize,
        x,
        x_norms,
        n: n as usize,
        d: (d as usize).max(1),
        xc: (xc as usize).max(KC),
        tiles: (tiles as usize).max(1),
        mode,
        group: if group == 16 { 16 } else { 64 },
        gkeys,
        ldg: ldg as usize,
        t_sq,
        counts,
        cand,
        c1,
    };
    if a.d % 4 == 0 {
        unsafe { run::<true>(a) }
    } else {
        unsafe { run::<false>(a) }
    }
}

#[inline(always)]
unsafe fn run<const VEC: bool>(a: Scan) {
    let vec = VEC;
    let t = gpu::thread();
    let (warp, lane) = (t / 32, t % 32);
    let (g, qq) = (lane / 4, lane % 4);
    let (wm, wn) = (warp % 4, warp / 4);
    let row_tiles = a.m.div_ceil(BQ).max(1);
    let col_tiles = a.n.div_ceil(BT);
    let b = gpu::block();
    let first_row = (b % row_tiles) * BQ;
    let tile0 = (b / row_tiles) * a.tiles;
    if tile0 >= col_tiles {
        return;
    }
    let tile1 = col_tiles.min(tile0 + a.tiles);
    let (xc, d) = (a.xc, a.d);
    let xs_stride = xc + 4;

    let xs = shared::<u32>();
    let cs = unsafe { xs.add(BQ * xs_stride) };
    let (xs_addr, cs_addr) = (shared_addr(xs), shared_addr(cs));

    let dp = d.next_multiple_of(KC);
    let chunks = dp / KC;
    let resident = dp <= xc;
    let steps = (tile1 - tile0) * chunks;

    // This thread's four query rows: r = mt·2 + half ↔ row wm·32 + mt·16 + half·8 + g.
    let mut rows = [0usize; 4];
    let mut row_ok = [false; 4];
    let mut nq = [0f32; 4];
    let mut c1q = [0f32; 4];
    let mut tsq = [f32::NEG_INFINITY; 4];
    for r in 0..4 {
        rows[r] = first_row + wm * 32 + (r / 2) * 16 + (r % 2) * 8 + g;
        row_ok[r] = rows[r] < a.m;
        if row_ok[r] {
            nq[r] = unsafe { *a.q_norms.add(rows[r]) };
            c1q[r] = a.c1 * crate::knn::sqrt(nq[r]);
            if a.mode == SCAN_CANDIDATES {
                tsq[r] = unsafe { *a.t_sq.add(rows[r]) };
            }
        }
    }

    // Prologue: the query slice, then the first STAGES − 1 training chunks, one copy group each
    // (empty groups past the end keep the group count of `cp_async_wait_group` uniform).
    unsafe { stage_rows(t, vec, a.q, a.m, d, first_row, 0, dp, xc, xs_addr) };
    for p in 0..STAGES - 1 {
        if p < steps {
            let (first, j0) = ((tile0 + p / chunks) * BT, (p % chunks) * KC);
            unsafe {
                stage_chunk(
                    t,
                    vec,
                    a.x,
                    a.n,
                    d,
                    first,
                    j0,
                    cs_addr + 4 * (p * BT * CS) as u32,
                )
            };
        } else {
            commit();
        }
    }
    wait_group::<{ STAGES - 1 }>();
    unsafe { round_rows(t, vec, dp, 0, xc, xs) };

    let mut acc = [[[0f32; 4]; 8]; 2];
    let mut s = 0;
    while s < steps {
        let (tile, kc) = (tile0 + s / chunks, s % chunks);
        let buf = unsafe { cs.add((s % STAGES) * BT * CS) };
        // Chunk s has landed (at most STAGES − 2 later groups in flight); round this thread's
        // words of it.
        wait_group::<{ STAGES - 2 }>();
        unsafe { round_chunk(t, vec, buf) };
        let xcol = (kc * KC) % xc;
        if !resident && s > 0 && xcol == 0 {
            // The next slice of the query dimensions: once every warp is done with this one.
            sync_threads();
            unsafe {
                stage_rows(t, vec, a.q, a.m, d, first_row, kc * KC, dp, xc, xs_addr);
                wait_all();
                round_rows(t, vec, dp, kc * KC, xc, xs);
            }
        }
        sync_threads();
        // The buffer of chunk s − 1 is free now: prefetch chunk s + STAGES − 1 into it.
        let ahead = s + STAGES - 1;
        if ahead < steps {
            let (first, j0) = ((tile0 + ahead / chunks) * BT, (ahead % chunks) * KC);
            let at = cs_addr + 4 * ((ahead % STAGES) * BT * CS) as u32;
            unsafe { stage_chunk(t, vec, a.x, a.n, d, first, j0, at) };
        } else {
            commit();
        }
        // k slot (step kk, lane column q, half h) ↔ dimension q·8 + kk·2 + h of the chunk, for
        // queries and training rows alike.
        for half in 0..2 {
            let col = xcol + qq * 8 + half * 4;
            let mut fa = [[[0u32; 4]; 2]; 2];
            for (mt, fa) in fa.iter_mut().enumerate() {
                let row = wm * 32 + mt * 16 + g;
                unsafe {
                    fa[0] = load4(xs.add(row * xs_stride + col));
                    fa[1] = load4(xs.add((row + 8) * xs_stride + col));
                }
            }
            for nt in 0..8 {
                let c = wn * 64 + nt * 8 + g;
                let fb = unsafe { load4(buf.add(c * CS + qq * 8 + half * 4)) };
                for kk in 0..2 {
                    for mt in 0..2 {
                        let (lo, hi) = (fa[mt][0], fa[mt][1]);
                        let frag = [lo[2 * kk], hi[2 * kk], lo[2 * kk + 1], hi[2 * kk + 1]];
                        mma(&mut acc[mt][nt], frag, [fb[2 * kk], fb[2 * kk + 1]]);
                    }
                }
            }
        }
        if kc == chunks - 1 {
            unsafe { epilogue(&a, tile, wn, qq, &acc, &rows, &row_ok, &nq, &c1q, &tsq) };
            acc = [[[0f32; 4]; 8]; 2];
        }
        s += 1;
    }
}

/// The end of a training tile: group minima or candidates from the accumulators. Element
/// `acc[mt][nt][half·2 + h]` is query row `r = mt·2 + half` × training row
/// `tile·128 + wn·64 + nt·8 + 2q + h`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn epilogue(
    a: &Scan,
    tile: usize,
    wn: usize,
    qq: usize,
    acc: &[[[f32; 4]; 8]; 2],
    rows: &[usize; 4],
    row_ok: &[bool; 4],
    nq: &[f32; 4],
    c1q: &[f32; 4],
    tsq: &[f32; 4],
) {
    let base = tile * BT + wn * 64 + 2 * qq;
    let mut nx = [0f32; 16];
    for nt in 0..8 {
        for h in 0..2 {
            let j = base + nt * 8 + h;
            if j < a.n {
                nx[nt * 2 + h] = unsafe { *a.x_norms.add(j) };
            }
        }
    }
    if a.mode == SCAN_GROUPS {
        for r in 0..4 {
            let (mt, half) = (r / 2, r % 2);
            // Increasing j, strict `<`: the smallest value, the lowest index on ties (NaN and ∞
            // never win; a group without a finite value gives NO_KEY, which only loosens the
            // threshold to ∞).
            let (mut bv, mut bj) = (f32::INFINITY, u32::MAX);
            for nt in 0..8 {
                for h in 0..2 {
                    let j = base + nt * 8 + h;
                    let v = approx_sq(acc[mt][nt][half * 2 + h], nq[r], nx[nt * 2 + h]);
                    let take = (j < a.n) & (v < bv);
                    bv = if take { v } else { bv };
                    bj = if take { j as u32 } else { bj };
                }
            }
            let mut best = if bj == u32::MAX { NO_KEY } else { key(bv, bj) };
            if a.group == 64 {
                // The four lanes of a row hold the warp's 64 training rows.
                let other = shfl_xor_u64(best, 1);
                best = if other < best { other } else { best };
                let other = shfl_xor_u64(best, 2);
                best = if other < best { other } else { best };
            }
            if row_ok[r] && (a.group == 16 || qq == 0) {
                let per_tile = BT / a.group;
                let grp = tile * per_tile + if a.group == 16 { wn * 4 + qq } else { wn };
                unsafe { *a.gkeys.add(rows[r] * a.ldg + grp) = best };
            }
        }
    } else {
        let mut sx = [0f32; 16];
        for (s, &v) in sx.iter_mut().zip(&nx) {
            *s = crate::knn::sqrt(v);
        }
        for r in 0..4 {
            if !row_ok[r] {
                continue;
            }
            let (mt, half) = (r / 2, r % 2);
            for nt in 0..8 {
                for h in 0..2 {
                    let j = base + nt * 8 + h;
                    let e = nt * 2 + h;
                    let v = approx_sq(acc[mt][nt][half * 2 + h], nq[r], nx[e]);
                    let bound = error_bound(c1q[r], sx[e], nq[r], nx[e]);
                    if j < a.n && may_be_near(v, bound, tsq[r]) {
                        let at = unsafe { a.counts.add(rows[r]) };
                        let pos = unsafe {
                            core::sync::atomic::AtomicU32::from_ptr(at)
                                .fetch_add(1, core::sync::atomic::Ordering::Relaxed)
                        } as usize;
                        if pos < TF32_CAP {
                            unsafe { *a.cand.add(rows[r] * TF32_CAP + pos) = j as u32 };
                        }
                    }
                }
            }
        }
    }
}

/// Starts copying dimensions `j0..j0 + min(xc, dp − j0)` of rows `first..first + BQ` of `src`
/// into the query tile at shared address `xs` (stride `xc + 4`), zeros past `total` and `d`.
///
/// # Safety
/// `src` holds `total × d` values (16-byte aligned rows with `vec`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn stage_rows(
    t: usize,
    vec: bool,
    src: *const f32,
    total: usize,
    d: usize,
    first: usize,
    j0: usize,
    dp: usize,
    xc: usize,
    xs: u32,
) {
    let width = xc.min(dp - j0);
    let w = if vec { 4 } else { 1 };
    let per_row = width / w;
    let mut e = t;
    while e < BQ * per_row {
        let (r, jj) = (e / per_row, (e % per_row) * w);
        let (row, col) = (first + r, j0 + jj);
        let ok = row < total && col < d;
        let p = if ok {
            unsafe { src.add(row * d + col) }
        } else {
            src
        };
        let dst = xs + 4 * (r * (xc + 4) + jj) as u32;
        unsafe {
            if vec {
                copy_16(dst, p, if ok { 16 } else { 0 });
            } else {
                copy_4(dst, p, if ok { 4 } else { 0 });
            }
        }
        e += THREADS;
    }
    commit();
}

/// Rounds to TF32 the query-tile words this thread copied in [`stage_rows`].
///
/// # Safety
/// The thread's copies have landed.
#[inline(always)]
unsafe fn round_rows(t: usize, vec: bool, dp: usize, j0: usize, xc: usize, xs: *mut u32) {
    let width = xc.min(dp - j0);
    let w = if vec { 4 } else { 1 };
    let per_row = width / w;
    let mut e = t;
    while e < BQ * per_row {
        let (r, jj) = (e / per_row, (e % per_row) * w);
        for v in 0..w {
            unsafe { round_in_place(xs.add(r * (xc + 4) + jj + v)) };
        }
        e += THREADS;
    }
}

/// Starts copying training rows `first..first + BT`, dimensions `j0..j0 + KC` into a chunk
/// buffer at shared address `buf` (stride `CS`), zeros past `n` and `d`.
///
/// # Safety
/// `x` holds `n × d` values (16-byte aligned rows with `vec`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn stage_chunk(
    t: usize,
    vec: bool,
    x: *const f32,
    n: usize,
    d: usize,
    first: usize,
    j0: usize,
    buf: u32,
) {
    if vec {
        for u in 0..BT * KC / 4 / THREADS {
            let e = t + u * THREADS;
            let (r, jj) = (e / (KC / 4), (e % (KC / 4)) * 4);
            let (row, col) = (first + r, j0 + jj);
            let ok = row < n && col < d;
            let p = if ok {
                unsafe { x.add(row * d + col) }
            } else {
                x
            };
            unsafe { copy_16(buf + 4 * (r * CS + jj) as u32, p, if ok { 16 } else { 0 }) };
        }
    } else {
        for u in 0..BT * KC / THREADS {
            let e = t + u * THREADS;
            let (r, jj) = (e / KC, e % KC);
            let (row, col) = (first + r, j0 + jj);
            let ok = row < n && col < d;
            let p = if ok {
                unsafe { x.add(row * d + col) }
            } else {
                x
            };
            unsafe { copy_4(buf + 4 * (r * CS + jj) as u32, p, if ok { 4 } else { 0 }) };
        }
    }
    commit();
}

/// Rounds to TF32 the chunk words this thread copied in [`stage_chunk`].
///
/// # Safety
/// The thread's copies have landed.
#[inline(always)]
unsafe fn round_chunk(t: usize, vec: bool, buf: *mut u32) {
    if vec {
        for u in 0..BT * KC / 4 / THREADS {
            let e = t + u * THREADS;
            let (r, jj) = (e / (KC / 4), (e % (KC / 4)) * 4);
            for v in 0..4 {
                unsafe { round_in_place(buf.add(r * CS + jj + v)) };
            }
        }
    } else {
        for u in 0..BT * KC / THREADS {
            let e = t + u * THREADS;
            unsafe { round_in_place(buf.add((e / KC) * CS + e % KC)) };
        }
    }
}
