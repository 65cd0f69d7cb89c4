//! Seeding on the CPU: the twins of `kernels_gpu::init` (k-means++ trials batched in one pass,
//! the located draws, k-means‖ nearest-row updates, sampling and owner weights). Rayon over fixed
//! chunks of points; every distance is `kernels_gpu::seeding::distance_from` of an accumulator
//! of `kernels_gpu::math::assign_step` in dimension order (squared L2 in the expanded form, from
//! the rows' squared norms), eight candidates per SIMD register; sums are exact integers, so they
//! equal the GPU's.

use super::kmeans::row_sq_norms;
use super::locate::{draw_block, draw_row};
use crate::backend::vocab::CHUNK;
use crate::backend::{Picks, Seeding, Seeds, Trials};
use crate::error::Result;
use kernels_gpu::math::{AssignMetric, assign_step};
use kernels_gpu::seeding::{WeightScale, distance_from, row_distance, sampled, uniform32};
use rayon::prelude::*;
use std::borrow::Cow;
use std::sync::Arc;

/// Candidates per SIMD block.
const LANES: usize = 8;

/// Seeding state over a row-major matrix: each point's distance to its nearest seed, that
/// seed's id, and (k-means++) the per-chunk weight sums of every trial of the last step.
pub(crate) struct Seeder<'a> {
    x: &'a [f32],
    d: usize,
    metric: AssignMetric,
    /// Every row's squared norm (read for squared L2; empty for L1), computed once.
    norms: Arc<[f32]>,
    /// The row of the whole data set that row 0 is (k-means‖'s uniforms).
    first_row: u32,
    /// Units that each row stands for (its sample weight, or the weight of the points a k-means‖
    /// candidate stands for); `None`: one each.
    multiplicity: Option<Vec<u64>>,
    min_dist: Vec<f32>,
    owner: Vec<u32>,
    /// `trials × chunks` weight sums of the last [`Seeding::seed_trials`] (after `seed_nearest`:
    /// one row, of the current weights).
    chunk_sums: Vec<u64>,
    /// The last step's candidates (`trials × d`) and their squared norms, and the accepted one
    /// not yet applied to `min_dist`.
    last: Vec<f32>,
    last_norms: Vec<f32>,
    pending: Option<usize>,
}

/// Candidates regrouped for [`block_distances`]: dimension-major blocks of `LANES` (zero-padded,
/// `d` entries a block) and each block's squared norms.
struct Blocks {
    coords: Vec<[f32; LANES]>,
    norms: Vec<[f32; LANES]>,
}

impl<'a> Seeder<'a> {
    /// Seeding over the rows of `x`, row 0 being row `first_row` of the whole data set.
    pub(crate) fn new(x: &'a [f32], d: usize, metric: AssignMetric, first_row: u32) -> Self {
        let norms = match metric {
            AssignMetric::SqL2 => row_sq_norms(x, d).into(),
            AssignMetric::L1 => Arc::from([]),
        };
        Self::with_row_norms(x, d, metric, first_row, norms)
    }

    /// [`Seeder::new`] with every row's squared norm already at hand (`row_sq_norms` of `x`,
    /// as a Lloyd step keeps them), so that they are not computed again.
    pub(crate) fn with_row_norms(
        x: &'a [f32],
        d: usize,
        metric: AssignMetric,
        first_row: u32,
        norms: Arc<[f32]>,
    ) -> Self {
        let n = x.len() / d;
        Seeder {
            x,
            d,
            metric,
            norms,
            first_row,
            multiplicity: None,
            min_dist: vec![f32::INFINITY; n],
            owner: vec![0; n],
            chunk_sums: vec![],
            last: vec![],
            last_norms: vec![],
            pending: None,
        }
    }

    /// Weights every row by `units` (what it stands for).
    pub(crate) fn weighted(mut self, units: Vec<u64>) -> Self {
        self.multiplicity = Some(units);
        self
    }

    /// The units of row `i`.
    fn units(&self, i: usize) -> u64 {
        self.multiplicity.as_ref().map_or(1, |m| m[i])
    }

