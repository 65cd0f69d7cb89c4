//! Radix selection of the k smallest keys in shared memory, for one block: the selection that
//! scales with k. No network sorts the candidates; passes of 8 bits, most significant first,
//! histogram the keys that still share the boundary's prefix until the prefix of the k-th
//! smallest key is known, then the keys below it (and as many equal to it as k needs) move to
//! the front. Keys are unique but for `NO_KEY` padding, which the equal-prefix count handles.
//!
//! A pass is a histogram with shared atomics and a 256-bin prefix sum. Unique 64-bit keys of
//! `float` distances usually settle in two to four passes. The passes start at the highest bit
//! where the smallest and the largest key differ: distances of one query often share their sign,
//! exponent and first mantissa bits, and a pass over one bin would serialise every thread's
//! atomic on it.

use crate::exec::Exec;
use crate::knn::SELECT_BLOCK;
use core::sync::atomic::{AtomicU32, Ordering};

const B: usize = SELECT_BLOCK as usize;
/// Bits of a digit.
const DIGIT_BITS: u32 = 8;
/// Bins of a pass's histogram: one a thread.
const BINS: usize = 1 << DIGIT_BITS;
const _: () = assert!(BINS == B);

/// `u32` words of shared scratch that [`smallest`] needs: the bins and four of state.
pub const RADIX_SCRATCH_WORDS: usize = BINS + 4;

/// Writes the `k` smallest of `keys[0..total]` to `out[0..k]`, in no particular order
/// (`1 ≤ k ≤ total`). Every thread of the block calls it; it ends synchronised. The keys are
/// read from shared memory on every pass rather than held in registers, so that the kernels
/// around it keep their occupancy.
///
/// # Safety
/// `SELECT_BLOCK` threads; `keys` holds `total` keys and `out` `k` keys in shared memory, apart;
/// `scratch` [`RADIX_SCRATCH_WORDS`] words of shared memory, 8-byte aligned.
#[inline(always)]
pub unsafe fn smallest<E: Exec>(
    x: E,
    keys: *const u64,
    total: usize,
    k: usize,
    scratch: *mut u32,
    out: *mut u64,
) {
    let t = x.thread();
    let bins = scratch;
    // [digit, rank still wanted among the keys of the prefix, whether all of them are wanted,
    //  keys taken below the prefix]
    let state = unsafe { scratch.add(BINS) };
    // Every key shares the leading bits on which the smallest and the largest agree.
    let (lo, hi) = unsafe { min_max(x, keys, total, scratch.cast()) };
    let mut shift = (u64::BITS - (lo ^ hi).leading_zeros()).max(DIGIT_BITS);
    let mut mask = u64::MAX.checked_shl(shift).unwrap_or(0);
    let mut prefix = lo & mask;
    let mut want = k as u32;
    let mut all_equal_wanted = false;
    while shift > 0 && !all_equal_wanted {
        // Past a start that is not a whole digit from the bottom, the last digit overlaps bits
        // already known: they are the prefix's in every key it counts.
        shift = shift.saturating_sub(DIGIT_BITS);
        unsafe { *bins.add(t) = 0 };
        x.sync();
        let mut e = t;
        while e < total {
            let v = unsafe { *keys.add(e) };
            if v & mask == prefix {
                let bin = ((v >> shift) as usize) & (BINS - 1);
                unsafe { AtomicU32::from_ptr(bins.add(bin)) }.fetch_add(1, Ordering::Relaxed);
            }
            e += B;
        }
        x.sync();
        let own = unsafe { *bins.add(t) };
        unsafe { crate::exec::inclusive_scan_u32(x, bins, BINS) };
        let below = unsafe { *bins.add(t) } - own;
        if below < want && want <= below + own {
            unsafe {
                *state = t as u32;
                *state.add(1) = want - below;
                *state.add(2) = u32::from(own == want - below);
                *state.add(3) = 0;
            }
        }
        x.sync();
        let digit = unsafe { *state } as u64;
        want = unsafe { *state.add(1) };
        all_equal_wanted = unsafe { *state.add(2) } != 0;
        prefix |= digit << shift;
        mask |= ((BINS - 1) as u64) << shift;
        // Everyone has read the state before a next pass's winner writes it.
        x.sync();
    }
    // Keys below the prefix: k − want of them, to the front; then `want` keys of the prefix
    // (all of them, or equal `NO_KEY` padding of which any will do) after them.
    let below_count = k - want as usize;
    let taken = unsafe { AtomicU32::from_ptr(state.add(3)) };
    let equal_taken = unsafe { AtomicU32::from_ptr(state.add(2)) };
    if t == 0 {
        equal_taken.store(0, Ordering::Relaxed);
    }
    x.sync();
    let mut e = t;
    while e < total {
        let v = unsafe { *keys.add(e) };
        let p = v & mask;
        if p < prefix {
            let at = taken.fetch_add(1, Ordering::Relaxed) as usize;
            unsafe { *out.add(at) = v };
        } else if p == prefix {
            let at = equal_taken.fetch_add(1, Ordering::Relaxed);
            if at < want {
                unsafe { *out.add(below_count + at as usize) = v };
            }
        }
        e += B;
    }
    x.sync();
}

