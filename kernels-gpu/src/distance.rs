//! Pairwise distances, GEMM-style: a block owns `DIST_TILE` rows of A × `DIST_TILE` rows of B;
//! both tiles stream through shared memory `DIST_JC` dimensions at a time, transposed, and each
//! of the 256 threads accumulates an 8 × 8 register tile. The dot-product kernel serves the L2
//! family (`‖x‖² + ‖y‖² − 2·x·y`), inner product and cosine; the L1 kernel accumulates
//! `|x − y|` directly. Every output accumulates over the dimensions in order 0..d, exactly as the
//! CPU twin, so the distances are the same floats on both backends. Output offsets are 64-bit.

use crate::gpu::{self, shared, sync_threads};
use crate::knn::{DIST_BLOCK, DIST_JC, DIST_STRIDE, DIST_TILE, PairMetric, finish, pair_step};

/// Arguments shared by the distance entry points.
#[derive(Clone, Copy)]
struct Pair {
    a: *const f32,
    a_norms: *const f32,
    a_rows: usize,
    b: *const f32,
    b_norms: *const f32,
    b_first: usize,
    b_cols: usize,
    d: usize,
    metric: PairMetric,
    out: *mut f32,
    ld: usize,
}

macro_rules! distance_kernel {
    ($name:ident, $l1:expr) => {
        /// `out[i · ld + j] = dist(a[i], b[b_first + j])` for `i < a_rows`, `j < b_cols`; A and B
        /// are row-major with `d` columns; the norms are squared row norms (read only by the
        /// metrics that need them). Blocks cover `ceil(a_rows / 128) × ceil(b_cols / 128)`
        /// tiles, row tile major.
        ///
        /// # Safety
        /// Pointers valid for those sizes; `DIST_BLOCK` threads, `dist_blocks(a_rows, b_cols)`
        /// blocks, `dist_shared_bytes()` of dynamic shared memory.
        #[unsafe(no_mangle)]
        pub unsafe extern "gpu-kernel" fn $name(
            a: *const f32,
            a_norms: *const f32,
            a_rows: u32,
            b: *const f32,
            b_norms: *const f32,
            b_first: u32,
            b_cols: u32,
            d: u32,
            metric: u32,
            out: *mut f32,
            ld: u64,
        ) {
            let p = Pair {
                a,
                a_norms,
                a_rows: a_rows as usize,
                b,
                b_norms,
                b_first: b_first as usize,
                b_cols: b_cols as usize,
                d: (d as usize).max(1),
                metric: PairMetric::from_id(metric),
                out,
                ld: ld as usize,
            };
            unsafe { run::<$l1>(p) }
        }
    };
}

distance_kernel!(pairwise_dot, false);
distance_kernel!(pairwise_l1, true);

/// Rows per thread and columns per thread.
const TR: usize = 8;
const TC: usize = 8;
/// Column groups: thread `t` owns rows `(t / 16)·8 + i` and columns `h·64 + (t % 16)·4 + l`.
const GROUPS: usize = 16;

#[inline(always)]
unsafe fn run<const L1: bool>(p: Pair) {
    let t = gpu::thread();
    let (tx, ty) = (t % GROUPS, t / GROUPS);
    let col_tiles = p.b_cols.div_ceil(DIST_TILE).max(1);
    let blk = gpu::block();
    let row0 = (blk / col_tiles) * DIST_TILE;
    let col0 = (blk % col_tiles) * DIST_TILE;
    let a_tile = shared::<f32>();
    let b_tile = unsafe { a_tile.add(DIST_JC * DIST_STRIDE) };
    let b = unsafe { p.b.add(p.b_first * p.d) };

    let mut acc = [[0f32; TC]; TR];
    let mut j0 = 0;
    while j0 < p.d {
        let width = DIST_JC.min(p.d - j0);
        sync_threads();
        unsafe {
            load_transposed(p.a, p.a_rows, p.d, row0, j0, width, a_tile);
            load_transposed(b, p.b_cols, p.d, col0, j0, width, b_tile);
        }
        sync_threads();
        for jj in 0..width {
            let xv: [f32; TR] = unsafe { load_vec4s(a_tile.add(jj * DIST_STRIDE + ty * TR)) };
            let lo: [f32; 4] = unsafe { load_vec4s(b_tile.add(jj * DIST_STRIDE + tx * 4)) };
            let hi: [f32; 4] = unsafe { load_vec4s(b_tile.add(jj * DIST_STRIDE + 64 + tx * 4)) };
            let yv = [lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]];
            for i in 0..TR {
                for q in 0..TC {
                    acc[i][q] = pair_step(L1, acc[i][q], xv[i], yv[q]);
                }
            }
        }
        j0 += width;
    }

    let norms = !L1 && p.metric.needs_norms();
    let mut yn = [0f32; TC];
    for (q, y) in yn.iter_mut().enumerate() {
        let c = col0 + (q / 4) * 64 + tx * 4 + q % 4;
        if norms && c < p.b_cols {
            *y = unsafe { *p.b_norms.add(p.b_first + c) };
        }
    }
    for (i, row) in acc.iter().enumerate() {
        let r = row0 + ty * TR + i;
        if r < p.a_rows {
            let xn = if norms {
                unsafe { *p.a_norms.add(r) }
            } else {
                0.0
            };
            let out = unsafe { p.out.add(r * p.ld) };
            for (q, &v) in row.iter().enumerate() {
                let c = col0 + (q / 4) * 64 + tx * 4 + q % 4;
                if c < p.b_cols {
                    unsafe { *out.add(c) = finish(p.metric, v, xn, yn[q]) };
                }
            }
        }
    }
}

/// Four f32 that load as one 16-byte shared-memory access.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct Vec4([f32; 4]);

/// `N` consecutive f32 from `p` as `N / 4` vector loads.
///
/// # Safety
/// `p` is 16-byte aligned and valid for `N` values; `N` is a multiple of 4.
#[inline(always)]
unsafe fn load_vec4s<const N: usize>(p: *const f32) -> [f32; N] {
    let mut out = [0f32; N];
    let v = p.cast::<Vec4>();
    for h in 0..N / 4 {
        let Vec4(q) = unsafe { *v.add(h) };
        out[4 * h..4 * h + 4].copy_from_slice(&q);
    }
    out
}

/// Copies rows `first..first + DIST_TILE` (clipped to `total`), columns `j0..j0 + width` of a
/// row-major `total × d` matrix into shared memory transposed (`dst[jj · DIST_STRIDE + r]`),
/// zeros past the last row. Consecutive threads read consecutive columns of a row.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn load_transposed(
    src: *const f32,
    total: usize,
    d: usize,
    first: usize,
    j0: usize,
    width: usize,
    dst: *mut f32,
) {
    let width = width.max(1);
    let mut e = gpu::thread();
    while e < DIST_TILE * width {
        let (r, jj) = (e / width, e % width);
        let row = first + r;
        let v = if row < total {
            unsafe { *src.add(row * d + j0 + jj) }
        } else {
            0.0
        };
        unsafe { *dst.add(jj * DIST_STRIDE + r) = v };
        e += DIST_BLOCK as usize;
    }
}
