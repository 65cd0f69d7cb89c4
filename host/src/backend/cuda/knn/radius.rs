//! Radius search on the GPU, in batches of queries under the memory budget, two ways:
//!
//! * exact: per batch the whole distance rows (the search's distance kernel, so the search's
//!   floats), `knn_radius_count`, the counts' prefix sum on the host, then `knn_radius_fill`;
//! * prefiltered (L2 metrics, sm_80 and later, a finite radius): `knn_tf32_scan` lists each
//!   query's candidates (the training rows whose TF32 lower bound is within the radius), then
//!   `knn_radius_tf32_count` and `knn_radius_tf32_fill` do the same over their exact distances
//!   (the same floats). Queries with more candidates than the list holds take the exact path.
//!
//! Either way the fill runs for groups of rows whose keys fit the budget, each group's keys
//! brought back and sorted per query on the host.

use super::{CudaKnn, Side, distances};
use crate::backend::cuda::CudaBackend;
use crate::backend::cuda::launch::{Reads, Writes};
use crate::backend::radius::{RadiusKeys, reserve_keys};
use crate::backend::vocab::PrefilterReport;
use crate::error::Result;
use crate::matrix::MatrixView;
use cudarc::driver::CudaSlice;
use kernels_gpu::knn_tf32::{
    SCAN_CANDIDATES, TF32_CAP, bound_coefficient, sq_threshold, tf32_metric,
};
use kernels_gpu::knn_tf32::{ScanParams, scan_kernel, tf32_scan_grid};
use kernels_gpu::norms::{ROW_SQ_NORMS, RowSqNormsParams, row_sq_norms_grid};
use kernels_gpu::params::DevPtr;
use kernels_gpu::radius::candidates::OVERFLOW;
use kernels_gpu::radius::candidates::{
    KNN_RADIUS_TF32_COUNT, KNN_RADIUS_TF32_FILL, RADIUS_TF32_SHARED_BYTES, RadiusTf32CountParams,
    RadiusTf32FillParams,
};
use kernels_gpu::radius::{
    KNN_RADIUS_COUNT, KNN_RADIUS_FILL, RADIUS_SHARED_BYTES, RadiusCountParams, RadiusFillParams,
};
use rayon::prelude::*;
use std::ops::Range;

/// Most query rows per batch.
const MAX_BATCH_ROWS: usize = 1 << 16;

/// Device buffers of an exact radius search, sized for its batch of queries.
struct RadiusBuffers {
    q: CudaSlice<f32>,
    q_norms: CudaSlice<f32>,
    dist: CudaSlice<f32>,
    counts: CudaSlice<u32>,
    at: CudaSlice<u64>,
}

/// Device buffers of a prefiltered radius search, sized for its batch of queries.
struct PrefilterBuffers {
    q: CudaSlice<f32>,
    q_norms: CudaSlice<f32>,
    /// Every row's squared threshold (the radius's).
    t_sq: CudaSlice<f32>,
    /// Candidates per row (the scan's count, past `TF32_CAP` too).
    counts: CudaSlice<u32>,
    cand: CudaSlice<u32>,
    /// Candidates within the radius per row, or `OVERFLOW`.
    found: CudaSlice<u32>,
    at: CudaSlice<u64>,
    /// The scan's group keys, unused in its candidate mode.
    no_groups: CudaSlice<u64>,
}

impl CudaKnn {
    /// Every query row's training rows within `radius`, as keys sorted per query, in batches
    /// within `max_bytes` (else the share of the free memory of [`CudaBackend::budget`]);
    /// through the prefilter where it applies ([`CudaKnn::radius_scan_xc`]).
    pub(super) fn radius_keys(
        &self,
        queries: &MatrixView<'_>,
        radius: f32,
        max_bytes: Option<usize>,
    ) -> Result<RadiusKeys> {
        if let Some(ready) = &self.ready {
            self.gpu.wait_for(ready)?;
        }
        match self.radius_scan_xc(radius) {
            Some(xc) => self.radius_prefiltered(queries, radius, max_bytes, xc),
            None => self.radius_exact(queries, radius, max_bytes),
        }
    }

