//! Fused distance + argmin: every point's nearest centroid, without an n×k matrix.
//!
//! GEMM-style: a block owns `points()` points and sweeps the centroids in tiles of
//! `centroids()`; both tiles stream through shared memory `ASSIGN_CHUNK_DIMS` dimensions at a time,
//! transposed, and every thread accumulates a `points_per_thread × centroids_per_thread` register tile. For squared L2 the
//! accumulator is the dot product and centroids rank by `‖c‖² − 2·x·c` (one multiply-add per
//! dimension); for L1 it is the distance itself. Every (point, centroid) accumulator runs over
//! the dimensions in order 0..d, exactly as the CPU twin, and candidates merge with the
//! lower-index tie rule, so labels match the CPU bit for bit.

#[cfg(target_arch = "nvptx64")]
use crate::exec::Gpu;
use crate::launch::{BLOCK, Kernel};
use crate::params::DevPtr;
#[cfg(any(test, all(target_arch = "nvptx64", not(target_feature = "sm_80"))))]
use crate::tile::load_transposed;
#[cfg(any(test, target_arch = "nvptx64"))]
use crate::{
    exec::{Exec, atomic_add_i64, atomic_add_u32, atomic_add_u64, block_sum_f64, block_sum_i64},
    fixed::{inertia_term, to_fixed, units_at, weighted},
    math::{AssignMetric, assign_distance, assign_score, assign_step, better},
    tile::load_vec4s,
};

/// Shape of a register-tiled assign kernel: `BLOCK` threads form `BLOCK / centroid_groups` point
/// groups × `centroid_groups` centroid groups; each thread accumulates `points_per_thread` points
/// × `centroids_per_thread` centroids in registers while
/// `ASSIGN_CHUNK_DIMS` dimensions at a time of both tiles stream through shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AssignTile {
    /// Centroid groups (threads sharing a point group).
    pub centroid_groups: usize,
    /// Points per thread.
    pub points_per_thread: usize,
    /// Centroids per thread.
    pub centroids_per_thread: usize,
}

/// Dimensions per shared-memory chunk of the assign kernels.
pub const ASSIGN_CHUNK_DIMS: usize = 16;

/// Shared-memory buffers of the sm_80 assign kernels, which copy chunks ahead with `cp.async`
/// while the current one is multiplied.
pub const ASSIGN_STAGES: usize = 2;

/// For many centroids: 128 points × 128 centroids per block, 8 × 8 per thread.
pub const ASSIGN_WIDE: AssignTile = AssignTile {
    centroid_groups: 16,
    points_per_thread: 8,
    centroids_per_thread: 8,
};
/// For k ≤ 16: 256 points × 16 centroids per block, 4 × 4 per thread.
pub const ASSIGN_NARROW: AssignTile = AssignTile {
    centroid_groups: 4,
    points_per_thread: 4,
    centroids_per_thread: 4,
};

impl AssignTile {
    /// The tile for `k` centroids.
    pub const fn for_k(k: usize) -> Self {
        if k <= ASSIGN_NARROW.centroid_groups * ASSIGN_NARROW.centroids_per_thread {
            ASSIGN_NARROW
        } else {
            ASSIGN_WIDE
        }
    }

    /// Points per block.
    pub const fn points(self) -> usize {
        BLOCK as usize / self.centroid_groups * self.points_per_thread
    }

    /// Blocks of the kernel for `n` points (one inertia partial each).
    pub const fn grid(self, n: usize) -> usize {
        n.div_ceil(self.points())
    }

    /// Centroids per tile.
    pub const fn centroids(self) -> usize {
        self.centroid_groups * self.centroids_per_thread
    }

    /// Row stride (in f32) of the transposed point tile: +4 keeps rows 16-byte aligned for
    /// vector loads and spreads the transposing stores over banks.
    pub const fn x_stride(self) -> usize {
        self.points() + 4
    }

    /// Row stride (in f32) of the transposed centroid tile.
    pub const fn c_stride(self) -> usize {
        self.centroids() + 4
    }

    /// Floats of one staged chunk: the point tile, then the centroid tile.
    pub const fn stage_len(self) -> usize {
        ASSIGN_CHUNK_DIMS * (self.x_stride() + self.c_stride())
    }

    /// Dynamic shared memory of one block, in bytes: reduction scratch (2 f64 per thread), then
    /// the larger of the two kernel layouts. The sm_70 kernel keeps one staged chunk and the
    /// per-point candidates of every centroid group (score, index); the sm_80 kernel keeps
    /// `ASSIGN_STAGES` chunks and as many slots of centroid norms, and merges the candidates in
    /// the chunk buffers once the sweep is over.
    pub const fn shared_bytes(self) -> usize {
        let scratch = 2 * BLOCK as usize * 8;
        let merge = self.points() * self.centroid_groups * 8;
        let single = (self.stage_len() * 4) + merge;
        let staged = ASSIGN_STAGES * (self.stage_len() + self.centroids()) * 4;
        let staged = if staged > merge { staged } else { merge };
        scratch + if single > staged { single } else { staged }
    }

    /// Dynamic shared memory of one block of the sm_80 kernel when the point tile of `d`
    /// dimensions stays resident (staged once, not once per centroid tile), in bytes: reduction
    /// scratch, `ASSIGN_STAGES` centroid chunks and norm slots, then the point tile. Given at
    /// least this much (which at few dimensions is no more than [`Self::shared_bytes`]), the sm_80
    /// kernel keeps the tile resident; otherwise it streams it with the centroids.
    pub const fn resident_shared_bytes(self, d: usize) -> usize {
        let scratch = 2 * BLOCK as usize * 8;
        let merge = self.points() * self.centroid_groups * 8;
        let chunks = if d == 0 {
            1
        } else {
            d.div_ceil(ASSIGN_CHUNK_DIMS)
        };
        let centroids =
            ASSIGN_STAGES * (ASSIGN_CHUNK_DIMS * self.c_stride() + self.centroids()) * 4;
        let points = chunks * ASSIGN_CHUNK_DIMS * self.x_stride() * 4;
        let resident = centroids + points;
        scratch + if resident > merge { resident } else { merge }
    }
}

