//! Exact squared-L2 assignment through a TF32 tensor-core shortlist (sm_80 and later).
//!
//! Same outputs as `kmeans_assign_l2_wide`, bit for bit. A block owns `TF32_POINTS` points and
//! sweeps the centroids in tiles of `TF32_CENTROIDS`; point rows (rounded to TF32 with
//! `cvt.rna` once staged) and centroid chunks (raw f32, which the tensor cores read at TF32
//! precision, streamed through a `TF32_STAGES`-deep `cp.async` ring with one barrier per chunk)
//! are zero-padded past `n`, `k` and `d` and multiplied with `mma.sync.m16n8k8` (FP32
//! accumulation). Each TF32 score `‖c‖² − 2·x·c` less a proven bound on its error (one per point
//! and centroid tile, from the norms and the measured TF32 rounding residuals, see [`bound`]) is
//! a lower bound on the exact score, and every point keeps the centroids of the two smallest
//! ([`shortlist::Shortlist`]). Both are re-scored exactly as the CPU does — a dimension-ordered
//! chain of single-rounding FMAs on the unrounded rows, lowest index on ties — and when the
//! third smallest lower bound does not exceed the better exact score, all `k` are, by
//! `kmeans_assign_l2_full_pass` ([`full_pass`]) after the kernel. Labels and distances are
//! therefore the exact path's whatever the data (see [`shortlist`] for the proof).
//!
//! The kernel body `run` goes prologue, sweep, merge, re-check (see its comment).

#[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
use crate::exec::Gpu;
use crate::knn_tf32::{SCAN_CHUNK_DIMS, WG_CHUNK_BYTES};
use crate::launch::Kernel;
use crate::params::DevPtr;
#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
use crate::{
    cp_async::{commit, copy_4, copy_16, copy_rows, shared_addr, wait_all, wait_group},
    exec::{
        Exec, atomic_add_u32, atomic_fetch_add_u32, block_sum_f64, block_sum_i64, shfl_xor_f32,
        shfl_xor_u64,
    },
    fixed::{inertia_term, units_at},
    launch::BLOCK,
    math::{AssignMetric, assign_distance, assign_step, better, l2_score},
    mma::{load4, to_tf32},
};
#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
use {
    bound::{RowTerms, TILE_MAXIMA_WORDS, product_coefficient, tile_bound},
    shortlist::Shortlist,
};

/// The `kmeans_assign_l2_tf32` entry point (built for sm_80 only). CPU twin:
/// `backend::cpu::kmeans::nearest`.
pub const KMEANS_ASSIGN_L2_TF32: Kernel<AssignTf32Params> = Kernel::new("kmeans_assign_l2_tf32")
    .only_sm80()
    .min_blocks(2);

/// The `kmeans_assign_l2_tf32_wg` entry point (in `sweep_wgmma`, built for sm_90a only):
/// `kmeans_assign_l2_tf32` on Hopper's warpgroup `mma`, for `d % 4 == 0` and `d ≤
/// TF32_POINT_DIMS`. CPU twin:
/// `backend::cpu::kmeans::nearest`.
pub const KMEANS_ASSIGN_L2_TF32_WG: Kernel<AssignTf32Params> =
    Kernel::new("kmeans_assign_l2_tf32_wg")
        .only_sm90a()
        .min_blocks(2);

kernel_params! {
    /// `kmeans_assign_l2_tf32`'s parameters.
    pub struct AssignTf32Params {
        pub x: DevPtr<f32>,
        pub x_sq_norms: DevPtr<f32>,
        pub n: u32,
        pub d: u32,
        pub centroids: DevPtr<f32>,
        pub c_sq_norms: DevPtr<f32>,
        pub tile_maxima: DevPtr<f32>,
        pub k: u32,
        pub labels: DevPtr<u32>,
        pub min_dist: DevPtr<f32>,
        pub changed: DevPtr<u32>,
        pub block_inertia: DevPtr<i64>,
        pub inertia_scale: f32,
        pub weights: DevPtr<f32>,
        pub flagged: DevPtr<u32>,
    }
    entries: assign_tf32_entry;
}

