//! Lloyd iterations on the CPU: the twin of the GPU's assign / accumulate / finalize kernels.

use super::Seeder;
use crate::backend::vocab::CHUNK;
use crate::backend::{
    AcrossGpus, AssignStats, Lloyd, LloydSpec, Picks, Readback, Residency, SPHERICAL_POINT_SQ_NORM,
    Seeding, Seeds, StepStats, Trials,
};
use crate::backend::{Farthest, Partial, farthest, squared_shift};
use crate::error::Result;
use crate::matrix::MatrixView;
use kernels_gpu::fixed::{inertia_term, inv_pow2_f64, pow2_f32, to_fixed, weight_units, weighted};
use kernels_gpu::math::{AssignMetric, assign_distance, assign_score, assign_step, sq_norm};
use kernels_gpu::seeding::WeightScale;
use rayon::prelude::*;
use std::sync::Arc;

pub(crate) mod tiled;

/// Centroids per SIMD block of the CPU assign (one AVX register of f32).
const LANES: usize = 8;

pub(crate) struct CpuLloyd<'a> {
    x: &'a [f32],
    /// Every row's squared norm (the constant of spherical k-means), shared with the seeding.
    x_sq_norms: Arc<[f32]>,
    n: usize,
    d: usize,
    k: usize,
    metric: AssignMetric,
    /// Spherical k-means (see [`LloydSpec::metric`]): centroid norms taken as 0, point norms as
    /// 2, centroids renormalised after each update.
    spherical: bool,
    /// Every point's units; `None`: one each.
    weights: Option<&'a [f32]>,
    scales: Vec<f32>,
    inv_scales: Vec<f64>,
    inertia_scale: f32,
    inertia_unit: f64,
    centroids: Vec<f32>,
    next: Vec<f32>,
    labels: Vec<u32>,
    min_dist: Vec<f32>,
    cluster_weights: Vec<u64>,
    /// The row of the whole data set that row 0 is.
    first_row: u32,
    /// The fixed-point inertia of the last assignment.
    fixed_inertia: i64,
    /// Seeding state, made on first use.
    seeder: Option<Seeder<'a>>,
}

impl<'a> CpuLloyd<'a> {
    pub(crate) fn new(data: &'a MatrixView<'a>, spec: &LloydSpec<'a>, first_row: u32) -> Self {
        let (n, d, k) = (data.rows(), data.cols(), spec.k);
        let x = data.as_slice();
        let spherical = spec.spherical();
        CpuLloyd {
            x,
            x_sq_norms: if spherical {
                vec![SPHERICAL_POINT_SQ_NORM; n].into()
            } else {
                row_sq_norms(x, d).into()
            },
            n,
            d,
            k,
            metric: spec.metric.assign(),
            spherical,
            weights: spec.weights,
            scales: spec.scales.iter().map(|&s| pow2_f32(s)).collect(),
            inv_scales: spec.scales.iter().map(|&s| inv_pow2_f64(s)).collect(),
            inertia_scale: pow2_f32(spec.inertia_exponent),
            inertia_unit: spec.inertia_unit,
            centroids: vec![0.0; k * d],
            next: vec![0.0; k * d],
            labels: vec![0; n],
            min_dist: vec![0.0; n],
            cluster_weights: vec![0; k],
            first_row,
            fixed_inertia: 0,
            seeder: None,
        }
    }

    /// The squared norm of every row (shared with the mini-batch steps).
    pub(super) fn row_norms(&self) -> &[f32] {
        &self.x_sq_norms
    }

