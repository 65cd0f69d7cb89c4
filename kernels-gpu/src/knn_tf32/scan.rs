//! `knn_tf32_scan`: the tensor-core pass of the prefilter (steps 1 and 4 of [`super`]).
//!
//! A block owns `TF32_ROWS` queries and a run of `tiles` consecutive tiles of `TF32_COLS`
//! training rows. The query tile is staged once (TF32-rounded, `xc` dimensions, in fragment order
//! [`query_fragment`]; restaged per slice when `d > xc`), training chunks of `SCAN_CHUNK_DIMS` dimensions
//! stream through `TF32_STAGES` buffers with `cp.async` as raw f32 (the tensor cores read them at
//! TF32 precision; the bound of [`super`] allows for it). Warp `(wm, wn)` of the 8 owns queries `wm·32..` × training rows `wn·64..` as
//! 2 × 8 `m16n8k8` tiles (the fragment layout of `kmeans_assign_l2_tf32`).

use super::*;
use crate::cp_async::{commit, copy_rows, shared_addr, wait_group};
#[cfg(target_arch = "nvptx64")]
use crate::exec::Gpu;
use crate::exec::{Exec, shfl_xor_u64};
use crate::knn::{NO_KEY, key};
use crate::mma::{load4, to_tf32};

const THREADS: usize = TF32_BLOCK as usize;

/// Arguments of the scan (of `knn_tf32_scan` and of sm_90a's `knn_tf32_scan_wg`).
#[derive(Clone, Copy)]
pub(super) struct Tf32ScanArgs {
    pub q: *const f32,
    pub q_norms: *const f32,
    pub m: usize,
    pub x: *const f32,
    pub x_norms: *const f32,
    pub x_roots: *const f32,
    pub n: usize,
    pub d: usize,
    pub xc: usize,
    pub tiles: usize,
    pub mode: u32,
    pub group: usize,
    pub gkeys: *mut u64,
    pub ldg: usize,
    pub approx: *mut f32,
    pub lda: usize,
    pub t_sq: *const f32,
    pub counts: *mut u32,
    pub cand: *mut u32,
    pub c1: f32,
}

impl Tf32ScanArgs {
    /// The entry's parameters as the body takes them (`d`, `xc`, `tiles` at least their
    /// smallest valid values, `group` 16 or 64).
    #[inline(always)]
    pub(super) fn new(params: ScanParams) -> Self {
        let ScanParams {
            q,
            q_norms,
            m,
            x,
            x_norms,
            x_roots,
            n,
            d,
            xc,
            tiles,
            mode,
            group,
            gkeys,
            ldg,
            approx,
            lda,
            t_sq,
            counts,
            cand,
            c1,
        } = params;
        Tf32ScanArgs {
            q: q.as_ptr(),
            q_norms: q_norms.as_ptr(),
            m: m as usize,
            x: x.as_ptr(),
            x_norms: x_norms.as_ptr(),
            x_roots: x_roots.as_ptr(),
            n: n as usize,
            d: (d as usize).max(1),
            xc: (xc as usize).max(SCAN_CHUNK_DIMS),
            tiles: (tiles as usize).max(1),
            mode,
            group: if group == 16 { 16 } else { 64 },
            gkeys: gkeys.as_mut_ptr(),
            ldg: ldg as usize,
            approx: approx.as_mut_ptr(),
            lda: lda as usize,
            t_sq: t_sq.as_ptr(),
            counts: counts.as_mut_ptr(),
            cand: cand.as_mut_ptr(),
            c1,
        }
    }
}

