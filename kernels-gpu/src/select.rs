//! Top-k selection of neighbour keys (see [`crate::knn::key`]): smallest distance first, equal
//! distances by training index. Keys are unique, so every method below gives the same k keys.
//!
//! Streaming (k ≤ `MAX_STREAM_K`): each query row keeps its running k keys in global memory
//! (sorted, `NO_KEY` while empty). For every tile of training points the distance kernel writes
//! one row of distances per query; a selection block per query gathers the tile's candidates that
//! beat its current k-th key, next to the running k in shared memory, and keeps the k smallest:
//! * [`knn_select_kmin`]: k rounds of a parallel minimum (each thread holds its candidates in
//!   registers; round r takes the smallest key above round r − 1's);
//! * [`knn_select_bitonic`]: a bitonic sort of the candidates, padded to a power of two.
//!
//! Large k: [`knn_sort_chunks`], [`knn_bitonic_merge_global`] and [`knn_bitonic_merge_local`]
//! sort whole distance rows (padded to a power of two `P`) in global memory with the same
//! network; [`knn_take`] keeps the first k of every row.

use crate::bitonic::{ascending, compare_exchange, pair};
use crate::gpu::{self, shared, sync_threads};
use crate::knn::{NO_KEY, SELECT_BLOCK, SELECT_CAP, SELECT_PER_THREAD, key};
use core::sync::atomic::{AtomicU32, Ordering};

const B: usize = SELECT_BLOCK as usize;

/// Gathers a query row's running k keys and the tile's candidates below its k-th key into shared
/// memory; returns how many candidates joined (the same value in every thread).
///
/// # Safety
/// As for the selection kernels; all threads of the block call it.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn gather(
    dist: *const f32,
    ld: usize,
    cols: usize,
    first_index: u32,
    best: *mut u64,
    k: usize,
    fresh: bool,
    keys: *mut u64,
    counter: *mut u32,
) -> usize {
    let t = gpu::thread();
    let row = gpu::block();
    let cols = cols.min(SELECT_CAP - k);
    let best_row = unsafe { best.add(row * k) };
    let threshold = if fresh {
        NO_KEY
    } else {
        unsafe { *best_row.add(k - 1) }
    };
    let mut e = t;
    while e < k {
        unsafe { *keys.add(e) = if fresh { NO_KEY } else { *best_row.add(e) } };
        e += B;
    }
    if t == 0 {
        unsafe { *counter = 0 };
    }
    sync_threads();
    let drow = unsafe { dist.add(row * ld) };
    let mut c = t;
    if threshold == NO_KEY {
        // The first tile: every candidate joins, in column order.
        while c < cols {
            unsafe { *keys.add(k + c) = key(*drow.add(c), first_index + c as u32) };
            c += B;
        }
    } else {
        while c < cols {
            let kk = unsafe { key(*drow.add(c), first_index + c as u32) };
            if kk < threshold {
                let at = unsafe { AtomicU32::from_ptr(counter) }.fetch_add(1, Ordering::Relaxed);
                unsafe { *keys.add(k + at as usize) = kk };
            }
            c += B;
        }
    }
    sync_threads();
    if threshold == NO_KEY {
        cols
    } else {
        unsafe { *counter as usize }
    }
}

