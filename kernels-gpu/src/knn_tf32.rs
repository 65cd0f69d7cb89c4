//! Exact kNN for the L2 family through a TF32 tensor-core prefilter (sm_80 and later).
//!
//! The answer is the exact one — the same keys as the FP32 path and the CPU — because tensor
//! cores only decide which training rows are *worth* an exact distance:
//!
//! 1. `knn_tf32_scan` (mode [`SCAN_GROUPS`]): `A_ij = ‖q_i‖² + ‖x_j‖² − 2·dot_tf32(q_i, x_j)` with
//!    `mma.m16n8k8` on TF32-rounded queries and raw training rows (which the tensor cores read
//!    at TF32 precision); per query and per group of `g` training rows (16
//!    or 64) it writes the key ([`crate::knn::key`]) of the group's smallest `A`.
//! 2. The streaming selection (`knn_select_keys_*`) keeps the `k` smallest group keys per query:
//!    `k` distinct training rows.
//! 3. `knn_tf32_threshold`: their exact distances (the CPU's arithmetic), which replace the
//!    group keys; the largest is `T_i`, an upper bound on the exact k-th distance. It becomes a
//!    squared-distance threshold [`sq_threshold`].
//! 4. `knn_tf32_scan` (mode [`SCAN_CANDIDATES`]) recomputes the tiles and appends every `j`
//!    with `A_ij − E_ij ≤ T_sq` ([`may_be_near`]) to the query's candidate list, where `E_ij` is
//!    the rigorous bound [`error_bound`] on `|A_ij − D_ij|`. Where a query's row of `A` is small
//!    enough to keep, step 1 stores it and `knn_tf32_candidates` ([`candidates`]) reads it back
//!    instead of a second scan: the same test on the same floats, the same candidates.
//! 5. `knn_tf32_rerank`: exact keys of the candidates that step 3 has not computed already
//!    ([`row_set`]), and the `k` smallest of them and step 3's by the same k-min, bitonic or
//!    radix selection as the streaming path. A query with more than [`TF32_CAP`] candidates is flagged
//!    and searched by the exact path.
//!
//! Why nothing is lost: a row that is not a candidate has `D_ij ≥ A_ij − E_ij > T_sq`, so its
//! exact distance is larger than `T_i` (for Euclidean, `sqrt` is monotone and `T_sq` is the
//! largest float whose root is at most `T_i`) and `k` distinct rows (step 2's) are strictly
//! nearer: it cannot be among the k nearest. Those k rows are candidates themselves, so a query
//! has at least k.
//!
//! # The bound
//! Let `u = 2^-24`, `q, x ∈ R^d` the f32 rows, `nq = fl(‖q‖²)`, `nx = fl(‖x‖²)` the squared norms
//! both paths use (the same floats: one FMA chain each), `s = Σ|q_k·x_k| ≤ ‖q‖·‖x‖`.
//! * Exact path: `dot` is an FMA chain in dimension order, `|dot − q·x| ≤ γ_d·s` with
//!   `γ_d = d·u / (1 − d·u)`; then `D = fl(nq + fl(nx − 2·dot))` (clamped at 0, which only
//!   raises it) adds at most `2u·(nq + nx + 2·|dot|)`.
//! * TF32 path: `cvt.rna` rounds each query value with relative error ≤ 2^-11; training values
//!   go in as raw f32 bits, which the tensor cores read at TF32 precision — truncated (or
//!   rounded) to at least 10 mantissa bits, relative error < 2^-10 either way. Each product is
//!   then off by at most `(3·2^-11 + 2^-21)·|q_k·x_k|`; tensor-core products are exact and the
//!   FP32 accumulation (which may truncate instead of rounding, and align inside each k-step)
//!   adds at most `d·2u` relative to the running magnitudes: `|dot_tf32 − q·x| ≤ (3·2^-11 +
//!   2^-21 + 2·d·u·(1 + 2^-10))·s`. `A = fl(nq + fl(nx − 2·dot_tf32))` adds
//!   `2u·(nq + nx + 2·|dot_tf32|)`.
//! * Hence `|A − D| ≤ 2·(3·2^-11 + 2^-21 + 3·d·u)·s + 8u·(nq + nx)` (using `2|dot| ≤ nq + nx`
//!   up to the same small terms), plus `≤ 2^-100` per operation for subnormal results (tensor
//!   cores may flush them). `s ≤ ‖q‖·‖x‖ ≤ sqrt(nq)·sqrt(nx)·(1 + d·u)`.
//! * [`error_bound`] takes twice every term: `E = c1·sqrt(nq)·sqrt(nx) + 2^-19·(nq + nx) +
//!   2^-90` with `c1 = (3·2^-9 + 12·d·u)·(1 + d·2^-23)` ([`bound_coefficient`], rounded up;
//!   `3·2^-9` is twice `3·2^-10 + 2^-20`), and the margins also absorb the few roundings of
//!   evaluating `E` and `A − E` in f32. Non-finite
//!   values compare as "maybe near" (`!(L > T)`), so they end as candidates or as a fallback.
//!
//! The host tests check the bound against brute force with an emulated TF32 product
//! ([`tf32_round`] queries, truncated or rounded training values, truncating and rounding
//! accumulations in several orders), and `scan/emulated.rs` runs the scan and every step after
//! it in the emulator against the exact search.

use crate::knn::{PairMetric, SELECT_BLOCK, finish};
use crate::launch::Kernel;
use crate::math::fma;
use crate::math::sqrt;
use crate::params::DevPtr;

