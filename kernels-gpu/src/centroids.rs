//! The centroids as the exact assign kernels read them: transposed (`d × k_padded`, a row per
//! dimension), so that a chunk of dimensions for a tile of centroids is a run of 16-byte rows,
//! with their squared norms computed in the same pass.

use crate::exec::Exec;
use crate::launch::Kernel;
use crate::math::fma;
use crate::params::DevPtr;

/// Centroids per block of `kmeans_centroids_by_dimension`.
pub const CENTROID_LAYOUT_ROWS: usize = 32;
/// Dimensions that block stages at a time.
pub const CENTROID_LAYOUT_COLS: usize = 64;

/// Row stride (in f32) of the staged block: odd, so that reading a column hits distinct banks.
const STRIDE: usize = CENTROID_LAYOUT_COLS + 1;

/// Dynamic shared memory of a `kmeans_centroids_by_dimension` block: the staged rows.
pub const SHARED_BYTES: usize = CENTROID_LAYOUT_ROWS * STRIDE * 4;

/// The `kmeans_centroids_by_dimension` entry point. CPU twin:
/// `backend::cpu::kmeans::CentroidBlocks::new`.
pub const KMEANS_CENTROIDS_BY_DIMENSION: Kernel<CentroidsByDimensionParams> =
    Kernel::new("kmeans_centroids_by_dimension");

kernel_params! {
    /// `kmeans_centroids_by_dimension`'s parameters.
    pub struct CentroidsByDimensionParams {
        pub centroids: DevPtr<f32>,
        pub k: u32,
        pub d: u32,
        pub k_padded: u32,
        pub out: DevPtr<f32>,
        pub norms: DevPtr<f32>,
    }
    entries: centroids_by_dimension_entry;
}

/// Blocks of `kmeans_centroids_by_dimension` for `k` centroids: `CENTROID_LAYOUT_ROWS` per block.
pub const fn centroids_by_dimension_grid(k: usize) -> usize {
    k.div_ceil(CENTROID_LAYOUT_ROWS)
}

centroids_by_dimension_entry! {
    /// `out[j · k_padded + c] = centroids[c · d + j]` for `c < k` (columns `k..k_padded` are left as they are)
    /// and, with `norms` non-null, `norms[c] = Σ_j centroids[c][j]²` in dimension order, as
    /// `row_sq_norms` computes it. Block `b` handles centroids `b · CENTROID_LAYOUT_ROWS..`, staging
    /// `CENTROID_LAYOUT_COLS` dimensions at a time so both the reads and the writes coalesce.
    ///
    /// # Safety
    /// `ceil(k / CENTROID_LAYOUT_ROWS)` blocks of `BLOCK` threads with
    /// `CENTROID_LAYOUT_ROWS · (CENTROID_LAYOUT_COLS + 1) · 4` bytes of dynamic shared memory;
    /// `centroids` holds `k × d`, `out` `d × k_padded` (`k_padded ≥ k`), `norms` `k` values.
    fn kmeans_centroids_by_dimension(params) {
        unsafe { centroids_by_dimension(crate::exec::Gpu, &params) }
    }
}

/// The body of `kmeans_centroids_by_dimension`.
///
/// # Safety
/// As for `kmeans_centroids_by_dimension`.
#[inline(always)]
pub unsafe fn centroids_by_dimension<E: Exec>(ex: E, params: &CentroidsByDimensionParams) {
    let CentroidsByDimensionParams {
        centroids,
        k,
        d,
        k_padded,
        out,
        norms,
    } = *params;
    let (centroids, out, norms) = (centroids.as_ptr(), out.as_mut_ptr(), norms.as_mut_ptr());
    const ROWS: usize = CENTROID_LAYOUT_ROWS;
    const COLS: usize = CENTROID_LAYOUT_COLS;
    let (t, threads) = (ex.thread(), ex.block_dim());
    let (k, d, k_padded) = (k as usize, d as usize, k_padded as usize);
    let first = ex.block() * ROWS;
    let rows = k.saturating_sub(first).min(ROWS);
    let staged = ex.shared::<f32>();
    let mut norm = 0.0;
    let mut j0 = 0;
    while j0 < d {
        let width = COLS.min(d - j0);
        let mut e = t;
        while e < ROWS * COLS {
            let (r, jj) = (e / COLS, e % COLS);
            if r < rows && jj < width {
                unsafe { *staged.add(r * STRIDE + jj) = *centroids.add((first + r) * d + j0 + jj) };
            }
            e += threads;
        }
        ex.sync();
        let mut e = t;
        while e < ROWS * COLS {
            let (jj, r) = (e / ROWS, e % ROWS);
            if r < rows && jj < width {
                unsafe {
                    *out.add((j0 + jj) * k_padded + first + r) = *staged.add(r * STRIDE + jj)
                };
            }
            e += threads;
        }
        if !norms.is_null() && t < rows {
            for jj in 0..width {
                let v = unsafe { *staged.add(t * STRIDE + jj) };
                norm = fma(v, v, norm);
            }
        }
        ex.sync();
        j0 += width;
    }
    if !norms.is_null() && t < rows {
        unsafe { *norms.add(first + t) = norm };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::emu::launch;
    use crate::math::sq_norm;
    use crate::params::tests::{dev, dev_mut};

    #[test]
    fn emulated_layout_is_the_transpose_with_the_twins_norms() {
        // k not a multiple of the block's rows, d = 1, d past one staged chunk of dimensions.
        for (k, d) in [(1usize, 1usize), (3, 1), (33, 5), (70, 130)] {
            let centroids: Vec<f32> = (0..k * d)
                .map(|i| ((i * 7919) % 23) as f32 * 0.75 - 8.0)
                .collect();
            let k_padded = k.next_multiple_of(4);
            let mut out = vec![f32::NAN; d * k_padded];
            let mut norms = vec![f32::NAN; k];
            let p = CentroidsByDimensionParams {
                centroids: dev(&centroids),
                k: k as u32,
                d: d as u32,
                k_padded: k_padded as u32,
                out: dev_mut(&mut out),
                norms: dev_mut(&mut norms),
            };
            launch(
                centroids_by_dimension_grid(k),
                64,
                SHARED_BYTES,
                |e| unsafe { centroids_by_dimension(e, &p) },
            );
            for c in 0..k {
                for j in 0..d {
                    assert_eq!(out[j * k_padded + c], centroids[c * d + j], "k={k} d={d}");
                }
            }
            // The padding columns are left as they were.
            assert!((k..k_padded).all(|c| (0..d).all(|j| out[j * k_padded + c].is_nan())));
            let want: Vec<f32> = centroids.chunks(d).map(sq_norm).collect();
            assert_eq!(norms, want, "k={k} d={d}");
        }
    }
}
