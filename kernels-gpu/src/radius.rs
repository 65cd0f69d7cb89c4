//! Radius search over a batch's whole distance rows, in two passes: `knn_radius_count` counts
//! every query's training rows within the radius, the host turns the counts into offsets, and
//! `knn_radius_fill` writes each query's neighbours as keys ([`crate::knn::key`]) into its slot
//! range. A neighbour is a row at distance `≤ radius` (a NaN distance never is). Within a slot
//! range the fill's order depends on the threads' timing; the keys are unique, so sorting each
//! range (the host does) gives the one answer, ordered by (distance, training index).
//!
//! The bodies are generic over [`Exec`] so that the host tests run them in the emulator.

pub mod candidates;

use crate::exec::{Exec, inclusive_scan_u32};
use crate::knn::key;
use crate::launch::Kernel;
use crate::params::DevPtr;
use core::sync::atomic::{AtomicU32, Ordering};

/// Threads of a count or fill block (one block per query row).
pub const RADIUS_BLOCK: u32 = 256;
const B: usize = RADIUS_BLOCK as usize;

/// Dynamic shared memory of a count or fill block: a u32 per thread and the fill's counter.
pub const RADIUS_SHARED_BYTES: usize = (B + 1) * 4;

/// Whether a distance is within the radius (the one comparison of both passes and the CPU).
#[inline(always)]
pub fn within(dist: f32, radius: f32) -> bool {
    dist <= radius
}

/// Arguments of both passes: query row `q`'s distances are `dist[q · ld .. q · ld + cols]`,
/// column `c` being training row `first_index + c`.
#[derive(Clone, Copy)]
pub struct Rows {
    pub dist: *const f32,
    pub ld: usize,
    pub cols: usize,
    pub first_index: u32,
    pub radius: f32,
}

/// Body of `knn_radius_count`: `counts[q] += |{c < cols : dist[q · ld + c] ≤ radius}|` for the
/// block's query row `q` (adds, so a row's counts can be taken over several column ranges).
///
/// # Safety
/// One block of [`RADIUS_BLOCK`] threads per query row, [`RADIUS_SHARED_BYTES`] of shared
/// memory; `dist` holds the rows, `counts` one value per row.
#[inline(always)]
pub unsafe fn count<E: Exec>(x: E, rows: Rows, counts: *mut u32) {
    let (t, q) = (x.thread(), x.block());
    let row = unsafe { rows.dist.add(q * rows.ld) };
    let mut mine = 0u32;
    let mut c = t;
    while c < rows.cols {
        mine += within(unsafe { *row.add(c) }, rows.radius) as u32;
        c += B;
    }
    let scan = x.shared::<u32>();
    unsafe {
        *scan.add(t) = mine;
        x.sync();
        inclusive_scan_u32(x, scan, B);
        if t == 0 {
            *counts.add(q) += *scan.add(B - 1);
        }
    }
}

/// The `knn_radius_count` entry point. CPU twin: `backend::cpu::knn::radius` (`CpuKnn::radius_keys`).
pub const KNN_RADIUS_COUNT: Kernel<RadiusCountParams> =
    Kernel::new("knn_radius_count").threads(RADIUS_BLOCK);

kernel_params! {
    /// `knn_radius_count`'s parameters.
    pub struct RadiusCountParams {
        pub dist: DevPtr<f32>,
        pub ld: u64,
        pub cols: u32,
        pub first_index: u32,
        pub radius: f32,
        pub counts: DevPtr<u32>,
    }
    entries: radius_count_entry;
}

radius_count_entry! {
    /// Counts every query row's distances within the radius; see [`count`].
    ///
    /// # Safety
    /// As for [`count`].
    fn knn_radius_count(params) {
        let RadiusCountParams {
            dist,
            ld,
            cols,
            first_index,
            radius,
            counts,
        } = params;
        let (dist, counts) = (dist.as_ptr(), counts.as_mut_ptr());
        let r = Rows {
            dist,
            ld: ld as usize,
            cols: cols as usize,
            first_index,
            radius,
        };
        unsafe { count(crate::exec::Gpu, r, counts) }
    }
}

