//! Pairwise distances, GEMM-style: a block owns `DIST_TILE` rows of A × `DIST_TILE` rows of B;
//! both tiles stream through shared memory `DIST_JC` dimensions at a time, transposed (on sm_80
//! and later copied with `cp.async` into two buffers, the next chunk while the current one is
//! multiplied), and each of the 256 threads accumulates an 8 × 8 register tile. The dot-product kernel serves the L2
//! family (`‖x‖² + ‖y‖² − 2·x·y`), inner product and cosine; the L1 kernel accumulates
//! `|x − y|` directly. Every output accumulates over the dimensions in order 0..d, exactly as the
//! CPU twin, so the distances are the same floats on both backends. Output offsets are 64-bit.

use crate::exec::Exec;
use crate::knn::{DIST_BLOCK, DIST_JC, DIST_STRIDE, DIST_TILE, PairMetric, finish, pair_step};
use crate::launch::Kernel;
use crate::params::DevPtr;
#[cfg(any(not(target_arch = "nvptx64"), not(target_feature = "sm_80")))]
use crate::tile::load_transposed;
use crate::tile::load_vec4s;

/// Arguments of the distance kernels `pairwise_dot` and `pairwise_l1`.
#[derive(Clone, Copy)]
pub struct Pair {
    pub a: *const f32,
    pub a_norms: *const f32,
    pub a_rows: usize,
    pub b: *const f32,
    pub b_norms: *const f32,
    pub b_first: usize,
    pub b_cols: usize,
    pub d: usize,
    pub metric: PairMetric,
    pub out: *mut f32,
    pub ld: usize,
}

kernel_params! {
    /// The parameters of `pairwise_dot` and `pairwise_l1`: rows `0..a_rows` of `a` against rows
    /// `b_first..b_first + b_cols` of `b` (both row-major, `d` columns) into `out` (row stride
    /// `ld`), for `metric` (a [`PairMetric`] id). The squared row norms are read only by the
    /// metrics that need them. [`crate::lp`]'s kernels take the same without norms and metric.
    pub struct PairwiseParams {
        pub a: DevPtr<f32>,
        pub a_norms: DevPtr<f32>,
        pub a_rows: u32,
        pub b: DevPtr<f32>,
        pub b_norms: DevPtr<f32>,
        pub b_first: u32,
        pub b_cols: u32,
        pub d: u32,
        pub metric: u32,
        pub out: DevPtr<f32>,
        pub ld: u64,
    }
    entries: pairwise_entry;
}

macro_rules! distance_kernel {
    ($entry:ident, $name:ident, $l1:expr) => {
        #[doc = concat!("The `", stringify!($name), "` entry point. CPU twin: `backend::cpu::knn::panel_distances`.")]
        pub const $entry: Kernel<PairwiseParams> =
            Kernel::new(stringify!($name)).threads(DIST_BLOCK).min_blocks(2);

        pairwise_entry! {
            /// `out[i · ld + j] = dist(a[i], b[b_first + j])` for `i < a_rows`, `j < b_cols`; A and B
            /// are row-major with `d` columns; the norms are squared row norms (read only by the
            /// metrics that need them). Blocks cover `ceil(a_rows / 128) × ceil(b_cols / 128)`
            /// tiles, row tile major.
            ///
            /// # Safety
            /// Pointers valid for those sizes; `DIST_BLOCK` threads, `dist_blocks(a_rows, b_cols)`
            /// blocks, `dist_shared_bytes()` of dynamic shared memory.
            fn $name(params) {
                let PairwiseParams {
                    a,
                    a_norms,
                    a_rows,
                    b,
                    b_norms,
                    b_first,
                    b_cols,
                    d,
                    metric,
                    out,
                    ld,
                } = params;
                let p = Pair {
                    a: a.as_ptr(),
                    a_norms: a_norms.as_ptr(),
                    a_rows: a_rows as usize,
                    b: b.as_ptr(),
                    b_norms: b_norms.as_ptr(),
                    b_first: b_first as usize,
                    b_cols: b_cols as usize,
                    d: (d as usize).max(1),
                    metric: PairMetric::from_id(metric),
                    out: out.as_mut_ptr(),
                    ld: ld as usize,
                };
                #[cfg(target_feature = "sm_80")]
                unsafe { pairwise_async::<$l1, _>(crate::exec::Gpu, p) }
                #[cfg(not(target_feature = "sm_80"))]
                unsafe { pairwise::<$l1, _>(crate::exec::Gpu, p) }
            }
        }
    };
}