/// Points per block of `kmeans_assign_l2_tf32`: `BLOCK` threads, 8 warps as 4 point rows × 2
/// centroid columns, each warp 32 points × 64 centroids of `m16n8k8` tiles.
pub const TF32_POINTS: usize = 128;
/// Centroids per tile of the TF32 assign kernel.
pub const TF32_CENTROIDS: usize = 128;
/// Dimensions per staged centroid chunk of the TF32 assign kernel; dimensions are zero-padded to
/// a multiple of it.
pub const TF32_CHUNK_DIMS: usize = 16;
/// Dimensions of the staged point tile of the TF32 assign kernel (all of them when
/// `d ≤ TF32_POINT_DIMS`, so the tile is staged once per block; else one slice at a time).
pub const TF32_POINT_DIMS: usize = 128;
/// Centroid chunks in flight (`cp.async` groups) plus the one being multiplied.
pub const TF32_STAGES: usize = 4;
const _: () = assert!(
    TF32_STAGES >= 2,
    "a chunk in flight while one is multiplied"
);
/// Stride (in words) of the point tile's pair rows (two point rows interleaved): ≡ 4 (mod 32),
/// so the 16-byte A-fragment loads of each quarter warp (2 pair rows × 4 lanes, 8 words apart)
/// fall in 32 distinct banks.
pub const TF32_X_STRIDE: usize = 2 * TF32_POINT_DIMS + 4;
/// Row stride (in words) of a centroid chunk: ≡ 16 (mod 32), so the 16-byte B-fragment loads of
/// each quarter warp (2 rows × 4 lanes) fall in 32 distinct banks.
pub const TF32_C_STRIDE: usize = TF32_CHUNK_DIMS;
/// Words of one centroid stage: the chunk, then the squared norms of its tile's centroids and
/// the tile's maxima ([`bound::TILE_MAXIMA_WORDS`], padded to 16 bytes), staged with the tile's
/// last chunk, whose step ranks the tile.
pub const TF32_STAGE_WORDS: usize = TF32_CENTROIDS * TF32_C_STRIDE + TF32_CENTROIDS + 4;
const _: () = assert!(
    TF32_CENTROIDS + bound::TILE_MAXIMA_WORDS <= 4 + TF32_CENTROIDS
        && TF32_CENTROIDS + bound::TILE_MAXIMA_WORDS <= crate::launch::BLOCK as usize,
    "the tile's norms and maxima fit after the chunk, a word for each of the first threads"
);

/// Dynamic shared memory of one block of the TF32 assign kernel, in bytes: the point tile (after
/// the sweep it holds the shortlist merge and the reduction scratch), the centroid stages, and
/// per point its two error-bound terms ([`bound::RowTerms::point`]).
pub const fn tf32_shared_bytes() -> usize {
    (TF32_POINTS / 2 * TF32_X_STRIDE + TF32_STAGES * TF32_STAGE_WORDS + 2 * TF32_POINTS) * 4
}

/// Centroid chunks (of `knn_tf32::SCAN_CHUNK_DIMS` dimensions) in the ring of
/// `kmeans_assign_l2_tf32_wg`, whose copies run `WG_ASSIGN_STAGES − 2` ahead: three keep two
/// blocks on a multiprocessor at d = 128.
pub const WG_ASSIGN_STAGES: usize = 3;

/// Dimensions of the staged point tile of `kmeans_assign_l2_tf32_wg`: all of them, padded to a
/// chunk. The kernel takes `d ≤ TF32_POINT_DIMS` only (restaging slices inside its sweep would
/// keep the slice's loads live beside the accumulators: ptxas spilled at 128 registers).
pub const fn wg_point_dims(d: usize) -> usize {
    d.next_multiple_of(SCAN_CHUNK_DIMS)
}

/// Dynamic shared memory of one block of `kmeans_assign_l2_tf32_wg`, in bytes: the point slice
/// (after the sweep it holds the shortlist merge and the reduction scratch), the centroid ring,
/// and per point its two error-bound terms.
pub const fn wg_shared_bytes(d: usize) -> usize {
    (TF32_POINTS * wg_point_dims(d) + 2 * TF32_POINTS) * 4 + WG_ASSIGN_STAGES * WG_CHUNK_BYTES
}

/// Blocks of `kmeans_assign_l2_tf32` for `n` points.
pub const fn tf32_grid(n: usize) -> usize {
    n.div_ceil(TF32_POINTS)
}

/// Centroid tiles of `kmeans_assign_l2_tf32` for `k` centroids (the blocks of `tf32_tile_maxima`).
pub const fn tf32_tiles(k: usize) -> usize {
    k.div_ceil(TF32_CENTROIDS)
}

assign_tf32_entry! {
    /// Labels each of the `n` points of `x` (row-major, `d` columns) with its nearest of the `k`
    /// centroids (TF32 shortlist, exact FP32 re-check: the exact path's label) and writes its exact
    /// distance. `tile_maxima` holds each centroid tile's largest error-bound terms
    /// (`tf32_tile_maxima`). `weights`
    /// (null: one unit each) holds every point's integer units. With `changed` non-null, adds the
    /// number of labels of points with weight that differ from what `labels` held; with
    /// `block_inertia` non-null, writes each block's fixed-point inertia `Σ units · round(dist ·
    /// inertia_scale)` at its index.
    ///
    /// # Safety
    /// Pointers valid for those sizes; `BLOCK` threads, [`tf32_grid`]`(n)` blocks and
    /// [`tf32_shared_bytes`]`()` of dynamic shared memory.
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
    fn kmeans_assign_l2_tf32(params) {
        let a = Tf32AssignArgs::new(params);
        // Rows of `x` and `centroids` start 16-byte aligned when d is a multiple of 4: stage in
        // 16-byte copies then, else one word at a time (two specialisations, so neither keeps the
        // other's addresses live).
        if a.d % 4 == 0 {
            unsafe { run::<true, _>(Gpu, a) }
        } else {
            unsafe { run::<false, _>(Gpu, a) }
        }
    }
}