/// `mode` of `knn_tf32_scan`: per query and group, the key of the smallest approximate distance.
pub const SCAN_GROUPS: u32 = 0;
/// `mode` of `knn_tf32_scan`: append every training row that may be near to the candidates.
pub const SCAN_CANDIDATES: u32 = 1;

/// Queries per block tile of the scan (8 warps: 4 × 32 rows).
pub const TF32_ROWS: usize = 128;
/// Training rows per tile of the scan (2 warp columns × 64).
pub const TF32_COLS: usize = 128;
/// Dimensions per staged training chunk of the scan (the assign kernel's is [`crate::assign_tf32::TF32_CHUNK_DIMS`]).
pub const SCAN_CHUNK_DIMS: usize = 32;
/// Row stride (words) of a staged training chunk: ≡ 4 (mod 32), conflict-free fragment loads.
pub const SCAN_ROW_STRIDE: usize = SCAN_CHUNK_DIMS + 4;
/// Training chunks in flight in a scan block (`cp.async` pipeline depth).
pub const TF32_STAGES: usize = 4;
/// Threads of a scan block.
pub const TF32_BLOCK: u32 = 256;
/// Most candidates a query keeps for the exact re-rank (the selection's shared-memory keys).
pub const TF32_CAP: usize = crate::knn::SELECT_CAP;

/// Dimensions of the staged query tile for `d` dimensions when at most `xc_max` fit: all of
/// them (padded to `SCAN_CHUNK_DIMS`), else `xc_max` at a time.
pub const fn tf32_xc(d: usize, xc_max: usize) -> usize {
    let dp = d.div_ceil(SCAN_CHUNK_DIMS) * SCAN_CHUNK_DIMS;
    if dp < xc_max { dp } else { xc_max }
}

/// Dynamic shared memory of a scan block whose query tile holds `xc` dimensions, in bytes.
pub const fn tf32_scan_shared_bytes(xc: usize) -> usize {
    (TF32_ROWS * xc + TF32_STAGES * TF32_COLS * SCAN_ROW_STRIDE) * 4
}

/// Training chunks in the ring of sm_90a's `knn_tf32_scan_wg`.
pub const WG_STAGES: usize = 5;
/// Bytes of one of its staged chunks (`TF32_COLS` rows × `SCAN_CHUNK_DIMS`, no padding).
pub const WG_CHUNK_BYTES: usize = TF32_COLS * SCAN_CHUNK_DIMS * 4;

/// Dynamic shared memory of a `knn_tf32_scan_wg` block whose query tile holds `xc` dimensions.
pub const fn wg_scan_shared_bytes(xc: usize) -> usize {
    TF32_ROWS * xc * 4 + WG_STAGES * WG_CHUNK_BYTES
}

/// Words of one A fragment group of the staged query tile: 32 lanes × 4.
const FRAGMENT_WORDS: usize = 128;

/// First word of the `mma` A fragment that lane `lane` loads for 16-row tile `rt`, chunk `chunk`
/// of the query slice (`xc` dimensions), half `half` of the chunk and k step `kk`.
///
/// The query tile is stored in fragment order, so that this is one conflict-free 16-byte load
/// (a row-major tile needs four register moves per fragment). Word `w` of it is row
/// `16·rt + 8·(w % 2) + lane / 4` and dimension `32·chunk + 8·(lane % 4) + 4·half + 2·kk + w / 2`
/// of the slice: `[A[g][q], A[g + 8][q], A[g][q + 4], A[g + 8][q + 4]]` (see `mma`) with k slot
/// `q` ↔ dimension `… + 2·kk` and `q + 4` ↔ `… + 2·kk + 1`, as the training chunk's B fragments.
pub const fn query_fragment(
    rt: usize,
    chunk: usize,
    half: usize,
    kk: usize,
    lane: usize,
    xc: usize,
) -> usize {
    (((rt * (xc / SCAN_CHUNK_DIMS) + chunk) * 2 + half) * 2 + kk) * FRAGMENT_WORDS + lane * 4
}

/// The word of the staged query tile (see [`query_fragment`]) that holds row `row` of the tile
/// and dimension `dim` of the slice.
pub const fn query_word(row: usize, dim: usize, xc: usize) -> usize {
    let (rt, g, top) = (row / 16, row % 8, (row % 16) / 8);
    let (chunk, q, half) = (
        dim / SCAN_CHUNK_DIMS,
        (dim % SCAN_CHUNK_DIMS) / 8,
        (dim % 8) / 4,
    );
    let (kk, h) = ((dim % 4) / 2, dim % 2);
    query_fragment(rt, chunk, half, kk, g * 4 + q, xc) + top + 2 * h
}

/// The rounding of the tensor cores' operands, kept here for the bound's users.
pub use crate::math::tf32_round;

/// `c1` of [`error_bound`] for `d` dimensions, rounded up to f32.
pub fn bound_coefficient(d: usize) -> f32 {
    let u = 1.0 / 16_777_216.0; // 2^-24
    let c = (3.0 / 512.0 + 12.0 * d as f64 * u) * (1.0 + d as f64 * 2.0 * u);
    let f = c as f32;
    if (f as f64) < c {
        f32::from_bits(f.to_bits() + 1)
    } else {
        f
    }
}

/// Weight of the squared norms in [`error_bound`].
pub const BOUND_NORMS: f32 = 1.0 / 524_288.0; // 2^-19
/// Absolute term of [`error_bound`] (subnormal products and sums).
pub const BOUND_ABS: f32 = 8.077_936e-28; // 2^-90

