//! Reduced-precision squared-L2 assignment on tensor cores (sm_80 and later), re-checked exactly.
//!
//! Same arguments and outputs as `kmeans_assign_l2_wide`. A block owns `TF32_POINTS` points and
//! sweeps the centroids in tiles of `TF32_CENTROIDS`; point rows (rounded to TF32 with
//! `cvt.rna` once staged) and centroid chunks (raw f32, which the tensor cores truncate to TF32,
//! streamed through a `TF32_STAGES`-deep `cp.async` ring with one barrier per chunk) are
//! zero-padded past `n`, `k` and `d` and multiplied with `mma.sync.m16n8k8` (FP32 accumulation). Every point keeps its two best
//! approximate candidates `‖c‖² − 2·x·c` (ties by lower index); then both are re-scored exactly
//! as the CPU does — a dimension-ordered chain of single-rounding FMAs on the unrounded rows —
//! and the better wins. Labels therefore equal the exact ones unless the true nearest centroid
//! is not among the two best TF32 candidates, and every distance is the exact FP32 distance to
//! the chosen centroid.
//!
//! The kernel body `run` goes prologue, sweep, merge, re-check (see its comment).

use crate::launch::Kernel;
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
use crate::{
    cp_async::{commit, copy_4, copy_rows, shared_addr, wait_all, wait_group},
    fixed::{inertia_term, units_at},
    gpu::{self, atomic_add_u32, block_sum_f64, block_sum_i64, shared, sync_threads},
    launch::BLOCK,
    math::{AssignMetric, assign_distance, assign_step, better, l2_score},
    mma::{load4, mma, shfl_xor_u32, to_tf32},
};

/// The `kmeans_assign_l2_tf32` entry point (built for sm_80 only). CPU twin:
/// `backend::cpu::kmeans::nearest`.
pub const KMEANS_ASSIGN_L2_TF32: Kernel = Kernel::sm80("kmeans_assign_l2_tf32", 13).min_blocks(2);

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
/// Words of one centroid stage: the chunk, then the squared norms of its tile's centroids
/// (staged with the tile's last chunk, whose step ranks the tile).
pub const TF32_STAGE_WORDS: usize = TF32_CENTROIDS * TF32_C_STRIDE + TF32_CENTROIDS;

/// Dynamic shared memory of one block of the TF32 assign kernel, in bytes: the point tile (after
/// the sweep it holds the candidate merge and the reduction scratch) and the centroid stages.
pub const fn tf32_shared_bytes() -> usize {
    (TF32_POINTS / 2 * TF32_X_STRIDE + TF32_STAGES * TF32_STAGE_WORDS) * 4
}

/// Blocks of `kmeans_assign_l2_tf32` for `n` points.
pub const fn tf32_grid(n: usize) -> usize {
    n.div_ceil(TF32_POINTS)
}

/// Labels each of the `n` points of `x` (row-major, `d` columns) with its nearest of the `k`
/// centroids (TF32 candidates, exact FP32 re-check) and writes its exact distance. `weights`
/// (null: one unit each) holds every point's integer units. With `changed` non-null, adds the
/// number of labels of points with weight that differ from what `labels` held; with
/// `block_inertia` non-null, writes each block's fixed-point inertia `Σ units · round(dist ·
/// inertia_scale)` at its index.
///
/// # Safety
/// Pointers valid for those sizes; `BLOCK` threads, [`tf32_grid`]`(n)` blocks and
/// [`tf32_shared_bytes`]`()` of dynamic shared memory.
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
#[unsafe(no_mangle)]
pub unsafe extern "gpu-kernel" fn kmeans_assign_l2_tf32(
    x: *const f32,
    x_sq_norms: *const f32,
    n: u32,
    d: u32,
    centroids: *const f32,
    c_sq_norms: *const f32,
    k: u32,
    labels: *mut u32,
    min_dist: *mut f32,
    changed: *mut u32,
    block_inertia: *mut i64,
    inertia_scale: f32,
    weights: *const f32,
) {
    let (n, d, k) = (n as usize, (d as usize).max(1), k as usize);
    let a = Tf32AssignArgs {
        x,
        x_sq_norms,
        n,
        d,
        centroids,
        c_sq_norms,
        k,
        labels,
        min_dist,
        changed,
        block_inertia,
        inertia_scale,
        weights,
    };
    // Rows of `x` and `centroids` start 16-byte aligned when d is a multiple of 4: stage in
    // 16-byte copies then, else one word at a time (two specialisations, so neither keeps the
    // other's addresses live).
    if d % 4 == 0 {
        unsafe { run::<true>(a) }
    } else {
        unsafe { run::<false>(a) }
    }
}

