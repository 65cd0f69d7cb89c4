//! kNN votes: per-query class histograms in shared memory.
//!
//! A block handles `per_block` queries. Every (query, neighbour) pair adds its integer weight
//! ([`vote_weight`]) to its class with a shared-memory atomic and lowers the class's nearest rank
//! with an atomic minimum; integer sums do not depend on the order of the atomics. Then one
//! thread per query picks the class with the most votes ([`vote_winner`]), ties going by the
//! [`VoteRule`] to the class whose nearest member ranks first or to the smallest class, and the
//! block writes the probabilities.

use crate::exec::Exec;
use crate::knn::{VoteRule, key_distance, key_index, vote_share, vote_weight, vote_winner};
use crate::launch::{DEFAULT_SHARED_BYTES, Kernel};
use crate::params::DevPtr;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Arguments of the vote kernel: `rows` queries whose `k` neighbour keys (ascending) are rows of
/// `best`; `labels` holds the class (`< classes`) of every training row and `row_weights`, when
/// not null, its sample weight over the largest one. The winning class goes to `pred` and, when
/// `proba` is not null, `rows × classes` shares of the vote. `rule` weighs votes by distance
/// with the fixed-point `scale` (see [`vote_weight`]) or not, and says who wins a tie. The histograms live in dynamic shared
/// memory, or in `scratch` (`vote_block_bytes(per_block, classes)` bytes per block) when it is
/// not null.
#[derive(Clone, Copy)]
pub struct Vote {
    pub best: *const u64,
    pub rows: usize,
    pub k: usize,
    pub labels: *const u32,
    pub row_weights: *const f32,
    pub classes: usize,
    pub rule: VoteRule,
    pub scale: f32,
    pub per_block: usize,
    pub pred: *mut u32,
    pub proba: *mut f32,
    pub scratch: *mut u64,
}

/// The `knn_vote` entry point. CPU twin: `knn::classify::vote_one`.
pub const KNN_VOTE: Kernel<VoteParams> = Kernel::new("knn_vote").threads(VOTE_BLOCK);

kernel_params! {
    /// `knn_vote`'s parameters.
    pub struct VoteParams {
        pub best: DevPtr<u64>,
        pub rows: u32,
        pub k: u32,
        pub labels: DevPtr<u32>,
        pub row_weights: DevPtr<f32>,
        pub classes: u32,
        pub rule: u32,
        pub scale: f32,
        pub per_block: u32,
        pub pred: DevPtr<u32>,
        pub proba: DevPtr<f32>,
        pub scratch: DevPtr<u64>,
    }
    entries: vote_entry;
}

/// Threads of a vote block.
pub const VOTE_BLOCK: u32 = 128;
/// Most queries one vote block handles.
pub const VOTE_MAX_QUERIES: usize = 32;

/// Bytes of vote scratch for `queries` queries and `classes` classes: per query a u64 total, per
/// (query, class) a u64 vote sum and the u32 rank of the class's nearest member; a multiple of 8.
pub const fn vote_block_bytes(queries: usize, classes: usize) -> usize {
    (8 * queries + 12 * queries * classes).div_ceil(8) * 8
}

/// Queries per `knn_vote` block for `rows` queries of `classes` classes: as many as fit the
/// default shared memory, at most `VOTE_MAX_QUERIES`. When even one query does not fit, 1, and
/// the histograms go to global scratch instead (`vote_block_bytes(1, classes)` per block).
pub const fn vote_queries_per_block(rows: usize, classes: usize) -> usize {
    let mut per_block = if rows < VOTE_MAX_QUERIES {
        rows
    } else {
        VOTE_MAX_QUERIES
    };
    if per_block == 0 {
        per_block = 1;
    }
    while per_block > 1 && vote_block_bytes(per_block, classes) > DEFAULT_SHARED_BYTES {
        per_block -= 1;
    }
    per_block
}

/// Blocks of `knn_vote` for `rows` queries, `per_block` per block.
pub const fn vote_grid(rows: usize, per_block: usize) -> usize {
    rows.div_ceil(per_block)
}

