//! What every launch shares: the [`Kernel`] descriptor, the common block sizes, the default
//! shared-memory budget, and the seeding shapes. Each kernel's own launch contract (block shape,
//! grid, shared-memory size) sits next to it, in its module: `assign::AssignTile`,
//! `assign_tf32::tf32_grid`, `small::SMALL_STEPS`, `update::finalize_grid`, `vote::vote_grid`, …

use crate::params::{Field, KernelParams};
use core::marker::PhantomData;

/// A kernel entry point of the committed PTX, exported next to its kernel so that the host
/// names it by constant, never by a string of its own, and launches it with its block size.
/// `P` is its parameter struct, so a launch with another struct does not compile; `Kernel` (of
/// `()`) is the same descriptor without it, as [`crate::KERNELS`] lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernel<P = ()> {
    /// The `.entry` name (the `#[no_mangle]` function).
    pub name: &'static str,
    /// Its parameters: the fields of its [`KernelParams`] struct, in order (as the committed
    /// PTX declares them, one `.param` each).
    pub params: &'static [Field],
    /// Whether only the sm_80 and later PTX builds have it (the TF32 tensor-core kernels).
    pub sm80_only: bool,
    /// Whether only the sm_90a build has it (Hopper's warpgroup `mma`).
    pub sm90a_only: bool,
    /// Blocks of `block` threads that ptxas must fit on one multiprocessor (`.minnctapersm`,
    /// which `cargo xtask ptx` writes into the PTX: Rust has no `__launch_bounds__`); 0: no bound.
    pub min_blocks_per_sm: u32,
    /// Threads per block it is launched with.
    pub block: u32,
    takes: PhantomData<fn(P)>,
}

impl<P: KernelParams> Kernel<P> {
    /// An entry of every PTX build taking the fields of `P`, launched with [`BLOCK`] threads.
    pub const fn new(name: &'static str) -> Self {
        Kernel {
            name,
            params: P::FIELDS,
            sm80_only: false,
            sm90a_only: false,
            min_blocks_per_sm: 0,
            block: BLOCK,
            takes: PhantomData,
        }
    }

    /// The descriptor without its parameter type, for the table of all kernels.
    pub const fn erased(self) -> Kernel {
        Kernel {
            name: self.name,
            params: self.params,
            sm80_only: self.sm80_only,
            sm90a_only: self.sm90a_only,
            min_blocks_per_sm: self.min_blocks_per_sm,
            block: self.block,
            takes: PhantomData,
        }
    }

    /// This kernel, in the sm_80 and later builds only.
    pub const fn only_sm80(self) -> Self {
        Kernel {
            sm80_only: true,
            ..self
        }
    }

    /// This kernel, in the sm_90a build only.
    pub const fn only_sm90a(self) -> Self {
        Kernel {
            sm80_only: true,
            sm90a_only: true,
            ..self
        }
    }

    /// This kernel, launched with `threads` threads per block.
    pub const fn threads(self, threads: u32) -> Self {
        Kernel {
            block: threads,
            ..self
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

/// Most candidate rows one seeding pass compares every point with (k-means++: the trials of a
/// step plus the previous step's winner; k-means‖: a group of a round's new candidates): the
/// candidate tile of the seeding kernels (`crate::init`, whose other shapes live there). It
/// stays here because the host's seeding algorithms bound their trials per step by it.
pub const SEED_CANDIDATES: usize = 32;

/// Dynamic shared memory the host is willing to give one block without opting in (48 KiB).
pub const DEFAULT_SHARED_BYTES: usize = 48 * 1024;

/// Blocks of [`BLOCK`] threads that stay resident on a multiprocessor when each takes `bytes` of
/// the `max_shared` a block may have: a multiprocessor has 1 KiB more than that, and the runtime
/// reserves 1 KiB of it per block; at least one, at most eight (2,048 threads).
pub const fn resident_blocks(max_shared: usize, bytes: usize) -> usize {
    let blocks = (max_shared + 1024) / (bytes + 1024);
    if blocks < 1 {
        1
    } else if blocks > 8 {
        8
    } else {
        blocks
    }
}
