//! A kNN index copied whole to every GPU of a set ([`KnnLayout::Replicate`], FAISS's
//! `IndexReplicas`): each search's queries are cut into a contiguous share per copy, the copies
//! answer their shares at once on the set's driver threads ([`Drivers`]), and each writes its
//! answer straight into its share of the caller's arrays. A query's answer does not depend on
//! the queries beside it, so this is one GPU's answer bit for bit.
//!
//! Against a part of the rows per GPU ([`super::GpuParts`]) nothing is merged and no per-query
//! work (the prefilter's threshold, candidates and re-rank) is repeated on every GPU; the cost is
//! a copy of the rows on each GPU, which [`KnnLayout::Auto`] pays only up to
//! [`REPLICATE_MAX_BYTES`](crate::backend::vocab::REPLICATE_MAX_BYTES).
//!
//! [`KnnLayout::Replicate`]: crate::backend::vocab::KnnLayout::Replicate
//! [`KnnLayout::Auto`]: crate::backend::vocab::KnnLayout::Auto

use super::drivers::Drivers;
use super::gpu_set::on_each;
use crate::backend::radius::RadiusKeys;
use crate::backend::vocab::{AutoReport, KnnLayout, NeighbourIndex, Selection};
use crate::backend::{Backend, KeySink, KnnSearch, Neighbours, Votes, split_keys_to};
use crate::error::{Error, Result};
use crate::matrix::MatrixView;
use kernels_gpu::knn::{PairMetric, VoteRule};
use std::mem::MaybeUninit;
use std::ops::Range;
use std::sync::Arc;

/// The copies of an index, one per GPU.
pub(crate) struct GpuReplicas {
    copies: Vec<Box<dyn KnnSearch>>,
    /// Whether the copies stream through their GPUs (the rows exceed the budget).
    streamed: bool,
    /// The threads that drive the copies' searches.
    drivers: Drivers,
}

impl GpuReplicas {
    /// Copies `train` (validated) to `devices` devices at once, copy `i` on `backend_of(i)`
    /// within `budget` bytes of it (see [`super::place`]).
    pub(crate) fn new(
        train: &MatrixView<'_>,
        metric: PairMetric,
        devices: usize,
        backend_of: &(dyn Fn(usize) -> Result<Arc<dyn Backend>> + Sync),
        budget: Option<usize>,
    ) -> Result<GpuReplicas> {
        let mut slots: Vec<usize> = (0..devices.max(1)).collect();
        let placed = on_each(&mut slots, |_, &mut i| {
            super::place(backend_of(i)?, train.clone(), metric, budget)
        })?;
        let streamed = placed.iter().any(|(_, streamed)| *streamed);
        Ok(GpuReplicas {
            drivers: Drivers::new(placed.len()),
            copies: placed.into_iter().map(|(copy, _)| copy).collect(),
            streamed,
        })
    }

    /// Whether the copies stream through their GPUs.
    pub(crate) fn streamed(&self) -> bool {
        self.streamed
    }

    /// The queries of each copy that answers a search of `rows` queries: contiguous shares, one
    /// per copy while there are queries for it (every copy when `rows` is 0 would be idle, so
    /// the first takes the empty search).
    fn shares(&self, rows: usize) -> Vec<Range<usize>> {
        let count = self.copies.len().min(rows).max(1);
        (0..count)
            .map(|i| i * rows / count..(i + 1) * rows / count)
            .collect()
    }

