//! Pairwise distance matrices between two sets of vectors, on the GPU or the CPU.
//!
//! Both backends accumulate every distance over the dimensions in order 0..d with the same float
//! operations ([`kernels_gpu::knn`]), so the matrices are identical bit for bit. The L2 family,
//! inner product and cosine use the GEMM form `‖x‖² + ‖y‖² − 2·x·y` (one fused multiply-add per
//! dimension); L1 accumulates `|x − y|` directly; Chebyshev and Minkowski have their own kernels
//! and arithmetic ([`kernels_gpu::lp`]).
//!
//! A matrix that would not fit the memory budget is produced in blocks of whole rows: see
//! [`pairwise_distances_blocks`].

use crate::device::Device;
use crate::error::{Error, Result};
use crate::matrix::MatrixView;
use kernels_gpu::knn::PairMetric;
pub use kernels_gpu::lp::MinkowskiP;
use ndarray::{Array2, ArrayView2, s};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A distance between two vectors.
///
/// For kNN every metric is a *distance* where smaller means nearer, so "ascending" always lists
/// the nearest first: [`DistanceMetric::InnerProduct`] is the **negated** inner product `−x·y`
/// and [`DistanceMetric::Cosine`] is `1 − cos(x, y)` (in [0, 2]; 1 when either vector is zero).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DistanceMetric {
    /// `‖x − y‖` (computed as the square root of the squared distance below).
    #[default]
    Euclidean,
    /// `‖x − y‖² = ‖x‖² + ‖y‖² − 2·x·y`, clamped at 0.
    SqEuclidean,
    /// Manhattan distance `Σ |x_j − y_j|`.
    L1,
    /// Negated inner product `−x·y`: larger products are nearer. Can be negative.
    InnerProduct,
    /// Cosine distance `1 − x·y / (‖x‖·‖y‖)`.
    Cosine,
    /// Chebyshev distance `max_j |x_j − y_j|`.
    Chebyshev,
    /// Minkowski distance `(Σ |x_j − y_j|^p)^(1/p)` for a `p` other than 1 and 2 (made by
    /// [`DistanceMetric::minkowski`], which gives [`DistanceMetric::L1`] and
    /// [`DistanceMetric::Euclidean`] for those): each power and the sum in f64, the root rounded
    /// to f32 (`kernels_gpu::lp`).
    Minkowski(#[serde(with = "exponent")] MinkowskiP),
}

/// `MinkowskiP` as its f64, checked when read back.
mod exponent {
    use super::MinkowskiP;
    use serde::{Deserialize, Deserializer, Serialize, Serializer, de::Error};

    pub fn serialize<S: Serializer>(p: &MinkowskiP, s: S) -> Result<S::Ok, S::Error> {
        p.get().serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<MinkowskiP, D::Error> {
        let p = f64::deserialize(d)?;
        MinkowskiP::new(p).ok_or_else(|| {
            D::Error::custom(format!("Minkowski p = {p} is not a finite number ≥ 1"))
        })
    }
}

impl DistanceMetric {
    /// Every metric without a parameter, in declaration order.
    pub const ALL: [DistanceMetric; 6] = [
        DistanceMetric::Euclidean,
        DistanceMetric::SqEuclidean,
        DistanceMetric::L1,
        DistanceMetric::InnerProduct,
        DistanceMetric::Cosine,
        DistanceMetric::Chebyshev,
    ];

