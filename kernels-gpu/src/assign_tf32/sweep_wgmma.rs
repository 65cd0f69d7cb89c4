//! `kmeans_assign_l2_tf32_wg`: [`super::kmeans_assign_l2_tf32`] on Hopper's warpgroup `mma`
//! (sm_90a), with its arguments, outputs and bound, for `d` a multiple of 4 up to 128 (every
//! dimension staged once).
//!
//! The block's two warpgroups own 64 points each of the 128-point tile and every centroid of each
//! 128-centroid tile. Per centroid chunk (32 dimensions of 128 rows) each issues four `wgmma` of
//! 64 × 128 × 8 that read both operands from shared memory, so the tensor cores run while the
//! warps wait for the next chunk — the tile layouts and copies are the kNN prefilter's
//! (`knn_tf32::scan_wgmma`), both K-major with the 128-byte swizzle: the point tile copied raw,
//! its row terms taken from it and then rounded to TF32 in place; centroids raw. The ring holds
//! [`WG_ASSIGN_STAGES`] chunks (two blocks fit a multiprocessor at d = 128), the copies run one
//! chunk ahead, and a chunk's buffer is refilled once the products two steps back are done. At a
//! tile's end each thread offers its two points' 32 lower bounds to their shortlists (the tile's
//! norms from registers, by shuffles); after the sweep the four lanes of a point merge and the
//! exact re-check is the sm_80 kernel's ([`super::finish`]), so labels and distances are the
//! exact path's, whatever the data.

use super::*;
use crate::cp_async::{commit, shared_addr, wait_all, wait_group};
use crate::exec::Gpu;
use crate::knn_tf32::scan_wgmma::{stage_chunk, sw128_word};
use crate::knn_tf32::{SCAN_CHUNK_DIMS, WG_CHUNK_BYTES};
use crate::tile::{load_vec4s, store_vec4};
use crate::wgmma::{self, descriptor_sw128 as sw128, fence_shared_for_async};

/// Chunks the copies run ahead of the products.
const AHEAD: usize = WG_ASSIGN_STAGES - 2;
/// Bytes of one block of 32 dimensions of the 128-point tile (128 rows × 128 bytes).
const K_BLOCK: u32 = (TF32_POINTS * 128) as u32;

assign_tf32_entry! {
    /// See [`super::kmeans_assign_l2_tf32`]; `d` must be a multiple of 4 and the launch gives
    /// [`wg_shared_bytes`]`(d)` of dynamic shared memory.
    ///
    /// # Safety
    /// As `kmeans_assign_l2_tf32`, with 16-byte aligned rows (`d % 4 == 0`).
    fn kmeans_assign_l2_tf32_wg(params) {
        let a = Tf32AssignArgs::new(params);
        unsafe { run(a) }
    }
}

