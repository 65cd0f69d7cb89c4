//! Launch-shape constants that the kernels are written for and the host launches with.

/// A kernel entry point of the committed PTX, exported next to its kernel so that the host
/// names it by constant, never by a string of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// The `.entry` name (the `#[no_mangle]` function).
    pub name: &'static str,
    /// Parameters the entry declares; its host launcher pushes exactly these, in order.
    pub params: usize,
    /// Whether only the sm_80 PTX build has it (the TF32 tensor-core kernels).
    pub sm80_only: bool,
    /// Blocks of `BLOCK` threads that ptxas must fit on one multiprocessor (`.minnctapersm`,
    /// which `cargo xtask ptx` writes into the PTX: Rust has no `__launch_bounds__`); 0: no bound.
    pub min_blocks_per_sm: u32,
}

impl Kernel {
    /// An entry of every PTX build.
    pub const fn new(name: &'static str, params: usize) -> Self {
        Kernel {
            name,
            params,
            sm80_only: false,
            min_blocks_per_sm: 0,
        }
    }

    /// An entry of the sm_80 build only.
    pub const fn sm80(name: &'static str, params: usize) -> Self {
        Kernel {
            name,
            params,
            sm80_only: true,
            min_blocks_per_sm: 0,
        }
    }

    /// This kernel, compiled to fit `blocks` blocks per multiprocessor.
    pub const fn min_blocks(self, blocks: u32) -> Self {
        Kernel {
            min_blocks_per_sm: blocks,
            ..self
        }
    }
}

/// Threads per block of the one-point-per-thread kernels (assign, accumulate).
pub const BLOCK: u32 = 256;

/// Threads of the single-block fixed-order reduction kernels.
pub const REDUCE_BLOCK: u32 = 1024;

/// Centroids per block of `kmeans_centroids_by_dimension`.
pub const CENTROID_LAYOUT_ROWS: usize = 32;
/// Dimensions that block stages at a time.
pub const CENTROID_LAYOUT_COLS: usize = 64;

/// Centroid coordinates per block of `kmeans_shift_parts` (`BLOCK` threads, four quads each).
pub const SHIFT_PART: usize = 16 * BLOCK as usize;

/// Most candidate rows one seeding pass compares every point with (k-means++: the trials of a
/// step plus the previous step's winner; k-means‖: a group of a round's new candidates).
pub const SEED_CANDIDATES: usize = 32;
/// Dimensions of the candidates a seeding block stages in shared memory at a time.
pub const SEED_DIMS: usize = 32;
/// Dynamic shared memory of the seeding kernels: the staged candidates, then one u64 sum per
/// candidate.
pub const SEED_SHARED_BYTES: usize = SEED_CANDIDATES * SEED_DIMS * 4 + SEED_CANDIDATES * 8;

/// Dynamic shared memory the host is willing to give one block without opting in (48 KiB).
pub const DEFAULT_SHARED_BYTES: usize = 48 * 1024;

/// Shape of a small-shape Lloyd step kernel ([`crate::small`]): every thread holds `points`
/// points of up to `max_d` dimensions in registers while all `k` centroids sit in shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmallStep {
    /// Most dimensions the kernel holds per point (a multiple of 4).
    pub max_d: usize,
    /// Points per thread.
    pub points: usize,
    /// Centroids scanned together: independent multiply-add chains for a thread with few points.
    pub unroll: usize,
}

/// The small-step kernels, narrowest first: fewer dimensions leave registers for more points.
pub const SMALL_STEPS: [SmallStep; 4] = [
    SmallStep {
        max_d: 4,
        points: 4,
        unroll: 2,
    },
    SmallStep {
        max_d: 16,
        points: 2,
        unroll: 2,
    },
    SmallStep {
        max_d: 32,
        points: 2,
        unroll: 2,
    },
    SmallStep {
        max_d: 96,
        points: 1,
        unroll: 8,
    },
];