kernel_params! {
    /// The parameters of the four `kmeans_assign_*` entry points (see [`KMEANS_ASSIGN_L2_WIDE`]):
    /// `x` (`n × d`) with its squared norms, the `k × d` centroids with theirs and by dimension
    /// (`centroids_t`, `d × k_padded`), the labels and distances written, the counters, and the
    /// optional `weights`, `sums` and `counts` (null: absent).
    pub struct AssignParams {
        pub x: DevPtr<f32>,
        pub x_sq_norms: DevPtr<f32>,
        pub n: u32,
        pub d: u32,
        pub centroids: DevPtr<f32>,
        pub c_sq_norms: DevPtr<f32>,
        pub k: u32,
        pub labels: DevPtr<u32>,
        pub min_dist: DevPtr<f32>,
        pub changed: DevPtr<u32>,
        pub block_inertia: DevPtr<i64>,
        pub inertia_scale: f32,
        pub weights: DevPtr<f32>,
        pub scales: DevPtr<f32>,
        pub sums: DevPtr<i64>,
        pub counts: DevPtr<u64>,
        pub centroids_t: DevPtr<f32>,
        pub k_padded: u32,
    }
    entries: assign_entry;
}

/// Arguments shared by the assign entry points, as the sweeps read them.
#[cfg(any(test, target_arch = "nvptx64"))]
#[derive(Clone, Copy)]
struct AssignArgs {
    x: *const f32,
    x_sq_norms: *const f32,
    n: usize,
    d: usize,
    /// Row-major `k × d` (read by the sm_70 sweep).
    #[cfg_attr(target_feature = "sm_80", allow(dead_code))]
    centroids: *const f32,
    c_sq_norms: *const f32,
    k: usize,
    labels: *mut u32,
    min_dist: *mut f32,
    changed: *mut u32,
    block_inertia: *mut i64,
    inertia_scale: f32,
    weights: *const f32,
    scales: *const f32,
    sums: *mut i64,
    counts: *mut u64,
    /// The centroids by dimension (`d × k_padded`, `kmeans_centroids_by_dimension`), read by the
    /// sm_80 sweep.
    #[cfg_attr(not(target_feature = "sm_80"), allow(dead_code))]
    centroids_t: *const f32,
    #[cfg_attr(not(target_feature = "sm_80"), allow(dead_code))]
    k_padded: usize,
}

macro_rules! assign_kernel {
    ($entry:ident, $name:ident, $metric:expr, $tile:expr, $min_blocks:expr) => {
        #[doc = concat!("The `", stringify!($name), "` entry point. CPU twins: `backend::cpu::kmeans::nearest`, `::accumulate`.")]
        pub const $entry: Kernel<AssignParams> =
            Kernel::new(stringify!($name)).min_blocks($min_blocks);

        assign_entry! {
            /// Labels each of the `n` points of `x` (row-major, `d` columns) with its nearest of the
            /// `k` centroids and writes its distance. Squared norms of points and centroids are
            /// inputs (ignored by L1). `weights` (null: one unit each) holds every point's integer
            /// units. With `changed` non-null, adds the number of labels of points with weight that
            /// differ from what `labels` held; with `block_inertia` non-null, writes each block's
            /// fixed-point inertia `Σ units · round(dist · inertia_scale)` at its index. With `sums`
            /// non-null, also adds every point's fixed-point coordinates (under `scales`, one per
            /// dimension) times its units to its cluster's row of `sums` (`k × d`) and its units to
            /// its `counts` entry, as `kmeans_accumulate_global` would.
            /// `centroids_t` holds the centroids by dimension (`d × k_padded`, `k_padded ≥ k` a multiple of 4;
            /// read on sm_80 and later).
            ///
            /// # Safety
            /// Pointers valid for those sizes; `BLOCK` threads, `ceil(n / points())` blocks and
            /// `shared_bytes()` of dynamic shared memory for this kernel's tile.
            fn $name(params) {
                let AssignParams {
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
                    scales,
                    sums,
                    counts,
                    centroids_t,
                    k_padded,
                } = params;
                let args = AssignArgs {
                    x: x.as_ptr(),
                    x_sq_norms: x_sq_norms.as_ptr(),
                    n: n as usize,
                    d: (d as usize).max(1),
                    centroids: centroids.as_ptr(),
                    c_sq_norms: c_sq_norms.as_ptr(),
                    k: k as usize,
                    labels: labels.as_mut_ptr(),
                    min_dist: min_dist.as_mut_ptr(),
                    changed: changed.as_mut_ptr(),
                    block_inertia: block_inertia.as_mut_ptr(),
                    inertia_scale,
                    weights: weights.as_ptr(),
                    scales: scales.as_ptr(),
                    sums: sums.as_mut_ptr(),
                    counts: counts.as_mut_ptr(),
                    centroids_t: centroids_t.as_ptr(),
                    k_padded: k_padded as usize,
                };
                #[cfg(target_feature = "sm_80")]
                unsafe {
                    run_async::<
                        { $tile.points_per_thread },
                        { $tile.centroids_per_thread },
                        { $tile.points() },
                        { $tile.centroids() },
                        { $tile.c_stride() },
                    >(args, $metric, $tile)
                }
                #[cfg(not(target_feature = "sm_80"))]
                unsafe {
                    run::<_, { $tile.points_per_thread }, { $tile.centroids_per_thread }>(
                        Gpu, args, $metric, $tile,
                    )
                }
            }
        }
    };
}