distance_kernel!(PAIRWISE_DOT, pairwise_dot, false);
distance_kernel!(PAIRWISE_L1, pairwise_l1, true);

/// Rows per thread and columns per thread (also [`crate::lp`]'s).
pub(crate) const TR: usize = 8;
pub(crate) const TC: usize = 8;
/// Column groups: thread `t` owns rows `(t / 16)·8 + i` and columns `h·64 + (t % 16)·4 + l`.
pub(crate) const GROUPS: usize = 16;

/// Thread `(tx, ty)`'s operands of dimension `jj` of a transposed chunk: its 8 rows of A and its
/// 8 columns (rows of B), as four 16-byte shared loads.
///
/// # Safety
/// `a_tile` and `b_tile` hold the chunk, `DIST_STRIDE` floats a dimension, 16-byte aligned.
#[inline(always)]
pub(crate) unsafe fn operands(
    a_tile: *const f32,
    b_tile: *const f32,
    jj: usize,
    tx: usize,
    ty: usize,
) -> ([f32; TR], [f32; TC]) {
    let xv: [f32; TR] = unsafe { load_vec4s(a_tile.add(jj * DIST_STRIDE + ty * TR)) };
    let lo: [f32; 4] = unsafe { load_vec4s(b_tile.add(jj * DIST_STRIDE + tx * 4)) };
    let hi: [f32; 4] = unsafe { load_vec4s(b_tile.add(jj * DIST_STRIDE + 64 + tx * 4)) };
    (xv, [lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]])
}

/// The first row of A and of B (output column) of block `blk`'s tile.
#[inline(always)]
fn tile_origin(blk: usize, b_cols: usize) -> (usize, usize) {
    let col_tiles = b_cols.div_ceil(DIST_TILE).max(1);
    ((blk / col_tiles) * DIST_TILE, (blk % col_tiles) * DIST_TILE)
}

/// The body of the distance kernels (`L1`: `pairwise_l1`, else `pairwise_dot`) before sm_80:
/// each chunk loaded, then multiplied, between barriers.
///
/// # Safety
/// As for the kernels: `DIST_BLOCK` threads per block, `dist_blocks(a_rows, b_cols)` blocks,
/// `dist_shared_bytes()` of 16-byte-aligned shared memory, pointers valid for the sizes.
#[cfg(any(not(target_arch = "nvptx64"), not(target_feature = "sm_80")))]
#[inline(always)]
pub unsafe fn pairwise<const L1: bool, E: Exec>(e: E, p: Pair) {
    let t = e.thread();
    let (row0, col0) = tile_origin(e.block(), p.b_cols);
    let a_tile = e.shared::<f32>();
    let b_tile = unsafe { a_tile.add(DIST_JC * DIST_STRIDE) };
    let b = unsafe { p.b.add(p.b_first * p.d) };

    let mut acc = [[0f32; TC]; TR];
    let mut j0 = 0;
    while j0 < p.d {
        let width = DIST_JC.min(p.d - j0);
        e.sync();
        unsafe {
            let threads = DIST_BLOCK as usize;
            let (rows, stride) = (DIST_TILE, DIST_STRIDE);
            load_transposed::<DIST_JC>(
                t, threads, p.a, p.a_rows, p.d, row0, rows, j0, width, a_tile, stride,
            );
            load_transposed::<DIST_JC>(
                t, threads, b, p.b_cols, p.d, col0, rows, j0, width, b_tile, stride,
            );
        }
        e.sync();
        unsafe { accumulate_chunk::<L1>(&mut acc, a_tile, b_tile, width, t) };
        j0 += width;
    }
    unsafe { write_tile::<L1>(&p, &acc, row0, col0, t) };
}