    /// `work(copy, its share of the queries)` for every share at once, a thread each; the
    /// results in query order.
    fn each_share<T: Send>(
        &self,
        queries: &MatrixView<'_>,
        work: impl Fn(&dyn KnnSearch, &MatrixView<'_>) -> Result<T> + Sync,
    ) -> Result<Vec<T>> {
        let mut shares = self.shares(queries.rows());
        (self.drivers).on_each(&mut shares, |i, share| {
            work(&*self.copies[i], &share_of(queries, share)?)
        })
    }
}

/// The rows of `queries` in `share`.
fn share_of<'q>(queries: &'q MatrixView<'_>, share: &Range<usize>) -> Result<MatrixView<'q>> {
    let d = queries.cols();
    MatrixView::new(
        &queries.as_slice()[share.start * d..share.end * d],
        share.len(),
        d,
    )
}

impl GpuReplicas {
    /// [`KnnSearch::search`] with indices of type `I`: each copy splits its keys straight into
    /// its share of the answer's arrays as they come back, having first touched the share's
    /// pages beside its search (fresh pages cost the host more than the split that fills them).
    fn neighbours<I: NeighbourIndex>(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
    ) -> Result<Neighbours<I>> {
        let m = queries.rows();
        let shares = self.shares(m);
        let len = m * k;
        let (mut indices, mut distances) = (Vec::with_capacity(len), Vec::with_capacity(len));
        let sinks = (split_rows(&mut indices.spare_capacity_mut()[..len], &shares, k).into_iter())
            .zip(split_rows(
                &mut distances.spare_capacity_mut()[..len],
                &shares,
                k,
            ))
            .map(|(indices, distances)| ShareSink {
                indices,
                distances,
                written: 0,
            });
        let mut slots: Vec<_> = shares.iter().cloned().zip(sinks).collect();
        let found = self.drivers.on_each(&mut slots, |i, (share, sink)| {
            let rows = share_of(queries, share)?;
            self.copies[i].search_to(&rows, k, selection, max_bytes, sink)
        })?;
        if let Some((share, _)) = slots.iter().find(|(_, sink)| !sink.whole()) {
            return Err(Error::Shard(format!(
                "the copy answering queries {share:?} left part of its answer unwritten"
            )));
        }
        drop(slots);
        // SAFETY: the shares cover `0..len` of both arrays' spare capacity, and every share is
        // written whole (checked above).
        unsafe {
            indices.set_len(len);
            distances.set_len(len);
        }
        Ok(Neighbours {
            indices,
            distances,
            selection: found[0].0,
            prefilter: found.iter().filter_map(|f| f.1).reduce(|a, b| a + b),
        })
    }
}

/// A copy's share of an answer's indices and distances, written by the split of its keys.
struct ShareSink<'a, I> {
    indices: &'a mut [MaybeUninit<I>],
    distances: &'a mut [MaybeUninit<f32>],
    /// How many of the share's slots, from its start, are written.
    written: usize,
}

impl<I> ShareSink<'_, I> {
    /// Whether every slot of the share is written.
    fn whole(&self) -> bool {
        self.written == self.indices.len()
    }
}

impl<I: NeighbourIndex> KeySink for ShareSink<'_, I> {
    fn prepare(&mut self) {
        self.indices.fill(MaybeUninit::new(I::default()));
        self.distances.fill(MaybeUninit::new(0.0));
        self.written = self.indices.len();
    }

    fn put(&mut self, at: usize, keys: &[u64]) {
        let to = at..at + keys.len();
        split_keys_to(keys, &mut self.indices[to.clone()], &mut self.distances[to]);
        if at <= self.written {
            self.written = self.written.max(at + keys.len());
        }
    }
}

impl KnnSearch for GpuReplicas {
    fn search(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
    ) -> Result<Neighbours> {
        self.neighbours(queries, k, selection, max_bytes)
    }

    fn search_i64(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
    ) -> Result<Neighbours<i64>> {
        self.neighbours(queries, k, selection, max_bytes)
    }

    fn radius(
        &self,
        queries: &MatrixView<'_>,
        radius: f32,
        max_bytes: Option<usize>,
    ) -> Result<RadiusKeys> {
        let found = self.each_share(queries, |copy, rows| copy.radius(rows, radius, max_bytes))?;
        RadiusKeys::end_to_end(found)
    }

    fn set_prefilter(&mut self, allowed: bool) {
        self.copies
            .iter_mut()
            .for_each(|c| c.set_prefilter(allowed));
    }

    fn prepare(
        &self,
        queries: usize,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
        vote: Option<bool>,
    ) -> Result<()> {
        let share = self.shares(queries)[0].len();
        let mut copies: Vec<usize> = (0..self.copies.len()).collect();
        on_each(&mut copies, |_, &mut i| {
            self.copies[i].prepare(share, k, selection, max_bytes, vote)
        })?;
        Ok(())
    }

    fn auto_report(&self, k: usize) -> Option<AutoReport> {
        self.copies[0].auto_report(k)
    }

    fn layout(&self) -> Option<KnnLayout> {
        Some(KnnLayout::Replicate)
    }

    fn set_labels(&mut self, class_ids: &[u32], classes: usize) -> Result<()> {
        (self.copies.iter_mut()).try_for_each(|c| c.set_labels(class_ids, classes))
    }

