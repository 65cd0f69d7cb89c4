//! The Chebyshev and Minkowski distances of a pair as both targets compute them: the plain
//! math the Lp kernels ([`crate::lp`]), the kNN's scalar distance and the host's CPU twin share.

use crate::powers;

/// The exponent `p` of a Minkowski distance: finite and at least 1 (compared by value).
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct MinkowskiP(pub(crate) f64);

impl MinkowskiP {
    /// `p` when it is finite and at least 1.
    pub fn new(p: f64) -> Option<MinkowskiP> {
        (p.is_finite() && p >= 1.0).then_some(MinkowskiP(p))
    }

    /// The exponent.
    pub const fn get(self) -> f64 {
        self.0
    }
}

// Never NaN, and +0 and −0 are both below 1, so equal values have equal bits.
impl Eq for MinkowskiP {}

impl core::hash::Hash for MinkowskiP {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state);
    }
}

/// How one of these distances accumulates a pair and finishes it.
pub trait LpAccumulate: Copy {
    /// The running value of a pair.
    type Acc: Copy;
    /// The value before the first dimension.
    const START: Self::Acc;
    /// Whether the kernel unrolls a full chunk of dimensions (not for long steps: the code
    /// would outgrow the instruction cache).
    const UNROLL: bool;
    /// One dimension's contribution.
    fn step(self, acc: Self::Acc, x: f32, y: f32) -> Self::Acc;
    /// The distance from the running value after the last dimension.
    fn finish(self, acc: Self::Acc) -> f32;
}

/// `max_j |x_j − y_j|`, in f32.
#[derive(Clone, Copy, Debug)]
pub struct Chebyshev;

impl LpAccumulate for Chebyshev {
    type Acc = f32;
    const START: f32 = 0.0;
    const UNROLL: bool = true;

    #[inline(always)]
    fn step(self, acc: f32, x: f32, y: f32) -> f32 {
        // `max.f32` on the GPU; neither operand is NaN (finite inputs) or −0 (`abs`), where
        // the two targets' maximum could differ.
        (x - y).abs().max(acc)
    }

    #[inline(always)]
    fn finish(self, acc: f32) -> f32 {
        acc
    }
}

/// `(Σ_j |x_j − y_j|^p)^(1/p)`, the powers and their sum in f64.
#[derive(Clone, Copy, Debug)]
pub struct Minkowski(pub MinkowskiP);

impl LpAccumulate for Minkowski {
    type Acc = f64;
    const START: f64 = 0.0;
    const UNROLL: bool = false;

    #[inline(always)]
    fn step(self, acc: f64, x: f32, y: f32) -> f64 {
        let t = (x as f64 - y as f64).abs();
        acc + powers::pow(t, self.0.get())
    }

    #[inline(always)]
    fn finish(self, acc: f64) -> f32 {
        powers::root(acc, self.0.get())
    }
}

/// The distance between two equal-length vectors exactly as the kernels compute it.
#[inline(always)]
pub fn distance<A: LpAccumulate>(a: A, x: &[f32], y: &[f32]) -> f32 {
    let mut acc = A::START;
    for (&u, &v) in x.iter().zip(y) {
        acc = a.step(acc, u, v);
    }
    a.finish(acc)
}