scan_entry! {
    /// The TF32 scan of queries `q` (`m × d`) against training rows `x` (`n × d`), with their
    /// squared norms (and, for the bound, `x_roots[j] = sqrt(x_norms[j])`). Block `b` takes query tile `b % ceil(m / 128)` and training tiles
    /// `(b / ceil(m / 128))·tiles ..` (at most `tiles`). Mode `SCAN_GROUPS`: writes
    /// `gkeys[i · ldg + group]`, the key of the group's smallest approximate distance (`NO_KEY`
    /// when the group has no row), groups of `group` (16 or 64) training rows numbered
    /// `tile · (128 / group) + …`, and with a non-null `approx` also every approximation `A` at
    /// `approx[i · lda + j]` (`lda` as [`super::candidates::approx_stride`]: rows past `n` inside it
    /// get values too). Mode `SCAN_CANDIDATES`: appends every `j` that
    /// [`may_be_near`] `t_sq[i]` to `cand[i · TF32_CAP ..]`, counting in `counts[i]` (past
    /// `TF32_CAP` only counted). `c1` is [`bound_coefficient`]`(d)`.
    ///
    /// # Safety
    /// Pointers valid for those sizes; `TF32_BLOCK` threads, `tf32_scan_shared_bytes(xc)` of
    /// dynamic shared memory, `xc` a multiple of `SCAN_CHUNK_DIMS`.
    fn knn_tf32_scan(params) {
        unsafe { scan(Gpu, params) }
    }
}

/// The body of `knn_tf32_scan`: 16-byte copies when every row starts 16-byte aligned
/// (`d % 4 == 0`), else one word at a time (two specialisations, so neither keeps the other's
/// addresses live).
///
/// # Safety
/// As `knn_tf32_scan`.
// `%`, as the PTX was tuned with it.
#[allow(clippy::manual_is_multiple_of)]
#[inline(always)]
pub(super) unsafe fn scan<E: Exec>(e: E, params: ScanParams) {
    let a = Tf32ScanArgs::new(params);
    if a.d % 4 == 0 {
        unsafe { run::<true, _>(e, a) }
    } else {
        unsafe { run::<false, _>(e, a) }
    }
}

