//! What a kNN index over parts of its training rows (on several GPUs, or streamed through one)
//! needs: every query's running k nearest, merged part by part in the order of a single index,
//! and the vote over the merged neighbours.

use crate::backend::cpu::knn_vote;
use crate::backend::radius::RadiusKeys;
use crate::backend::vocab::{KnnLayout, PrefilterReport, Selection};
use crate::backend::{KnnSearch, Neighbours, Votes, split_keys_into};
use crate::error::Result;
use crate::matrix::MatrixView;
use kernels_gpu::fixed::pow2_f32;
use kernels_gpu::knn::{VoteRule, vote_scale_exponent};
use rayon::prelude::*;
use std::sync::Mutex;

/// No neighbour yet: above every real key (a real key's index is below `u32::MAX`).
const EMPTY: u64 = u64::MAX;

/// Every query's `k` nearest so far, as keys `key(distance, training row)`, ascending.
pub(crate) struct TopK {
    k: usize,
    keys: Vec<u64>,
}

/// One part's answer to merge: its `kp` nearest per query as keys, rows counted from the part's
/// first row `first_row`, nearest first.
pub(crate) struct PartKeys<'a> {
    pub keys: &'a [u64],
    pub kp: usize,
    pub first_row: u32,
}

/// Queries a rayon task merges at a time: at least this many, and a megabyte of keys or more
/// ([`crate::host_tasks`]; 10^4 queries × k = 100 took milliseconds on one thread).
const MERGE_GRAIN: usize = 64;

impl TopK {
    /// Nothing yet for `queries` queries.
    pub(crate) fn new(queries: usize, k: usize) -> TopK {
        TopK {
            k,
            keys: vec![EMPTY; queries * k],
        }
    }

    /// Every query's `k` nearest over all `parts` at once: a merge of the parts' answers per
    /// query (each sorted, keys unique, so the result is the single index's, whatever the
    /// parts), queries on the rayon threads in tasks sized by the keys they read.
    pub(crate) fn of_parts(queries: usize, k: usize, parts: &[PartKeys<'_>]) -> TopK {
        // Zeros (fresh pages, faulted in by the tasks that write them): every slot is written.
        let mut keys = vec![0u64; queries * k];
        if k == 0 {
            return TopK { k, keys };
        }
        let read = 8 * parts.iter().map(|p| p.kp).sum::<usize>().max(1);
        let per_task = crate::host_tasks::items_per_task(queries, read, 1).max(MERGE_GRAIN);
        (keys.par_chunks_mut(k * per_task).enumerate()).for_each(|(block, out)| {
            // Each part's next key (EMPTY once it has given all `kp`) and where it is.
            let (mut next, mut heads) = (vec![EMPTY; parts.len()], vec![0usize; parts.len()]);
            for (i, out) in out.chunks_exact_mut(k).enumerate() {
                let q = block * per_task + i;
                // The row index is the key's low half: offsetting it cannot carry (rows < 2^32).
                let key = |part: &PartKeys<'_>, head: usize| match head < part.kp {
                    true => part.keys[q * part.kp + head] + part.first_row as u64,
                    false => EMPTY,
                };
                heads.fill(0);
                for (next, part) in next.iter_mut().zip(parts) {
                    *next = key(part, 0);
                }
                for slot in out {
                    let (p, &least) = (next.iter().enumerate())
                        .min_by_key(|&(_, key)| *key)
                        .expect("at least one part");
                    *slot = least;
                    if least != EMPTY {
                        heads[p] += 1;
                        next[p] = key(&parts[p], heads[p]);
                    }
                }
            }
        });
        TopK { k, keys }
    }

