//! Top-k selection of neighbour keys (see [`crate::knn::key`]): smallest distance first, equal
//! distances by training index. Keys are unique, so every method below gives the same k keys.
//!
//! Streaming (k ≤ `MAX_STREAM_K`): each query row keeps its running k keys in global memory
//! (sorted). For every tile of training points the distance kernel writes one row of distances
//! per query; a selection block per query gathers the tile's candidates that beat its current
//! k-th key, next to the running k in shared memory, and keeps the k smallest:
//! * `knn_select_kmin` ([`kmin`]): k rounds of a parallel minimum (each thread holds its
//!   candidates in registers; round r takes the smallest key above round r − 1's);
//! * `knn_select_bitonic` ([`bitonic_sorted`], [`bitonic_merged`]): a bitonic sort of the
//!   candidates alone, padded to a power of two `P`. On the first tile that is the answer; on a
//!   later one the sorted candidates are merged into the running k (padded to a power of two `K`)
//!   by one bitonic merge of `K` keys. Sorting the running keys again with the candidates, as
//!   `k + count` padded, takes at least twice the compare-exchanges.
//! * `knn_select_radix` ([`radix_smallest`]): a radix selection of the k smallest of the running
//!   keys and the candidates ([`crate::radix`]), then a bitonic sort of those k alone, on a
//!   search's last tile only; on the others the k stay unsorted but for the largest, last, which
//!   the next tile's candidates must beat: at k = 2048 the sort is most of a
//!   tile's work.
//!
//! Large k: `knn_sort_chunks`, `knn_bitonic_merge_global` and `knn_bitonic_merge_local` sort
//! whole distance rows (padded to a power of two) in global memory with the same network;
//! `knn_take` keeps the first k of every row.
//!
//! The bodies are generic over [`Exec`] so that the host tests run them in the emulator.

use crate::bitonic::{ascending, compare_exchange, pair};
use crate::exec::Exec;
use crate::knn::{NO_KEY, SELECT_BLOCK, SELECT_CAP, SELECT_PER_THREAD, key, select_shared_bytes};
use crate::launch::Kernel;
use crate::params::DevPtr;
use core::sync::atomic::{AtomicU32, Ordering};

const B: usize = SELECT_BLOCK as usize;

/// A selection method, the const parameter of the selection bodies and the `method` argument of
/// the kernels that take one: k rounds of a minimum ([`kmin`]).
pub const BY_KMIN: u32 = 0;
/// Bitonic sorts and merges ([`bitonic_sorted`], [`bitonic_merged`]).
pub const BY_BITONIC: u32 = 1;
/// A radix selection, then a sort of the k ([`radix_smallest`]).
pub const BY_RADIX: u32 = 2;

/// Dynamic shared memory of a selection block of `method` for `k` (≤ `MAX_STREAM_K`): the radix
/// method also needs room for the k it chooses, padded to a power of two for their sort (only
/// that, so that small k keep the other methods' occupancy).
pub const fn select_method_shared_bytes(method: u32, k: usize) -> usize {
    select_shared_bytes()
        + match method {
            BY_RADIX => 8 * k.next_power_of_two(),
            _ => 0,
        }
}

/// Arguments of a streaming selection: `dist` holds the tile's distances, query row `q` at
/// `q · ld`, `cols` of them, column `c` being training row `first_index + c`; `best` holds
/// `rows × k` running keys (ascending), updated in place; with `fresh` (the first tile) they are
/// not read but taken as empty. Without `last` (a tile that is not the search's last) the radix
/// method leaves them unsorted but for the largest, which it puts last; the others read them as
/// a set and keep them sorted. With `keys` non-null the tile is made of ready keys instead
/// (`keys[q · ld + c]`, any training indices; `dist` and `first_index` are not read).
#[derive(Clone, Copy)]
pub struct Tile {
    pub dist: *const f32,
    pub keys: *const u64,
    pub ld: usize,
    pub cols: usize,
    pub first_index: u32,
    pub best: *mut u64,
    pub k: usize,
    pub fresh: bool,
    pub last: bool,
}

