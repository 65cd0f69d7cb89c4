//! A job over several GPUs of this machine ([`Device::Gpus`](crate::Device::Gpus)), a thread per
//! device.
//!
//! * An exact kNN index ([`GpuParts`]): the training rows are cut into one contiguous part per
//!   GPU, every search runs on all parts at once, and each query's candidates are merged by
//!   (distance, training index), the order of a single index. Distances are the same floats on
//!   every device, so the answer equals one GPU's and the CPU's bit for bit. Votes are counted on
//!   the host by the vote's CPU twin over the merged neighbours.
//! * Any members of a caller's job in groups, a group per device ([`on_each`],
//!   [`answer_in_turns`]): a k-means fit's shards, each group's in turn (see
//!   [`super::batches::turns`]).

use super::batches::{Turn, turns};
use super::merge::{KeptKeys, MergedSearch, PartKeys, TopK, VoteRows};
use crate::backend::radius::RadiusKeys;
use crate::backend::vocab::{KnnLayout, PrefilterReport, Selection};
use crate::backend::{Backend, KnnSearch};
use crate::error::{Error, Result};
use crate::matrix::MatrixView;
use kernels_gpu::knn::PairMetric;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::thread;

/// `work(i, group)` for every group at once, a thread each (the first on the calling thread,
/// which has nothing else to do meanwhile: one thread fewer to start, ~0.1 ms a call); the
/// results in order, a group's panic as its error.
pub(crate) fn on_each<G: Send, T: Send>(
    groups: &mut [G],
    work: impl Fn(usize, &mut G) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let Some((first, rest)) = groups.split_first_mut() else {
        return Ok(Vec::new());
    };
    thread::scope(|scope| {
        let work = &work;
        let running: Vec<_> = (rest.iter_mut().enumerate())
            .map(|(i, group)| scope.spawn(move || work(i + 1, group)))
            .collect();
        let mine = panic::catch_unwind(AssertUnwindSafe(|| work(0, first)));
        (std::iter::once(mine).chain(running.into_iter().map(|r| r.join())))
            .enumerate()
            .map(|(device, done)| done.unwrap_or_else(|_| Err(panicked(device))))
            .collect()
    })
}

/// The error for a device's work that panicked on its thread.
pub(crate) fn panicked(device: usize) -> Error {
    Error::Shard(format!("the thread of device {device} panicked"))
}

/// The replies of every member of `groups` (a group per device), in order, to the request
/// `request_for(member)`: the groups at once, a thread each, the members of a group in turn.
pub(crate) fn answer_in_turns<'r, B: Turn>(
    groups: &mut [Vec<B>],
    request_for: &(dyn Fn(usize) -> &'r B::Request + Sync),
) -> Result<Vec<B::Reply>>
where
    B::Request: 'r,
{
    let mut first = 0;
    let starts: Vec<usize> = (groups.iter())
        .map(|g| {
            first += g.len();
            first - g.len()
        })
        .collect();
    let answered = on_each(groups, |device, group| {
        turns(group, starts[device], request_for)
    })?;
    Ok(answered.into_iter().flatten().collect())
}

/// One GPU's part of the training rows.
struct Part {
    first_row: u32,
    rows: usize,
    index: Box<dyn KnnSearch>,
    /// Whether the part streams through its GPU (it exceeds the budget).
    streamed: bool,
}

/// The parts, and what a vote needs of every training row.
pub(crate) struct GpuParts {
    parts: Vec<Part>,
    vote_rows: VoteRows,
    /// Each part's keys of the last search, kept for the next one's.
    answers: KeptKeys,
}

impl GpuParts {
    /// Cuts `train` (validated) into `devices` parts (fewer when there are fewer rows) and
    /// indexes part `i` on `backend_of(i)` within `budget` bytes of it (see [`super::place`]).
    pub(crate) fn new(
        train: &MatrixView<'_>,
        metric: PairMetric,
        devices: usize,
        backend_of: &dyn Fn(usize) -> Result<Arc<dyn Backend>>,
        budget: Option<usize>,
    ) -> Result<GpuParts> {
        let (n, d) = (train.rows(), train.cols());
        let count = devices.min(n).max(1);
        let mut parts = Vec::with_capacity(count);
        for i in 0..count {
            let (start, end) = (i * n / count, (i + 1) * n / count);
            let rows = MatrixView::new(&train.as_slice()[start * d..end * d], end - start, d)?;
            let (index, streamed) = super::place(backend_of(i)?, rows, metric, budget)?;
            parts.push(Part {
                first_row: start as u32,
                rows: end - start,
                index,
                streamed,
            });
        }
        Ok(GpuParts {
            parts,
            vote_rows: VoteRows::default(),
            answers: KeptKeys::default(),
        })
    }

    /// Whether any part streams through its GPU.
    pub(crate) fn streamed(&self) -> bool {
        self.parts.iter().any(|p| p.streamed)
    }
}

