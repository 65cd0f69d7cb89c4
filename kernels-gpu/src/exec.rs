//! The execution context of the kernel bodies: thread and block index, the block barrier,
//! dynamic shared memory and the warp-wide instructions (shuffles, the TF32 `mma`), and the
//! fixed-order reductions and integer atomics bodies share.
//!
//! On nvptx64 `Gpu` reads the special registers and emits the instructions (everything inlines
//! to the same PTX as direct calls). In the host's unit tests, `emu` (test builds) runs the very
//! same bodies with one OS thread per GPU thread and a real barrier, and performs a warp-wide
//! instruction by exchanging the 32 lanes' operands at a barrier of the warp, so the kernels'
//! indexing, barriers, shared-memory use and warp exchanges are exercised without a GPU.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// What a kernel body needs from the machine it runs on.
pub trait Exec: Copy {
    /// Thread index in the block (x).
    fn thread(self) -> usize;
    /// Block index in the grid (x).
    fn block(self) -> usize;
    /// Threads per block (x).
    fn block_dim(self) -> usize;
    /// Blocks in the grid (x).
    fn grid_dim(self) -> usize;
    /// Block-wide barrier; every thread of the block calls it.
    fn sync(self);
    /// The launch's dynamic shared memory, viewed as `T`.
    fn shared<T>(self) -> *mut T;
    /// `v` of lane `lane ^ mask` of this warp (`shfl.sync.bfly`); every lane of the warp calls
    /// it with the same `mask < 32`.
    fn shfl_xor_u32(self, v: u32, mask: u32) -> u32;
    /// `v` of lane `src < 32` of this warp (`shfl.sync.idx`); every lane of the warp calls it.
    fn shfl_idx_u32(self, v: u32, src: u32) -> u32;
    /// `acc += a · b` for one `m16n8k8` TF32 tile with FP32 accumulation (`mma.sync`), warp-wide;
    /// the fragment layout is in [`mma_fragments`]. Every lane of the warp calls it.
    #[cfg(any(not(target_arch = "nvptx64"), target_feature = "sm_80"))]
    fn mma_tf32(self, acc: &mut [f32; 4], a: [u32; 4], b: [u32; 2]);
}

/// Fragment layout of [`Exec::mma_tf32`] (PTX ISA, "Matrix Fragments for mma.m16n8k8", `.tf32`),
/// for lane `l`, `g = l / 4`, `q = l % 4`: A (16 × 8, row major)
/// `a = [A[g][q], A[g + 8][q], A[g][q + 4], A[g + 8][q + 4]]`; B (8 × 8, column major)
/// `b = [B[q][g], B[q + 4][g]]`; C/D (16 × 8)
/// `c = [C[g][2q], C[g][2q + 1], C[g + 8][2q], C[g + 8][2q + 1]]`. The k index is only summed
/// over, so any relabelling of it that A and B share gives the same products.
pub mod mma_fragments {
    /// The (row, k) of A that `a[i]` of lane `lane` holds.
    pub const fn a(lane: usize, i: usize) -> (usize, usize) {
        (lane / 4 + 8 * (i % 2), lane % 4 + 4 * (i / 2))
    }
    /// The (k, column) of B that `b[i]` of lane `lane` holds.
    pub const fn b(lane: usize, i: usize) -> (usize, usize) {
        (lane % 4 + 4 * i, lane / 4)
    }
    /// The (row, column) of C and D that `c[i]` of lane `lane` holds.
    pub const fn c(lane: usize, i: usize) -> (usize, usize) {
        (lane / 4 + 8 * (i / 2), 2 * (lane % 4) + i % 2)
    }
}

/// [`Exec::shfl_xor_u32`] of a u64, as two 32-bit shuffles (low word first).
#[inline(always)]
pub fn shfl_xor_u64<E: Exec>(e: E, v: u64, mask: u32) -> u64 {
    let lo = e.shfl_xor_u32(v as u32, mask) as u64;
    let hi = e.shfl_xor_u32((v >> 32) as u32, mask) as u64;
    (hi << 32) | lo
}

/// [`Exec::shfl_xor_u32`] of an f32's bits.
#[inline(always)]
pub fn shfl_xor_f32<E: Exec>(e: E, v: f32, mask: u32) -> f32 {
    f32::from_bits(e.shfl_xor_u32(v.to_bits(), mask))
}