/// Arguments of [`kmeans_assign_l2_tf32`].
#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
#[derive(Clone, Copy)]
struct Tf32AssignArgs {
    x: *const f32,
    x_sq_norms: *const f32,
    n: usize,
    d: usize,
    centroids: *const f32,
    c_sq_norms: *const f32,
    tile_maxima: *const f32,
    k: usize,
    labels: *mut u32,
    min_dist: *mut f32,
    changed: *mut u32,
    block_inertia: *mut i64,
    inertia_scale: f32,
    weights: *const f32,
    flagged: *mut u32,
}

#[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
impl Tf32AssignArgs {
    /// The launch's parameters as pointers and sizes (`d` at least 1).
    #[inline(always)]
    fn new(params: AssignTf32Params) -> Tf32AssignArgs {
        let AssignTf32Params {
            x,
            x_sq_norms,
            n,
            d,
            centroids,
            c_sq_norms,
            tile_maxima,
            k,
            labels,
            min_dist,
            changed,
            block_inertia,
            inertia_scale,
            weights,
            flagged,
        } = params;
        Tf32AssignArgs {
            x: x.as_ptr(),
            x_sq_norms: x_sq_norms.as_ptr(),
            n: n as usize,
            d: (d as usize).max(1),
            centroids: centroids.as_ptr(),
            c_sq_norms: c_sq_norms.as_ptr(),
            tile_maxima: tile_maxima.as_ptr(),
            k: k as usize,
            labels: labels.as_mut_ptr(),
            min_dist: min_dist.as_mut_ptr(),
            changed: changed.as_mut_ptr(),
            block_inertia: block_inertia.as_mut_ptr(),
            inertia_scale,
            weights: weights.as_ptr(),
            flagged: flagged.as_mut_ptr(),
        }
    }
}