    /// The Minkowski distance of exponent `p` (scikit-learn's `metric="minkowski"`): `p = 1` is
    /// [`DistanceMetric::L1`], `p = 2` [`DistanceMetric::Euclidean`] (their own kernels), any
    /// other finite `p > 1` [`DistanceMetric::Minkowski`]. `p < 1` (not a metric) or a `p` that
    /// is not finite is an [`Error::InvalidParameter`] named `p`; the limit `p = ∞` is
    /// [`DistanceMetric::Chebyshev`].
    pub fn minkowski(p: f64) -> Result<DistanceMetric> {
        match MinkowskiP::new(p) {
            _ if p == 1.0 => Ok(DistanceMetric::L1),
            _ if p == 2.0 => Ok(DistanceMetric::Euclidean),
            Some(p) => Ok(DistanceMetric::Minkowski(p)),
            None => Err(Error::invalid(
                "p",
                format!(
                    "the Minkowski exponent must be a finite number ≥ 1, not {p}{}",
                    if p == f64::INFINITY {
                        " (p = ∞ is the chebyshev metric)"
                    } else {
                        ""
                    }
                ),
            )),
        }
    }

    /// The canonical name (what `Display` prints, without the Minkowski exponent).
    pub const fn name(self) -> &'static str {
        match self {
            DistanceMetric::Euclidean => "euclidean",
            DistanceMetric::SqEuclidean => "sqeuclidean",
            DistanceMetric::L1 => "l1",
            DistanceMetric::InnerProduct => "inner_product",
            DistanceMetric::Cosine => "cosine",
            DistanceMetric::Chebyshev => "chebyshev",
            DistanceMetric::Minkowski(_) => "minkowski",
        }
    }

    /// Whether every distance is ≥ 0 (all but the inner product).
    pub const fn is_non_negative(self) -> bool {
        !matches!(self, DistanceMetric::InnerProduct)
    }

    /// The metric as the kernels name it.
    pub(crate) const fn kernel(self) -> PairMetric {
        match self {
            DistanceMetric::Euclidean => PairMetric::Euclidean,
            DistanceMetric::SqEuclidean => PairMetric::SqEuclidean,
            DistanceMetric::L1 => PairMetric::L1,
            DistanceMetric::InnerProduct => PairMetric::InnerProduct,
            DistanceMetric::Cosine => PairMetric::Cosine,
            DistanceMetric::Chebyshev => PairMetric::Chebyshev,
            DistanceMetric::Minkowski(p) => PairMetric::Minkowski(p),
        }
    }
}

impl fmt::Display for DistanceMetric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DistanceMetric::Minkowski(p) => write!(f, "minkowski:{}", p.get()),
            m => f.write_str(m.name()),
        }
    }
}

impl FromStr for DistanceMetric {
    type Err = Error;

    /// `l2`/`euclidean`, `sqeuclidean` (also `sql2`), `l1`/`manhattan`, `ip`/`inner_product`
    /// (also `dot`), `cosine`, `chebyshev` (also `linf`), `minkowski:P` (any finite `P ≥ 1`,
    /// see [`DistanceMetric::minkowski`]; `minkowski` alone is `P = 2`, as in scikit-learn);
    /// case-insensitive, `-` reads as `_`.
    fn from_str(s: &str) -> Result<Self> {
        let lower = s.trim().to_ascii_lowercase().replace('-', "_");
        if lower.starts_with("minkowski:") {
            // The exponent as written: its own `-` signs stay.
            let p = s.trim()["minkowski:".len()..].trim();
            let p = p
                .parse::<f64>()
                .map_err(|_| Error::invalid("p", format!("'{p}' in '{s}' is not a number")))?;
            return DistanceMetric::minkowski(p);
        }
        Ok(match lower.as_str() {
            "l2" | "euclidean" | "minkowski" => DistanceMetric::Euclidean,
            "sqeuclidean" | "sq_euclidean" | "sql2" | "sq_l2" => DistanceMetric::SqEuclidean,
            "l1" | "manhattan" | "cityblock" => DistanceMetric::L1,
            "ip" | "inner_product" | "innerproduct" | "dot" => DistanceMetric::InnerProduct,
            "cosine" => DistanceMetric::Cosine,
            "chebyshev" | "linf" | "l_inf" | "infinity" => DistanceMetric::Chebyshev,
            _ => {
                return Err(Error::invalid(
                    "metric",
                    format!(
                        "'{s}' is not one of l2, sqeuclidean, l1, ip, cosine, chebyshev, \
                         minkowski:P (P ≥ 1)"
                    ),
                ));
            }
        })
    }
}