// The wide register tiles keep two blocks per multiprocessor (the last argument).
assign_kernel!(
    KMEANS_ASSIGN_L2_WIDE,
    kmeans_assign_l2_wide,
    AssignMetric::SqL2,
    ASSIGN_WIDE,
    2
);
assign_kernel!(
    KMEANS_ASSIGN_L2_NARROW,
    kmeans_assign_l2_narrow,
    AssignMetric::SqL2,
    ASSIGN_NARROW,
    0
);
assign_kernel!(
    KMEANS_ASSIGN_L1_WIDE,
    kmeans_assign_l1_wide,
    AssignMetric::L1,
    ASSIGN_WIDE,
    2
);
assign_kernel!(
    KMEANS_ASSIGN_L1_NARROW,
    kmeans_assign_l1_narrow,
    AssignMetric::L1,
    ASSIGN_NARROW,
    0
);

#[cfg(any(test, all(target_arch = "nvptx64", not(target_feature = "sm_80"))))]
#[inline(always)]
unsafe fn run<E: Exec, const THREAD_POINTS: usize, const THREAD_CENTROIDS: usize>(
    e: E,
    a: AssignArgs,
    metric: AssignMetric,
    tile: AssignTile,
) {
    let t = e.thread();
    let (tx, ty) = (t % tile.centroid_groups, t / tile.centroid_groups);
    let (pb, cb) = (tile.points(), tile.centroids());
    let (xs_stride, cs_stride) = (tile.x_stride(), tile.c_stride());
    let first_point = e.block() * pb;

    let scratch = e.shared::<f64>();
    let xs = unsafe { scratch.add(2 * BLOCK as usize) }.cast::<f32>();
    let cs = unsafe { xs.add(ASSIGN_CHUNK_DIMS * xs_stride) };
    let merge_score = unsafe { cs.add(ASSIGN_CHUNK_DIMS * cs_stride) };
    let merge_index = unsafe { merge_score.add(pb * tile.centroid_groups) }.cast::<u32>();

    let mut best_score = [f32::INFINITY; THREAD_POINTS];
    let mut best_index = [u32::MAX; THREAD_POINTS];
    let mut first_centroid = 0;
    while first_centroid < a.k {
        let mut acc = [[0f32; THREAD_CENTROIDS]; THREAD_POINTS];
        let mut j0 = 0;
        while j0 < a.d {
            let width = ASSIGN_CHUNK_DIMS.min(a.d - j0);
            e.sync();
            unsafe { stage_tiles(&a, t, tile, first_point, first_centroid, j0, width, xs, cs) };
            e.sync();
            // A full chunk has a constant trip count, so it unrolls and the shared loads of one
            // dimension overlap the multiply-adds of the previous one.
            if width == ASSIGN_CHUNK_DIMS {
                for jj in 0..ASSIGN_CHUNK_DIMS {
                    unsafe {
                        accumulate(metric, &mut acc, xs, cs, jj, xs_stride, cs_stride, tx, ty)
                    };
                }
            } else {
                for jj in 0..width {
                    unsafe {
                        accumulate(metric, &mut acc, xs, cs, jj, xs_stride, cs_stride, tx, ty)
                    };
                }
            }
            j0 += width;
        }
        unsafe {
            rank_tile(
                &a,
                metric,
                first_centroid,
                tx,
                &acc,
                &mut best_score,
                &mut best_index,
            )
        };
        first_centroid += cb;
    }

    unsafe {
        finish::<_, THREAD_POINTS>(
            e,
            a,
            metric,
            tile,
            best_score,
            best_index,
            merge_score,
            merge_index,
            scratch,
        )
    };
}

/// Stages dimensions `j0..j0 + width` of the block's point tile (from `first_point`) into `xs`
/// and of the centroid tile (from `first_centroid`) into `cs`, both transposed.
///
/// # Safety
/// As [`load_transposed`]; every thread of the block calls it between two barriers.
#[cfg(any(test, all(target_arch = "nvptx64", not(target_feature = "sm_80"))))]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn stage_tiles(
    a: &AssignArgs,
    t: usize,
    tile: AssignTile,
    first_point: usize,
    first_centroid: usize,
    j0: usize,
    width: usize,
    xs: *mut f32,
    cs: *mut f32,
) {
    let (pb, cb) = (tile.points(), tile.centroids());
    let (xs_stride, cs_stride) = (tile.x_stride(), tile.c_stride());
    unsafe {
        let (x, c, bt) = (a.x, a.centroids, BLOCK as usize);
        let (n, k, d) = (a.n, a.k, a.d);
        load_transposed::<ASSIGN_CHUNK_DIMS>(
            t,
            bt,
            x,
            n,
            d,
            first_point,
            pb,
            j0,
            width,
            xs,
            xs_stride,
        );
        load_transposed::<ASSIGN_CHUNK_DIMS>(
            t,
            bt,
            c,
            k,
            d,
            first_centroid,
            cb,
            j0,
            width,
            cs,
            cs_stride,
        );
    }
}