/// The body of the distance kernels on sm_80 and later: as [`pairwise`], with both tiles' next
/// chunk copied (`cp.async`, two buffers) while the current one is multiplied.
///
/// # Safety
/// As for [`pairwise`].
#[cfg(any(test, all(target_arch = "nvptx64", target_feature = "sm_80")))]
#[inline(always)]
pub unsafe fn pairwise_async<const L1: bool, E: Exec>(e: E, p: Pair) {
    use crate::cp_async::{commit, copy_transposed, shared_addr, wait_group};
    const THREADS: usize = DIST_BLOCK as usize;
    // Floats of one buffer: the chunk of A, then the chunk of B.
    const STAGE: usize = 2 * DIST_JC * DIST_STRIDE;
    let t = e.thread();
    let (row0, col0) = tile_origin(e.block(), p.b_cols);
    let bufs = e.shared::<f32>();
    let bufs_addr = shared_addr(bufs);
    let b = unsafe { p.b.add(p.b_first * p.d) };
    let chunks = p.d.div_ceil(DIST_JC);
    let width_of = |c: usize| DIST_JC.min(p.d - c * DIST_JC);

    // Chunk `c` goes to buffer `c % 2`.
    let issue = |c: usize| {
        let (j0, width) = (c * DIST_JC, width_of(c));
        let a_at = bufs_addr + (4 * (c % 2) * STAGE) as u32;
        let b_at = a_at + (4 * DIST_JC * DIST_STRIDE) as u32;
        unsafe {
            copy_transposed::<DIST_TILE, DIST_JC, THREADS>(
                t,
                p.a,
                p.a_rows,
                p.d,
                row0,
                j0,
                width,
                a_at,
                DIST_STRIDE,
            );
            copy_transposed::<DIST_TILE, DIST_JC, THREADS>(
                t,
                b,
                p.b_cols,
                p.d,
                col0,
                j0,
                width,
                b_at,
                DIST_STRIDE,
            );
        }
        commit();
    };

    issue(0);
    let mut acc = [[0f32; TC]; TR];
    for c in 0..chunks {
        // This thread's copies of chunk `c` have landed; after the barrier everybody's have,
        // and every thread is done with chunk `c - 1`'s buffer, which the next issue refills.
        wait_group::<0>();
        e.sync();
        if c + 1 < chunks {
            issue(c + 1);
        }
        let a_tile = unsafe { bufs.add((c % 2) * STAGE) };
        let b_tile = unsafe { a_tile.add(DIST_JC * DIST_STRIDE) };
        unsafe { accumulate_chunk::<L1>(&mut acc, a_tile, b_tile, width_of(c), t) };
    }
    unsafe { write_tile::<L1>(&p, &acc, row0, col0, t) };
}

/// Adds the `width` dimensions of one transposed chunk to thread `t`'s 8 × 8 tile.
///
/// # Safety
/// `a_tile` and `b_tile` hold `width` rows of `DIST_STRIDE` floats, 16-byte aligned.
#[inline(always)]
unsafe fn accumulate_chunk<const L1: bool>(
    acc: &mut [[f32; TC]; TR],
    a_tile: *const f32,
    b_tile: *const f32,
    width: usize,
    t: usize,
) {
    let (tx, ty) = (t % GROUPS, t / GROUPS);
    // A full chunk has a constant trip count, so it unrolls and the shared loads of one
    // dimension overlap the multiply-adds of the previous one.
    let step = |acc: &mut [[f32; TC]; TR], jj: usize| {
        let (xv, yv) = unsafe { operands(a_tile, b_tile, jj, tx, ty) };
        for i in 0..TR {
            for q in 0..TC {
                acc[i][q] = pair_step(L1, acc[i][q], xv[i], yv[q]);
            }
        }
    };
    if width == DIST_JC {
        for jj in 0..DIST_JC {
            step(acc, jj);
        }
    } else {
        for jj in 0..width {
            step(acc, jj);
        }
    }
}

