//! The kNN classifier's vote over each query's neighbours.

use kernels_gpu::knn::{key_distance, key_index, vote_better, vote_share, vote_weight};

/// The CPU twin of the `knn_vote` kernel: the winning class of one query and, into `proba` when it is not
/// empty, every class's share. `keys` are the query's k neighbour keys, sorted; `row_weights`
/// the training rows' relative sample weights, if any.
#[allow(clippy::too_many_arguments)]
pub(crate) fn knn_vote(
    keys: &[u64],
    class_ids: &[u32],
    row_weights: Option<&[f32]>,
    classes: usize,
    weighted: bool,
    scale: f32,
    votes: &mut [u64],
    first: &mut [u32],
    proba: &mut [f32],
) -> u32 {
    votes.fill(0);
    first.fill(u32::MAX);
    let nearest = key_distance(keys[0]);
    for (r, &kk) in keys.iter().enumerate() {
        let at = key_index(kk) as usize;
        let w = vote_weight(
            weighted,
            nearest,
            key_distance(kk),
            scale,
            row_weights.map(|r| r[at]),
        );
        let c = class_ids[at] as usize;
        votes[c] += w;
        first[c] = first[c].min(r as u32);
    }
    let (mut best, mut best_votes, mut best_first) = (0u32, 0u64, u32::MAX);
    let mut total = 0u64;
    for c in 0..classes {
        total += votes[c];
        if vote_better(votes[c], first[c], best_votes, best_first) {
            best = c as u32;
            best_votes = votes[c];
            best_first = first[c];
        }
    }
    for (p, &v) in proba.iter_mut().zip(votes.iter()) {
        *p = vote_share(v, total);
    }
    best
}
