//! `knn_tf32_scan_wg`: the prefilter's tensor-core pass on Hopper's warpgroup `mma` (sm_90a),
//! with the arguments, outputs and bound of `knn_tf32_scan` ([`super::scan`]), for `d` a
//! multiple of 4.
//!
//! The block's two warpgroups own 64 queries each of the 128-query tile. Per training chunk (32
//! dimensions of 128 rows) each issues four `wgmma` of 64 × 128 × 8, which read both operands
//! from shared memory, so no fragment passes through registers and the tensor cores run while
//! the warps wait for the next chunk. Both operands are stored K-major in rows of 128 bytes (32
//! dimensions) with the 128-byte swizzle ([`sw128_word`]): a warp's copies read whole 128-byte
//! lines of four training rows and write them to shared memory without bank conflicts. The ring holds
//! [`WG_STAGES`] chunks, the copies run `WG_STAGES − 2` ahead, and a chunk's buffer is refilled
//! once the products two steps back are done (the previous step's still run across the
//! barrier). Queries are TF32-rounded when staged, training rows go in raw (read at TF32
//! precision), as in `knn_tf32_scan`.

use super::scan::{Tf32ScanArgs, fold_pair, push_candidate, stage_queries};
use super::*;
use crate::cp_async::{commit, copy_16, shared_addr, wait_group};
use crate::exec::{Exec, Gpu, shfl_xor_u64};
use crate::knn::{NO_KEY, key};
use crate::wgmma::{self, descriptor_sw128 as sw128, fence_shared_for_async};

const THREADS: usize = TF32_BLOCK as usize;
/// Chunks the copies run ahead of the products.
const AHEAD: usize = WG_STAGES - 2;
/// Bytes of one block of 32 dimensions of a 128-row operand (128 rows × 128 bytes).
const K_BLOCK: u32 = (TF32_ROWS * 128) as u32;

/// The word of a 128-row tile that holds row `row`, dimension `dim`: block `dim / 32` of 32
/// dimensions, then row `row`'s 128 bytes, whose 16-byte piece `c` (dimensions `4c..4c + 4`)
/// sits at position `c ^ (row % 8)` — `wgmma`'s 128-byte swizzle (1024-byte aligned atoms).
pub const fn sw128_word(row: usize, dim: usize, _xc: usize) -> usize {
    let piece = (dim % 32) / 4;
    (dim / 32) * TF32_ROWS * 32 + row * 32 + (piece ^ (row % 8)) * 4 + dim % 4
}

scan_entry! {
    /// See [`super::scan::knn_tf32_scan`]; `d` must be a multiple of 4 and the launch gives
    /// `wg_scan_shared_bytes(xc)` of dynamic shared memory.
    ///
    /// # Safety
    /// As `knn_tf32_scan`, with 16-byte aligned rows (`d % 4 == 0`).
    fn knn_tf32_scan_wg(params) {
        let a = Tf32ScanArgs::new(params);
        unsafe { run(a) }
    }
}