/// The sweep of one block: the prologue of copies, then per chunk the wait, the barrier, the
/// next copy and four `wgmma` per warpgroup, each tile's end offered to the shortlists; then
/// [`finish`].
#[inline(always)]
unsafe fn run(a: Tf32AssignArgs) {
    let e = Gpu;
    let t = e.thread();
    let (warp, lane) = (t / 32, t % 32);
    let (g, q) = (lane / 4, lane % 4);
    let first_point = e.block() * TF32_POINTS;
    let (d, k) = (a.d, a.k);
    let xc = wg_point_dims(d);
    let dp = d.next_multiple_of(SCAN_CHUNK_DIMS);
    let chunks = dp / SCAN_CHUNK_DIMS;
    let tiles = k.div_ceil(TF32_CENTROIDS);
    let steps = tiles * chunks;
    let xs = e.shared::<u32>();
    let xs_addr = shared_addr(xs);
    let cs_addr = xs_addr + (TF32_POINTS * xc * 4) as u32;
    // Per point of the block: its error-bound terms `p`, then `X + R_x`, read where a tile is
    // ranked.
    let terms =
        unsafe { xs.add(TF32_POINTS * xc + WG_ASSIGN_STAGES * WG_CHUNK_BYTES / 4) }.cast::<f32>();

    // Prologue: the point tile's raw rows, a chunk's layout per 32 dimensions, in one copy
    // group, then the first AHEAD centroid chunks, a group each (empty past the end, so that
    // the group count stays uniform); the row terms and the rounding to TF32 once the points
    // have landed, while the centroids are in flight.
    for kc in 0..chunks {
        let dst = xs_addr + kc as u32 * K_BLOCK;
        unsafe { stage_chunk(t, a.x, a.n, d, first_point, kc * SCAN_CHUNK_DIMS, dst) };
    }
    commit();
    for p in 0..AHEAD {
        if p < steps {
            let first = (p / chunks) * TF32_CENTROIDS;
            let j0 = (p % chunks) * SCAN_CHUNK_DIMS;
            unsafe {
                stage_chunk(
                    t,
                    a.centroids,
                    k,
                    d,
                    first,
                    j0,
                    cs_addr + stage_offset(p as u32),
                )
            };
        }
        commit();
    }
    wait_group::<AHEAD>();
    e.sync();
    unsafe { row_terms_then_round(e, d, xs, terms) };

    let (chunks, tiles) = (chunks as u32, tiles as u32);
    let ahead = AHEAD as u32;
    // The next chunk to copy: (tile, chunk of the tile).
    let mut next = (ahead / chunks, ahead % chunks);
    // This warpgroup's 64 point rows: 64·wg.. of the tile.
    let a_rows = xs_addr + (warp / 4) as u32 * 64 * 128;
    // Step `s`: chunk `kc` of the tile. Chunk s has landed
    // (later ones may be in flight) and is visible to the tensor cores; after the barrier every
    // product of chunk s − 2 is done (each warpgroup left only its last step's group pending),
    // so its buffer takes chunk s + AHEAD; then the four products of chunk s (a tile's first
    // overwrites), and this warpgroup's products of chunk s − 1 are awaited.
    let step = |s: u32, kc: u32, acc: &mut [f32; 64], next: &mut (u32, u32)| {
        let stage = cs_addr + stage_offset(s);
        wait_group::<{ AHEAD - 1 }>();
        fence_shared_for_async();
        e.sync();
        if next.0 < tiles {
            let first = next.0 as usize * TF32_CENTROIDS;
            let j0 = next.1 as usize * SCAN_CHUNK_DIMS;
            let dst = cs_addr + stage_offset(s + ahead);
            unsafe { stage_chunk(t, a.centroids, k, d, first, j0, dst) };
            next.1 += 1;
            if next.1 == chunks {
                *next = (next.0 + 1, 0);
            }
        }
        commit();
        wgmma::fence(acc);
        for ks in 0..SCAN_CHUNK_DIMS as u32 / 8 {
            // Dimensions 8·ks.. of the chunk: 32 bytes into each row (of the point tile, in
            // block `kc`).
            let da = sw128(a_rows + kc * K_BLOCK + 32 * ks);
            let db = sw128(stage + 32 * ks);
            unsafe { wgmma::mma_m64n128k8(acc, da, db, kc > 0 || ks > 0) };
        }
        wgmma::commit();
        wgmma::wait::<1>(acc);
    };
    // This thread's two points `r` ↔ tile row 16·warp + g + 8·r (`crate::wgmma`'s layout), their
    // shortlists, and whether each may be trusted (every tile's bound finite).
    let rows = [0, 1].map(|r| 16 * warp + g + 8 * r);
    let mut lists = [Shortlist::EMPTY; 2];
    let mut trusted = [true; 2];
    // No product is pending at a tile's start, one inside its chunk loop (every edge into a
    // loop's head must leave them in the same state, else ptxas waits for every product at
    // each step).
    let mut acc = [0f32; 64];
    let mut s = 0u32;
    for tile in 0..tiles {
        let norms = unsafe { TileNorms::load(&a, tile as usize, lane) };
        step(s, 0, &mut acc, &mut next);
        s += 1;
        for kc in 1..chunks {
            step(s, kc, &mut acc, &mut next);
            s += 1;
        }
        wgmma::wait::<0>(&mut acc);
        unsafe {
            offer_tile(
                e,
                tile as usize,
                q,
                &norms,
                &acc,
                rows,
                terms,
                &mut lists,
                &mut trusted,
            )
        };
    }
    // Only empty groups can be pending; the barrier frees the point tile for the merge.
    wait_all();
    e.sync();
    let [l0, l1] = &mut lists;
    merge_row(e, l0, trusted[0]);
    merge_row(e, l1, trusted[1]);
    unsafe { finish::<1, 2, _>(e, &a, first_point, xs, &lists, |r| rows[r], q == 0) };
}