impl MergedSearch for GpuParts {
    fn merged(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
    ) -> Result<(TopK, Selection, Option<PrefilterReport>)> {
        let mut keys = self.answers.take(self.parts.len());
        let found: Vec<Result<_>> = thread::scope(|scope| {
            let running: Vec<_> = (self.parts.iter().zip(keys.iter_mut()))
                .map(|(p, keys)| {
                    let k = k.min(p.rows);
                    scope.spawn(move || p.index.search_keys(queries, k, selection, max_bytes, keys))
                })
                .collect();
            let joined = running.into_iter().map(|r| r.join());
            joined
                .map(|r| r.unwrap_or_else(|_| Err(Error::Shard("a GPU's search panicked".into()))))
                .collect()
        });
        let found = found.into_iter().collect::<Result<Vec<_>>>()?;
        let answers: Vec<PartKeys<'_>> = (self.parts.iter().zip(&keys))
            .map(|(part, keys)| PartKeys {
                keys,
                kp: k.min(part.rows),
                first_row: part.first_row,
            })
            .collect();
        let top = TopK::of_parts(queries.rows(), k, &answers);
        self.answers.keep(keys);
        let prefilter = found.iter().filter_map(|f| f.1).reduce(|a, b| a + b);
        Ok((top, found[0].0, prefilter))
    }

    fn merged_radius(
        &self,
        queries: &MatrixView<'_>,
        radius: f32,
        max_bytes: Option<usize>,
    ) -> Result<RadiusKeys> {
        let found: Vec<Result<_>> = thread::scope(|scope| {
            let running: Vec<_> = (self.parts.iter())
                .map(|p| scope.spawn(move || p.index.radius(queries, radius, max_bytes)))
                .collect();
            let joined = running.into_iter().map(|r| r.join());
            joined
                .map(|r| r.unwrap_or_else(|_| Err(Error::Shard("a GPU's search panicked".into()))))
                .collect()
        });
        let found = (self.parts.iter().zip(found))
            .map(|(p, f)| Ok((p.first_row, f?)))
            .collect::<Result<Vec<_>>>()?;
        RadiusKeys::merge_parts(queries.rows(), &found)
    }

    fn vote_rows(&mut self) -> &mut VoteRows {
        &mut self.vote_rows
    }

    fn votes_of(&self) -> &VoteRows {
        &self.vote_rows
    }

    fn layout(&self) -> Option<KnnLayout> {
        Some(KnnLayout::Shard)
    }

    fn set_prefilter(&mut self, allowed: bool) {
        self.parts
            .iter_mut()
            .for_each(|p| p.index.set_prefilter(allowed));
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{cpu, lattice, one_index_voting_as};
    use super::*;
    use kernels_gpu::knn::VoteRule;

    /// Every group's work runs, its results come back in order, and a group whose work panics
    /// (the first, on the calling thread, or another) is that group's error, not the caller's
    /// panic.
    #[test]
    fn each_group_answers_in_order_and_a_panic_is_an_error() {
        let mut groups: Vec<usize> = (10..14).collect();
        let twice = on_each(&mut groups, |i, g| {
            *g *= 2;
            Ok((i, *g))
        });
        assert_eq!(twice.unwrap(), vec![(0, 20), (1, 22), (2, 24), (3, 26)]);
        assert!(
            on_each(&mut [] as &mut [usize], |_, _| Ok(()))
                .unwrap()
                .is_empty()
        );
        for bad in [0, 2] {
            let failed = on_each(&mut groups, |i, _| {
                assert_ne!(i, bad, "group {i} fails");
                Ok(i)
            });
            let Err(Error::Shard(message)) = failed else {
                panic!("group {bad}'s panic became {failed:?}")
            };
            assert!(message.contains(&format!("device {bad}")), "{message}");
        }
    }

    /// The merge over parts (here on the CPU: the same code as on GPUs) equals one index, with
    /// ties across parts (a lattice), k above a part's rows, and queries enough for several of
    /// the merge's parallel blocks.
    #[test]
    fn parts_answer_as_one_index() {
        let (n, d, m) = (50, 2, 600);
        let train = lattice(n, d);
        let queries: Vec<f32> = (0..m * d).map(|i| ((i * 3) % 7) as f32 * 0.7).collect();
        let (train, queries) = (
            MatrixView::new(&train, n, d).unwrap(),
            MatrixView::new(&queries, m, d).unwrap(),
        );
        let metric = PairMetric::Euclidean;
        let mut parts = GpuParts::new(&train, metric, 3, &cpu, None).unwrap();
        let one = one_index_voting_as(&train, metric, &mut parts);
        for k in [1, 5, 17, 30, n] {
            let (a, b) = (
                one.search(&queries, k, Selection::Auto, None).unwrap(),
                parts.search(&queries, k, Selection::Auto, None).unwrap(),
            );
            assert_eq!(a.indices, b.indices, "k={k}");
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a.distances), bits(&b.distances), "k={k}");
            let rule = VoteRule {
                weighted: true,
                smallest_label: k % 2 == 0,
            };
            let (a, b) = (
                one.vote(&queries, k, Selection::Auto, None, rule, true)
                    .unwrap(),
                parts
                    .vote(&queries, k, Selection::Auto, None, rule, true)
                    .unwrap(),
            );
            assert_eq!(a.classes, b.classes, "k={k}");
            assert_eq!(bits(&a.proba), bits(&b.proba), "k={k}");
        }
    }
}