    /// Merges a part's answer (`found`: its `kp` nearest per query as keys, rows counted from
    /// the part's first row `first_row`, nearest first) into the running keys, as
    /// [`TopK::of_parts`] merges parts. Within a part the order by (distance, row) is the order
    /// by (distance, row + first_row), so the merge keeps the keys sorted; keys are unique, so
    /// the result is the single index's, whatever the parts.
    pub(crate) fn merge(&mut self, found: &[u64], kp: usize, first_row: u32) {
        // The running keys are a part of k a query from row 0 (their EMPTY tail sorts last).
        let (queries, k) = (self.keys.len() / self.k.max(1), self.k);
        let parts = [
            PartKeys {
                keys: &self.keys,
                kp: k,
                first_row: 0,
            },
            PartKeys {
                keys: found,
                kp,
                first_row,
            },
        ];
        *self = TopK::of_parts(queries, k, &parts);
    }

    /// The keys, `queries × k`.
    pub(crate) fn keys(&self) -> &[u64] {
        &self.keys
    }

    /// The neighbours as a search returns them.
    pub(crate) fn indices_and_distances(&self) -> (Vec<u32>, Vec<f32>) {
        let len = self.keys.len();
        let (mut indices, mut distances) = (vec![0u32; len], vec![0f32; len]);
        split_keys_into(&self.keys, &mut indices, &mut distances);
        (indices, distances)
    }
}

/// What a vote over merged neighbours needs of the training rows.
#[derive(Default)]
pub(crate) struct VoteRows {
    pub class_ids: Vec<u32>,
    pub classes: usize,
    pub row_weights: Option<Vec<f32>>,
}

impl VoteRows {
    /// The vote of every query over its `k` merged neighbours `keys`, by the vote's CPU twin
    /// (the GPU's vote gives the same classes and shares).
    pub(crate) fn vote(&self, keys: &[u64], k: usize, rule: VoteRule, proba: bool) -> Votes {
        let c = self.classes.max(1);
        let scale = pow2_f32(vote_scale_exponent(k));
        let (mut votes, mut first) = (vec![0u64; c], vec![0u32; c]);
        let queries = keys.len() / k;
        let mut shares = vec![0f32; if proba { queries * c } else { 0 }];
        let classes = (keys.chunks_exact(k).enumerate())
            .map(|(q, keys)| {
                let share = if proba {
                    &mut shares[q * c..(q + 1) * c]
                } else {
                    &mut [][..]
                };
                let (ids, weights) = (&self.class_ids, self.row_weights.as_deref());
                knn_vote(
                    keys, ids, weights, c, rule, scale, &mut votes, &mut first, share,
                )
            })
            .collect();
        Votes {
            classes,
            proba: shares,
        }
    }
}

/// Most keys of a part's answer kept for the next search (64 MiB: F's 10^4 queries × k = 100
/// are 8 MB); a larger answer's memory goes back when the search ends.
const KEEP_ANSWER_KEYS: usize = 8 << 20;

/// Each part's (or copy's) key buffer of the last search, kept for the next one to write into:
/// their pages are already faulted in. A search beside another finds none and makes its own.
#[derive(Default)]
pub(crate) struct KeptKeys(Mutex<Vec<Vec<u64>>>);

impl KeptKeys {
    /// `count` buffers: the kept ones, and empty ones for the rest.
    pub(crate) fn take(&self, count: usize) -> Vec<Vec<u64>> {
        let mut keys = std::mem::take(&mut *self.0.lock().unwrap());
        keys.resize_with(count, Vec::new);
        keys
    }

    /// Keeps `keys` for the next search, but the memory of those above [`KEEP_ANSWER_KEYS`].
    pub(crate) fn keep(&self, mut keys: Vec<Vec<u64>>) {
        for part in &mut keys {
            if part.capacity() > KEEP_ANSWER_KEYS {
                *part = Vec::new();
            }
        }
        *self.0.lock().unwrap() = keys;
    }
}

