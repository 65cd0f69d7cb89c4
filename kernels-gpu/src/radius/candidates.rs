//! Radius search through the TF32 prefilter (L2 metrics, sm_80 and later): `knn_tf32_scan` in
//! mode [`SCAN_CANDIDATES`](crate::knn_tf32::SCAN_CANDIDATES), with every query's squared
//! threshold [`sq_threshold`](crate::knn_tf32::sq_threshold)`(metric, radius)`, lists the
//! training rows whose lower bound `A − E` may be within the radius (no row within it is left
//! out: see [`crate::knn_tf32`]). Then, a block per query, `knn_radius_tf32_count` computes the
//! candidates' exact distances ([`exact_distance`], the CPU's arithmetic) and counts those
//! within the radius ([`within`]), and `knn_radius_tf32_fill` computes them again and writes
//! their keys into the query's slot range, as `knn_radius_fill` does. A query with more than
//! `TF32_CAP` candidates is counted as [`OVERFLOW`] and searched by the exact path.

use crate::exec::Exec;
use crate::knn::{PairMetric, key};
use crate::knn_tf32::{TF32_CAP, exact_distance};
use crate::launch::Kernel;
use crate::params::DevPtr;
use crate::radius::{RADIUS_BLOCK, within};
use core::sync::atomic::{AtomicU32, Ordering};

const B: usize = RADIUS_BLOCK as usize;

/// The count of a query whose candidates overflowed the list: it takes the exact path.
pub const OVERFLOW: u32 = u32::MAX;

/// Dynamic shared memory of a count or fill block: its counter.
pub const RADIUS_TF32_SHARED_BYTES: usize = 4;

/// Arguments of both passes. Block `b` takes query row `row = first_row + b` (`q`, `q_norms`,
/// `counts`, `cand` indexed by `row`), whose candidates are `cand[row · TF32_CAP ..][.. counts[row]]`.
#[derive(Clone, Copy)]
pub struct Candidates {
    pub q: *const f32,
    pub q_norms: *const f32,
    pub x: *const f32,
    pub x_norms: *const f32,
    pub d: usize,
    pub metric: PairMetric,
    pub radius: f32,
    pub first_row: usize,
    pub counts: *const u32,
    pub cand: *const u32,
}

impl Candidates {
    /// Calls `take(t, dist, j)` for every candidate `j` of the block's row within the radius
    /// (thread `t` strides over them); `false` when the row overflowed (nothing taken).
    #[inline(always)]
    unsafe fn each_within(self, t: usize, row: usize, mut take: impl FnMut(f32, u32)) -> bool {
        let count = unsafe { *self.counts.add(row) } as usize;
        if count > TF32_CAP {
            return false;
        }
        let (qrow, nq) = unsafe { (self.q.add(row * self.d), *self.q_norms.add(row)) };
        let mut e = t;
        while e < count {
            let j = unsafe { *self.cand.add(row * TF32_CAP + e) };
            let dist = unsafe {
                exact_distance(
                    self.metric,
                    qrow,
                    self.x.add(j as usize * self.d),
                    self.d,
                    nq,
                    *self.x_norms.add(j as usize),
                )
            };
            if within(dist, self.radius) {
                take(dist, j);
            }
            e += B;
        }
        true
    }
}

/// Body of `knn_radius_tf32_count`: `found[b]` = the number of the row's candidates within the
/// radius, or [`OVERFLOW`].
///
/// # Safety
/// [`RADIUS_BLOCK`] threads, [`RADIUS_TF32_SHARED_BYTES`] of shared memory; pointers valid for
/// the rows (`found` for the blocks).
#[inline(always)]
pub unsafe fn count<E: Exec>(x: E, a: Candidates, found: *mut u32) {
    let (t, b) = (x.thread(), x.block());
    let counter = x.shared::<u32>();
    if t == 0 {
        unsafe { *counter = 0 };
    }
    x.sync();
    let tally = unsafe { AtomicU32::from_ptr(counter) };
    let fits = unsafe {
        a.each_within(t, a.first_row + b, |_, _| {
            tally.fetch_add(1, Ordering::Relaxed);
        })
    };
    x.sync();
    if t == 0 {
        unsafe { *found.add(b) = if fits { *counter } else { OVERFLOW } };
    }
}