/// The scan of one block: its query rows, the prologue of training chunks, then one step per
/// chunk (restage, prefetch, `mma`) with the [`epilogue`] after each tile.
///
/// Kept whole at ~150 lines: moving the prologue or the query-row setup into
/// `#[inline(always)]` helpers reorders and re-branches the PTX of `knn_tf32_scan`.
// Index loops: the fragments and accumulators are indexed by several loop variables at once.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn run<const VEC: bool, E: Exec>(e: E, a: Tf32ScanArgs) {
    let vec = VEC;
    let t = e.thread();
    let (warp, lane) = (t / 32, t % 32);
    let (g, qq) = (lane / 4, lane % 4);
    let (wm, wn) = (warp % 4, warp / 4);
    let row_tiles = a.m.div_ceil(TF32_ROWS).max(1);
    let col_tiles = a.n.div_ceil(TF32_COLS);
    let b = e.block();
    let first_row = (b % row_tiles) * TF32_ROWS;
    let tile0 = (b / row_tiles) * a.tiles;
    if tile0 >= col_tiles {
        return;
    }
    let tile1 = col_tiles.min(tile0 + a.tiles);
    let (xc, d) = (a.xc, a.d);

    let xs = e.shared::<u32>();
    let cs = unsafe { xs.add(TF32_ROWS * xc) };
    let cs_addr = shared_addr(cs);

    let dp = d.next_multiple_of(SCAN_CHUNK_DIMS);
    let chunks = dp / SCAN_CHUNK_DIMS;
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
            c1q[r] = a.c1 * crate::math::sqrt(nq[r]);
            if a.mode == SCAN_CANDIDATES {
                tsq[r] = unsafe { *a.t_sq.add(rows[r]) };
            }
        }
    }

    // Prologue: the first TF32_STAGES − 1 training chunks, one copy group each (empty groups past the
    // end keep the group count of `cp_async_wait_group` uniform), then the query slice while they
    // are in flight.
    for p in 0..TF32_STAGES - 1 {
        if p < steps {
            let (first, j0) = (
                (tile0 + p / chunks) * TF32_COLS,
                (p % chunks) * SCAN_CHUNK_DIMS,
            );
            unsafe {
                stage_chunk(
                    t,
                    vec,
                    a.x,
                    a.n,
                    d,
                    first,
                    j0,
                    cs_addr + 4 * (p * TF32_COLS * SCAN_ROW_STRIDE) as u32,
                )
            };
        } else {
            commit();
        }
    }
    unsafe { stage_queries(t, vec, a.q, a.m, d, first_row, 0, dp, xc, xs, query_word) };

    // Positions advance by one chunk per step (no 64-bit divisions in the loop): step `s` is
    // chunk `kc` of tile `tile`, dimension chunk `slice_chunk` of the staged query slice; the
    // prefetch runs `TF32_STAGES − 1` chunks ahead.
    let (mut tile, mut kc, mut slice_chunk) = (tile0, 0, 0);
    let (slice_chunks, ahead0) = (xc / SCAN_CHUNK_DIMS, TF32_STAGES - 1);
    let (mut ahead_tile, mut ahead_kc) = (tile0 + ahead0 / chunks, ahead0 % chunks);
    let mut acc = [[[0f32; 4]; 8]; 2];
    let mut s = 0;
    while s < steps {
        let buf = unsafe { cs.add((s % TF32_STAGES) * TF32_COLS * SCAN_ROW_STRIDE) };
        // Chunk s has landed (at most TF32_STAGES − 2 later groups in flight).
        wait_group::<{ TF32_STAGES - 2 }>();
        if !resident && s > 0 && slice_chunk == 0 {
            // The next slice of the query dimensions: once every warp is done with this one.
            e.sync();
            unsafe {
                stage_queries(
                    t,
                    vec,
                    a.q,
                    a.m,
                    d,
                    first_row,
                    kc * SCAN_CHUNK_DIMS,
                    dp,
                    xc,
                    xs,
                    query_word,
                )
            };
        }
        e.sync();
        // The buffer of chunk s − 1 is free now: prefetch chunk s + TF32_STAGES − 1 into it.
        if ahead_tile < tile1 {
            let (first, j0) = (ahead_tile * TF32_COLS, ahead_kc * SCAN_CHUNK_DIMS);
            let at = cs_addr
                + 4 * (((s + TF32_STAGES - 1) % TF32_STAGES) * TF32_COLS * SCAN_ROW_STRIDE) as u32;
            unsafe { stage_chunk(t, vec, a.x, a.n, d, first, j0, at) };
            ahead_kc += 1;
            if ahead_kc == chunks {
                (ahead_tile, ahead_kc) = (ahead_tile + 1, 0);
            }
        } else {
            commit();
        }
        // k slot (step kk, lane column q, half h) ↔ dimension q·8 + kk·2 + h of the chunk, for
        // queries and training rows alike.
        for half in 0..2 {
            let mut fa = [[[0u32; 4]; 2]; 2];
            for (mt, fa) in fa.iter_mut().enumerate() {
                for (kk, f) in fa.iter_mut().enumerate() {
                    let at = query_fragment(wm * 2 + mt, slice_chunk, half, kk, lane, xc);
                    *f = unsafe { load4(xs.add(at)) };
                }
            }
            for nt in 0..8 {
                let col = wn * 64 + nt * 8 + g;
                let fb = unsafe { load4(buf.add(col * SCAN_ROW_STRIDE + qq * 8 + half * 4)) };
                for kk in 0..2 {
                    for mt in 0..2 {
                        e.mma_tf32(&mut acc[mt][nt], fa[mt][kk], [fb[2 * kk], fb[2 * kk + 1]]);
                    }
                }
            }
        }
        kc += 1;
        slice_chunk += 1;
        if slice_chunk == slice_chunks {
            slice_chunk = 0;
        }
        if kc == chunks {
            unsafe { epilogue(e, &a, tile, wn, qq, &acc, &rows, &row_ok, &nq, &c1q, &tsq) };
            acc = [[[0f32; 4]; 8]; 2];
            (tile, kc, slice_chunk) = (tile + 1, 0, 0);
        }
        s += 1;
    }
}

