//! One Lloyd step over some rows, as exact partial results that add up across shards, and the
//! finishing step that turns the combined partials into the next centroids.

use kernels_gpu::fixed::mean;
use kernels_gpu::math::normalize;
use rayon::prelude::*;
use std::cmp::Ordering;

/// What one shard's assignment and accumulation report: everything a step needs from it.
#[derive(Clone, Debug, PartialEq)]
pub struct Partial {
    /// `k × d` fixed-point sums of the rows of each cluster, times their units (exact: any
    /// split adds up to the same integers).
    pub sums: Vec<i64>,
    /// Units of weight per cluster (rows, without sample weights).
    pub weights: Vec<u64>,
    /// Rows with weight whose label changed in this assignment.
    pub changed: u64,
    /// The fixed-point inertia of the assignment (the kernels' integer, see
    /// `kernels_gpu::fixed::inertia_exponent`): shards add up to the whole, wrapping as the
    /// kernels add.
    pub inertia: i64,
}

impl Partial {
    /// Nothing yet: `k` clusters of `d` dimensions.
    pub fn zeros(k: usize, d: usize) -> Self {
        Partial {
            sums: vec![0; k * d],
            weights: vec![0; k],
            changed: 0,
            inertia: 0,
        }
    }

    /// Adds another shard's partial.
    pub fn merge(&mut self, other: &Partial) {
        self.sums
            .iter_mut()
            .zip(&other.sums)
            .for_each(|(a, b)| *a += b);
        self.weights
            .iter_mut()
            .zip(&other.weights)
            .for_each(|(a, b)| *a += b);
        self.changed += other.changed;
        self.inertia = self.inertia.wrapping_add(other.inertia);
    }

    /// The next centroids from the combined partials of every row, as every backend's update
    /// computes them: each cluster's mean (`kernels_gpu::fixed::mean`, with `inv_scales[j] =
    /// 2^−s_j`), scaled to unit norm for spherical k-means, or for a cluster without weight its
    /// `current` centroid. Returns the number of clusters without weight.
    pub fn finish(
        &self,
        current: &[f32],
        inv_scales: &[f64],
        spherical: bool,
        next: &mut [f32],
    ) -> usize {
        let d = inv_scales.len();
        let mut empty = 0;
        for (c, &weight) in self.weights.iter().enumerate() {
            let row = c * d..(c + 1) * d;
            if weight == 0 {
                empty += 1;
                next[row.clone()].copy_from_slice(&current[row]);
            } else {
                for j in 0..d {
                    next[c * d + j] = mean(self.sums[c * d + j], inv_scales[j], weight);
                }
                if spherical {
                    normalize(&mut next[row]);
                }
            }
        }
        empty
    }
}

/// Cluster sizes of an assignment (rows per label): what a run reports at its end.
#[derive(Clone, Debug, PartialEq)]
pub struct Tally {
    /// Points per cluster.
    pub sizes: Vec<u32>,
}

impl Tally {
    /// The tally of `labels` (below `k`), counted on the rayon threads a chunk each.
    pub fn of(labels: &[u32], k: usize) -> Self {
        let count = |chunk: &[u32]| {
            let mut sizes = vec![0u32; k];
            chunk.iter().for_each(|&l| sizes[l as usize] += 1);
            Tally { sizes }
        };
        // Each chunk counts into k sizes of its own: many labels a size.
        let grain = (1 << 20).max(16 * k);
        if labels.len() <= grain {
            return count(labels);
        }
        labels.par_chunks(grain).map(count).reduce(
            || Tally { sizes: vec![0; k] },
            |mut a, b| {
                a.merge(&b);
                a
            },
        )
    }

    /// Adds another shard's tally.
    pub fn merge(&mut self, other: &Tally) {
        self.sizes
            .iter_mut()
            .zip(&other.sizes)
            .for_each(|(a, b)| *a += b);
    }
}

