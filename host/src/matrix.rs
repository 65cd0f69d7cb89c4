//! Row-major `f32` matrices as the library takes them.

use crate::error::{Error, Result};
use ndarray::ArrayView2;
use rayon::prelude::*;
use std::borrow::Cow;

/// A row-major matrix of `rows × cols` f32 values, borrowed when it can be.
///
/// Made from a flat slice with [`MatrixView::new`] or from an [`ndarray::ArrayView2`] (copied
/// only when it is not in standard layout).
#[derive(Clone, Debug)]
pub struct MatrixView<'a> {
    data: Cow<'a, [f32]>,
    rows: usize,
    cols: usize,
}

impl<'a> MatrixView<'a> {
    /// Views `data` as `rows × cols`, row-major; fails when the length does not match.
    pub fn new(data: &'a [f32], rows: usize, cols: usize) -> Result<Self> {
        if rows.checked_mul(cols) != Some(data.len()) {
            return Err(Error::ShapeMismatch {
                len: data.len(),
                rows,
                cols,
            });
        }
        Ok(MatrixView {
            data: Cow::Borrowed(data),
            rows,
            cols,
        })
    }

    /// Takes ownership of `data` as `rows × cols`, row-major.
    pub fn from_vec(data: Vec<f32>, rows: usize, cols: usize) -> Result<MatrixView<'static>> {
        if rows.checked_mul(cols) != Some(data.len()) {
            return Err(Error::ShapeMismatch {
                len: data.len(),
                rows,
                cols,
            });
        }
        Ok(MatrixView {
            data: Cow::Owned(data),
            rows,
            cols,
        })
    }

    /// Number of rows (points).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns (dimensions).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The values, row-major.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }

    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.cols..(i + 1) * self.cols]
    }

    /// Checks that the matrix is non-empty and finite; `what` names it in the error.
    pub(crate) fn validate(&self, what: &'static str) -> Result<()> {
        if self.rows == 0 {
            return Err(Error::EmptyData);
        }
        if self.cols == 0 {
            return Err(Error::ZeroDimension);
        }
        let first_bad = self.data.par_iter().position_first(|v| !v.is_finite());
        if let Some(p) = first_bad {
            return Err(Error::NonFinite {
                what,
                row: p / self.cols,
                col: p % self.cols,
                value: self.data[p],
            });
        }
        Ok(())
    }

    /// Checks the column count against `expected`.
    pub(crate) fn expect_cols(&self, what: &'static str, expected: usize) -> Result<()> {
        if self.cols != expected {
            return Err(Error::DimensionMismatch {
                what,
                expected,
                got: self.cols,
            });
        }
        Ok(())
    }
}

impl<'a> From<ArrayView2<'a, f32>> for MatrixView<'a> {
    fn from(a: ArrayView2<'a, f32>) -> Self {
        let (rows, cols) = a.dim();
        let data = match a.to_slice() {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(a.iter().copied().collect()),
        };
        MatrixView { data, rows, cols }
    }
}

impl<'a> From<&'a ndarray::Array2<f32>> for MatrixView<'a> {
    fn from(a: &'a ndarray::Array2<f32>) -> Self {
        a.view().into()
    }
}

impl<'a, 'b> From<&'b MatrixView<'a>> for MatrixView<'b> {
    fn from(m: &'b MatrixView<'a>) -> Self {
        MatrixView {
            data: Cow::Borrowed(&m.data),
            rows: m.rows,
            cols: m.cols,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_must_match() {
        assert!(matches!(
            MatrixView::new(&[1.0, 2.0, 3.0], 2, 2),
            Err(Error::ShapeMismatch {
                len: 3,
                rows: 2,
                cols: 2
            })
        ));
    }

    #[test]
    fn first_non_finite_is_reported() {
        let data = [0.0, 1.0, 2.0, f32::NAN, 4.0, f32::INFINITY];
        let m = MatrixView::new(&data, 3, 2).unwrap();
        match m.validate("data") {
            Err(Error::NonFinite { row: 1, col: 1, .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn non_standard_layout_is_copied_in_row_order() {
        let a = ndarray::array![[1.0f32, 2.0], [3.0, 4.0]];
        let t = a.t();
        let m = MatrixView::from(t);
        assert_eq!(m.as_slice(), &[1.0, 3.0, 2.0, 4.0]);
    }
}
