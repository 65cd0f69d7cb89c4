//! A set of training-row indices in shared memory, for the re-rank: the rows whose exact keys
//! the threshold step already holds, so that a candidate among them is not computed again.
//!
//! Open addressing with linear probing over [`ROW_SET_SLOTS`] words (at most `MAX_STREAM_K`
//! members: at most half full); inserts are `atomicCAS`, so a block fills it concurrently.

use core::sync::atomic::{AtomicU32, Ordering};

/// Slots of the set: twice the largest k of the prefilter.
pub const ROW_SET_SLOTS: usize = 2 * crate::knn::MAX_STREAM_K;
/// Bytes of shared memory the set takes.
pub const ROW_SET_BYTES: usize = 4 * ROW_SET_SLOTS;
/// An empty slot (no training row has this index: row counts fit in `u32` below it).
const EMPTY: u32 = u32::MAX;

/// The first slot probed for row `j` (Fibonacci hashing: neighbouring rows spread out).
#[inline(always)]
fn home(j: u32) -> usize {
    (j.wrapping_mul(0x9E37_79B1) >> (32 - ROW_SET_SLOTS.trailing_zeros())) as usize
}

/// Empties the set; every thread of the block (`threads`) takes its share. Synchronise before
/// the first insert.
///
/// # Safety
/// `set` holds `ROW_SET_SLOTS` words.
#[inline(always)]
pub unsafe fn clear(set: *mut u32, thread: usize, threads: usize) {
    let mut s = thread;
    while s < ROW_SET_SLOTS {
        unsafe { *set.add(s) = EMPTY };
        s += threads;
    }
}

/// Adds row `j` (`j < u32::MAX`); at most `ROW_SET_SLOTS − 1` distinct rows in all.
///
/// # Safety
/// `set` holds `ROW_SET_SLOTS` words, cleared; other threads only insert until a barrier.
#[inline(always)]
pub unsafe fn insert(set: *mut u32, j: u32) {
    let mut s = home(j);
    loop {
        let slot = unsafe { AtomicU32::from_ptr(set.add(s)) };
        match slot.compare_exchange(EMPTY, j, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(held) if held == j => return,
            Err(_) => s = (s + 1) % ROW_SET_SLOTS,
        }
    }
}

/// Whether row `j` is in the set.
///
/// # Safety
/// `set` holds `ROW_SET_SLOTS` words, filled by [`insert`] before a barrier.
#[inline(always)]
pub unsafe fn contains(set: *const u32, j: u32) -> bool {
    let mut s = home(j);
    loop {
        match unsafe { *set.add(s) } {
            held if held == j => return true,
            EMPTY => return false,
            _ => s = (s + 1) % ROW_SET_SLOTS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_and_strangers() {
        let mut set = vec![0u32; ROW_SET_SLOTS];
        unsafe { clear(set.as_mut_ptr(), 0, 1) };
        // Rows that share home slots (multiples of the table size) and a full complement.
        let members: Vec<u32> = (0..crate::knn::MAX_STREAM_K as u32)
            .map(|i| if i % 2 == 0 { i * 4096 } else { i * 7 + 1 })
            .collect();
        for &j in &members {
            unsafe { insert(set.as_mut_ptr(), j) };
        }
        // Inserting again changes nothing.
        unsafe { insert(set.as_mut_ptr(), members[3]) };
        assert_eq!(
            set.iter().filter(|&&s| s != EMPTY).count(),
            members.len(),
            "one slot per member"
        );
        let members: std::collections::HashSet<u32> = members.into_iter().collect();
        for j in (0..40_000u32).chain(members.iter().copied()) {
            let want = members.contains(&j);
            assert_eq!(unsafe { contains(set.as_ptr(), j) }, want, "row {j}");
        }
    }
}