/// The kernel body, in four steps: the prologue (the first `TF32_STAGES − 1` centroid chunks in
/// flight, the point tile staged), the sweep (one `mma` step per centroid chunk, each finished
/// tile offered to every row's shortlist), the merge of the shortlists of the lanes and warp
/// columns that share a point, and the exact re-check (labels, distances, block totals).
///
/// Kept whole at ~300 lines: its steps share a dozen registers of state (the prefetch cursor,
/// the accumulators, the shortlists), and splitting them into `#[inline(always)]`
/// functions (tried, see the history of this file) reorders instructions and inverts the sweep
/// loop's latch in the PTX of `kmeans_assign_l2_tf32`. The helpers below (`stage_points`,
/// `stage_chunk`, `merge_lanes`, `exact_dot`) and [`Shortlist`] are its leaf steps.
#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
// Index loops (the fragments and accumulators are indexed by several loop variables at once)
// and `%` tests, as the PTX was tuned with them (`is_multiple_of` changes the sweep's code).
#[allow(clippy::needless_range_loop, clippy::manual_is_multiple_of)]
#[inline(always)]
unsafe fn run<const VEC: bool, E: Exec>(e: E, a: Tf32AssignArgs) {
    let Tf32AssignArgs {
        x,
        n,
        d,
        centroids,
        c_sq_norms,
        tile_maxima,
        k,
        ..
    } = a;
    let vec = VEC;
    let t = e.thread();
    let (warp, lane) = (t / 32, t % 32);
    let (g, q) = (lane / 4, lane % 4);
    // Warp (wm, wn) covers points wm·32.. and centroids wn·64.. of the block's tiles.
    let (wm, wn) = (warp % 4, warp / 4);
    let first_point = e.block() * TF32_POINTS;

    let xs = e.shared::<u32>();
    let cs = unsafe { xs.add(TF32_POINTS / 2 * TF32_X_STRIDE) };
    // Per point of the block: its error-bound terms `p` and `X + R_x` (zeros past `n`), read
    // where a tile is ranked (in registers they would spill from the sweep).
    let row_p = unsafe { cs.add(TF32_STAGES * TF32_STAGE_WORDS) }.cast::<f32>();
    let row_x_sum = unsafe { row_p.add(TF32_POINTS) };

    let dp = d.next_multiple_of(TF32_CHUNK_DIMS);
    let chunks = dp / TF32_CHUNK_DIMS; // centroid chunks per tile
    let resident = dp <= TF32_POINT_DIMS; // the point tile holds every dimension
    let tiles = k.div_ceil(TF32_CENTROIDS);
    let steps = tiles * chunks;

    // The shortlists of this thread's four point rows r: tile rows
    // wm·32 + (r / 2)·16 + (r % 2)·8 + g, and whether each may be trusted (every tile's bound
    // finite). The sweep's first barrier publishes the row terms.
    let mut lists = [Shortlist::EMPTY; 4];
    let mut trusted = [true; 4];
    unsafe { stage_row_terms(e, x, n, d, first_point, row_p) };

    let cs_addr = shared_addr(cs);
    // Prologue: the first TF32_STAGES − 1 centroid chunks, one group each (empty groups past the
    // last step keep the group count per step uniform), then the point tile through registers.
    // (tile, chunk) of the next step to prefetch.
    let (mut pt, mut pk) = (0, 0);
    let mut cursor = unsafe { ChunkCursor::at_tile(t, centroids, k, d, 0) };
    for p in 0..TF32_STAGES - 1 {
        if p < steps {
            unsafe {
                stage_chunk(
                    t,
                    vec,
                    &mut cursor,
                    centroids,
                    c_sq_norms,
                    tile_maxima,
                    k,
                    d,
                    pt * TF32_CENTROIDS,
                    pk * TF32_CHUNK_DIMS,
                    pk == chunks - 1,
                    cs_addr + (4 * p * TF32_STAGE_WORDS) as u32,
                    cs.add(p * TF32_STAGE_WORDS),
                )
            };
            pk += 1;
            if pk == chunks {
                (pt, pk) = (pt + 1, 0);
                cursor = unsafe { ChunkCursor::at_tile(t, centroids, k, d, pt) };
            }
        }
        commit();
    }
    unsafe { stage_points(t, vec, x, n, d, first_point, 0, dp, xs) };

    let mut acc = [[[0f32; 4]; 8]; 2];
    // (tile, chunk) of step s.
    let (mut tile, mut kc) = (0, 0);
    let mut s = 0;
    while s < steps {
        // This step's chunk (and at s = 0 the point tile) has landed for this thread's copies;
        // the barrier makes everyone's visible and frees the buffer of step s − 1.
        wait_group::<{ TF32_STAGES - 2 }>();
        e.sync();
        let j0 = kc * TF32_CHUNK_DIMS;
        if !resident && s > 0 && j0 % TF32_POINT_DIMS == 0 {
            // This step reads another slice of the dimensions: restage the points.
            unsafe { stage_points(t, vec, x, n, d, first_point, j0, dp, xs) };
            e.sync();
        }
        // The chunk TF32_STAGES − 1 steps ahead lands while this one is multiplied.
        let ahead = s + TF32_STAGES - 1;
        if ahead < steps {
            unsafe {
                stage_chunk(
                    t,
                    vec,
                    &mut cursor,
                    centroids,
                    c_sq_norms,
                    tile_maxima,
                    k,
                    d,
                    pt * TF32_CENTROIDS,
                    pk * TF32_CHUNK_DIMS,
                    pk == chunks - 1,
                    cs_addr + (4 * (ahead % TF32_STAGES) * TF32_STAGE_WORDS) as u32,
                    cs.add((ahead % TF32_STAGES) * TF32_STAGE_WORDS),
                )
            };
            pk += 1;
            if pk == chunks {
                (pt, pk) = (pt + 1, 0);
                cursor = unsafe { ChunkCursor::at_tile(t, centroids, k, d, pt) };
            }
        }
        commit();

        let buf = unsafe { cs.add((s % TF32_STAGES) * TF32_STAGE_WORDS) };
        // Column of this chunk inside the staged point tile.
        let xcol = j0 % TF32_POINT_DIMS;
        // The k slots of the mma are a relabelling of the chunk's 16 dimensions (the same for
        // points and centroids, so the products pair up): slot (step kk, lane column q, half h)
        // holds dimension q·4 + kk·2 + h. A lane's 4 centroid values of a row are then
        // contiguous and load as one 16-byte vector (its two B fragments), and the point tile
        // interleaves rows g and g + 8 of each 16-row group so that one 16-byte load is exactly
        // an A fragment; both conflict-free. Centroids go in as raw f32 bits (the tensor cores
        // read the TF32 bits, i.e. truncate); points were rounded (`cvt.rna`) when staged.
        let mut af = [[[0u32; 4]; 2]; 2];
        for (mt, af) in af.iter_mut().enumerate() {
            let pair = (wm * 2 + mt) * 8 + g;
            for (kk, af) in af.iter_mut().enumerate() {
                *af = unsafe { load4(xs.add(pair * TF32_X_STRIDE + 2 * (xcol + q * 4) + 4 * kk)) };
            }
        }
        for nt in 0..8 {
            let c = wn * 64 + nt * 8 + g;
            let b = unsafe { load4(buf.add(c * TF32_C_STRIDE + q * 4)) };
            for kk in 0..2 {
                for mt in 0..2 {
                    e.mma_tf32(&mut acc[mt][nt], af[mt][kk], [b[2 * kk], b[2 * kk + 1]]);
                }
            }
        }
        if kc == chunks - 1 {
            // The tile is done: insert its centroids' lower bounds `T − Ē` into this thread's
            // four shortlists. The tile's squared norms (`+∞` past k) and maxima came with this
            // chunk.
            let tile_norms = unsafe { buf.add(TF32_CENTROIDS * TF32_C_STRIDE) }.cast::<f32>();
            let maxima = unsafe { tile_norms.add(TF32_CENTROIDS) };
            let [c_max, q_max, nc_max] = [0, 1, 2].map(|w| unsafe { *maxima.add(w) });
            let mut bounds = [0f32; 4];
            for (r, bound) in bounds.iter_mut().enumerate() {
                let row = wm * 32 + (r / 2) * 16 + (r % 2) * 8 + g;
                let (p, x_sum) = unsafe { (*row_p.add(row), *row_x_sum.add(row)) };
                *bound = tile_bound(p, x_sum, c_max, q_max, nc_max);
                trusted[r] &= *bound < f32::INFINITY;
            }
            let local = wn * 64 + 2 * q;
            for nt in 0..8 {
                for h in 0..2 {
                    let c = tile * TF32_CENTROIDS + local + nt * 8 + h;
                    let c_sq = unsafe { *tile_norms.add(local + nt * 8 + h) };
                    for mt in 0..2 {
                        for half in 0..2 {
                            let r = mt * 2 + half;
                            let lower = l2_score(acc[mt][nt][half * 2 + h], c_sq) - bounds[r];
                            lists[r].insert(lower, c as u32);
                        }
                    }
                }
            }
            acc = [[[0f32; 4]; 8]; 2];
            (tile, kc) = (tile + 1, 0);
        } else {
            kc += 1;
        }
        s += 1;
    }
    // Only empty groups can be pending; the barrier frees the point tile for the merge.
    wait_all();
    e.sync();

    // Merge the four lanes of a point row (they saw different centroids), then the two warp
    // columns through shared memory (the point tile is free now).
    // (Four calls with constant indices: a loop over the rows keeps `lists` in local memory.)
    let [l0, l1, l2, l3] = &mut lists;
    merge_row(e, l0, trusted[0]);
    merge_row(e, l1, trusted[1]);
    merge_row(e, l2, trusted[2]);
    merge_row(e, l3, trusted[3]);
    let slot = |r: usize| (wm * 32 + (r / 2) * 16 + (r % 2) * 8 + g) * 2 + wn;
    unsafe { finish::<2, 4, _>(e, &a, first_point, xs, &lists, slot, q == 0) };
}

