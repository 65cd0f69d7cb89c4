//! The kNN classifier's vote over each query's neighbours.

use kernels_gpu::knn::{VoteRule, key_distance, key_index, vote_share, vote_weight, vote_winner};

/// The CPU twin of the `knn_vote` kernel: the winning class of one query and, into `proba` when it is not
/// empty, every class's share. `keys` are the query's k neighbour keys, sorted; `row_weights`
/// the training rows' relative sample weights, if any.
#[allow(clippy::too_many_arguments)]
pub(crate) fn knn_vote(
    keys: &[u64],
    class_ids: &[u32],
    row_weights: Option<&[f32]>,
    classes: usize,
    rule: VoteRule,
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
            rule.weighted,
            nearest,
            key_distance(kk),
            scale,
            row_weights.map(|r| r[at]),
        );
        let c = class_ids[at] as usize;
        votes[c] += w;
        first[c] = first[c].min(r as u32);
    }
    let (best, total) = vote_winner(classes, rule, |c| (votes[c], first[c]));
    for (p, &v) in proba.iter_mut().zip(votes.iter()) {
        *p = vote_share(v, total);
    }
    best
}