/// `E`: a bound on `|A − D|` between the TF32 approximation `A` ([`approx_sq`]) and the exact
/// squared distance `D`, from `c1 · sqrt(nq)` ([`bound_coefficient`] times the query norm), the
/// training row's `sqrt(nx)` and both squared norms.
#[inline(always)]
pub fn error_bound(c1_q: f32, sqrt_nx: f32, nq: f32, nx: f32) -> f32 {
    fma(c1_q, sqrt_nx, fma(BOUND_NORMS, nq + nx, BOUND_ABS))
}

/// `A`: the approximate squared distance from the TF32 dot product (the exact path's formula,
/// unclamped).
#[inline(always)]
pub fn approx_sq(dot: f32, nq: f32, nx: f32) -> f32 {
    nq + fma(-2.0, dot, nx)
}

/// Whether a training row whose approximation is `approx` with bound `e` may be within the
/// squared threshold `t_sq` (always true for NaN).
#[inline(always)]
#[allow(clippy::neg_cmp_op_on_partial_ord)]
pub fn may_be_near(approx: f32, e: f32, t_sq: f32) -> bool {
    !(approx - e > t_sq)
}

fn next_up(v: f32) -> f32 {
    // Only for finite v ≥ 0.
    f32::from_bits(v.to_bits() + 1)
}

fn next_down(v: f32) -> f32 {
    // Only for v > 0.
    f32::from_bits(v.to_bits() - 1)
}

/// The squared-distance threshold for the exact distance `t` of `metric`: squared Euclidean
/// distances `D` with `D > result` have a distance larger than `t`. For Euclidean it is the
/// largest float whose correctly rounded root is at most `t`. NaN and ∞ give ∞.
#[inline(always)]
pub fn sq_threshold(metric: PairMetric, t: f32) -> f32 {
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    if !(t < f32::INFINITY) {
        return f32::INFINITY;
    }
    let t = if t > 0.0 { t } else { 0.0 };
    match metric {
        PairMetric::Euclidean => {
            let mut s = t * t;
            if s == f32::INFINITY {
                s = f32::MAX;
            }
            while s > 0.0 && sqrt(s) > t {
                s = next_down(s);
            }
            while s < f32::MAX && sqrt(next_up(s)) <= t {
                s = next_up(s);
            }
            s
        }
        _ => t,
    }
}

/// Whether the prefilter serves `metric`.
pub const fn tf32_metric(metric: PairMetric) -> bool {
    matches!(metric, PairMetric::SqEuclidean | PairMetric::Euclidean)
}

/// The group size of step 1 for `n` training rows and `k`, or `None` when the prefilter would
/// not pay (too few groups to hold k distinct rows with room to spare): 64 when there are at
/// least `8k` groups of 64, else 16 with at least `2k` groups.
pub const fn tf32_group(n: usize, k: usize) -> Option<usize> {
    if n.div_ceil(64) >= 8 * k {
        Some(64)
    } else if n.div_ceil(16) >= 2 * k {
        Some(16)
    } else {
        None
    }
}

/// Groups per query row of step 1's output (whole tiles).
pub const fn tf32_groups_per_row(n: usize, group: usize) -> usize {
    n.div_ceil(TF32_COLS) * (TF32_COLS / group)
}

/// The exact distance of query row `q` and training row `x` (`d` values each) from their
/// squared norms: the dimension-ordered FMA chain and [`finish`], as [`crate::knn::distance`].
///
/// # Safety
/// `q` and `x` are valid for `d` values.
#[inline(always)]
pub unsafe fn exact_distance(
    metric: PairMetric,
    q: *const f32,
    x: *const f32,
    d: usize,
    nq: f32,
    nx: f32,
) -> f32 {
    #[repr(C, align(16))]
    #[derive(Clone, Copy)]
    struct V4([f32; 4]);
    let mut acc = 0.0;
    if d.is_multiple_of(4) && (q as usize).is_multiple_of(16) && (x as usize).is_multiple_of(16) {
        let (qv, xv) = (q.cast::<V4>(), x.cast::<V4>());
        for h in 0..d / 4 {
            let (V4(a), V4(b)) = unsafe { (*qv.add(h), *xv.add(h)) };
            for j in 0..4 {
                acc = fma(a[j], b[j], acc);
            }
        }
    } else {
        for j in 0..d {
            acc = fma(unsafe { *q.add(j) }, unsafe { *x.add(j) }, acc);
        }
    }
    finish(metric, acc, nq, nx)
}

/// Arguments of the threshold and re-rank kernels.
#[derive(Clone, Copy)]
pub struct Exact {
    pub q: *const f32,
    pub q_norms: *const f32,
    pub x: *const f32,
    pub x_norms: *const f32,
    pub d: usize,
    pub metric: PairMetric,
    pub k: usize,
    /// `rows × k` keys: step 2's rows in, the answer out.
    pub best: *mut u64,
    /// Per row: the squared threshold.
    pub t_sq: *mut f32,
    /// Per row: the number of candidates.
    pub counts: *mut u32,
    /// `rows × TF32_CAP` candidate indices.
    pub cand: *const u32,
    /// Per row: 1 when the row must be searched by the exact path, else 0.
    pub overflow: *mut u32,
}