/// The end of a training tile: group minima or candidates from the accumulators. Element
/// `acc[mt][nt][half·2 + h]` is query row `r = mt·2 + half` × training row
/// `tile·128 + wn·64 + nt·8 + 2q + h`.
#[inline(always)]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
unsafe fn epilogue<E: Exec>(
    e: E,
    a: &Tf32ScanArgs,
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
    let base = tile * TF32_COLS + wn * 64 + 2 * qq;
    // Rows past `n` read the last norm (no branch per value); their values are never taken.
    let mut nx = [0f32; 16];
    for nt in 0..8 {
        for h in 0..2 {
            let j = (base + nt * 8 + h).min(a.n - 1);
            nx[nt * 2 + h] = unsafe { *a.x_norms.add(j) };
        }
    }
    if a.mode == SCAN_GROUPS {
        #[repr(C, align(8))]
        struct V2([f32; 2]);
        for r in 0..4 {
            let (mt, half) = (r / 2, r % 2);
            let mut best = (f32::INFINITY, u32::MAX);
            for nt in 0..8 {
                let j0 = base + nt * 8;
                let v = [0, 1].map(|h| approx_sq(acc[mt][nt][half * 2 + h], nq[r], nx[nt * 2 + h]));
                best = fold_pair(best, v, j0, a.n);
                // The pair as one 8-byte store (`lda` is even, pairs start even); rows past `n`
                // inside `lda` get values too, never read.
                if !a.approx.is_null() && row_ok[r] && j0 < a.lda {
                    unsafe { *a.approx.add(rows[r] * a.lda + j0).cast::<V2>() = V2(v) };
                }
            }
            let (bv, bj) = best;
            let mut best = if bj == u32::MAX { NO_KEY } else { key(bv, bj) };
            if a.group == 64 {
                // The four lanes of a row hold the warp's 64 training rows.
                let other = shfl_xor_u64(e, best, 1);
                best = if other < best { other } else { best };
                let other = shfl_xor_u64(e, best, 2);
                best = if other < best { other } else { best };
            }
            if row_ok[r] && (a.group == 16 || qq == 0) {
                let per_tile = TF32_COLS / a.group;
                let grp = tile * per_tile + if a.group == 16 { wn * 4 + qq } else { wn };
                unsafe { *a.gkeys.add(rows[r] * a.ldg + grp) = best };
            }
        }
    } else {
        // The roots come precomputed (a square root is a dozen instructions and a branch).
        let mut sx = [0f32; 16];
        for nt in 0..8 {
            for h in 0..2 {
                let j = (base + nt * 8 + h).min(a.n - 1);
                sx[nt * 2 + h] = unsafe { *a.x_roots.add(j) };
            }
        }
        for r in 0..4 {
            if !row_ok[r] {
                continue;
            }
            let (mt, half) = (r / 2, r % 2);
            for nt in 0..8 {
                for h in 0..2 {
                    let j = base + nt * 8 + h;
                    let slot = nt * 2 + h;
                    let v = approx_sq(acc[mt][nt][half * 2 + h], nq[r], nx[slot]);
                    let bound = error_bound(c1q[r], sx[slot], nq[r], nx[slot]);
                    if j < a.n && may_be_near(v, bound, tsq[r]) {
                        unsafe { push_candidate(a, rows[r], j) };
                    }
                }
            }
        }
    }
}

// The epilogue steps `knn_tf32_scan_wg` shares. Its approximation stores and group keys stay
// written out in both epilogues: as shared helpers they change the PTX of both scans.

/// Folds the approximations `v` of training rows `j0` and `j0 + 1` into a group's running
/// minimum `(value, row)`. Increasing j, strict `<`: the smallest value, the lowest index on
/// ties (NaN and ∞ never win, rows past `n` are skipped; a group without a finite value keeps
/// `(∞, u32::MAX)` and gets NO_KEY, which only loosens the threshold to ∞).
#[inline(always)]
pub(super) fn fold_pair(best: (f32, u32), v: [f32; 2], j0: usize, n: usize) -> (f32, u32) {
    let (mut bv, mut bj) = best;
    for (h, &v) in v.iter().enumerate() {
        let take = (j0 + h < n) & (v < bv);
        bv = if take { v } else { bv };
        bj = if take { (j0 + h) as u32 } else { bj };
    }
    (bv, bj)
}

