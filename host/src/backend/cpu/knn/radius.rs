//! Radius search on the CPU: the twin of `knn_radius_count` and `knn_radius_fill`. Distances are
//! the search's ([`panel_distances`], the same floats as the GPU's), compared with the radius by
//! the kernels' own [`within`].

use super::{BLOCK_ROWS, Block, CpuKnn, QUERY_CHUNK, panel_distances, row_norms};
use crate::backend::radius::RadiusKeys;
use crate::error::Result;
use crate::matrix::MatrixView;
use kernels_gpu::knn::key;
use kernels_gpu::radius::within;
use rayon::prelude::*;

impl CpuKnn {
    /// Every query row's training rows within `radius`, as keys sorted per query.
    pub(crate) fn radius_keys(&self, queries: &MatrixView<'_>, radius: f32) -> Result<RadiusKeys> {
        let d = queries.cols();
        let chunks: Vec<Vec<Vec<u64>>> = (queries.as_slice().par_chunks(QUERY_CHUNK * d))
            .map(|xs| self.within_radius(xs, radius))
            .collect();
        RadiusKeys::from_rows(chunks.into_iter().flatten().collect())
    }

    /// The keys within `radius` of every row of `xs`, in training order: the training panels
    /// visited in cache blocks, as [`CpuKnn::nearest`] does.
    fn within_radius(&self, xs: &[f32], radius: f32) -> Vec<Vec<u64>> {
        let pn = &self.pn;
        let rows = xs.len() / pn.d;
        let xn = row_norms(xs, pn.d, self.metric.needs_norms());
        let per_block = BLOCK_ROWS.div_ceil(pn.w);
        let ld = per_block * pn.w;
        let mut dist = vec![0f32; rows * ld];
        let mut found = vec![Vec::new(); rows];
        let mut b0 = 0;
        while b0 < pn.nb {
            let b1 = (b0 + per_block).min(pn.nb);
            let blk = Block {
                metric: self.metric,
                x: xs,
                xn: &xn,
                pn,
                b0,
                b1,
                ld,
            };
            panel_distances(&blk, &mut dist);
            let first = b0 * pn.w;
            let cols = (b1 * pn.w).min(pn.k) - first;
            for (keys, row) in found.iter_mut().zip(dist.chunks_exact(ld)) {
                let inside = (row[..cols].iter().enumerate()).filter(|&(_, &d)| within(d, radius));
                keys.extend(inside.map(|(j, &d)| key(d, (first + j) as u32)));
            }
            b0 = b1;
        }
        found
    }
}
