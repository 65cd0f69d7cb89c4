//! Pairwise distances, kNN search and votes on the CPU: the twin of the distance, selection and
//! vote kernels. Every distance runs the same float operations in the same order as on the GPU
//! (eight training rows at a time for SIMD, each lane accumulating over the dimensions in order),
//! and the k smallest keys are one exact answer however they are selected.

use super::CpuBackend;
use super::kmeans::row_sq_norms;
use super::knn_vote;
use super::simd::{self, Panels};
#[cfg(target_arch = "x86_64")]
use super::simd::{Avx2, Avx512, Simd, SimdLevel};
use crate::backend::vocab::{Selection, rows_per_block};
use crate::backend::{BlockSink, Distances, KnnSearch, Neighbours, Votes, split_keys};
use crate::error::Result;
use crate::matrix::MatrixView;
use kernels_gpu::fixed::pow2_f32;
use kernels_gpu::knn::{PairMetric, VoteRule, finish, key, pair_step, vote_scale_exponent};
use kernels_gpu::lp::{self, LpAccumulate};
use ndarray::ArrayView2;
use rayon::prelude::*;
use std::collections::BinaryHeap;

mod radius;

/// Bytes of distances per block when the caller sets no limit.
const DEFAULT_BLOCK_BYTES: usize = 256 << 20;
/// Query rows per rayon task: every training row loaded into the cache serves all of them.
const QUERY_CHUNK: usize = 48;
/// Training rows per cache block of the search (their panels stay in the core's L2 while every
/// query of the task is scored against them).
const BLOCK_ROWS: usize = 512;
/// `Selection::Auto` keeps a heap up to this k, else selects and sorts.
const AUTO_HEAP_K: usize = 64;

/// Squared norms of the rows of `x` (in dimension order, as the GPU's `row_sq_norms`), or zeros.
fn row_norms(x: &[f32], d: usize, needed: bool) -> Vec<f32> {
    if needed {
        row_sq_norms(x, d)
    } else {
        vec![0.0; x.len() / d]
    }
}

/// Training (or right-hand) rows in SIMD panels of this CPU's width.
fn panels(x: &[f32], d: usize) -> Panels {
    Panels::new(x, d, simd::width().unwrap_or(PORTABLE_WIDTH))
}

/// Panel width where the CPU has no SIMD kernel.
const PORTABLE_WIDTH: usize = 8;

/// What a distance block computes: the rows of `x` (squared norms `xn`, zeros when the metric
/// needs none) against the rows of panels `b0 .. b1` of `pn`; row `r` of `x` goes to
/// `out[r · ld ..]`, panel row `i` at column `i − b0 · w`.
#[derive(Clone, Copy)]
pub(crate) struct Block<'a> {
    metric: PairMetric,
    x: &'a [f32],
    xn: &'a [f32],
    pn: &'a Panels,
    b0: usize,
    b1: usize,
    ld: usize,
}

/// Writes the finished distances of the accumulator tile `acc` (`P` rows from row `r`, panels
/// `b .. b + L`) into `out` as [`Block`] says.
///
/// # Safety
/// As for [`simd::accumulate`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn emit<S: Simd, const P: usize, const L: usize>(
    blk: &Block<'_>,
    acc: &[[S::V; L]; P],
    r: usize,
    b: usize,
    out: &mut [f32],
) {
    let (w, pn) = (S::W, blk.pn);
    let mut lanes = [0f32; 16];
    for (p, acc) in acc.iter().enumerate() {
        for (l, &v) in acc.iter().enumerate() {
            unsafe { S::store(lanes.as_mut_ptr(), v) };
            let first = (b + l) * w;
            let valid = w.min(pn.k - first);
            let row = &mut out[(r + p) * blk.ld + first - blk.b0 * w..][..valid];
            let norms = &pn.sq_norms[first..first + valid];
            for ((o, &a), &yn) in row.iter_mut().zip(&lanes).zip(norms) {
                *o = finish(blk.metric, a, blk.xn[r + p], yn);
            }
        }
    }
}