/// Body of `knn_radius_fill`: writes `key(dist, first_index + c)` of every column `c` within the
/// radius of the block's query row `q` to `keys[at[q] ..]`, advancing `at[q]` past them (so a
/// row's neighbours can be gathered over several column ranges), in an order that depends on
/// the threads' timing.
///
/// # Safety
/// As for [`count`]; `at[q]` is the first free slot of row `q`'s range in `keys`, whose
/// remaining length is at least the row's count.
#[inline(always)]
pub unsafe fn fill<E: Exec>(x: E, rows: Rows, at: *mut u64, keys: *mut u64) {
    let (t, q) = (x.thread(), x.block());
    let row = unsafe { rows.dist.add(q * rows.ld) };
    let counter = unsafe { x.shared::<u32>().add(B) };
    if t == 0 {
        unsafe { *counter = 0 };
    }
    x.sync();
    let base = unsafe { *at.add(q) } as usize;
    let mut c = t;
    while c < rows.cols {
        let d = unsafe { *row.add(c) };
        if within(d, rows.radius) {
            let slot = unsafe { AtomicU32::from_ptr(counter) }.fetch_add(1, Ordering::Relaxed);
            let index = rows.first_index + c as u32;
            unsafe { *keys.add(base + slot as usize) = key(d, index) };
        }
        c += B;
    }
    x.sync();
    if t == 0 {
        unsafe { *at.add(q) += *counter as u64 };
    }
}

/// The `knn_radius_fill` entry point. CPU twin: `backend::cpu::knn::radius` (`CpuKnn::radius_keys`).
pub const KNN_RADIUS_FILL: Kernel<RadiusFillParams> =
    Kernel::new("knn_radius_fill").threads(RADIUS_BLOCK);

kernel_params! {
    /// `knn_radius_fill`'s parameters.
    pub struct RadiusFillParams {
        pub dist: DevPtr<f32>,
        pub ld: u64,
        pub cols: u32,
        pub first_index: u32,
        pub radius: f32,
        pub at: DevPtr<u64>,
        pub keys: DevPtr<u64>,
    }
    entries: radius_fill_entry;
}

radius_fill_entry! {
    /// Writes every query row's neighbours within the radius as keys; see [`fill`].
    ///
    /// # Safety
    /// As for [`fill`].
    fn knn_radius_fill(params) {
        let RadiusFillParams {
            dist,
            ld,
            cols,
            first_index,
            radius,
            at,
            keys,
        } = params;
        let (dist, at, keys) = (dist.as_ptr(), at.as_mut_ptr(), keys.as_mut_ptr());
        let r = Rows {
            dist,
            ld: ld as usize,
            cols: cols as usize,
            first_index,
            radius,
        };
        unsafe { fill(crate::exec::Gpu, r, at, keys) }
    }
}