/// Sums one f64 per thread in a fixed tree order and returns the total to every thread, so the
/// result is the same float run after run.
///
/// # Safety
/// As for [`block_sums`] with one value.
#[inline(always)]
pub unsafe fn block_sum_f64<E: Exec>(e: E, threads: usize, scratch: *mut f64, value: f64) -> f64 {
    unsafe { block_sums(e, threads, scratch, [value])[0] }
}

/// [`block_sum_f64`] of `N` values per thread at once: one barrier per tree level for all of
/// them, and each total is the same float as its own `block_sum_f64` would give.
///
/// # Safety
/// `scratch` holds `N · threads` f64 of shared memory, `threads` (the block size) is a power of
/// two, and every thread of the block calls this.
#[inline(always)]
pub unsafe fn block_sums<const N: usize, E: Exec>(
    e: E,
    threads: usize,
    scratch: *mut f64,
    values: [f64; N],
) -> [f64; N] {
    let t = e.thread();
    let slot = |v: usize, i: usize| unsafe { scratch.add(v * threads + i) };
    unsafe {
        for (v, &value) in values.iter().enumerate() {
            *slot(v, t) = value;
        }
        e.sync();
        let mut stride = threads / 2;
        while stride > 0 {
            if t < stride {
                for v in 0..N {
                    *slot(v, t) += *slot(v, t + stride);
                }
            }
            e.sync();
            stride /= 2;
        }
        let mut totals = [0.0; N];
        for (v, total) in totals.iter_mut().enumerate() {
            *total = *slot(v, 0);
        }
        e.sync();
        totals
    }
}

/// Sums one i64 per thread (wrapping, like the GPU's integer adds) and returns the total to every
/// thread; integer sums are the same in any order. `scratch` is f64 scratch reused as i64.
///
/// # Safety
/// As for [`block_sums`] with one value.
#[inline(always)]
pub unsafe fn block_sum_i64<E: Exec>(e: E, threads: usize, scratch: *mut f64, value: i64) -> i64 {
    let t = e.thread();
    let slots = scratch.cast::<i64>();
    unsafe {
        *slots.add(t) = value;
        e.sync();
        let mut stride = threads / 2;
        while stride > 0 {
            if t < stride {
                *slots.add(t) = (*slots.add(t)).wrapping_add(*slots.add(t + stride));
            }
            e.sync();
            stride /= 2;
        }
        let total = *slots;
        e.sync();
        total
    }
}

/// Totals over the block of `N` values a thread (as bits), each combined by `add(i, a, b)` (the
/// value's index and two partials; 0 bits must be its identity): by shuffles within each warp,
/// then the warps' partials by the first warp, with two barriers instead of a tree's one per
/// level. The order of the additions is fixed by the block's shape, and is not the CPU's: for
/// exact sums, or float sums whose last bits the caller does not rely on. Every thread gets the
/// totals.
///
/// # Safety
/// `threads` is a multiple of 32 up to 1,024; `scratch` holds `33 · N` u64 of shared memory that
/// no thread touches meanwhile; every thread of the block calls this.
#[inline(always)]
pub unsafe fn block_totals<const N: usize, E: Exec>(
    e: E,
    threads: usize,
    scratch: *mut u64,
    values: [u64; N],
    add: impl Fn(usize, u64, u64) -> u64,
) -> [u64; N] {
    let (warp, lane) = (e.thread() / 32, e.thread() % 32);
    let warp_total = |mut v: [u64; N]| {
        let mut mask = 16;
        while mask > 0 {
            for (i, v) in v.iter_mut().enumerate() {
                *v = add(i, *v, shfl_xor_u64(e, *v, mask));
            }
            mask /= 2;
        }
        v
    };
    let v = warp_total(values);
    if lane == 0 {
        for (i, &v) in v.iter().enumerate() {
            unsafe { *scratch.add(i * 32 + warp) = v };
        }
    }
    e.sync();
    let totals = unsafe { scratch.add(32 * N) };
    if warp == 0 {
        let parts = core::array::from_fn(|i| match lane < threads / 32 {
            true => unsafe { *scratch.add(i * 32 + lane) },
            false => 0,
        });
        let v = warp_total(parts);
        if lane == 0 {
            for (i, &v) in v.iter().enumerate() {
                unsafe { *totals.add(i) = v };
            }
        }
    }
    e.sync();
    core::array::from_fn(|i| unsafe { *totals.add(i) })
}

