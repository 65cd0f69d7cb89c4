//! Pairwise distances, neighbour keys and vote weights: the plain arithmetic that the distance,
//! selection and vote kernels share with the CPU backend, so both give the same floats, the same
//! neighbour order and the same votes.
//!
//! * A distance is accumulated over the dimensions in order 0..d — a fused multiply-add per
//!   dimension for the dot product of the L2 family, inner product and cosine, `acc + |x − y|` for
//!   L1 — then finished by [`finish`] from the dot product and the two squared norms.
//! * A neighbour is a 64-bit [`key`]: the distance mapped to an order-preserving u32 in the high
//!   half, the training index in the low half. Keys are unique, so "k smallest keys" is one exact
//!   answer however the candidates are visited: equal distances come out by training index.
//! * Votes are integers (fixed-point weights for distance weighting), so the sums do not depend on
//!   the order of the additions.

use crate::fixed::to_fixed;
use crate::lp_distance::{self as lp, MinkowskiP};
use crate::math::{fma, sqrt};

/// Distance of the kNN kernels, as passed to them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum PairMetric {
    /// `‖x − y‖²` in the GEMM form `‖x‖² + ‖y‖² − 2·x·y`, clamped at 0.
    SqEuclidean = 0,
    /// The square root of [`PairMetric::SqEuclidean`].
    Euclidean = 1,
    /// `Σ |x_j − y_j|`, accumulated directly.
    L1 = 2,
    /// `−x·y`: larger inner products are nearer.
    InnerProduct = 3,
    /// `1 − x·y / (‖x‖·‖y‖)`, clamped to [0, 2]; 1 when either vector is zero.
    Cosine = 4,
    /// `max_j |x_j − y_j|` ([`crate::lp`], its own kernel).
    Chebyshev = 5,
    /// `(Σ_j |x_j − y_j|^p)^(1/p)` ([`crate::lp`], its own kernel, which takes `p`).
    Minkowski(MinkowskiP) = 6,
}

impl PairMetric {
    /// The kernel argument for this metric (and the kNN auto cache's name for it; the Minkowski
    /// exponent is not part of it).
    pub const fn id(self) -> u32 {
        match self {
            PairMetric::SqEuclidean => 0,
            PairMetric::Euclidean => 1,
            PairMetric::L1 => 2,
            PairMetric::InnerProduct => 3,
            PairMetric::Cosine => 4,
            PairMetric::Chebyshev => 5,
            PairMetric::Minkowski(_) => 6,
        }
    }

    /// The metric for a kernel argument of `pairwise_dot` (ids of other kernels' metrics, and
    /// unknown ones, read as squared Euclidean).
    pub const fn from_id(id: u32) -> Self {
        match id {
            1 => PairMetric::Euclidean,
            2 => PairMetric::L1,
            3 => PairMetric::InnerProduct,
            4 => PairMetric::Cosine,
            _ => PairMetric::SqEuclidean,
        }
    }

    /// Whether the accumulator is the L1 distance (else the dot product).
    pub const fn is_l1(self) -> bool {
        matches!(self, PairMetric::L1)
    }

    /// Whether the distance is computed by [`crate::lp`] (not by [`pair_step`] and [`finish`]).
    pub const fn is_lp(self) -> bool {
        matches!(self, PairMetric::Chebyshev | PairMetric::Minkowski(_))
    }

    /// Whether [`finish`] reads the squared norms.
    pub const fn needs_norms(self) -> bool {
        matches!(
            self,
            PairMetric::SqEuclidean | PairMetric::Euclidean | PairMetric::Cosine
        )
    }
}

/// One dimension's contribution to the accumulator of a pair: `acc + |x − y|` for L1, else the
/// dot product's fused multiply-add.
#[inline(always)]
pub fn pair_step(l1: bool, acc: f32, x: f32, y: f32) -> f32 {
    if l1 {
        acc + (x - y).abs()
    } else {
        fma(x, y, acc)
    }
}

/// `‖x‖² + ‖y‖² − 2·x·y`, clamped at 0.
#[inline(always)]
pub fn sq_euclidean(dot: f32, x_sq_norm: f32, y_sq_norm: f32) -> f32 {
    let v = x_sq_norm + fma(-2.0, dot, y_sq_norm);
    if v > 0.0 { v } else { 0.0 }
}

