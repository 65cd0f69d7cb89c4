//! Staging of the small step: points and centroids copied into shared memory, and the
//! centroids' squared norms.

use super::Step;
use crate::exec::Exec;
use crate::launch::BLOCK;
use crate::math::fma;
use crate::tile::{load_vec4s, store_vec4};

/// Copies `rows` rows of `d` values (a contiguous run at `src`) into shared memory, row `r` at
/// `dst[r · stride..]`, and zeroes the rows' padding; consecutive threads read consecutive
/// values, so the loads coalesce. With `src` 16-byte aligned the run is read a quad at a time,
/// four loads in flight per thread (a quad spans at most two rows when `d ≥ 4`). No barrier.
#[inline(always)]
pub(super) unsafe fn stage_rows<E: Exec>(
    e: E,
    src: *const f32,
    rows: usize,
    d: usize,
    dst: *mut f32,
    stride: usize,
) {
    let (t, threads, d, stride) = (e.thread() as u32, BLOCK, d as u32, stride as u32);
    let len = rows as u32 * d;
    let at = |r: u32, j: u32| (r * stride + j) as usize;
    if (src as usize).is_multiple_of(16) && (stride == d || d >= 4) {
        let quads = len / 4;
        // Quad q starts at element 4q = r·d + j; stepping q by `threads` steps (r, j) by
        // (4·threads / d, 4·threads % d).
        let (dr, dj) = (4 * threads / d, 4 * threads % d);
        let (mut r, mut j) = (4 * t / d, 4 * t % d);
        let mut q = t;
        while q < quads {
            let mut v = [[0f32; 4]; 4];
            for (u, v) in v.iter_mut().enumerate() {
                let qu = q + u as u32 * threads;
                if qu < quads {
                    *v = unsafe { load_vec4s(src.add(4 * qu as usize)) };
                }
            }
            for v in &v {
                if q < quads {
                    if stride == d {
                        unsafe { store_vec4(dst.add(4 * q as usize), *v) };
                    } else {
                        for l in 0..4 {
                            let jl = j + l;
                            let to = if jl < d { at(r, jl) } else { at(r + 1, jl - d) };
                            unsafe { *dst.add(to) = v[l as usize] };
                        }
                    }
                }
                q += threads;
                r += dr;
                j += dj;
                if j >= d {
                    j -= d;
                    r += 1;
                }
            }
        }
        let i = 4 * quads + t;
        if i < len {
            unsafe { *dst.add(at(i / d, i % d)) = *src.add(i as usize) };
        }
    } else {
        // Element i = r·d + j; stepping i by `threads` steps (r, j) by (threads / d, threads % d).
        let (dr, dj) = (threads / d, threads % d);
        let (mut r, mut j) = (t / d, t % d);
        let mut i = t;
        while i < len {
            unsafe { *dst.add(at(r, j)) = *src.add(i as usize) };
            i += threads;
            r += dr;
            j += dj;
            if j >= d {
                j -= d;
                r += 1;
            }
        }
    }
    if stride > d {
        let mut r = t;
        while r < rows as u32 {
            for j in d..stride {
                unsafe { *dst.add(at(r, j)) = 0.0 };
            }
            r += threads;
        }
    }
}

/// The staged centroids' squared norms (squared L2 only), in dimension order as `row_sq_norms`
/// computes them: a quad at a time, the zero padding leaving the sums unchanged. With
/// `norm_in_padding` (the 4-dimension kernel's exact scans of fewer than four dimensions) each
/// norm also goes to its row's padding word, which the scan reads with the coordinates (one
/// shared load per centroid instead of two).
///
/// # Safety
/// The centroids are staged (rows of `d4` words) and a barrier has passed.
#[inline(always)]
pub(super) unsafe fn centroid_norms<E: Exec>(
    e: E,
    s: &Step,
    cs: *mut f32,
    cn: *mut f32,
    d4: usize,
    norm_in_padding: bool,
) {
    let mut c = e.thread();
    while c < s.k {
        let norm = unsafe { quads_sq_norm(cs.add(c * d4), d4 / 4) };
        unsafe { *cn.add(c) = norm };
        if norm_in_padding {
            // The padding word of the centroid's only quad, read with its coordinates.
            unsafe { *cs.add(c * d4 + 3) = norm };
        }
        c += BLOCK as usize;
    }
}

/// The squared norm of a staged row's first `quads` quads, in dimension order as `row_sq_norms`
/// computes it (zero padding leaves it unchanged), read 16 bytes at a time.
///
/// # Safety
/// `row` is 16-byte aligned and holds `4 · quads` words.
#[inline(always)]
pub(super) unsafe fn quads_sq_norm(row: *const f32, quads: usize) -> f32 {
    let mut norm = 0.0;
    for j4 in 0..quads {
        let v: [f32; 4] = unsafe { load_vec4s(row.add(4 * j4)) };
        for &w in &v {
            norm = fma(w, w, norm);
        }
    }
    norm
}
