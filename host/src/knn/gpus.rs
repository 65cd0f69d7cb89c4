//! An exact kNN index over several GPUs of this machine ([`Device::Gpus`](crate::Device::Gpus)):
//! the training rows are cut into one contiguous part per GPU, every search runs on all parts at
//! once (a thread per part), and each query's candidates are merged by (distance, training
//! index), the order of a single index. Distances are the same floats on every device, so the
//! answer equals one GPU's and the CPU's bit for bit. Votes are counted on the host by the
//! vote's CPU twin over the merged neighbours.

use crate::backend::cpu::knn_vote;
use crate::backend::vocab::{PrefilterReport, Selection};
use crate::backend::{KnnSearch, Neighbours, Votes, split_keys};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::matrix::MatrixView;
use kernels_gpu::fixed::pow2_f32;
use kernels_gpu::knn::{PairMetric, key, vote_scale_exponent};
use std::thread;

/// One GPU's part of the training rows.
struct Part {
    first_row: u32,
    rows: usize,
    index: Box<dyn KnnSearch>,
}

/// The parts, and what a vote needs of every training row.
pub(crate) struct GpuParts {
    parts: Vec<Part>,
    class_ids: Vec<u32>,
    classes: usize,
    row_weights: Option<Vec<f32>>,
}

impl GpuParts {
    /// Cuts `train` (validated) into a part per device (fewer when there are fewer rows) and
    /// indexes each on its device.
    pub(crate) fn new(
        train: &MatrixView<'_>,
        metric: PairMetric,
        devices: &[Device],
    ) -> Result<GpuParts> {
        let (n, d) = (train.rows(), train.cols());
        let count = devices.len().min(n).max(1);
        let mut parts = Vec::with_capacity(count);
        for (i, device) in devices.iter().take(count).enumerate() {
            let (start, end) = (i * n / count, (i + 1) * n / count);
            let rows = MatrixView::new(&train.as_slice()[start * d..end * d], end - start, d)?;
            let index = device.backend()?.knn_index(&rows, metric)?;
            parts.push(Part {
                first_row: start as u32,
                rows: end - start,
                index,
            });
        }
        Ok(GpuParts {
            parts,
            class_ids: Vec::new(),
            classes: 0,
            row_weights: None,
        })
    }

    /// Every query's `k` nearest as keys (`key(distance, training row)`), merged over the parts.
    fn merged(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
    ) -> Result<(Vec<u64>, Selection, Option<PrefilterReport>)> {
        let found: Vec<Result<Neighbours>> = thread::scope(|scope| {
            let running: Vec<_> = (self.parts.iter())
                .map(|p| {
                    let k = k.min(p.rows);
                    scope.spawn(move || p.index.search(queries, k, selection, max_bytes))
                })
                .collect();
            let joined = running.into_iter().map(|r| r.join());
            joined
                .map(|r| r.unwrap_or_else(|_| Err(Error::Shard("a GPU's search panicked".into()))))
                .collect()
        });
        let found = found.into_iter().collect::<Result<Vec<_>>>()?;
        let mut keys = Vec::with_capacity(queries.rows() * k);
        let mut candidates = Vec::new();
        for q in 0..queries.rows() {
            candidates.clear();
            for (part, f) in self.parts.iter().zip(&found) {
                let kp = k.min(part.rows);
                let (indices, distances) = (&f.indices[q * kp..], &f.distances[q * kp..]);
                candidates.extend(
                    (indices.iter().zip(distances).take(kp))
                        .map(|(&i, &dist)| key(dist, part.first_row + i)),
                );
            }
            candidates.sort_unstable();
            keys.extend_from_slice(&candidates[..k]);
        }
        let prefilter = found
            .iter()
            .filter_map(|f| f.prefilter)
            .reduce(|a, b| PrefilterReport {
                queries: a.queries + b.queries,
                exact_fallbacks: a.exact_fallbacks + b.exact_fallbacks,
            });
        Ok((keys, found[0].selection, prefilter))
    }
}

