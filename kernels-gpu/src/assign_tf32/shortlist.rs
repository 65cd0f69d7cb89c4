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
//! * The bound. [`super::bound`] proves `fl(T_c − E_c) ≤ S_c` from the point's and the
//!   centroid's norms and measured TF32 rounding residuals. The kernel uses one `Ē ≥ E_c` per
//!   point and centroid tile ([`tile_bound`], from the tile's largest terms), so every centroid
//!   has a lower bound `L_c = fl(T_c − Ē) ≤ S_c`: two operations a pair.
//! * The shortlist. A point keeps its three smallest `L` (the two smallest with their
//!   centroids); every other centroid has `L_c ≥ L₃`, the third. Both kept centroids are scored
//!   exactly; let `B` be the better. The exact winner `c*` has `S_{c*} ≤ B`, so if `L₃ > B`
//!   every centroid not kept has `S_c ≥ L_c > B ≥ S_{c*}` and cannot win: the better of the two
//!   is the exact path's label and distance, bit for bit. Otherwise ([`needs_full_pass`]:
//!   near-ties of three or more centroids, duplicated centroids) every centroid is scored
//!   exactly.
//! * Trust. Where a tile's `Ē` is `+∞` (a score that may not be finite, a NaN in the point or
//!   in a centroid) the point's shortlist is [`Shortlist::UNTRUSTED`], which always takes the
//!   full pass. Centroids past `k` get `T = +∞` (a staged squared norm of `+∞`), so `L = +∞`
//!   and they are never kept.
//!
//! [`l2_score`]: crate::math::l2_score
//! [`better`]: crate::math::better
//! [`tile_bound`]: super::bound::tile_bound
//! [`needs_full_pass`]: Shortlist::needs_full_pass

/// A point's three smallest lower bounds `L`, the first two with their centroids; see the
/// module.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shortlist {
    /// The three smallest `L`, ascending (`+∞` where fewer were inserted).
    pub lower: [f32; 3],
    /// The centroids of `lower[0]` and `lower[1]` (`u32::MAX` where none).
    pub index: [u32; 2],
}

impl Shortlist {
    /// Nothing inserted yet.
    pub const EMPTY: Shortlist = Shortlist {
        lower: [f32::INFINITY; 3],
        index: [u32::MAX; 2],
    };

    /// A shortlist that cannot be trusted: it keeps no centroid, takes none in (nothing is below
    /// `−∞`), survives merges and always takes the full pass.
    pub const UNTRUSTED: Shortlist = Shortlist {
        lower: [f32::NEG_INFINITY; 3],
        index: [u32::MAX; 2],
    };

    /// Puts lower bound `lower` of centroid `index` among the three smallest if it is (NaN
    /// never is: `min` returns the other operand). Two comparisons, minima and selects, no
    /// branches. Where `lower` equals a kept bound, either zero's sign may stay: the bounds are
    /// only compared.
    #[inline(always)]
    pub fn insert(&mut self, lower: f32, index: u32) {
        let [l0, l1, l2] = self.lower;
        let [i0, i1] = self.index;
        let (a, b) = (lower < l0, lower < l1);
        self.lower = [
            l0.min(lower),
            if a { l0 } else { l1.min(lower) },
            if b { l1 } else { l2.min(lower) },
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

    /// Adds the centroids another part of the point's sweep kept. The third lower bound goes in
    /// last, so it can only take the third place (its centroid is not kept).
    #[inline(always)]
    pub fn merge(&mut self, other: Shortlist) {
        self.insert(other.lower[0], other.index[0]);
        self.insert(other.lower[1], other.index[1]);
        self.insert(other.lower[2], u32::MAX);
    }

    /// Whether a centroid not kept may beat `best`, the better exact score of the kept ones
    /// (`+∞` where none): then every centroid is scored exactly.
    #[inline(always)]
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    pub fn needs_full_pass(&self, best: f32) -> bool {
        !(self.lower[2] > best)
    }
}

#[cfg(test)]
mod tests;
