//! The one error type of the library: every failure names what was wrong.

use std::fmt;

/// Result alias of the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong; the `Display` text is one readable sentence.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The input has no rows.
    #[error("the input has no rows")]
    EmptyData,
    /// The input has rows of zero length.
    #[error("the input has zero columns (every row needs at least one value)")]
    ZeroDimension,
    /// A flat buffer does not hold `rows × cols` values.
    #[error("a {rows}×{cols} matrix needs {} values, but the buffer holds {len}", rows * cols)]
    ShapeMismatch {
        len: usize,
        rows: usize,
        cols: usize,
    },
    /// A value is NaN or infinite.
    #[error("{what} has a non-finite value ({value}) at row {row}, column {col} (counting from 0)")]
    NonFinite {
        what: &'static str,
        row: usize,
        col: usize,
        value: f32,
    },
    /// Two inputs disagree on the number of columns.
    #[error("dimension mismatch: {what} has {got} columns, expected {expected}")]
    DimensionMismatch {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    /// A label vector does not hold one label per training row.
    #[error("{labels} labels were given for {rows} training rows (one label per row is needed)")]
    LabelCount { labels: usize, rows: usize },
    /// A target matrix does not hold one row of targets per training row.
    #[error("{targets} target rows were given for {rows} training rows (one per row is needed)")]
    TargetCount { targets: usize, rows: usize },
    /// A sample-weight vector does not hold one weight per row.
    #[error("{weights} sample weights were given for {rows} rows (one weight per row is needed)")]
    SampleWeightCount { weights: usize, rows: usize },
    /// A sample weight is negative, NaN or infinite.
    #[error(
        "sample weight {value} at row {row} (counting from 0) is invalid: weights must be finite \
         and ≥ 0"
    )]
    InvalidSampleWeight { row: usize, value: f32 },
    /// Every sample weight is zero.
    #[error("every sample weight is zero: at least one weight must be positive")]
    ZeroSampleWeights,
    /// A row that must have a direction (cosine) has norm 0 (in f32).
    #[error(
        "{what} has a row of norm 0 at row {row} (counting from 0): the cosine metric needs a \
         non-zero vector"
    )]
    ZeroVector { what: &'static str, row: usize },
    /// A parameter is out of its range.
    #[error("invalid parameter {name}: {reason}")]
    InvalidParameter { name: &'static str, reason: String },
    /// The GPU was asked for and is not usable.
    #[error("no usable CUDA GPU: {0}")]
    NoGpu(String),
    /// The CUDA driver is older than CUDA 12.0 or lacks an entry point the library calls; the
    /// message says what to install. (No driver at all is [`Error::NoGpu`].)
    #[error("unsupported CUDA driver: {0}")]
    UnsupportedDriver(String),
    /// NCCL (for several GPUs) is missing, too old or incomplete; the message lists the files
    /// tried and what to install.
    #[error("NCCL is not usable: {0}")]
    NoNccl(String),
    /// The GPU ran out of memory.
    #[error("out of GPU memory while {context} ({bytes} bytes requested)")]
    GpuOutOfMemory { context: String, bytes: usize },
    /// Another CUDA driver error.
    #[error("CUDA error while {context}: {message}")]
    Cuda { context: String, message: String },
    /// A sharded fit's shards or their transport failed, or sent what the fit cannot use.
    #[error("sharded fit: {0}")]
    Shard(String),
}

impl Error {
    pub(crate) fn invalid(name: &'static str, reason: impl fmt::Display) -> Self {
        Error::InvalidParameter {
            name,
            reason: reason.to_string(),
        }
    }
}

/// `n` bytes for people: "812 bytes", "3.4 MiB", "1.0 TiB".
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} bytes");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}