/// Ranks the finished centroid tile from `first_centroid` (this thread's centroids
/// `first_centroid + tx·THREAD_CENTROIDS + q`) into each of its points' best.
///
/// # Safety
/// `a.c_sq_norms` holds `k` values.
#[cfg(any(test, all(target_arch = "nvptx64", not(target_feature = "sm_80"))))]
#[inline(always)]
unsafe fn rank_tile<const THREAD_POINTS: usize, const THREAD_CENTROIDS: usize>(
    a: &AssignArgs,
    metric: AssignMetric,
    first_centroid: usize,
    tx: usize,
    acc: &[[f32; THREAD_CENTROIDS]; THREAD_POINTS],
    best_score: &mut [f32; THREAD_POINTS],
    best_index: &mut [u32; THREAD_POINTS],
) {
    // Branch-free so the loops unroll and `acc` stays in registers.
    let mut c_sq = [0f32; THREAD_CENTROIDS];
    let mut valid = [false; THREAD_CENTROIDS];
    for q in 0..THREAD_CENTROIDS {
        let c = first_centroid + tx * THREAD_CENTROIDS + q;
        valid[q] = c < a.k;
        if valid[q] && metric == AssignMetric::SqL2 {
            c_sq[q] = unsafe { *a.c_sq_norms.add(c) };
        }
    }
    let index: [u32; THREAD_CENTROIDS] =
        core::array::from_fn(|q| (first_centroid + tx * THREAD_CENTROIDS + q) as u32);
    rank(metric, acc, &c_sq, &index, &valid, best_score, best_index);
}

/// The sm_80 sweep: the copies of step `s + 1` (a centroid tile's chunk, with the point tile's
/// chunk) go out with `cp.async` (transposed, one f32 per copy) into the other shared buffer while
/// step `s` is multiplied, so a step costs one barrier and no exposed load latency. The centroid
/// norms of a tile come with its first chunk. When the launch gives the shared memory of
/// [`AssignTile::resident_shared_bytes`], the point tile is staged whole during the first
/// centroid tile and stays, so later tiles only stream centroids.
/// Thread `(tx, ty)` keeps points `ty·THREAD_POINTS + i` and centroids `h·4·centroid_groups + tx·4 + r` (`q = 4h + r`),
/// so the 16 centroid groups of a warp read 64 consecutive words per 16-byte load (no bank
/// conflicts). Accumulation order per (point, centroid) and the candidate order (score, then
/// index) are those of [`run`].
///
/// Kept whole at ~150 lines: the shared layout and the tile ranking are separate steps
/// ([`AsyncLayout::new`], [`rank_tile_split`]), but moving the copy-issue closure (or even its
/// norm copy) into an `#[inline(always)]` function changes the sm_80 PTX of all four assign
/// kernels (block order and branches), so it stays a closure here.
#[cfg(target_feature = "sm_80")]
#[inline(always)]
unsafe fn run_async<
    const THREAD_POINTS: usize,
    const THREAD_CENTROIDS: usize,
    const BLOCK_POINTS: usize,
    const BLOCK_CENTROIDS: usize,
    const C_STRIDE: usize,
>(
    a: AssignArgs,
    metric: AssignMetric,
    tile: AssignTile,
) {
    use crate::cp_async::{commit, wait_group};
    // Two buffers: step `s` reads buffer `s % 2` and norms slot `tile % 2`.
    const _: () = assert!(ASSIGN_STAGES == 2);
    let t = Gpu.thread();
    let (tx, ty) = (t % tile.centroid_groups, t / tile.centroid_groups);
    let xs_stride = tile.x_stride();
    let first_point = Gpu.block() * BLOCK_POINTS;
    let l2 = metric == AssignMetric::SqL2;
    let l = AsyncLayout::new::<BLOCK_CENTROIDS>(tile, a.d);

    let chunks = a.d.div_ceil(ASSIGN_CHUNK_DIMS);
    let steps = a.k.div_ceil(BLOCK_CENTROIDS) * chunks;

    // Issues the copies of step `s` = (tile `tile_i`, chunk `kc`) as one group.
    let issue = |s: usize, tile_i: usize, kc: usize| {
        let j0 = kc * ASSIGN_CHUNK_DIMS;
        let width = ASSIGN_CHUNK_DIMS.min(a.d - j0);
        let buf = l.bufs_addr + (4 * (s % 2) * l.stage) as u32;
        let first_c = tile_i * BLOCK_CENTROIDS;
        unsafe {
            if !l.resident || tile_i == 0 {
                let xbuf = if l.resident {
                    l.x_tile_addr + (4 * kc * l.x_chunk) as u32
                } else {
                    buf
                };
                crate::cp_async::copy_transposed::<
                    BLOCK_POINTS,
                    ASSIGN_CHUNK_DIMS,
                    { BLOCK as usize },
                >(t, a.x, a.n, a.d, first_point, j0, width, xbuf, xs_stride);
            }
            // Rows j0.. of the centroids by dimension, columns first_c..: 16-byte copies when
            // they divide among the threads (the wide tile), else one word each.
            let cbuf = buf + (4 * l.c_off) as u32;
            let vec = (ASSIGN_CHUNK_DIMS * BLOCK_CENTROIDS / 4).is_multiple_of(BLOCK as usize);
            crate::cp_async::copy_rows::<
                ASSIGN_CHUNK_DIMS,
                BLOCK_CENTROIDS,
                C_STRIDE,
                { BLOCK as usize },
            >(t, vec, a.centroids_t, a.d, a.k_padded, j0, first_c, cbuf);
            if l2 && kc == 0 && t < BLOCK_CENTROIDS {
                let ok = first_c + t < a.k;
                let src = if ok {
                    a.c_sq_norms.add(first_c + t)
                } else {
                    a.c_sq_norms
                };
                let dst = l.norms_addr + (4 * ((tile_i % 2) * BLOCK_CENTROIDS + t)) as u32;
                crate::cp_async::copy_4(dst, src, if ok { 4 } else { 0 });
            }
        }
        commit();
    };

    if steps > 0 {
        issue(0, 0, 0);
    }
    let mut best_score = [f32::INFINITY; THREAD_POINTS];
    let mut best_index = [u32::MAX; THREAD_POINTS];
    let mut acc = [[0f32; THREAD_CENTROIDS]; THREAD_POINTS];
    let (mut tile_i, mut kc) = (0, 0);
    let mut s = 0;
    while s < steps {
        // This thread's copies of step `s` have landed; after the barrier everybody's have, and
        // every thread is done with the buffer of step `s - 1`, which the next issue refills.
        wait_group::<0>();
        Gpu.sync();
        let last_chunk = kc + 1 == chunks;
        if s + 1 < steps {
            if last_chunk {
                issue(s + 1, tile_i + 1, 0);
            } else {
                issue(s + 1, tile_i, kc + 1);
            }
        }
        let xs = if l.resident {
            unsafe { l.x_tile.add(kc * l.x_chunk) }
        } else {
            unsafe { l.bufs.add((s % 2) * l.stage) }
        };
        let cs = unsafe { l.bufs.add((s % 2) * l.stage + l.c_off) };
        let width = ASSIGN_CHUNK_DIMS.min(a.d - kc * ASSIGN_CHUNK_DIMS);
        if width == ASSIGN_CHUNK_DIMS {
            for jj in 0..ASSIGN_CHUNK_DIMS {
                unsafe { accumulate_split(metric, &mut acc, xs, cs, jj, tile, tx, ty) };
            }
        } else {
            for jj in 0..width {
                unsafe { accumulate_split(metric, &mut acc, xs, cs, jj, tile, tx, ty) };
            }
        }
        if last_chunk {
            // The tile is done: rank its centroids for this thread's points.
            unsafe {
                rank_tile_split::<THREAD_POINTS, THREAD_CENTROIDS, BLOCK_CENTROIDS>(
                    &a,
                    metric,
                    tile,
                    tile_i,
                    l.norms,
                    tx,
                    &acc,
                    &mut best_score,
                    &mut best_index,
                )
            };
            acc = [[0f32; THREAD_CENTROIDS]; THREAD_POINTS];
            (tile_i, kc) = (tile_i + 1, 0);
        } else {
            kc += 1;
        }
        s += 1;
    }
    // Nothing is in flight; the buffers become the merge area.
    Gpu.sync();
    let merge_score = l.bufs;
    let merge_index = unsafe { l.bufs.add(BLOCK_POINTS * tile.centroid_groups) }.cast::<u32>();
    unsafe {
        finish::<_, THREAD_POINTS>(
            Gpu,
            a,
            metric,
            tile,
            best_score,
            best_index,
            merge_score,
            merge_index,
            l.scratch,
        )
    };
}