/// Validates the two sides of a distance computation.
fn check_pair(a: &MatrixView<'_>, b: &MatrixView<'_>) -> Result<()> {
    a.validate("the first matrix")?;
    b.validate("the second matrix")?;
    b.expect_cols("the second matrix", a.cols())
}

/// The backend for the distances of `a` to `b` on `device` (`Auto`: see [`Device::for_pairs`]).
fn backend_for(
    a: &MatrixView<'_>,
    b: &MatrixView<'_>,
    device: Device,
) -> Result<std::sync::Arc<dyn crate::backend::Backend>> {
    let pairs = a.rows() as f64 * b.rows() as f64;
    device.for_pairs(pairs, a.cols()).backend()
}

/// The full `a.rows() × b.rows()` distance matrix: row `i`, column `j` is the distance from row
/// `i` of `a` to row `j` of `b`.
///
/// The matrix is allocated on the host at once; when it is too large for the device it is still
/// computed in row blocks (see [`pairwise_distances_blocks`] to avoid the host allocation too).
pub fn pairwise_distances<'a, 'b>(
    a: impl Into<MatrixView<'a>>,
    b: impl Into<MatrixView<'b>>,
    metric: DistanceMetric,
    device: Device,
) -> Result<Array2<f32>> {
    let (a, b) = (a.into(), b.into());
    check_pair(&a, &b)?;
    let (rows, cols) = (a.rows(), b.rows());
    let len = rows
        .checked_mul(cols)
        .filter(|&l| l.checked_mul(4).is_some_and(|b| b <= isize::MAX as usize))
        .ok_or_else(|| {
            Error::invalid(
                "input size",
                format!("a {rows} × {cols} distance matrix does not fit in memory"),
            )
        })?;
    let mut out = Array2::<f32>::zeros((rows, cols));
    debug_assert_eq!(out.len(), len);
    let backend = backend_for(&a, &b, device)?;
    backend.pairwise(&a, &b, metric.kernel(), None, &mut |first, block| {
        out.slice_mut(s![first..first + block.nrows(), ..])
            .assign(&block);
        Ok(())
    })?;
    Ok(out)
}