/// Turns `values[t]` (one u32 per thread) into the inclusive prefix sum `values[0] + … +
/// values[t]` in place (Hillis–Steele: a barrier per doubling of the stride while it is below
/// `len`); slots past `len` take part and hold sums of their own. Ends synchronised.
///
/// # Safety
/// `values` holds one u32 per thread of the block in shared memory, written before a barrier;
/// every thread of the block calls this.
#[inline(always)]
pub unsafe fn inclusive_scan_u32<E: Exec>(e: E, values: *mut u32, len: usize) {
    let t = e.thread();
    let mut stride = 1;
    while stride < len {
        let add = if t >= stride {
            unsafe { *values.add(t - stride) }
        } else {
            0
        };
        e.sync();
        unsafe { *values.add(t) += add };
        e.sync();
        stride *= 2;
    }
}

/// `offsets[c] = counts[0] + … + counts[c − 1]` for `c < k`: each thread scans a contiguous
/// segment of the counts, then the segment totals are scanned across the block.
///
/// # Safety
/// `counts` and `offsets` hold `k` u32 and `scratch` `BLOCK` f64 of shared memory; every thread
/// of the block calls this.
#[inline(always)]
pub unsafe fn exclusive_scan<E: Exec>(
    e: E,
    counts: *const u32,
    offsets: *mut u32,
    k: usize,
    scratch: *mut f64,
) {
    let (t, threads) = (e.thread(), crate::launch::BLOCK as usize);
    let per = k.div_ceil(threads);
    let (from, to) = ((t * per).min(k), ((t + 1) * per).min(k));
    let mut running = 0u32;
    for c in from..to {
        unsafe { *offsets.add(c) = running };
        running += unsafe { *counts.add(c) };
    }
    // Hillis–Steele inclusive scan of the segment totals, over the segments that exist.
    let segments = k.div_ceil(per.max(1));
    let totals = scratch.cast::<u32>();
    unsafe { *totals.add(t) = running };
    e.sync();
    unsafe { inclusive_scan_u32(e, totals, segments) };
    let start = unsafe { *totals.add(t) } - running;
    for c in from..to {
        unsafe { *offsets.add(c) += start };
    }
    e.sync();
}

/// Integer add into shared or global memory; integer sums do not depend on the order.
///
/// # Safety
/// `p` is valid, aligned and shared only through atomics.
#[inline(always)]
pub unsafe fn atomic_add_i64(p: *mut i64, v: i64) {
    unsafe { AtomicU64::from_ptr(p.cast::<u64>()) }.fetch_add(v as u64, Ordering::Relaxed);
}

/// See [`atomic_add_i64`].
///
/// # Safety
/// As for [`atomic_add_i64`].
#[inline(always)]
pub unsafe fn atomic_add_u32(p: *mut u32, v: u32) {
    unsafe { AtomicU32::from_ptr(p) }.fetch_add(v, Ordering::Relaxed);
}

/// Sets the bits of `v` in the u32 at `p` (flags that threads raise in any order).
///
/// # Safety
/// As for [`atomic_add_i64`].
#[inline(always)]
pub unsafe fn atomic_or_u32(p: *mut u32, v: u32) {
    unsafe { AtomicU32::from_ptr(p) }.fetch_or(v, Ordering::Relaxed);
}

/// Adds `v` to the u64 at `p` and returns nothing; integer sums do not depend on the order.
///
/// # Safety
/// As for [`atomic_add_i64`].
#[inline(always)]
pub unsafe fn atomic_add_u64(p: *mut u64, v: u64) {
    unsafe { AtomicU64::from_ptr(p) }.fetch_add(v, Ordering::Relaxed);
}

/// Adds `v` to the u64 at `p` in shared memory as two native 32-bit atomic adds, the low
/// word's carry going into the high word. ptxas lowers a 64-bit shared-memory atomic add to a
/// compare-and-swap loop (sm_70 through sm_90), which contending lanes retry; the two words
/// need no loop, and the sum is exact because the lane whose add wraps the low word adds the
/// carry to the high one.
///
/// # Safety
/// `p` is valid and 8-byte aligned, and until the block's next barrier it is touched only
/// through this function.
#[inline(always)]
pub unsafe fn shared_add_u64(p: *mut u64, v: u64) {
    const { assert!(cfg!(target_endian = "little"), "the low word comes first") };
    let words = p.cast::<u32>();
    let (low, high) = (v as u32, (v >> 32) as u32);
    let before = unsafe { atomic_fetch_add_u32(words, low) };
    let high = high.wrapping_add(before.overflowing_add(low).1 as u32);
    if high != 0 {
        unsafe { atomic_add_u32(words.add(1), high) };
    }
}

