//! Squared row norms, the `‖x‖²` and `‖c‖²` of the GEMM form of squared L2, and their roots
//! (the kNN prefilter's error bound takes `‖x‖`).

use crate::exec::Exec;
use crate::launch::{BLOCK, Kernel};
use crate::params::DevPtr;
use crate::{math::fma, tile::for_each_in_row};

/// Values a thread loads before their multiply-adds (eight 16-byte loads in flight): a thread
/// owns a whole row, and one load at a time leaves it waiting a memory round trip per value.
const IN_FLIGHT: usize = 32;

/// The `row_sq_norms` entry point. CPU twin: `backend::cpu::kmeans::row_sq_norms`.
pub const ROW_SQ_NORMS: Kernel<RowSqNormsParams> = Kernel::new("row_sq_norms");

kernel_params! {
    /// `row_sq_norms`'s parameters: `x` holds `n × d` values and `out` `n`.
    pub struct RowSqNormsParams {
        pub x: DevPtr<f32>,
        pub n: u32,
        pub d: u32,
        pub out: DevPtr<f32>,
    }
    entries: row_sq_norms_entry;
}

/// Blocks of `row_sq_norms` for `n` rows: a thread per row.
pub const fn row_sq_norms_grid(n: usize) -> usize {
    n.div_ceil(BLOCK as usize)
}

row_sq_norms_entry! {
    /// `out[i] = Σ_j x[i][j]²` over the `n` rows of row-major `x` (`d` columns), in dimension order.
    ///
    /// # Safety
    /// [`RowSqNormsParams`]; one thread per row.
    fn row_sq_norms(params) {
        unsafe { sq_norms(crate::exec::Gpu, &params) }
    }
}

/// The body of `row_sq_norms`: a thread per row.
///
/// # Safety
/// As for `row_sq_norms`.
#[inline(always)]
pub unsafe fn sq_norms<E: Exec>(e: E, params: &RowSqNormsParams) {
    let RowSqNormsParams { x, n, d, out } = *params;
    let (x, out) = (x.as_ptr(), out.as_mut_ptr());
    let i = e.block() * e.block_dim() + e.thread();
    if i >= n as usize {
        return;
    }
    let d = d as usize;
    let row = unsafe { x.add(i * d) };
    let mut acc = 0.0;
    unsafe { for_each_in_row::<IN_FLIGHT>(row, d, |v| acc = fma(v, v, acc)) };
    unsafe { *out.add(i) = acc };
}

/// The `row_norm_roots` entry point. CPU twin: [`crate::math::sqrt`] of each norm.
pub const ROW_NORM_ROOTS: Kernel<RowNormRootsParams> = Kernel::new("row_norm_roots");

kernel_params! {
    /// `row_norm_roots`'s parameters: `sq_norms` and `out` hold `n` values.
    pub struct RowNormRootsParams {
        pub sq_norms: DevPtr<f32>,
        pub n: u32,
        pub out: DevPtr<f32>,
    }
    entries: row_norm_roots_entry;
}

row_norm_roots_entry! {
    /// `out[i] = sqrt(sq_norms[i])` (correctly rounded, as [`crate::math::sqrt`] on the CPU) for
    /// `i < n`, a thread per value: computed where the norms are, so an index built beside a
    /// running search needs no round trip through the host.
    ///
    /// # Safety
    /// [`RowNormRootsParams`]; one thread per value (blocks of [`row_sq_norms_grid`]).
    fn row_norm_roots(params) {
        unsafe { norm_roots(crate::exec::Gpu, &params) }
    }
}

/// The body of `row_norm_roots`: a thread per value.
///
/// # Safety
/// As for `row_norm_roots`.
#[inline(always)]
pub unsafe fn norm_roots<E: Exec>(e: E, params: &RowNormRootsParams) {
    let RowNormRootsParams { sq_norms, n, out } = *params;
    let (sq_norms, out) = (sq_norms.as_ptr(), out.as_mut_ptr());
    let i = e.block() * e.block_dim() + e.thread();
    if i < n as usize {
        unsafe { *out.add(i) = crate::math::sqrt(*sq_norms.add(i)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::emu::launch;
    use crate::math::{sq_norm, sqrt};
    use crate::params::tests::{dev, dev_mut};

    /// Rows on a coarse grid with a few large values, some rows off the 16-byte alignment.
    fn rows(len: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7919) % 13) as f32 * 0.375 - 2.0 + (i % 5 == 0) as u8 as f32 * 1e3)
            .collect()
    }

    #[test]
    fn emulated_norms_and_roots_equal_the_twins() {
        // n not a multiple of the block, d = 1, d past IN_FLIGHT, odd d (unaligned rows).
        for (n, d, threads) in [
            (1, 1, 32),
            (37, 1, 32),
            (70, 3, 64),
            (9, 33, 32),
            (40, 70, 32),
        ] {
            let x = rows(n * d);
            let mut norms = vec![f32::NAN; n];
            let mut roots = vec![f32::NAN; n];
            let grid = n.div_ceil(threads);
            let p = RowSqNormsParams {
                x: dev(&x),
                n: n as u32,
                d: d as u32,
                out: dev_mut(&mut norms),
            };
            launch(grid, threads, 0, |e| unsafe { sq_norms(e, &p) });
            let want: Vec<f32> = x.chunks(d).map(sq_norm).collect();
            assert_eq!(norms, want, "n={n} d={d}");
            let p = RowNormRootsParams {
                sq_norms: dev(&norms),
                n: n as u32,
                out: dev_mut(&mut roots),
            };
            launch(grid, threads, 0, |e| unsafe { norm_roots(e, &p) });
            let want: Vec<f32> = norms.iter().map(|&v| sqrt(v)).collect();
            assert_eq!(roots, want, "n={n} d={d}");
        }
    }
}