    fn rows(&self) -> usize {
        self.min_dist.len()
    }

    fn weight(&self, ws: WeightScale, i: usize, dist: f32) -> u64 {
        ws.weight_of(self.metric, dist, self.units(i))
    }

    /// The squared norm of row `i` where the metric reads it (0 for L1).
    fn norm(&self, i: usize) -> f32 {
        norm_at(&self.norms, i)
    }

    /// The squared norms of `points` (`count × d`) where the metric reads them: the bits of
    /// [`Seeder::norms`] for rows of `x`, as the GPU's norms of its staged rows.
    fn sq_norms(&self, points: &[f32]) -> Vec<f32> {
        match self.metric {
            AssignMetric::SqL2 => row_sq_norms(points, self.d),
            AssignMetric::L1 => vec![0.0; points.len() / self.d],
        }
    }

    /// The coordinates of `seeds`, `count × d`.
    fn points<'s>(&self, seeds: Seeds<'s>) -> Cow<'s, [f32]> {
        match seeds {
            Seeds::Points(p) => Cow::Borrowed(p),
            Seeds::Rows(rows) => Cow::Owned(self.gather(rows)),
        }
    }

    fn gather(&self, rows: &[u32]) -> Vec<f32> {
        let d = self.d;
        rows.iter()
            .flat_map(|&r| &self.x[r as usize * d..(r as usize + 1) * d])
            .copied()
            .collect()
    }

    /// The accepted trial of the last step (its coordinates and squared norm), if any.
    fn pending_point(&self) -> Option<(&[f32], f32)> {
        let d = self.d;
        self.pending
            .map(|t| (&self.last[t * d..(t + 1) * d], self.last_norms[t]))
    }

    /// `points` (`count × d`) regrouped dimension-major in blocks of `LANES` (zero-padded), with
    /// their squared norms.
    fn blocks(&self, points: &[f32]) -> Blocks {
        let d = self.d;
        let count = points.len() / d;
        let mut coords = vec![[0f32; LANES]; count.div_ceil(LANES) * d];
        let mut norms = vec![[0f32; LANES]; count.div_ceil(LANES)];
        let sq_norms = self.sq_norms(points);
        for (c, row) in points.chunks_exact(d).enumerate() {
            for j in 0..d {
                coords[(c / LANES) * d + j][c % LANES] = row[j];
            }
            norms[c / LANES][c % LANES] = sq_norms[c];
        }
        Blocks { coords, norms }
    }

    /// The point where draw `r` falls in the cumulative weights (chunk sums `sums`), with the
    /// pending point (coordinates and squared norm) applied to the weights.
    fn locate(&self, r: u64, sums: &[u64], pending: Option<(&[f32], f32)>, ws: WeightScale) -> u32 {
        let (chunk, rest) = draw_block(r, sums);
        let (d, n) = (self.d, self.rows());
        draw_row(rest, chunk * CHUNK..((chunk + 1) * CHUNK).min(n), |i| {
            let mut m = self.min_dist[i];
            if let Some((c, c_sq)) = pending {
                let x = &self.x[i * d..(i + 1) * d];
                let dist = distance(self.metric, x, c, self.norm(i), c_sq);
                if dist < m {
                    m = dist;
                }
            }
            self.weight(ws, i, m)
        })
    }

    /// The rows `draws` pick in the weights of the accepted trial (or of the last nearest pass).
    fn locate_all(&self, draws: &[u64], ws: WeightScale) -> Vec<u32> {
        let chunks = self.rows().div_ceil(CHUNK);
        let row = self.pending.unwrap_or(0);
        let sums = &self.chunk_sums[row * chunks..(row + 1) * chunks];
        let pending = self.pending_point();
        draws
            .iter()
            .map(|&r| self.locate(r, sums, pending, ws))
            .collect()
    }
}

/// Row `i`'s squared norm in `norms`, a seeder's (empty for L1, which reads none: 0).
#[inline(always)]
fn norm_at(norms: &[f32], i: usize) -> f32 {
    if norms.is_empty() { 0.0 } else { norms[i] }
}

