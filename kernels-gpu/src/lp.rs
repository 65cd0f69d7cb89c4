//! The Chebyshev and general Minkowski distances: `max_j |x_j − y_j|`, and
//! `(Σ_j |x_j − y_j|^p)^(1/p)` for a real `p ≥ 1`.
//!
//! Both accumulate over the dimensions in order 0..d, as the other distances: Chebyshev the f32
//! maximum (exact, so any order gives the same float), Minkowski each `|x − y|^p` in f64
//! ([`crate::powers`], from an exact f64 difference) summed in f64, then the root rounded to f32.
//! The f64 sum keeps a large `p` from overflowing where f32 would (`9^41` already does).
//!
//! The kernels `pairwise_chebyshev` and `pairwise_minkowski` have the tile shape of
//! [`crate::distance`] (128 × 128 outputs per 256-thread block, 8 × 8 per thread, 16-dimension
//! chunks of both tiles transposed through shared memory) and need no norms. The CPU twin calls
//! [`distance`] per pair.

use crate::distance::{GROUPS, TC, TR, operands};
use crate::exec::Exec;
use crate::knn::{DIST_BLOCK, DIST_JC, DIST_STRIDE, DIST_TILE};
use crate::launch::Kernel;
use crate::params::DevPtr;
use crate::tile::load_transposed;

pub use crate::lp_distance::{Chebyshev, LpAccumulate, Minkowski, MinkowskiP, distance};

/// Arguments of `pairwise_chebyshev` and `pairwise_minkowski`: as [`crate::distance::Pair`]
/// without the norms.
#[derive(Clone, Copy)]
pub struct LpPair {
    pub a: *const f32,
    pub a_rows: usize,
    pub b: *const f32,
    pub b_first: usize,
    pub b_cols: usize,
    pub d: usize,
    pub out: *mut f32,
    pub ld: usize,
}

kernel_params! {
    /// `pairwise_chebyshev`'s parameters: as [`crate::distance::PairwiseParams`] without the norms
    /// and the metric.
    pub struct ChebyshevParams {
        pub a: DevPtr<f32>,
        pub a_rows: u32,
        pub b: DevPtr<f32>,
        pub b_first: u32,
        pub b_cols: u32,
        pub d: u32,
        pub out: DevPtr<f32>,
        pub ld: u64,
    }
    entries: chebyshev_entry;
}

kernel_params! {
    /// `pairwise_minkowski`'s parameters: [`ChebyshevParams`]' with the exponent `p` before `out`.
    pub struct MinkowskiParams {
        pub a: DevPtr<f32>,
        pub a_rows: u32,
        pub b: DevPtr<f32>,
        pub b_first: u32,
        pub b_cols: u32,
        pub d: u32,
        pub p: f64,
        pub out: DevPtr<f32>,
        pub ld: u64,
    }
    entries: minkowski_entry;
}

/// The [`LpPair`] of either kernel's parameters (which share these fields).
#[cfg(target_arch = "nvptx64")]
macro_rules! lp_pair {
    ($params:expr) => {
        LpPair {
            a: $params.a.as_ptr(),
            a_rows: $params.a_rows as usize,
            b: $params.b.as_ptr(),
            b_first: $params.b_first as usize,
            b_cols: $params.b_cols as usize,
            d: ($params.d as usize).max(1),
            out: $params.out.as_mut_ptr(),
            ld: $params.ld as usize,
        }
    };
}

/// The `pairwise_chebyshev` entry point. CPU twin: `backend::cpu::knn::panel_distances`.
pub const PAIRWISE_CHEBYSHEV: Kernel<ChebyshevParams> =
    Kernel::new("pairwise_chebyshev").threads(DIST_BLOCK);

chebyshev_entry! {
    /// `out[i · ld + j] = max_t |a[i][t] − b[b_first + j][t]|`; launch as `pairwise_dot`.
    ///
    /// # Safety
    /// As for [`pairwise_lp`].
    fn pairwise_chebyshev(params) {
        let args = lp_pair!(params);
        unsafe { pairwise_lp(crate::exec::Gpu, Chebyshev, args) }
    }
}