    /// The scan's query tile dimensions when the prefilter serves a radius search: allowed, an
    /// L2 metric, and a radius whose squared threshold is finite (an infinite one makes every
    /// row a candidate).
    fn radius_scan_xc(&self, radius: f32) -> Option<usize> {
        let applies = self.prefilter
            && tf32_metric(self.metric)
            && sq_threshold(self.metric, radius) < f32::INFINITY;
        applies.then(|| self.scan_xc()).flatten()
    }

    /// The exact path: whole distance rows per batch.
    fn radius_exact(
        &self,
        queries: &MatrixView<'_>,
        radius: f32,
        max_bytes: Option<usize>,
    ) -> Result<RadiusKeys> {
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
        let mut out = RadiusKeys::default();
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
            gpu.launch(
                ROW_SQ_NORMS,
                row_sq_norms_grid(r),
                0,
                RowSqNormsParams {
                    x: bufs.q.reads(r * d),
                    n: r as u32,
                    d: d as u32,
                    out: bufs.q_norms.writes(r),
                },
            )?;
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
        gpu.launch(
            KNN_RADIUS_COUNT,
            r,
            RADIUS_SHARED_BYTES,
            RadiusCountParams {
                dist: bufs.dist.reads(r * n),
                ld: n as u64,
                cols: n as u32,
                first_index: 0,
                radius,
                counts: bufs.counts.writes(r),
            },
        )?;
        let counts = gpu.download(&bufs.counts, r, "neighbour counts")?;
        for (rows, total) in fill_groups(&counts, key_slots) {
            gather(
                gpu,
                &counts[rows.clone()],
                total,
                &mut bufs.at,
                out,
                |at, keys| {
                    gpu.launch(
                        KNN_RADIUS_FILL,
                        rows.len(),
                        RADIUS_SHARED_BYTES,
                        RadiusFillParams {
                            dist: bufs.dist.slice(rows.start * n..).reads(rows.len() * n),
                            ld: n as u64,
                            cols: n as u32,
                            first_index: 0,
                            radius,
                            at: at.writes(rows.len()),
                            keys: keys.writes(keys.len()),
                        },
                    )
                },
            )?;
        }
        Ok(())
    }

    /// The prefiltered path: per batch the candidates' scan, count and fill; the queries that
    /// overflow (and, once a batch has more than half of its queries overflow, every later
    /// query: the radius catches too much for the prefilter) by [`CudaKnn::radius_exact`] at the
    /// end, when the batch buffers are freed.
    fn radius_prefiltered(
        &self,
        queries: &MatrixView<'_>,
        radius: f32,
        max_bytes: Option<usize>,
        xc: usize,
    ) -> Result<RadiusKeys> {
        let gpu = &*self.gpu;
        let (m, d) = (queries.rows(), self.d);
        let budget = gpu.budget(max_bytes, 0)?;
        let per_row = 4 * (d + 1) + 4 * TF32_CAP + 3 * 4 + 8;
        let rows = (budget / 2 / per_row).clamp(1, m.clamp(1, MAX_BATCH_ROWS));
        let key_slots = (budget.saturating_sub(rows * per_row) / 8).max(1);
        let t_sq = vec![sq_threshold(self.metric, radius); rows];
        // SAFETY: each batch's query rows are copied in before they are read, the counts
        // cleared before the scan appends, the candidates and `found` written before they are
        // read, `at` before every fill.
        let mut bufs = unsafe {
            PrefilterBuffers {
                q: gpu.uninit(rows * d, "query rows")?,
                q_norms: gpu.uninit(rows, "query norms")?,
                t_sq: gpu.uninit(rows, "radius thresholds")?,
                counts: gpu.uninit(rows, "candidate counts")?,
                cand: gpu.uninit(rows * TF32_CAP, "candidates")?,
                found: gpu.uninit(rows, "neighbour counts")?,
                at: gpu.uninit(rows, "neighbour slots")?,
                no_groups: gpu.uninit(1, "group keys")?,
            }
        };
        gpu.write(&t_sq, &mut bufs.t_sq, "radius thresholds")?;
        let mut out = RadiusKeys::default();
        let mut exact_rows = Vec::new();
        let mut first = 0;
        while first < m {
            let r = rows.min(m - first);
            let over = self.radius_prefilter_batch(
                queries, first, r, radius, xc, key_slots, &mut bufs, &mut out,
            )?;
            exact_rows.extend(over.iter().map(|&b| first + b));
            first += r;
            if over.len() * 2 > r {
                // Empty rows for the rest, which the exact path fills in.
                exact_rows.extend(first..m);
                let last = *out.offsets.last().expect("offsets start at 0");
                out.offsets.resize(m + 1, last);
                break;
            }
        }
        drop(bufs);
        let report = PrefilterReport {
            queries: m,
            exact_fallbacks: exact_rows.len(),
            stored: 0,
        };
        if !exact_rows.is_empty() {
            let mut rows = Vec::with_capacity(exact_rows.len() * d);
            for &q in &exact_rows {
                rows.extend_from_slice(&queries.as_slice()[q * d..(q + 1) * d]);
            }
            let view = MatrixView::new(&rows, exact_rows.len(), d)?;
            let exact = self.radius_exact(&view, radius, max_bytes)?;
            out = splice(&out, &exact_rows, &exact)?;
        }
        out.prefilter = Some(report);
        Ok(out)
    }