/// `u32` words of scratch that [`min_max`] uses: two 8-byte words a warp.
pub const MIN_MAX_WORDS: usize = 4 * B / 32;
// `select::radix_smallest` keeps a word of its own after them.
const _: () = assert!(MIN_MAX_WORDS < RADIX_SCRATCH_WORDS);

/// The smallest and the largest of `keys[0..total]`, to every thread (`total ≥ 1`); ends
/// synchronised, `scratch` free again.
///
/// # Safety
/// As for [`smallest`]; `scratch` holds [`MIN_MAX_WORDS`] words, 8-byte aligned.
#[inline(always)]
pub unsafe fn min_max<E: Exec>(
    x: E,
    keys: *const u64,
    total: usize,
    scratch: *mut u64,
) -> (u64, u64) {
    const WARPS: usize = B / 32;
    let t = x.thread();
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    let mut e = t;
    while e < total {
        let v = unsafe { *keys.add(e) };
        (lo, hi) = (lo.min(v), hi.max(v));
        e += B;
    }
    for m in [16, 8, 4, 2, 1] {
        lo = lo.min(crate::exec::shfl_xor_u64(x, lo, m));
        hi = hi.max(crate::exec::shfl_xor_u64(x, hi, m));
    }
    if t.is_multiple_of(32) {
        unsafe {
            *scratch.add(t / 32) = lo;
            *scratch.add(WARPS + t / 32) = hi;
        }
    }
    x.sync();
    for w in 0..WARPS {
        lo = lo.min(unsafe { *scratch.add(w) });
        hi = hi.max(unsafe { *scratch.add(WARPS + w) });
    }
    // Everyone has read the warps' figures before the passes clear their bins.
    x.sync();
    (lo, hi)
}

#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests {
    use super::*;
    use crate::exec::emu::{P, launch};
    use crate::knn::{NO_KEY, SELECT_CAP, key};

    fn run(keys: &[u64], k: usize) -> Vec<u64> {
        let total = keys.len();
        let mut out = vec![0u64; k];
        let o = P::of(&mut out);
        let bytes = 2 * SELECT_CAP * 8 + RADIX_SCRATCH_WORDS * 4;
        launch(1, B, bytes, |e| unsafe {
            let shared = e.shared::<u64>();
            let mut i = e.thread();
            while i < total {
                *shared.add(i) = keys[i];
                i += B;
            }
            e.sync();
            let chosen = shared.add(SELECT_CAP);
            smallest(e, shared, total, k, chosen.add(SELECT_CAP).cast(), chosen);
            let mut i = e.thread();
            while i < k {
                *o.get().add(i) = *chosen.add(i);
                i += B;
            }
        });
        out.sort_unstable();
        out
    }

    fn want(keys: &[u64], k: usize) -> Vec<u64> {
        let mut all = keys.to_vec();
        all.sort_unstable();
        all.truncate(k);
        all
    }

    #[test]
    fn the_k_smallest_of_awkward_sets() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for &(total, k) in &[
            (1, 1),
            (2, 1),
            (3, 3),
            (300, 1),
            (300, 25),
            (300, 300),
            (1000, 512),
            (2048, 512),
            (2100, 2048),
            (4096, 2048),
            (4096, 1),
            (4096, 4096),
        ] {
            // Random distances; few distinct distances (ties broken by index); the running slots
            // of a fresh tile, `NO_KEY` padding, beside real keys.
            let random: Vec<u64> = (0..total)
                .map(|i| key(f32::from_bits((next() as u32) >> 2), i as u32))
                .collect();
            let ties: Vec<u64> = (0..total)
                .map(|i| {
                    key(
                        (next() % 3) as f32,
                        (next() % 1_000_000) as u32 * 4096 + i as u32,
                    )
                })
                .collect();
            let padded: Vec<u64> = (0..total)
                .map(|i| match i % 3 {
                    0 => NO_KEY,
                    _ => key(1.0 + (i % 7) as f32, i as u32),
                })
                .collect();
            // Distances of one narrow range: their keys share a long prefix (the passes start
            // below it).
            let near: Vec<u64> = (0..total)
                .map(|i| key(40.0 + (next() % 4096) as f32 / 65536.0, i as u32))
                .collect();
            for keys in [random, ties, padded, near] {
                assert_eq!(run(&keys, k), want(&keys, k), "total {total}, k {k}");
            }
        }
    }
}