/// The body of the streaming selection kernels: one block per query row. Gathers the row's
/// running k keys and the tile's candidates below its k-th key into shared memory (see
/// `candidate_slot`), then keeps the k smallest by `METHOD`: [`kmin`], [`radix_smallest`], or
/// [`bitonic_sorted`] on the first tile and [`bitonic_merged`] on later ones.
///
/// # Safety
/// `SELECT_BLOCK` threads, `select_method_shared_bytes(METHOD, k)` of shared memory; `1 ≤ k`,
/// `k + cols ≤ SELECT_CAP`; pointers valid for those sizes.
#[inline(always)]
pub unsafe fn select<const METHOD: u32, E: Exec>(x: E, a: Tile) {
    let t = x.thread();
    let row = x.block();
    let k = a.k.clamp(1, SELECT_CAP);
    let cols = a.cols.min(SELECT_CAP - k);
    let keys = x.shared::<u64>();
    let scratch = unsafe { keys.add(SELECT_CAP) };
    let counter = unsafe { scratch.add(B + SELECT_PER_THREAD + 1) }.cast::<u32>();
    let best_row = unsafe { a.best.add(row * k) };
    let threshold = if a.fresh {
        NO_KEY
    } else {
        unsafe { *best_row.add(k - 1) }
    };
    // The bitonic method sorts a first tile's candidates alone: it has no running slots to fill.
    let running = if a.fresh && METHOD == BY_BITONIC {
        0
    } else {
        k
    };
    let mut e = t;
    while e < running {
        unsafe { *keys.add(e) = if a.fresh { NO_KEY } else { *best_row.add(e) } };
        e += B;
    }
    if t == 0 {
        unsafe { *counter = 0 };
    }
    x.sync();
    // One of the two sources is null: offsets are taken without assuming either is valid.
    let drow = a.dist.wrapping_add(row * a.ld);
    let krow = a.keys.wrapping_add(row * a.ld);
    let ready = !a.keys.is_null();
    let key_at = |c: usize| unsafe {
        if ready {
            *krow.add(c)
        } else {
            key(*drow.add(c), a.first_index + c as u32)
        }
    };
    let slot = |i: usize| unsafe { keys.add(candidate_slot::<METHOD>(i, k, a.fresh)) };
    let mut c = t;
    if threshold == NO_KEY {
        // Fewer than k so far: every candidate joins, in column order.
        while c < cols {
            unsafe { *slot(c) = key_at(c) };
            c += B;
        }
    } else {
        while c < cols {
            let kk = key_at(c);
            if kk < threshold {
                let at = unsafe { AtomicU32::from_ptr(counter) }.fetch_add(1, Ordering::Relaxed);
                unsafe { *slot(at as usize) = kk };
            }
            c += B;
        }
    }
    x.sync();
    let count = if threshold == NO_KEY {
        cols
    } else {
        unsafe { *counter as usize }
    };
    if METHOD == BY_RADIX && count == 0 && a.last && !a.fresh {
        // Running keys that an earlier tile left unsorted, and nothing to add.
        unsafe { bitonic_sorted(x, keys, k, k, best_row) };
    } else if count > 0 {
        if METHOD == BY_KMIN {
            unsafe { kmin(x, keys, k + count, k, scratch, best_row) };
        } else if METHOD == BY_RADIX {
            let chosen = unsafe { x.shared::<u8>().add(select_shared_bytes()) }.cast::<u64>();
            let (total, scratch) = (k + count, scratch.cast());
            unsafe { radix_smallest(x, keys, total, k, scratch, chosen, best_row, a.last) };
        } else if a.fresh {
            unsafe { bitonic_sorted(x, keys, count, k, best_row) };
        } else {
            unsafe { bitonic_merged(x, keys, k, count, best_row) };
        }
    }
}

/// The shared-memory slot of candidate number `i` of a tile. k-min and radix take the running
/// keys and the candidates as one run, so they follow the running k. The bitonic method sorts a
/// first tile's candidates alone, from slot 0; on later tiles it stacks them down from the top
/// of the buffer, so that they pad down to a power of two while the running keys pad up
/// ([`bitonic_merged`]).
#[inline(always)]
fn candidate_slot<const METHOD: u32>(i: usize, k: usize, fresh: bool) -> usize {
    if METHOD != BY_BITONIC {
        k + i
    } else if fresh {
        i
    } else {
        SELECT_CAP - 1 - i
    }
}

kernel_params! {
    /// The parameters of the three `knn_select_*` entry points (see [`KNN_SELECT_KMIN`]): a tile of distances (`cols` per row, row stride `ld`, training rows from `first_index`) merged into every row's running `k` keys `best` (`fresh`: 1 when they start empty; `last`: 1 on the search's last tile, which leaves them sorted).
    pub struct SelectParams {
        pub dist: DevPtr<f32>,
        pub ld: u64,
        pub cols: u32,
        pub first_index: u32,
        pub best: DevPtr<u64>,
        pub k: u32,
        pub fresh: u32,
        pub last: u32,
    }
    entries: select_entry;
}

kernel_params! {
    /// The parameters of the three `knn_select_keys_*` entry points: as [`SelectParams`] for a tile of ready keys.
    pub struct SelectKeysParams {
        pub keys: DevPtr<u64>,
        pub ld: u64,
        pub cols: u32,
        pub best: DevPtr<u64>,
        pub k: u32,
        pub fresh: u32,
        pub last: u32,
    }
    entries: select_keys_entry;
}