/// Arguments of a streaming selection kernel.
///
/// `dist`: the tile's distances, row `q` at `q · ld`, `cols` of them; column `c` is training
/// index `first_index + c`. `best`: `rows × k` running keys, updated in place; with `fresh` ≠ 0
/// (the first tile) they are not read but taken as empty.
macro_rules! select_kernel {
    ($(#[$doc:meta])* $name:ident, $body:ident) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// One block of `SELECT_BLOCK` threads per query row, `select_shared_bytes()` of dynamic
        /// shared memory; `1 ≤ k`, `k + cols ≤ SELECT_CAP`; pointers valid for those sizes.
        #[unsafe(no_mangle)]
        pub unsafe extern "gpu-kernel" fn $name(
            dist: *const f32,
            ld: u64,
            cols: u32,
            first_index: u32,
            best: *mut u64,
            k: u32,
            fresh: u32,
        ) {
            let k = (k as usize).clamp(1, SELECT_CAP);
            let keys = shared::<u64>();
            let scratch = unsafe { keys.add(SELECT_CAP) };
            let counter = unsafe { scratch.add(B + SELECT_PER_THREAD + 1) }.cast::<u32>();
            let count = unsafe {
                gather(dist, ld as usize, cols as usize, first_index, best, k, fresh != 0, keys, counter)
            };
            if count > 0 {
                let best_row = unsafe { best.add(gpu::block() * k) };
                unsafe { $body(keys, k + count, k, scratch, best_row) };
            }
        }
    };
}

select_kernel!(
    /// Merges a tile into the running k by k rounds of a parallel minimum.
    knn_select_kmin,
    kmin
);
select_kernel!(
    /// Merges a tile into the running k by a bitonic sort of the candidates.
    knn_select_bitonic,
    bitonic_sorted
);

/// k rounds of a block-wide minimum over `total` keys: round r writes the smallest key greater
/// than round r − 1's to `out[r]`.
#[inline(always)]
unsafe fn kmin(keys: *mut u64, total: usize, k: usize, scratch: *mut u64, out: *mut u64) {
    let t = gpu::thread();
    let mut mine = [NO_KEY; SELECT_PER_THREAD];
    for (s, m) in mine.iter_mut().enumerate() {
        let e = t + s * B;
        if e < total {
            *m = unsafe { *keys.add(e) };
        }
    }
    let partial = unsafe { scratch.add(B) };
    let result = unsafe { partial.add(SELECT_PER_THREAD) };
    let mut lo = 0u64;
    for r in 0..k {
        let mut m = NO_KEY;
        for &v in &mine {
            if v >= lo && v < m {
                m = v;
            }
        }
        unsafe { *scratch.add(t) = m };
        sync_threads();
        if t < SELECT_PER_THREAD {
            let mut m = NO_KEY;
            for u in 0..B / SELECT_PER_THREAD {
                let v = unsafe { *scratch.add(t * (B / SELECT_PER_THREAD) + u) };
                m = if v < m { v } else { m };
            }
            unsafe { *partial.add(t) = m };
        }
        sync_threads();
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
        sync_threads();
        lo = unsafe { *result }.saturating_add(1);
    }
}

/// Sorts the first `total` keys (padded with `NO_KEY` to a power of two) and writes the first
/// `k` to `out`.
#[inline(always)]
unsafe fn bitonic_sorted(
    keys: *mut u64,
    total: usize,
    k: usize,
    _scratch: *mut u64,
    out: *mut u64,
) {
    let t = gpu::thread();
    let len = total.next_power_of_two().min(SELECT_CAP);
    let mut e = total + t;
    while e < len {
        unsafe { *keys.add(e) = NO_KEY };
        e += B;
    }
    sync_threads();
    unsafe { sort_shared(keys, len, 0, len, 2) };
    let mut e = t;
    while e < k {
        unsafe { *out.add(e) = *keys.add(e) };
        e += B;
    }
}

/// Runs the bitonic network on `len` keys in shared memory (a power of two): stages
/// `first_size..=len` when `first_size ≤ len`. `base` is the keys' index in rows of `row_len`
/// keys, which sets the directions. Ends with a barrier.
#[inline(always)]
unsafe fn sort_shared(keys: *mut u64, len: usize, base: usize, row_len: usize, first_size: usize) {
    let mut size = first_size;
    while size <= len {
        unsafe { merge_shared(keys, len, base, row_len, size, size / 2) };
        size *= 2;
    }
}

/// The steps `stride = first_stride, …, 1` of stage `size` on `len` keys in shared memory
/// (global index `base + i`, rows of `row_len`). Ends with a barrier.
#[inline(always)]
unsafe fn merge_shared(
    keys: *mut u64,
    len: usize,
    base: usize,
    row_len: usize,
    size: usize,
    first_stride: usize,
) {
    let t = gpu::thread();
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
        sync_threads();
        stride /= 2;
    }
}