/// The end of both TF32 kernels, after the sweep: each point's shortlists (`COLUMNS` of them,
/// from the warps that swept different centroids; this thread's `lists`, published where
/// `publish`, list `r` at slot `slot(r)` = point · `COLUMNS` + column) merged, the exact
/// re-check, then labels, distances and the block's totals. Reuses the point tile `xs`.
///
/// # Safety
/// As the kernels': every thread of the block calls it, after a barrier that ends the sweep.
#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
#[allow(clippy::manual_is_multiple_of)]
#[inline(always)]
unsafe fn finish<const COLUMNS: usize, const R: usize, E: Exec>(
    e: E,
    a: &Tf32AssignArgs,
    first_point: usize,
    xs: *mut u32,
    lists: &[Shortlist; R],
    slot: impl Fn(usize) -> usize,
    publish: bool,
) {
    let Tf32AssignArgs {
        x,
        x_sq_norms,
        n,
        d,
        centroids,
        c_sq_norms,
        labels,
        min_dist,
        changed,
        block_inertia,
        inertia_scale,
        weights,
        flagged,
        ..
    } = *a;
    let t = e.thread();
    // Per (point, column): the three lower bounds (and a word unused), then two centroids.
    let merge_bounds = xs.cast::<f32>();
    let merge_index = unsafe { xs.add(TF32_POINTS * 8) };
    let scratch = unsafe { xs.add(TF32_POINTS * 12) }.cast::<f64>();
    if publish {
        for (r, list) in lists.iter().enumerate() {
            let at = slot(r);
            unsafe {
                for e in 0..3 {
                    *merge_bounds.add(at * 4 + e) = list.lower[e];
                }
                *merge_index.add(at * 2) = list.index[0];
                *merge_index.add(at * 2 + 1) = list.index[1];
            }
        }
    }
    e.sync();

    // Exact re-check, two threads per point: the two shortlisted centroids, one each; the
    // pair's better as the exact path ranks them. A point whose shortlist may miss the winner is
    // queued for `kmeans_assign_l2_full_pass` ([`full_pass`]), which scores every centroid for
    // it and writes its label, distance and totals (scored here, it would hold the block).
    let (p, which) = (t / 2, t % 2);
    let i = first_point + p;
    let mut list = Shortlist::EMPTY;
    for column in 0..COLUMNS {
        let at = p * COLUMNS + column;
        let mut part = Shortlist::EMPTY;
        unsafe {
            for e in 0..3 {
                part.lower[e] = *merge_bounds.add(at * 4 + e);
            }
            part.index = [*merge_index.add(at * 2), *merge_index.add(at * 2 + 1)];
        }
        list.merge(part);
    }
    let (mut best, mut label) = (f32::INFINITY, u32::MAX);
    // (A select, not an index: a variable index puts the array on the stack.)
    let cand = if which == 0 {
        list.index[0]
    } else {
        list.index[1]
    };
    if i < n && cand != u32::MAX {
        let c = cand as usize;
        let dot = unsafe { exact_dot(x.add(i * d), centroids.add(c * d), d) };
        (best, label) = (l2_score(dot, unsafe { *c_sq_norms.add(c) }), cand);
    }
    let (other_best, other) = (shfl_xor_f32(e, best, 1), e.shfl_xor_u32(label, 1));
    if better(other_best, other, best, label) {
        (best, label) = (other_best, other);
    }
    let queued = which == 0 && i < n && list.needs_full_pass(best);
    if queued {
        unsafe {
            let at = atomic_fetch_add_u32(flagged, 1) as usize;
            *flagged.add(full_pass::FLAGGED_HEADER + at) = i as u32;
        }
    }
    let mut moved = 0.0;
    let mut dist_sum = 0i64;
    if which == 0 && i < n && !queued {
        let dist;
        (label, dist) = settle(best, label, unsafe { *x_sq_norms.add(i) });
        let units = unsafe { units_at(weights, i) };
        unsafe {
            if *labels.add(i) != label && units != 0 {
                moved = 1.0;
            }
            *labels.add(i) = label;
            *min_dist.add(i) = dist;
        }
        dist_sum = inertia_term(dist, inertia_scale, units);
    }
    if !changed.is_null() {
        let total = unsafe { block_sum_f64(e, e.block_dim(), scratch, moved) };
        if t == 0 && total > 0.0 {
            unsafe { atomic_add_u32(changed, total as u32) };
        }
    }
    if !block_inertia.is_null() {
        let total =
            unsafe { block_sum_i64(e, e.block_dim(), scratch.add(BLOCK as usize), dist_sum) };
        if t == 0 {
            unsafe { *block_inertia.add(e.block()) = total };
        }
    }
}