/// [`row_distance`] with the FMA instruction (without it every squared-L2 step is a call into
/// the C library's `fmaf`: same bits, about 10 ns each, which made `locate` as slow as a whole
/// pass over a few thousand rows).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
fn distance_fma(metric: AssignMetric, x: &[f32], c: &[f32], x_sq: f32, c_sq: f32) -> f32 {
    row_distance(metric, x, c, x_sq, c_sq)
}

/// The seeding distance of rows `x` and `c` of squared norms `x_sq` and `c_sq`, as the GPU
/// kernels compute it.
fn distance(metric: AssignMetric, x: &[f32], c: &[f32], x_sq: f32, c_sq: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if super::simd::level() >= super::simd::SimdLevel::Avx2 {
        // SAFETY: the active level (AVX2 includes FMA and SSE4.1) is never above the detected one.
        return unsafe { distance_fma(metric, x, c, x_sq, c_sq) };
    }
    row_distance(metric, x, c, x_sq, c_sq)
}

/// Distances from `point` (squared norm `x_sq`) to the `LANES` candidates of each block of
/// `blocks`, written to `out` in candidate order: the accumulators in dimension order, then
/// `distance_from` with the candidates' norms.
#[inline(always)]
fn block_distances_generic(
    metric: AssignMetric,
    point: &[f32],
    x_sq: f32,
    blocks: &Blocks,
    out: &mut [f32],
) {
    let d = point.len();
    let tiles = blocks.coords.chunks_exact(d).zip(&blocks.norms);
    for (b, (block, c_sq)) in tiles.enumerate() {
        let mut acc = [0f32; LANES];
        for (&v, cs) in point.iter().zip(block) {
            for l in 0..LANES {
                acc[l] = assign_step(metric, acc[l], v, cs[l]);
            }
        }
        for l in 0..LANES {
            out[b * LANES + l] = distance_from(metric, acc[l], x_sq, c_sq[l]);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn block_distances_fma(
    metric: AssignMetric,
    point: &[f32],
    x_sq: f32,
    blocks: &Blocks,
    out: &mut [f32],
) {
    block_distances_generic(metric, point, x_sq, blocks, out)
}

/// [`block_distances_generic`], with AVX2 and FMA where the CPU has them (same bits).
fn block_distances(
    metric: AssignMetric,
    point: &[f32],
    x_sq: f32,
    blocks: &Blocks,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if super::simd::level() >= super::simd::SimdLevel::Avx2 {
        // SAFETY: the active level is never above the detected one.
        return unsafe { block_distances_fma(metric, point, x_sq, blocks, out) };
    }
    block_distances_generic(metric, point, x_sq, blocks, out)
}

impl Seeding for Seeder<'_> {
    fn seed_nearest(
        &mut self,
        seeds: Seeds<'_>,
        first_id: u32,
        fresh: bool,
        ws: WeightScale,
    ) -> Result<u64> {
        self.pending = None;
        let (d, metric, x) = (self.d, self.metric, self.x);
        let points = self.points(seeds);
        let blocks = self.blocks(&points);
        let count = points.len() / d;
        let multiplicity = self.multiplicity.as_deref();
        let norms = &self.norms;
        let sums: Vec<u64> = self
            .min_dist
            .par_chunks_mut(CHUNK)
            .zip(self.owner.par_chunks_mut(CHUNK))
            .enumerate()
            .map(|(ci, (mins, owners))| {
                let mut dist = vec![0f32; blocks.norms.len() * LANES];
                let mut sum = 0u64;
                for (r, (m, o)) in mins.iter_mut().zip(owners.iter_mut()).enumerate() {
                    let i = ci * CHUNK + r;
                    if fresh {
                        (*m, *o) = (f32::INFINITY, first_id);
                    }
                    let x_sq = norm_at(norms, i);
                    block_distances(metric, &x[i * d..(i + 1) * d], x_sq, &blocks, &mut dist);
                    for (c, &v) in dist[..count].iter().enumerate() {
                        if v < *m {
                            (*m, *o) = (v, first_id + c as u32);
                        }
                    }
                    sum += ws.weight_of(metric, *m, multiplicity.map_or(1, |mult| mult[i]));
                }
                sum
            })
            .collect();
        let total = sums.iter().sum();
        self.chunk_sums = sums;
        self.last.clear();
        self.last_norms.clear();
        Ok(total)
    }

    fn seed_trials(&mut self, picks: Picks<'_>, ws: WeightScale) -> Result<Trials> {
        let chunks = self.rows().div_ceil(CHUNK);
        let candidates = match picks {
            Picks::Draws(draws) => self.locate_all(draws, ws),
            Picks::Seeds(Seeds::Rows(rows)) => rows.to_vec(),
            Picks::Seeds(Seeds::Points(_)) => vec![],
        };
        let points = match picks {
            Picks::Seeds(Seeds::Points(p)) => p.to_vec(),
            _ => self.gather(&candidates),
        };
        let pending = self.pending_point().map(|(c, _)| c.to_vec());
        self.pending = None;
        let trials = points.len() / self.d;
        let mut all = points.clone();
        all.extend(pending.iter().flatten());
        let pending = pending.is_some();
        let blocks = self.blocks(&all);
        let (d, metric, x) = (self.d, self.metric, self.x);
        let multiplicity = self.multiplicity.as_deref();
        let norms = &self.norms;
        let per_chunk: Vec<Vec<u64>> = self
            .min_dist
            .par_chunks_mut(CHUNK)
            .enumerate()
            .map(|(ci, mins)| {
                let mut dist = vec![0f32; blocks.norms.len() * LANES];
                let mut sums = vec![0u64; trials];
                for (r, m) in mins.iter_mut().enumerate() {
                    let i = ci * CHUNK + r;
                    let x_sq = norm_at(norms, i);
                    block_distances(metric, &x[i * d..(i + 1) * d], x_sq, &blocks, &mut dist);
                    if pending && dist[trials] < *m {
                        *m = dist[trials];
                    }
                    let units = multiplicity.map_or(1, |mult| mult[i]);
                    for (s, &v) in sums.iter_mut().zip(&dist[..trials]) {
                        *s += ws.weight_of(metric, if v < *m { v } else { *m }, units);
                    }
                }
                sums
            })
            .collect();
        let mut potentials = vec![0u64; trials];
        self.chunk_sums = vec![0; trials * chunks];
        for (ci, sums) in per_chunk.iter().enumerate() {
            for (t, &s) in sums.iter().enumerate() {
                potentials[t] += s;
                self.chunk_sums[t * chunks + ci] = s;
            }
        }
        self.last_norms = self.sq_norms(&points);
        self.last = points;
        Ok(Trials {
            candidates,
            potentials,
        })
    }

    fn seed_locate(&mut self, draws: &[u64], ws: WeightScale) -> Result<Vec<u32>> {
        Ok(self.locate_all(draws, ws))
    }

    fn seed_accept(&mut self, trial: usize) {
        self.pending = Some(trial);
    }

    fn seed_sample(
        &mut self,
        seed: u64,
        round: u32,
        ell: u64,
        phi: u64,
        ws: WeightScale,
    ) -> Result<Vec<u32>> {
        let first_row = self.first_row;
        let picked: Vec<Vec<u32>> = self
            .min_dist
            .par_chunks(CHUNK)
            .enumerate()
            .map(|(ci, mins)| {
                (0..mins.len())
                    .filter(|&r| {
                        let i = ci * CHUNK + r;
                        let weight = self.weight(ws, i, mins[r]);
                        sampled(
                            uniform32(seed, round, first_row + i as u32),
                            weight,
                            ell,
                            phi,
                        )
                    })
                    .map(|r| (ci * CHUNK + r) as u32)
                    .collect()
            })
            .collect();
        Ok(picked.concat())
    }

    fn seed_owner_weights(&mut self, ids: usize) -> Result<Vec<u64>> {
        let mut totals = vec![0u64; ids];
        for (i, &o) in self.owner.iter().enumerate() {
            totals[o as usize] += self.units(i);
        }
        Ok(totals)
    }
}