/// The squared shift `Σ (next − current)²` between two sets of centroids, summed in `f64` in
/// row-major order: the value that decides `tol` (the GPU sums the same terms in another order
/// and defers to this one when the difference could matter).
pub fn squared_shift(next: &[f32], current: &[f32]) -> f64 {
    next.iter()
        .zip(current)
        .map(|(&a, &b)| {
            let diff = a as f64 - b as f64;
            diff * diff
        })
        .sum()
}

/// A row far from its centroid: an empty cluster's new centroid.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Farthest {
    /// Its distance to its centroid.
    pub distance: f32,
    /// Its row in the whole data set.
    pub row: u64,
}

/// Farthest first; equal distances by row, lowest first.
fn farthest_first(a: &Farthest, b: &Farthest) -> Ordering {
    b.distance.total_cmp(&a.distance).then(a.row.cmp(&b.row))
}

/// The `count` rows with weight (`units`: every row's units, `None`: one each) of `distances`
/// (row `i` being row `first_row + i` of the whole data set) farthest from their centroids,
/// farthest first, equal distances by lowest row.
pub fn farthest(
    distances: &[f32],
    units: Option<&[f32]>,
    first_row: u64,
    count: usize,
) -> Vec<Farthest> {
    let mut all: Vec<Farthest> = distances
        .iter()
        .enumerate()
        .filter(|&(i, _)| units.is_none_or(|u| u[i] > 0.0))
        .map(|(i, &distance)| Farthest {
            distance,
            row: first_row + i as u64,
        })
        .collect();
    let take = count.min(all.len());
    if take < all.len() {
        all.select_nth_unstable_by(take, farthest_first);
    }
    all.truncate(take);
    all.sort_by(farthest_first);
    all
}

/// The `count` farthest rows among several shards' [`farthest`] lists (each of at least
/// `count` rows or all of its shard's): the same rows as [`farthest`] over all rows at once.
pub fn merge_farthest(
    lists: impl IntoIterator<Item = Vec<Farthest>>,
    count: usize,
) -> Vec<Farthest> {
    let mut all: Vec<Farthest> = lists.into_iter().flatten().collect();
    all.sort_by(farthest_first);
    all.truncate(count);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counted in chunks on several threads (more labels than a chunk, a short last one) or in
    /// one, the tally is the labels' count.
    #[test]
    fn tallies_count_every_label_once() {
        let k = 7;
        for n in [0, 5, (1 << 20) + 12_345, 3 << 20] {
            let labels: Vec<u32> = (0..n)
                .map(|i| ((i * 2_654_435_761usize) % k) as u32)
                .collect();
            let mut want = vec![0u32; k];
            labels.iter().for_each(|&l| want[l as usize] += 1);
            assert_eq!(Tally::of(&labels, k).sizes, want, "n = {n}");
        }
    }

    #[test]
    fn finish_takes_means_and_keeps_empty_clusters() {
        let p = Partial {
            sums: vec![6, 8, 0, 0],
            weights: vec![2, 0],
            changed: 2,
            inertia: 1,
        };
        let mut next = vec![0.0; 4];
        let empty = p.finish(&[9.0, 9.0, 5.0, 6.0], &[0.5, 0.25], false, &mut next);
        assert_eq!(empty, 1);
        assert_eq!(next, vec![1.5, 1.0, 5.0, 6.0]);
    }

    #[test]
    fn merged_farthest_equals_farthest_of_all_rows() {
        let distances: Vec<f32> = (0..500).map(|i| ((i * 7) % 5) as f32).collect();
        let whole = farthest(&distances, None, 0, 9);
        let lists = distances
            .chunks(33)
            .enumerate()
            .map(|(s, part)| farthest(part, None, 33 * s as u64, 9));
        assert_eq!(merge_farthest(lists, 9), whole);
        // 4 is the largest value, on every fifth row from row 2; ties go to the lowest rows.
        let rows: Vec<u64> = whole.iter().map(|f| f.row).collect();
        assert_eq!(rows, (0..9).map(|i| 2 + 5 * i).collect::<Vec<u64>>());
        assert!(whole.iter().all(|f| f.distance == 4.0));
    }
}