#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests {
    use super::*;
    use crate::exec::emu::{P, launch};
    use crate::knn::{PairMetric, distance};

    /// Every query's keys within `radius`, written out plainly, sorted.
    fn reference(dist: &[f32], ld: usize, cols: usize, first: u32, radius: f32) -> Vec<Vec<u64>> {
        dist.chunks(ld)
            .map(|row| {
                let mut keys: Vec<u64> = (row[..cols].iter().enumerate())
                    .filter(|&(_, &d)| d <= radius)
                    .map(|(c, &d)| key(d, first + c as u32))
                    .collect();
                keys.sort_unstable();
                keys
            })
            .collect()
    }

    /// Counts, offsets and fill in the emulator, over the columns in two ranges (as a row
    /// split over column ranges is gathered), sorted per row as the host does.
    fn emulated(dist: &[f32], ld: usize, cols: usize, first: u32, radius: f32) -> Vec<Vec<u64>> {
        let rows = dist.len() / ld;
        let half = cols / 2;
        let ranges = [(0, half), (half, cols)];
        let mut counts = vec![0u32; rows];
        for &(from, to) in &ranges {
            let (dp, c) = (P(dist[from..].as_ptr().cast_mut()), P::of(&mut counts));
            let r = move || Rows {
                dist: dp.get(),
                ld,
                cols: to - from,
                first_index: first + from as u32,
                radius,
            };
            launch(rows, B, RADIUS_SHARED_BYTES, |x| unsafe {
                count(x, r(), c.get())
            });
        }
        let mut offsets = vec![0u64; rows + 1];
        for q in 0..rows {
            offsets[q + 1] = offsets[q] + counts[q] as u64;
        }
        let mut at = offsets[..rows].to_vec();
        // Slots past the total show any write out of range.
        let mut keys = vec![u64::MAX - 1; offsets[rows] as usize + 3];
        for &(from, to) in &ranges {
            let dp = P(dist[from..].as_ptr().cast_mut());
            let r = move || Rows {
                dist: dp.get(),
                ld,
                cols: to - from,
                first_index: first + from as u32,
                radius,
            };
            let (a, k) = (P::of(&mut at), P::of(&mut keys));
            launch(rows, B, RADIUS_SHARED_BYTES, |x| unsafe {
                fill(x, r(), a.get(), k.get())
            });
        }
        assert_eq!(at, offsets[1..].to_vec(), "every row filled its range");
        assert!(
            keys[offsets[rows] as usize..]
                .iter()
                .all(|&k| k == u64::MAX - 1)
        );
        (0..rows)
            .map(|q| {
                let mut row = keys[offsets[q] as usize..offsets[q + 1] as usize].to_vec();
                row.sort_unstable();
                row
            })
            .collect()
    }

    /// Distances of `m` queries to `n` training rows of `d` dimensions on an integer grid
    /// (duplicates and exact ties), as the kernels compute them.
    fn grid_distances(m: usize, n: usize, d: usize, metric: PairMetric, ld: usize) -> Vec<f32> {
        let train: Vec<f32> = (0..n * d).map(|i| ((i * 7) % 5) as f32).collect();
        let queries: Vec<f32> = (0..m * d).map(|i| ((i * 3) % 4) as f32).collect();
        let mut dist = vec![f32::NAN; m * ld];
        for q in 0..m {
            for j in 0..n {
                let (x, y) = (&queries[q * d..(q + 1) * d], &train[j * d..(j + 1) * d]);
                dist[q * ld + j] = distance(metric, x, y);
            }
        }
        dist
    }

    #[test]
    fn emulated_count_and_fill_find_every_row_within_the_radius() {
        for (m, n, d, metric) in [
            (3, 1, 1, PairMetric::L1),
            (4, 257, 1, PairMetric::SqEuclidean),
            (2, 600, 3, PairMetric::L1),
            (3, 511, 2, PairMetric::Euclidean),
            (2, 100, 2, PairMetric::InnerProduct),
        ] {
            let ld = n + 3; // padding columns hold NaN, never read
            let dist = grid_distances(m, n, d, metric, ld);
            // Radius 0, an attained distance (ties at exactly the radius), one between
            // attained distances, everything, nothing, and a negative one (inner product).
            for radius in [0.0, 1.0, 2.5, 4.0, f32::INFINITY, -3.0, -f32::INFINITY] {
                let want = reference(&dist, ld, n, 9, radius);
                let got = emulated(&dist, ld, n, 9, radius);
                assert_eq!(got, want, "m={m} n={n} d={d} {metric:?} radius {radius}");
            }
        }
    }

    #[test]
    fn nan_distances_are_never_within() {
        let dist = [f32::NAN, 1.0, f32::NAN, 0.5];
        let got = emulated(&dist, 4, 4, 0, f32::INFINITY);
        assert_eq!(got, vec![vec![key(0.5, 3), key(1.0, 1)]]);
    }
}
