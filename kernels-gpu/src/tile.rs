//! Shared-memory tile staging used by the register-tiled kernels (assign, distances): rows of a
//! row-major matrix copied in transposed, then read back as 16-byte vectors. Plain Rust with the
//! thread index passed in, so the host emulator runs the same code.

/// Four f32 that load as one 16-byte shared-memory access.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct Vec4([f32; 4]);

/// `N` consecutive f32 from `p` as `N / 4` vector loads (and `N % 4` scalar ones after them).
///
/// # Safety
/// `p` is 16-byte aligned and valid for `N` values.
#[inline(always)]
pub unsafe fn load_vec4s<const N: usize>(p: *const f32) -> [f32; N] {
    let mut out = [0f32; N];
    let v = p.cast::<Vec4>();
    for h in 0..N / 4 {
        let Vec4(q) = unsafe { *v.add(h) };
        out[4 * h..4 * h + 4].copy_from_slice(&q);
    }
    for (c, o) in out.iter_mut().enumerate().skip(N / 4 * 4) {
        *o = unsafe { *p.add(c) };
    }
    out
}

/// Calls `f` with each of the `d` values at `row` in order, `N` (a multiple of 4) loaded at a
/// time where the row is 16-byte aligned: a thread that owns a whole row would otherwise wait
/// a memory round trip per value.
///
/// # Safety
/// `row` is valid for `d` values.
#[inline(always)]
pub unsafe fn for_each_in_row<const N: usize>(row: *const f32, d: usize, mut f: impl FnMut(f32)) {
    let mut j = 0;
    if (row as usize).is_multiple_of(16) {
        while j + N <= d {
            let v: [f32; N] = unsafe { load_vec4s(row.add(j)) };
            // By reference: an array iterated by value stays in local memory.
            for v in &v {
                f(*v);
            }
            j += N;
        }
    }
    while j < d {
        f(unsafe { *row.add(j) });
        j += 1;
    }
}

/// Stores four f32 at `p` as one 16-byte access.
///
/// # Safety
/// `p` is 16-byte aligned and valid for 4 values.
#[inline(always)]
pub unsafe fn store_vec4(p: *mut f32, v: [f32; 4]) {
    unsafe { *p.cast::<Vec4>() = Vec4(v) };
}

/// Copies rows `first..first + rows` (clipped to `total`), columns `j0..j0 + width` of a
/// row-major `total × d` matrix into `dst` transposed (`dst[jj * stride + r]`), zeros past the
/// last row. Thread `thread` of `threads` takes every `threads`-th element; consecutive threads
/// read consecutive columns of a row. `CHUNK` (a power of two, ≥ `width`) fixes the element →
/// (row, column) split without a division.
///
/// # Safety
/// `src` holds `total × d` values, `j0 + width ≤ d`; `dst` holds `width × stride` values with
/// `stride ≥ rows`; every thread of the block calls this between the same barriers.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn load_transposed<const CHUNK: usize>(
    thread: usize,
    threads: usize,
    src: *const f32,
    total: usize,
    d: usize,
    first: usize,
    rows: usize,
    j0: usize,
    width: usize,
    dst: *mut f32,
    stride: usize,
) {
    let mut e = thread;
    while e < rows * CHUNK {
        let (r, jj) = (e / CHUNK, e % CHUNK);
        if jj < width {
            let row = first + r;
            let v = if row < total {
                unsafe { *src.add(row * d + j0 + jj) }
            } else {
                0.0
            };
            unsafe { *dst.add(jj * stride + r) = v };
        }
        e += threads;
    }
}