/// Each point's error-bound terms ([`RowTerms::point`]: `p` at `terms[row]`, `X + R_x` at
/// `terms[TF32_POINTS + row]`; zeros past `n`), two threads a point row.
///
/// # Safety
/// `x` holds `n × d` values; `terms` is `2 · TF32_POINTS` words of shared memory.
#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
#[inline(always)]
unsafe fn stage_row_terms<E: Exec>(
    e: E,
    x: *const f32,
    n: usize,
    d: usize,
    first_point: usize,
    terms: *mut f32,
) {
    let t = e.thread();

    // Two threads a point row, each a part of its dimensions (the first `split`, a multiple
    // of 4 so the second part stays 16-byte aligned, and the rest); then the pair's sums.
    let (row, half) = (t / 2, t % 2);
    let i = first_point + row;
    let split = d / 8 * 4;
    let (from, len) = if half == 0 {
        (0, split)
    } else {
        (split, d - split)
    };
    let part = if i < n {
        unsafe { RowTerms::read(x.add(i * d + from), len, true) }
    } else {
        RowTerms::default()
    };
    unsafe { publish_row_terms(e, part, d, row, half, terms) };
}

/// Adds the two halves' terms of point `row` (lanes `2·row + half`, adjacent) and writes its
/// `p` and `X + R_x` to `terms` from the first half.
///
/// # Safety
/// `terms` is `2 · TF32_POINTS` words of shared memory; both lanes of the pair call it.
#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
#[inline(always)]
unsafe fn publish_row_terms<E: Exec>(
    e: E,
    part: RowTerms,
    d: usize,
    row: usize,
    half: usize,
    terms: *mut f32,
) {
    let sums = part.plus(part.map(|v| f64::from_bits(shfl_xor_u64(e, v.to_bits(), 1))));
    if half == 0 {
        let (p, x_sum) = sums.point(d, product_coefficient(d));
        unsafe {
            *terms.add(row) = p;
            *terms.add(TF32_POINTS + row) = x_sum;
        }
    }
}

/// A point's label and exact distance from the first minimum `(best, label)` of its scores:
/// centroid 0 where every score was +inf or NaN, as the CPU's first-minimum scan keeps it.
#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
#[inline(always)]
fn settle(best: f32, label: u32, x_sq_norm: f32) -> (u32, f32) {
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    let label = if !(best < f32::INFINITY) { 0 } else { label };
    (label, assign_distance(AssignMetric::SqL2, x_sq_norm, best))
}

/// The CPU's dot product: dimension order, one single-rounding FMA per dimension.
///
/// # Safety
/// `x` and `c` are valid for `d` values.
#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
#[allow(clippy::manual_is_multiple_of)]
#[inline(always)]
unsafe fn exact_dot(x: *const f32, c: *const f32, d: usize) -> f32 {
    #[repr(C, align(16))]
    #[derive(Clone, Copy)]
    struct V4([f32; 4]);
    let mut acc = 0.0;
    if d % 4 == 0 && (x as usize) % 16 == 0 && (c as usize) % 16 == 0 {
        let (xv, cv) = (x.cast::<V4>(), c.cast::<V4>());
        for h in 0..d / 4 {
            let (V4(a), V4(b)) = unsafe { (*xv.add(h), *cv.add(h)) };
            for j in 0..4 {
                acc = assign_step(AssignMetric::SqL2, acc, a[j], b[j]);
            }
        }
    } else {
        for j in 0..d {
            acc = assign_step(AssignMetric::SqL2, acc, unsafe { *x.add(j) }, unsafe {
                *c.add(j)
            });
        }
    }
    acc
}