/// The distance of a pair from its accumulator (dot product, or the L1 sum) and squared norms.
#[inline(always)]
pub fn finish(metric: PairMetric, acc: f32, x_sq_norm: f32, y_sq_norm: f32) -> f32 {
    match metric {
        PairMetric::SqEuclidean => sq_euclidean(acc, x_sq_norm, y_sq_norm),
        PairMetric::Euclidean => sqrt(sq_euclidean(acc, x_sq_norm, y_sq_norm)),
        // The Lp metrics never come here (`is_lp`): Chebyshev's maximum is its distance, and a
        // Minkowski sum is the f64 one of `lp`.
        PairMetric::L1 | PairMetric::Chebyshev | PairMetric::Minkowski(_) => acc,
        PairMetric::InnerProduct => -acc,
        PairMetric::Cosine => {
            let denom = sqrt(x_sq_norm) * sqrt(y_sq_norm);
            if denom > 0.0 {
                let v = 1.0 - acc / denom;
                if v > 0.0 {
                    if v < 2.0 { v } else { 2.0 }
                } else {
                    0.0
                }
            } else {
                1.0
            }
        }
    }
}

/// The distance between two equal-length vectors exactly as the kernels compute it: norms and
/// accumulator over the dimensions in order, then [`finish`].
pub fn distance(metric: PairMetric, x: &[f32], y: &[f32]) -> f32 {
    match metric {
        PairMetric::Chebyshev => return lp::distance(lp::Chebyshev, x, y),
        PairMetric::Minkowski(p) => return lp::distance(lp::Minkowski(p), x, y),
        _ => {}
    }
    let l1 = metric.is_l1();
    let mut acc = 0.0;
    for (&a, &b) in x.iter().zip(y) {
        acc = pair_step(l1, acc, a, b);
    }
    let (xn, yn) = if metric.needs_norms() {
        (crate::math::sq_norm(x), crate::math::sq_norm(y))
    } else {
        (0.0, 0.0)
    };
    finish(metric, acc, xn, yn)
}

/// The key that is larger than every neighbour key (an empty slot).
pub const NO_KEY: u64 = u64::MAX;

/// A distance as a u32 whose unsigned order is the float order: −0 and +0 map alike, NaN (any
/// payload) after +∞.
#[inline(always)]
pub fn ordered_bits(dist: f32) -> u32 {
    if dist.is_nan() {
        return u32::MAX;
    }
    let bits = (dist + 0.0).to_bits();
    if bits >> 31 != 0 {
        !bits
    } else {
        bits | 0x8000_0000
    }
}

/// The neighbour key of training row `index` at distance `dist`: smaller is nearer, equal
/// distances order by index.
#[inline(always)]
pub fn key(dist: f32, index: u32) -> u64 {
    ((ordered_bits(dist) as u64) << 32) | index as u64
}

/// The training index of a key.
#[inline(always)]
pub fn key_index(key: u64) -> u32 {
    key as u32
}

/// The distance of a key (−0 comes back as +0, NaN as the canonical NaN).
#[inline(always)]
pub fn key_distance(key: u64) -> f32 {
    let o = (key >> 32) as u32;
    if o >> 31 != 0 {
        f32::from_bits(o & 0x7fff_ffff)
    } else {
        f32::from_bits(!o)
    }
}

// ---- launch shapes -------------------------------------------------------------------------

/// Threads of a distance block: 16 row groups × 16 column groups, 8 × 8 outputs each.
pub const DIST_BLOCK: u32 = 256;
/// Rows of A and rows of B (output columns) per distance block.
pub const DIST_TILE: usize = 128;
/// Dimensions per shared-memory chunk of the distance kernels.
pub const DIST_JC: usize = 16;
/// Row stride (f32) of a transposed shared tile; +4 keeps rows 16-byte aligned.
pub const DIST_STRIDE: usize = DIST_TILE + 4;