/// The scan of one block: the prologue of copies, then per chunk the wait, the barrier, the
/// next copy and four `wgmma` per warpgroup, with the [`epilogue`] at each tile's end.
#[inline(always)]
unsafe fn run(a: Tf32ScanArgs) {
    let t = Gpu.thread();
    let (warp, lane) = (t / 32, t % 32);
    let (g, qq) = (lane / 4, lane % 4);
    let row_tiles = a.m.div_ceil(TF32_ROWS).max(1);
    let col_tiles = a.n.div_ceil(TF32_COLS);
    let b = Gpu.block();
    let first_row = (b % row_tiles) * TF32_ROWS;
    let tile0 = (b / row_tiles) * a.tiles;
    if tile0 >= col_tiles {
        return;
    }
    let tile1 = col_tiles.min(tile0 + a.tiles);
    let (xc, d) = (a.xc, a.d);
    let xs = Gpu.shared::<u32>();
    let xs_addr = shared_addr(xs);
    let cs_addr = xs_addr + (TF32_ROWS * xc * 4) as u32;
    let dp = d.next_multiple_of(SCAN_CHUNK_DIMS);
    let chunks = dp / SCAN_CHUNK_DIMS;
    let resident = dp <= xc;
    let steps = (tile1 - tile0) * chunks;

    // Prologue: the first AHEAD chunks, one copy group each (empty past the end, so that the
    // group count stays uniform), then the query slice while they are in flight.
    for p in 0..AHEAD {
        if p < steps {
            let first = (tile0 + p / chunks) * TF32_COLS;
            let j0 = (p % chunks) * SCAN_CHUNK_DIMS;
            unsafe { stage_chunk(t, a.x, a.n, d, first, j0, cs_addr + stage_offset(p as u32)) };
        }
        commit();
    }
    unsafe { stage_queries(t, true, a.q, a.m, d, first_row, 0, dp, xc, xs, sw128_word) };
    fence_shared_for_async();

    let (chunks, tile1) = (chunks as u32, tile1 as u32);
    let slice_chunks = (xc / SCAN_CHUNK_DIMS) as u32;
    let ahead = AHEAD as u32;
    // The next chunk to copy: (tile, chunk of the tile).
    let mut next = (tile0 as u32 + ahead / chunks, ahead % chunks);
    // This warpgroup's 64 query rows: 64·wg.. of the tile.
    let a_rows = xs_addr + (warp / 4) as u32 * 64 * 128;
    // Step `s`: chunk `kc` of the tile, `in_slice` of the staged query slice. Chunk s has landed
    // (later ones may be in flight) and is visible to the tensor cores; after the barrier every
    // product of chunk s − 2 is done (each warpgroup left only its last step's group pending),
    // so its buffer takes chunk s + AHEAD; then the four products of chunk s (a tile's first
    // overwrites), and this warpgroup's products of chunk s − 1 are awaited.
    let step = |s: u32, kc: u32, in_slice: u32, acc: &mut [f32; 64], next: &mut (u32, u32)| {
        let stage = cs_addr + stage_offset(s);
        wait_group::<{ AHEAD - 1 }>();
        fence_shared_for_async();
        Gpu.sync();
        if next.0 < tile1 {
            let first = next.0 as usize * TF32_COLS;
            let j0 = next.1 as usize * SCAN_CHUNK_DIMS;
            unsafe { stage_chunk(t, a.x, a.n, d, first, j0, cs_addr + stage_offset(s + ahead)) };
            next.1 += 1;
            if next.1 == chunks {
                *next = (next.0 + 1, 0);
            }
        }
        commit();
        wgmma::fence(acc);
        for ks in 0..SCAN_CHUNK_DIMS as u32 / 8 {
            // Dimensions 8·ks.. of the chunk: 32 bytes into each row (of the query slice, in
            // block `in_slice`).
            let da = sw128(a_rows + in_slice * K_BLOCK + 32 * ks);
            let db = sw128(stage + 32 * ks);
            unsafe { wgmma::mma_m64n128k8(acc, da, db, kc > 0 || ks > 0) };
        }
        wgmma::commit();
        wgmma::wait::<1>(acc);
    };
    // Every edge into a loop's head leaves the products in the same state (none pending at a
    // slice's start, one in its chunk loop): else ptxas reconciles them by waiting for every
    // product at each step.
    let mut acc = [0f32; 64];
    let mut s = 0u32;
    for tile in tile0 as u32..tile1 {
        let mut kc = 0;
        while kc < chunks {
            if !resident && s > 0 {
                // The next slice of the query dimensions: no product reads this one now.
                Gpu.sync();
                let j0 = kc as usize * SCAN_CHUNK_DIMS;
                unsafe {
                    stage_queries(t, true, a.q, a.m, d, first_row, j0, dp, xc, xs, sw128_word)
                };
                fence_shared_for_async();
            }
            let slice_end = chunks.min(kc + slice_chunks);
            let slice_start = kc;
            step(s, kc, 0, &mut acc, &mut next);
            (s, kc) = (s + 1, kc + 1);
            while kc < slice_end {
                step(s, kc, kc - slice_start, &mut acc, &mut next);
                (s, kc) = (s + 1, kc + 1);
            }
            wgmma::wait::<0>(&mut acc);
        }
        let rows = unsafe { QueryRows::of(&a, first_row + warp * 16 + g) };
        unsafe { epilogue(&a, tile as usize, qq, &acc, &rows) };
    }
}

/// Byte offset of the ring buffer of chunk `s`.
#[inline(always)]
fn stage_offset(s: u32) -> u32 {
    (s % WG_STAGES as u32) * WG_CHUNK_BYTES as u32
}

/// A thread's two query rows `r` ↔ `first + 8·r` (see [`crate::wgmma`]'s layout), with what the
/// epilogue needs of them.
struct QueryRows {
    rows: [usize; 2],
    row_ok: [bool; 2],
    nq: [f32; 2],
    c1q: [f32; 2],
    tsq: [f32; 2],
}

impl QueryRows {
    /// # Safety
    /// `a`'s query norms (and thresholds, in candidate mode) are valid for `a.m` rows.
    #[inline(always)]
    unsafe fn of(a: &Tf32ScanArgs, first: usize) -> Self {
        let mut q = QueryRows {
            rows: [0; 2],
            row_ok: [false; 2],
            nq: [0.0; 2],
            c1q: [0.0; 2],
            tsq: [f32::NEG_INFINITY; 2],
        };
        for r in 0..2 {
            let row = first + 8 * r;
            q.rows[r] = row;
            q.row_ok[r] = row < a.m;
            if q.row_ok[r] {
                q.nq[r] = unsafe { *a.q_norms.add(row) };
                q.c1q[r] = a.c1 * crate::math::sqrt(q.nq[r]);
                if a.mode == SCAN_CANDIDATES {
                    q.tsq[r] = unsafe { *a.t_sq.add(row) };
                }
            }
        }
        q
    }
}

