//! SIMD building blocks of the CPU backend's register-tiled kernels (the k-means assign and the
//! kNN distances): rows regrouped in SIMD-wide panels, the few vector operations the kernels
//! need on AVX-512 and AVX2, and the accumulation of a tile of (row, panel lane) pairs.

use crate::error::{Error, Result};
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;
use std::sync::OnceLock;

/// Rows (centroids, or a kNN index's training rows) regrouped in panels of `w` (the SIMD
/// width): panel `b` holds rows `b·w .. (b+1)·w` dimension-major (`d × w`), zero-padded past
/// `k`; plus their squared norms.
pub(crate) struct Panels {
    pub(crate) data: Vec<f32>,
    pub(crate) sq_norms: Vec<f32>,
    pub(crate) w: usize,
    /// Panels.
    pub(crate) nb: usize,
    /// Rows.
    pub(crate) k: usize,
    pub(crate) d: usize,
}

impl Panels {
    pub(crate) fn new(centroids: &[f32], d: usize, w: usize) -> Self {
        let k = centroids.len() / d;
        let nb = k.div_ceil(w);
        let mut data = vec![0f32; nb * d * w];
        let mut sq_norms = vec![0f32; nb * w];
        for (c, row) in centroids.chunks_exact(d).enumerate() {
            let (b, l) = (c / w, c % w);
            for (j, &v) in row.iter().enumerate() {
                data[(b * d + j) * w + l] = v;
            }
            sq_norms[c] = kernels_gpu::math::sq_norm(row);
        }
        Panels {
            data,
            sq_norms,
            w,
            nb,
            k,
            d,
        }
    }
}

/// The SIMD operations the tiled kernel needs. Every method is `unsafe`: callers must have
/// checked that the CPU has the instruction set (see [`assign_rows`]).
#[cfg(target_arch = "x86_64")]
pub(crate) trait Simd {
    const W: usize;
    type V: Copy;
    type M: Copy;
    type I: Copy;
    unsafe fn zero() -> Self::V;
    unsafe fn splat(v: f32) -> Self::V;
    unsafe fn load(p: *const f32) -> Self::V;
    unsafe fn store(p: *mut f32, v: Self::V);
    /// `fma(a, b, acc)` with one rounding.
    unsafe fn fma(a: Self::V, b: Self::V, acc: Self::V) -> Self::V;
    /// `acc + |x − c|`, each operation rounded like the scalar `l1_step`.
    unsafe fn l1_step(acc: Self::V, x: Self::V, c: Self::V) -> Self::V;
    /// Lanes where `a < b` (false on NaN), restricted to the first `valid` lanes.
    unsafe fn lt(a: Self::V, b: Self::V, valid: usize) -> Self::M;
    unsafe fn blend(m: Self::M, old: Self::V, new: Self::V) -> Self::V;
    unsafe fn blend_idx(m: Self::M, old: Self::I, new: Self::I) -> Self::I;
    /// `[base, base + 1, ..]`.
    unsafe fn iota(base: u32) -> Self::I;
    unsafe fn izero() -> Self::I;
    /// The smallest lane of `best` and, among the lanes holding it, the smallest `idx`; label 0
    /// when no lane is below infinity (no lane of `best` is NaN).
    unsafe fn argmin(best: Self::V, idx: Self::I) -> (f32, u32);
}

#[cfg(target_arch = "x86_64")]
pub(crate) struct Avx512;

