//! The GPU's `seed_locate_*` kernels on the host, over a seeder's state in host memory: a
//! streamed batch between its turns locates a k-means++ step's draws here, without its rows and
//! seeding state going up for a pass that reads one block of rows per draw.

use super::kmeans::row_sq_norms;
use kernels_gpu::fixed::weight_units;
use kernels_gpu::math::AssignMetric;
use kernels_gpu::seeding::{WeightScale, row_distance};
use std::ops::Range;

/// Rows and their seeding state as a GPU seeder holds them: every row's distance to its nearest
/// seed, and the weight sums of the blocks of `block` rows for each trial of the last pass.
pub(crate) struct BlockWeights<'a> {
    /// The rows (`n × d`).
    pub x: &'a [f32],
    pub d: usize,
    pub metric: AssignMetric,
    pub min_dist: MinDist<'a>,
    /// Every row's units (integer-valued); `None`: one each.
    pub units: Option<&'a [f32]>,
    /// The block sums of the weights being drawn from (one trial's).
    pub sums: &'a [u64],
    /// Rows per block of `sums` (`kernels_gpu::launch::BLOCK`).
    pub block: usize,
}

/// Every row's distance to its nearest seed: kept, or the least of its distances to the seeds
/// (row-major), computed for the rows a draw reads.
#[derive(Clone, Copy)]
pub(crate) enum MinDist<'a> {
    Kept(&'a [f32]),
    Seeds(&'a [f32]),
}

/// The block where draw `r` falls in cumulative weights kept as block sums (the first whose
/// cumulative sum exceeds `r`; the last when none does), and what is left of `r` at its start.
pub(crate) fn draw_block(r: u64, sums: &[u64]) -> (usize, u64) {
    let (mut rest, mut b) = (r, 0);
    while b + 1 < sums.len() && rest >= sums[b] {
        rest -= sums[b];
        b += 1;
    }
    (b, rest)
}

/// The row of `rows` where `rest` falls, row `i` weighing `weight(i)`: the first whose
/// cumulative weight exceeds `rest`, the last when none does.
pub(crate) fn draw_row(
    mut rest: u64,
    rows: Range<usize>,
    mut weight: impl FnMut(usize) -> u64,
) -> u32 {
    let last = rows.end - 1;
    for i in rows {
        let w = weight(i);
        if rest < w {
            return i as u32;
        }
        rest -= w;
    }
    last as u32
}

impl BlockWeights<'_> {
    /// The row draw `r` (below the total weight) picks, each row weighing
    /// `min(min_dist, dist(row, pending))`, as `kernels_gpu::init::locate_draw` finds it.
    pub(crate) fn locate(&self, r: u64, pending: Option<&[f32]>, ws: WeightScale) -> u32 {
        let d = self.d;
        let n = self.x.len() / d.max(1);
        let (b, rest) = draw_block(r, self.sums);
        let start = b * self.block;
        let end = (start + self.block).min(n);
        let l2 = self.metric == AssignMetric::SqL2;
        let sq_norms = |rows: &[f32]| match l2 {
            true => row_sq_norms(rows, d),
            false => vec![0.0; rows.len() / d.max(1)],
        };
        let norms = sq_norms(&self.x[start * d..end * d]);
        let (seeds, seed_norms) = match self.min_dist {
            MinDist::Kept(_) => (&[][..], vec![]),
            MinDist::Seeds(s) => (s, sq_norms(s)),
        };
        let pending = pending.map(|c| (c, sq_norms(c)[0]));
        draw_row(rest, start..end, |i| {
            let (row, x_sq) = (&self.x[i * d..(i + 1) * d], norms[i - start]);
            // The nearest and trials kernels' `min`: lowered only by a strictly nearer seed.
            let lower = |m: f32, c: &[f32], c_sq: f32| {
                let dist = row_distance(self.metric, row, c, x_sq, c_sq);
                if dist < m { dist } else { m }
            };
            let mut m = match self.min_dist {
                MinDist::Kept(kept) => kept[i],
                MinDist::Seeds(_) => (seeds.chunks_exact(d))
                    .zip(&seed_norms)
                    .fold(f32::INFINITY, |m, (c, &c_sq)| lower(m, c, c_sq)),
            };
            if let Some((c, c_sq)) = pending {
                m = lower(m, c, c_sq);
            }
            ws.weight_of(
                self.metric,
                m,
                weight_units(self.units.map(|u| u[i])) as u64,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::Seeder;
    use crate::backend::{Picks, Seeding, Seeds};

    /// Located from block sums of 256 rows, the draws pick the rows that the CPU seeder picks
    /// from its own chunks, with and without a pending winner, for both metrics, with units
    /// (zeros among them) and with a last block shorter than the others.
    #[test]
    fn block_sums_locate_the_rows_the_cpu_seeder_locates() {
        let (n, d, block) = (1000, 3, 256);
        let x: Vec<f32> = (0..n * d)
            .map(|i| ((i * 7919) % 97) as f32 / 13.0)
            .collect();
        let units: Vec<f32> = (0..n).map(|i| ((i * 31) % 5) as f32).collect();
        let ws = WeightScale {
            scale: 4.0,
            cap: 1 << 40,
        };
        for metric in [AssignMetric::SqL2, AssignMetric::L1] {
            let mut seeder =
                Seeder::new(&x, d, metric, 0).weighted(units.iter().map(|&u| u as u64).collect());
            seeder
                .seed_nearest(Seeds::Rows(&[17]), 0, true, ws)
                .unwrap();
            let l2 = metric == AssignMetric::SqL2;
            let norms = if l2 {
                row_sq_norms(&x, d)
            } else {
                vec![0.0; n]
            };
            let dist = |i: usize, c: usize| {
                row_distance(
                    metric,
                    &x[i * d..][..d],
                    &x[c * d..][..d],
                    norms[i],
                    norms[c],
                )
            };
            let min_dist: Vec<f32> = (0..n).map(|i| dist(i, 17)).collect();
            // Located after the nearest pass (nothing pending), then after a trials pass with
            // one of its trials accepted.
            let mut tried = None;
            for (t, pending) in [(None, None), (Some(1), Some(3usize)), (Some(2), Some(999))] {
                if t.is_some() && tried.is_none() {
                    let trials = [400, 3, 999];
                    tried = Some(
                        seeder
                            .seed_trials(Picks::Seeds(Seeds::Rows(&trials)), ws)
                            .unwrap(),
                    );
                }
                let weight = |i: usize| {
                    let m = pending.map_or(min_dist[i], |c| min_dist[i].min(dist(i, c)));
                    ws.weight_of(metric, m, units[i] as u64)
                };
                let sums: Vec<u64> = (0..n.div_ceil(block))
                    .map(|b| (b * block..((b + 1) * block).min(n)).map(weight).sum())
                    .collect();
                let total: u64 = sums.iter().sum();
                if let Some(t) = t {
                    assert_eq!(total, tried.as_ref().unwrap().potentials[t]);
                    seeder.seed_accept(t);
                }
                let draws: Vec<u64> = [0, 1, total / 3, total / 2, total - 1].into();
                let expected = seeder.seed_locate(&draws, ws).unwrap();
                // The distances kept, or made again from the seed (row 17); with row 3
                // pending, also from both (a seed applied again changes no `min`).
                let seeds: Vec<f32> = [17, 3]
                    .iter()
                    .flat_map(|&r| x[r * d..][..d].to_vec())
                    .collect();
                let mut kinds = vec![MinDist::Kept(&min_dist), MinDist::Seeds(&seeds[..d])];
                if pending == Some(3) {
                    kinds.push(MinDist::Seeds(&seeds));
                }
                for min_dist in kinds {
                    let weights = BlockWeights {
                        x: &x,
                        d,
                        metric,
                        min_dist,
                        units: Some(&units),
                        sums: &sums,
                        block,
                    };
                    let point = pending.map(|c| &x[c * d..(c + 1) * d]);
                    let found: Vec<u32> = draws
                        .iter()
                        .map(|&r| weights.locate(r, point, ws))
                        .collect();
                    assert_eq!(found, expected, "{metric:?}, pending {pending:?}");
                }
            }
        }
    }
}