/// Body of `knn_tf32_threshold`, one block per query row: replaces the row's k group keys in
/// `best` by the exact keys of the same training rows (for the re-rank, which then need not
/// compute them again), the largest exact distance → `t_sq[row]`; clears `counts[row]`.
///
/// # Safety
/// `SELECT_BLOCK` threads, 8 bytes of shared memory; pointers valid for the sizes.
#[inline(always)]
pub unsafe fn threshold<E: crate::exec::Exec>(x: E, a: Exact) {
    use core::sync::atomic::{AtomicU32, Ordering};
    let (t, row) = (x.thread(), x.block());
    let worst = x.shared::<u32>();
    if t == 0 {
        unsafe { *worst = 0 };
    }
    x.sync();
    let mut e = t;
    while e < a.k {
        let slot = unsafe { a.best.add(row * a.k + e) };
        let key = unsafe { *slot };
        let bits = if key == crate::knn::NO_KEY {
            u32::MAX
        } else {
            let j = crate::knn::key_index(key);
            let dist = unsafe {
                exact_distance(
                    a.metric,
                    a.q.add(row * a.d),
                    a.x.add(j as usize * a.d),
                    a.d,
                    *a.q_norms.add(row),
                    *a.x_norms.add(j as usize),
                )
            };
            unsafe { *slot = crate::knn::key(dist, j) };
            crate::knn::ordered_bits(dist)
        };
        unsafe { AtomicU32::from_ptr(worst) }.fetch_max(bits, Ordering::Relaxed);
        e += crate::knn::SELECT_BLOCK as usize;
    }
    x.sync();
    if t == 0 {
        let bits = unsafe { *worst };
        // Back from the ordered bits (NaN and empty slots as NaN, which gives ∞).
        let t_max = if bits == u32::MAX {
            f32::NAN
        } else {
            crate::knn::key_distance((bits as u64) << 32)
        };
        unsafe {
            *a.t_sq.add(row) = sq_threshold(a.metric, t_max);
            *a.counts.add(row) = 0;
        }
    }
}

/// Body of `knn_tf32_rerank`, one block per query row: the k smallest of the row's exact keys
/// in `best` (the threshold step's) and its candidates' into `best`, selected by `METHOD` (a
/// [`crate::select`] method: k-min rounds, a bitonic sort, or a radix selection and a sort).
/// Candidates whose rows `best` holds already (a [`row_set`]) are not computed again. A row with more than `TF32_CAP` candidates, or more keys than the selection holds, is
/// flagged in `overflow` and left alone.
///
/// # Safety
/// `SELECT_BLOCK` threads, [`RERANK_SHARED_BYTES`] of shared memory; pointers valid.
#[inline(always)]
pub unsafe fn rerank<const METHOD: u32, E: crate::exec::Exec>(x: E, a: Exact) {
    use crate::knn::{NO_KEY, SELECT_BLOCK, SELECT_CAP, key, key_index, select_shared_bytes};
    use crate::select::{BY_KMIN, BY_RADIX};
    use core::sync::atomic::{AtomicU32, Ordering};
    let (t, row) = (x.thread(), x.block());
    let threads = SELECT_BLOCK as usize;
    let count = unsafe { *a.counts.add(row) } as usize;
    if count > TF32_CAP {
        if t == 0 {
            unsafe { *a.overflow.add(row) = 1 };
        }
        return;
    }
    let keys = x.shared::<u64>();
    let set = unsafe { x.shared::<u8>().add(select_shared_bytes()).cast::<u32>() };
    let added = unsafe { set.add(row_set::ROW_SET_SLOTS) };
    unsafe { row_set::clear(set, t, threads) };
    if t == 0 {
        unsafe { *added = 0 };
    }
    x.sync();
    let best = unsafe { a.best.add(row * a.k) };
    let mut e = t;
    while e < a.k {
        let held = unsafe { *best.add(e) };
        unsafe { *keys.add(e) = held };
        if held != NO_KEY {
            unsafe { row_set::insert(set, key_index(held)) };
        }
        e += threads;
    }
    x.sync();
    let nq = unsafe { *a.q_norms.add(row) };
    let qrow = unsafe { a.q.add(row * a.d) };
    let mut e = t;
    while e < count {
        let j = unsafe { *a.cand.add(row * TF32_CAP + e) };
        if !unsafe { row_set::contains(set, j) } {
            let dist = unsafe {
                exact_distance(
                    a.metric,
                    qrow,
                    a.x.add(j as usize * a.d),
                    a.d,
                    nq,
                    *a.x_norms.add(j as usize),
                )
            };
            let at = a.k
                + unsafe { AtomicU32::from_ptr(added) }.fetch_add(1, Ordering::Relaxed) as usize;
            if at < SELECT_CAP {
                unsafe { *keys.add(at) = key(dist, j) };
            }
        }
        e += threads;
    }
    x.sync();
    let total = a.k + unsafe { *added } as usize;
    if total > SELECT_CAP {
        if t == 0 {
            unsafe { *a.overflow.add(row) = 1 };
        }
        return;
    }
    if t == 0 {
        unsafe { *a.overflow.add(row) = 0 };
    }
    let scratch = unsafe { keys.add(SELECT_CAP) };
    match METHOD {
        BY_KMIN => unsafe { crate::select::kmin(x, keys, total, a.k, scratch, best) },
        // The row set is done with: the radix selection chooses into its room.
        BY_RADIX => unsafe {
            crate::select::radix_smallest(
                x,
                keys,
                total,
                a.k,
                scratch.cast(),
                set.cast(),
                best,
                true,
            )
        },
        _ => unsafe { crate::select::bitonic_sorted(x, keys, total, a.k, best) },
    }
}