/// [`panel_distances`] in tiles of `P` rows × `L` panels.
///
/// # Safety
/// The CPU has `S`'s instruction set; `pn.w == S::W`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn tiled_rows<S: Simd, const P: usize, const L: usize, const L1: bool>(
    blk: &Block<'_>,
    out: &mut [f32],
) {
    let (d, rows) = (blk.pn.d, blk.xn.len());
    let mut r = 0;
    unsafe {
        while r < rows {
            let x = &blk.x[r * d..];
            if r + P <= rows {
                let mut b = blk.b0;
                while b + L <= blk.b1 {
                    let acc = simd::accumulate::<S, P, L, L1>(x, blk.pn, b);
                    emit::<S, P, L>(blk, &acc, r, b, out);
                    b += L;
                }
                while b < blk.b1 {
                    let acc = simd::accumulate::<S, P, 1, L1>(x, blk.pn, b);
                    emit::<S, P, 1>(blk, &acc, r, b, out);
                    b += 1;
                }
                r += P;
            } else {
                for b in blk.b0..blk.b1 {
                    let acc = simd::accumulate::<S, 1, 1, L1>(x, blk.pn, b);
                    emit::<S, 1, 1>(blk, &acc, r, b, out);
                }
                r += 1;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn tiled_rows_avx512(blk: &Block<'_>, out: &mut [f32]) {
    // 6 × 4 accumulators + 4 panel vectors + 1 broadcast of the 32 zmm registers.
    unsafe {
        if blk.metric.is_l1() {
            tiled_rows::<Avx512, 4, 4, true>(blk, out)
        } else {
            tiled_rows::<Avx512, 6, 4, false>(blk, out)
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn tiled_rows_avx2(blk: &Block<'_>, out: &mut [f32]) {
    // 4 × 2 accumulators + 2 panel vectors + 1 broadcast of the 16 ymm registers.
    unsafe {
        if blk.metric.is_l1() {
            tiled_rows::<Avx2, 3, 2, true>(blk, out)
        } else {
            tiled_rows::<Avx2, 4, 2, false>(blk, out)
        }
    }
}

/// [`panel_distances`] without SIMD: one row at a time, one accumulator per panel lane.
fn portable_rows(blk: &Block<'_>, out: &mut [f32]) {
    let pn = blk.pn;
    let (d, w, l1) = (pn.d, pn.w, blk.metric.is_l1());
    for (r, (row, &n)) in blk.x.chunks_exact(d).zip(blk.xn).enumerate() {
        for b in blk.b0..blk.b1 {
            let mut acc = vec![0f32; w];
            let panel = &pn.data[b * d * w..(b + 1) * d * w];
            for (&v, lanes) in row.iter().zip(panel.chunks_exact(w)) {
                for (a, &y) in acc.iter_mut().zip(lanes) {
                    *a = pair_step(l1, *a, v, y);
                }
            }
            let first = b * w;
            let valid = w.min(pn.k - first);
            let o = &mut out[r * blk.ld + first - blk.b0 * w..][..valid];
            for ((o, &a), &yn) in o.iter_mut().zip(&acc).zip(&pn.sq_norms[first..]) {
                *o = finish(blk.metric, a, n, yn);
            }
        }
    }
}

/// [`panel_distances`] for the Lp metrics: one pair at a time by `kernels_gpu::lp::distance`,
/// the arithmetic of `pairwise_chebyshev` / `pairwise_minkowski`.
fn lp_rows<A: LpAccumulate>(acc: A, blk: &Block<'_>, out: &mut [f32]) {
    let pn = blk.pn;
    let (d, w) = (pn.d, pn.w);
    let mut y = vec![0f32; d];
    for b in blk.b0..blk.b1 {
        let panel = &pn.data[b * d * w..(b + 1) * d * w];
        let first = b * w;
        for lane in 0..w.min(pn.k - first) {
            for (v, lanes) in y.iter_mut().zip(panel.chunks_exact(w)) {
                *v = lanes[lane];
            }
            let col = first + lane - blk.b0 * w;
            for (r, x) in blk.x.chunks_exact(d).enumerate() {
                out[r * blk.ld + col] = lp::distance(acc, x, &y);
            }
        }
    }
}

/// Computes a distance [`Block`] into `out`. Every distance is the same float as the GPU's (see
/// the module comment).
pub(crate) fn panel_distances(blk: &Block<'_>, out: &mut [f32]) {
    match blk.metric {
        PairMetric::Chebyshev => return lp_rows(lp::Chebyshev, blk, out),
        PairMetric::Minkowski(p) => return lp_rows(lp::Minkowski(p), blk, out),
        _ => {}
    }
    #[cfg(target_arch = "x86_64")]
    {
        let level = simd::level();
        if blk.pn.w == Avx512::W && level == SimdLevel::Avx512 {
            // SAFETY: the active level is never above the detected one.
            return unsafe { tiled_rows_avx512(blk, out) };
        }
        if blk.pn.w == Avx2::W && level >= SimdLevel::Avx2 {
            // SAFETY: the active level is never above the detected one.
            return unsafe { tiled_rows_avx2(blk, out) };
        }
    }
    portable_rows(blk, out)
}

impl Distances for CpuBackend {
    fn pairwise(
        &self,
        a: &MatrixView<'_>,
        b: &MatrixView<'_>,
        metric: PairMetric,
        max_bytes: Option<usize>,
        on_block: &mut BlockSink<'_>,
    ) -> Result<()> {
        let (m, n, d) = (a.rows(), b.rows(), a.cols());
        let pn = panels(b.as_slice(), d);
        let a_norms = row_norms(a.as_slice(), d, metric.needs_norms());
        let rows = rows_per_block(m, n, max_bytes, DEFAULT_BLOCK_BYTES);
        let mut buf = vec![0f32; rows * n];
        let mut first = 0;
        while first < m {
            let r = rows.min(m - first);
            buf[..r * n]
                .par_chunks_mut(QUERY_CHUNK * n)
                .enumerate()
                .for_each(|(t, out)| {
                    let from = first + t * QUERY_CHUNK;
                    let to = from + out.len() / n;
                    let blk = Block {
                        metric,
                        x: &a.as_slice()[from * d..to * d],
                        xn: &a_norms[from..to],
                        pn: &pn,
                        b0: 0,
                        b1: pn.nb,
                        ld: n,
                    };
                    panel_distances(&blk, out);
                });
            let view = ArrayView2::from_shape((r, n), &buf[..r * n]).expect("r × n block");
            on_block(first, view)?;
            first += r;
        }
        Ok(())
    }

    fn knn_index(&self, train: &MatrixView<'_>, metric: PairMetric) -> Result<Box<dyn KnnSearch>> {
        Ok(Box::new(CpuKnn {
            pn: panels(train.as_slice(), train.cols()),
            metric,
            labels: Vec::new(),
            row_weights: None,
            classes: 0,
        }))
    }
}

/// A kNN index on the CPU: the training rows in SIMD panels.
pub(crate) struct CpuKnn {
    pn: Panels,
    metric: PairMetric,
    labels: Vec<u32>,
    /// Every training row's sample weight over the largest; `None`: no sample weights.
    row_weights: Option<Vec<f32>>,
    classes: usize,
}

/// What the CPU selection does for `selection` and `k`.
fn cpu_selection(selection: Selection, k: usize) -> Selection {
    match selection {
        Selection::Auto if k <= AUTO_HEAP_K => Selection::KMin,
        Selection::Auto => Selection::Bitonic,
        s => s,
    }
}

/// The running k smallest keys of one query: a max-heap of k (`KMin`), or a pool that is cut
/// back to its k smallest whenever it grows past a bound (any other selection).
pub(crate) enum Nearest {
    Heap(BinaryHeap<u64>),
    Pool(Vec<u64>),
}

impl Nearest {
    fn new(method: Selection) -> Self {
        match method {
            Selection::KMin => Nearest::Heap(BinaryHeap::new()),
            _ => Nearest::Pool(Vec::new()),
        }
    }

    /// Offers the training rows `first ..` at distances `dists`.
    pub(crate) fn offer(&mut self, k: usize, first: usize, dists: &[f32]) {
        match self {
            Nearest::Heap(heap) => {
                for (j, &dist) in dists.iter().enumerate() {
                    let kk = key(dist, (first + j) as u32);
                    if heap.len() < k {
                        heap.push(kk);
                    } else if let Some(mut top) = heap.peek_mut()
                        && kk < *top
                    {
                        *top = kk;
                    }
                }
            }
            Nearest::Pool(pool) => {
                pool.extend(
                    dists
                        .iter()
                        .enumerate()
                        .map(|(j, &dist)| key(dist, (first + j) as u32)),
                );
                if pool.len() >= 2 * k.max(BLOCK_ROWS) {
                    pool.select_nth_unstable(k - 1);
                    pool.truncate(k);
                }
            }
        }
    }

    /// The k smallest keys, ascending, into `out` (keys are unique, so this is one answer).
    pub(crate) fn finish(self, k: usize, out: &mut [u64]) {
        let mut keys = match self {
            Nearest::Heap(heap) => heap.into_vec(),
            Nearest::Pool(mut pool) => {
                if k < pool.len() {
                    pool.select_nth_unstable(k - 1);
                    pool.truncate(k);
                }
                pool
            }
        };
        keys.sort_unstable();
        out.copy_from_slice(&keys[..k]);
    }
}

impl CpuKnn {
    /// The `k` smallest keys of every row of `xs`, ascending, `k` per row into `out`: the
    /// training panels are visited in blocks that stay in cache while every row is scored.
    pub(crate) fn nearest(&self, xs: &[f32], k: usize, method: Selection, out: &mut [u64]) {
        let pn = &self.pn;
        let rows = out.len() / k;
        let xn = row_norms(xs, pn.d, self.metric.needs_norms());
        let per_block = BLOCK_ROWS.div_ceil(pn.w);
        let ld = per_block * pn.w;
        let mut dist = vec![0f32; rows * ld];
        let mut nearest: Vec<Nearest> = (0..rows).map(|_| Nearest::new(method)).collect();
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
            for (near, row) in nearest.iter_mut().zip(dist.chunks_exact(ld)) {
                near.offer(k, first, &row[..cols]);
            }
            b0 = b1;
        }
        for (near, o) in nearest.into_iter().zip(out.chunks_exact_mut(k)) {
            near.finish(k, o);
        }
    }
}

impl KnnSearch for CpuKnn {
    fn search(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        _max_bytes: Option<usize>,
    ) -> Result<Neighbours> {
        let method = cpu_selection(selection, k);
        let d = queries.cols();
        let mut keys = vec![0u64; queries.rows() * k];
        keys.par_chunks_mut(QUERY_CHUNK * k)
            .zip(queries.as_slice().par_chunks(QUERY_CHUNK * d))
            .for_each(|(out, xs)| self.nearest(xs, k, method, out));
        let (mut indices, mut distances) = (Vec::new(), Vec::new());
        split_keys(&keys, &mut indices, &mut distances);
        Ok(Neighbours {
            indices,
            distances,
            selection: method,
            prefilter: None,
        })
    }

    fn radius(
        &self,
        queries: &MatrixView<'_>,
        radius: f32,
        _max_bytes: Option<usize>,
    ) -> Result<crate::backend::radius::RadiusKeys> {
        self.radius_keys(queries, radius)
    }

    fn set_labels(&mut self, class_ids: &[u32], classes: usize) -> Result<()> {
        self.labels = class_ids.to_vec();
        self.classes = classes;
        Ok(())
    }

    fn set_row_weights(&mut self, relative: &[f32]) -> Result<()> {
        self.row_weights = Some(relative.to_vec());
        Ok(())
    }

    fn vote(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        _max_bytes: Option<usize>,
        rule: VoteRule,
        proba: bool,
    ) -> Result<Votes> {
        let method = cpu_selection(selection, k);
        let (m, d, c) = (queries.rows(), queries.cols(), self.classes.max(1));
        let scale = pow2_f32(vote_scale_exponent(k));
        let mut classes = vec![0u32; m];
        let mut shares = vec![0f32; if proba { m * c } else { 0 }];
        let share_chunk = if proba { QUERY_CHUNK * c } else { 1 };
        let mut share_chunks: Vec<&mut [f32]> = shares.chunks_mut(share_chunk).collect();
        share_chunks.resize_with(m.div_ceil(QUERY_CHUNK), Default::default);
        classes
            .par_chunks_mut(QUERY_CHUNK)
            .zip(queries.as_slice().par_chunks(QUERY_CHUNK * d))
            .zip(share_chunks.into_par_iter())
            .for_each(|((out, xs), shares)| {
                let mut keys = vec![0u64; out.len() * k];
                self.nearest(xs, k, method, &mut keys);
                let (mut votes, mut first) = (vec![0u64; c], vec![0u32; c]);
                for (i, (o, keys)) in out.iter_mut().zip(keys.chunks_exact(k)).enumerate() {
                    let p = if proba {
                        &mut shares[i * c..(i + 1) * c]
                    } else {
                        &mut [][..]
                    };
                    *o = knn_vote(
                        keys,
                        &self.labels,
                        self.row_weights.as_deref(),
                        c,
                        rule,
                        scale,
                        &mut votes,
                        &mut first,
                        p,
                    );
                }
            });
        Ok(Votes {
            classes,
            proba: shares,
        })
    }
}