    fn seeder(&mut self) -> &mut Seeder<'a> {
        let (x, d, metric, weights) = (self.x, self.d, self.metric, self.weights);
        let (first_row, spherical) = (self.first_row, self.spherical);
        let norms = &self.x_sq_norms;
        self.seeder.get_or_insert_with(|| {
            // Spherical k-means keeps a constant in place of the norms; seeding reads the rows'.
            let seeder = if spherical {
                Seeder::new(x, d, metric, first_row)
            } else {
                Seeder::with_row_norms(x, d, metric, first_row, Arc::clone(norms))
            };
            match weights {
                Some(w) => {
                    seeder.weighted(w.iter().map(|&u| weight_units(Some(u)) as u64).collect())
                }
                None => seeder,
            }
        })
    }

    /// The changed labels (of points with weight) and the fixed-point inertia of the rows from
    /// `first`, whose labels were `old` and are now `labels` at distances `dists`.
    fn chunk_stats(&self, first: usize, old: &[u32], labels: &[u32], dists: &[f32]) -> (u64, i64) {
        let (mut changed, mut inertia) = (0u64, 0i64);
        for (r, ((&label, &old), &dist)) in labels.iter().zip(old).zip(dists).enumerate() {
            let units = weight_units(self.weights.map(|w| w[first + r]));
            changed += u64::from(label != old && units != 0);
            inertia = inertia.wrapping_add(inertia_term(dist, self.inertia_scale, units));
        }
        (changed, inertia)
    }

    /// The stats of an assignment from its chunks' parts.
    pub(crate) fn total(&mut self, parts: &[(u64, i64)]) -> AssignStats {
        let changed = parts.iter().map(|p| p.0).sum();
        let inertia = parts.iter().fold(0i64, |a, p| a.wrapping_add(p.1));
        self.fixed_inertia = inertia;
        AssignStats {
            changed,
            inertia: inertia as f64 * self.inertia_unit,
        }
    }

    /// Means of the current labels into `next` (renormalised for spherical k-means); returns the
    /// number of clusters without weight.
    fn means(&mut self) -> usize {
        let partial = self.sums();
        let empty = partial.finish(
            &self.centroids,
            &self.inv_scales,
            self.spherical,
            &mut self.next,
        );
        self.cluster_weights = partial.weights;
        empty
    }

    /// The exact fixed-point sums and counts of the current labels.
    fn sums(&self) -> Partial {
        let (d, k) = (self.d, self.k);
        let rows_per_task = CHUNK.max(self.n.div_ceil(4 * rayon::current_num_threads()));
        let (scales, weights) = (&self.scales, self.weights);
        let zero = || (vec![0i64; k * d], vec![0u64; k]);
        let (sums, counts) = self
            .x
            .par_chunks(rows_per_task * d)
            .zip(self.labels.par_chunks(rows_per_task))
            .enumerate()
            .fold(zero, |(mut sums, mut counts), (task, (xs, labels))| {
                let from = task * rows_per_task;
                let w = weights.map(|w| &w[from..from + labels.len()]);
                accumulate(xs, labels, w, scales, &mut sums, &mut counts);
                (sums, counts)
            })
            .reduce(zero, |(mut s1, mut c1), (s2, c2)| {
                s1.iter_mut().zip(&s2).for_each(|(a, b)| *a += b);
                c1.iter_mut().zip(&c2).for_each(|(a, b)| *a += b);
                (s1, c1)
            });
        Partial {
            sums,
            weights: counts,
            changed: 0,
            inertia: 0,
        }
    }
}

/// Adds the fixed-point rows of `xs`, times their units (`weights`; `None`: one each), to the
/// sums of their labels, and their units to the labels' weights.
#[inline(always)]
fn accumulate_generic(
    xs: &[f32],
    labels: &[u32],
    weights: Option<&[f32]>,
    scales: &[f32],
    sums: &mut [i64],
    counts: &mut [u64],
) {
    let d = scales.len();
    let Some(weights) = weights else {
        for (row, &label) in xs.chunks_exact(d).zip(labels) {
            let acc = &mut sums[label as usize * d..(label as usize + 1) * d];
            for ((a, &v), &s) in acc.iter_mut().zip(row).zip(scales) {
                *a += to_fixed(v, s);
            }
            counts[label as usize] += 1;
        }
        return;
    };
    for ((row, &label), &w) in xs.chunks_exact(d).zip(labels).zip(weights) {
        let units = weight_units(Some(w));
        let acc = &mut sums[label as usize * d..(label as usize + 1) * d];
        for ((a, &v), &s) in acc.iter_mut().zip(row).zip(scales) {
            *a = a.wrapping_add(weighted(to_fixed(v, s), units));
        }
        counts[label as usize] += units as u64;
    }
}