/// Writes thread `t`'s finished 8 × 8 tile of the block at (`row0`, `col0`).
///
/// # Safety
/// As for the kernels.
#[inline(always)]
unsafe fn write_tile<const L1: bool>(
    p: &Pair,
    acc: &[[f32; TC]; TR],
    row0: usize,
    col0: usize,
    t: usize,
) {
    let (tx, ty) = (t % GROUPS, t / GROUPS);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::emu::{P, launch};
    use crate::knn::{dist_blocks, dist_shared_bytes, distance};
    use crate::math::sq_norm;

    fn data(n: usize, d: usize, seed: u32) -> Vec<f32> {
        (0..n * d)
            .map(|i| {
                let h = (i as u32 ^ seed).wrapping_mul(2_654_435_761) >> 8;
                (h % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    /// Runs the kernel body in the emulator and compares every output with the plain formula.
    fn check(m: usize, n: usize, d: usize, b_first: usize, metric: PairMetric) {
        check_body(m, n, d, b_first, metric, false);
        check_body(m, n, d, b_first, metric, true);
    }

    /// `check` for one body: `pairwise_async` (sm_80 and later) with `staged`, else `pairwise`.
    fn check_body(m: usize, n: usize, d: usize, b_first: usize, metric: PairMetric, staged: bool) {
        let a = data(m, d, 1);
        let b = data(b_first + n, d, 2);
        let a_norms: Vec<f32> = a.chunks(d).map(sq_norm).collect();
        let b_norms: Vec<f32> = b.chunks(d).map(sq_norm).collect();
        let ld = n + 3;
        let mut out = vec![f32::NAN; m * ld];
        let args = Pair {
            a: a.as_ptr(),
            a_norms: a_norms.as_ptr(),
            a_rows: m,
            b: b.as_ptr(),
            b_norms: b_norms.as_ptr(),
            b_first,
            b_cols: n,
            d,
            metric,
            out: out.as_mut_ptr(),
            ld,
        };
        let args = P(&args as *const Pair as *mut Pair);
        launch(
            dist_blocks(m, n),
            DIST_BLOCK as usize,
            dist_shared_bytes(),
            |x| {
                let p = unsafe { *args.get() };
                unsafe {
                    match (metric.is_l1(), staged) {
                        (true, false) => pairwise::<true, _>(x, p),
                        (false, false) => pairwise::<false, _>(x, p),
                        (true, true) => pairwise_async::<true, _>(x, p),
                        (false, true) => pairwise_async::<false, _>(x, p),
                    }
                }
            },
        );
        for i in 0..m {
            for j in 0..n {
                let want = distance(metric, &a[i * d..(i + 1) * d], &b[(b_first + j) * d..][..d]);
                let got = out[i * ld + j];
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{metric:?} {m}×{n}×{d} ({i}, {j}), staged {staged}"
                );
            }
            assert!(
                out[i * ld + n..(i + 1) * ld].iter().all(|v| v.is_nan()),
                "wrote past the row"
            );
        }
    }

    #[test]
    fn emulated_tiles_match_the_formula() {
        for metric in [
            PairMetric::SqEuclidean,
            PairMetric::Euclidean,
            PairMetric::L1,
            PairMetric::InnerProduct,
            PairMetric::Cosine,
        ] {
            check(3, 5, 1, 0, metric);
            check(130, 129, 17, 7, metric);
            check(5, 130, 40, 1, metric);
        }
        check(1, 300, 40, 2, PairMetric::L1);
    }
}
