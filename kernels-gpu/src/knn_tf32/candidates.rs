//! `knn_tf32_candidates`: step 4 of [`super`] from approximations the first scan stored, instead
//! of a second tensor-core scan. Where a query's row of approximations is small enough to keep
//! (see the host's plan), reading it back costs a fraction of computing it again.
//!
//! A block owns `CANDIDATE_COLS` training rows (four consecutive per thread, whose norms and
//! roots it loads once) and `CANDIDATE_ROWS` queries. Per query the block appends its rows that
//! [`may_be_near`] the threshold with one global atomic: each thread reserves its places with a
//! shared-memory atomic, thread 0 the block's run of the query's list. The list's order is free
//! (the re-rank's keys are distinct), so the answer does not depend on it.

use super::{TF32_CAP, error_bound, may_be_near};
use crate::exec::Exec;
use crate::launch::Kernel;
use crate::params::DevPtr;
use core::sync::atomic::{AtomicU32, Ordering};

/// Threads of a `knn_tf32_candidates` block.
pub const CANDIDATE_BLOCK: u32 = 256;
/// Training rows per block: four per thread.
pub const CANDIDATE_COLS: usize = 4 * CANDIDATE_BLOCK as usize;
/// Query rows per block (the training rows' norms and roots are loaded once for all of them).
pub const CANDIDATE_ROWS: usize = 8;
/// Dynamic shared memory of a block: the block's count and its place in the list.
pub const CANDIDATE_SHARED_BYTES: usize = 8;

/// The `knn_tf32_candidates` entry point. CPU twin: `backend::cpu::knn::CpuKnn::nearest` (the
/// exact search, whose answer the prefilter must give).
pub const KNN_TF32_CANDIDATES: Kernel<CandidatesParams> =
    Kernel::new("knn_tf32_candidates").threads(CANDIDATE_BLOCK);

kernel_params! {
    /// `knn_tf32_candidates`'s parameters (see [`Stored`]).
    pub struct CandidatesParams {
        pub approx: DevPtr<f32>,
        pub lda: u64,
        pub rows: u32,
        pub n: u32,
        pub q_norms: DevPtr<f32>,
        pub x_norms: DevPtr<f32>,
        pub x_roots: DevPtr<f32>,
        pub t_sq: DevPtr<f32>,
        pub c1: f32,
        pub counts: DevPtr<u32>,
        pub cand: DevPtr<u32>,
    }
    entries: candidates_entry;
}

/// Blocks of `knn_tf32_candidates` for `rows` queries and `n` training rows.
pub const fn candidates_grid(rows: usize, n: usize) -> usize {
    n.div_ceil(CANDIDATE_COLS) * rows.div_ceil(CANDIDATE_ROWS)
}

/// Row stride of the stored approximations for `n` training rows: a multiple of 4 (16-byte rows
/// for the vector loads here, 8-byte pairs for the scan's stores).
pub const fn approx_stride(n: usize) -> usize {
    n.next_multiple_of(4)
}

/// Arguments of `knn_tf32_candidates`.
#[derive(Clone, Copy)]
pub struct Stored {
    /// `rows × lda` approximations `A` of the first scan ([`super::approx_sq`]).
    pub approx: *const f32,
    pub lda: usize,
    pub rows: usize,
    pub n: usize,
    pub q_norms: *const f32,
    pub x_norms: *const f32,
    /// `sqrt(x_norms[j])`.
    pub x_roots: *const f32,
    /// Per query: the squared threshold of step 3.
    pub t_sq: *const f32,
    /// [`super::bound_coefficient`] of the dimension.
    pub c1: f32,
    /// Per query: the number of candidates (past `TF32_CAP` only counted).
    pub counts: *mut u32,
    /// `rows × TF32_CAP` candidate indices.
    pub cand: *mut u32,
}