/// [`accumulate_generic`] with SSE4.1, whose `roundss` rounds ties to even in one instruction
/// (without it `round_ties_even` is a call into the C library).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.1")]
fn accumulate_sse41(
    xs: &[f32],
    labels: &[u32],
    weights: Option<&[f32]>,
    scales: &[f32],
    sums: &mut [i64],
    counts: &mut [u64],
) {
    accumulate_generic(xs, labels, weights, scales, sums, counts)
}

pub(crate) fn accumulate(
    xs: &[f32],
    labels: &[u32],
    weights: Option<&[f32]>,
    scales: &[f32],
    sums: &mut [i64],
    counts: &mut [u64],
) {
    #[cfg(target_arch = "x86_64")]
    if super::simd::level() >= super::simd::SimdLevel::Avx2 {
        // SAFETY: the active level (AVX2 includes FMA and SSE4.1) is never above the detected one.
        return unsafe { accumulate_sse41(xs, labels, weights, scales, sums, counts) };
    }
    accumulate_generic(xs, labels, weights, scales, sums, counts)
}

/// Squared norm of every row (the GPU's `row_sq_norms`).
pub(crate) fn row_sq_norms(x: &[f32], d: usize) -> Vec<f32> {
    let mut out = vec![0f32; x.len() / d];
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK * d))
        .for_each(|(o, rows)| chunk_sq_norms(rows, o));
    out
}

#[inline(always)]
fn chunk_sq_norms_generic(rows: &[f32], out: &mut [f32]) {
    let d = rows.len() / out.len().max(1);
    for (v, r) in out.iter_mut().zip(rows.chunks_exact(d.max(1))) {
        *v = sq_norm(r);
    }
}

/// [`chunk_sq_norms_generic`] with the FMA instruction (without it `mul_add` is a call into the
/// C library's `fmaf` per value: same bits, about 10 ns each).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
fn chunk_sq_norms_fma(rows: &[f32], out: &mut [f32]) {
    chunk_sq_norms_generic(rows, out)
}

fn chunk_sq_norms(rows: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::simd::level() >= super::simd::SimdLevel::Avx2 {
        // SAFETY: the active level (AVX2 includes FMA and SSE4.1) is never above the detected one.
        return unsafe { chunk_sq_norms_fma(rows, out) };
    }
    chunk_sq_norms_generic(rows, out)
}

/// Centroids regrouped for SIMD: blocks of `LANES` centroids, each block `d × LANES`
/// (dimension-major), zero-padded past `k`; plus their squared norms.
pub(crate) struct CentroidBlocks {
    blocks: Vec<[f32; LANES]>,
    sq_norms: Vec<f32>,
    k: usize,
    d: usize,
}

impl CentroidBlocks {
    pub(crate) fn new(centroids: &[f32], d: usize) -> Self {
        let k = centroids.len() / d;
        let nb = k.div_ceil(LANES);
        let mut blocks = vec![[0f32; LANES]; nb * d];
        for c in 0..k {
            for j in 0..d {
                blocks[(c / LANES) * d + j][c % LANES] = centroids[c * d + j];
            }
        }
        let sq_norms = centroids.chunks_exact(d).map(sq_norm).collect();
        CentroidBlocks {
            blocks,
            sq_norms,
            k,
            d,
        }
    }
}