/// Dynamic shared memory of a `knn_tf32_rerank` block: the selection's, the [`row_set`] and
/// the count of keys added.
pub const RERANK_SHARED_BYTES: usize =
    crate::knn::select_shared_bytes() + row_set::ROW_SET_BYTES + 8;
// The radix selection chooses the k into the row set's room.
const _: () = assert!(row_set::ROW_SET_BYTES >= 8 * crate::knn::MAX_STREAM_K);

/// Dynamic shared memory of a `knn_tf32_threshold` block: one f64 slot.
pub const THRESHOLD_SHARED_BYTES: usize = 8;

/// The `knn_tf32_threshold` entry point. CPU twin: `backend::cpu::knn::CpuKnn::nearest`.
pub const KNN_TF32_THRESHOLD: Kernel<ThresholdParams> =
    Kernel::new("knn_tf32_threshold").threads(SELECT_BLOCK);

/// The `knn_tf32_rerank` entry point. CPU twin: `backend::cpu::knn::CpuKnn::nearest`.
pub const KNN_TF32_RERANK: Kernel<RerankParams> =
    Kernel::new("knn_tf32_rerank").threads(SELECT_BLOCK);

kernel_params! {
    /// `knn_tf32_threshold`'s parameters (see [`Exact`]): the queries and training rows with
    /// their squared norms, `metric` a [`PairMetric`] id, `k`, the streamed `best` keys, and the
    /// `t_sq` and `counts` it writes. `knn_tf32_rerank` starts with the same eight.
    pub struct ThresholdParams {
        pub q: DevPtr<f32>,
        pub q_norms: DevPtr<f32>,
        pub x: DevPtr<f32>,
        pub x_norms: DevPtr<f32>,
        pub d: u32,
        pub metric: u32,
        pub k: u32,
        pub best: DevPtr<u64>,
        pub t_sq: DevPtr<f32>,
        pub counts: DevPtr<u32>,
    }
    entries: threshold_entry;
}

kernel_params! {
    /// `knn_tf32_rerank`'s parameters: as [`ThresholdParams`]' first eight, then the candidates
    /// (`counts`, `cand`), the `overflow` flags and `method` (a [`crate::select`] method).
    pub struct RerankParams {
        pub q: DevPtr<f32>,
        pub q_norms: DevPtr<f32>,
        pub x: DevPtr<f32>,
        pub x_norms: DevPtr<f32>,
        pub d: u32,
        pub metric: u32,
        pub k: u32,
        pub best: DevPtr<u64>,
        pub counts: DevPtr<u32>,
        pub cand: DevPtr<u32>,
        pub overflow: DevPtr<u32>,
        pub method: u32,
    }
    entries: rerank_entry;
}

#[cfg(target_arch = "nvptx64")]
mod entry {
    use super::*;

    /// The [`Exact`] of either kernel's parameters: the eight fields both start with, then
    /// `t_sq`, `counts`, `cand` and `overflow`.
    macro_rules! exact {
        ($params:expr, $t_sq:expr, $counts:expr, $cand:expr, $overflow:expr) => {
            Exact {
                q: $params.q.as_ptr(),
                q_norms: $params.q_norms.as_ptr(),
                x: $params.x.as_ptr(),
                x_norms: $params.x_norms.as_ptr(),
                d: ($params.d as usize).max(1),
                metric: PairMetric::from_id($params.metric),
                k: ($params.k as usize).max(1),
                best: $params.best.as_mut_ptr(),
                t_sq: $t_sq,
                counts: $counts,
                cand: $cand,
                overflow: $overflow,
            }
        };
    }

    threshold_entry! {
        /// Step 3: see [`threshold`].
        ///
        /// # Safety
        /// One block of `SELECT_BLOCK` threads per query row, 8 bytes of shared memory; `best`
        /// holds `rows × k` keys, `t_sq` and `counts` `rows` values.
        fn knn_tf32_threshold(params) {
            let a = exact!(
                params,
                params.t_sq.as_mut_ptr(),
                params.counts.as_mut_ptr(),
                core::ptr::null(),
                core::ptr::null_mut()
            );
            unsafe { threshold(crate::exec::Gpu, a) }
        }
    }

    rerank_entry! {
        /// Step 5: see [`rerank`] (`method`: a [`crate::select`] method).
        ///
        /// # Safety
        /// One block of `SELECT_BLOCK` threads per query row, `select_shared_bytes()` of shared
        /// memory; `cand` holds `rows × TF32_CAP` indices, `counts` and `overflow` `rows` values.
        fn knn_tf32_rerank(params) {
            let a = exact!(
                params,
                core::ptr::null_mut(),
                params.counts.as_mut_ptr(),
                params.cand.as_ptr(),
                params.overflow.as_mut_ptr()
            );
            use crate::select::{BY_KMIN, BY_RADIX};
            match params.method {
                BY_KMIN => unsafe { rerank::<BY_KMIN, _>(crate::exec::Gpu, a) },
                BY_RADIX => unsafe { rerank::<BY_RADIX, _>(crate::exec::Gpu, a) },
                _ => unsafe { rerank::<{ crate::select::BY_BITONIC }, _>(crate::exec::Gpu, a) },
            }
        }
    }
}

/// The `knn_tf32_scan` entry point (in `scan`, built for sm_80 only). CPU twin:
/// `backend::cpu::knn::CpuKnn::nearest`.
pub const KNN_TF32_SCAN: Kernel<ScanParams> =
    Kernel::new("knn_tf32_scan").only_sm80().threads(TF32_BLOCK);