/// Arguments of [`kmeans_assign_l2_tf32`].
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
#[derive(Clone, Copy)]
struct Tf32AssignArgs {
    x: *const f32,
    x_sq_norms: *const f32,
    n: usize,
    d: usize,
    centroids: *const f32,
    c_sq_norms: *const f32,
    k: usize,
    labels: *mut u32,
    min_dist: *mut f32,
    changed: *mut u32,
    block_inertia: *mut i64,
    inertia_scale: f32,
    weights: *const f32,
}

/// The kernel body, in four steps: the prologue (the first `TF32_STAGES − 1` centroid chunks in
/// flight, the point tile staged), the sweep (one `mma` step per centroid chunk, each finished
/// tile ranked into every row's best two), the merge of the candidates of the lanes and warp
/// columns that share a point, and the exact re-check (labels, distances, block totals).
///
/// Kept whole at ~270 lines: its steps share a dozen registers of state (the prefetch cursor,
/// the accumulators, the best two per row), and splitting them into `#[inline(always)]`
/// functions (tried, see the history of this file) reorders instructions and inverts the sweep
/// loop's latch in the PTX of `kmeans_assign_l2_tf32`. The helpers below (`stage_points`,
/// `stage_chunk`, `merge_lanes`, `insert`, `exact_dot`) are its leaf steps.
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
#[inline(always)]
unsafe fn run<const VEC: bool>(a: Tf32AssignArgs) {
    let Tf32AssignArgs {
        x,
        x_sq_norms,
        n,
        d,
        centroids,
        c_sq_norms,
        k,
        labels,
        min_dist,
        changed,
        block_inertia,
        inertia_scale,
        weights,
    } = a;
    let vec = VEC;
    let t = gpu::thread();
    let (warp, lane) = (t / 32, t % 32);
    let (g, q) = (lane / 4, lane % 4);
    // Warp (wm, wn) covers points wm·32.. and centroids wn·64.. of the block's tiles.
    let (wm, wn) = (warp % 4, warp / 4);
    let first_point = gpu::block() * TF32_POINTS;

    let xs = shared::<u32>();
    let cs = unsafe { xs.add(TF32_POINTS / 2 * TF32_X_STRIDE) };

    let dp = d.next_multiple_of(TF32_CHUNK_DIMS);
    let chunks = dp / TF32_CHUNK_DIMS; // centroid chunks per tile
    let resident = dp <= TF32_POINT_DIMS; // the point tile holds every dimension
    let tiles = k.div_ceil(TF32_CENTROIDS);
    let steps = tiles * chunks;

    let mut s1 = [f32::INFINITY; 4];
    let mut i1 = [u32::MAX; 4];
    let mut s2 = [f32::INFINITY; 4];
    let mut i2 = [u32::MAX; 4];

    let cs_addr = shared_addr(cs);
    // Prologue: the first TF32_STAGES − 1 centroid chunks, one group each (empty groups past the
    // last step keep the group count per step uniform), then the point tile through registers.
    // (tile, chunk) of the next step to prefetch.
    let (mut pt, mut pk) = (0, 0);
    for p in 0..TF32_STAGES - 1 {
        if p < steps {
            unsafe {
                stage_chunk(
                    t,
                    vec,
                    centroids,
                    c_sq_norms,
                    k,
                    d,
                    pt * TF32_CENTROIDS,
                    pk * TF32_CHUNK_DIMS,
                    pk == chunks - 1,
                    cs_addr + (4 * p * TF32_STAGE_WORDS) as u32,
                )
            };
            pk += 1;
            if pk == chunks {
                (pt, pk) = (pt + 1, 0);
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
        sync_threads();
        let j0 = kc * TF32_CHUNK_DIMS;
        if !resident && s > 0 && j0 % TF32_POINT_DIMS == 0 {
            // This step reads another slice of the dimensions: restage the points.
            unsafe { stage_points(t, vec, x, n, d, first_point, j0, dp, xs) };
            sync_threads();
        }
        // The chunk TF32_STAGES − 1 steps ahead lands while this one is multiplied.
        let ahead = s + TF32_STAGES - 1;
        if ahead < steps {
            unsafe {
                stage_chunk(
                    t,
                    vec,
                    centroids,
                    c_sq_norms,
                    k,
                    d,
                    pt * TF32_CENTROIDS,
                    pk * TF32_CHUNK_DIMS,
                    pk == chunks - 1,
                    cs_addr + (4 * (ahead % TF32_STAGES) * TF32_STAGE_WORDS) as u32,
                )
            };
            pk += 1;
            if pk == chunks {
                (pt, pk) = (pt + 1, 0);
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
                    mma(&mut acc[mt][nt], af[mt][kk], [b[2 * kk], b[2 * kk + 1]]);
                }
            }
        }
        if kc == chunks - 1 {
            // The tile is done: rank its centroids for this thread's four point rows. A thread
            // sees each row's centroids in increasing index order, so a strict `<` keeps the
            // lower index on ties. The tile's norms came with this chunk.
            let local = wn * 64 + 2 * q;
            let tile_norms = unsafe { buf.add(TF32_CENTROIDS * TF32_C_STRIDE) }.cast::<f32>();
            for nt in 0..8 {
                for h in 0..2 {
                    let c = tile * TF32_CENTROIDS + local + nt * 8 + h;
                    let valid = c < k;
                    let c_sq = unsafe { *tile_norms.add(local + nt * 8 + h) };
                    for mt in 0..2 {
                        for half in 0..2 {
                            let r = mt * 2 + half;
                            let score = l2_score(acc[mt][nt][half * 2 + h], c_sq);
                            // Branch-free: selects only.
                            let lt1 = valid & (score < s1[r]);
                            let lt2 = valid & (score < s2[r]);
                            let c = c as u32;
                            s2[r] = if lt1 {
                                s1[r]
                            } else if lt2 {
                                score
                            } else {
                                s2[r]
                            };
                            i2[r] = if lt1 {
                                i1[r]
                            } else if lt2 {
                                c
                            } else {
                                i2[r]
                            };
                            s1[r] = if lt1 { score } else { s1[r] };
                            i1[r] = if lt1 { c } else { i1[r] };
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
    sync_threads();

    // Merge the four lanes of a point row (they saw different centroids), then the two warp
    // columns through shared memory (the point tile is free now).
    for r in 0..4 {
        merge_lanes(&mut s1[r], &mut i1[r], &mut s2[r], &mut i2[r], 1);
        merge_lanes(&mut s1[r], &mut i1[r], &mut s2[r], &mut i2[r], 2);
    }
    let merge_score = xs.cast::<f32>();
    let merge_index = unsafe { xs.add(TF32_POINTS * 4) };
    let scratch = unsafe { xs.add(TF32_POINTS * 8) }.cast::<f64>();
    if q == 0 {
        for r in 0..4 {
            let p = wm * 32 + (r / 2) * 16 + (r % 2) * 8 + g;
            let at = p * 4 + wn * 2;
            unsafe {
                *merge_score.add(at) = s1[r];
                *merge_index.add(at) = i1[r];
                *merge_score.add(at + 1) = s2[r];
                *merge_index.add(at + 1) = i2[r];
            }
        }
    }
    sync_threads();

    // Exact re-check: two threads per point, one candidate each.
    let (p, which) = (t / 2, t % 2);
    let i = first_point + p;
    let (mut b1, mut j1, mut b2, mut j2) = (f32::INFINITY, u32::MAX, f32::INFINITY, u32::MAX);
    for e in 0..4 {
        let (sc, ix) = unsafe { (*merge_score.add(p * 4 + e), *merge_index.add(p * 4 + e)) };
        insert(&mut b1, &mut j1, &mut b2, &mut j2, sc, ix);
    }
    let cand = if which == 0 { j1 } else { j2 };
    let mut score = f32::INFINITY;
    if i < n && cand != u32::MAX {
        let c = cand as usize;
        let dot = unsafe { exact_dot(x.add(i * d), centroids.add(c * d), d) };
        score = l2_score(dot, unsafe { *c_sq_norms.add(c) });
    }
    let (other_score, other) = (shfl_xor_f32(score, 1), shfl_xor_u32(cand, 1));
    let (mut best, mut label) = (
        score,
        if score == f32::INFINITY {
            u32::MAX
        } else {
            cand
        },
    );
    let other = if other_score == f32::INFINITY {
        u32::MAX
    } else {
        other
    };
    if better(other_score, other, best, label) {
        best = other_score;
        label = other;
    }
    let mut moved = 0.0;
    let mut dist_sum = 0i64;
    if which == 0 && i < n {
        if label == u32::MAX {
            // Every score was +inf (or NaN): the CPU's first-minimum scan keeps centroid 0.
            label = 0;
        }
        let dist = assign_distance(AssignMetric::SqL2, unsafe { *x_sq_norms.add(i) }, best);
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
        let total = unsafe { block_sum_f64(scratch, moved) };
        if t == 0 && total > 0.0 {
            unsafe { atomic_add_u32(changed, total as u32) };
        }
    }
    if !block_inertia.is_null() {
        let total = unsafe { block_sum_i64(scratch.add(BLOCK as usize), dist_sum) };
        if t == 0 {
            unsafe { *block_inertia.add(gpu::block()) = total };
        }
    }
}

/// Puts `(score, index)` into the sorted pair `(s1, i1) ≤ (s2, i2)` if it beats either.
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
#[inline(always)]
fn insert(s1: &mut f32, i1: &mut u32, s2: &mut f32, i2: &mut u32, score: f32, index: u32) {
    if better(score, index, *s1, *i1) {
        *s2 = *s1;
        *i2 = *i1;
        *s1 = score;
        *i1 = index;
    } else if better(score, index, *s2, *i2) {
        *s2 = score;
        *i2 = index;
    }
}

/// The CPU's dot product: dimension order, one single-rounding FMA per dimension.
///
/// # Safety
/// `x` and `c` are valid for `d` values.
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
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

/// Merges the sorted candidate pair of lane `lane ^ mask` into this lane's.
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
#[inline(always)]
fn merge_lanes(s1: &mut f32, i1: &mut u32, s2: &mut f32, i2: &mut u32, mask: u32) {
    let (ps1, pi1) = (shfl_xor_f32(*s1, mask), shfl_xor_u32(*i1, mask));
    let (ps2, pi2) = (shfl_xor_f32(*s2, mask), shfl_xor_u32(*i2, mask));
    insert(s1, i1, s2, i2, ps1, pi1);
    insert(s1, i1, s2, i2, ps2, pi2);
}

/// Stages dimensions `j0..j0 + min(TF32_POINT_DIMS, dp − j0)` of the block's points, rounded to TF32, into
/// the point tile `xs` (zeros past `n` and `d`): row `r` goes to pair row
/// `(r / 16)·8 + r % 8` (stride `TF32_X_STRIDE`) at word `2·j + (r / 8) % 2`, so that rows g and g + 8 of
/// each 16-row group alternate. Loads through registers (16 bytes at a time with `vec`).
///
/// # Safety
/// `x` holds `n × d` values (16-byte aligned rows with `vec`); `xs` is the point tile.
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
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
            for (i, v) in v.into_iter().enumerate() {
                unsafe { *xs.add(at + 2 * i) = to_tf32(v) };
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

/// Starts copying centroids `first..first + TF32_CENTROIDS`, dimensions `j0..j0 + TF32_CHUNK_DIMS` into the centroid
/// stage at shared address `buf` (row-major, stride `TF32_C_STRIDE`), zeros past `k` and `d`; with
/// `norms`, also their squared norms after the chunk. Commits nothing.
///
/// # Safety
/// `c` holds `k × d` values (16-byte aligned rows with `vec`), `c_sq_norms` `k`; `buf` is a
/// centroid stage.
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn stage_chunk(
    t: usize,
    vec: bool,
    c: *const f32,
    c_sq_norms: *const f32,
    k: usize,
    d: usize,
    first: usize,
    j0: usize,
    norms: bool,
    buf: u32,
) {
    unsafe {
        copy_rows::<TF32_CENTROIDS, TF32_CHUNK_DIMS, TF32_C_STRIDE, { BLOCK as usize }>(
            t, vec, c, k, d, first, j0, buf,
        )
    };
    if norms && t < TF32_CENTROIDS {
        let ok = first + t < k;
        let src = if ok {
            unsafe { c_sq_norms.add(first + t) }
        } else {
            c_sq_norms
        };
        let dst = buf + 4 * (TF32_CENTROIDS * TF32_C_STRIDE + t) as u32;
        unsafe { copy_4(dst, src, if ok { 4 } else { 0 }) };
    }
}

/// See [`shfl_xor_u32`].
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
#[inline(always)]
fn shfl_xor_f32(v: f32, mask: u32) -> f32 {
    f32::from_bits(shfl_xor_u32(v.to_bits(), mask))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assign::ASSIGN_WIDE;
    use crate::launch::BLOCK;

    #[test]
    fn tf32_tile_fits() {
        // Two blocks per multiprocessor on sm_80 / sm_90 (164 / 228 KiB per SM).
        assert!(2 * (tf32_shared_bytes() + 1024) <= 228 * 1024);
        // The point tile is reused for the merge (128 points × 2 warp columns × 2 candidates ×
        // (score, index)) and the reduction scratch (2 f64 per thread).
        assert!(
            TF32_POINTS * 2 * 2 * 8 + 2 * BLOCK as usize * 8 <= TF32_POINTS / 2 * TF32_X_STRIDE * 4
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
    }
}