/// The nearest centroid to `row` and its distance, as the GPU computes them: per (point,
/// centroid) accumulation in dimension order, first minimum in centroid order.
#[inline(always)]
fn nearest_generic(
    metric: AssignMetric,
    row: &[f32],
    x_sq: f32,
    cb: &CentroidBlocks,
) -> (u32, f32) {
    let d = cb.d;
    let (mut best, mut label) = (f32::INFINITY, 0u32);
    for (b, block) in cb.blocks.chunks_exact(d).enumerate() {
        let mut acc = [0f32; LANES];
        for (&v, cs) in row.iter().zip(block) {
            for l in 0..LANES {
                acc[l] = assign_step(metric, acc[l], v, cs[l]);
            }
        }
        for (l, &a) in acc.iter().enumerate() {
            let c = b * LANES + l;
            if c < cb.k {
                let score = assign_score(metric, a, cb.sq_norms[c]);
                if score < best {
                    best = score;
                    label = c as u32;
                }
            }
        }
    }
    (label, assign_distance(metric, x_sq, best))
}

/// [`nearest_generic`] compiled with AVX2 and FMA, for CPUs that have them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn nearest_fma(metric: AssignMetric, row: &[f32], x_sq: f32, cb: &CentroidBlocks) -> (u32, f32) {
    nearest_generic(metric, row, x_sq, cb)
}

/// The nearest centroid to `row` and its distance. Without hardware FMA, `mul_add` falls back to
/// the C library's exact `fmaf`: slower, same bits.
pub(crate) fn nearest(
    metric: AssignMetric,
    row: &[f32],
    x_sq: f32,
    cb: &CentroidBlocks,
) -> (u32, f32) {
    #[cfg(target_arch = "x86_64")]
    if super::simd::level() >= super::simd::SimdLevel::Avx2 {
        // SAFETY: the active level (AVX2 includes FMA) is never above the detected one.
        return unsafe { nearest_fma(metric, row, x_sq, cb) };
    }
    nearest_generic(metric, row, x_sq, cb)
}

impl Seeding for CpuLloyd<'_> {
    fn seed_nearest(
        &mut self,
        seeds: Seeds<'_>,
        first_id: u32,
        fresh: bool,
        ws: WeightScale,
    ) -> Result<u64> {
        self.seeder().seed_nearest(seeds, first_id, fresh, ws)
    }

    fn seed_trials(&mut self, picks: Picks<'_>, ws: WeightScale) -> Result<Trials> {
        self.seeder().seed_trials(picks, ws)
    }

    fn seed_locate(&mut self, draws: &[u64], ws: WeightScale) -> Result<Vec<u32>> {
        self.seeder().seed_locate(draws, ws)
    }

    fn seed_accept(&mut self, trial: usize) {
        self.seeder().seed_accept(trial)
    }

    fn seed_sample(
        &mut self,
        seed: u64,
        round: u32,
        ell: u64,
        phi: u64,
        ws: WeightScale,
    ) -> Result<Vec<u32>> {
        self.seeder().seed_sample(seed, round, ell, phi, ws)
    }

    fn seed_owner_weights(&mut self, ids: usize) -> Result<Vec<u64>> {
        self.seeder().seed_owner_weights(ids)
    }
}