    /// The `r` queries from `first` through the prefilter, appended to `out` (an overflowing
    /// query with no neighbours); returns the overflowing queries (batch rows).
    #[allow(clippy::too_many_arguments)]
    fn radius_prefilter_batch(
        &self,
        queries: &MatrixView<'_>,
        first: usize,
        r: usize,
        radius: f32,
        xc: usize,
        key_slots: usize,
        bufs: &mut PrefilterBuffers,
        out: &mut RadiusKeys,
    ) -> Result<Vec<usize>> {
        let gpu = &*self.gpu;
        let (n, d) = (self.n, self.d);
        let rows = &queries.as_slice()[first * d..(first + r) * d];
        gpu.write_rows(rows, &mut bufs.q, 0, "query rows")?;
        gpu.launch(
            ROW_SQ_NORMS,
            row_sq_norms_grid(r),
            0,
            RowSqNormsParams {
                x: bufs.q.reads(r * d),
                n: r as u32,
                d: d as u32,
                out: bufs.q_norms.writes(r),
            },
        )?;
        gpu.clear(&mut bufs.counts, "candidate counts")?;
        let (kernel, shared) = scan_kernel(self.warpgroup_scan, xc);
        let tiles = self.tf32_tiles(r);
        gpu.launch(
            kernel,
            tf32_scan_grid(r, n, tiles),
            shared,
            ScanParams {
                q: bufs.q.reads(r * d),
                q_norms: bufs.q_norms.reads(r),
                m: r as u32,
                x: self.x.reads(n * d),
                x_norms: self.norms.reads(n),
                x_roots: self.roots.reads(n),
                n: n as u32,
                d: d as u32,
                xc: xc as u32,
                tiles: tiles as u32,
                mode: SCAN_CANDIDATES,
                group: 64,
                // No group keys (`ldg` 0) and no approximations in this mode.
                gkeys: bufs.no_groups.writes(0),
                ldg: 0,
                approx: DevPtr::NULL,
                lda: 0,
                t_sq: bufs.t_sq.reads(r),
                counts: bufs.counts.writes(r),
                cand: bufs.cand.writes(r * TF32_CAP),
                c1: bound_coefficient(d),
            },
        )?;
        // Either kernel's parameters for query rows `first_row ..` of the batch, as many as the
        // launch has blocks: the ten fields both start with, then `$rest`.
        macro_rules! candidates {
            ($params:ident, $first_row:expr, $rows:expr, $($rest:tt)*) => {{
                let (first_row, rows): (usize, usize) = ($first_row, $rows);
                $params {
                    q: bufs.q.reads((first_row + rows) * d),
                    q_norms: bufs.q_norms.reads(first_row + rows),
                    x: self.x.reads(n * d),
                    x_norms: self.norms.reads(n),
                    d: d as u32,
                    metric: self.metric.id(),
                    radius,
                    first_row: first_row as u32,
                    counts: bufs.counts.reads(first_row + rows),
                    cand: bufs.cand.reads((first_row + rows) * TF32_CAP),
                    $($rest)*
                }
            }};
        }
        gpu.launch(
            KNN_RADIUS_TF32_COUNT,
            r,
            RADIUS_TF32_SHARED_BYTES,
            candidates!(RadiusTf32CountParams, 0, r, found: bufs.found.writes(r)),
        )?;
        let mut counts = gpu.download(&bufs.found, r, "neighbour counts")?;
        let mut over = Vec::new();
        for (b, c) in counts.iter_mut().enumerate() {
            if *c == OVERFLOW {
                over.push(b);
                *c = 0;
            }
        }
        for (rows, total) in fill_groups(&counts, key_slots) {
            gather(
                gpu,
                &counts[rows.clone()],
                total,
                &mut bufs.at,
                out,
                |at, keys| {
                    gpu.launch(
                        KNN_RADIUS_TF32_FILL,
                        rows.len(),
                        RADIUS_TF32_SHARED_BYTES,
                        candidates!(
                            RadiusTf32FillParams,
                            rows.start,
                            rows.len(),
                            at: at.reads(rows.len()),
                            keys: keys.writes(keys.len()),
                        ),
                    )
                },
            )?;
        }
        Ok(over)
    }
}