/// Dynamic shared memory of a distance block, in bytes: two buffers of a chunk of both tiles
/// (the sm_80 kernels copy the next chunk into one while multiplying the other; the others, and
/// the Lp kernels, use the first).
pub const fn dist_shared_bytes() -> usize {
    2 * 2 * DIST_JC * DIST_STRIDE * 4
}

/// Blocks of a distance launch over `rows × cols` outputs.
pub const fn dist_blocks(rows: usize, cols: usize) -> usize {
    rows.div_ceil(DIST_TILE) * cols.div_ceil(DIST_TILE)
}

/// Threads of a selection block (one block per query row).
pub const SELECT_BLOCK: u32 = 256;
/// Keys a selection block holds in shared memory (32 KiB): the running k plus a tile's candidates;
/// also the chunk that the large-k bitonic sort handles inside one block.
pub const SELECT_CAP: usize = 4096;
/// Keys per thread of the k-min selection (kept in registers).
pub const SELECT_PER_THREAD: usize = SELECT_CAP / SELECT_BLOCK as usize;
/// Largest k of the streaming (tile by tile) selection; larger k sort whole rows in global memory.
pub const MAX_STREAM_K: usize = SELECT_CAP / 2;

/// Training points per distance tile of the streaming search for `k ≤ MAX_STREAM_K`: what fits
/// next to the running k in shared memory, a multiple of the distance tile (at least k).
pub const fn stream_tile(k: usize) -> usize {
    (SELECT_CAP - k) / DIST_TILE * DIST_TILE
}

/// Dynamic shared memory of a selection block: the keys, the reduction scratch, the counter.
pub const fn select_shared_bytes() -> usize {
    (SELECT_CAP + SELECT_BLOCK as usize + SELECT_PER_THREAD + 2) * 8
}

// ---- votes ---------------------------------------------------------------------------------

/// The power-of-two exponent of the fixed-point vote weights for `k` neighbours: a weight is at
/// most 1, so `k` of them sum to at most `2^61`.
pub const fn vote_scale_exponent(k: usize) -> i32 {
    let k = if k == 0 { 1 } else { k };
    let log_k = (usize::BITS - (k - 1).leading_zeros()) as i32; // ⌈log2 k⌉
    let s = 61 - log_k;
    if s < 0 { 0 } else { s }
}

/// The vote of a neighbour at distance `dist` when the query's nearest neighbour is at `nearest`:
/// 1 for uniform votes; for distance weighting `nearest / dist` (∝ 1 / dist, at most 1) in fixed
/// point under `scale = 2^vote_scale_exponent(k)`. When the nearest distance is 0 only the
/// neighbours at distance 0 vote, with weight 1 each. With a sample weight (`row_weight`, the
/// neighbour's weight over the largest training weight, so at most 1) the vote is that weight
/// times the above, in fixed point under `scale` for uniform votes too.
#[inline(always)]
pub fn vote_weight(
    weighted: bool,
    nearest: f32,
    dist: f32,
    scale: f32,
    row_weight: Option<f32>,
) -> u64 {
    let w = if !weighted {
        match row_weight {
            None => return 1,
            Some(_) => 1.0,
        }
    } else if nearest > 0.0 {
        nearest / dist
    } else if dist == 0.0 {
        1.0
    } else {
        0.0
    };
    let w = match row_weight {
        Some(r) => r * w,
        None => w,
    };
    let q = to_fixed(w, scale);
    if q > 0 { q as u64 } else { 0 }
}

/// Whether a class with `votes` whose nearest member has rank `first` beats the best so far: more
/// votes, and on equal votes the class whose nearest member is nearer (lower rank).
#[inline(always)]
pub fn vote_better(votes: u64, first: u32, best_votes: u64, best_first: u32) -> bool {
    votes > best_votes || (votes == best_votes && first < best_first)
}

/// How a vote is weighed and decided; `knn_vote` takes it as [`VoteRule::flags`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VoteRule {
    /// Votes weighed by distance (see [`vote_weight`]), else one per neighbour.
    pub weighted: bool,
    /// Ties between classes go to the smallest class (scikit-learn's rule: the first class with
    /// the largest share, so the winner is the argmax of the probabilities); else to the class
    /// whose nearest member ranks first ([`vote_better`]).
    pub smallest_label: bool,
}