vote_entry! {
    /// The votes of a batch of queries; see [`Vote`] (`rule`: [`VoteRule::flags`]).
    ///
    /// # Safety
    /// `ceil(rows / per_block)` blocks of `VOTE_BLOCK` threads; `vote_block_bytes(per_block,
    /// classes)` bytes of dynamic shared memory unless `scratch` is given; sizes as named.
    fn knn_vote(params) {
        let VoteParams {
            best,
            rows,
            k,
            labels,
            row_weights,
            classes,
            rule,
            scale,
            per_block,
            pred,
            proba,
            scratch,
        } = params;
        let (best, labels, row_weights, pred, proba, scratch) = (
            best.as_ptr(),
            labels.as_ptr(),
            row_weights.as_ptr(),
            pred.as_mut_ptr(),
            proba.as_mut_ptr(),
            scratch.as_mut_ptr(),
        );
        let v = Vote {
            best,
            rows: rows as usize,
            k: k as usize,
            labels,
            row_weights,
            classes: classes as usize,
            rule: VoteRule::from_flags(rule),
            scale,
            per_block: per_block as usize,
            pred,
            proba,
            scratch,
        };
        unsafe { vote(crate::exec::Gpu, v) }
    }
}

/// The body of `knn_vote`.
///
/// # Safety
/// As for `knn_vote`.
#[inline(always)]
pub unsafe fn vote<E: Exec>(x: E, v: Vote) {
    let t = x.thread();
    let threads = VOTE_BLOCK as usize;
    let (rows, k, c) = (v.rows, v.k.max(1), v.classes.max(1));
    let q_n = v.per_block.max(1);
    let q0 = x.block() * q_n;
    let base = if v.scratch.is_null() {
        x.shared::<u64>()
    } else {
        unsafe { v.scratch.add(x.block() * vote_block_bytes(q_n, c) / 8) }
    };
    let totals = base;
    let votes = unsafe { base.add(q_n) };
    let first = unsafe { votes.add(q_n * c) }.cast::<u32>();

    let mut e = t;
    while e < q_n * c {
        unsafe {
            *votes.add(e) = 0;
            *first.add(e) = u32::MAX;
        }
        e += threads;
    }
    x.sync();

    let mut e = t;
    while e < q_n * k {
        let (q, r) = (e / k, e % k);
        let qi = q0 + q;
        if qi < rows {
            let row = unsafe { v.best.add(qi * k) };
            let kk = unsafe { *row.add(r) };
            let nearest = key_distance(unsafe { *row });
            let at = key_index(kk) as usize;
            let row_weight = if v.row_weights.is_null() {
                None
            } else {
                Some(unsafe { *v.row_weights.add(at) })
            };
            let w = vote_weight(
                v.rule.weighted,
                nearest,
                key_distance(kk),
                v.scale,
                row_weight,
            );
            let class = unsafe { *v.labels.add(at) } as usize;
            if class < c {
                unsafe {
                    AtomicU64::from_ptr(votes.add(q * c + class)).fetch_add(w, Ordering::Relaxed);
                    AtomicU32::from_ptr(first.add(q * c + class))
                        .fetch_min(r as u32, Ordering::Relaxed);
                }
            }
        }
        e += threads;
    }
    x.sync();

    let mut q = t;
    while q < q_n {
        let qi = q0 + q;
        if qi < rows {
            let (best_class, total) = vote_winner(c, v.rule, |class| unsafe {
                (*votes.add(q * c + class), *first.add(q * c + class))
            });
            unsafe {
                *v.pred.add(qi) = best_class;
                *totals.add(q) = total;
            }
        }
        q += threads;
    }
    x.sync();

    if !v.proba.is_null() {
        let mut e = t;
        while e < q_n * c {
            let (q, class) = (e / c, e % c);
            let qi = q0 + q;
            if qi < rows {
                unsafe {
                    *v.proba.add(qi * c + class) = vote_share(*votes.add(e), *totals.add(q));
                }
            }
            e += threads;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::emu::{P, launch};
    use crate::fixed::pow2_f32;
    use crate::knn::{key, vote_better, vote_scale_exponent};

    /// The vote of one query, written out plainly.
    fn reference(
        keys: &[u64],
        labels: &[u32],
        row_weights: Option<&[f32]>,
        c: usize,
        rule: VoteRule,
        scale: f32,
    ) -> (u32, Vec<f32>) {
        let mut votes = vec![0u64; c];
        let mut first = vec![u32::MAX; c];
        for (r, &kk) in keys.iter().enumerate() {
            let at = key_index(kk) as usize;
            let cl = labels[at] as usize;
            let rw = row_weights.map(|w| w[at]);
            let (nearest, dist) = (key_distance(keys[0]), key_distance(kk));
            votes[cl] += vote_weight(rule.weighted, nearest, dist, scale, rw);
            first[cl] = first[cl].min(r as u32);
        }
        let total: u64 = votes.iter().sum();
        let shares: Vec<f32> = votes.iter().map(|&v| vote_share(v, total)).collect();
        let mut best = 0;
        if rule.smallest_label {
            // scikit-learn's rule: the first class with the largest share.
            for cl in 1..c {
                if shares[cl] > shares[best] {
                    best = cl;
                }
            }
        } else {
            for cl in 1..c {
                if vote_better(votes[cl], first[cl], votes[best], first[best]) {
                    best = cl;
                }
            }
            // Class 0 with no member loses to any class that has one.
            if first[best] == u32::MAX {
                best = labels[key_index(keys[0]) as usize] as usize;
            }
        }
        (best as u32, shares)
    }

    fn check(rows: usize, k: usize, c: usize, per_block: usize, global: bool, rule: VoteRule) {
        check_weights(rows, k, c, per_block, global, rule, None);
        let n = 3 * k + 5;
        // Sample weights over the largest: zeros, and values that do not divide evenly.
        let w: Vec<f32> = (0..n).map(|i| (i % 5) as f32 / 4.0 * 0.3).collect();
        let max = w.iter().fold(0f32, |m, &v| m.max(v));
        let w: Vec<f32> = w.iter().map(|v| v / max).collect();
        check_weights(rows, k, c, per_block, global, rule, Some(&w));
    }

    fn check_weights(
        rows: usize,
        k: usize,
        c: usize,
        per_block: usize,
        global: bool,
        rule: VoteRule,
        row_weights: Option<&[f32]>,
    ) {
        let n = 3 * k + 5;
        let labels: Vec<u32> = (0..n).map(|i| ((i * 7) % c) as u32).collect();
        // Sorted keys per row with ties and a zero distance in every third row.
        let mut best = Vec::new();
        for r in 0..rows {
            let mut keys: Vec<u64> = (0..n)
                .map(|j| {
                    let d = if r % 3 == 0 && j == r % n {
                        0.0
                    } else {
                        ((j * 13 + r * 5) % 11) as f32 * 0.25 + 0.5
                    };
                    key(d, j as u32)
                })
                .collect();
            keys.sort_unstable();
            best.extend_from_slice(&keys[..k]);
        }
        let scale = pow2_f32(vote_scale_exponent(k));
        let grid = rows.div_ceil(per_block);
        let mut pred = vec![u32::MAX; rows];
        let mut proba = vec![f32::NAN; rows * c];
        let mut scratch = vec![0x5a5au64; grid * vote_block_bytes(per_block, c) / 8];
        let v = Vote {
            best: best.as_ptr(),
            rows,
            k,
            labels: labels.as_ptr(),
            row_weights: row_weights.map_or(core::ptr::null(), |w| w.as_ptr()),
            classes: c,
            rule,
            scale,
            per_block,
            pred: pred.as_mut_ptr(),
            proba: proba.as_mut_ptr(),
            scratch: if global {
                scratch.as_mut_ptr()
            } else {
                core::ptr::null_mut()
            },
        };
        let v = P(&v as *const Vote as *mut Vote);
        let shared = if global {
            0
        } else {
            vote_block_bytes(per_block, c)
        };
        launch(grid, VOTE_BLOCK as usize, shared, |x| unsafe {
            vote(x, *v.get())
        });
        for r in 0..rows {
            let keys = &best[r * k..(r + 1) * k];
            let (want, shares) = reference(keys, &labels, row_weights, c, rule, scale);
            let case = format!(
                "rows={rows} k={k} c={c} per_block={per_block} global={global} {rule:?} \
                 sample weights {} row {r}",
                row_weights.is_some()
            );
            assert_eq!(pred[r], want, "{case}");
            assert_eq!(&proba[r * c..(r + 1) * c], &shares[..], "{case}");
        }
    }

    #[test]
    fn queries_per_block_fit_the_shared_memory() {
        assert!(vote_block_bytes(1, 1) >= 20);
        assert_eq!(vote_queries_per_block(0, 3), 1);
        assert_eq!(vote_queries_per_block(5, 3), 5);
        assert_eq!(vote_queries_per_block(1000, 3), VOTE_MAX_QUERIES);
        let (per_block, classes) = (vote_queries_per_block(1000, 500), 500);
        assert!(per_block > 1 && vote_block_bytes(per_block, classes) <= DEFAULT_SHARED_BYTES);
        assert!(vote_block_bytes(per_block + 1, classes) > DEFAULT_SHARED_BYTES);
        // Too many classes for one query in shared memory: one per block, histograms in scratch.
        assert_eq!(vote_queries_per_block(1000, 1 << 20), 1);
        assert_eq!(vote_grid(65, 32), 3);
    }

    #[test]
    fn emulated_votes_match_the_reference() {
        for flags in 0..4 {
            let rule = VoteRule::from_flags(flags);
            check(5, 1, 3, 2, false, rule);
            check(37, 9, 4, VOTE_MAX_QUERIES, false, rule);
            check(10, 20, 3, 3, true, rule);
            check(4, 6, 13, 1, false, rule);
            check(33, 2, 2, 4, false, rule);
            check(9, 4, 5, 2, true, rule);
        }
    }

    /// Every neighbour at the same distance, labels falling so that the nearest-ranked tied
    /// class is the larger one: the two rules disagree, the kernel follows each exactly.
    #[test]
    fn emulated_ties_follow_the_rule() {
        let (rows, k, c) = (6, 4, 3);
        // Training rows 0..8 labelled 2, 1, 0, 2, 1, 0, ...: with k = 4 at equal distances the
        // neighbours 0..3 give classes 2, 1, 0, 2 (2 wins); rows r shift the window.
        let labels: Vec<u32> = (0..12).map(|i| (2 - i % 3) as u32).collect();
        let mut best = Vec::new();
        for r in 0..rows {
            // Two pairs of tied classes: neighbours r+1, r+2, r+4, r+5 at distance 1.5.
            for j in [r + 1, r + 2, r + 4, r + 5] {
                best.push(key(1.5, j as u32));
            }
        }
        let run = |rule: VoteRule| {
            let mut pred = vec![u32::MAX; rows];
            let mut proba = vec![f32::NAN; rows * c];
            let v = Vote {
                best: best.as_ptr(),
                rows,
                k,
                labels: labels.as_ptr(),
                row_weights: core::ptr::null(),
                classes: c,
                rule,
                scale: pow2_f32(vote_scale_exponent(k)),
                per_block: 2,
                pred: pred.as_mut_ptr(),
                proba: proba.as_mut_ptr(),
                scratch: core::ptr::null_mut(),
            };
            let v = P(&v as *const Vote as *mut Vote);
            launch(3, VOTE_BLOCK as usize, vote_block_bytes(2, c), |x| unsafe {
                vote(x, *v.get())
            });
            (pred, proba)
        };
        for weighted in [false, true] {
            let nearest = run(VoteRule {
                weighted,
                smallest_label: false,
            });
            let smallest = run(VoteRule {
                weighted,
                smallest_label: true,
            });
            assert_eq!(
                nearest.1, smallest.1,
                "the shares do not depend on the tie rule"
            );
            for r in 0..rows {
                let classes: Vec<u32> = [r + 1, r + 2, r + 4, r + 5]
                    .iter()
                    .map(|&j| labels[j])
                    .collect();
                let (a, b) = (classes[0], classes[1]);
                assert_eq!(nearest.0[r], a, "row {r}: the nearest-ranked class");
                assert_eq!(smallest.0[r], a.min(b), "row {r}: the smallest tied class");
            }
            assert_ne!(nearest.0, smallest.0);
        }
    }
}