/// A point row's shortlist after the sweep (untrusted unless `trusted`), merged over the four
/// lanes that share the row.
#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
#[inline(always)]
fn merge_row<E: Exec>(e: E, list: &mut Shortlist, trusted: bool) {
    if !trusted {
        *list = Shortlist::UNTRUSTED;
    }
    merge_lanes(e, list, 1);
    merge_lanes(e, list, 2);
}

/// Merges the shortlist of lane `lane ^ mask` (the same point row) into this lane's.
#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
#[inline(always)]
fn merge_lanes<E: Exec>(e: E, list: &mut Shortlist, mask: u32) {
    let other = Shortlist {
        lower: list.lower.map(|v| shfl_xor_f32(e, v, mask)),
        index: list.index.map(|v| e.shfl_xor_u32(v, mask)),
    };
    list.merge(other);
}

/// Stages dimensions `j0..j0 + min(TF32_POINT_DIMS, dp − j0)` of the block's points, rounded to TF32, into
/// the point tile `xs` (zeros past `n` and `d`): row `r` goes to pair row
/// `(r / 16)·8 + r % 8` (stride `TF32_X_STRIDE`) at word `2·j + (r / 8) % 2`, so that rows g and g + 8 of
/// each 16-row group alternate. Loads through registers (16 bytes at a time with `vec`).
///
/// # Safety
/// `x` holds `n × d` values (16-byte aligned rows with `vec`); `xs` is the point tile.
#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn stage_points(
    t: usize,
    vec: bool,
    x: *const f32,
    n: usize,
    d: usize,
    first: usize,
    j0: usize,
    dp: usize,
    xs: *mut u32,
) {
    #[repr(C, align(16))]
    #[derive(Clone, Copy)]
    struct V4([f32; 4]);
    let width = TF32_POINT_DIMS.min(dp - j0);
    let w = if vec { 4 } else { 1 };
    let per_row = width / w;
    let mut e = t;
    while e < TF32_POINTS * per_row {
        let (r, jj) = (e / per_row, (e % per_row) * w);
        let (row, col) = (first + r, j0 + jj);
        let ok = row < n && col < d;
        let at = ((r / 16) * 8 + r % 8) * TF32_X_STRIDE + 2 * jj + (r / 8) % 2;
        if vec {
            let V4(v) = if ok {
                unsafe { *x.add(row * d + col).cast::<V4>() }
            } else {
                V4([0.0; 4])
            };
            // By reference: an array iterated by value stays in local memory.
            for (i, v) in v.iter().enumerate() {
                unsafe { *xs.add(at + 2 * i) = to_tf32(*v) };
            }
        } else {
            let v = if ok {
                unsafe { *x.add(row * d + col) }
            } else {
                0.0
            };
            unsafe { *xs.add(at) = to_tf32(v) };
        }
        e += BLOCK as usize;
    }
}

/// Where a thread stages its two 16-byte pieces of each centroid chunk from (16-byte rows): rows
/// `t / 4` and `t / 4 + TF32_CENTROIDS / 2` of the tile, dimensions `4·(t % 4)..` of the chunk. Moved
/// along a tile a chunk at a time, so a step's copies cost a few additions.
#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
#[derive(Clone, Copy)]
struct ChunkCursor {
    /// The two pieces' sources (past `k`: not read).
    src: [*const f32; 2],
    /// Whether each piece's row is below `k`.
    live: [bool; 2],
    /// The pieces' first dimension.
    col: usize,
}

#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
const _: () = assert!(
    TF32_CENTROIDS * TF32_CHUNK_DIMS == 2 * 4 * BLOCK as usize,
    "two 16-byte pieces of a chunk a thread"
);

#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
impl ChunkCursor {
    /// Thread `t`'s pieces of the first chunk of centroid tile `tile` (`k × d` centroids at `c`).
    ///
    /// # Safety
    /// `c` holds `k × d` values.
    #[inline(always)]
    unsafe fn at_tile(t: usize, c: *const f32, k: usize, d: usize, tile: usize) -> ChunkCursor {
        let col = 4 * (t % 4);
        let rows = [0, 1].map(|m| tile * TF32_CENTROIDS + t / 4 + m * TF32_CENTROIDS / 2);
        let live = rows.map(|r| r < k);
        ChunkCursor {
            src: [0, 1].map(|m| {
                if live[m] {
                    unsafe { c.add(rows[m] * d + col) }
                } else {
                    c
                }
            }),
            live,
            col,
        }
    }