/// Appends training row `j` to the candidates of query `row` (past `TF32_CAP` only counted).
///
/// # Safety
/// `a.counts` holds `a.m` counts, `a.cand` `a.m × TF32_CAP` indices.
#[inline(always)]
pub(super) unsafe fn push_candidate(a: &Tf32ScanArgs, row: usize, j: usize) {
    let at = unsafe { a.counts.add(row) };
    let pos = unsafe {
        core::sync::atomic::AtomicU32::from_ptr(at)
            .fetch_add(1, core::sync::atomic::Ordering::Relaxed)
    } as usize;
    if pos < TF32_CAP {
        unsafe { *a.cand.add(row * TF32_CAP + pos) = j as u32 };
    }
}

/// Stores dimensions `j0..j0 + min(xc, dp − j0)` of query rows `first..first + TF32_ROWS` of `src`,
/// rounded to TF32, into the tile `xs` at `word(row, dim, xc)` (the `mma` fragment order of
/// [`query_word`], or sm_90a's core matrices); zeros past `total`
/// and `d`. Plain loads and stores: the tile is staged once per block (or per slice).
///
/// # Safety
/// `src` holds `total × d` values (16-byte aligned rows with `vec`); `xs` holds `TF32_ROWS × xc` words.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn stage_queries(
    t: usize,
    vec: bool,
    src: *const f32,
    total: usize,
    d: usize,
    first: usize,
    j0: usize,
    dp: usize,
    xc: usize,
    xs: *mut u32,
    word: impl Fn(usize, usize, usize) -> usize,
) {
    #[repr(C, align(16))]
    #[derive(Clone, Copy)]
    struct V4([f32; 4]);
    // Loads in flight per thread before the first store (the loads of one pass are independent).
    const UNROLL: usize = 8;
    let width = xc.min(dp - j0);
    let w = if vec { 4 } else { 1 };
    let per_row = width / w;
    let total_words = TF32_ROWS * per_row;
    let mut e0 = t;
    while e0 < total_words {
        let mut v = [[0f32; 4]; UNROLL];
        for (u, v) in v.iter_mut().enumerate() {
            let e = e0 + u * THREADS;
            let (r, jj) = (e / per_row, (e % per_row) * w);
            let (row, col) = (first + r, j0 + jj);
            if e < total_words && row < total && col < d {
                let p = unsafe { src.add(row * d + col) };
                if vec {
                    *v = unsafe { (*p.cast::<V4>()).0 };
                } else {
                    v[0] = unsafe { *p };
                }
            }
        }
        for (u, v) in v.iter().enumerate() {
            let e = e0 + u * THREADS;
            if e < total_words {
                let (r, jj) = (e / per_row, (e % per_row) * w);
                // A constant trip count, by reference: else the loads go through local memory.
                for (i, v) in v.iter().enumerate() {
                    if i < w {
                        unsafe { *xs.add(word(r, jj + i, xc)) = to_tf32(*v) };
                    }
                }
            }
        }
        e0 += UNROLL * THREADS;
    }
}

/// Starts copying training rows `first..first + TF32_COLS`, dimensions `j0..j0 + SCAN_CHUNK_DIMS` into a chunk
/// buffer at shared address `buf` (stride `SCAN_ROW_STRIDE`), zeros past `n` and `d`.
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
    unsafe {
        copy_rows::<TF32_COLS, SCAN_CHUNK_DIMS, SCAN_ROW_STRIDE, THREADS>(
            t, vec, x, n, d, first, j0, buf,
        )
    };
    commit();
}

#[cfg(test)]
mod emulated;
