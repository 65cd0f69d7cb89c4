//! kNN over a training set larger than the device's memory budget: the rows stay in host memory
//! and every search streams them through the device in parts of a quarter of the budget (the
//! part searched and the next, uploaded beside that search; the other half holds the search's
//! query batches), merging each part's k nearest into every query's running k by (distance,
//! training index). The order is a single index's, so the answer equals the resident index's
//! and the CPU's bit for bit, whatever the budget.

use super::merge::{MergedSearch, TopK, VoteRows};
use crate::backend::radius::RadiusKeys;
use crate::backend::vocab::{PrefilterReport, Selection};
use crate::backend::{Backend, DEFAULT_BUDGET_SHARE, KnnSearch};
use crate::error::{Error, Result};
use crate::matrix::MatrixView;
use kernels_gpu::knn::PairMetric;
use std::sync::Arc;

/// Device bytes per training row of a resident GPU index: the row, its squared norm and its
/// root, its class and its sample weight.
pub(crate) fn device_bytes_per_row(d: usize) -> usize {
    4 * (d + 4)
}

/// The budget that `rows × d` training rows exceed on `backend` (the given one, or
/// [`DEFAULT_BUDGET_SHARE`] of the free memory), or `None` when they fit it resident (and on a
/// backend without a device budget).
pub(crate) fn exceeded_budget(
    backend: &dyn Backend,
    rows: usize,
    d: usize,
    budget: Option<usize>,
) -> Result<Option<usize>> {
    let Some(free) = backend.device_memory_free()? else {
        return Ok(None);
    };
    let budget = budget.unwrap_or((free as f64 * DEFAULT_BUDGET_SHARE) as usize);
    Ok((rows.saturating_mul(device_bytes_per_row(d)) > budget).then_some(budget))
}

/// The index for `train` on `backend`: resident, or streamed (`true`) when the rows need more
/// than `budget` (default: [`DEFAULT_BUDGET_SHARE`] of the free memory) of a GPU.
pub(crate) fn place(
    backend: Arc<dyn Backend>,
    train: MatrixView<'_>,
    metric: PairMetric,
    budget: Option<usize>,
) -> Result<(Box<dyn KnnSearch>, bool)> {
    match exceeded_budget(&*backend, train.rows(), train.cols(), budget)? {
        None => Ok((backend.knn_index(&train, metric)?, false)),
        Some(budget) => {
            let streamed = Streamed::new(backend, train, metric, budget)?;
            Ok((Box::new(streamed), true))
        }
    }
}

/// A training set streamed through one device, part by part.
pub(crate) struct Streamed {
    backend: Arc<dyn Backend>,
    rows: Vec<f32>,
    n: usize,
    d: usize,
    part_rows: usize,
    /// Bytes each search may use for its query batches.
    search_bytes: usize,
    metric: PairMetric,
    prefilter: bool,
    vote_rows: VoteRows,
}

impl Streamed {
    /// Holds `train` (validated; moved when the view owns its rows, else copied) in host memory,
    /// to be streamed through `backend` within `budget` bytes of device memory.
    pub(crate) fn new(
        backend: Arc<dyn Backend>,
        train: MatrixView<'_>,
        metric: PairMetric,
        budget: usize,
    ) -> Result<Streamed> {
        let (n, d) = (train.rows(), train.cols());
        let part_rows = budget / 4 / device_bytes_per_row(d);
        if part_rows == 0 {
            return Err(Error::invalid(
                "memory budget",
                format!(
                    "{budget} bytes cannot hold two training rows of {d} dimensions and a query \
                     batch; give at least {} bytes",
                    4 * device_bytes_per_row(d)
                ),
            ));
        }
        Ok(Streamed {
            backend,
            rows: train.into_vec(),
            n,
            d,
            part_rows,
            search_bytes: budget / 2,
            metric,
            prefilter: true,
            vote_rows: VoteRows::default(),
        })
    }
}

impl Streamed {
    /// The index of the part from training row `start`, built beside the search under way.
    fn part_index(&self, start: usize) -> Result<Box<dyn KnnSearch>> {
        let rows = self.part_rows.min(self.n - start);
        let part = &self.rows[start * self.d..(start + rows) * self.d];
        let train = MatrixView::new(part, rows, self.d)?;
        let mut index = self.backend.knn_index_beside(&train, self.metric)?;
        index.set_prefilter(self.prefilter);
        Ok(index)
    }
}