/// [`shared_add_u64`] of a two's complement i64 (fixed-point sums).
///
/// # Safety
/// As for [`shared_add_u64`].
#[inline(always)]
pub unsafe fn shared_add_i64(p: *mut i64, v: i64) {
    unsafe { shared_add_u64(p.cast::<u64>(), v as u64) };
}

/// Adds `v` to the u32 at `p` and returns the value it held (a slot in an output list).
///
/// # Safety
/// As for [`atomic_add_i64`].
#[inline(always)]
pub unsafe fn atomic_fetch_add_u32(p: *mut u32, v: u32) -> u32 {
    unsafe { AtomicU32::from_ptr(p) }.fetch_add(v, Ordering::Relaxed)
}

/// Orders this thread's global memory accesses before and after it for every thread of the
/// device (`fence.acq_rel.gpu`): the last block of a grid to arrive sees what the others wrote
/// before they arrived.
#[inline(always)]
pub fn fence_device() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: a memory fence; no operands.
    unsafe {
        core::arch::asm!("fence.acq_rel.gpu;", options(nostack))
    };
    #[cfg(not(target_arch = "nvptx64"))]
    core::sync::atomic::fence(Ordering::SeqCst);
}

/// Waits until the kernel before this one in its stream has finished and its writes are
/// visible (`griddepcontrol.wait`): the host may let a kernel that calls this before reading
/// anything that kernel wrote start while the one before it ends (programmatic dependent
/// launch, sm_90's image only). Elsewhere, and for a launch without that permission, it returns
/// at once.
#[inline(always)]
pub fn wait_for_prior_grid() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
    // SAFETY: a wait on the launch's prerequisites; no operands.
    unsafe {
        core::arch::asm!("griddepcontrol.wait;", options(nostack))
    };
}

/// Lets the kernel after this one in its stream start now, if the host allowed it to start
/// early (`griddepcontrol.launch_dependents`): its blocks may then run the part before their
/// [`wait_for_prior_grid`] beside this kernel's. Elsewhere it does nothing.
#[inline(always)]
pub fn launch_dependents() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
    // SAFETY: a scheduling hint; no operands, no memory effect.
    unsafe {
        core::arch::asm!("griddepcontrol.launch_dependents;", options(nostack))
    };
}

/// The GPU itself.
#[cfg(target_arch = "nvptx64")]
#[derive(Clone, Copy)]
pub struct Gpu;

#[cfg(target_arch = "nvptx64")]
impl Exec for Gpu {
    #[inline(always)]
    fn thread(self) -> usize {
        // SAFETY: reads a special register.
        unsafe { core::arch::nvptx::_thread_idx_x() as usize }
    }
    #[inline(always)]
    fn block(self) -> usize {
        // SAFETY: reads a special register.
        unsafe { core::arch::nvptx::_block_idx_x() as usize }
    }
    #[inline(always)]
    fn block_dim(self) -> usize {
        // SAFETY: reads a special register.
        unsafe { core::arch::nvptx::_block_dim_x() as usize }
    }
    #[inline(always)]
    fn grid_dim(self) -> usize {
        // SAFETY: reads a special register.
        unsafe { core::arch::nvptx::_grid_dim_x() as usize }
    }
    #[inline(always)]
    fn sync(self) {
        // SAFETY: every kernel calls this from all threads of the block (no divergent barriers).
        unsafe { core::arch::nvptx::_syncthreads() }
    }
    #[inline(always)]
    fn shared<T>(self) -> *mut T {
        core::intrinsics::gpu::gpu_launch_sized_workgroup_mem::<T>()
    }
    #[inline(always)]
    fn shfl_xor_u32(self, v: u32, mask: u32) -> u32 {
        let r: u32;
        // SAFETY: register-only; every lane of the warp executes it (full member mask).
        unsafe {
            core::arch::asm!("shfl.sync.bfly.b32 {r}, {v}, {m}, 31, -1;", r = out(reg32) r,
                v = in(reg32) v, m = in(reg32) mask, options(nomem, nostack))
        };
        r
    }
    #[inline(always)]
    fn shfl_idx_u32(self, v: u32, src: u32) -> u32 {
        let r: u32;
        // SAFETY: register-only; every lane of the warp executes it (full member mask).
        unsafe {
            core::arch::asm!("shfl.sync.idx.b32 {r}, {v}, {s}, 31, -1;", r = out(reg32) r,
                v = in(reg32) v, s = in(reg32) src, options(nomem, nostack))
        };
        r
    }
    #[cfg(target_feature = "sm_80")]
    #[inline(always)]
    fn mma_tf32(self, acc: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
        // SAFETY: register-only; every lane of the warp executes it (no divergence around it).
        unsafe {
            core::arch::asm!(
                "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {{{0}, {1}, {2}, {3}}}, {{{4}, {5}, {6}, {7}}}, {{{8}, {9}}}, {{{0}, {1}, {2}, {3}}};",
                inout(reg32) acc[0],
                inout(reg32) acc[1],
                inout(reg32) acc[2],
                inout(reg32) acc[3],
                in(reg32) a[0],
                in(reg32) a[1],
                in(reg32) a[2],
                in(reg32) a[3],
                in(reg32) b[0],
                in(reg32) b[1],
                options(nomem, nostack)
            )
        };
    }
}