impl KnnSearch for GpuParts {
    fn search(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
    ) -> Result<Neighbours> {
        let (keys, selection, prefilter) = self.merged(queries, k, selection, max_bytes)?;
        let (mut indices, mut distances) = (Vec::new(), Vec::new());
        split_keys(&keys, &mut indices, &mut distances);
        Ok(Neighbours {
            indices,
            distances,
            selection,
            prefilter,
        })
    }

    fn set_prefilter(&mut self, allowed: bool) {
        self.parts
            .iter_mut()
            .for_each(|p| p.index.set_prefilter(allowed));
    }

    fn set_labels(&mut self, class_ids: &[u32], classes: usize) -> Result<()> {
        self.class_ids = class_ids.to_vec();
        self.classes = classes;
        Ok(())
    }

    fn set_row_weights(&mut self, relative: &[f32]) -> Result<()> {
        self.row_weights = Some(relative.to_vec());
        Ok(())
    }

    fn vote(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
        weighted: bool,
        proba: bool,
    ) -> Result<Votes> {
        let (keys, _, _) = self.merged(queries, k, selection, max_bytes)?;
        let c = self.classes.max(1);
        let scale = pow2_f32(vote_scale_exponent(k));
        let (mut votes, mut first) = (vec![0u64; c], vec![0u32; c]);
        let mut shares = vec![0f32; if proba { queries.rows() * c } else { 0 }];
        let classes = (keys.chunks_exact(k).enumerate())
            .map(|(q, keys)| {
                let share = if proba {
                    &mut shares[q * c..(q + 1) * c]
                } else {
                    &mut [][..]
                };
                let weights = self.row_weights.as_deref();
                let ids = &self.class_ids;
                knn_vote(
                    keys, ids, weights, c, weighted, scale, &mut votes, &mut first, share,
                )
            })
            .collect();
        Ok(Votes {
            classes,
            proba: shares,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The merge over parts (here on the CPU: the same code as on GPUs) equals one index, with
    /// ties across parts (a lattice) and k above a part's rows.
    #[test]
    fn parts_answer_as_one_index() {
        let (n, d) = (50, 2);
        let train: Vec<f32> = (0..n * d).map(|i| ((i * 7) % 5) as f32).collect();
        let queries: Vec<f32> = (0..8 * d).map(|i| ((i * 3) % 4) as f32 * 0.7).collect();
        let (train, queries) = (
            MatrixView::new(&train, n, d).unwrap(),
            MatrixView::new(&queries, 8, d).unwrap(),
        );
        let classes: Vec<u32> = (0..n as u32).map(|i| i % 3).collect();
        let weights: Vec<f32> = (0..n).map(|i| 1.0 / (1 + i % 4) as f32).collect();
        let metric = PairMetric::Euclidean;
        let mut one = Device::Cpu
            .backend()
            .unwrap()
            .knn_index(&train, metric)
            .unwrap();
        let mut parts = GpuParts::new(&train, metric, &[Device::Cpu; 3]).unwrap();
        for index in [one.as_mut(), &mut parts as &mut dyn KnnSearch] {
            index.set_labels(&classes, 3).unwrap();
            index.set_row_weights(&weights).unwrap();
        }
        for k in [1, 5, 17, 30, n] {
            let (a, b) = (
                one.search(&queries, k, Selection::Auto, None).unwrap(),
                parts.search(&queries, k, Selection::Auto, None).unwrap(),
            );
            assert_eq!(a.indices, b.indices, "k={k}");
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a.distances), bits(&b.distances), "k={k}");
            let (a, b) = (
                one.vote(&queries, k, Selection::Auto, None, true, true)
                    .unwrap(),
                parts
                    .vote(&queries, k, Selection::Auto, None, true, true)
                    .unwrap(),
            );
            assert_eq!(a.classes, b.classes, "k={k}");
            assert_eq!(bits(&a.proba), bits(&b.proba), "k={k}");
        }
    }
}
