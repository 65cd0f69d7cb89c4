//! kNN votes: per-query class histograms in shared memory.
//!
//! A block handles `per_block` queries. Every (query, neighbour) pair adds its integer weight
//! ([`vote_weight`]) to its class with a shared-memory atomic and lowers the class's nearest rank
//! with an atomic minimum; integer sums do not depend on the order of the atomics. Then one
//! thread per query picks the class with the most votes, ties going to the class whose nearest
//! member ranks first ([`vote_better`]), and the block writes the probabilities.

use crate::gpu::{self, shared, sync_threads};
use crate::knn::{
    VOTE_BLOCK, key_distance, key_index, vote_better, vote_block_bytes, vote_share, vote_weight,
};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Votes of `rows` queries whose `k` neighbour keys (sorted) are rows of `best`; `labels` holds
/// the class (`< classes`) of every training point. Writes the winning class to `pred` and, when
/// `proba` is not null, `rows × classes` shares of the vote. `weighted` ≠ 0 weighs votes by
/// distance with the fixed-point `scale`. The histograms live in dynamic shared memory, or in
/// `scratch` (`vote_block_bytes(per_block, classes)` bytes per block) when it is not null.
///
/// # Safety
/// `ceil(rows / per_block)` blocks of `VOTE_BLOCK` threads; `vote_block_bytes(per_block,
/// classes)` bytes of dynamic shared memory unless `scratch` is given; sizes as named.
#[unsafe(no_mangle)]
pub unsafe extern "gpu-kernel" fn knn_vote(
    best: *const u64,
    rows: u32,
    k: u32,
    labels: *const u32,
    classes: u32,
    weighted: u32,
    scale: f32,
    per_block: u32,
    pred: *mut u32,
    proba: *mut f32,
    scratch: *mut u64,
) {
    let t = gpu::thread();
    let threads = VOTE_BLOCK as usize;
    let (rows, k, c) = (
        rows as usize,
        (k as usize).max(1),
        (classes as usize).max(1),
    );
    let q_n = (per_block as usize).max(1);
    let q0 = gpu::block() * q_n;
    let base = if scratch.is_null() {
        shared::<u64>()
    } else {
        unsafe { scratch.add(gpu::block() * vote_block_bytes(q_n, c) / 8) }
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
    sync_threads();

    let weighted = weighted != 0;
    let mut e = t;
    while e < q_n * k {
        let (q, r) = (e / k, e % k);
        let qi = q0 + q;
        if qi < rows {
            let row = unsafe { best.add(qi * k) };
            let kk = unsafe { *row.add(r) };
            let nearest = key_distance(unsafe { *row });
            let w = vote_weight(weighted, nearest, key_distance(kk), scale);
            let class = unsafe { *labels.add(key_index(kk) as usize) } as usize;
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
    sync_threads();

    let mut q = t;
    while q < q_n {
        let qi = q0 + q;
        if qi < rows {
            let (mut best_class, mut best_votes, mut best_first) = (0u32, 0u64, u32::MAX);
            let mut total = 0u64;
            for class in 0..c {
                let (v, f) = unsafe { (*votes.add(q * c + class), *first.add(q * c + class)) };
                total += v;
                if vote_better(v, f, best_votes, best_first) {
                    best_class = class as u32;
                    best_votes = v;
                    best_first = f;
                }
            }
            unsafe {
                *pred.add(qi) = best_class;
                *totals.add(q) = total;
            }
        }
        q += threads;
    }
    sync_threads();

    if !proba.is_null() {
        let mut e = t;
        while e < q_n * c {
            let (q, class) = (e / c, e % c);
            let qi = q0 + q;
            if qi < rows {
                unsafe {
                    *proba.add(qi * c + class) = vote_share(*votes.add(e), *totals.add(q));
                }
            }
            e += threads;
        }
    }
}
