//! Pairwise distances, kNN search and votes on the CPU: the twin of the distance, selection and
//! vote kernels. Every distance runs the same float operations in the same order as on the GPU
//! (eight training rows at a time for SIMD, each lane accumulating over the dimensions in order),
//! and the k smallest keys are one exact answer however they are selected.

use super::CpuBackend;
use super::kmeans::row_sq_norms;
use crate::backend::{BlockSink, Distances, KnnSearch, Neighbours, Votes};
use crate::distances::rows_per_block;
use crate::error::Result;
use crate::knn::Selection;
use crate::knn::classify::vote_one;
use crate::matrix::MatrixView;
use kernels_gpu::fixed::pow2_f32;
use kernels_gpu::knn::{PairMetric, finish, key, pair_step, vote_scale_exponent};
use kernels_gpu::math::sq_norm;
use ndarray::ArrayView2;
use rayon::prelude::*;
use std::collections::BinaryHeap;

/// Rows per SIMD block (one AVX register of f32).
const LANES: usize = 8;
/// Bytes of distances per block when the caller sets no limit.
const DEFAULT_BLOCK_BYTES: usize = 256 << 20;
/// Query rows per rayon task.
const QUERY_CHUNK: usize = 16;
/// `Selection::Auto` keeps a heap up to this k, else selects and sorts.
const AUTO_HEAP_K: usize = 64;

/// Rows of a matrix regrouped for SIMD: blocks of `LANES` rows, each `d × LANES` (dimension
/// major), zero-padded past the last row; plus the squared norms (zeros when not needed).
pub(crate) struct Lanes {
    blocks: Vec<[f32; LANES]>,
    norms: Vec<f32>,
    n: usize,
    d: usize,
}

impl Lanes {
    pub(crate) fn new(x: &[f32], d: usize, norms: bool) -> Self {
        let n = x.len() / d;
        let mut blocks = vec![[0f32; LANES]; n.div_ceil(LANES) * d];
        for (i, row) in x.chunks_exact(d).enumerate() {
            for (j, &v) in row.iter().enumerate() {
                blocks[(i / LANES) * d + j][i % LANES] = v;
            }
        }
        Lanes {
            blocks,
            norms: row_norms(x, d, norms),
            n,
            d,
        }
    }
}

/// Squared norms of the rows of `x` (in dimension order, as the GPU's `row_sq_norms`), or zeros.
fn row_norms(x: &[f32], d: usize, needed: bool) -> Vec<f32> {
    if needed {
        row_sq_norms(x, d)
    } else {
        vec![0.0; x.len() / d]
    }
}

#[inline(always)]
fn row_generic<const L1: bool>(
    metric: PairMetric,
    x: &[f32],
    xn: f32,
    ys: &Lanes,
    out: &mut [f32],
) {
    for (b, block) in ys.blocks.chunks_exact(ys.d).enumerate() {
        let mut acc = [0f32; LANES];
        for (&v, lane) in x.iter().zip(block) {
            for l in 0..LANES {
                acc[l] = pair_step(L1, acc[l], v, lane[l]);
            }
        }
        let first = b * LANES;
        let valid = LANES.min(ys.n - first);
        for l in 0..valid {
            out[first + l] = finish(metric, acc[l], xn, ys.norms[first + l]);
        }
    }
}

/// [`row_generic`] compiled with AVX2 and FMA, for CPUs that have them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn row_fma<const L1: bool>(metric: PairMetric, x: &[f32], xn: f32, ys: &Lanes, out: &mut [f32]) {
    row_generic::<L1>(metric, x, xn, ys, out)
}