/// Each point's error-bound terms, as [`stage_row_terms`] computes them from the rows in global
/// memory, but from the staged tile; then the tile rounded to TF32 in place. Two threads a row,
/// each a part of its dimensions (the first `d / 8 · 4` and the rest, in order); each rounds
/// the words it read, so no barrier separates the two.
///
/// # Safety
/// The raw point tile has landed and is visible; `terms` is `2 · TF32_POINTS` words.
#[inline(always)]
unsafe fn row_terms_then_round(e: Gpu, d: usize, xs: *mut u32, terms: *mut f32) {
    let t = e.thread();
    let (row, half) = (t / 2, t % 2);
    let split = d / 8 * 4;
    let (from, to) = if half == 0 { (0, split) } else { (split, d) };
    let mut part = RowTerms::default();
    for j in (from..to).step_by(4) {
        // Four dimensions share a 16-byte piece of the swizzled row.
        let quad = unsafe { xs.add(sw128_word(row, j, 0)) }.cast::<f32>();
        let v: [f32; 4] = unsafe { load_vec4s(quad) };
        for v in &v {
            part.add(*v, true);
        }
        unsafe { store_vec4(quad, v.map(|v| f32::from_bits(to_tf32(v)))) };
    }
    unsafe { publish_row_terms(e, part, d, row, half, terms) };
}

/// Byte offset of the ring buffer of chunk `s`.
#[inline(always)]
fn stage_offset(s: u32) -> u32 {
    (s % WG_ASSIGN_STAGES as u32) * WG_CHUNK_BYTES as u32
}

/// A centroid tile's squared norms and maxima, a few words a lane: loaded before the tile's
/// products (global loads may not cross the `wgmma` fences), handed out by shuffles when it is
/// ranked, so the ranking does not wait on memory.
struct TileNorms {
    /// Lane `l`: the squared norms of the tile's centroids `l + 32·m` (`+∞` past `k`).
    c_sq: [f32; TF32_CENTROIDS / 32],
    /// Lane `w < TILE_MAXIMA_WORDS`: the tile's maximum `w`.
    maxima: f32,
}

impl TileNorms {
    /// Lane `lane`'s words of tile `tile`.
    ///
    /// # Safety
    /// `a`'s norms and maxima are valid for `k` centroids.
    #[inline(always)]
    unsafe fn load(a: &Tf32AssignArgs, tile: usize, lane: usize) -> TileNorms {
        let c_sq = core::array::from_fn(|m| {
            let c = tile * TF32_CENTROIDS + lane + 32 * m;
            if c < a.k {
                unsafe { *a.c_sq_norms.add(c) }
            } else {
                f32::INFINITY
            }
        });
        let maxima = if lane < TILE_MAXIMA_WORDS {
            unsafe { *a.tile_maxima.add(tile * TILE_MAXIMA_WORDS + lane) }
        } else {
            0.0
        };
        TileNorms { c_sq, maxima }
    }

    /// The squared norm of the tile's centroid `c < TF32_CENTROIDS` (`c / 32` the same on every
    /// lane).
    #[inline(always)]
    fn c_sq(&self, e: Gpu, c: usize) -> f32 {
        f32::from_bits(e.shfl_idx_u32(self.c_sq[c / 32].to_bits(), (c % 32) as u32))
    }
}

/// Offers centroid tile `tile`'s lower bounds `T − Ē` to this thread's two shortlists. Element
/// `acc[4·j + 2·r + h]` is point row `rows[r]` × centroid `tile·128 + 8·j + 2q + h`; centroids
/// past `k` take a squared norm of `+∞`, so their bounds are `+∞` and never kept.
///
/// # Safety
/// `terms` holds the block's row terms.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn offer_tile(
    e: Gpu,
    tile: usize,
    q: usize,
    norms: &TileNorms,
    acc: &[f32; 64],
    rows: [usize; 2],
    terms: *const f32,
    lists: &mut [Shortlist; 2],
    trusted: &mut [bool; 2],
) {
    let [c_max, q_max, nc_max] =
        [0, 1, 2].map(|w| f32::from_bits(e.shfl_idx_u32(norms.maxima.to_bits(), w)));
    let mut bounds = [0f32; 2];
    for r in 0..2 {
        let (p, x_sum) = unsafe { (*terms.add(rows[r]), *terms.add(TF32_POINTS + rows[r])) };
        bounds[r] = tile_bound(p, x_sum, c_max, q_max, nc_max);
        trusted[r] &= bounds[r] < f32::INFINITY;
    }
    for j in 0..16 {
        for h in 0..2 {
            let in_tile = 8 * j + 2 * q + h;
            let c = tile * TF32_CENTROIDS + in_tile;
            let c_sq = norms.c_sq(e, in_tile);
            for r in 0..2 {
                lists[r].insert(l2_score(acc[4 * j + 2 * r + h], c_sq) - bounds[r], c as u32);
            }
        }
    }
}
