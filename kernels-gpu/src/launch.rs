//! What every launch shares: the [`Kernel`] descriptor, the common block sizes, the default
//! shared-memory budget, and the seeding shapes. Each kernel's own launch contract (block shape,
//! grid, shared-memory size) sits next to it, in its module: `assign::AssignTile`,
//! `assign_tf32::tf32_grid`, `small::SMALL_STEPS`, `update::finalize_grid`, `vote::vote_grid`, …

use crate::params::{KernelParams, ParamsLayout};

/// What a kernel's `.entry` declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Params {
    /// This many separate parameters, which its host launcher pushes one by one, in order.
    Listed(usize),
    /// One parameter struct ([`KernelParams`]) passed by value.
    Struct(ParamsLayout),
}

impl Params {
    /// Arguments the host pushes.
    pub const fn count(self) -> usize {
        match self {
            Params::Listed(n) => n,
            Params::Struct(_) => 1,
        }
    }
}

/// A kernel entry point of the committed PTX, exported next to its kernel so that the host
/// names it by constant, never by a string of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// The `.entry` name (the `#[no_mangle]` function).
    pub name: &'static str,
    /// The parameters the entry declares.
    pub params: Params,
    /// Whether only the sm_80 and later PTX builds have it (the TF32 tensor-core kernels).
    pub sm80_only: bool,
    /// Whether only the sm_90a build has it (Hopper's warpgroup `mma`).
    pub sm90a_only: bool,
    /// Blocks of `BLOCK` threads that ptxas must fit on one multiprocessor (`.minnctapersm`,
    /// which `cargo xtask ptx` writes into the PTX: Rust has no `__launch_bounds__`); 0: no bound.
    pub min_blocks_per_sm: u32,
    /// Threads per block it is launched with.
    pub block: u32,
}

impl Kernel {
    /// An entry of every PTX build.
    pub const fn new(name: &'static str, params: usize) -> Self {
        Kernel {
            name,
            params: Params::Listed(params),
            sm80_only: false,
            sm90a_only: false,
            min_blocks_per_sm: 0,
            block: BLOCK,
        }
    }

    /// An entry of every PTX build taking one `P` by value, launched with [`BLOCK`] threads.
    pub const fn entry<P: KernelParams>(name: &'static str) -> Self {
        Kernel {
            params: Params::Struct(ParamsLayout::of::<P>()),
            ..Kernel::new(name, 1)
        }
    }

    /// An entry of the sm_80 build only.
    pub const fn sm80(name: &'static str, params: usize) -> Self {
        Kernel {
            sm80_only: true,
            ..Kernel::new(name, params)
        }
    }

    /// An entry of the sm_90a build only.
    pub const fn sm90a(name: &'static str, params: usize) -> Self {
        Kernel {
            sm90a_only: true,
            ..Kernel::sm80(name, params)
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