/// The shared-memory layout of an sm_80 assign block. Streaming: two stages of (point chunk,
/// centroid chunk), then the norms. Resident: two centroid chunks, the norms, then the whole
/// point tile (chunk after chunk). Reduction scratch comes first in both.
#[cfg(target_feature = "sm_80")]
#[derive(Clone, Copy)]
struct AsyncLayout {
    /// The point tile stays resident (staged during the first centroid tile).
    resident: bool,
    /// Floats of one point chunk, of one stage, and the centroid chunk's offset in a stage.
    x_chunk: usize,
    stage: usize,
    c_off: usize,
    scratch: *mut f64,
    bufs: *mut f32,
    norms: *mut f32,
    x_tile: *mut f32,
    /// Shared-window addresses of the stages, the norm slots and the resident point tile.
    bufs_addr: u32,
    norms_addr: u32,
    x_tile_addr: u32,
}

#[cfg(target_feature = "sm_80")]
impl AsyncLayout {
    /// The layout for `tile` at `d` dimensions, resident when the launch gave the shared memory
    /// of [`AssignTile::resident_shared_bytes`].
    #[inline(always)]
    fn new<const BLOCK_CENTROIDS: usize>(tile: AssignTile, d: usize) -> Self {
        use crate::cp_async::{dynamic_shared_bytes, shared_addr};
        let resident = dynamic_shared_bytes() as usize >= tile.resident_shared_bytes(d);
        let x_chunk = ASSIGN_CHUNK_DIMS * tile.x_stride();
        let c_chunk = ASSIGN_CHUNK_DIMS * tile.c_stride();
        let stage = if resident { c_chunk } else { x_chunk + c_chunk };
        let c_off = if resident { 0 } else { x_chunk };
        let scratch = Gpu.shared::<f64>();
        let bufs = unsafe { scratch.add(2 * BLOCK as usize) }.cast::<f32>();
        let norms = unsafe { bufs.add(ASSIGN_STAGES * stage) };
        let x_tile = unsafe { norms.add(ASSIGN_STAGES * BLOCK_CENTROIDS) };
        AsyncLayout {
            resident,
            x_chunk,
            stage,
            c_off,
            scratch,
            bufs,
            norms,
            x_tile,
            bufs_addr: shared_addr(bufs),
            norms_addr: shared_addr(norms),
            x_tile_addr: shared_addr(x_tile),
        }
    }
}

/// Ranks the finished centroid tile `tile_i` into each of this thread's points' best, with the
/// centroid mapping of [`run_async`] (slot `q` is column `(q / 4)·4·centroid_groups + tx·4 +
/// q % 4`) and the norms from slot `tile_i % 2` of `norms`.
///
/// # Safety
/// The tile's norms have landed in `norms` (L2).
#[cfg(target_feature = "sm_80")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn rank_tile_split<
    const THREAD_POINTS: usize,
    const THREAD_CENTROIDS: usize,
    const BLOCK_CENTROIDS: usize,
