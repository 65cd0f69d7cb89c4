//! Feature scaling fitted on training data and applied to queries (distances weigh every column
//! alike, so columns on very different scales usually need it).

use crate::error::{Error, Result};
use crate::matrix::MatrixView;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A per-column scaling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Scaler {
    /// `(x − mean) / std` with the population standard deviation; a constant column is only
    /// centred.
    ZScore,
    /// `(x − min) / (max − min)`: the training range maps to [0, 1]; a constant column maps to 0.
    MinMax,
}

impl fmt::Display for Scaler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scaler::ZScore => "zscore",
            Scaler::MinMax => "minmax",
        })
    }
}

impl FromStr for Scaler {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s
            .trim()
            .to_ascii_lowercase()
            .replace(['-', '_'], "")
            .as_str()
        {
            "zscore" | "standard" => Ok(Scaler::ZScore),
            "minmax" => Ok(Scaler::MinMax),
            _ => Err(Error::invalid(
                "scaler",
                format!("'{s}' is not one of zscore, minmax"),
            )),
        }
    }
}

/// A scaling fitted on training data: `transform(x)[j] = (x[j] − offset[j]) / scale[j]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FittedScaler {
    kind: Scaler,
    offset: Vec<f64>,
    scale: Vec<f64>,
}

impl Scaler {
    /// Fits the scaling on `data` (non-empty, finite), column by column, in f64.
    pub fn fit<'a>(self, data: impl Into<MatrixView<'a>>) -> Result<FittedScaler> {
        let data = data.into();
        data.validate("the data to fit the scaler on")?;
        let (n, d) = (data.rows(), data.cols());
        let (offset, scale) = match self {
            Scaler::ZScore => {
                let mut mean = vec![0f64; d];
                for i in 0..n {
                    for (m, &v) in mean.iter_mut().zip(data.row(i)) {
                        *m += v as f64;
                    }
                }
                mean.iter_mut().for_each(|m| *m /= n as f64);
                let mut var = vec![0f64; d];
                for i in 0..n {
                    for ((s, &v), &m) in var.iter_mut().zip(data.row(i)).zip(&mean) {
                        let t = v as f64 - m;
                        *s += t * t;
                    }
                }
                let std = var
                    .iter()
                    .map(|&s| {
                        let sd = (s / n as f64).sqrt();
                        if sd > 0.0 { sd } else { 1.0 }
                    })
                    .collect();
                (mean, std)
            }
            Scaler::MinMax => {
                let mut lo = vec![f64::INFINITY; d];
                let mut hi = vec![f64::NEG_INFINITY; d];
                for i in 0..n {
                    for (j, &v) in data.row(i).iter().enumerate() {
                        lo[j] = lo[j].min(v as f64);
                        hi[j] = hi[j].max(v as f64);
                    }
                }
                let range = lo
                    .iter()
                    .zip(&hi)
                    .map(|(&l, &h)| if h > l { h - l } else { 1.0 })
                    .collect();
                (lo, range)
            }
        };
        Ok(FittedScaler {
            kind: self,
            offset,
            scale,
        })
    }
}

impl FittedScaler {
    /// The kind of scaling.
    pub fn kind(&self) -> Scaler {
        self.kind
    }

    /// Number of columns it was fitted on.
    pub fn dim(&self) -> usize {
        self.offset.len()
    }

    /// What is subtracted from each column (mean or minimum).
    pub fn offsets(&self) -> &[f64] {
        &self.offset
    }

    /// What each centred column is divided by (standard deviation or range; 1 when constant).
    pub fn scales(&self) -> &[f64] {
        &self.scale
    }

    /// `data` (finite, the fitted number of columns) scaled, row-major.
    pub fn transform<'a>(&self, data: impl Into<MatrixView<'a>>) -> Result<Vec<f32>> {
        let data = data.into();
        data.validate("the data to scale")?;
        data.expect_cols("the data to scale", self.dim())?;
        let d = self.dim();
        Ok(data
            .as_slice()
            .iter()
            .enumerate()
            .map(|(e, &v)| {
                let j = e % d;
                ((v as f64 - self.offset[j]) / self.scale[j]) as f32
            })
            .collect())
    }

    /// Undoes [`FittedScaler::transform`] (up to rounding).
    pub fn inverse_transform<'a>(&self, data: impl Into<MatrixView<'a>>) -> Result<Vec<f32>> {
        let data = data.into();
        data.validate("the data to unscale")?;
        data.expect_cols("the data to unscale", self.dim())?;
        let d = self.dim();
        Ok(data
            .as_slice()
            .iter()
            .enumerate()
            .map(|(e, &v)| {
                let j = e % d;
                (v as f64 * self.scale[j] + self.offset[j]) as f32
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zscore_centres_and_scales() {
        let x = [1.0f32, 10.0, 3.0, 10.0, 5.0, 10.0];
        let m = MatrixView::new(&x, 3, 2).unwrap();
        let f = Scaler::ZScore.fit(&m).unwrap();
        assert_eq!(f.offsets(), &[3.0, 10.0]);
        let sd = (8.0f64 / 3.0).sqrt();
        assert_eq!(f.scales(), &[sd, 1.0]);
        let t = f.transform(&m).unwrap();
        let expect = [-2.0 / sd, 0.0, 0.0, 0.0, 2.0 / sd, 0.0];
        for (a, b) in t.iter().zip(expect) {
            assert!((*a as f64 - b).abs() < 1e-6);
        }
        let back = f
            .inverse_transform(MatrixView::new(&t, 3, 2).unwrap())
            .unwrap();
        for (a, b) in back.iter().zip(x) {
            assert!((a - b).abs() < 1e-5);
        }
    }

    #[test]
    fn minmax_maps_the_training_range_to_unit() {
        let x = [2.0f32, -1.0, 4.0, -1.0, 3.0, -1.0];
        let f = Scaler::MinMax
            .fit(MatrixView::new(&x, 3, 2).unwrap())
            .unwrap();
        let q = f
            .transform(MatrixView::new(&[2.0, -1.0, 4.0, 5.0, 5.0, 0.0], 3, 2).unwrap())
            .unwrap();
        assert_eq!(q, vec![0.0, 0.0, 1.0, 6.0, 1.5, 1.0]);
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        let f = Scaler::MinMax
            .fit(MatrixView::new(&[1.0, 2.0], 1, 2).unwrap())
            .unwrap();
        assert!(matches!(
            f.transform(MatrixView::new(&[1.0, 2.0, 3.0], 1, 3).unwrap()),
            Err(Error::DimensionMismatch { .. })
        ));
        assert!(matches!(
            Scaler::ZScore.fit(MatrixView::new(&[f32::NAN], 1, 1).unwrap()),
            Err(Error::NonFinite { .. })
        ));
        assert!(matches!(
            f.transform(MatrixView::new(&[], 0, 2).unwrap()),
            Err(Error::EmptyData)
        ));
        assert_eq!("z-score".parse::<Scaler>().unwrap(), Scaler::ZScore);
        assert_eq!("minmax".parse::<Scaler>().unwrap(), Scaler::MinMax);
    }
}