/// Body of `knn_tf32_candidates` (see the module): block `b` takes training rows
/// `(b % col_blocks)·CANDIDATE_COLS ..` and queries `(b / col_blocks)·CANDIDATE_ROWS ..`.
///
/// # Safety
/// `CANDIDATE_BLOCK` threads, `CANDIDATE_SHARED_BYTES` of shared memory, `lda` as
/// [`approx_stride`] and `approx` 16-byte aligned; pointers valid for the sizes.
#[inline(always)]
pub unsafe fn candidates<E: Exec>(x: E, a: Stored) {
    #[repr(C, align(16))]
    #[derive(Clone, Copy)]
    struct V4([f32; 4]);
    let t = x.thread();
    let col_blocks = a.n.div_ceil(CANDIDATE_COLS);
    let b = x.block();
    let (j0, r0) = (
        (b % col_blocks) * CANDIDATE_COLS + 4 * t,
        (b / col_blocks) * CANDIDATE_ROWS,
    );
    let (mut nx, mut sx) = ([0f32; 4], [0f32; 4]);
    for u in 0..4 {
        // Rows past `n` read the last one's (never taken).
        let j = (j0 + u).min(a.n - 1);
        nx[u] = unsafe { *a.x_norms.add(j) };
        sx[u] = unsafe { *a.x_roots.add(j) };
    }
    let shared = x.shared::<u32>();
    let (block_count, block_place) = (shared, unsafe { shared.add(1) });
    for row in r0..a.rows.min(r0 + CANDIDATE_ROWS) {
        if t == 0 {
            unsafe { *block_count = 0 };
        }
        x.sync();
        let nq = unsafe { *a.q_norms.add(row) };
        let (c1q, tsq) = (a.c1 * crate::math::sqrt(nq), unsafe { *a.t_sq.add(row) });
        // Padding past `n` (inside `lda`) holds values too, never taken.
        let v = if j0 < a.lda {
            unsafe { (*a.approx.add(row * a.lda + j0).cast::<V4>()).0 }
        } else {
            [0.0; 4]
        };
        let mut near = [false; 4];
        let mut mine = 0;
        for u in 0..4 {
            let bound = error_bound(c1q, sx[u], nq, nx[u]);
            near[u] = j0 + u < a.n && may_be_near(v[u], bound, tsq);
            mine += u32::from(near[u]);
        }
        let local = if mine > 0 {
            unsafe { AtomicU32::from_ptr(block_count) }.fetch_add(mine, Ordering::Relaxed)
        } else {
            0
        };
        x.sync();
        if t == 0 {
            let total = unsafe { *block_count };
            let place = if total > 0 {
                unsafe { AtomicU32::from_ptr(a.counts.add(row)) }
                    .fetch_add(total, Ordering::Relaxed)
            } else {
                0
            };
            unsafe { *block_place = place };
        }
        x.sync();
        let mut pos = (unsafe { *block_place } + local) as usize;
        for (u, &near) in near.iter().enumerate() {
            if near {
                if pos < TF32_CAP {
                    unsafe { *a.cand.add(row * TF32_CAP + pos) = (j0 + u) as u32 };
                }
                pos += 1;
            }
        }
    }
}

#[cfg(target_arch = "nvptx64")]
mod entry {
    use super::*;