/// Builds the keys of `SELECT_CAP`-key chunks of rows of `2^row_log2` keys from a distance
/// matrix (`rows × n`, row stride `ld`; columns past `n` are `NO_KEY`) and sorts every chunk:
/// stages `2..=SELECT_CAP` of the network over whole rows.
///
/// # Safety
/// `rows · 2^row_log2 / SELECT_CAP` blocks of `SELECT_BLOCK` threads, `SELECT_CAP · 8` bytes of
/// dynamic shared memory, `2^row_log2 ≥ SELECT_CAP`; `keys` holds `rows · 2^row_log2` keys.
#[unsafe(no_mangle)]
pub unsafe extern "gpu-kernel" fn knn_sort_chunks(
    dist: *const f32,
    ld: u64,
    n: u32,
    row_log2: u32,
    keys: *mut u64,
) {
    let t = gpu::thread();
    let row_len = 1usize << (row_log2 & 63);
    let base = gpu::block() * SELECT_CAP;
    let row = base >> (row_log2 & 63);
    let c0 = base & (row_len - 1);
    let sh = shared::<u64>();
    let drow = unsafe { dist.add(row * ld as usize) };
    let mut e = t;
    while e < SELECT_CAP {
        let c = c0 + e;
        let kk = if c < n as usize {
            unsafe { key(*drow.add(c), c as u32) }
        } else {
            NO_KEY
        };
        unsafe { *sh.add(e) = kk };
        e += B;
    }
    sync_threads();
    unsafe { sort_shared(sh, SELECT_CAP, base, row_len, 2) };
    let mut e = t;
    while e < SELECT_CAP {
        unsafe { *keys.add(base + e) = *sh.add(e) };
        e += B;
    }
}

/// One step (`stride ≥ SELECT_CAP`) of stage `size` of the network over `pairs` pairs of the
/// global key buffer (rows of `2^row_log2` keys); one thread per pair.
///
/// # Safety
/// `ceil(pairs / SELECT_BLOCK)` blocks of `SELECT_BLOCK` threads; `keys` holds `2 · pairs` keys.
#[unsafe(no_mangle)]
pub unsafe extern "gpu-kernel" fn knn_bitonic_merge_global(
    keys: *mut u64,
    pairs: u64,
    row_log2: u32,
    size: u64,
    stride: u64,
) {
    let p = gpu::block() * B + gpu::thread();
    if p < pairs as usize {
        let row_len = 1usize << (row_log2 & 63);
        let (i, j) = pair(p, (stride as usize).max(1));
        let up = ascending(i, size as usize, row_len);
        unsafe {
            let (a, b) = compare_exchange(*keys.add(i), *keys.add(j), up);
            *keys.add(i) = a;
            *keys.add(j) = b;
        }
    }
}

/// The steps `stride = SELECT_CAP / 2, …, 1` of stage `size` inside every `SELECT_CAP`-key chunk
/// of the global key buffer (rows of `2^row_log2` keys).
///
/// # Safety
/// As for [`knn_sort_chunks`].
#[unsafe(no_mangle)]
pub unsafe extern "gpu-kernel" fn knn_bitonic_merge_local(
    keys: *mut u64,
    row_log2: u32,
    size: u64,
) {
    let t = gpu::thread();
    let row_len = 1usize << (row_log2 & 63);
    let base = gpu::block() * SELECT_CAP;
    let sh = shared::<u64>();
    let mut e = t;
    while e < SELECT_CAP {
        unsafe { *sh.add(e) = *keys.add(base + e) };
        e += B;
    }
    sync_threads();
    unsafe { merge_shared(sh, SELECT_CAP, base, row_len, size as usize, SELECT_CAP / 2) };
    let mut e = t;
    while e < SELECT_CAP {
        unsafe { *keys.add(base + e) = *sh.add(e) };
        e += B;
    }
}

/// `best[r · k + j] = keys[r · 2^row_log2 + j]` for `r < rows`, `j < k`; one thread per value.
///
/// # Safety
/// `ceil(rows · k / SELECT_BLOCK)` blocks of `SELECT_BLOCK` threads; sizes as named.
#[unsafe(no_mangle)]
pub unsafe extern "gpu-kernel" fn knn_take(
    keys: *const u64,
    row_log2: u32,
    rows: u32,
    k: u32,
    best: *mut u64,
) {
    let e = gpu::block() * B + gpu::thread();
    let k = (k as usize).max(1);
    if e < rows as usize * k {
        let (r, j) = (e / k, e % k);
        unsafe { *best.add(e) = *keys.add((r << (row_log2 & 63)) + j) };
    }
}