/// The `pairwise_minkowski` entry point. CPU twin: `backend::cpu::knn::panel_distances`.
pub const PAIRWISE_MINKOWSKI: Kernel<MinkowskiParams> =
    Kernel::new("pairwise_minkowski").threads(DIST_BLOCK);

minkowski_entry! {
    /// `out[i · ld + j] = (Σ_t |a[i][t] − b[b_first + j][t]|^p)^(1/p)`; launch as `pairwise_dot`.
    ///
    /// # Safety
    /// As for [`pairwise_lp`]; `p` finite and at least 1.
    fn pairwise_minkowski(params) {
        let args = lp_pair!(params);
        unsafe { pairwise_lp(crate::exec::Gpu, Minkowski(MinkowskiP(params.p)), args) }
    }
}

/// One dimension (`jj` of the chunk in shared memory) of thread `(tx, ty)`'s 8 × 8 outputs.
///
/// # Safety
/// The tiles hold the chunk as [`pairwise_lp`] loads it.
#[inline(always)]
unsafe fn step_dimension<A: LpAccumulate>(
    acc_of: A,
    acc: &mut [[A::Acc; TC]; TR],
    a_tile: *const f32,
    b_tile: *const f32,
    jj: usize,
    tx: usize,
    ty: usize,
) {
    let (xv, yv) = unsafe { operands(a_tile, b_tile, jj, tx, ty) };
    for i in 0..TR {
        for q in 0..TC {
            acc[i][q] = acc_of.step(acc[i][q], xv[i], yv[q]);
        }
    }
}

/// The body of the Lp distance kernels: [`crate::distance::pairwise`]'s tiles, with `acc`'s
/// step per dimension and its finish per output.
///
/// # Safety
/// `DIST_BLOCK` threads per block, `dist_blocks(a_rows, b_cols)` blocks, `dist_shared_bytes()`
/// of 16-byte-aligned shared memory, pointers valid for the sizes.
#[inline(always)]
pub unsafe fn pairwise_lp<A: LpAccumulate, E: Exec>(e: E, acc_of: A, p: LpPair) {
    let t = e.thread();
    let (tx, ty) = (t % GROUPS, t / GROUPS);
    let col_tiles = p.b_cols.div_ceil(DIST_TILE).max(1);
    let blk = e.block();
    let row0 = (blk / col_tiles) * DIST_TILE;
    let col0 = (blk % col_tiles) * DIST_TILE;
    let a_tile = e.shared::<f32>();
    let b_tile = unsafe { a_tile.add(DIST_JC * DIST_STRIDE) };
    let b = unsafe { p.b.add(p.b_first * p.d) };
    let threads = DIST_BLOCK as usize;

    let mut acc = [[A::START; TC]; TR];
    let mut j0 = 0;
    while j0 < p.d {
        let width = DIST_JC.min(p.d - j0);
        e.sync();
        unsafe {
            let (a, ar, bc) = (p.a, p.a_rows, p.b_cols);
            load_transposed::<DIST_JC>(
                t,
                threads,
                a,
                ar,
                p.d,
                row0,
                DIST_TILE,
                j0,
                width,
                a_tile,
                DIST_STRIDE,
            );
            load_transposed::<DIST_JC>(
                t,
                threads,
                b,
                bc,
                p.d,
                col0,
                DIST_TILE,
                j0,
                width,
                b_tile,
                DIST_STRIDE,
            );
        }
        e.sync();
        // As in `distance::pairwise`: a full chunk's constant trip count lets it unroll.
        if A::UNROLL && width == DIST_JC {
            for jj in 0..DIST_JC {
                unsafe { step_dimension(acc_of, &mut acc, a_tile, b_tile, jj, tx, ty) };
            }
        } else {
            for jj in 0..width {
                unsafe { step_dimension(acc_of, &mut acc, a_tile, b_tile, jj, tx, ty) };
            }
        }
        j0 += width;
    }

    for (i, row) in acc.iter().enumerate() {
        let r = row0 + ty * TR + i;
        if r < p.a_rows {
            let out = unsafe { p.out.add(r * p.ld) };
            for (q, &v) in row.iter().enumerate() {
                let c = col0 + (q / 4) * 64 + tx * 4 + q % 4;
                if c < p.b_cols {
                    unsafe { *out.add(c) = acc_of.finish(v) };
                }
            }
        }
    }
}

