//! The checks every API that takes sample weights (k-means fits, kNN training rows) makes.

use crate::error::{Error, Result};

/// One weight per row of `rows`, each finite and ≥ 0, not all zero; the error names the first
/// bad row.
pub(crate) fn check(weights: &[f32], rows: usize) -> Result<()> {
    if weights.len() != rows {
        return Err(Error::SampleWeightCount {
            weights: weights.len(),
            rows,
        });
    }
    if let Some(row) = weights.iter().position(|w| !(w.is_finite() && *w >= 0.0)) {
        return Err(Error::InvalidSampleWeight {
            row,
            value: weights[row],
        });
    }
    if weights.iter().all(|&w| w == 0.0) {
        return Err(Error::ZeroSampleWeights);
    }
    Ok(())
}

/// Every weight over the largest (so in `[0, 1]`), as the kNN votes take them; `weights` checked.
pub(crate) fn relative(weights: &[f32]) -> Vec<f32> {
    let max = weights.iter().fold(0f32, |m, &w| m.max(w));
    weights.iter().map(|&w| w / max).collect()
}