/// `out[j] = dist(x, row j of ys)` for every row of `ys`; `xn` is `‖x‖²` when the metric needs
/// it. Without hardware FMA, `mul_add` falls back to the C library's exact `fmaf`: slower, same
/// bits.
pub(crate) fn row_distances(metric: PairMetric, x: &[f32], xn: f32, ys: &Lanes, out: &mut [f32]) {
    let l1 = metric.is_l1();
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("fma") && std::is_x86_feature_detected!("avx2") {
        // SAFETY: the features were just detected.
        unsafe {
            if l1 {
                row_fma::<true>(metric, x, xn, ys, out)
            } else {
                row_fma::<false>(metric, x, xn, ys, out)
            }
        }
        return;
    }
    if l1 {
        row_generic::<true>(metric, x, xn, ys, out)
    } else {
        row_generic::<false>(metric, x, xn, ys, out)
    }
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
        let ys = Lanes::new(b.as_slice(), d, metric.needs_norms());
        let a_norms = row_norms(a.as_slice(), d, metric.needs_norms());
        let rows = rows_per_block(m, n, max_bytes, DEFAULT_BLOCK_BYTES);
        let mut buf = vec![0f32; rows * n];
        let mut first = 0;
        while first < m {
            let r = rows.min(m - first);
            let block = &mut buf[..r * n];
            block
                .par_chunks_mut(n)
                .with_min_len(4)
                .enumerate()
                .for_each(|(i, out)| {
                    let row = first + i;
                    row_distances(metric, a.row(row), a_norms[row], &ys, out)
                });
            let view = ArrayView2::from_shape((r, n), &buf[..r * n]).expect("r × n block");
            on_block(first, view)?;
            first += r;
        }
        Ok(())
    }

    fn knn_index(&self, train: &MatrixView<'_>, metric: PairMetric) -> Result<Box<dyn KnnSearch>> {
        Ok(Box::new(CpuKnn {
            ys: Lanes::new(train.as_slice(), train.cols(), metric.needs_norms()),
            metric,
            labels: Vec::new(),
            classes: 0,
        }))
    }
}

/// A kNN index on the CPU.
pub(crate) struct CpuKnn {
    ys: Lanes,
    metric: PairMetric,
    labels: Vec<u32>,
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

/// Per-task scratch of the CPU search.
struct Scratch {
    dist: Vec<f32>,
    keys: Vec<u64>,
    heap: BinaryHeap<u64>,
}

impl CpuKnn {
    fn scratch(&self) -> Scratch {
        Scratch {
            dist: vec![0.0; self.ys.n],
            keys: Vec::new(),
            heap: BinaryHeap::new(),
        }
    }

    /// The `k` smallest keys of query `x`, ascending, into `out`.
    fn nearest(&self, x: &[f32], k: usize, method: Selection, s: &mut Scratch, out: &mut [u64]) {
        let xn = if self.metric.needs_norms() {
            sq_norm(x)
        } else {
            0.0
        };
        row_distances(self.metric, x, xn, &self.ys, &mut s.dist);
        match method {
            Selection::KMin => {
                s.heap.clear();
                for (j, &dist) in s.dist.iter().enumerate() {
                    let kk = key(dist, j as u32);
                    if s.heap.len() < k {
                        s.heap.push(kk);
                    } else if let Some(mut top) = s.heap.peek_mut()
                        && kk < *top
                    {
                        *top = kk;
                    }
                }
                s.keys.clear();
                s.keys.extend(s.heap.drain());
                s.keys.sort_unstable();
            }
            _ => {
                s.keys.clear();
                s.keys
                    .extend(s.dist.iter().enumerate().map(|(j, &dd)| key(dd, j as u32)));
                if k < s.keys.len() {
                    s.keys.select_nth_unstable(k - 1);
                }
                s.keys.truncate(k);
                s.keys.sort_unstable();
            }
        }
        out.copy_from_slice(&s.keys[..k]);
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
            .for_each(|(out, xs)| {
                let mut s = self.scratch();
                for (o, x) in out.chunks_exact_mut(k).zip(xs.chunks_exact(d)) {
                    self.nearest(x, k, method, &mut s, o);
                }
            });
        Ok(Neighbours {
            prefilter: None,
            keys,
            selection: method,
        })
    }

    fn set_labels(&mut self, class_ids: &[u32], classes: usize) -> Result<()> {
        self.labels = class_ids.to_vec();
        self.classes = classes;
        Ok(())
    }

    fn vote(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        _max_bytes: Option<usize>,
        weighted: bool,
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
                let mut s = self.scratch();
                let mut keys = vec![0u64; k];
                let (mut votes, mut first) = (vec![0u64; c], vec![0u32; c]);
                for (i, (o, x)) in out.iter_mut().zip(xs.chunks_exact(d)).enumerate() {
                    self.nearest(x, k, method, &mut s, &mut keys);
                    let p = if proba {
                        &mut shares[i * c..(i + 1) * c]
                    } else {
                        &mut [][..]
                    };
                    *o = vote_one(
                        &keys,
                        &self.labels,
                        c,
                        weighted,
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