/// The distance matrix of [`pairwise_distances`] in blocks of whole rows, handed to `on_block`
/// with the index of their first row, in row order; the full matrix is never allocated.
///
/// A block holds at most `max_bytes` of distances (but always at least one row); with `None` the
/// backend sizes blocks to its free memory (on the GPU, what the driver reports as free). An
/// error from `on_block` stops the computation and is returned.
pub fn pairwise_distances_blocks<'a, 'b>(
    a: impl Into<MatrixView<'a>>,
    b: impl Into<MatrixView<'b>>,
    metric: DistanceMetric,
    device: Device,
    max_bytes: Option<usize>,
    mut on_block: impl FnMut(usize, ArrayView2<'_, f32>) -> Result<()>,
) -> Result<()> {
    let (a, b) = (a.into(), b.into());
    if max_bytes == Some(0) {
        return Err(Error::invalid("max_bytes", "a block needs at least 1 byte"));
    }
    check_pair(&a, &b)?;
    let backend = backend_for(&a, &b, device)?;
    backend.pairwise(&a, &b, metric.kernel(), max_bytes, &mut on_block)
}

/// Writes the distance matrix of [`pairwise_distances`] to `out` as raw little-endian f32,
/// row-major and without a header (`a.rows() × b.rows()` values), block by block as
/// [`pairwise_distances_blocks`] computes it; returns the number of bytes written. For `.npy` or
/// CSV output use the command line's `distances` command.
pub fn pairwise_distances_to_writer<'a, 'b>(
    a: impl Into<MatrixView<'a>>,
    b: impl Into<MatrixView<'b>>,
    metric: DistanceMetric,
    device: Device,
    max_bytes: Option<usize>,
    mut out: impl std::io::Write,
) -> Result<u64> {
    let mut written = 0u64;
    let mut bytes = Vec::new();
    pairwise_distances_blocks(a, b, metric, device, max_bytes, |_, block| {
        bytes.clear();
        bytes.extend(block.iter().flat_map(|v| v.to_le_bytes()));
        out.write_all(&bytes)
            .map_err(|e| Error::invalid("output", format!("writing the distances failed: {e}")))?;
        written += bytes.len() as u64;
        Ok(())
    })?;
    out.flush()
        .map_err(|e| Error::invalid("output", format!("writing the distances failed: {e}")))?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_round_trip() {
        for m in DistanceMetric::ALL {
            assert_eq!(m.to_string().parse::<DistanceMetric>().unwrap(), m);
        }
        let cases = [
            ("l2", DistanceMetric::Euclidean),
            ("Euclidean", DistanceMetric::Euclidean),
            ("sqeuclidean", DistanceMetric::SqEuclidean),
            ("manhattan", DistanceMetric::L1),
            ("L1", DistanceMetric::L1),
            ("ip", DistanceMetric::InnerProduct),
            ("inner-product", DistanceMetric::InnerProduct),
            ("cosine", DistanceMetric::Cosine),
        ];
        for (s, m) in cases {
            assert_eq!(s.parse::<DistanceMetric>().unwrap(), m, "{s}");
        }
        assert!(matches!(
            "hamming".parse::<DistanceMetric>(),
            Err(Error::InvalidParameter { name: "metric", .. })
        ));
    }

    #[test]
    fn minkowski_exponents() {
        let p3 = DistanceMetric::minkowski(3.0).unwrap();
        assert_eq!(p3, DistanceMetric::Minkowski(MinkowskiP::new(3.0).unwrap()));
        assert_eq!(p3.to_string(), "minkowski:3");
        let p = DistanceMetric::minkowski(1.5).unwrap();
        assert_eq!(p.to_string().parse::<DistanceMetric>().unwrap(), p);
        for (s, m) in [
            ("minkowski:3", p3),
            ("Minkowski: 3.0", p3),
            ("minkowski:3e+0", p3),
            ("minkowski:30e-1", p3),
            ("minkowski:1", DistanceMetric::L1),
            ("minkowski:2", DistanceMetric::Euclidean),
            ("minkowski", DistanceMetric::Euclidean),
            ("chebyshev", DistanceMetric::Chebyshev),
            ("linf", DistanceMetric::Chebyshev),
        ] {
            assert_eq!(s.parse::<DistanceMetric>().unwrap(), m, "{s}");
        }
        assert_eq!(DistanceMetric::Chebyshev.to_string(), "chebyshev");
        for p in [0.5, 0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(
                matches!(
                    DistanceMetric::minkowski(p),
                    Err(Error::InvalidParameter { name: "p", .. })
                ),
                "{p}"
            );
        }
        for s in [
            "minkowski:0.5",
            "minkowski:-3",
            "minkowski:inf",
            "minkowski:x",
            "minkowski:",
        ] {
            assert!(
                matches!(
                    s.parse::<DistanceMetric>(),
                    Err(Error::InvalidParameter { name: "p", .. })
                ),
                "{s}"
            );
        }
        let err = DistanceMetric::minkowski(f64::INFINITY)
            .unwrap_err()
            .to_string();
        assert!(err.contains("chebyshev"), "{err}");
        let err = "minkowski:-3"
            .parse::<DistanceMetric>()
            .unwrap_err()
            .to_string();
        assert!(err.contains("not -3"), "{err}");
        // Serialized as its exponent and checked when read back.
        let json = serde_json::to_string(&p3).unwrap();
        assert_eq!(serde_json::from_str::<DistanceMetric>(&json).unwrap(), p3);
        assert_eq!(json, r#"{"Minkowski":3.0}"#);
        assert!(serde_json::from_str::<DistanceMetric>(r#"{"Minkowski":0.5}"#).is_err());
    }

    #[test]
    fn cpu_matrix_matches_the_reference_formula() {
        let a = [0.0f32, 1.0, 2.0, -1.0, 0.5, 0.5];
        let b = [1.0f32, 1.0, -2.0, 3.0];
        let av = MatrixView::new(&a, 3, 2).unwrap();
        let bv = MatrixView::new(&b, 2, 2).unwrap();
        let lp = [
            DistanceMetric::minkowski(3.0),
            DistanceMetric::minkowski(1.25),
        ];
        for m in DistanceMetric::ALL
            .into_iter()
            .chain(lp.map(Result::unwrap))
        {
            let d = pairwise_distances(&av, &bv, m, Device::Cpu).unwrap();
            for i in 0..3 {
                for j in 0..2 {
                    let expect = kernels_gpu::knn::distance(m.kernel(), av.row(i), bv.row(j));
                    assert_eq!(d[[i, j]].to_bits(), expect.to_bits(), "{m} {i} {j}");
                }
            }
        }
    }

    #[test]
    fn blocks_cover_the_rows_in_order() {
        let a: Vec<f32> = (0..37 * 3).map(|v| (v % 11) as f32).collect();
        let b: Vec<f32> = (0..5 * 3).map(|v| (v % 7) as f32 - 3.0).collect();
        let av = MatrixView::new(&a, 37, 3).unwrap();
        let bv = MatrixView::new(&b, 5, 3).unwrap();
        let full = pairwise_distances(&av, &bv, DistanceMetric::L1, Device::Cpu).unwrap();
        let mut next = 0;
        pairwise_distances_blocks(
            &av,
            &bv,
            DistanceMetric::L1,
            Device::Cpu,
            Some(3 * 5 * 4),
            |first, block| {
                assert_eq!(first, next);
                assert!(block.nrows() <= 3);
                assert_eq!(block, full.slice(s![first..first + block.nrows(), ..]));
                next += block.nrows();
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(next, 37);
    }

    #[test]
    fn writer_gets_the_matrix_row_major() {
        let a = [0.0f32, 1.0, 2.0];
        let b = [0.5f32, -1.0];
        let (av, bv) = (
            MatrixView::new(&a, 3, 1).unwrap(),
            MatrixView::new(&b, 2, 1).unwrap(),
        );
        let mut out = Vec::new();
        let n = pairwise_distances_to_writer(
            &av,
            &bv,
            DistanceMetric::L1,
            Device::Cpu,
            Some(8),
            &mut out,
        )
        .unwrap();
        assert_eq!(n, 24);
        let values: Vec<f32> = out
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(values, vec![0.5, 1.0, 0.5, 2.0, 1.5, 3.0]);
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        let a = [1.0f32, 2.0];
        let b = [1.0f32, 2.0, 3.0];
        let av = MatrixView::new(&a, 1, 2).unwrap();
        let bv = MatrixView::new(&b, 1, 3).unwrap();
        assert!(matches!(
            pairwise_distances(&av, &bv, DistanceMetric::L1, Device::Cpu),
            Err(Error::DimensionMismatch {
                expected: 2,
                got: 3,
                ..
            })
        ));
        let nan = [1.0f32, f32::NAN];
        let nv = MatrixView::new(&nan, 1, 2).unwrap();
        assert!(matches!(
            pairwise_distances(&av, &nv, DistanceMetric::L1, Device::Cpu),
            Err(Error::NonFinite { .. })
        ));
        assert!(matches!(
            pairwise_distances_blocks(
                &av,
                &av,
                DistanceMetric::L1,
                Device::Cpu,
                Some(0),
                |_, _| { Ok(()) }
            ),
            Err(Error::InvalidParameter { .. })
        ));
    }
}