/// The `knn_tf32_scan_wg` entry point (in `scan_wgmma`, built for sm_90a only): `knn_tf32_scan`
/// on warpgroup `mma`, for `d % 4 == 0`. CPU twin: `backend::cpu::knn::CpuKnn::nearest`.
pub const KNN_TF32_SCAN_WG: Kernel<ScanParams> = Kernel::new("knn_tf32_scan_wg")
    .only_sm90a()
    .threads(TF32_BLOCK);

kernel_params! {
    /// The parameters of `knn_tf32_scan` and `knn_tf32_scan_wg` (see `scan::knn_tf32_scan`): the
    /// queries `q` (`m × d`) and training rows `x` (`n × d`) with their squared norms and the
    /// training norms' roots; the shape (`xc`, `tiles`, `group`) and `mode`; the group keys
    /// (`gkeys`, row stride `ldg`), the optional approximations (`approx`, row stride `lda`), the
    /// thresholds `t_sq`, the candidate `counts` and `cand`, and the bound's `c1`.
    pub struct ScanParams {
        pub q: DevPtr<f32>,
        pub q_norms: DevPtr<f32>,
        pub m: u32,
        pub x: DevPtr<f32>,
        pub x_norms: DevPtr<f32>,
        pub x_roots: DevPtr<f32>,
        pub n: u32,
        pub d: u32,
        pub xc: u32,
        pub tiles: u32,
        pub mode: u32,
        pub group: u32,
        pub gkeys: DevPtr<u64>,
        pub ldg: u64,
        pub approx: DevPtr<f32>,
        pub lda: u64,
        pub t_sq: DevPtr<f32>,
        pub counts: DevPtr<u32>,
        pub cand: DevPtr<u32>,
        pub c1: f32,
    }
    entries: scan_entry;
}

/// The scan kernel (Hopper's [`KNN_TF32_SCAN_WG`] with `wgmma`, for `d % 4 == 0`, else
/// [`KNN_TF32_SCAN`]) and its dynamic shared memory for `xc` staged dimensions.
pub const fn scan_kernel(wgmma: bool, xc: usize) -> (Kernel<ScanParams>, usize) {
    match wgmma {
        true => (KNN_TF32_SCAN_WG, wg_scan_shared_bytes(xc)),
        false => (KNN_TF32_SCAN, tf32_scan_shared_bytes(xc)),
    }
}

/// Blocks of `knn_tf32_scan` for `m` queries against `n` training rows, `tiles` training tiles
/// per block: every query tile × every run of `tiles` training tiles.
pub const fn tf32_scan_grid(m: usize, n: usize, tiles: usize) -> usize {
    m.div_ceil(TF32_ROWS) * n.div_ceil(TF32_COLS).div_ceil(tiles)
}