/// Body of `knn_radius_tf32_fill`: the keys of the row's candidates within the radius written to
/// `keys[at[b] ..]`, in an order that depends on the threads' timing (nothing for an overflow).
///
/// # Safety
/// As for [`count`]; `keys` has room for the row's count from `at[b]`.
#[inline(always)]
pub unsafe fn fill<E: Exec>(x: E, a: Candidates, at: *const u64, keys: *mut u64) {
    let (t, b) = (x.thread(), x.block());
    let counter = x.shared::<u32>();
    if t == 0 {
        unsafe { *counter = 0 };
    }
    x.sync();
    let base = unsafe { *at.add(b) } as usize;
    let slots = unsafe { AtomicU32::from_ptr(counter) };
    unsafe {
        a.each_within(t, a.first_row + b, |dist, j| {
            let slot = slots.fetch_add(1, Ordering::Relaxed) as usize;
            *keys.add(base + slot) = key(dist, j);
        })
    };
}

/// The `knn_radius_tf32_count` entry point. CPU twin: `backend::cpu::knn::radius`
/// (`CpuKnn::radius_keys`).
pub const KNN_RADIUS_TF32_COUNT: Kernel<RadiusTf32CountParams> =
    Kernel::new("knn_radius_tf32_count").threads(RADIUS_BLOCK);

/// The `knn_radius_tf32_fill` entry point. CPU twin: `backend::cpu::knn::radius`
/// (`CpuKnn::radius_keys`).
pub const KNN_RADIUS_TF32_FILL: Kernel<RadiusTf32FillParams> =
    Kernel::new("knn_radius_tf32_fill").threads(RADIUS_BLOCK);

kernel_params! {
    /// `knn_radius_tf32_count`'s parameters: the rows' candidates (see [`Candidates`]: query
    /// rows `first_row ..` of the batch (`q`, `q_norms`), the training rows, `metric` (a
    /// [`PairMetric`] id), the radius, and the candidates from `knn_tf32_scan` (`counts`,
    /// `cand`)), then `found[b]` for each row. `knn_radius_tf32_fill` starts with the same ten.
    pub struct RadiusTf32CountParams {
        pub q: DevPtr<f32>,
        pub q_norms: DevPtr<f32>,
        pub x: DevPtr<f32>,
        pub x_norms: DevPtr<f32>,
        pub d: u32,
        pub metric: u32,
        pub radius: f32,
        pub first_row: u32,
        pub counts: DevPtr<u32>,
        pub cand: DevPtr<u32>,
        pub found: DevPtr<u32>,
    }
    entries: radius_tf32_count_entry;
}

kernel_params! {
    /// `knn_radius_tf32_fill`'s parameters: the rows' candidates, as for
    /// [`RadiusTf32CountParams`], then each row's first slot `at[b]` in `keys`.
    pub struct RadiusTf32FillParams {
        pub q: DevPtr<f32>,
        pub q_norms: DevPtr<f32>,
        pub x: DevPtr<f32>,
        pub x_norms: DevPtr<f32>,
        pub d: u32,
        pub metric: u32,
        pub radius: f32,
        pub first_row: u32,
        pub counts: DevPtr<u32>,
        pub cand: DevPtr<u32>,
        pub at: DevPtr<u64>,
        pub keys: DevPtr<u64>,
    }
    entries: radius_tf32_fill_entry;
}

#[cfg(target_arch = "nvptx64")]
mod entry {
    use super::*;