    /// Starts this thread's copies of the chunk into the stage at shared address `buf` (zeros
    /// past `k` and `d`; `c` is a readable fallback address), then moves to the next chunk.
    ///
    /// # Safety
    /// As [`stage_chunk`]'s, with 16-byte aligned rows.
    #[inline(always)]
    unsafe fn stage(&mut self, t: usize, d: usize, c: *const f32, buf: u32) {
        let in_d = self.col < d;
        let at = buf + 4 * ((t / 4) * TF32_C_STRIDE + 4 * (t % 4)) as u32;
        for m in 0..2 {
            let ok = in_d & self.live[m];
            let dst = at + (4 * m * TF32_CENTROIDS / 2 * TF32_C_STRIDE) as u32;
            unsafe {
                copy_16(
                    dst,
                    if ok { self.src[m] } else { c },
                    if ok { 16 } else { 0 },
                )
            };
            self.src[m] = self.src[m].wrapping_add(TF32_CHUNK_DIMS);
        }
        self.col += TF32_CHUNK_DIMS;
    }
}

/// Starts copying centroids `first..first + TF32_CENTROIDS`, dimensions `j0..j0 + TF32_CHUNK_DIMS` into the centroid
/// stage at shared address `buf` (row-major, stride `TF32_C_STRIDE`; `stage` points at it; with `vec` through
/// `cursor`, which is at this chunk and moves to the next), zeros past `k` and `d`; with
/// `norms`, also their squared norms (`+∞` past `k`, stored at once) and the tile's maxima after the chunk. Commits
/// nothing.
///
/// # Safety
/// `c` holds `k × d` values (16-byte aligned rows with `vec`), `c_sq_norms` `k`, `tile_maxima`
/// [`bound::TILE_MAXIMA_WORDS`] per tile; `buf` and `stage` are a centroid stage that no thread
/// reads until the next barrier.
#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn stage_chunk(
    t: usize,
    vec: bool,
    cursor: &mut ChunkCursor,
    c: *const f32,
    c_sq_norms: *const f32,
    tile_maxima: *const f32,
    k: usize,
    d: usize,
    first: usize,
    j0: usize,
    norms: bool,
    buf: u32,
    stage: *mut u32,
) {
    if vec {
        unsafe { cursor.stage(t, d, c, buf) };
    } else {
        unsafe {
            copy_rows::<TF32_CENTROIDS, TF32_CHUNK_DIMS, TF32_C_STRIDE, { BLOCK as usize }>(
                t, vec, c, k, d, first, j0, buf,
            )
        };
    }
    // Word w after the chunk: the squared norms of the tile's centroids, then its maxima.
    let w = t;
    if norms && w < TF32_CENTROIDS + TILE_MAXIMA_WORDS {
        let at = TF32_CENTROIDS * TF32_C_STRIDE + w;
        if w >= TF32_CENTROIDS {
            let src = unsafe {
                tile_maxima.add(first / TF32_CENTROIDS * TILE_MAXIMA_WORDS + w - TF32_CENTROIDS)
            };
            unsafe { copy_4(buf + 4 * at as u32, src, 4) };
        } else if first + w < k {
            unsafe { copy_4(buf + 4 * at as u32, c_sq_norms.add(first + w), 4) };
        } else {
            unsafe { *stage.add(at) = f32::INFINITY.to_bits() };
        }
    }
}

pub mod bound;
#[cfg(test)]
mod emulated;
pub mod full_pass;
pub mod shortlist;
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
mod sweep_wgmma;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assign::ASSIGN_WIDE;
    use crate::launch::BLOCK;

    #[test]
    fn tf32_tile_fits() {
        // Two blocks per multiprocessor on sm_80 / sm_90 (164 / 228 KiB per SM).
        assert!(2 * (tf32_shared_bytes() + 1024) <= 228 * 1024);
        // The point tile is reused for the merge (128 points × 2 warp columns × (4 bounds, 2
        // centroids)) and the reduction scratch (2 f64 per thread).
        assert!(
            TF32_POINTS * 2 * 6 * 4 + 2 * BLOCK as usize * 8 <= TF32_POINTS / 2 * TF32_X_STRIDE * 4
        );
        assert_eq!(TF32_X_STRIDE % 32, 4);
        assert_eq!(TF32_C_STRIDE % 32, 16);
        assert_eq!(
            TF32_CHUNK_DIMS, 16,
            "one 16-byte fragment load per row and chunk"
        );
        assert_eq!(TF32_POINT_DIMS % TF32_CHUNK_DIMS, 0);
        assert_eq!(
            TF32_POINTS,
            ASSIGN_WIDE.points(),
            "same inertia partials as the exact kernel"
        );
        // The warpgroup kernel: two blocks at d = 128; the narrowest point slice holds the
        // merge and scratch; slices are whole chunks and whole swizzle atoms.
        assert!(2 * (wg_shared_bytes(128) + 1024) <= 228 * 1024);
        assert!(
            TF32_POINTS * 2 * 6 * 4 + 2 * BLOCK as usize * 8 <= TF32_POINTS * wg_point_dims(1) * 4
        );
        for d in [1, 4, 32, 100, 128] {
            assert_eq!(wg_point_dims(d) % SCAN_CHUNK_DIMS, 0);
            assert!(wg_point_dims(d) <= TF32_POINT_DIMS);
            assert_eq!(
                TF32_POINTS * wg_point_dims(d) * 4 % 1024,
                0,
                "the ring's atoms aligned"
            );
        }
    }
}