>(
    a: &AssignArgs,
    metric: AssignMetric,
    tile: AssignTile,
    tile_i: usize,
    norms: *const f32,
    tx: usize,
    acc: &[[f32; THREAD_CENTROIDS]; THREAD_POINTS],
    best_score: &mut [f32; THREAD_POINTS],
    best_index: &mut [u32; THREAD_POINTS],
) {
    let l2 = metric == AssignMetric::SqL2;
    let first_c = tile_i * BLOCK_CENTROIDS;
    let tile_norms = unsafe { norms.add((tile_i % 2) * BLOCK_CENTROIDS) };
    let mut c_sq = [0f32; THREAD_CENTROIDS];
    let mut index = [0u32; THREAD_CENTROIDS];
    let mut valid = [false; THREAD_CENTROIDS];
    for q in 0..THREAD_CENTROIDS {
        let local = (q / 4) * 4 * tile.centroid_groups + tx * 4 + q % 4;
        index[q] = (first_c + local) as u32;
        valid[q] = first_c + local < a.k;
        if l2 {
            c_sq[q] = unsafe { *tile_norms.add(local) };
        }
    }
    rank(metric, acc, &c_sq, &index, &valid, best_score, best_index);
}

/// Merges a finished tile's candidates into each point's best: `acc[i][q]` is point `i` against
/// centroid `index[q]` (`c_sq` its squared norm, `valid` whether it exists). Branch-free, so the
/// loops unroll and `acc` stays in registers. A thread meets its candidates in increasing index
/// order (tile after tile, `index` increasing in `q`), so a strict `<` keeps the lower index on
/// ties, as `better` would.
#[cfg(any(test, target_arch = "nvptx64"))]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn rank<const THREAD_POINTS: usize, const THREAD_CENTROIDS: usize>(
    metric: AssignMetric,
    acc: &[[f32; THREAD_CENTROIDS]; THREAD_POINTS],
    c_sq: &[f32; THREAD_CENTROIDS],
    index: &[u32; THREAD_CENTROIDS],
    valid: &[bool; THREAD_CENTROIDS],
    best_score: &mut [f32; THREAD_POINTS],
    best_index: &mut [u32; THREAD_POINTS],
) {
    for i in 0..THREAD_POINTS {
        for q in 0..THREAD_CENTROIDS {
            let score = assign_score(metric, acc[i][q], c_sq[q]);
            let take = valid[q] && score < best_score[i];
            best_score[i] = if take { score } else { best_score[i] };
            best_index[i] = if take { index[q] } else { best_index[i] };
        }
    }
}

/// As [`accumulate`], with the centroid mapping of [`run_async`]: centroid slot `q = 4h + r` of
/// thread `tx` is column `h·4·centroid_groups + tx·4 + r` of the tile.
///
/// # Safety
/// As for [`accumulate`].
#[cfg(target_feature = "sm_80")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn accumulate_split<const THREAD_POINTS: usize, const THREAD_CENTROIDS: usize>(
    metric: AssignMetric,
    acc: &mut [[f32; THREAD_CENTROIDS]; THREAD_POINTS],
    xs: *const f32,
    cs: *const f32,
    jj: usize,
    tile: AssignTile,
    tx: usize,
    ty: usize,
) {
    let (xs_stride, cs_stride) = (tile.x_stride(), tile.c_stride());
    let centroid_groups = tile.centroid_groups;
    let xv: [f32; THREAD_POINTS] =
        unsafe { load_vec4s(xs.add(jj * xs_stride + ty * THREAD_POINTS)) };
    let mut cv = [0f32; THREAD_CENTROIDS];
    for h in 0..THREAD_CENTROIDS / 4 {
        let v: [f32; 4] =
            unsafe { load_vec4s(cs.add(jj * cs_stride + h * 4 * centroid_groups + tx * 4)) };
        cv[4 * h..4 * h + 4].copy_from_slice(&v);
    }
    for i in 0..THREAD_POINTS {
        for q in 0..THREAD_CENTROIDS {
            acc[i][q] = assign_step(metric, acc[i][q], xv[i], cv[q]);
        }
    }
}

