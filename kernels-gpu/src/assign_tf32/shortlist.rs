//! Which centroids `kmeans_assign_l2_tf32` must re-score exactly for a point, from its TF32
//! scores and a proven bound on their error.
//!
//! # Why the re-check finds the exact label
//! The exact path ranks centroid `c` by `S_c = fl(‖c‖² − 2·dot)` (one FMA, [`l2_score`]) with
//! `dot` the dimension-ordered FMA chain, lowest index on ties ([`better`]). The tensor cores
//! give `T_c`, the same formula on the TF32 dot product: points rounded to 10-bit mantissas
//! (`cvt.rna`), centroids read as raw f32 (truncated or rounded to 10 bits), exact products,
//! FP32 accumulation.
//!
//! * The bound. [`super::bound`] proves `|T_c − S_c| ≤ E_c` from the point's and the
//!   centroid's norms and measured TF32 rounding residuals, including the roundings of forming
//!   `E_c`, `T_c − E_c` and `T_c + E_c` in f32. It holds whenever `T_c` and `E_c` are finite.
//! * The set. `L_c = T_c − E_c ≤ S_c ≤ T_c + E_c = U_c`. The exact winner `c*` has
//!   `S_{c*} ≤ S_c ≤ U_c` for every `c`, so `L_{c*} ≤ min_c U_c =: U`: every centroid with
//!   `L_c > U` loses to `c*` and need not be scored. A centroid whose `T_c` or `E_c` is not
//!   finite gets `L_c = −∞` (always kept) and adds nothing to `U`.
//! * The shortlist. A point keeps its three smallest `L` (the two smallest with their centroids)
//!   and `U`. If the third smallest `L` is above `U`, at most the two kept centroids can win:
//!   the exact scores of both decide, with the exact path's arithmetic and tie rule, so the
//!   label and the distance are the exact path's bit for bit. Otherwise ([`needs_full_pass`],
//!   near-ties of three or more centroids, duplicated centroids, `k ≤ 2`) every centroid is
//!   scored exactly.
//!
//! [`l2_score`]: crate::math::l2_score
//! [`better`]: crate::math::better
//! [`needs_full_pass`]: Shortlist::needs_full_pass

/// A point's three smallest lower bounds `L` (the first two with their centroids) and its
/// smallest upper bound `U`; see the module.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shortlist {
    /// The three smallest `L`, ascending (`+∞` where fewer were offered).
    pub lower: [f32; 3],
    /// The centroids of `lower[0]` and `lower[1]` (`u32::MAX` where none).
    pub index: [u32; 2],
    /// The smallest `U` (`+∞` where none is finite).
    pub upper: f32,
}

impl Shortlist {
    /// Nothing offered yet.
    pub const EMPTY: Shortlist = Shortlist {
        lower: [f32::INFINITY; 3],
        index: [u32::MAX; 2],
        upper: f32::INFINITY,
    };

    /// Offers centroid `index` with TF32 score `score` and error bound `bound` (nothing when
    /// `valid` is false). Selects only, no branches.
    #[inline(always)]
    pub fn offer(&mut self, valid: bool, score: f32, bound: f32, index: u32) {
        let finite = score.abs() < f32::INFINITY && bound < f32::INFINITY;
        let lower = if !valid {
            f32::INFINITY
        } else if finite {
            score - bound
        } else {
            f32::NEG_INFINITY
        };
        let upper = if valid & finite {
            score + bound
        } else {
            f32::INFINITY
        };
        self.upper = if upper < self.upper {
            upper
        } else {
            self.upper
        };
        self.insert(lower, index);
    }

    /// Puts lower bound `lower` of centroid `index` among the three smallest if it is.
    #[inline(always)]
    pub fn insert(&mut self, lower: f32, index: u32) {
        let [l0, l1, l2] = self.lower;
        let [i0, i1] = self.index;
        let (a, b, c) = (lower < l0, lower < l1, lower < l2);
        self.lower = [
            if a { lower } else { l0 },
            if a {
                l0
            } else if b {
                lower
            } else {
                l1
            },
            if b {
                l1
            } else if c {
                lower
            } else {
                l2
            },
        ];
        self.index = [
            if a { index } else { i0 },
            if a {
                i0
            } else if b {
                index
            } else {
                i1
            },
        ];
    }

    /// Adds the centroids another part of the point's sweep offered. The third lower bound goes
    /// in last, so it can only take the third place (its centroid is not kept).
    #[inline(always)]
    pub fn merge(&mut self, other: Shortlist) {
        self.upper = if other.upper < self.upper {
            other.upper
        } else {
            self.upper
        };
        self.insert(other.lower[0], other.index[0]);
        self.insert(other.lower[1], other.index[1]);
        self.insert(other.lower[2], u32::MAX);
    }

    /// Whether more than the two kept centroids may win: then every centroid is scored exactly.
    #[inline(always)]
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    pub fn needs_full_pass(&self) -> bool {
        !(self.lower[2] > self.upper)
    }
}

#[cfg(test)]
mod tests;