    /// The [`Candidates`] of either kernel's parameters (both start with the same ten fields).
    macro_rules! candidates {
        ($params:expr) => {
            Candidates {
                q: $params.q.as_ptr(),
                q_norms: $params.q_norms.as_ptr(),
                x: $params.x.as_ptr(),
                x_norms: $params.x_norms.as_ptr(),
                d: ($params.d as usize).max(1),
                metric: PairMetric::from_id($params.metric),
                radius: $params.radius,
                first_row: $params.first_row as usize,
                counts: $params.counts.as_ptr(),
                cand: $params.cand.as_ptr(),
            }
        };
    }

    radius_tf32_count_entry! {
        /// Counts every row's candidates within the radius; see [`count`].
        ///
        /// # Safety
        /// As for [`count`].
        fn knn_radius_tf32_count(params) {
            let a = candidates!(params);
            let found = params.found.as_mut_ptr();
            unsafe { count(crate::exec::Gpu, a, found) }
        }
    }

    radius_tf32_fill_entry! {
        /// Writes every row's candidates within the radius as keys; see [`fill`].
        ///
        /// # Safety
        /// As for [`fill`].
        fn knn_radius_tf32_fill(params) {
            let a = candidates!(params);
            let (at, keys) = (params.at.as_ptr(), params.keys.as_mut_ptr());
            unsafe { fill(crate::exec::Gpu, a, at, keys) }
        }
    }
}