    candidates_entry! {
        /// Step 4 from stored approximations: see [`candidates`].
        ///
        /// # Safety
        /// [`candidates_grid`] blocks of `CANDIDATE_BLOCK` threads, `CANDIDATE_SHARED_BYTES` of
        /// shared memory; `approx` holds `rows × lda` values, `cand` `rows × TF32_CAP`.
        fn knn_tf32_candidates(params) {
            let CandidatesParams {
                approx,
                lda,
                rows,
                n,
                q_norms,
                x_norms,
                x_roots,
                t_sq,
                c1,
                counts,
                cand,
            } = params;
            let (approx, q_norms, x_norms, x_roots, t_sq, counts, cand) = (
                approx.as_ptr(),
                q_norms.as_ptr(),
                x_norms.as_ptr(),
                x_roots.as_ptr(),
                t_sq.as_ptr(),
                counts.as_mut_ptr(),
                cand.as_mut_ptr(),
            );
            let a = Stored {
                approx,
                lda: lda as usize,
                rows: rows as usize,
                n: (n as usize).max(1),
                q_norms,
                x_norms,
                x_roots,
                t_sq,
                c1,
                counts,
                cand,
            };
            unsafe { candidates(crate::exec::Gpu, a) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::bound_coefficient;
    use super::*;
    use crate::exec::emu::{P, launch};

    /// A small deterministic generator (xorshift).
    struct Rng(u64);
    impl Rng {
        fn unit(&mut self) -> f32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 40) as f32 / (1u64 << 24) as f32
        }
    }

    /// The candidates of every query, as the formula picks them from the approximations.
    fn want(
        a: &Stored,
        approx: &[f32],
        qn: &[f32],
        xn: &[f32],
        xr: &[f32],
        t: &[f32],
    ) -> Vec<Vec<u32>> {
        (0..a.rows)
            .map(|i| {
                let c1q = a.c1 * crate::math::sqrt(qn[i]);
                (0..a.n)
                    .filter(|&j| {
                        let e = error_bound(c1q, xr[j], qn[i], xn[j]);
                        may_be_near(approx[i * a.lda + j], e, t[i])
                    })
                    .map(|j| j as u32)
                    .collect()
            })
            .collect()
    }

    /// Awkward shapes: n below one thread's four rows, n not a multiple of the block's columns
    /// (nor of 4), queries not a multiple of the block's rows; thresholds that take none, some,
    /// all (past `TF32_CAP`: counted, not written) of the rows; NaN approximations (kept).
    #[test]
    fn emulated_candidates() {
        for (rows, n) in [(1usize, 1usize), (3, 3), (11, 2501), (9, 5000)] {
            let mut rng = Rng(0x9e37_79b9 ^ (rows * 7919 + n) as u64);
            let lda = approx_stride(n);
            let qn: Vec<f32> = (0..rows).map(|_| 1.0 + 3.0 * rng.unit()).collect();
            let xn: Vec<f32> = (0..n).map(|_| 1.0 + 3.0 * rng.unit()).collect();
            let xr: Vec<f32> = xn.iter().map(|&v| crate::math::sqrt(v)).collect();
            let mut approx: Vec<f32> = (0..rows * lda).map(|_| 8.0 * rng.unit()).collect();
            approx[lda - 1] = f32::NAN; // padding when n % 4 ≠ 0, else the last row
            approx[0] = f32::NAN;
            let t_sq: Vec<f32> = (0..rows)
                .map(|i| match i % 4 {
                    0 => -1.0,
                    1 => f32::INFINITY,
                    _ => 8.0 * rng.unit(),
                })
                .collect();
            let mut counts = vec![0u32; rows];
            let mut cand = vec![u32::MAX; rows * TF32_CAP];
            let a = Stored {
                approx: approx.as_ptr(),
                lda,
                rows,
                n,
                q_norms: qn.as_ptr(),
                x_norms: xn.as_ptr(),
                x_roots: xr.as_ptr(),
                t_sq: t_sq.as_ptr(),
                c1: bound_coefficient(64),
                counts: counts.as_mut_ptr(),
                cand: cand.as_mut_ptr(),
            };
            let pa = P(&a as *const Stored as *mut Stored);
            let grid = candidates_grid(rows, n);
            launch(
                grid,
                CANDIDATE_BLOCK as usize,
                CANDIDATE_SHARED_BYTES,
                |e| unsafe { candidates(e, *pa.get()) },
            );
            for (i, want) in want(&a, &approx, &qn, &xn, &xr, &t_sq).iter().enumerate() {
                let case = format!("rows {rows} n {n} query {i}");
                assert_eq!(counts[i] as usize, want.len(), "{case}: count");
                let mut got = cand[i * TF32_CAP..][..want.len().min(TF32_CAP)].to_vec();
                got.sort_unstable();
                if want.len() <= TF32_CAP {
                    assert_eq!(&got, want, "{case}");
                } else {
                    // Some TF32_CAP of them, each once.
                    got.dedup();
                    assert_eq!(got.len(), TF32_CAP, "{case}");
                    assert!(got.iter().all(|j| want.binary_search(j).is_ok()), "{case}");
                }
            }
            // Query 0 takes nothing but its NaNs (the padding's is never a row).
            assert_eq!(
                counts[0],
                1 + u32::from(lda == n),
                "rows {rows} n {n}: NaNs"
            );
        }
    }
}
