//! How k-means measures and computes: the metric that assigns points and the arithmetic of the
//! assignment.

use crate::error::{Error, Result};
use kernels_gpu::math::AssignMetric;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Distance that assigns points to centroids. Centroids are (weighted) label means under every
/// metric, scaled to unit norm under cosine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Metric {
    /// Squared Euclidean distance; inertia is the sum of squared distances.
    #[default]
    L2,
    /// Manhattan distance (robust to outliers; the usual choice for colour segmentation);
    /// inertia is the sum of L1 distances.
    L1,
    /// Spherical k-means: every point is scaled to unit L2 norm (a row of norm 0 is an
    /// [`Error::ZeroVector`]), assigned to the centroid with the largest inner product (ties to
    /// the lowest index), and every centroid is its cluster's mean scaled to unit norm after each
    /// update (as FAISS's `spherical` option). Inertia is `Σ w·(1 − cos)` over the points, the
    /// cosine distance to their centroid; `predict` normalises its queries and `transform` gives
    /// `1 − cos`.
    Cosine,
}

impl Metric {
    /// The kernels' metric: cosine runs the squared-L2 kernels (see
    /// [`crate::backend::LloydSpec::metric`]).
    pub(crate) fn assign(self) -> AssignMetric {
        match self {
            Metric::L2 | Metric::Cosine => AssignMetric::SqL2,
            Metric::L1 => AssignMetric::L1,
        }
    }
}

impl FromStr for Metric {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "l2" | "euclidean" | "sqeuclidean" => Ok(Metric::L2),
            "l1" | "manhattan" => Ok(Metric::L1),
            "cosine" | "spherical" => Ok(Metric::Cosine),
            _ => Err(Error::invalid(
                "metric",
                format!("'{s}' is not one of l2, l1, cosine"),
            )),
        }
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Metric::L2 => "l2",
            Metric::L1 => "l1",
            Metric::Cosine => "cosine",
        })
    }
}

/// Arithmetic of the assignment step. Every choice gives the same labels, distances, centroids,
/// inertia and iteration counts, bit for bit; they differ only in speed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Precision {
    /// [`Precision::Tf32`] where it is faster (squared L2 on a GPU of compute capability 8.0
    /// or later, 32 to 512 dimensions (a multiple of 4) and at least 1,024 clusters, where the
    /// tensor cores pay; see docs/KMEANS.md), [`Precision::Exact`] elsewhere.
    #[default]
    Auto,
    /// FP32 arithmetic only, bit-identical on the CPU and the GPU.
    Exact,
    /// The same answer as [`Precision::Exact`], bit for bit, through a TF32 shortlist: the
    /// distance products on TF32 tensor cores (`mma.sync`, inputs cut to 10-bit mantissas, FP32
    /// accumulation) with a proven bound on their error; every centroid within the bound of a
    /// point's best is re-scored in exact FP32 (usually one or two, all `k` on near-ties), so
    /// labels, distances, centroids, inertia and iteration counts are the exact ones (see
    /// docs/KMEANS.md, "The TF32 assignment"). Squared L2 only, on a GPU of compute capability 8.0 or later (an error on older GPUs); on
    /// the CPU backend the fit is computed exactly (the same answer as [`Precision::Exact`]).
    /// Shapes that the GPU's fused small-shape step serves (up to 96 dimensions with the
    /// centroids in shared memory) are also computed exactly: that step is faster than the
    /// tensor cores there.
    Tf32,
}

impl FromStr for Precision {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(Precision::Auto),
            "exact" | "fp32" => Ok(Precision::Exact),
            "tf32" => Ok(Precision::Tf32),
            _ => Err(Error::invalid(
                "precision",
                format!("'{s}' is not one of auto, exact, tf32"),
            )),
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Precision::Auto => "auto",
            Precision::Exact => "exact",
            Precision::Tf32 => "tf32",
        })
    }
}
