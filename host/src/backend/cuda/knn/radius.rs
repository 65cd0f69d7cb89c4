//! Radius search on the GPU: queries in batches under the memory budget; per batch the whole
//! distance rows (the search's distance kernel, so the search's floats), `knn_radius_count`,
//! the counts' prefix sum on the host, then `knn_radius_fill` for groups of rows whose keys fit
//! the budget, each group's keys brought back and sorted per query on the host.

use super::{CudaKnn, Side, distances};
use crate::backend::cuda::launch::{KnnRadiusCount, KnnRadiusFill, RowSqNorms};
use crate::backend::radius::{RadiusKeys, reserve_keys};
use crate::error::Result;
use crate::matrix::MatrixView;
use cudarc::driver::CudaSlice;
use rayon::prelude::*;
use std::ops::Range;

/// Most query rows per batch.
const MAX_BATCH_ROWS: usize = 1 << 16;

/// Device buffers of a radius search, sized for its batch of queries.
struct RadiusBuffers {
    q: CudaSlice<f32>,
    q_norms: CudaSlice<f32>,
    dist: CudaSlice<f32>,
    counts: CudaSlice<u32>,
    at: CudaSlice<u64>,
}

impl CudaKnn {
    /// Every query row's training rows within `radius`, as keys sorted per query, in batches
    /// within `max_bytes` (else the share of the free memory of [`CudaBackend::budget`]).
    pub(super) fn radius_keys(
        &self,
        queries: &MatrixView<'_>,
        radius: f32,
        max_bytes: Option<usize>,
    ) -> Result<RadiusKeys> {
        if let Some(ready) = &self.ready {
            self.gpu.wait_for(ready)?;
        }
        let gpu = &*self.gpu;
        let (m, n, d) = (queries.rows(), self.n, self.d);
        let budget = gpu.budget(max_bytes, 0)?;
        let per_row = 4 * (d + 1 + n) + 4 + 8;
        let rows = (budget / 2 / per_row).clamp(1, m.clamp(1, MAX_BATCH_ROWS));
        // What the batch buffers leave of the budget holds the keys of a fill group.
        let key_slots = (budget.saturating_sub(rows * per_row) / 8).max(1);
        // SAFETY: each batch's query rows are copied in and its distances computed before
        // they are read; `at` is written before every fill.
        let mut bufs = unsafe {
            RadiusBuffers {
                q: gpu.uninit(rows * d, "query rows")?,
                q_norms: gpu.zeros(rows, "query norms")?,
                dist: gpu.uninit(rows * n, "distances")?,
                counts: gpu.zeros(rows, "neighbour counts")?,
                at: gpu.uninit(rows, "neighbour slots")?,
            }
        };
        let mut out = RadiusKeys {
            offsets: vec![0],
            keys: Vec::new(),
        };
        let mut first = 0;
        while first < m {
            let r = rows.min(m - first);
            self.radius_batch(queries, first, r, radius, key_slots, &mut bufs, &mut out)?;
            first += r;
        }
        Ok(out)
    }

    /// The `r` queries from `first`: distances and counts, then the fill groups, appended to
    /// `out`.
    #[allow(clippy::too_many_arguments)]
    fn radius_batch(
        &self,
        queries: &MatrixView<'_>,
        first: usize,
        r: usize,
        radius: f32,
        key_slots: usize,
        bufs: &mut RadiusBuffers,
        out: &mut RadiusKeys,
    ) -> Result<()> {
        let gpu = &*self.gpu;
        let (n, d) = (self.n, self.d);
        let rows = &queries.as_slice()[first * d..(first + r) * d];
        gpu.write_rows(rows, &mut bufs.q, 0, "query rows")?;
        if self.metric.needs_norms() {
            RowSqNorms {
                x: &bufs.q,
                n: r as u32,
                d: d as u32,
                out: &mut bufs.q_norms,
            }
            .launch(gpu)?;
        }
        let a = Side {
            x: &bufs.q,
            norms: &bufs.q_norms,
            first: 0,
            rows: r,
        };
        let b = Side {
            x: &self.x,
            norms: &self.norms,
            first: 0,
            rows: n,
        };
        distances(gpu, self.metric, a, b, d, &mut bufs.dist, n)?;
        gpu.clear(&mut bufs.counts, "neighbour counts")?;
        KnnRadiusCount {
            dist: &bufs.dist.slice(..),
            ld: n as u64,
            cols: n as u32,
            first_index: 0,
            radius,
            counts: &mut bufs.counts,
        }
        .launch(gpu, r)?;
        let counts = gpu.download(&bufs.counts, r, "neighbour counts")?;
        for (rows, total) in fill_groups(&counts, key_slots) {
            self.radius_fill(&counts[rows.clone()], rows.start, total, radius, bufs, out)?;
        }
        Ok(())
    }