/// Fills (`fill(at, keys)`), brings back and sorts the keys of a group of rows (as many as
/// `counts`, whose sum is `total`), appending them to `out`; `at` receives each row's first
/// slot.
fn gather(
    gpu: &CudaBackend,
    counts: &[u32],
    total: usize,
    at_buf: &mut CudaSlice<u64>,
    out: &mut RadiusKeys,
    fill: impl FnOnce(&mut CudaSlice<u64>, &mut CudaSlice<u64>) -> Result<()>,
) -> Result<()> {
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
        gpu.write(&at, at_buf, "neighbour slots")?;
        fill(at_buf, &mut keys)?;
        let mut found = gpu.download(&keys, total, "neighbour keys")?;
        sort_each(&mut found, &offsets);
        out.keys.extend_from_slice(&found);
    }
    let base = *out.offsets.last().expect("offsets start at 0");
    out.offsets.extend(offsets[1..].iter().map(|&o| base + o));
    Ok(())
}

/// `out` with the keys of its rows `rows` (ascending, empty in `out`) taken from `exact`'s rows
/// in the same order.
fn splice(out: &RadiusKeys, rows: &[usize], exact: &RadiusKeys) -> Result<RadiusKeys> {
    let queries = out.offsets.len() - 1;
    let mut joined = RadiusKeys::default();
    reserve_keys(&mut joined.keys, out.keys.len() + exact.keys.len())?;
    joined.offsets.reserve(queries);
    let mut next = rows.iter().enumerate().peekable();
    for q in 0..queries {
        match next.next_if(|&(_, &row)| row == q) {
            Some((e, _)) => joined.keys.extend_from_slice(exact.row(e)),
            None => joined.keys.extend_from_slice(out.row(q)),
        }
        joined.offsets.push(joined.keys.len());
    }
    Ok(joined)
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
    fn spliced_rows_come_from_the_exact_answer() {
        let out = RadiusKeys::from_rows(vec![vec![1, 2], vec![], vec![3], vec![], vec![]]).unwrap();
        let exact = RadiusKeys::from_rows(vec![vec![7, 8, 9], vec![]]).unwrap();
        let want = RadiusKeys::from_rows(vec![vec![1, 2], vec![7, 8, 9], vec![3], vec![], vec![]])
            .unwrap();
        assert_eq!(splice(&out, &[1, 4], &exact).unwrap(), want);
        assert_eq!(splice(&out, &[], &RadiusKeys::default()).unwrap(), out);
    }

    #[test]
    fn every_row_is_sorted_in_place() {
        let mut keys = [5, 1, 3, 9, 2, 2, 8, 7];
        sort_each(&mut keys, &[0, 3, 3, 4, 8]);
        assert_eq!(keys, [1, 3, 5, 9, 2, 2, 7, 8]);
    }
}
