//! Launch-shape constants that the kernels are written for and the host launches with.

/// Threads per block of the one-point-per-thread kernels (assign, accumulate).
pub const BLOCK: u32 = 256;

/// Threads of the single-block fixed-order reduction kernels.
pub const REDUCE_BLOCK: u32 = 1024;

/// Dynamic shared memory the host is willing to give one block without opting in (48 KiB).
pub const DEFAULT_SHARED_BYTES: usize = 48 * 1024;

/// Bytes of shared scratch the assign kernel keeps in front of its centroid tile
/// (two f64 per thread: the changed-label and inertia reductions).
pub const ASSIGN_SCRATCH_BYTES: usize = 2 * BLOCK as usize * 8;

/// Centroids per shared-memory tile for dimension `d`, or 0 when not even one centroid fits and
/// the kernel must read centroids straight from global memory.
pub fn assign_tile_k(d: usize, k: usize) -> usize {
    let room = (DEFAULT_SHARED_BYTES - ASSIGN_SCRATCH_BYTES) / (4 * d.max(1));
    room.min(k)
}

/// Whether per-block fixed-point sums of `k × d` values (plus `k` counts) fit in shared memory.
pub fn sums_fit_shared(k: usize, d: usize) -> bool {
    k.checked_mul(d)
        .and_then(|kd| kd.checked_mul(8))
        .and_then(|b| b.checked_add(4 * k))
        .is_some_and(|b| b <= DEFAULT_SHARED_BYTES)
}
