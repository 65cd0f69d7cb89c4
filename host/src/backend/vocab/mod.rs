//! The backends' vocabulary: the types and rules that the backends need and that the algorithm
//! modules ([`crate::kmeans`], [`crate::knn`], [`crate::distances`]) drive them with. They live
//! here, below both, so that the backends import nothing from the modules that drive them; the
//! public ones are re-exported where users look for them (`kmeans::Metric`, `knn::Selection`).

mod blocks;
mod index;
mod layout;
mod metric;
mod selection;

pub(crate) use blocks::{CHUNK, rows_per_block};
pub(crate) use index::NeighbourIndex;
pub use layout::{KnnLayout, REPLICATE_MAX_BYTES};
pub use metric::{Metric, Precision};
pub use selection::{AutoReport, AutoSource, PathTiming, PrefilterReport, Selection};
