//! Lloyd iterations on the CPU: the twin of the GPU's assign / accumulate / finalize kernels.

use super::CHUNK;
use super::Seeder;
use crate::backend::{AssignStats, Lloyd, Picks, Seeding, Seeds, StepStats, Trials};
use crate::error::Result;
use crate::kmeans::shard::{Partial, squared_shift};
use crate::matrix::MatrixView;
use kernels_gpu::fixed::{inv_pow2_f64, pow2_f32, to_fixed};
use kernels_gpu::math::{AssignMetric, assign_distance, assign_score, assign_step, sq_norm};
use kernels_gpu::seeding::WeightScale;
use rayon::prelude::*;

mod tiled;

/// Centroids per SIMD block of the CPU assign (one AVX register of f32).
const LANES: usize = 8;

pub(crate) struct CpuLloyd<'a> {
    x: &'a [f32],
    x_sq_norms: Vec<f32>,
    n: usize,
    d: usize,
    k: usize,
    metric: AssignMetric,
    scales: Vec<f32>,
    inv_scales: Vec<f64>,
    centroids: Vec<f32>,
    next: Vec<f32>,
    labels: Vec<u32>,
    min_dist: Vec<f32>,
    sizes: Vec<u32>,
    /// The row of the whole data set that row 0 is.
    first_row: u32,
    /// Seeding state, made on first use.
    seeder: Option<Seeder<'a>>,
}

impl<'a> CpuLloyd<'a> {
    pub(crate) fn new(
        data: &'a MatrixView<'a>,
        k: usize,
        metric: AssignMetric,
        scales: &[i32],
        first_row: u32,
    ) -> Self {
        let (n, d) = (data.rows(), data.cols());
        let x = data.as_slice();
        CpuLloyd {
            x,
            x_sq_norms: row_sq_norms(x, d),
            n,
            d,
            k,
            metric,
            scales: scales.iter().map(|&s| pow2_f32(s)).collect(),
            inv_scales: scales.iter().map(|&s| inv_pow2_f64(s)).collect(),
            centroids: vec![0.0; k * d],
            next: vec![0.0; k * d],
            labels: vec![0; n],
            min_dist: vec![0.0; n],
            sizes: vec![0; k],
            first_row,
            seeder: None,
        }
    }

    fn seeder(&mut self) -> &mut Seeder<'a> {
        let (x, d, metric, first_row) = (self.x, self.d, self.metric, self.first_row);
        self.seeder
            .get_or_insert_with(|| Seeder::new(x, d, metric, first_row))
    }

    /// Means of the current labels into `next`; returns the number of empty clusters.
    fn means(&mut self) -> usize {
        let partial = self.sums();
        let empty = partial.finish(&self.centroids, &self.inv_scales, &mut self.next);
        self.sizes = partial.counts;
        empty
    }

    /// The exact fixed-point sums and counts of the current labels.
    fn sums(&self) -> Partial {
        let (d, k) = (self.d, self.k);
        let rows_per_task = CHUNK.max(self.n.div_ceil(4 * rayon::current_num_threads()));
        let scales = &self.scales;
        let zero = || (vec![0i64; k * d], vec![0u32; k]);
        let (sums, counts) = self
            .x
            .par_chunks(rows_per_task * d)
            .zip(self.labels.par_chunks(rows_per_task))
            .fold(zero, |(mut sums, mut counts), (xs, labels)| {
                accumulate(xs, labels, scales, &mut sums, &mut counts);
                (sums, counts)
            })
            .reduce(zero, |(mut s1, mut c1), (s2, c2)| {
                s1.iter_mut().zip(&s2).for_each(|(a, b)| *a += b);
                c1.iter_mut().zip(&c2).for_each(|(a, b)| *a += b);
                (s1, c1)
            });
        Partial {
            sums,
            counts,
            changed: 0,
            inertia: 0.0,
        }
    }
}

/// Adds the fixed-point rows of `xs` to the sums of their labels, and counts them.
#[inline(always)]
fn accumulate_generic(
    xs: &[f32],
    labels: &[u32],
    scales: &[f32],
    sums: &mut [i64],
    counts: &mut [u32],
) {
    let d = scales.len();
    for (row, &label) in xs.chunks_exact(d).zip(labels) {
        let acc = &mut sums[label as usize * d..(label as usize + 1) * d];
        for ((a, &v), &s) in acc.iter_mut().zip(row).zip(scales) {
            *a += to_fixed(v, s);
        }
        counts[label as usize] += 1;
    }
}

