//! The execution context of the kernel bodies: thread and block index, the block barrier and
//! dynamic shared memory, and the fixed-order reductions and integer atomics bodies share.
//!
//! On nvptx64 `Gpu` reads the special registers (everything inlines to the same PTX as direct
//! calls). In the host's unit tests, `emu` (test builds) runs the very same bodies with one OS thread per GPU
//! thread and a real barrier, so the kernels' indexing, barriers and shared-memory use are
//! exercised without a GPU.

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

/// Adds `v` to the u64 at `p` and returns nothing; integer sums do not depend on the order.
///
/// # Safety
/// As for [`atomic_add_i64`].
#[inline(always)]
pub unsafe fn atomic_add_u64(p: *mut u64, v: u64) {
    unsafe { AtomicU64::from_ptr(p) }.fetch_add(v, Ordering::Relaxed);
}

/// Adds `v` to the u32 at `p` and returns the value it held (a slot in an output list).
///
/// # Safety
/// As for [`atomic_add_i64`].
#[inline(always)]
pub unsafe fn atomic_fetch_add_u32(p: *mut u32, v: u32) -> u32 {
    unsafe { AtomicU32::from_ptr(p) }.fetch_add(v, Ordering::Relaxed)
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
}

/// A host emulator of kernel launches for unit tests: blocks run one after the other, the
/// threads of a block run concurrently as OS threads that meet at a real barrier, and shared
/// memory starts filled with a garbage pattern so that reading it before writing shows.
#[cfg(all(test, not(target_arch = "nvptx64")))]
pub(crate) mod emu {
    use super::Exec;
    use std::sync::Barrier;

    /// One emulated GPU thread.
    #[derive(Clone, Copy)]
    pub(crate) struct Emu<'a> {
        thread: usize,
        block: usize,
        threads: usize,
        grid: usize,
        barrier: &'a Barrier,
        shared: *mut u8,
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
    pub(crate) fn launch(
        grid: usize,
        threads: usize,
        shared_bytes: usize,
        body: impl Fn(Emu<'_>) + Sync,
    ) {
        for block in 0..grid {
            // u128 keeps the shared memory 16-byte aligned, as the vector loads need.
            let mut mem = vec![
                0x5a5a_5a5a_5a5a_5a5a_5a5a_5a5a_5a5a_5a5au128;
                shared_bytes.div_ceil(16).max(1)
            ];
            let shared = P(mem.as_mut_ptr().cast::<u8>());
            let barrier = Barrier::new(threads);
            std::thread::scope(|s| {
                for thread in 0..threads {
                    let (barrier, body) = (&barrier, &body);
                    s.spawn(move || {
                        let shared = shared;
                        body(Emu {
                            thread,
                            block,
                            threads,
                            grid,
                            barrier,
                            shared: shared.get(),
                        })
                    });
                }
            });
        }
    }
}