pub mod candidates;
pub mod row_set;
#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
pub mod scan;
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
pub mod scan_wgmma;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::exec::emu::{P, launch};
    use crate::knn::{NO_KEY, SELECT_BLOCK, distance, key, key_index};
    use crate::math::sq_norm;
    use crate::select::{BY_BITONIC, BY_KMIN, BY_RADIX};

    #[test]
    fn query_fragments_hold_the_mma_layout() {
        let xc = 64;
        let mut seen = vec![false; TF32_ROWS * xc];
        for row in 0..TF32_ROWS {
            for dim in 0..xc {
                let w = query_word(row, dim, xc);
                assert!(!seen[w], "word {w} twice");
                seen[w] = true;
            }
        }
        assert!(seen.iter().all(|&s| s));
        // Fragment words as `mma` reads A: row g / g + 8, k slot q / q + 4.
        for rt in 0..TF32_ROWS / 16 {
            for chunk in 0..xc / SCAN_CHUNK_DIMS {
                for (half, kk, lane) in
                    (0..2).flat_map(|h| (0..2).flat_map(move |k| (0..32).map(move |l| (h, k, l))))
                {
                    let (g, q) = (lane / 4, lane % 4);
                    let dim = chunk * SCAN_CHUNK_DIMS + q * 8 + half * 4 + 2 * kk;
                    let first = query_fragment(rt, chunk, half, kk, lane, xc);
                    assert_eq!(first % 4, 0);
                    let want = [
                        (16 * rt + g, dim),
                        (16 * rt + g + 8, dim),
                        (16 * rt + g, dim + 1),
                        (16 * rt + g + 8, dim + 1),
                    ];
                    for (w, (row, dim)) in want.into_iter().enumerate() {
                        assert_eq!(query_word(row, dim, xc), first + w);
                    }
                }
            }
        }
    }

    #[test]
    fn tf32_rounding_is_nearest_ties_away() {
        assert_eq!(tf32_round(1.0), 1.0);
        let ulp = 2f32.powi(-10);
        // Just below and above half an ulp, and the tie itself (away from zero).
        assert_eq!(tf32_round(1.0 + ulp * 0.49), 1.0);
        assert_eq!(tf32_round(1.0 + ulp * 0.51), 1.0 + ulp);
        assert_eq!(tf32_round(1.0 + ulp * 0.5), 1.0 + ulp);
        assert_eq!(tf32_round(-(1.0 + ulp * 0.5)), -(1.0 + ulp));
        for v in [3.3f32, -0.123_456_7, 1e-30, 7e20, f32::MAX / 3.0] {
            let r = tf32_round(v);
            assert!(((r - v) / v).abs() <= 2f32.powi(-11), "{v}");
            assert_eq!(r.to_bits() & 0x1fff, 0);
        }
    }

    #[test]
    fn thresholds_are_the_largest_admissible_squares() {
        for t in [0.0f32, 1e-30, 0.5, 1.0, 2.0, 3.7, 1e10, 1.5e19, 1e30] {
            let s = sq_threshold(PairMetric::Euclidean, t);
            assert!(s.sqrt() <= t, "{t}");
            if s < f32::MAX {
                assert!(next_up(s).sqrt() > t, "{t}");
            }
            assert_eq!(sq_threshold(PairMetric::SqEuclidean, t), t);
        }
        assert_eq!(sq_threshold(PairMetric::Euclidean, f32::NAN), f32::INFINITY);
        assert_eq!(
            sq_threshold(PairMetric::SqEuclidean, f32::INFINITY),
            f32::INFINITY
        );
    }

    #[test]
    fn groups_fit_k() {
        assert_eq!(tf32_group(32_768, 25), Some(64));
        assert_eq!(tf32_group(32_768, 512), Some(16));
        assert_eq!(tf32_group(1_000_000, 100), Some(64));
        assert_eq!(tf32_group(100, 100), None);
        for n in [1, 100, 4000, 50_000] {
            for k in [1, 7, 100, 2048] {
                if let Some(g) = tf32_group(n, k) {
                    assert!(n.div_ceil(g) >= k && tf32_groups_per_row(n, g) >= n.div_ceil(g));
                }
            }
        }
        assert!(tf32_scan_shared_bytes(tf32_xc(256, 256)) <= 227 * 1024);
        assert_eq!((tf32_xc(100, 256) + 4) % 32, 4);
        assert_eq!(tf32_xc(1000, 256), 256);
    }

    /// A small deterministic generator (xorshift).
    pub(crate) struct Rng(pub(crate) u64);
    impl Rng {
        pub(crate) fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        pub(crate) fn unit(&mut self) -> f32 {
            (self.next() >> 40) as f32 / (1u64 << 24) as f32
        }
    }

    /// The TF32 value a tensor core may read for a raw f32: truncated (`true`) or rounded.
    fn tf32_read(v: f32, truncate: bool) -> f32 {
        if truncate {
            f32::from_bits(v.to_bits() & !0x1fff)
        } else {
            tf32_round(v)
        }
    }

    /// A TF32 dot product as a tensor core might form it: rounded queries, truncated or rounded
    /// training values, exact products, f32 sums of k-steps of 8 in one of several orders,
    /// rounding or truncating.
    pub(crate) fn tf32_dot(q: &[f32], x: &[f32], order: u32, x_truncated: bool) -> f32 {
        let truncate = |v: f64| {
            let f = v as f32;
            if (f as f64).abs() > v.abs() {
                f32::from_bits(f.to_bits() - 1)
            } else {
                f
            }
        };
        let mut acc = 0f32;
        for (qc, xc) in q.chunks(8).zip(x.chunks(8)) {
            let prods: Vec<f64> = qc
                .iter()
                .zip(xc)
                .map(|(&a, &b)| tf32_round(a) as f64 * tf32_read(b, x_truncated) as f64)
                .collect();
            match order {
                // Each product added to the running sum, rounded.
                0 => {
                    for p in prods {
                        acc = (acc as f64 + p) as f32;
                    }
                }
                // The k-step summed exactly, then one truncated addition.
                1 => acc = truncate(acc as f64 + prods.iter().sum::<f64>()),
                // Each product added with truncation, reversed.
                _ => {
                    for p in prods.into_iter().rev() {
                        acc = truncate(acc as f64 + p);
                    }
                }
            }
        }
        acc
    }

    /// |A − D| ≤ E on many random and adversarial pairs, A from every emulated accumulation.
    #[test]
    fn the_bound_holds_against_brute_force() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut worst = 0f64;
        let mut cases = 0;
        for trial in 0..4000 {
            let d = [1usize, 2, 3, 7, 8, 31, 128, 129, 256, 1000][trial % 10];
            let kind = (trial / 10) % 6;
            let sample = |rng: &mut Rng| -> f32 {
                let u = rng.unit();
                match kind {
                    0 => u,                                               // uniform [0, 1)
                    1 => 2.0 * u - 1.0,                                   // centred
                    2 => (u - 0.5) * 1e6,                                 // large
                    3 => (u - 0.5) * 1e-12,                               // tiny
                    4 => (1.0 + (u * 1024.0).floor()) * 0.5e-3,           // few levels, ties
                    _ => (2f32).powi((u * 60.0) as i32 - 30) * (u - 0.4), // mixed scales
                }
            };
            let q: Vec<f32> = (0..d).map(|_| sample(&mut rng)).collect();
            let mut x: Vec<f32> = (0..d).map(|_| sample(&mut rng)).collect();
            if trial % 7 == 0 {
                // Near-duplicates: the relative error of the difference is the worst.
                for (xv, qv) in x.iter_mut().zip(&q) {
                    *xv = qv * (1.0 + (rng.unit() - 0.5) * 1e-6);
                }
            }
            let (nq, nx) = (sq_norm(&q), sq_norm(&x));
            let exact = distance(PairMetric::SqEuclidean, &q, &x);
            let c1 = bound_coefficient(d);
            let e = error_bound(c1 * nq.sqrt(), nx.sqrt(), nq, nx);
            for (order, x_truncated) in (0..3).flat_map(|o| [(o, true), (o, false)]) {
                let a = approx_sq(tf32_dot(&q, &x, order, x_truncated), nq, nx);
                let gap = (a as f64 - exact as f64).abs();
                assert!(
                    gap <= e as f64,
                    "d={d} kind={kind}: |A − D| = {gap:e} > E = {e:e} (A {a}, D {exact})"
                );
                // The lower bound never excludes a row at exactly the threshold.
                assert!(may_be_near(a, e, exact));
                worst = worst.max(gap / e as f64);
                cases += 1;
            }
        }
        assert!(cases > 20_000);
        eprintln!("largest |A − D| / E over {cases} cases: {worst:.3}");
    }

    /// Threshold and re-rank bodies in the emulator: the k nearest of the candidates, exact keys;
    /// overflow flagged.
    #[test]
    fn emulated_threshold_and_rerank() {
        let (rows, n, d, k) = (2usize, 300usize, 5usize, 4usize);
        let mut rng = Rng(7);
        let q: Vec<f32> = (0..rows * d).map(|_| rng.unit()).collect();
        let x: Vec<f32> = (0..n * d).map(|_| rng.unit()).collect();
        let qn: Vec<f32> = q.chunks(d).map(sq_norm).collect();
        let xn: Vec<f32> = x.chunks(d).map(sq_norm).collect();
        for metric in [PairMetric::SqEuclidean, PairMetric::Euclidean] {
            let want: Vec<Vec<u64>> = (0..rows)
                .map(|r| {
                    let mut keys: Vec<u64> = (0..n)
                        .map(|j| {
                            key(
                                distance(metric, &q[r * d..][..d], &x[j * d..][..d]),
                                j as u32,
                            )
                        })
                        .collect();
                    keys.sort_unstable();
                    keys
                })
                .collect();
            // Step 2's rows: any k distinct (here rows 10..10 + k); row 1 has an empty slot.
            let mut best: Vec<u64> = (0..rows * k)
                .map(|e| key(0.0, 10 + (e % k) as u32))
                .collect();
            best[2 * k - 1] = NO_KEY;
            let mut t_sq = vec![0f32; rows];
            let mut counts = vec![99u32; rows];
            let mut cand = vec![0u32; rows * TF32_CAP];
            let mut overflow = vec![7u32; rows];
            let a = Exact {
                q: q.as_ptr(),
                q_norms: qn.as_ptr(),
                x: x.as_ptr(),
                x_norms: xn.as_ptr(),
                d,
                metric,
                k,
                best: best.as_mut_ptr(),
                t_sq: t_sq.as_mut_ptr(),
                counts: counts.as_mut_ptr(),
                cand: cand.as_ptr(),
                overflow: overflow.as_mut_ptr(),
            };
            let pa = P(&a as *const Exact as *mut Exact);
            launch(rows, SELECT_BLOCK as usize, 8, |e| unsafe {
                threshold(e, *pa.get())
            });
            // The group keys became the same rows' exact keys.
            let exact_keys: Vec<u64> = (10..10 + k as u32)
                .map(|j| key(distance(metric, &q[..d], &x[j as usize * d..][..d]), j))
                .collect();
            assert_eq!(&best[..k], &exact_keys[..], "{metric:?}");
            let t0 = (10..10 + k)
                .map(|j| distance(metric, &q[..d], &x[j * d..][..d]))
                .fold(0f32, f32::max);
            assert_eq!(t_sq[0], sq_threshold(metric, t0));
            assert_eq!(t_sq[1], f32::INFINITY);
            assert_eq!(counts, vec![0, 0]);
            // Row 0: every row whose exact squared distance passes; row 1: too many.
            for j in 0..n {
                let sq = distance(PairMetric::SqEuclidean, &q[..d], &x[j * d..][..d]);
                if may_be_near(sq, 0.0, t_sq[0]) {
                    cand[counts[0] as usize] = j as u32;
                    counts[0] += 1;
                }
            }
            assert!(
                exact_keys
                    .iter()
                    .all(|&e| cand[..counts[0] as usize].contains(&key_index(e)))
            );
            counts[1] = TF32_CAP as u32 + 1;
            for method in [BY_KMIN, BY_BITONIC, BY_RADIX] {
                // Later rounds start from the first's answer: k exact keys of candidates.
                launch(
                    rows,
                    SELECT_BLOCK as usize,
                    RERANK_SHARED_BYTES,
                    |e| unsafe {
                        match method {
                            BY_KMIN => rerank::<BY_KMIN, _>(e, *pa.get()),
                            BY_RADIX => rerank::<BY_RADIX, _>(e, *pa.get()),
                            _ => rerank::<BY_BITONIC, _>(e, *pa.get()),
                        }
                    },
                );
                assert_eq!(&best[..k], &want[0][..k], "{metric:?} method {method}");
                assert_eq!(overflow, vec![0, 1]);
            }
            // A full list of rows that step 3 does not hold: k + TF32_CAP keys do not fit.
            best[..k].copy_from_slice(&exact_keys);
            for (e, c) in cand[..TF32_CAP].iter_mut().enumerate() {
                *c = 100 + (e % 200) as u32;
            }
            counts[0] = TF32_CAP as u32;
            launch(1, SELECT_BLOCK as usize, RERANK_SHARED_BYTES, |e| unsafe {
                rerank::<BY_BITONIC, _>(e, *pa.get())
            });
            assert_eq!(overflow[0], 1, "{metric:?}");
            assert_eq!(&best[..k], &exact_keys[..], "left alone");
        }
    }
}