/// An index over parts: what it must say, and the rest of [`KnnSearch`] follows.
pub(crate) trait MergedSearch: Send + Sync {
    /// Every query's `k` nearest, merged over the parts, with the selection that ran and the
    /// parts' prefilter reports added up.
    fn merged(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
    ) -> Result<(TopK, Selection, Option<PrefilterReport>)>;
    /// Every query's training rows within `radius`, merged over the parts
    /// ([`RadiusKeys::merge_parts`]).
    fn merged_radius(
        &self,
        queries: &MatrixView<'_>,
        radius: f32,
        max_bytes: Option<usize>,
    ) -> Result<RadiusKeys>;
    /// The training rows' classes and weights, for votes.
    fn vote_rows(&mut self) -> &mut VoteRows;
    /// The vote rows, to read.
    fn votes_of(&self) -> &VoteRows;
    /// Allows or forbids the TF32 prefilter in the parts.
    fn set_prefilter(&mut self, allowed: bool);
    /// [`KnnSearch::layout`].
    fn layout(&self) -> Option<KnnLayout> {
        None
    }
}

impl<T: MergedSearch> KnnSearch for T {
    fn search(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
    ) -> Result<Neighbours> {
        let (top, selection, prefilter) = self.merged(queries, k, selection, max_bytes)?;
        let (indices, distances) = top.indices_and_distances();
        Ok(Neighbours {
            indices,
            distances,
            selection,
            prefilter,
        })
    }

    fn radius(
        &self,
        queries: &MatrixView<'_>,
        radius: f32,
        max_bytes: Option<usize>,
    ) -> Result<RadiusKeys> {
        self.merged_radius(queries, radius, max_bytes)
    }

    fn set_prefilter(&mut self, allowed: bool) {
        MergedSearch::set_prefilter(self, allowed);
    }

    fn layout(&self) -> Option<KnnLayout> {
        MergedSearch::layout(self)
    }

    fn set_labels(&mut self, class_ids: &[u32], classes: usize) -> Result<()> {
        let rows = self.vote_rows();
        rows.class_ids = class_ids.to_vec();
        rows.classes = classes;
        Ok(())
    }

    fn set_row_weights(&mut self, relative: &[f32]) -> Result<()> {
        self.vote_rows().row_weights = Some(relative.to_vec());
        Ok(())
    }

    fn vote(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
        rule: VoteRule,
        proba: bool,
    ) -> Result<Votes> {
        let (top, _, _) = self.merged(queries, k, selection, max_bytes)?;
        Ok(self.votes_of().vote(top.keys(), k, rule, proba))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One pass over every part equals merging the parts one by one (the streamed index's
    /// way), with parts of fewer than k keys, k above all of them together, and ties of
    /// distance broken by row.
    #[test]
    fn one_pass_over_the_parts_equals_merging_them_in_turn() {
        let queries = 300;
        for (k, kps) in [
            (1, vec![1]),
            (5, vec![5, 5, 2]),
            (7, vec![3, 1, 2]),
            (4, vec![4; 5]),
        ] {
            // Part j's keys: distances from a small set (ties), rows ascending within a part.
            let parts: Vec<Vec<u64>> = (kps.iter().enumerate())
                .map(|(j, &kp)| {
                    (0..queries * kp)
                        .map(|i| {
                            let (q, r) = (i / kp, i % kp);
                            let distance = ((q * 7 + j * 3) % 5 + r) as u64;
                            (distance << 32) | r as u64
                        })
                        .collect()
                })
                .collect();
            let first_row = |j: usize| (j * 1000) as u32;
            let mut turns = TopK::new(queries, k);
            for (j, (keys, &kp)) in parts.iter().zip(&kps).enumerate() {
                turns.merge(keys, kp, first_row(j));
            }
            let answers: Vec<PartKeys<'_>> = (parts.iter().zip(&kps).enumerate())
                .map(|(j, (keys, &kp))| PartKeys {
                    keys,
                    kp,
                    first_row: first_row(j),
                })
                .collect();
            assert_eq!(
                TopK::of_parts(queries, k, &answers).keys,
                turns.keys,
                "k={k} {kps:?}"
            );
        }
    }
}