impl VoteRule {
    /// The rule as kernel flags: bit 0 `weighted`, bit 1 `smallest_label`.
    #[inline(always)]
    pub const fn flags(self) -> u32 {
        (self.weighted as u32) | ((self.smallest_label as u32) << 1)
    }

    /// The rule of [`VoteRule::flags`].
    #[inline(always)]
    pub const fn from_flags(flags: u32) -> VoteRule {
        VoteRule {
            weighted: flags & 1 != 0,
            smallest_label: flags & 2 != 0,
        }
    }
}

/// The winning class of one query's vote over `classes` classes and the vote total, under
/// `rule`; `tally(c)` gives class `c`'s votes and the rank of its nearest member (`u32::MAX`
/// when it has none). Shared by the `knn_vote` kernel and its CPU twin.
#[inline(always)]
pub fn vote_winner(
    classes: usize,
    rule: VoteRule,
    tally: impl Fn(usize) -> (u64, u32),
) -> (u32, u64) {
    let mut total = 0u64;
    for c in 0..classes {
        total += tally(c).0;
    }
    let (mut best, mut best_votes, mut best_first, mut best_share) = (0u32, 0u64, u32::MAX, -1f32);
    for c in 0..classes {
        let (votes, first) = tally(c);
        let better = if rule.smallest_label {
            vote_share(votes, total) > best_share
        } else {
            vote_better(votes, first, best_votes, best_first)
        };
        if better {
            best = c as u32;
            best_votes = votes;
            best_first = first;
            best_share = vote_share(votes, total);
        }
    }
    (best, total)
}