    fn set_row_weights(&mut self, relative: &[f32]) -> Result<()> {
        (self.copies.iter_mut()).try_for_each(|c| c.set_row_weights(relative))
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
        let found = self.each_share(queries, |copy, rows| {
            copy.vote(rows, k, selection, max_bytes, rule, proba)
        })?;
        Ok(Votes {
            classes: found
                .iter()
                .flat_map(|v| v.classes.iter().copied())
                .collect(),
            proba: found.iter().flat_map(|v| v.proba.iter().copied()).collect(),
        })
    }
}

/// `out` (`rows × k`) cut into the rows of each share, in order.
fn split_rows<'a, T>(out: &'a mut [T], shares: &[Range<usize>], k: usize) -> Vec<&'a mut [T]> {
    let mut rest = out;
    (shares.iter())
        .map(|share| {
            let (mine, after) = std::mem::take(&mut rest).split_at_mut(share.len() * k);
            rest = after;
            mine
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{cpu, lattice, one_index_voting_as};
    use super::*;

    /// A share is whole once readied, or once its keys are put from its start without a gap,
    /// whatever the order of the pieces after that; a gap leaves it not whole.
    #[test]
    fn a_share_is_whole_only_when_every_slot_is_written() {
        let keys: Vec<u64> = (0..6u32)
            .map(|i| kernels_gpu::knn::key(i as f32, i))
            .collect();
        let mut slots = (
            vec![MaybeUninit::uninit(); 6],
            vec![MaybeUninit::uninit(); 6],
        );
        let mut share = |f: &dyn Fn(&mut ShareSink<'_, u32>)| {
            let mut sink = ShareSink {
                indices: &mut slots.0,
                distances: &mut slots.1,
                written: 0,
            };
            f(&mut sink);
            sink.whole()
        };
        assert!(share(&|s| s.prepare()));
        assert!(share(&|s| {
            s.put(0, &keys[..2]);
            s.put(2, &keys[2..]);
            s.put(1, &keys[1..2]);
        }));
        assert!(!share(&|s| {
            s.put(0, &keys[..2]);
            s.put(3, &keys[3..]);
        }));
        assert!(!share(&|s| s.put(2, &keys[2..])));
    }

    /// Copies (here on the CPU: the same code as on GPUs) answer as one index: searches, votes
    /// and radius searches, with the queries shared unevenly, fewer queries than copies, and ties.
    #[test]
    fn copies_answer_as_one_index() {
        let (n, d) = (60, 2);
        let train = lattice(n, d);
        let train = MatrixView::new(&train, n, d).unwrap();
        let metric = PairMetric::Euclidean;
        let mut copies = GpuReplicas::new(&train, metric, 3, &cpu, None).unwrap();
        assert!(!copies.streamed());
        assert_eq!(copies.layout(), Some(KnnLayout::Replicate));
        let one = one_index_voting_as(&train, metric, &mut copies);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for m in [1, 2, 3, 100] {
            let queries: Vec<f32> = (0..m * d).map(|i| ((i * 3) % 7) as f32 * 0.7).collect();
            let queries = MatrixView::new(&queries, m, d).unwrap();
            for k in [1, 5, 17, n] {
                let (a, b) = (
                    one.search(&queries, k, Selection::Auto, None).unwrap(),
                    copies.search(&queries, k, Selection::Auto, None).unwrap(),
                );
                assert_eq!(a.indices, b.indices, "m={m} k={k}");
                assert_eq!(bits(&a.distances), bits(&b.distances), "m={m} k={k}");
                let rule = VoteRule {
                    weighted: true,
                    smallest_label: k % 2 == 0,
                };
                let vote = |index: &dyn KnnSearch| {
                    (index.vote(&queries, k, Selection::Auto, None, rule, true)).unwrap()
                };
                let (a, b) = (vote(one.as_ref()), vote(&copies));
                assert_eq!(a.classes, b.classes, "m={m} k={k}");
                assert_eq!(bits(&a.proba), bits(&b.proba), "m={m} k={k}");
            }
            for radius in [0.0, 1.5, 100.0] {
                let (a, b) = (
                    one.radius(&queries, radius, None).unwrap(),
                    copies.radius(&queries, radius, None).unwrap(),
                );
                assert_eq!((a.offsets, a.keys), (b.offsets, b.keys), "m={m} r={radius}");
            }
        }
    }
}