#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests {
    use super::*;
    use crate::exec::emu::{P, launch};
    use crate::knn::distance;
    use crate::knn_tf32::{
        approx_sq, bound_coefficient, error_bound, may_be_near, sq_threshold, tf32_round,
    };
    use crate::math::sq_norm;

    /// The scan's candidate test on the host, with the TF32 dot product emulated (rounded
    /// queries, truncated training values): every row it keeps, in an order of our choosing.
    fn candidates(q: &[f32], x: &[f32], d: usize, t_sq: f32) -> Vec<u32> {
        let (nq, c1) = (sq_norm(q), bound_coefficient(d));
        (0..x.len() / d)
            .filter(|&j| {
                let xr = &x[j * d..][..d];
                let dot: f32 = q
                    .iter()
                    .zip(xr)
                    .map(|(&a, &b)| tf32_round(a) * f32::from_bits(b.to_bits() & !0x1fff))
                    .sum();
                let nx = sq_norm(xr);
                let approx = approx_sq(dot, nq, nx);
                may_be_near(approx, error_bound(c1 * nq.sqrt(), nx.sqrt(), nq, nx), t_sq)
            })
            .map(|j| j as u32)
            .rev()
            .collect()
    }

    /// Count, offsets and fill in the emulator over rows `first_row..` (the overflowing one's
    /// candidate list replaced by `TF32_CAP + 1`), sorted per row as the host does.
    #[allow(clippy::too_many_arguments)]
    fn emulated(
        q: &[f32],
        x: &[f32],
        d: usize,
        metric: PairMetric,
        radius: f32,
        first_row: usize,
        overflow_row: Option<usize>,
    ) -> Vec<Option<Vec<u64>>> {
        let m = q.len() / d;
        let t_sq = sq_threshold(metric, radius);
        let mut counts = vec![0u32; m];
        let mut cand = vec![0u32; m * TF32_CAP];
        for r in 0..m {
            let list = candidates(&q[r * d..][..d], x, d, t_sq);
            assert!(list.len() <= TF32_CAP, "the test's shapes fit the list");
            counts[r] = list.len() as u32;
            cand[r * TF32_CAP..][..list.len()].copy_from_slice(&list);
        }
        if let Some(r) = overflow_row {
            counts[r] = TF32_CAP as u32 + 1;
        }
        let qn: Vec<f32> = q.chunks(d).map(sq_norm).collect();
        let xn: Vec<f32> = x.chunks(d).map(sq_norm).collect();
        let a = Candidates {
            q: q.as_ptr(),
            q_norms: qn.as_ptr(),
            x: x.as_ptr(),
            x_norms: xn.as_ptr(),
            d,
            metric,
            radius,
            first_row,
            counts: counts.as_ptr(),
            cand: cand.as_ptr(),
        };
        let pa = P(&a as *const Candidates as *mut Candidates);
        let rows = m - first_row;
        let mut found = vec![7u32; rows];
        let f = P::of(&mut found);
        launch(rows, B, RADIUS_TF32_SHARED_BYTES, |e| unsafe {
            count(e, *pa.get(), f.get())
        });
        let mut at = vec![0u64; rows];
        let mut total = 0u64;
        for (b, &c) in found.iter().enumerate() {
            at[b] = total;
            total += if c == OVERFLOW { 0 } else { c as u64 };
        }
        // Slots past the total show any write out of range.
        let mut keys = vec![u64::MAX - 1; total as usize + 3];
        let (ap, kp) = (P::of(&mut at), P::of(&mut keys));
        launch(rows, B, RADIUS_TF32_SHARED_BYTES, |e| unsafe {
            fill(e, *pa.get(), ap.get(), kp.get())
        });
        assert!(keys[total as usize..].iter().all(|&k| k == u64::MAX - 1));
        (0..rows)
            .map(|b| {
                (found[b] != OVERFLOW).then(|| {
                    let mut row = keys[at[b] as usize..][..found[b] as usize].to_vec();
                    row.sort_unstable();
                    row
                })
            })
            .collect()
    }

    /// Every training row within the radius, by the CPU's distance, sorted.
    fn reference(q: &[f32], x: &[f32], d: usize, metric: PairMetric, radius: f32) -> Vec<u64> {
        let mut keys: Vec<u64> = (0..x.len() / d)
            .filter_map(|j| {
                let dist = distance(metric, q, &x[j * d..][..d]);
                (dist <= radius).then(|| key(dist, j as u32))
            })
            .collect();
        keys.sort_unstable();
        keys
    }

    #[test]
    fn emulated_candidates_give_every_row_within_the_radius() {
        // Integer grids (duplicates, exact ties) and fractional values; n not a multiple of 64.
        for (m, n, d, step) in [
            (3, 1, 1, 1.0),
            (4, 257, 1, 1.0),
            (3, 130, 3, 1.0),
            (2, 200, 5, 0.37),
            (3, 65, 8, 0.5),
        ] {
            let x: Vec<f32> = (0..n * d).map(|i| ((i * 7) % 5) as f32 * step).collect();
            let q: Vec<f32> = (0..m * d).map(|i| ((i * 3) % 4) as f32 * step).collect();
            for metric in [PairMetric::SqEuclidean, PairMetric::Euclidean] {
                // Radius 0, attained distances (ties at exactly the radius), one between, and
                // one that holds everything.
                let attained = distance(metric, &q[..d], &x[n / 2 * d..][..d]);
                for radius in [0.0, 1.0, 2.5, attained, 4.0 * step, 1e30, f32::INFINITY] {
                    let got = emulated(&q, &x, d, metric, radius, 0, None);
                    for (r, row) in got.iter().enumerate() {
                        let want = reference(&q[r * d..][..d], &x, d, metric, radius);
                        let case = format!("m={m} n={n} d={d} {metric:?} radius {radius} row {r}");
                        assert_eq!(row.as_deref(), Some(&want[..]), "{case}");
                    }
                }
            }
        }
    }

    #[test]
    fn rows_from_an_offset_and_overflows_are_flagged() {
        let (m, n, d) = (4, 90, 2);
        let x: Vec<f32> = (0..n * d).map(|i| ((i * 5) % 7) as f32).collect();
        let q: Vec<f32> = (0..m * d).map(|i| ((i * 3) % 4) as f32).collect();
        let metric = PairMetric::Euclidean;
        let got = emulated(&q, &x, d, metric, 3.0, 1, Some(2));
        assert_eq!(got.len(), 3);
        assert_eq!(got[1], None, "row 2 overflowed");
        for (b, r) in [(0, 1), (2, 3)] {
            let want = reference(&q[r * d..][..d], &x, d, metric, 3.0);
            assert_eq!(got[b].as_deref(), Some(&want[..]), "row {r}");
        }
    }
}