/// Widest dimension count whose points a small step holds in registers; wider points are read
/// from their staged rows in shared memory, which leaves the registers to independent
/// multiply-add chains over `unroll` centroids.
pub const SMALL_REGISTER_D: usize = 32;

/// Byte offsets of the small step's dynamic shared memory: centroids (rows padded to a multiple
/// of 4), the block's points (rows padded so that threads reading one row each hit different
/// banks, see [`SmallStep::layout`]), the centroids' squared norms, the fixed-point scales,
/// per-cluster counts and offsets of the block's points, the block's points ordered by cluster,
/// and scratch for the fixed-order reductions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmallLayout {
    pub centroids: usize,
    pub points: usize,
    /// Row stride of the staged points, in f32.
    pub point_stride: usize,
    pub norms: usize,
    pub scales: usize,
    pub counts: usize,
    pub offsets: usize,
    pub order: usize,
    pub scratch: usize,
    pub bytes: usize,
}

impl SmallStep {
    /// The index in [`SMALL_STEPS`] of the kernel for `d` dimensions, if any holds them.
    pub fn for_d(d: usize) -> Option<usize> {
        SMALL_STEPS.iter().position(|s| d <= s.max_d)
    }

    /// Points per block.
    pub const fn block_points(self) -> usize {
        BLOCK as usize * self.points
    }

    /// Blocks of the kernel for `n` points (one inertia partial each).
    pub const fn grid(self, n: usize) -> usize {
        n.div_ceil(self.block_points())
    }

    /// Whether the points are read from shared memory rather than held in registers.
    pub const fn rows_in_shared(self) -> bool {
        self.max_d > SMALL_REGISTER_D
    }

    /// Where everything goes in shared memory for `k` centroids of `d` dimensions.
    pub const fn layout(self, k: usize, d: usize) -> SmallLayout {
        let d4 = d.div_ceil(4) * 4;
        // Rows read a quad at a time: an odd number of quads apart, so the eight 16-byte loads
        // of a quarter warp hit different banks. Rows read a word at a time: an odd stride.
        let point_stride = if !self.rows_in_shared() {
            d | 1
        } else if (d4 / 4) % 2 == 1 {
            d4
        } else {
            d4 + 4
        };
        let centroids = 0;
        let points = centroids + k * d4 * 4;
        let norms = points + self.block_points() * point_stride * 4;
        let scales = norms + k * 4;
        let counts = scales + d * 4;
        let offsets = counts + k * 4;
        let order = offsets + k * 4;
        // f64 scratch, 8-byte aligned.
        let scratch = (order + self.block_points() * 4).div_ceil(8) * 8;
        let bytes = scratch + BLOCK as usize * 8;
        SmallLayout {
            centroids,
            points,
            point_stride,
            norms,
            scales,
            counts,
            offsets,
            order,
            scratch,
            bytes,
        }
    }

    /// Whether `k` centroids of `d` dimensions fit this kernel, given `max_shared` bytes of
    /// shared memory per block.
    pub const fn fits(self, k: usize, d: usize, max_shared: usize) -> bool {
        d <= self.max_d && self.layout(k, d).bytes <= max_shared
    }
}

/// Whether per-block fixed-point sums of `k × d` values (plus `k` u64 cluster weights) fit in
/// shared memory: the `8·k·d + 8·k` bytes of `kmeans_accumulate_shared`.
pub fn sums_fit_shared(k: usize, d: usize) -> bool {
    d.checked_add(1)
        .and_then(|d1| k.checked_mul(d1))
        .and_then(|cells| cells.checked_mul(8))
        .is_some_and(|b| b <= DEFAULT_SHARED_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_sums_count_their_u64_weights() {
        // 8·k·d + 8·k bytes: k = 1, d = 6143 fills 48 KiB exactly; one more dimension does not.
        assert!(sums_fit_shared(1, 6143));
        assert!(!sums_fit_shared(1, 6144));
        assert!(sums_fit_shared(64, 95) && !sums_fit_shared(64, 96));
        assert!(!sums_fit_shared(usize::MAX, 2));
    }
}
