//! Row-major `f32` matrices as the library takes them.

use crate::error::{Error, Result};
use ndarray::ArrayView2;
use rayon::prelude::*;
use std::borrow::Cow;

/// Values per parallel task of the finiteness check.
const FINITE_CHUNK: usize = 1 << 18;

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

    /// The values, row-major: moved out when the view owns them, else copied.
    pub(crate) fn into_vec(self) -> Vec<f32> {
        self.data.into_owned()
    }

    /// Checks that the matrix is non-empty and finite; `what` names it in the error.
    pub(crate) fn validate(&self, what: &'static str) -> Result<()> {
        self.validate_shape()?;
        self.check_finite(what)
    }

    /// Checks that the matrix has rows and columns.
    pub(crate) fn validate_shape(&self) -> Result<()> {
        if self.rows == 0 {
            return Err(Error::EmptyData);
        }
        if self.cols == 0 {
            return Err(Error::ZeroDimension);
        }
        Ok(())
    }

    /// `work()` with the values checked finite meanwhile (on the rayon threads, when there is
    /// more than a chunk of them; before it, when fewer): a bad value's error wins and `work`'s
    /// result is dropped. For work that is harmless on any values, such as a search: scanning
    /// 10^4 queries of 128 dimensions first held a search on four GPUs back by 0.3–0.46 ms.
    pub(crate) fn checked_during<T>(
        &self,
        what: &'static str,
        work: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        if self.data.len() <= FINITE_CHUNK {
            self.check_finite(what)?;
            return work();
        }
        let mut values = Ok(());
        let done = rayon::in_place_scope(|s| {
            s.spawn(|_| values = self.check_finite(what));
            work()
        });
        values?;
        done
    }

    /// Checks that every value is finite; `what` names the matrix in the error.
    fn check_finite(&self, what: &'static str) -> Result<()> {
        // Whole chunks, each a branch-free pass the compiler vectorises, in parallel only when
        // there are several (waking the thread pool costs more than checking a small matrix);
        // only a chunk that fails is searched for its first bad value.
        let finite = |c: &[f32]| c.iter().fold(true, |ok, v| ok & v.is_finite());
        let bad_chunk = if self.data.len() <= 4 * FINITE_CHUNK {
            self.data.chunks(FINITE_CHUNK).position(|c| !finite(c))
        } else {
            self.data
                .par_chunks(FINITE_CHUNK)
                .position_first(|c| !finite(c))
        };
        let first_bad = bad_chunk.map(|c| {
            let chunk = &self.data[c * FINITE_CHUNK..];
            c * FINITE_CHUNK
                + chunk
                    .iter()
                    .position(|v| !v.is_finite())
                    .expect("a bad value")
        });
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

    /// A copy with every row scaled to unit L2 norm ([`kernels_gpu::math::normalize`], the same
    /// bits on every backend), for the cosine metric; a row of norm 0 is an
    /// [`Error::ZeroVector`] naming `what` and the row.
    pub(crate) fn normalized(&self, what: &'static str) -> Result<MatrixView<'static>> {
        let mut data = self.data.to_vec();
        let zero = data
            .par_chunks_mut(self.cols.max(1))
            .enumerate()
            .filter_map(|(row, values)| {
                let zero = kernels_gpu::math::sq_norm(values) == 0.0;
                kernels_gpu::math::normalize(values);
                zero.then_some(row)
            })
            .min();
        match zero {
            Some(row) => Err(Error::ZeroVector { what, row }),
            None => MatrixView::from_vec(data, self.rows, self.cols),
        }
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
    fn first_non_finite_is_found_across_chunks() {
        // Three chunks are checked in order, six in parallel.
        let cols = 7;
        for (chunks, first) in [3, 6]
            .into_iter()
            .flat_map(|c| [FINITE_CHUNK - 1, FINITE_CHUNK, 2 * FINITE_CHUNK + 5].map(|f| (c, f)))
        {
            let rows = chunks * FINITE_CHUNK / cols;
            let mut data = vec![1.0f32; rows * cols];
            data[first] = f32::NEG_INFINITY;
            data[first + 3] = f32::NAN;
            data[rows * cols - 1] = f32::NAN;
            let m = MatrixView::new(&data, rows, cols).unwrap();
            match m.validate("data") {
                Err(Error::NonFinite { row, col, .. }) => {
                    assert_eq!((row, col), (first / cols, first % cols))
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn normalized_rows_have_unit_norm_and_zero_rows_are_named() {
        let m = MatrixView::new(&[3.0, 4.0, 0.0, 2.0], 2, 2).unwrap();
        assert_eq!(m.normalized("x").unwrap().as_slice(), &[0.6, 0.8, 0.0, 1.0]);
        let z = MatrixView::new(&[1.0, 0.0, 0.0, 0.0, 0.0, 0.0], 3, 2).unwrap();
        assert!(matches!(
            z.normalized("the data"),
            Err(Error::ZeroVector {
                what: "the data",
                row: 1
            })
        ));
    }

    #[test]
    fn non_standard_layout_is_copied_in_row_order() {
        let a = ndarray::array![[1.0f32, 2.0], [3.0, 4.0]];
        let t = a.t();
        let m = MatrixView::from(t);
        assert_eq!(m.as_slice(), &[1.0, 3.0, 2.0, 4.0]);
    }
}