impl MergedSearch for Streamed {
    fn merged(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
    ) -> Result<(TopK, Selection, Option<PrefilterReport>)> {
        let mut top = TopK::new(queries.rows(), k);
        let (mut ran, mut prefilter, mut keys) = (selection, None, Vec::new());
        let max_bytes = Some(max_bytes.map_or(self.search_bytes, |b| b.min(self.search_bytes)));
        let starts: Vec<usize> = (0..self.n).step_by(self.part_rows).collect();
        std::thread::scope(|scope| {
            let mut next = Some(scope.spawn(|| self.part_index(starts[0])));
            for (p, &start) in starts.iter().enumerate() {
                let index = next.take().expect("spawned").join();
                let index = index.unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
                // The next part goes up beside this part's search; this part's memory goes
                // back to the pool before the one after is uploaded.
                next = starts
                    .get(p + 1)
                    .map(|&s| scope.spawn(move || self.part_index(s)));
                let kp = k.min(self.part_rows.min(self.n - start));
                let (selected, report) =
                    index.search_keys(queries, kp, selection, max_bytes, &mut keys)?;
                top.merge(&keys, kp, start as u32);
                ran = selected;
                prefilter = prefilter.into_iter().chain(report).reduce(|a, b| a + b);
            }
            Ok((top, ran, prefilter))
        })
    }

    fn merged_radius(
        &self,
        queries: &MatrixView<'_>,
        radius: f32,
        max_bytes: Option<usize>,
    ) -> Result<RadiusKeys> {
        let max_bytes = Some(max_bytes.map_or(self.search_bytes, |b| b.min(self.search_bytes)));
        let starts: Vec<usize> = (0..self.n).step_by(self.part_rows).collect();
        let mut found = Vec::with_capacity(starts.len());
        std::thread::scope(|scope| {
            let mut next = Some(scope.spawn(|| self.part_index(starts[0])));
            for (p, &start) in starts.iter().enumerate() {
                let index = next.take().expect("spawned").join();
                let index = index.unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
                next = starts
                    .get(p + 1)
                    .map(|&s| scope.spawn(move || self.part_index(s)));
                found.push((start as u32, index.radius(queries, radius, max_bytes)?));
            }
            Ok::<_, Error>(())
        })?;
        RadiusKeys::merge_parts(queries.rows(), &found)
    }

    fn vote_rows(&mut self) -> &mut VoteRows {
        &mut self.vote_rows
    }

    fn votes_of(&self) -> &VoteRows {
        &self.vote_rows
    }

    fn set_prefilter(&mut self, allowed: bool) {
        self.prefilter = allowed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use kernels_gpu::knn::VoteRule;

    /// Streamed parts (here through the CPU backend: the same code as through a GPU) answer as
    /// one index, for budgets of one row, a few rows and more rows than there are.
    #[test]
    fn streamed_parts_answer_as_one_index() {
        let (n, d) = (61, 3);
        let train: Vec<f32> = (0..n * d).map(|i| ((i * 11) % 6) as f32).collect();
        let queries: Vec<f32> = (0..9 * d).map(|i| ((i * 5) % 7) as f32 * 0.6).collect();
        let (train, queries) = (
            MatrixView::new(&train, n, d).unwrap(),
            MatrixView::new(&queries, 9, d).unwrap(),
        );
        let classes: Vec<u32> = (0..n as u32).map(|i| i % 4).collect();
        let cpu = Device::Cpu.backend().unwrap();
        let metric = PairMetric::SqEuclidean;
        let mut one = cpu.knn_index(&train, metric).unwrap();
        one.set_labels(&classes, 4).unwrap();
        let row = 4 * device_bytes_per_row(d);
        for budget in [row, 7 * row, 1000 * row] {
            let mut streamed = Streamed::new(cpu.clone(), train.clone(), metric, budget).unwrap();
            streamed.set_labels(&classes, 4).unwrap();
            for k in [1, 6, n] {
                let (a, b) = (
                    one.search(&queries, k, Selection::Auto, None).unwrap(),
                    streamed.search(&queries, k, Selection::Auto, None).unwrap(),
                );
                assert_eq!(a.indices, b.indices, "budget {budget} k={k}");
                assert_eq!(a.distances, b.distances, "budget {budget} k={k}");
                let (a, b) = (
                    one.vote(
                        &queries,
                        k,
                        Selection::Auto,
                        None,
                        VoteRule::default(),
                        true,
                    )
                    .unwrap(),
                    streamed
                        .vote(
                            &queries,
                            k,
                            Selection::Auto,
                            None,
                            VoteRule::default(),
                            true,
                        )
                        .unwrap(),
                );
                assert_eq!(
                    (a.classes, a.proba),
                    (b.classes, b.proba),
                    "budget {budget}"
                );
            }
        }
        let too_small = Streamed::new(cpu, train, metric, row - 1);
        assert!(matches!(too_small, Err(Error::InvalidParameter { .. })));
    }
}