/// Merges the centroid groups' candidates per point (lowest score, then lowest index), writes
/// labels, distances, moved labels (of points with weight) and the block's fixed-point inertia.
/// Kept whole at ~110 lines: moving even its last step into a helper changed the assign PTX.
///
/// # Safety
/// Every thread of the block calls this after its sweep; `merge_score` and `merge_index` hold
/// `points() × centroid_groups` words of shared memory that no thread touches any more;
/// `scratch` holds `2 × BLOCK` f64.
#[cfg(any(test, target_arch = "nvptx64"))]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn finish<E: Exec, const THREAD_POINTS: usize>(
    e: E,
    a: AssignArgs,
    metric: AssignMetric,
    tile: AssignTile,
    best_score: [f32; THREAD_POINTS],
    best_index: [u32; THREAD_POINTS],
    merge_score: *mut f32,
    merge_index: *mut u32,
    scratch: *mut f64,
) {
    let t = e.thread();
    let (tx, ty) = (t % tile.centroid_groups, t / tile.centroid_groups);
    let pb = tile.points();
    let first_point = e.block() * pb;
    // Merge the centroid groups' candidates per point, in group order.
    for i in 0..THREAD_POINTS {
        let p = ty * THREAD_POINTS + i;
        unsafe {
            *merge_score.add(p * tile.centroid_groups + tx) = best_score[i];
            *merge_index.add(p * tile.centroid_groups + tx) = best_index[i];
        }
    }
    e.sync();
    let mut moved = 0.0;
    let mut dist_sum = 0i64;
    let mut p = t;
    while p < pb {
        let i = first_point + p;
        if i < a.n {
            let (mut score, mut label) = (f32::INFINITY, u32::MAX);
            for g in 0..tile.centroid_groups {
                let (s, l) = unsafe {
                    (
                        *merge_score.add(p * tile.centroid_groups + g),
                        *merge_index.add(p * tile.centroid_groups + g),
                    )
                };
                if better(s, l, score, label) {
                    score = s;
                    label = l;
                }
            }
            if label == u32::MAX {
                // Every score was +inf (or NaN): the CPU's first-minimum scan keeps centroid 0.
                label = 0;
            }
            let x_sq = match metric {
                AssignMetric::SqL2 => unsafe { *a.x_sq_norms.add(i) },
                AssignMetric::L1 => 0.0,
            };
            let dist = assign_distance(metric, x_sq, score);
            let units = unsafe { units_at(a.weights, i) };
            unsafe {
                if *a.labels.add(i) != label && units != 0 {
                    moved += 1.0;
                }
                *a.labels.add(i) = label;
                *a.min_dist.add(i) = dist;
            }
            dist_sum = dist_sum.wrapping_add(inertia_term(dist, a.inertia_scale, units));
            // Thread `p` alone reads row `p` of the merge area, and is done with it.
            unsafe { *merge_index.add(p * tile.centroid_groups) = label };
        }
        p += BLOCK as usize;
    }
    if !a.sums.is_null() {
        // The update's sums, a warp per point (integer sums: the same in any order). The rows
        // were just read by this block, so they come from L2, and the atomics overlap the other
        // blocks' sweeps.
        e.sync();
        let (warp, lane) = (t / 32, t % 32);
        let mut p = warp;
        while p < pb {
            let i = first_point + p;
            if i < a.n {
                unsafe {
                    let label = *merge_index.add(p * tile.centroid_groups) as usize;
                    let units = units_at(a.weights, i);
                    let mut j = lane;
                    while j < a.d {
                        let q = to_fixed(*a.x.add(i * a.d + j), *a.scales.add(j));
                        let q = if a.weights.is_null() {
                            q
                        } else {
                            weighted(q, units)
                        };
                        atomic_add_i64(a.sums.add(label * a.d + j), q);
                        j += 32;
                    }
                    if lane == 0 {
                        atomic_add_u64(a.counts.add(label), units as u64);
                    }
                }
            }
            p += BLOCK as usize / 32;
        }
    }
    if !a.changed.is_null() {
        let total = unsafe { block_sum_f64(e, e.block_dim(), scratch, moved) };
        if t == 0 && total > 0.0 {
            unsafe { atomic_add_u32(a.changed, total as u32) };
        }
    }
    if !a.block_inertia.is_null() {
        let total =
            unsafe { block_sum_i64(e, e.block_dim(), scratch.add(BLOCK as usize), dist_sum) };
        if t == 0 {
            unsafe { *a.block_inertia.add(e.block()) = total };
        }
    }
}