/// A host emulator of kernel launches for unit tests: blocks run one after the other, the
/// threads of a block run concurrently as OS threads that meet at a real barrier, and shared
/// memory starts filled with a garbage pattern so that reading it before writing shows. A
/// warp-wide instruction publishes each lane's operands in its warp's exchange, waits for the
/// warp's 32 lanes, computes the lane's result from all of them and waits again before the
/// exchange is reused.
#[cfg(all(test, not(target_arch = "nvptx64")))]
pub(crate) mod emu {
    use super::{Exec, mma_fragments};
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::sync::{Barrier, Mutex};

    /// Words a lane publishes for one warp-wide instruction: an `mma`'s A, B and C fragments.
    const WORDS: usize = 10;

    /// The warp's meeting point.
    struct Warp {
        barrier: Barrier,
        words: Mutex<[[u32; WORDS]; 32]>,
    }

    impl Warp {
        /// Every lane's `mine`, once each lane of the warp has published its own.
        fn exchange(&self, lane: usize, mine: &[u32]) -> [[u32; WORDS]; 32] {
            self.words.lock().unwrap()[lane][..mine.len()].copy_from_slice(mine);
            self.barrier.wait();
            let all = *self.words.lock().unwrap();
            self.barrier.wait();
            all
        }
    }