impl Lloyd for CpuLloyd<'_> {
    fn set_centroids(&mut self, centroids: &[f32]) -> Result<()> {
        self.centroids.copy_from_slice(centroids);
        Ok(())
    }

    fn set_labels(&mut self, labels: &[u32]) -> Result<()> {
        self.labels.copy_from_slice(labels);
        Ok(())
    }

    fn assign(&mut self) -> Result<AssignStats> {
        let (x, d, metric) = (self.x, self.d, self.metric);
        let x_sq = &self.x_sq_norms;
        let mut labels = std::mem::take(&mut self.labels);
        let mut min_dist = std::mem::take(&mut self.min_dist);
        let this = &*self;
        let parts: Vec<(u64, i64)> = if let Some(w) = super::simd::width() {
            let mut panels = super::simd::Panels::new(&this.centroids, d, w);
            if this.spherical {
                panels.sq_norms.fill(0.0);
            }
            labels
                .par_chunks_mut(CHUNK)
                .zip(min_dist.par_chunks_mut(CHUNK))
                .enumerate()
                .map(|(ci, (labels, dists))| {
                    let rows = ci * CHUNK..ci * CHUNK + labels.len();
                    let old: [u32; CHUNK] =
                        std::array::from_fn(|r| labels.get(r).map_or(0, |&l| l));
                    tiled::assign_rows(
                        metric,
                        &x[rows.start * d..rows.end * d],
                        &x_sq[rows.clone()],
                        &panels,
                        labels,
                        dists,
                    );
                    this.chunk_stats(rows.start, &old, labels, dists)
                })
                .collect()
        } else {
            let mut cb = CentroidBlocks::new(&this.centroids, d);
            if this.spherical {
                cb.sq_norms.fill(0.0);
            }
            labels
                .par_chunks_mut(CHUNK)
                .zip(min_dist.par_chunks_mut(CHUNK))
                .enumerate()
                .map(|(ci, (labels, dists))| {
                    let first = ci * CHUNK;
                    let old = labels.to_vec();
                    for (r, (label, dist)) in labels.iter_mut().zip(dists.iter_mut()).enumerate() {
                        let i = first + r;
                        (*label, *dist) = nearest(metric, &x[i * d..(i + 1) * d], x_sq[i], &cb);
                    }
                    this.chunk_stats(first, &old, labels, dists)
                })
                .collect()
        };
        let stats = self.total(&parts);
        self.labels = labels;
        self.min_dist = min_dist;
        Ok(stats)
    }

    fn step(&mut self) -> Result<StepStats> {
        let assign = self.assign()?;
        let empty = self.means();
        Ok(StepStats {
            assign,
            empty,
            shift: self.shift()?,
        })
    }

    fn update(&mut self) -> Result<usize> {
        Ok(self.means())
    }

    fn relocate(&mut self, cluster: usize, point: usize) -> Result<()> {
        let d = self.d;
        self.next[cluster * d..(cluster + 1) * d]
            .copy_from_slice(&self.x[point * d..(point + 1) * d]);
        Ok(())
    }

    fn copy_next_row(&mut self, from: usize, to: usize) -> Result<()> {
        let d = self.d;
        self.next.copy_within(from * d..(from + 1) * d, to * d);
        Ok(())
    }

    fn shift(&mut self) -> Result<f64> {
        Ok(squared_shift(&self.next, &self.centroids))
    }

    fn exact_shift(&mut self) -> Result<f64> {
        self.shift()
    }

    fn commit(&mut self) {
        std::mem::swap(&mut self.centroids, &mut self.next);
    }

    fn accumulate(&mut self, assign: bool) -> Result<Partial> {
        let stats = if assign {
            self.assign()?
        } else {
            AssignStats {
                changed: 0,
                inertia: 0.0,
            }
        };
        let partial = self.sums();
        Ok(Partial {
            changed: stats.changed,
            inertia: if assign { self.fixed_inertia } else { 0 },
            ..partial
        })
    }
}

impl Readback for CpuLloyd<'_> {
    fn min_distances(&self) -> Result<Vec<f32>> {
        Ok(self.min_dist.clone())
    }

    fn fixed_inertia(&self) -> Result<i64> {
        Ok(self.fixed_inertia)
    }

    fn farthest(&self, count: usize) -> Result<Vec<Farthest>> {
        Ok(farthest(&self.min_dist, self.weights, 0, count))
    }

    fn cluster_weights(&self) -> Result<Vec<u64>> {
        Ok(self.cluster_weights.clone())
    }

    fn centroids(&self) -> Result<Vec<f32>> {
        Ok(self.centroids.clone())
    }

    fn labels(&self) -> Result<Vec<u32>> {
        Ok(self.labels.clone())
    }

    fn gather(&self, rows: &[usize]) -> Result<Vec<f32>> {
        let d = self.d;
        Ok(rows
            .iter()
            .flat_map(|&r| &self.x[r * d..(r + 1) * d])
            .copied()
            .collect())
    }

    fn k(&self) -> usize {
        self.k
    }
}

/// The rows lie in host memory, and the sums are added on the host.
impl Residency for CpuLloyd<'_> {}

impl AcrossGpus for CpuLloyd<'_> {}