#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests {
    use super::*;
    use crate::exec::emu::{P, launch};
    use crate::knn::{dist_blocks, dist_shared_bytes};

    /// Values on a coarse grid (duplicate rows and tied distances) or spread over [−1, 1].
    fn data(n: usize, d: usize, seed: u32, grid: bool) -> Vec<f32> {
        (0..n * d)
            .map(|i| {
                let h = (i as u32 ^ seed).wrapping_mul(2_654_435_761) >> 8;
                if grid {
                    (h % 3) as f32
                } else {
                    (h % 2001) as f32 / 1000.0 - 1.0
                }
            })
            .collect()
    }

    /// Runs the kernel body in the emulator and compares every output with [`distance`].
    fn check<A: LpAccumulate + Send + Sync>(acc: A, m: usize, n: usize, d: usize, grid: bool) {
        let b_first = 5;
        let a = data(m, d, 1, grid);
        let b = data(b_first + n, d, 2, grid);
        let ld = n + 3;
        let mut out = vec![f32::NAN; m * ld];
        let args = LpPair {
            a: a.as_ptr(),
            a_rows: m,
            b: b.as_ptr(),
            b_first,
            b_cols: n,
            d,
            out: out.as_mut_ptr(),
            ld,
        };
        let args = P(&args as *const LpPair as *mut LpPair);
        launch(
            dist_blocks(m, n),
            DIST_BLOCK as usize,
            dist_shared_bytes(),
            |x| unsafe { pairwise_lp(x, acc, *args.get()) },
        );
        for i in 0..m {
            for j in 0..n {
                let want = distance(acc, &a[i * d..(i + 1) * d], &b[(b_first + j) * d..][..d]);
                let got = out[i * ld + j];
                assert_eq!(got.to_bits(), want.to_bits(), "{m}×{n}×{d} ({i}, {j})");
            }
            assert!(out[i * ld + n..(i + 1) * ld].iter().all(|v| v.is_nan()));
        }
    }

    #[test]
    fn emulated_tiles_match_the_plain_distance() {
        let p = |v| Minkowski(MinkowskiP::new(v).unwrap());
        for grid in [false, true] {
            check(Chebyshev, 3, 5, 1, grid);
            check(Chebyshev, 130, 129, 17, grid);
            check(p(3.0), 3, 5, 1, grid);
            check(p(1.5), 130, 129, 17, grid);
            check(p(7.25), 1, 300, 40, grid);
        }
    }

    #[test]
    fn distances_by_hand() {
        let (x, y) = ([1.0f32, -2.0, 3.0], [4.0f32, 2.0, 3.0]);
        assert_eq!(distance(Chebyshev, &x, &y), 4.0);
        assert_eq!(distance(Chebyshev, &x, &x), 0.0);
        let p3 = Minkowski(MinkowskiP::new(3.0).unwrap());
        // (27 + 64)^(1/3)
        assert_eq!(distance(p3, &x, &y), 91f64.cbrt() as f32);
        assert_eq!(distance(p3, &x, &x), 0.0);
        let p1 = Minkowski(MinkowskiP::new(1.0).unwrap());
        assert_eq!(distance(p1, &x, &y), 7.0);
        // A large p on large differences: the f64 sum does not overflow.
        let p50 = Minkowski(MinkowskiP::new(50.0).unwrap());
        let far = distance(p50, &[0.0, 0.0], &[1e6, 1e6]);
        assert!(
            (far as f64 - 1e6 * 2f64.powf(1.0 / 50.0)).abs() < 1.0,
            "{far}"
        );
    }

    #[test]
    fn exponents_below_one_or_not_finite_are_refused() {
        for p in [0.999, 0.0, -2.0, f64::NAN, f64::INFINITY] {
            assert!(MinkowskiP::new(p).is_none(), "{p}");
        }
        assert_eq!(MinkowskiP::new(1.0).map(MinkowskiP::get), Some(1.0));
    }
}