    /// One emulated GPU thread.
    #[derive(Clone, Copy)]
    pub(crate) struct Emu<'a> {
        thread: usize,
        block: usize,
        threads: usize,
        grid: usize,
        barrier: &'a Barrier,
        warp: &'a Warp,
        shared: *mut u8,
    }

    impl Emu<'_> {
        fn lane(self) -> usize {
            self.thread % 32
        }
    }

    impl Exec for Emu<'_> {
        fn thread(self) -> usize {
            self.thread
        }
        fn block(self) -> usize {
            self.block
        }
        fn block_dim(self) -> usize {
            self.threads
        }
        fn grid_dim(self) -> usize {
            self.grid
        }
        fn sync(self) {
            self.barrier.wait();
        }
        fn shared<T>(self) -> *mut T {
            self.shared.cast()
        }
        fn shfl_xor_u32(self, v: u32, mask: u32) -> u32 {
            assert!(mask < 32, "shuffle mask {mask}");
            self.warp.exchange(self.lane(), &[v])[self.lane() ^ mask as usize][0]
        }
        fn shfl_idx_u32(self, v: u32, src: u32) -> u32 {
            assert!(src < 32, "shuffle source lane {src}");
            self.warp.exchange(self.lane(), &[v])[src as usize][0]
        }
        /// The tensor core's contract: operands read as TF32 (the low 13 bits of each word
        /// ignored), exact products, FP32 sums. The order of the sums is the hardware's own and
        /// unspecified; this one adds the k products in order, then C.
        fn mma_tf32(self, acc: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
            let mut mine = [0u32; WORDS];
            mine[..4].copy_from_slice(&a);
            mine[4..6].copy_from_slice(&b);
            for (w, c) in mine[6..].iter_mut().zip(acc.iter()) {
                *w = c.to_bits();
            }
            let all = self.warp.exchange(self.lane(), &mine);
            let tf32 = |w: u32| f32::from_bits(w & !0x1fff);
            let (mut am, mut bm) = ([[0f32; 8]; 16], [[0f32; 8]; 8]);
            for (lane, words) in all.iter().enumerate() {
                for (i, &w) in words[..4].iter().enumerate() {
                    let (r, k) = mma_fragments::a(lane, i);
                    am[r][k] = tf32(w);
                }
                for (i, &w) in words[4..6].iter().enumerate() {
                    let (k, c) = mma_fragments::b(lane, i);
                    bm[k][c] = tf32(w);
                }
            }
            for (i, out) in acc.iter_mut().enumerate() {
                let (r, c) = mma_fragments::c(self.lane(), i);
                let products = (0..8).fold(0f32, |s, k| s + am[r][k] * bm[k][c]);
                *out += products;
            }
        }
    }

    /// `cp.async` in the emulator: each emulated thread's copies wait in their commit groups
    /// until it waits for them, so a kernel that reads a stage before waiting for it (or lets
    /// another thread's copy overwrite a stage still in use) reads stale or garbage values, as
    /// it could on the GPU.
    pub(crate) mod async_copy {
        use std::cell::{Cell, RefCell};

        /// A copy in flight: its destination, its source (null: zero-fill) and its length.
        type Copy = (*mut u8, *const u8, usize);

        thread_local! {
            static SHARED: Cell<*mut u8> = const { Cell::new(core::ptr::null_mut()) };
            /// The committed groups, oldest first, then the copies not committed yet.
            static GROUPS: RefCell<Vec<Vec<Copy>>> = const { RefCell::new(Vec::new()) };
            static OPEN: RefCell<Vec<Copy>> = const { RefCell::new(Vec::new()) };
        }

        /// Sets this OS thread's shared memory (the emulated thread it runs).
        pub(super) fn enter(shared: *mut u8) {
            SHARED.with(|s| s.set(shared));
            GROUPS.with(|g| g.borrow_mut().clear());
            OPEN.with(|o| o.borrow_mut().clear());
        }

        /// The shared-window address of `p`: its offset in the block's shared memory.
        pub(crate) fn shared_addr<T>(p: *mut T) -> u32 {
            let base = SHARED.with(|s| s.get());
            (p as usize - base as usize) as u32
        }

        /// Starts a copy of `bytes` of `src` (the rest of `size` zero-filled) to `dst`.
        pub(crate) fn start(dst: u32, src: *const u8, bytes: usize, size: usize) {
            let at = SHARED.with(|s| s.get()).wrapping_add(dst as usize);
            assert!(
                bytes == 0 || bytes == size,
                "partial copies are not emulated"
            );
            let src = if bytes == 0 { core::ptr::null() } else { src };
            OPEN.with(|o| o.borrow_mut().push((at, src, size)));
        }

        /// Closes the open copies into a group.
        pub(crate) fn commit() {
            let open = OPEN.with(|o| std::mem::take(&mut *o.borrow_mut()));
            GROUPS.with(|g| g.borrow_mut().push(open));
        }

        /// Lands every group but the `pending` most recent (all copies with `None`).
        pub(crate) fn wait(pending: Option<usize>) {
            let mut groups = GROUPS.with(|g| std::mem::take(&mut *g.borrow_mut()));
            if pending.is_none() {
                groups.push(OPEN.with(|o| std::mem::take(&mut *o.borrow_mut())));
            }
            let keep = pending.unwrap_or(0).min(groups.len());
            let kept = groups.split_off(groups.len() - keep);
            for (dst, src, size) in groups.into_iter().flatten() {
                // SAFETY: the kernel's copies name its shared memory and its input buffers.
                unsafe {
                    if src.is_null() {
                        dst.write_bytes(0, size);
                    } else {
                        dst.copy_from_nonoverlapping(src, size);
                    }
                }
            }
            GROUPS.with(|g| *g.borrow_mut() = kept);
        }
    }

    /// A pointer that may cross threads (the kernels synchronise their own accesses).
    #[derive(Clone, Copy)]
    pub(crate) struct P<T>(pub *mut T);
    unsafe impl<T> Send for P<T> {}
    unsafe impl<T> Sync for P<T> {}

    impl<T> P<T> {
        pub(crate) fn of(v: &mut [T]) -> Self {
            P(v.as_mut_ptr())
        }
        pub(crate) fn get(self) -> *mut T {
            self.0
        }
    }

    /// Runs `body` as `grid` blocks of `threads` threads with `shared_bytes` of shared memory.
    ///
    /// One OS thread per GPU thread runs every block in turn (spawning them per block made
    /// thousands of short-lived threads a test, and a run of several emulated kernels at once
    /// died in `pthread_detach` of an exited thread); each is joined, not detached. A panic in
    /// a kernel body aborts the process: the block's other threads would wait for it forever.
    pub(crate) fn launch(
        grid: usize,
        threads: usize,
        shared_bytes: usize,
        body: impl Fn(Emu<'_>) + Sync,
    ) {
        // u128 keeps the shared memory 16-byte aligned, as the vector loads need.
        const GARBAGE: u128 = 0x5a5a_5a5a_5a5a_5a5a_5a5a_5a5a_5a5a_5a5a;
        let mut mem = vec![GARBAGE; shared_bytes.div_ceil(16).max(1)];
        let (words, shared) = (mem.len(), P(mem.as_mut_ptr()));
        let barrier = Barrier::new(threads);
        let warps: Vec<Warp> = (0..threads.div_ceil(32))
            .map(|w| Warp {
                barrier: Barrier::new((threads - 32 * w).min(32)),
                words: Mutex::new([[0; WORDS]; 32]),
            })
            .collect();
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|thread| {
                    let (barrier, warp, body) = (&barrier, &warps[thread / 32], &body);
                    s.spawn(move || {
                        let shared = shared;
                        for block in 0..grid {
                            // Every thread has left the previous block (the barrier at its end),
                            // so its shared memory may start over as garbage.
                            if thread == 0 && block > 0 {
                                // SAFETY: no other thread touches `mem` until the barrier.
                                unsafe { core::slice::from_raw_parts_mut(shared.get(), words) }
                                    .fill(GARBAGE);
                            }
                            barrier.wait();
                            async_copy::enter(shared.get().cast());
                            let emu = Emu {
                                thread,
                                block,
                                threads,
                                grid,
                                barrier,
                                warp,
                                shared: shared.get().cast(),
                            };
                            if catch_unwind(AssertUnwindSafe(|| body(emu))).is_err() {
                                eprintln!("emulated thread {thread} of block {block} panicked");
                                std::process::abort();
                            }
                            barrier.wait();
                        }
                    })
                })
                .collect();
            for handle in handles {
                handle.join().expect("emulated threads abort on panic");
            }
        });
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use crate::exec::{block_totals, shared_add_i64};

        /// Shuffles reach the partner lane (by mask and by index), and the emulated `mma` is the
        /// 16 × 8 × 8 product of the PTX layout (checked on small integers, whose sums are exact
        /// in any order).
        #[test]
        fn warp_instructions_follow_the_ptx_layout() {
            let a = |r: usize, k: usize| (r * 8 + k) as f32 - 50.0;
            let b = |k: usize, c: usize| (k as f32 - 3.0) * (c as f32 + 1.0);
            let mut out = vec![[0u32; 3]; 64];
            let outp = P::of(&mut out);
            launch(1, 64, 0, |e| {
                let lane = e.thread() % 32;
                let other = e.shfl_xor_u32(e.thread() as u32, 5);
                let picked = e.shfl_idx_u32(3 * e.thread() as u32, (7 * lane % 32) as u32);
                let mut acc = [0f32; 4];
                for (i, c) in acc.iter_mut().enumerate() {
                    let (r, col) = mma_fragments::c(lane, i);
                    *c = (r * 100 + col) as f32;
                }
                let fa = [0, 1, 2, 3].map(|i| {
                    let (r, k) = mma_fragments::a(lane, i);
                    a(r, k).to_bits()
                });
                let fb = [0, 1].map(|i| {
                    let (k, c) = mma_fragments::b(lane, i);
                    b(k, c).to_bits()
                });
                e.mma_tf32(&mut acc, fa, fb);
                let mut wrong = 0;
                for (i, &got) in acc.iter().enumerate() {
                    let (r, c) = mma_fragments::c(lane, i);
                    let want =
                        (r * 100 + c) as f32 + (0..8).map(|k| a(r, k) * b(k, c)).sum::<f32>();
                    wrong += u32::from(got != want);
                }
                unsafe { *outp.get().add(e.thread()) = [other, picked, wrong] };
            });
            for (t, &[other, picked, wrong]) in out.iter().enumerate() {
                assert_eq!(other as usize, t ^ 5, "thread {t}");
                assert_eq!(
                    picked as usize,
                    3 * (t / 32 * 32 + 7 * (t % 32) % 32),
                    "thread {t}"
                );
                assert_eq!(wrong, 0, "thread {t}");
            }
        }

        /// Each GPU thread index runs on one OS thread for every block of a launch, and every
        /// block's shared memory starts as the garbage pattern whatever the block before wrote.
        #[test]
        fn blocks_reuse_their_threads_and_start_from_garbage() {
            let (grid, threads) = (5, 64);
            let ids = Mutex::new(vec![None; grid * threads]);
            let mut seen = vec![0u32; grid * threads];
            let seenp = P::of(&mut seen);
            launch(grid, threads, threads * 4, |e| {
                let mine = unsafe { e.shared::<u32>().add(e.thread()) };
                let slot = e.block() * threads + e.thread();
                unsafe { *seenp.get().add(slot) = *mine };
                e.sync();
                unsafe { *mine = slot as u32 };
                ids.lock().unwrap()[slot] = Some(std::thread::current().id());
            });
            assert!(seen.iter().all(|&w| w == 0x5a5a_5a5a));
            let ids = ids.into_inner().unwrap();
            for t in 0..threads {
                assert!(
                    (1..grid).all(|b| ids[b * threads + t] == ids[t]),
                    "thread {t}"
                );
            }
            let mut firsts: Vec<_> = ids[..threads].iter().map(|id| format!("{id:?}")).collect();
            firsts.sort();
            firsts.dedup();
            assert_eq!(firsts.len(), threads);
        }

        /// Block totals reach every thread: wrapping i64 sums and exact small f64 sums, on blocks
        /// of one warp, of three (not a power of two) and of 32.
        #[test]
        fn block_totals_add_every_thread() {
            for threads in [32, 96, 1024] {
                let mut out = vec![[0u64; 2]; threads];
                let outp = P::of(&mut out);
                launch(1, threads, 33 * 2 * 8, |e| {
                    let t = e.thread() as i64;
                    let values = [(i64::MAX - t).cast_unsigned(), (t as f64).to_bits()];
                    let add = |i: usize, a: u64, b: u64| match i {
                        0 => a.wrapping_add(b),
                        _ => (f64::from_bits(a) + f64::from_bits(b)).to_bits(),
                    };
                    let totals = unsafe { block_totals(e, threads, e.shared(), values, add) };
                    unsafe { *outp.get().add(e.thread()) = totals };
                });
                let n = threads as i64;
                let want_i = (0..n).fold(0i64, |s, t| s.wrapping_add(i64::MAX - t));
                let want_f = (n * (n - 1) / 2) as f64;
                for &[i, f] in &out {
                    assert_eq!(i.cast_signed(), want_i, "{threads} threads");
                    assert_eq!(f64::from_bits(f), want_f, "{threads} threads");
                }
            }
        }

        /// Two-word shared adds are exact 64-bit sums: low words that wrap (carries), negative
        /// values (high word all ones), values of only a high word, and zero, from 96 threads
        /// at once into four slots.
        #[test]
        fn shared_adds_carry_into_the_high_word() {
            let threads = 96;
            let value = |t: usize| -> i64 {
                match t % 4 {
                    0 => 0xffff_fff0 + t as i64,
                    1 => -(t as i64) * 0x1_0000_0001,
                    2 => (t as i64) << 32,
                    _ => 0,
                }
            };
            let mut out = vec![0i64; 4];
            let outp = P::of(&mut out);
            launch(1, threads, 4 * 8, |e| {
                let slots = e.shared::<i64>();
                if e.thread() < 4 {
                    unsafe { *slots.add(e.thread()) = i64::MAX - e.thread() as i64 };
                }
                e.sync();
                for slot in 0..4 {
                    unsafe { shared_add_i64(slots.add(slot), value(e.thread() + slot)) };
                }
                e.sync();
                if e.thread() < 4 {
                    unsafe { *outp.get().add(e.thread()) = *slots.add(e.thread()) };
                }
            });
            for (slot, &got) in out.iter().enumerate() {
                let want = (0..threads).fold(i64::MAX - slot as i64, |s, t| {
                    s.wrapping_add(value(t + slot))
                });
                assert_eq!(got, want, "slot {slot}");
            }
        }

        /// The layout itself, for lane 5 (group 1, thread 1 in the group) and lane 30 (7, 2), as
        /// the PTX ISA's figures for `.tf32` give it.
        #[test]
        fn fragments_are_the_ptx_isa_figures() {
            let lanes = |f: fn(usize, usize) -> (usize, usize), lane, n| {
                (0..n).map(|i| f(lane, i)).collect::<Vec<_>>()
            };
            use mma_fragments::{a, b, c};
            assert_eq!(lanes(a, 5, 4), [(1, 1), (9, 1), (1, 5), (9, 5)]);
            assert_eq!(lanes(b, 5, 2), [(1, 1), (5, 1)]);
            assert_eq!(lanes(c, 5, 4), [(1, 2), (1, 3), (9, 2), (9, 3)]);
            assert_eq!(lanes(a, 30, 4), [(7, 2), (15, 2), (7, 6), (15, 6)]);
            assert_eq!(lanes(b, 30, 2), [(2, 7), (6, 7)]);
            assert_eq!(lanes(c, 30, 4), [(7, 4), (7, 5), (15, 4), (15, 5)]);
        }
    }
}
