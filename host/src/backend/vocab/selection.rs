//! How a kNN search selects each query's k nearest, and what its TF32 prefilter did.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How the k smallest distances of a query are selected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Selection {
    /// Pick per shape: on the GPU by timing both methods on a sample of the queries the first
    /// time, remembered per (n, d, k, metric); on the CPU the heap for k ≤ 64, else the sort.
    #[default]
    Auto,
    /// k rounds of a parallel minimum (GPU); a bounded heap (CPU).
    KMin,
    /// A bitonic sort of the candidates, padded to a power of two, merged into the running k by
    /// one bitonic merge (GPU); select and sort (CPU).
    Bitonic,
    /// A radix selection of the k smallest of the running keys and the candidates, then a
    /// bitonic sort of those k alone (GPU); select and sort (CPU), as `Bitonic`.
    Radix,
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Selection::Auto => "auto",
            Selection::KMin => "kmin",
            Selection::Bitonic => "bitonic",
            Selection::Radix => "radix",
        })
    }
}

impl FromStr for Selection {
    type Err = Error;

    /// `auto`, `kmin` (also `k-min`), `bitonic`, `radix`; case-insensitive.
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Selection::Auto),
            "kmin" | "k-min" | "k_min" => Ok(Selection::KMin),
            "bitonic" => Ok(Selection::Bitonic),
            "radix" => Ok(Selection::Radix),
            _ => Err(Error::invalid(
                "selection",
                format!("'{s}' is not one of auto, kmin, bitonic, radix"),
            )),
        }
    }
}

/// What the TF32 tensor-core prefilter did in a search: it ran for `queries` query rows, and
/// `exact_fallbacks` of them had more candidates than the re-rank holds and were searched by the
/// exact path instead. Either way every answer is the exact one. For `stored` of them the first
/// tensor-core scan kept its approximations and the candidates were read back from them (else a
/// second scan recomputed them: past 2^18 training rows, or under a tight memory limit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefilterReport {
    pub queries: usize,
    pub exact_fallbacks: usize,
    pub stored: usize,
}

/// The reports of searches over parts of the rows or of the queries, as one (a query counts
/// once per part it was searched in).
impl std::ops::Add for PrefilterReport {
    type Output = PrefilterReport;

    fn add(self, other: PrefilterReport) -> PrefilterReport {
        PrefilterReport {
            queries: self.queries + other.queries,
            exact_fallbacks: self.exact_fallbacks + other.exact_fallbacks,
            stored: self.stored + other.stored,
        }
    }
}

/// How [`Selection::Auto`] came by its choice for a shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutoSource {
    /// Timed in this process.
    Timed,
    /// Read from the user's cache folder ([`crate::user_cache`]), timed by an earlier process.
    Cached,
}

/// One way through a GPU search that [`Selection::Auto`] weighed: a selection, with or without
/// the TF32 prefilter, and what it measured (CUDA events over a sample of the queries).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PathTiming {
    pub selection: Selection,
    pub prefilter: bool,
    /// The untimed-for-the-choice first run; `None`: the cost model ruled the path out before
    /// it ran (its arithmetic alone outlasts a faster path).
    pub warmup_ms: Option<f64>,
    /// The minimum and median of the timed rounds; `None`: dropped after the warm-up (over
    /// twice the fastest) or never run.
    pub min_ms: Option<f64>,
    pub median_ms: Option<f64>,
}

/// What [`Selection::Auto`] chose for a shape (GPU model, n, d, k, metric, prefilter allowed)
/// and the timings it chose from: the fastest minimum, or among paths within a few percent of
/// it the first in a fixed order (prefilter first; radix, bitonic, k-min), so that noise does
/// not flip the choice between near-equal paths.
#[derive(Clone, Debug, PartialEq)]
pub struct AutoReport {
    pub selection: Selection,
    pub prefilter: bool,
    pub source: AutoSource,
    pub timings: Vec<PathTiming>,
}
