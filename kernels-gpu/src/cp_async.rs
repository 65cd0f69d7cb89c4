//! Asynchronous global → shared copies (`cp.async`, sm_80 and later), for every kernel that
//! stages tiles with them (FP32 assign, TF32 assign, TF32 kNN scan). In the host's tests the
//! emulator performs them (`exec::emu::async_copy`: each lands when its thread waits for it).

#[cfg(not(target_arch = "nvptx64"))]
use crate::exec::emu::async_copy;
#[cfg(target_arch = "nvptx64")]
use core::arch::asm;

/// The shared-window address of a generic pointer into shared memory.
#[inline(always)]
pub fn shared_addr<T>(p: *mut T) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    let a = {
        let a: u64;
        // SAFETY: an address conversion in registers.
        unsafe {
            asm!("cvta.to.shared.u64 {a}, {p};", a = out(reg64) a, p = in(reg64) p,
                options(pure, nomem, nostack))
        };
        a as u32
    };
    #[cfg(not(target_arch = "nvptx64"))]
    let a = async_copy::shared_addr(p);
    a
}

/// Starts an asynchronous copy of the f32 at global `src` to shared address `dst`; with `bytes`
/// 0 nothing is read and `dst` gets zero.
///
/// # Safety
/// `src` valid for `bytes` (0 or 4); both 4-byte aligned.
#[inline(always)]
pub unsafe fn copy_4(dst: u32, src: *const f32, bytes: u32) {
    #[cfg(not(target_arch = "nvptx64"))]
    async_copy::start(dst, src.cast(), bytes as usize, 4);
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        asm!("cp.async.ca.shared.global [{d}], [{s}], 4, {b};", d = in(reg32) dst,
            s = in(reg64) src, b = in(reg32) bytes, options(nostack))
    };
}

/// As [`copy_4`] for 16 bytes (`bytes` 0 or 16; the rest of the 16 zero-filled).
///
/// # Safety
/// `src` valid for `bytes`; both 16-byte aligned.
#[inline(always)]
pub unsafe fn copy_16(dst: u32, src: *const f32, bytes: u32) {
    #[cfg(not(target_arch = "nvptx64"))]
    async_copy::start(dst, src.cast(), bytes as usize, 16);
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        asm!("cp.async.cg.shared.global [{d}], [{s}], 16, {b};", d = in(reg32) dst,
            s = in(reg64) src, b = in(reg32) bytes, options(nostack))
    };
}

/// Starts copying rows `first..first + ROWS`, columns `j0..j0 + COLS` of a row-major `total × d`
/// matrix to shared address `dst` (row-major, `STRIDE` words a row), zeros past `total` and `d`:
/// 16 bytes a copy with `vec`, else 4. Thread `t` of `THREADS` takes every `THREADS`-th copy, so
/// consecutive threads read consecutive words of a row. Commits nothing.
///
/// # Safety
/// `src` holds `total × d` values (16-byte aligned rows with `vec`, `COLS` then a multiple of 4);
/// `dst` holds `ROWS × STRIDE` words.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn copy_rows<
    const ROWS: usize,
    const COLS: usize,
    const STRIDE: usize,
    const THREADS: usize,
>(
    t: usize,
    vec: bool,
    src: *const f32,
    total: usize,
    d: usize,
    first: usize,
    j0: usize,
    dst: u32,
) {
    let w = if vec { 4 } else { 1 };
    for u in 0..ROWS * COLS / w / THREADS {
        let e = t + u * THREADS;
        let (r, jj) = (e / (COLS / w), (e % (COLS / w)) * w);
        let (row, col) = (first + r, j0 + jj);
        let ok = row < total && col < d;
        let p = if ok {
            unsafe { src.add(row * d + col) }
        } else {
            src
        };
        let at = dst + 4 * (r * STRIDE + jj) as u32;
        unsafe {
            if vec {
                copy_16(at, p, if ok { 16 } else { 0 });
            } else {
                copy_4(at, p, if ok { 4 } else { 0 });
            }
        }
    }
}

/// Starts copying rows `first..first + ROWS` (zeros past `total`), columns `j0..j0 + width` of a
/// row-major `total × d` matrix, transposed, to shared address `dst` (`dst[jj * stride + r]`),
/// 4 bytes a copy. Thread `t` of `THREADS` copies column `t % CHUNK` of every
/// `THREADS / CHUNK`-th row, so consecutive threads read consecutive words of a row. Columns
/// `width..CHUNK` are left as they were. Commits nothing.
///
/// # Safety
/// `src` holds `total × d` values, `j0 + width ≤ d`, `width ≤ CHUNK`, `CHUNK` divides
/// `THREADS`; `dst` holds `CHUNK × stride` words with `stride ≥ ROWS`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn copy_transposed<const ROWS: usize, const CHUNK: usize, const THREADS: usize>(
    t: usize,
    src: *const f32,
    total: usize,
    d: usize,
    first: usize,
    j0: usize,
    width: usize,
    dst: u32,
    stride: usize,
) {
    let per_pass = THREADS / CHUNK;
    let (r0, jj) = (t / CHUNK, t % CHUNK);
    if jj < width {
        for u in 0..ROWS.div_ceil(per_pass) {
            let r = r0 + u * per_pass;
            if ROWS.is_multiple_of(per_pass) || r < ROWS {
                let row = first + r;
                let ok = row < total;
                let p = if ok {
                    unsafe { src.add(row * d + j0 + jj) }
                } else {
                    src
                };
                let at = dst + (4 * (jj * stride + r)) as u32;
                unsafe { copy_4(at, p, if ok { 4 } else { 0 }) };
            }
        }
    }
}

/// Closes the group of copies this thread started so far.
#[inline(always)]
pub fn commit() {
    #[cfg(not(target_arch = "nvptx64"))]
    async_copy::commit();
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no operands.
    unsafe {
        asm!("cp.async.commit_group;", options(nostack))
    };
}

/// Waits until at most `N` of this thread's most recent groups are still in flight.
#[inline(always)]
pub fn wait_group<const N: usize>() {
    #[cfg(not(target_arch = "nvptx64"))]
    async_copy::wait(Some(N));
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no operands.
    unsafe {
        asm!("cp.async.wait_group {n};", n = const N, options(nostack))
    };
}

/// Waits until every copy this thread started has landed (visible to this thread).
#[inline(always)]
pub fn wait_all() {
    #[cfg(not(target_arch = "nvptx64"))]
    async_copy::wait(None);
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no operands.
    unsafe {
        asm!("cp.async.wait_all;", options(nostack))
    };
}

/// The dynamic shared memory of this launch, in bytes (`%dynamic_smem_size`).
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
pub fn dynamic_shared_bytes() -> u32 {
    let n: u32;
    // SAFETY: reads a special register.
    unsafe {
        asm!("mov.u32 {n}, %dynamic_smem_size;", n = out(reg32) n,
            options(pure, nomem, nostack))
    };
    n
}