/// The end of a training tile: group minima or candidates from the accumulators. Element
/// `acc[4·j + 2·r + h]` is query row `r` × training row `tile·128 + 8·j + 2q + h`. A group is
/// the 16 rows `j = 8·jh ..` of one lane (16) or of its quad (64).
#[inline(always)]
unsafe fn epilogue(a: &Tf32ScanArgs, tile: usize, qq: usize, acc: &[f32; 64], q: &QueryRows) {
    let QueryRows {
        rows,
        row_ok,
        nq,
        c1q,
        tsq,
    } = q;
    let base = tile * TF32_COLS + 2 * qq;
    if a.mode == SCAN_GROUPS {
        #[repr(C, align(8))]
        struct V2([f32; 2]);
        for jh in 0..2 {
            // Rows past `n` read the last norm (no branch per value); their values are never
            // taken.
            let mut nx = [0f32; 16];
            for (e, nx) in nx.iter_mut().enumerate() {
                let j = (base + (8 * jh + e / 2) * 8 + e % 2).min(a.n - 1);
                *nx = unsafe { *a.x_norms.add(j) };
            }
            for r in 0..2 {
                let mut best = (f32::INFINITY, u32::MAX);
                for jj in 0..8 {
                    let j = 8 * jh + jj;
                    let j0 = base + j * 8;
                    let v =
                        [0, 1].map(|h| approx_sq(acc[4 * j + 2 * r + h], nq[r], nx[2 * jj + h]));
                    best = fold_pair(best, v, j0, a.n);
                    if !a.approx.is_null() && row_ok[r] && j0 < a.lda {
                        unsafe { *a.approx.add(rows[r] * a.lda + j0).cast::<V2>() = V2(v) };
                    }
                }
                let (bv, bj) = best;
                let mut best = if bj == u32::MAX { NO_KEY } else { key(bv, bj) };
                if a.group == 64 {
                    let other = shfl_xor_u64(Gpu, best, 1);
                    best = if other < best { other } else { best };
                    let other = shfl_xor_u64(Gpu, best, 2);
                    best = if other < best { other } else { best };
                }
                if row_ok[r] && (a.group == 16 || qq == 0) {
                    let per_tile = TF32_COLS / a.group;
                    let grp = tile * per_tile + if a.group == 16 { jh * 4 + qq } else { jh };
                    unsafe { *a.gkeys.add(rows[r] * a.ldg + grp) = best };
                }
            }
        }
    } else {
        for j in 0..16 {
            for h in 0..2 {
                let col = base + j * 8 + h;
                let jc = col.min(a.n - 1);
                let (nx, sx) = unsafe { (*a.x_norms.add(jc), *a.x_roots.add(jc)) };
                for r in 0..2 {
                    let v = approx_sq(acc[4 * j + 2 * r + h], nq[r], nx);
                    let bound = error_bound(c1q[r], sx, nq[r], nx);
                    if row_ok[r] && col < a.n && may_be_near(v, bound, tsq[r]) {
                        unsafe { push_candidate(a, rows[r], col) };
                    }
                }
            }
        }
    }
}

/// Starts copying training rows `first..first + TF32_COLS`, dimensions `j0..j0 + 32` into the
/// chunk buffer at shared address `dst` ([`sw128_word`]'s layout; zeros past `n` and `d`) and
/// commits nothing. A warp copies four rows' 128 bytes at a time, and the 8 threads of a
/// shared-memory phase (one row) write its 8 pieces to 8 distinct positions.
///
/// # Safety
/// `x` holds `n × d` values in 16-byte aligned rows (`d % 4 == 0`).
#[inline(always)]
pub(crate) unsafe fn stage_chunk(
    t: usize,
    x: *const f32,
    n: usize,
    d: usize,
    first: usize,
    j0: usize,
    dst: u32,
) {
    const PIECES: usize = TF32_COLS * SCAN_CHUNK_DIMS / 4;
    for u in 0..PIECES / THREADS {
        let e = t + u * THREADS;
        let (row_in, piece) = (e / 8, e % 8);
        let (row, col) = (first + row_in, j0 + 4 * piece);
        let ok = row < n && col < d;
        let src = if ok {
            unsafe { x.add(row * d + col) }
        } else {
            x
        };
        let at = dst + (row_in * 128 + (piece ^ (row_in % 8)) * 16) as u32;
        unsafe { copy_16(at, src, if ok { 16 } else { 0 }) };
    }
}