    /// Fills, brings back and sorts the keys of batch rows `g0 ..` (as many as `counts`, whose
    /// sum is `total`), appending them to `out`.
    fn radius_fill(
        &self,
        counts: &[u32],
        g0: usize,
        total: usize,
        radius: f32,
        bufs: &mut RadiusBuffers,
        out: &mut RadiusKeys,
    ) -> Result<()> {
        let gpu = &*self.gpu;
        let n = self.n;
        let mut at = Vec::with_capacity(counts.len());
        let mut offsets = Vec::with_capacity(counts.len() + 1);
        offsets.push(0usize);
        for &c in counts {
            at.push(*offsets.last().expect("offsets start at 0") as u64);
            offsets.push(offsets.last().expect("offsets start at 0") + c as usize);
        }
        if total > 0 {
            // Room for the answer first: the host may not hold a radius that catches too much.
            reserve_keys(&mut out.keys, total)?;
            // SAFETY: the fill writes all `total` keys before they are read back.
            let mut keys = unsafe { gpu.uninit::<u64>(total, "neighbour keys")? };
            gpu.write(&at, &mut bufs.at, "neighbour slots")?;
            KnnRadiusFill {
                dist: &bufs.dist.slice(g0 * n..),
                ld: n as u64,
                cols: n as u32,
                first_index: 0,
                radius,
                at: &mut bufs.at,
                keys: &mut keys,
            }
            .launch(gpu, counts.len())?;
            let mut found = gpu.download(&keys, total, "neighbour keys")?;
            sort_each(&mut found, &offsets);
            out.keys.extend_from_slice(&found);
        }
        let base = *out.offsets.last().expect("offsets start at 0");
        out.offsets.extend(offsets[1..].iter().map(|&o| base + o));
        Ok(())
    }
}

/// The batch rows in groups whose keys (`counts` a row) fit `key_slots`, in order: each group a
/// range of rows (at least one, however many keys it has) and its number of keys.
fn fill_groups(counts: &[u32], key_slots: usize) -> Vec<(Range<usize>, usize)> {
    let mut groups = Vec::new();
    let mut g0 = 0;
    while g0 < counts.len() {
        let (mut g1, mut total) = (g0, 0usize);
        while g1 < counts.len() && (g1 == g0 || total + counts[g1] as usize <= key_slots) {
            total += counts[g1] as usize;
            g1 += 1;
        }
        groups.push((g0..g1, total));
        g0 = g1;
    }
    groups
}

/// Sorts every row `keys[offsets[i] .. offsets[i + 1]]` in place, on the rayon threads.
fn sort_each(keys: &mut [u64], offsets: &[usize]) {
    let mut rows = Vec::with_capacity(offsets.len().saturating_sub(1));
    let mut rest = keys;
    for w in offsets.windows(2) {
        let (row, tail) = rest.split_at_mut(w[1] - w[0]);
        rows.push(row);
        rest = tail;
    }
    rows.into_par_iter().for_each(|row| row.sort_unstable());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_fit_the_slots_and_cover_every_row() {
        let counts = [3, 0, 5, 2, 2, 9, 0, 1];
        for slots in [1, 4, 5, 9, 100] {
            let groups = fill_groups(&counts, slots);
            let mut next = 0;
            for (rows, total) in &groups {
                assert_eq!(rows.start, next, "slots {slots}");
                assert!(!rows.is_empty());
                let sum: usize = counts[rows.clone()].iter().map(|&c| c as usize).sum();
                assert_eq!(*total, sum);
                assert!(sum <= slots || rows.len() == 1, "slots {slots}: {rows:?}");
                next = rows.end;
            }
            assert_eq!(next, counts.len());
        }
        assert_eq!(fill_groups(&counts, 100), vec![(0..8, 22)]);
        assert!(fill_groups(&[], 5).is_empty());
    }

    #[test]
    fn every_row_is_sorted_in_place() {
        let mut keys = [5, 1, 3, 9, 2, 2, 8, 7];
        sort_each(&mut keys, &[0, 3, 3, 4, 8]);
        assert_eq!(keys, [1, 3, 5, 9, 2, 2, 7, 8]);
    }
}