/// Adds dimension `jj` of the staged tiles to the thread's `THREAD_POINTS × THREAD_CENTROIDS` accumulators.
///
/// # Safety
/// The tiles hold dimension `jj` at the strides given; `xs`, `cs` are 16-byte aligned.
#[cfg(any(test, all(target_arch = "nvptx64", not(target_feature = "sm_80"))))]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn accumulate<const THREAD_POINTS: usize, const THREAD_CENTROIDS: usize>(
    metric: AssignMetric,
    acc: &mut [[f32; THREAD_CENTROIDS]; THREAD_POINTS],
    xs: *const f32,
    cs: *const f32,
    jj: usize,
    xs_stride: usize,
    cs_stride: usize,
    tx: usize,
    ty: usize,
) {
    let xv: [f32; THREAD_POINTS] =
        unsafe { load_vec4s(xs.add(jj * xs_stride + ty * THREAD_POINTS)) };
    let cv: [f32; THREAD_CENTROIDS] =
        unsafe { load_vec4s(cs.add(jj * cs_stride + tx * THREAD_CENTROIDS)) };
    for i in 0..THREAD_POINTS {
        for q in 0..THREAD_CENTROIDS {
            acc[i][q] = assign_step(metric, acc[i][q], xv[i], cv[q]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::emu::launch;
    use crate::fixed::pow2_f32;
    use crate::launch::DEFAULT_SHARED_BYTES;
    use crate::math::sq_norm;

    /// Values on a coarse grid, so that exact distance ties between centroids happen.
    fn coarse(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7919 + seed * 104_729) % 9) as f32 * 0.5 - 2.0)
            .collect()
    }

    /// The CPU twin (`backend::cpu::kmeans::nearest`): the first centroid of the lowest score,
    /// each accumulated over the dimensions in order.
    fn nearest(metric: AssignMetric, row: &[f32], centroids: &[f32]) -> (u32, f32) {
        let d = row.len();
        let (mut best, mut label) = (f32::INFINITY, 0);
        for (c, cr) in centroids.chunks(d).enumerate() {
            let mut acc = 0.0;
            for j in 0..d {
                acc = assign_step(metric, acc, row[j], cr[j]);
            }
            let score = assign_score(metric, acc, sq_norm(cr));
            if score < best {
                (best, label) = (score, c as u32);
            }
        }
        let x_sq = match metric {
            AssignMetric::SqL2 => sq_norm(row),
            AssignMetric::L1 => 0.0,
        };
        (label, assign_distance(metric, x_sq, best))
    }

    /// The arguments, shared by the emulated threads (which synchronise their own accesses).
    struct Shared(AssignArgs);
    unsafe impl Sync for Shared {}

    impl Shared {
        fn args(&self) -> AssignArgs {
            self.0
        }
    }

    /// The sm_70 sweep of one tile shape in the emulator, with the update's sums fused, against
    /// the twins (`nearest`, `backend::cpu::kmeans::accumulate`).
    fn check<const P: usize, const C: usize>(tile: AssignTile, metric: AssignMetric) {
        // n not a multiple of the block's points, d = 1, d past a chunk, k = 1, k = n.
        for (n, d, k) in [(1, 1, 1), (37, 1, 5), (70, 19, 3), (40, 4, 40)] {
            let case = format!("{metric:?} {tile:?} n={n} d={d} k={k}");
            let (x, centroids) = (coarse(n * d, 1), coarse(k * d, 2));
            let x_sq: Vec<f32> = x.chunks(d).map(sq_norm).collect();
            let c_sq: Vec<f32> = centroids.chunks(d).map(sq_norm).collect();
            let inertia_scale = 1024.0;
            // Sample weights with zeros: those points neither count as changed nor add.
            let weights: Vec<f32> = (0..n).map(|i| (i % 3) as f32).collect();
            let scales = vec![pow2_f32(crate::fixed::scale_exponent(2.0, n)); d];
            let mut sums = vec![0i64; k * d];
            let mut counts = vec![0u64; k];
            let grid = tile.grid(n);
            let mut labels = vec![u32::MAX; n];
            let mut min_dist = vec![f32::NAN; n];
            let mut changed = [0u32];
            let mut block_inertia = vec![i64::MIN; grid];
            let args = AssignArgs {
                x: x.as_ptr(),
                x_sq_norms: x_sq.as_ptr(),
                n,
                d,
                centroids: centroids.as_ptr(),
                c_sq_norms: c_sq.as_ptr(),
                k,
                labels: labels.as_mut_ptr(),
                min_dist: min_dist.as_mut_ptr(),
                changed: changed.as_mut_ptr(),
                block_inertia: block_inertia.as_mut_ptr(),
                inertia_scale,
                weights: weights.as_ptr(),
                scales: scales.as_ptr(),
                sums: sums.as_mut_ptr(),
                counts: counts.as_mut_ptr(),
                centroids_t: core::ptr::null(),
                k_padded: 0,
            };
            let args = Shared(args);
            launch(grid, BLOCK as usize, tile.shared_bytes(), |e| unsafe {
                run::<_, P, C>(e, args.args(), metric, tile)
            });
            let want: Vec<(u32, f32)> = x
                .chunks(d)
                .map(|row| nearest(metric, row, &centroids))
                .collect();
            let got: Vec<(u32, f32)> = labels
                .iter()
                .copied()
                .zip(min_dist.iter().copied())
                .collect();
            assert_eq!(got, want, "{case}");
            // Every label differed from the u32::MAX it held; each point's inertia counts once.
            let units = |i: usize| weights[i] as i64;
            let moved = (0..n).filter(|&i| units(i) != 0).count();
            assert_eq!(changed[0] as usize, moved, "{case}");
            let inertia = (0..n).map(|i| inertia_term(want[i].1, inertia_scale, units(i)));
            assert_eq!(
                block_inertia.iter().sum::<i64>(),
                inertia.sum::<i64>(),
                "{case}"
            );
            let (mut want_sums, mut want_counts) = (vec![0i64; k * d], vec![0u64; k]);
            for (i, &(label, _)) in want.iter().enumerate() {
                want_counts[label as usize] += units(i) as u64;
                for j in 0..d {
                    let q = weighted(to_fixed(x[i * d + j], scales[j]), units(i));
                    want_sums[label as usize * d + j] += q;
                }
            }
            assert_eq!((sums, counts), (want_sums, want_counts), "{case}");
        }
    }

    #[test]
    fn emulated_assign_matches_the_cpu() {
        for metric in [AssignMetric::SqL2, AssignMetric::L1] {
            check::<{ ASSIGN_WIDE.points_per_thread }, { ASSIGN_WIDE.centroids_per_thread }>(
                ASSIGN_WIDE,
                metric,
            );
            check::<{ ASSIGN_NARROW.points_per_thread }, { ASSIGN_NARROW.centroids_per_thread }>(
                ASSIGN_NARROW,
                metric,
            );
        }
    }

    #[test]
    fn assign_tiles_fit_default_shared_memory() {
        for tile in [ASSIGN_WIDE, ASSIGN_NARROW] {
            assert!(tile.shared_bytes() <= DEFAULT_SHARED_BYTES, "{tile:?}");
            assert_eq!(BLOCK as usize % tile.centroid_groups, 0);
            assert!(
                tile.points_per_thread % 4 == 0 && tile.centroids_per_thread % 4 == 0,
                "vector loads of 4"
            );
        }
        assert_eq!(AssignTile::for_k(16), ASSIGN_NARROW);
        assert_eq!(AssignTile::for_k(17), ASSIGN_WIDE);
    }

    #[test]
    fn resident_point_tile_fits_two_blocks() {
        // d = 128 with two blocks per multiprocessor on sm_90 (228 KiB, 1 KiB reserved per block).
        assert!(2 * (ASSIGN_WIDE.resident_shared_bytes(128) + 1024) <= 228 * 1024);
        // Few dimensions: the resident layout fits in the streaming one's memory (the kernel then
        // keeps the tile resident at no cost).
        assert!(ASSIGN_WIDE.resident_shared_bytes(16) <= ASSIGN_WIDE.shared_bytes());
        assert!(ASSIGN_WIDE.resident_shared_bytes(129) > ASSIGN_WIDE.resident_shared_bytes(128));
    }
}