macro_rules! select_kernel {
    ($entry:ident, $(#[$doc:meta])* $name:ident, $method:expr) => {
        #[doc = concat!("The `", stringify!($name), "` entry point. CPU twin: `backend::cpu::knn::Nearest::offer`.")]
        pub const $entry: Kernel<SelectParams> = Kernel::new(stringify!($name)).threads(SELECT_BLOCK);

        select_entry! {
            $(#[$doc])*
            ///
            /// # Safety
            /// One block of `SELECT_BLOCK` threads per query row, `select_method_shared_bytes` of
            /// its method and k of dynamic shared memory; `1 ≤ k`, `k + cols ≤ SELECT_CAP`;
            /// pointers valid for those sizes.
            fn $name(params) {
                let SelectParams { dist, ld, cols, first_index, best, k, fresh, last } = params;
                let (dist, best) = (dist.as_ptr(), best.as_mut_ptr());
                let tile = Tile {
                    dist,
                    keys: core::ptr::null(),
                    ld: ld as usize,
                    cols: cols as usize,
                    first_index,
                    best,
                    k: k as usize,
                    fresh: fresh != 0,
                    last: last != 0,
                };
                unsafe { select::<$method, _>(crate::exec::Gpu, tile) }
            }
        }
    };
}

select_kernel!(
    KNN_SELECT_KMIN,
    /// Merges a tile into the running k by k rounds of a parallel minimum.
    knn_select_kmin,
    BY_KMIN
);
select_kernel!(
    KNN_SELECT_BITONIC,
    /// Merges a tile into the running k by a bitonic sort of the candidates.
    knn_select_bitonic,
    BY_BITONIC
);
select_kernel!(
    KNN_SELECT_RADIX,
    /// Merges a tile into the running k by a radix selection and a sort of the k.
    knn_select_radix,
    BY_RADIX
);

macro_rules! select_keys_kernel {
    ($entry:ident, $(#[$doc:meta])* $name:ident, $method:expr) => {
        #[doc = concat!("The `", stringify!($name), "` entry point. CPU twin: `backend::cpu::knn::Nearest::offer`.")]
        pub const $entry: Kernel<SelectKeysParams> = Kernel::new(stringify!($name)).threads(SELECT_BLOCK);

        select_keys_entry! {
            $(#[$doc])*
            ///
            /// # Safety
            /// One block of `SELECT_BLOCK` threads per query row, `select_method_shared_bytes` of
            /// its method and k of dynamic shared memory; `1 ≤ k`, `k + cols ≤ SELECT_CAP`; `keys`
            /// holds `rows × ld` keys.
            fn $name(params) {
                let SelectKeysParams { keys, ld, cols, best, k, fresh, last } = params;
                let (keys, best) = (keys.as_ptr(), best.as_mut_ptr());
                let tile = Tile {
                    dist: core::ptr::null(),
                    keys,
                    ld: ld as usize,
                    cols: cols as usize,
                    first_index: 0,
                    best,
                    k: k as usize,
                    fresh: fresh != 0,
                    last: last != 0,
                };
                unsafe { select::<$method, _>(crate::exec::Gpu, tile) }
            }
        }
    };
}

select_keys_kernel!(
    KNN_SELECT_KEYS_KMIN,
    /// Merges a tile of ready keys into the running k by k rounds of a parallel minimum.
    knn_select_keys_kmin,
    BY_KMIN
);
select_keys_kernel!(
    KNN_SELECT_KEYS_BITONIC,
    /// Merges a tile of ready keys into the running k by a bitonic sort of the candidates.
    knn_select_keys_bitonic,
    BY_BITONIC
);
select_keys_kernel!(
    KNN_SELECT_KEYS_RADIX,
    /// Merges a tile of ready keys into the running k by a radix selection and a sort of the k.
    knn_select_keys_radix,
    BY_RADIX
);

/// k rounds of a block-wide minimum over `total` keys: round r writes the smallest key greater
/// than round r − 1's to `out[r]`.
///
/// # Safety
/// As for [`select`]; `scratch` holds `SELECT_BLOCK + SELECT_PER_THREAD + 1` keys.
#[inline(always)]
pub unsafe fn kmin<E: Exec>(
    x: E,
    keys: *mut u64,
    total: usize,
    k: usize,
    scratch: *mut u64,
    out: *mut u64,
) {
    // Each thread holds `total / B` keys rounded up; the rounds scan only those registers (a few
    // hundred candidates fill two or three of the sixteen), with the count known at compile time
    // so the keys stay in registers.
    unsafe {
        match total.div_ceil(B) {
            0 | 1 => kmin_held::<1, E>(x, keys, total, k, scratch, out),
            2 => kmin_held::<2, E>(x, keys, total, k, scratch, out),
            3 | 4 => kmin_held::<4, E>(x, keys, total, k, scratch, out),
            5..=8 => kmin_held::<8, E>(x, keys, total, k, scratch, out),
            _ => kmin_held::<SELECT_PER_THREAD, E>(x, keys, total, k, scratch, out),
        }
    }
}

/// [`kmin`] with `HELD` keys per thread (`total ≤ HELD · B`).
#[inline(always)]
unsafe fn kmin_held<const HELD: usize, E: Exec>(
    x: E,
    keys: *mut u64,
    total: usize,
    k: usize,
    scratch: *mut u64,
    out: *mut u64,
) {
    let t = x.thread();
    let mut mine = [NO_KEY; HELD];
    for (s, m) in mine.iter_mut().enumerate() {
        let e = t + s * B;
        if e < total {
            *m = unsafe { *keys.add(e) };
        }
    }
    let partial = unsafe { scratch.add(B) };
    let result = unsafe { partial.add(SELECT_PER_THREAD) };
    const GROUP: usize = B / SELECT_PER_THREAD;
    let mut lo = 0u64;
    for r in 0..k {
        let mut m = NO_KEY;
        for &v in &mine {
            if v >= lo && v < m {
                m = v;
            }
        }
        unsafe { *scratch.add(t) = m };
        x.sync();
        if t < SELECT_PER_THREAD {
            let mut m = NO_KEY;
            for u in 0..GROUP {
                let v = unsafe { *scratch.add(t * GROUP + u) };
                m = if v < m { v } else { m };
            }
            unsafe { *partial.add(t) = m };
        }
        x.sync();
        if t == 0 {
            let mut m = NO_KEY;
            for u in 0..SELECT_PER_THREAD {
                let v = unsafe { *partial.add(u) };
                m = if v < m { v } else { m };
            }
            unsafe {
                *result = m;
                *out.add(r) = m;
            }
        }
        x.sync();
        lo = unsafe { *result }.saturating_add(1);
    }
}

/// Sorts the first `total` keys (padded with `NO_KEY` to a power of two) and writes the first
/// `k` to `out`; past the padded run (a first tile with fewer than k candidates) `NO_KEY`.
///
/// # Safety
/// As for [`select`].
#[inline(always)]
pub unsafe fn bitonic_sorted<E: Exec>(x: E, keys: *mut u64, total: usize, k: usize, out: *mut u64) {
    let t = x.thread();
    let len = total.next_power_of_two().min(SELECT_CAP);
    unsafe { fill_no_key(x, keys, total, len) };
    x.sync();
    unsafe { sort_shared(x, keys, len, 0, len, 2) };
    let mut e = t;
    while e < k {
        unsafe { *out.add(e) = if e < len { *keys.add(e) } else { NO_KEY } };
        e += B;
    }
}

/// Writes the `k` smallest of `keys[0..total]` to `out` (`k ≤ total`): a radix selection of the
/// k into `chosen` ([`crate::radix::smallest`]), then with `sorted` a bitonic sort of those k
/// alone; without it (the tiles before a search's last) they stay unsorted but for the largest,
/// which goes last (`out[k − 1]`, the key a later tile's candidates must beat).
///
/// # Safety
/// As for [`select`]; `scratch` holds [`crate::radix::RADIX_SCRATCH_WORDS`] words (8-byte
/// aligned) and `chosen` `k.next_power_of_two()` keys, both in shared memory apart from `keys`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn radix_smallest<E: Exec>(
    x: E,
    keys: *const u64,
    total: usize,
    k: usize,
    scratch: *mut u32,
    chosen: *mut u64,
    out: *mut u64,
    sorted: bool,
) {
    unsafe { crate::radix::smallest(x, keys, total, k, scratch, chosen) };
    if sorted {
        unsafe { bitonic_sorted(x, chosen, k, k, out) };
        return;
    }
    let t = x.thread();
    // Past the words that `min_max` uses.
    let slot = unsafe { scratch.add(crate::radix::MIN_MAX_WORDS) };
    if t == 0 {
        unsafe { *slot = 0 };
    }
    let (_, top) = unsafe { crate::radix::min_max(x, chosen, k, scratch.cast()) };
    // Its highest position (`NO_KEY` padding may repeat), swapped with the last on the way out.
    let mut e = t;
    while e < k {
        if unsafe { *chosen.add(e) } == top {
            unsafe { AtomicU32::from_ptr(slot) }.fetch_max(e as u32, Ordering::Relaxed);
        }
        e += B;
    }
    x.sync();
    let at = unsafe { *slot } as usize;
    let mut e = t;
    while e < k {
        let to = if e == at {
            k - 1
        } else if e == k - 1 {
            at
        } else {
            e
        };
        unsafe { *out.add(to) = *chosen.add(e) };
        e += B;
    }
}

/// Writes the k smallest of the running keys (`keys[0..k]`, ascending) and `count` candidates
/// (`keys[SELECT_CAP − count..SELECT_CAP]`, any order) to `out`, ascending. Only the candidates
/// are sorted, padded down to `P` keys, then merged into the running keys padded up to `K`
/// (`merge_sorted`). Where the two padded runs do not fit side by side, one of them is
/// `SELECT_CAP` keys long, so sorting the whole buffer costs what sorting `k + count` keys would.
///
/// # Safety
/// As for [`select`]; `k + count ≤ SELECT_CAP`.
#[inline(always)]
pub unsafe fn bitonic_merged<E: Exec>(x: E, keys: *mut u64, k: usize, count: usize, out: *mut u64) {
    let (run, len) = (k.next_power_of_two(), count.next_power_of_two());
    if run + len <= SELECT_CAP {
        let candidates = unsafe { keys.add(SELECT_CAP - len) };
        unsafe {
            fill_no_key(x, keys, k, run);
            fill_no_key(x, candidates, 0, len - count);
            x.sync();
            sort_shared(x, candidates, len, 0, len, 2);
            merge_sorted(x, keys, run, candidates, len);
        }
    } else {
        // `SELECT_CAP`, taken from the runs rather than the constant: a constant length would
        // unroll all 78 steps of this rare path into the kernel.
        let whole = run.max(len);
        unsafe {
            fill_no_key(x, keys, k, SELECT_CAP - count);
            x.sync();
            sort_shared(x, keys, whole, 0, whole, 2);
        }
    }
    let mut e = x.thread();
    while e < k {
        unsafe { *out.add(e) = *keys.add(e) };
        e += B;
    }
}

/// Leaves the `run` smallest keys of two ascending runs, `keys[0..run]` and `other[0..len]`
/// (powers of two, not overlapping), in `keys[0..run]`, ascending. Keeping the smaller of
/// `keys[i]` and `other[run − 1 − i]` is the first step of the bitonic merge of `keys` followed
/// by `other` reversed: the kept half holds the `run` smallest and rises then falls, so one
/// bitonic merge of `run` keys sorts it. Slots below `run − len` face `NO_KEY` and keep their
/// key. Ends with a barrier.
///
/// # Safety
/// `keys` and `other` in shared memory; every thread of the block calls this.
#[inline(always)]
unsafe fn merge_sorted<E: Exec>(x: E, keys: *mut u64, run: usize, other: *const u64, len: usize) {
    let mut i = run - len.min(run) + x.thread();
    while i < run {
        unsafe {
            let b = *other.add(run - 1 - i);
            if b < *keys.add(i) {
                *keys.add(i) = b;
            }
        }
        i += B;
    }
    x.sync();
    unsafe { merge_shared(x, keys, run, 0, run, run, run / 2) };
}

/// Sets `keys[from..to]` to `NO_KEY` (the padding of a run to a power of two); no barrier.
#[inline(always)]
unsafe fn fill_no_key<E: Exec>(x: E, keys: *mut u64, from: usize, to: usize) {
    let mut e = from + x.thread();
    while e < to {
        unsafe { *keys.add(e) = NO_KEY };
        e += B;
    }
}

/// Runs stages `first_size..=len` of the bitonic network on `len` keys in shared memory (a power
/// of two). `base` is the keys' index in rows of `row_len` keys, which sets the directions. Ends
/// with a barrier.
#[inline(always)]
unsafe fn sort_shared<E: Exec>(
    x: E,
    keys: *mut u64,
    len: usize,
    base: usize,
    row_len: usize,
    first_size: usize,
) {
    let mut size = first_size;
    while size <= len {
        unsafe { merge_shared(x, keys, len, base, row_len, size, size / 2) };
        size *= 2;
    }
}

/// The steps `stride = first_stride, …, 1` of stage `size` on `len` keys in shared memory
/// (global index `base + i`, rows of `row_len`). Ends with a barrier.
#[inline(always)]
unsafe fn merge_shared<E: Exec>(
    x: E,
    keys: *mut u64,
    len: usize,
    base: usize,
    row_len: usize,
    size: usize,
    first_stride: usize,
) {
    let t = x.thread();
    let mut stride = first_stride;
    while stride > 0 {
        let mut p = t;
        while p < len / 2 {
            let (i, j) = pair(p, stride);
            let up = ascending(base + i, size, row_len);
            unsafe {
                let (a, b) = compare_exchange(*keys.add(i), *keys.add(j), up);
                *keys.add(i) = a;
                *keys.add(j) = b;
            }
            p += B;
        }
        x.sync();
        stride /= 2;
    }
}

/// Body of `knn_sort_chunks`: builds the keys of one `SELECT_CAP`-key chunk of rows of
/// `2^row_log2` keys from a distance matrix (row stride `ld`, `n` columns; past `n`: `NO_KEY`)
/// and sorts it: stages `2..=SELECT_CAP` of the network over whole rows.
///
/// # Safety
/// `rows · 2^row_log2 / SELECT_CAP` blocks of `SELECT_BLOCK` threads, `SELECT_CAP · 8` bytes of
/// shared memory, `2^row_log2 ≥ SELECT_CAP`; `keys` holds `rows · 2^row_log2` keys.
#[inline(always)]
pub unsafe fn sort_chunks<E: Exec>(
    x: E,
    dist: *const f32,
    ld: usize,
    n: usize,
    row_log2: u32,
    keys: *mut u64,
) {
    let t = x.thread();
    let row_len = 1usize << (row_log2 & 63);
    let base = x.block() * SELECT_CAP;
    let row = base >> (row_log2 & 63);
    let c0 = base & (row_len - 1);
    let sh = x.shared::<u64>();
    let drow = unsafe { dist.add(row * ld) };
    let mut e = t;
    while e < SELECT_CAP {
        let c = c0 + e;
        let kk = if c < n {
            unsafe { key(*drow.add(c), c as u32) }
        } else {
            NO_KEY
        };
        unsafe { *sh.add(e) = kk };
        e += B;
    }
    x.sync();
    unsafe { sort_shared(x, sh, SELECT_CAP, base, row_len, 2) };
    let mut e = t;
    while e < SELECT_CAP {
        unsafe { *keys.add(base + e) = *sh.add(e) };
        e += B;
    }
}

/// Body of `knn_bitonic_merge_global`: one step (`stride ≥ SELECT_CAP`) of stage `size` of the
/// network over `pairs` pairs of the global key buffer (rows of `2^row_log2` keys); one thread
/// per pair.
///
/// # Safety
/// `ceil(pairs / SELECT_BLOCK)` blocks of `SELECT_BLOCK` threads; `keys` holds `2 · pairs` keys.
#[inline(always)]
pub unsafe fn merge_global<E: Exec>(
    x: E,
    keys: *mut u64,
    pairs: usize,
    row_log2: u32,
    size: usize,
    stride: usize,
) {
    let p = x.block() * B + x.thread();
    if p < pairs {
        let row_len = 1usize << (row_log2 & 63);
        let (i, j) = pair(p, stride.max(1));
        let up = ascending(i, size, row_len);
        unsafe {
            let (a, b) = compare_exchange(*keys.add(i), *keys.add(j), up);
            *keys.add(i) = a;
            *keys.add(j) = b;
        }
    }
}

/// Body of `knn_bitonic_merge_local`: the steps `stride = SELECT_CAP / 2, …, 1` of stage `size`
/// inside one `SELECT_CAP`-key chunk of the global key buffer (rows of `2^row_log2` keys).
///
/// # Safety
/// As for [`sort_chunks`].
#[inline(always)]
pub unsafe fn merge_local<E: Exec>(x: E, keys: *mut u64, row_log2: u32, size: usize) {
    let t = x.thread();
    let row_len = 1usize << (row_log2 & 63);
    let base = x.block() * SELECT_CAP;
    let sh = x.shared::<u64>();
    let mut e = t;
    while e < SELECT_CAP {
        unsafe { *sh.add(e) = *keys.add(base + e) };
        e += B;
    }
    x.sync();
    unsafe { merge_shared(x, sh, SELECT_CAP, base, row_len, size, SELECT_CAP / 2) };
    let mut e = t;
    while e < SELECT_CAP {
        unsafe { *keys.add(base + e) = *sh.add(e) };
        e += B;
    }
}

/// Body of `knn_take`: `best[r · k + j] = keys[r · 2^row_log2 + j]` for `r < rows`, `j < k`;
/// one thread per value.
///
/// # Safety
/// `ceil(rows · k / SELECT_BLOCK)` blocks of `SELECT_BLOCK` threads; sizes as named.
#[inline(always)]
pub unsafe fn take<E: Exec>(
    x: E,
    keys: *const u64,
    row_log2: u32,
    rows: usize,
    k: usize,
    best: *mut u64,
) {
    let e = x.block() * B + x.thread();
    let k = k.max(1);
    if e < rows * k {
        let (r, j) = (e / k, e % k);
        unsafe { *best.add(e) = *keys.add((r << (row_log2 & 63)) + j) };
    }
}

/// Dynamic shared memory of a `knn_sort_chunks` or `knn_bitonic_merge_local` block: one chunk
/// of `SELECT_CAP` keys.
pub const SORT_SHARED_BYTES: usize = SELECT_CAP * 8;

/// The `knn_sort_chunks` entry point. CPU twin: `backend::cpu::knn::Nearest::finish`.
pub const KNN_SORT_CHUNKS: Kernel<SortChunksParams> =
    Kernel::new("knn_sort_chunks").threads(SELECT_BLOCK);

kernel_params! {
    /// `knn_sort_chunks`'s parameters.
    pub struct SortChunksParams {
        pub dist: DevPtr<f32>,
        pub ld: u64,
        pub n: u32,
        pub row_log2: u32,
        pub keys: DevPtr<u64>,
    }
    entries: sort_chunks_entry;
}

/// Blocks of `knn_sort_chunks` and `knn_bitonic_merge_local` for `total` keys (whole rows of a
/// power of two ≥ `SELECT_CAP`): one per chunk of `SELECT_CAP`.
pub const fn sort_chunks_grid(total: usize) -> usize {
    total / SELECT_CAP
}

sort_chunks_entry! {
    /// Builds `rows · 2^row_log2 / SELECT_CAP` sorted chunks of keys from distance rows; see
    /// [`sort_chunks`].
    ///
    /// # Safety
    /// As for [`sort_chunks`].
    fn knn_sort_chunks(params) {
        let SortChunksParams {
            dist,
            ld,
            n,
            row_log2,
            keys,
        } = params;
        let (dist, keys) = (dist.as_ptr(), keys.as_mut_ptr());
        unsafe {
            sort_chunks(
                crate::exec::Gpu,
                dist,
                ld as usize,
                n as usize,
                row_log2,
                keys,
            )
        }
    }
}

/// The `knn_bitonic_merge_global` entry point. CPU twin: `backend::cpu::knn::Nearest::finish`.
pub const KNN_BITONIC_MERGE_GLOBAL: Kernel<MergeGlobalParams> =
    Kernel::new("knn_bitonic_merge_global").threads(SELECT_BLOCK);

kernel_params! {
    /// `knn_bitonic_merge_global`'s parameters.
    pub struct MergeGlobalParams {
        pub keys: DevPtr<u64>,
        pub pairs: u64,
        pub row_log2: u32,
        pub size: u64,
        pub stride: u64,
    }
    entries: merge_global_entry;
}

/// Blocks of `knn_bitonic_merge_global` for `pairs` compare-exchanges: a thread per pair.
pub const fn merge_global_grid(pairs: usize) -> usize {
    pairs.div_ceil(SELECT_BLOCK as usize)
}

merge_global_entry! {
    /// One global-memory step of the row sort; see [`merge_global`].
    ///
    /// # Safety
    /// As for [`merge_global`].
    fn knn_bitonic_merge_global(params) {
        let MergeGlobalParams {
            keys,
            pairs,
            row_log2,
            size,
            stride,
        } = params;
        let keys = keys.as_mut_ptr();
        unsafe {
            merge_global(
                crate::exec::Gpu,
                keys,
                pairs as usize,
                row_log2,
                size as usize,
                stride as usize,
            )
        }
    }
}

/// The `knn_bitonic_merge_local` entry point. CPU twin: `backend::cpu::knn::Nearest::finish`.
pub const KNN_BITONIC_MERGE_LOCAL: Kernel<MergeLocalParams> =
    Kernel::new("knn_bitonic_merge_local").threads(SELECT_BLOCK);

kernel_params! {
    /// `knn_bitonic_merge_local`'s parameters.
    pub struct MergeLocalParams {
        pub keys: DevPtr<u64>,
        pub row_log2: u32,
        pub size: u64,
    }
    entries: merge_local_entry;
}

merge_local_entry! {
    /// The in-chunk steps of a stage of the row sort; see [`merge_local`].
    ///
    /// # Safety
    /// As for [`merge_local`].
    fn knn_bitonic_merge_local(params) {
        let MergeLocalParams {
            keys,
            row_log2,
            size,
        } = params;
        let keys = keys.as_mut_ptr();
        unsafe { merge_local(crate::exec::Gpu, keys, row_log2, size as usize) }
    }
}

/// The `knn_take` entry point. CPU twin: `backend::cpu::knn::Nearest::finish`.
pub const KNN_TAKE: Kernel<TakeParams> = Kernel::new("knn_take").threads(SELECT_BLOCK);

kernel_params! {
    /// `knn_take`'s parameters.
    pub struct TakeParams {
        pub keys: DevPtr<u64>,
        pub row_log2: u32,
        pub rows: u32,
        pub k: u32,
        pub best: DevPtr<u64>,
    }
    entries: take_entry;
}

/// Blocks of `knn_take` for `rows × k` keys: a thread per key.
pub const fn take_grid(rows: usize, k: usize) -> usize {
    (rows * k).div_ceil(SELECT_BLOCK as usize)
}

take_entry! {
    /// Keeps the first k keys of every sorted row; see [`take`].
    ///
    /// # Safety
    /// As for [`take`].
    fn knn_take(params) {
        let TakeParams {
            keys,
            row_log2,
            rows,
            k,
            best,
        } = params;
        let (keys, best) = (keys.as_ptr(), best.as_mut_ptr());
        unsafe {
            take(
                crate::exec::Gpu,
                keys,
                row_log2,
                rows as usize,
                k as usize,
                best,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::emu::{P, launch};
    use crate::knn::{select_shared_bytes, stream_tile};

    /// Distances with many exact ties (a few levels), `rows × n`.
    fn tied(rows: usize, n: usize, levels: u32) -> Vec<f32> {
        (0..rows * n)
            .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 7) % levels)
            .map(|v| v as f32 * 0.5)
            .collect()
    }

    /// Distances that fall along each row, tied in fours: every later tile beats all of the
    /// running k, so it brings a whole tile of candidates.
    fn nearing(rows: usize, n: usize) -> Vec<f32> {
        (0..rows * n).map(|i| ((n - i % n) / 4) as f32).collect()
    }

    /// The keys of every row of `n` distances, sorted: the host reference.
    fn sorted_keys(dist: &[f32], n: usize) -> Vec<Vec<u64>> {
        dist.chunks(n)
            .map(|r| {
                let mut keys: Vec<u64> = r
                    .iter()
                    .enumerate()
                    .map(|(j, &d)| key(d, j as u32))
                    .collect();
                keys.sort_unstable();
                keys
            })
            .collect()
    }

    /// [`tied`] distances and their reference keys.
    fn rows_of(rows: usize, n: usize, levels: u32) -> (Vec<f32>, Vec<Vec<u64>>) {
        let dist = tied(rows, n, levels);
        let sorted = sorted_keys(&dist, n);
        (dist, sorted)
    }

    /// Streams [`tied`] rows through the selection body in the host's tiles.
    fn stream(method: u32, rows: usize, n: usize, k: usize, levels: u32) {
        stream_tiles(method, &tied(rows, n, levels), n, k, stream_tile(k));
    }

    /// Streams rows of `n` distances tile by tile (`tile` columns, `k + tile ≤ SELECT_CAP`)
    /// through the selection body, as the host does, and compares the running k with the
    /// reference (`NO_KEY` past a row's `n` keys).
    fn stream_tiles(method: u32, dist: &[f32], n: usize, k: usize, tile: usize) {
        let rows = dist.len() / n;
        let want = sorted_keys(dist, n);
        let mut best = vec![0x1234u64; rows * k]; // garbage: the first tile must not read it
        let mut tile_buf = vec![0f32; rows * tile];
        let mut t0 = 0;
        while t0 < n {
            let cols = tile.min(n - t0);
            for r in 0..rows {
                tile_buf[r * tile..r * tile + cols]
                    .copy_from_slice(&dist[r * n + t0..r * n + t0 + cols]);
            }
            let a = Tile {
                dist: tile_buf.as_ptr(),
                keys: std::ptr::null(),
                ld: tile,
                cols,
                first_index: t0 as u32,
                best: best.as_mut_ptr(),
                k,
                fresh: t0 == 0,
                last: t0 + cols == n,
            };
            let a = P(&a as *const Tile as *mut Tile);
            launch(rows, B, select_method_shared_bytes(method, k), |x| unsafe {
                let a = *a.get();
                match method {
                    BY_KMIN => select::<BY_KMIN, _>(x, a),
                    BY_RADIX => select::<BY_RADIX, _>(x, a),
                    _ => select::<BY_BITONIC, _>(x, a),
                }
            });
            t0 += cols;
        }
        for (r, want) in want.iter().enumerate() {
            let want: Vec<u64> = want
                .iter()
                .copied()
                .chain([NO_KEY; SELECT_CAP])
                .take(k)
                .collect();
            assert_eq!(
                &best[r * k..(r + 1) * k],
                &want[..],
                "method {method} n={n} k={k} tile={tile} row {r}"
            );
        }
    }

    #[test]
    fn emulated_streaming_selection_keeps_the_k_smallest() {
        for method in [BY_KMIN, BY_BITONIC, BY_RADIX] {
            stream(method, 2, 1, 1, 3);
            stream(method, 3, 9000, 1, 5);
            stream(method, 2, 5000, 37, 4);
            stream(method, 2, 300, 300, 2);
            // Candidates per thread of every held-keys specialisation (1, 2, 4, 8, 16 keys).
            for (n, k) in [(100, 20), (200, 100), (700, 100), (1500, 1), (3000, 1)] {
                stream(method, 2, n, k, 6);
            }
        }
        // The streaming limit (k = MAX_STREAM_K: the tile is as wide as k); k rounds of barriers
        // are slow in the emulator, so k-min gets a smaller k over two tiles.
        stream(BY_BITONIC, 2, 4500, crate::knn::MAX_STREAM_K, 50);
        stream(BY_RADIX, 2, 4500, crate::knn::MAX_STREAM_K, 50);
        stream(BY_KMIN, 1, 4100, 200, 50);
    }

    /// The bitonic method's paths (and the radix method on the same shapes): first tiles with
    /// fewer candidates than k (and rows shorter than k), later tiles with no candidates, with fewer or more than the running k padded,
    /// whole tiles beating the running k, both padded runs filling the buffer exactly (k = 2048)
    /// or not fitting (one sort of the whole buffer); k of 1, not a power of two, over half the
    /// buffer.
    #[test]
    fn emulated_bitonic_selection_on_awkward_shapes() {
        // (n, k, tile, levels): tied distances, few later candidates or none.
        for (n, k, tile, levels) in [
            (4500, 1, 4095, 3),
            (3000, 5, 1000, 2),
            (50, 100, 60, 4),
            (700, 100, 60, 4),
            (5000, 25, 1000, 1000),
            (6144, 512, 2048, 50),
            (6144, 2048, 2048, 50),
        ] {
            for method in [BY_BITONIC, BY_RADIX] {
                stream_tiles(method, &tied(2, n, levels), n, k, tile);
            }
        }
        // (n, k, tile): nearing distances, every later tile a whole tile of candidates.
        for (n, k, tile) in [
            (9000, 1, 4095),
            (2 * 4093 + 10, 3, 4093),
            (2600, 25, 1000),
            (400, 100, 60),
            (6144, 512, 2048),
            (6144, 2048, 2048),
            (4000, 3000, 1000),
        ] {
            // The radix method runs up to the streaming limit, `MAX_STREAM_K`.
            for method in [BY_BITONIC, BY_RADIX] {
                if method == BY_BITONIC || k <= crate::knn::MAX_STREAM_K {
                    stream_tiles(method, &nearing(2, n), n, k, tile);
                }
            }
        }
    }

    /// The merge of two sorted runs (with `NO_KEY` padding and tied distances) against a sort of
    /// both, for each run longer, shorter or as long as the other.
    #[test]
    fn emulated_merge_of_sorted_runs_keeps_the_smallest() {
        let mut index = 0u32;
        let mut run_of = |len: usize, real: usize| -> Vec<u64> {
            let mut keys: Vec<u64> = (0..real)
                .map(|_| {
                    index += 1;
                    key((index.wrapping_mul(2_654_435_761) >> 20) as f32, index)
                })
                .chain([NO_KEY; SELECT_CAP])
                .take(len)
                .collect();
            keys.sort_unstable();
            keys
        };
        for (run, len) in [
            (1, 1),
            (1, 64),
            (4, 1),
            (16, 16),
            (32, 1024),
            (128, 64),
            (2048, 2048),
        ] {
            let running = run_of(run, run - run / 4);
            let candidates = run_of(len, len - len / 3);
            let mut want: Vec<u64> = running.iter().chain(&candidates).copied().collect();
            want.sort_unstable();
            let mut got = vec![0u64; run];
            let (pr, pc, pg) = (
                P(running.as_ptr() as *mut u64),
                P(candidates.as_ptr() as *mut u64),
                P::of(&mut got),
            );
            launch(1, B, select_shared_bytes(), |x| unsafe {
                let sh = x.shared::<u64>();
                let other = sh.add(SELECT_CAP - len);
                for e in (x.thread()..run).step_by(B) {
                    *sh.add(e) = *pr.get().add(e);
                }
                for e in (x.thread()..len).step_by(B) {
                    *other.add(e) = *pc.get().add(e);
                }
                x.sync();
                merge_sorted(x, sh, run, other, len);
                for e in (x.thread()..run).step_by(B) {
                    *pg.get().add(e) = *sh.add(e);
                }
            });
            assert_eq!(got, want[..run], "run={run} len={len}");
        }
    }

    /// The large-k path: chunk sorts, global and in-chunk merges, then the first k of each row.
    #[test]
    fn emulated_row_sort_keeps_the_k_smallest() {
        let (rows, n, k) = (2, 9000, 2500);
        let (dist, want) = rows_of(rows, n, 40);
        let row_len = n.next_power_of_two();
        let row_log2 = row_len.trailing_zeros();
        let total = rows * row_len;
        let mut keys = vec![7u64; total];
        let (pk, pd) = (P::of(&mut keys), P(dist.as_ptr() as *mut f32));
        launch(total / SELECT_CAP, B, SELECT_CAP * 8, |x| unsafe {
            sort_chunks(x, pd.get(), n, n, row_log2, pk.get())
        });
        let mut size = 2 * SELECT_CAP;
        while size <= row_len {
            let mut stride = size / 2;
            while stride >= SELECT_CAP {
                launch((total / 2).div_ceil(B), B, 0, |x| unsafe {
                    merge_global(x, pk.get(), total / 2, row_log2, size, stride)
                });
                stride /= 2;
            }
            launch(total / SELECT_CAP, B, SELECT_CAP * 8, |x| unsafe {
                merge_local(x, pk.get(), row_log2, size)
            });
            size *= 2;
        }
        let mut best = vec![0u64; rows * k];
        let pb = P::of(&mut best);
        launch((rows * k).div_ceil(B), B, 0, |x| unsafe {
            take(x, pk.get(), row_log2, rows, k, pb.get())
        });
        for r in 0..rows {
            assert_eq!(
                &keys[r * row_len..r * row_len + n],
                &want[r][..],
                "row {r} sorted"
            );
            assert_eq!(&best[r * k..(r + 1) * k], &want[r][..k], "row {r}");
        }
    }
}