/// [`accumulate_generic`] with SSE4.1, whose `roundss` rounds ties to even in one instruction
/// (without it `round_ties_even` is a call into the C library).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.1")]
fn accumulate_sse41(
    xs: &[f32],
    labels: &[u32],
    scales: &[f32],
    sums: &mut [i64],
    counts: &mut [u32],
) {
    accumulate_generic(xs, labels, scales, sums, counts)
}

fn accumulate(xs: &[f32], labels: &[u32], scales: &[f32], sums: &mut [i64], counts: &mut [u32]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("sse4.1") {
        // SAFETY: the feature was just detected.
        return unsafe { accumulate_sse41(xs, labels, scales, sums, counts) };
    }
    accumulate_generic(xs, labels, scales, sums, counts)
}

/// Squared norm of every row (the GPU's `row_sq_norms`).
pub(crate) fn row_sq_norms(x: &[f32], d: usize) -> Vec<f32> {
    let mut out = vec![0f32; x.len() / d];
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK * d))
        .for_each(|(o, rows)| {
            o.iter_mut()
                .zip(rows.chunks_exact(d))
                .for_each(|(v, r)| *v = sq_norm(r))
        });
    out
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
    if std::is_x86_feature_detected!("fma") && std::is_x86_feature_detected!("avx2") {
        // SAFETY: the features were just detected.
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

    fn seed_owner_counts(&mut self, ids: usize) -> Result<Vec<u32>> {
        self.seeder().seed_owner_counts(ids)
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
        if let Some(w) = super::simd::width() {
            let panels = super::simd::Panels::new(&self.centroids, d, w);
            let per_chunk: Vec<(u64, f64)> = self
                .labels
                .par_chunks_mut(CHUNK)
                .zip(self.min_dist.par_chunks_mut(CHUNK))
                .enumerate()
                .map(|(ci, (labels, dists))| {
                    let rows = ci * CHUNK..ci * CHUNK + labels.len();
                    let old: [u32; CHUNK] =
                        std::array::from_fn(|r| labels.get(r).map_or(0, |&l| l));
                    tiled::assign_rows(
                        metric,
                        &x[rows.start * d..rows.end * d],
                        &x_sq[rows],
                        &panels,
                        labels,
                        dists,
                    );
                    let (mut changed, mut inertia) = (0u64, 0f64);
                    for ((&label, &old), &dist) in labels.iter().zip(&old).zip(dists.iter()) {
                        changed += u64::from(label != old);
                        inertia += dist as f64;
                    }
                    (changed, inertia)
                })
                .collect();
            let changed = per_chunk.iter().map(|p| p.0).sum();
            let inertia = per_chunk.iter().map(|p| p.1).sum();
            return Ok(AssignStats { changed, inertia });
        }
        let cb = CentroidBlocks::new(&self.centroids, d);
        let per_chunk: Vec<(u64, f64)> = self
            .labels
            .par_chunks_mut(CHUNK)
            .zip(self.min_dist.par_chunks_mut(CHUNK))
            .enumerate()
            .map(|(ci, (labels, dists))| {
                let (mut changed, mut inertia) = (0u64, 0f64);
                for (r, (label, dist)) in labels.iter_mut().zip(dists.iter_mut()).enumerate() {
                    let i = ci * CHUNK + r;
                    let (best, best_dist) = nearest(metric, &x[i * d..(i + 1) * d], x_sq[i], &cb);
                    changed += u64::from(*label != best);
                    *label = best;
                    *dist = best_dist;
                    inertia += best_dist as f64;
                }
                (changed, inertia)
            })
            .collect();
        let changed = per_chunk.iter().map(|p| p.0).sum();
        let inertia = per_chunk.iter().map(|p| p.1).sum();
        Ok(AssignStats { changed, inertia })
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
            inertia: stats.inertia,
            ..partial
        })
    }

    fn min_distances(&self) -> Result<Vec<f32>> {
        Ok(self.min_dist.clone())
    }

    fn sizes(&self) -> Result<Vec<u32>> {
        Ok(self.sizes.clone())
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