/// A class's probability: its share of the vote total (0 when nothing voted).
#[inline(always)]
pub fn vote_share(votes: u64, total: u64) -> f32 {
    if total == 0 {
        0.0
    } else {
        (votes as f64 / total as f64) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_order_like_distances_then_index() {
        let ds = [
            f32::NEG_INFINITY,
            -3.5,
            -1e-40,
            -0.0,
            0.0,
            1e-40,
            1.0,
            2.5,
            f32::INFINITY,
            f32::NAN,
        ];
        for (a, &x) in ds.iter().enumerate() {
            for (b, &y) in ds.iter().enumerate() {
                for (i, j) in [(0u32, 1u32), (1, 0), (7, 7)] {
                    let (kx, ky) = (key(x, i), key(y, j));
                    let expect = if x.is_nan() || y.is_nan() {
                        (a, i).cmp(&(b, j))
                    } else {
                        x.partial_cmp(&y).unwrap().then(i.cmp(&j))
                    };
                    assert_eq!(kx.cmp(&ky), expect, "{x} {i} vs {y} {j}");
                }
            }
        }
    }

    #[test]
    fn keys_round_trip() {
        for d in [0.0f32, -0.0, 1.5, -2.25, 1e-42, f32::MAX, f32::INFINITY] {
            let k = key(d, 42);
            assert_eq!(key_index(k), 42);
            assert_eq!(key_distance(k), d + 0.0);
        }
        assert!(key_distance(key(f32::NAN, 1)).is_nan());
        assert!(key(f32::NAN, u32::MAX - 1) < NO_KEY);
    }

    #[test]
    fn metrics_by_hand() {
        let x = [1.0, 2.0, 2.0];
        let y = [3.0, 2.0, 0.0];
        assert_eq!(distance(PairMetric::SqEuclidean, &x, &y), 8.0);
        assert_eq!(distance(PairMetric::Euclidean, &x, &y), 8f32.sqrt());
        assert_eq!(distance(PairMetric::L1, &x, &y), 4.0);
        assert_eq!(distance(PairMetric::InnerProduct, &x, &y), -7.0);
        let cos = 7.0 / (3.0 * 13f32.sqrt());
        assert!((distance(PairMetric::Cosine, &x, &y) - (1.0 - cos)).abs() < 1e-6);
        assert_eq!(distance(PairMetric::Cosine, &x, &[0.0; 3]), 1.0);
        assert_eq!(distance(PairMetric::Cosine, &x, &x), 0.0);
        assert_eq!(distance(PairMetric::SqEuclidean, &x, &x), 0.0);
    }

    #[test]
    fn metric_ids_round_trip() {
        for m in [
            PairMetric::SqEuclidean,
            PairMetric::Euclidean,
            PairMetric::L1,
            PairMetric::InnerProduct,
            PairMetric::Cosine,
        ] {
            assert_eq!(PairMetric::from_id(m.id()), m);
        }
        let p3 = PairMetric::Minkowski(MinkowskiP::new(3.0).unwrap());
        assert_eq!((PairMetric::Chebyshev.id(), p3.id()), (5, 6));
        assert!(p3.is_lp() && PairMetric::Chebyshev.is_lp() && !PairMetric::L1.is_lp());
    }

    #[test]
    fn shapes_fit_shared_memory() {
        let limit = crate::launch::DEFAULT_SHARED_BYTES;
        assert!(dist_shared_bytes() <= limit);
        assert!(select_shared_bytes() <= limit);
        assert_eq!(SELECT_CAP % SELECT_BLOCK as usize, 0);
        assert!(stream_tile(MAX_STREAM_K) >= MAX_STREAM_K);
        assert!(stream_tile(1) < SELECT_CAP);
        for k in [1, 25, 127, 129, 1000, 2047, 2048] {
            let t = stream_tile(k);
            assert!(
                t >= k && t + k <= SELECT_CAP && t.is_multiple_of(DIST_TILE),
                "{k}"
            );
        }
    }

    #[test]
    fn vote_weights_sum_without_overflow() {
        for k in [1usize, 2, 3, 1000, 1 << 20, usize::MAX >> 4] {
            let s = vote_scale_exponent(k);
            let scale = crate::fixed::pow2_f32(s);
            for rw in [None, Some(1.0)] {
                let one = vote_weight(true, 1.0, 1.0, scale, rw) as u128;
                assert!(one * k as u128 <= 1u128 << 61, "{k}");
                let one = vote_weight(false, 1.0, 1.0, scale, rw) as u128;
                assert!(one * k as u128 <= 1u128 << 61, "{k}");
            }
        }
        let scale = crate::fixed::pow2_f32(vote_scale_exponent(5));
        assert_eq!(vote_weight(false, 0.0, 7.0, scale, None), 1);
        assert_eq!(vote_weight(true, 0.0, 0.0, scale, None), scale as u64);
        assert_eq!(vote_weight(true, 0.0, 1.0, scale, None), 0);
        assert_eq!(
            vote_weight(true, 2.0, 4.0, scale, None),
            (scale / 2.0) as u64
        );
        assert_eq!(vote_weight(true, 2.0, f32::INFINITY, scale, None), 0);
        // Sample weights scale the vote, uniform or by distance; weight 0 casts none.
        assert_eq!(
            vote_weight(false, 2.0, 4.0, scale, Some(0.25)),
            (scale / 4.0) as u64
        );
        assert_eq!(
            vote_weight(true, 2.0, 4.0, scale, Some(0.5)),
            (scale / 4.0) as u64
        );
        assert_eq!(vote_weight(false, 2.0, 4.0, scale, Some(0.0)), 0);
        assert!(vote_better(3, 5, 2, 0));
        assert!(vote_better(3, 1, 3, 2));
        assert!(!vote_better(3, 2, 3, 1));
        assert_eq!(vote_share(1, 4), 0.25);
        // Classes 0..3 with (votes, nearest rank): 1 and 2 tie on votes, 2 ranks first.
        let tally = |c: usize| [(1, 3), (4, 1), (4, 0), (0, u32::MAX)][c];
        let nearest = VoteRule::default();
        let smallest = VoteRule {
            smallest_label: true,
            ..nearest
        };
        assert_eq!(vote_winner(4, nearest, tally), (2, 9));
        assert_eq!(vote_winner(4, smallest, tally), (1, 9));
        // Nothing voted: every share is 0 and the first class wins by the smallest-label rule.
        assert_eq!(vote_winner(2, smallest, |_| (0, 0)), (0, 0));
        for flags in 0..4 {
            assert_eq!(VoteRule::from_flags(flags).flags(), flags);
        }
        assert_eq!(vote_share(0, 0), 0.0);
    }
}