#[cfg(target_arch = "x86_64")]
impl Simd for Avx512 {
    const W: usize = 16;
    type V = __m512;
    type M = __mmask16;
    type I = __m512i;
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn splat(v: f32) -> __m512 {
        _mm512_set1_ps(v)
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load(p: *const f32) -> __m512 {
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn store(p: *mut f32, v: __m512) {
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn fma(a: __m512, b: __m512, acc: __m512) -> __m512 {
        _mm512_fmadd_ps(a, b, acc)
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn l1_step(acc: __m512, x: __m512, c: __m512) -> __m512 {
        _mm512_add_ps(acc, _mm512_abs_ps(_mm512_sub_ps(x, c)))
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn lt(a: __m512, b: __m512, valid: usize) -> __mmask16 {
        let valid = if valid >= 16 {
            0xffff
        } else {
            (1u16 << valid) - 1
        };
        _mm512_mask_cmp_ps_mask::<_CMP_LT_OQ>(valid, a, b)
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn blend(m: __mmask16, old: __m512, new: __m512) -> __m512 {
        _mm512_mask_blend_ps(m, old, new)
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn blend_idx(m: __mmask16, old: __m512i, new: __m512i) -> __m512i {
        _mm512_mask_blend_epi32(m, old, new)
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn iota(base: u32) -> __m512i {
        let b = base as i32;
        _mm512_setr_epi32(
            b,
            b + 1,
            b + 2,
            b + 3,
            b + 4,
            b + 5,
            b + 6,
            b + 7,
            b + 8,
            b + 9,
            b + 10,
            b + 11,
            b + 12,
            b + 13,
            b + 14,
            b + 15,
        )
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn izero() -> __m512i {
        _mm512_setzero_si512()
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn argmin(best: __m512, idx: __m512i) -> (f32, u32) {
        let m = _mm512_reduce_min_ps(best);
        if m == f32::INFINITY {
            return (m, 0);
        }
        let at = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(best, _mm512_set1_ps(m));
        (m, _mm512_mask_reduce_min_epu32(at, idx) as u32)
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Simd for Avx2 {
    const W: usize = 8;
    type V = __m256;
    type M = __m256;
    type I = __m256i;
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn zero() -> __m256 {
        _mm256_setzero_ps()
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn splat(v: f32) -> __m256 {
        _mm256_set1_ps(v)
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn load(p: *const f32) -> __m256 {
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn store(p: *mut f32, v: __m256) {
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn fma(a: __m256, b: __m256, acc: __m256) -> __m256 {
        _mm256_fmadd_ps(a, b, acc)
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn l1_step(acc: __m256, x: __m256, c: __m256) -> __m256 {
        let diff = _mm256_sub_ps(x, c);
        _mm256_add_ps(acc, _mm256_andnot_ps(_mm256_set1_ps(-0.0), diff))
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn lt(a: __m256, b: __m256, valid: usize) -> __m256 {
        let m = _mm256_cmp_ps::<_CMP_LT_OQ>(a, b);
        if valid >= 8 {
            m
        } else {
            let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            let keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(valid as i32), lanes);
            _mm256_and_ps(m, _mm256_castsi256_ps(keep))
        }
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn blend(m: __m256, old: __m256, new: __m256) -> __m256 {
        _mm256_blendv_ps(old, new, m)
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn blend_idx(m: __m256, old: __m256i, new: __m256i) -> __m256i {
        _mm256_castps_si256(_mm256_blendv_ps(
            _mm256_castsi256_ps(old),
            _mm256_castsi256_ps(new),
            m,
        ))
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn iota(base: u32) -> __m256i {
        let b = base as i32;
        _mm256_setr_epi32(b, b + 1, b + 2, b + 3, b + 4, b + 5, b + 6, b + 7)
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn izero() -> __m256i {
        _mm256_setzero_si256()
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn argmin(best: __m256, idx: __m256i) -> (f32, u32) {
        let (mut s, mut i) = ([0f32; 8], [0u32; 8]);
        unsafe {
            _mm256_storeu_ps(s.as_mut_ptr(), best);
            _mm256_storeu_si256(i.as_mut_ptr().cast(), idx);
        }
        let m = s.iter().fold(f32::INFINITY, |a, &b| a.min(b));
        if m == f32::INFINITY {
            return (m, 0);
        }
        let label = s.iter().zip(&i).fold(
            u32::MAX,
            |a, (&sl, &il)| if sl == m { a.min(il) } else { a },
        );
        (m, label)
    }
}

/// The accumulators of `P` rows of `x` (row-major, `pn.d` columns) against panels
/// `b0 .. b0 + L`: one per (row, panel lane), each updated over the dimensions in order 0..d with
/// one single-rounding FMA (the dot product) or `acc + |x − y|` (L1) — the arithmetic of the
/// scalar code and the GPU kernels. Every panel vector load feeds `P` multiply-adds and every
/// row broadcast feeds `L`.
///
/// # Safety
/// The CPU has `S`'s instruction set; `x` holds `P` rows of `pn.d` values; `pn.w == S::W`;
/// `b0 + L ≤ pn.nb`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn accumulate<S: Simd, const P: usize, const L: usize, const L1: bool>(
    x: &[f32],
    pn: &Panels,
    b0: usize,
) -> [[S::V; L]; P] {
    let (d, w) = (pn.d, S::W);
    unsafe {
        let mut acc = [[S::zero(); L]; P];
        let panel = pn.data.as_ptr().add(b0 * d * w);
        let xp = x.as_ptr();
        for j in 0..d {
            let mut c = [S::zero(); L];
            for (l, c) in c.iter_mut().enumerate() {
                *c = S::load(panel.add((l * d + j) * w));
            }
            for (p, acc) in acc.iter_mut().enumerate() {
                let v = S::splat(*xp.add(p * d + j));
                for (a, &c) in acc.iter_mut().zip(&c) {
                    *a = if L1 {
                        S::l1_step(*a, v, c)
                    } else {
                        S::fma(v, c, *a)
                    };
                }
            }
        }
        acc
    }
}

/// The instruction sets the CPU kernels choose from, lowest first. Every level gives the same
/// bits (the kernels round each operation as the portable path does); only the speed differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SimdLevel {
    /// Plain Rust, any CPU.
    Portable,
    /// AVX2 with FMA.
    Avx2,
    /// AVX-512 (F).
    Avx512,
}

/// The environment variable that lowers the level below the one detected, to measure or test
/// another level's kernels on one machine: `portable`, `avx2` or `avx512`.
pub const SIMD_ENV: &str = "KMEANS_KNN_CPU_SIMD";

impl SimdLevel {
    /// The name [`SIMD_ENV`] takes.
    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Portable => "portable",
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Avx512 => "avx512",
        }
    }

    /// The best level this CPU has.
    pub fn detected() -> SimdLevel {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f") {
                return SimdLevel::Avx512;
            }
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                return SimdLevel::Avx2;
            }
        }
        SimdLevel::Portable
    }

    /// The level the CPU kernels use: [`SimdLevel::detected`], or the lower one that
    /// [`SIMD_ENV`] asks for (an error names a level that is unknown or above this CPU's).
    /// Read once per process.
    pub fn active() -> Result<SimdLevel> {
        static ACTIVE: OnceLock<std::result::Result<SimdLevel, String>> = OnceLock::new();
        ACTIVE
            .get_or_init(|| choose(std::env::var(SIMD_ENV).ok().as_deref(), Self::detected()))
            .clone()
            .map_err(|reason| Error::invalid(SIMD_ENV, reason))
    }
}

/// The level asked for by `requested` (the variable's value, if set) on a CPU whose best is
/// `detected`.
fn choose(requested: Option<&str>, detected: SimdLevel) -> std::result::Result<SimdLevel, String> {
    let Some(requested) = requested.map(str::trim).filter(|r| !r.is_empty()) else {
        return Ok(detected);
    };
    let level = [SimdLevel::Portable, SimdLevel::Avx2, SimdLevel::Avx512]
        .into_iter()
        .find(|l| l.name().eq_ignore_ascii_case(requested))
        .ok_or_else(|| format!("'{requested}' is not one of portable, avx2, avx512"))?;
    if level > detected {
        return Err(format!(
            "'{requested}' asks for more than this CPU has (its best is {})",
            detected.name()
        ));
    }
    Ok(level)
}

/// The active level; [`SimdLevel::Portable`] where [`SimdLevel::active`] is an error (the CPU
/// backend refuses to start then, so the kernels never see that case).
pub(crate) fn level() -> SimdLevel {
    SimdLevel::active().unwrap_or(SimdLevel::Portable)
}

/// The SIMD width the tiled kernels use at the active level, or `None` where they have no
/// kernel (then the callers use their portable paths).
pub(crate) fn width() -> Option<usize> {
    match level() {
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx512 => Some(Avx512::W),
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2 => Some(Avx2::W),
        _ => None,
    }
}

#[cfg(test)]
mod level_tests {
    use super::{SimdLevel::*, choose};

    #[test]
    fn the_variable_only_lowers_the_level() {
        assert_eq!(choose(None, Avx512), Ok(Avx512));
        assert_eq!(choose(Some(""), Avx2), Ok(Avx2));
        assert_eq!(choose(Some("AVX2"), Avx512), Ok(Avx2));
        assert_eq!(choose(Some("portable"), Avx2), Ok(Portable));
        let above = choose(Some("avx512"), Avx2).unwrap_err();
        assert!(above.contains("its best is avx2"), "{above}");
        let unknown = choose(Some("sse"), Avx512).unwrap_err();
        assert!(unknown.contains("'sse' is not one of"), "{unknown}");
    }
}
