//! How a kNN index spreads over the GPUs of a set.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Most bytes of training rows that [`KnnLayout::Auto`] copies whole to every GPU of a set
/// (512 MiB: 10^6 rows of 128 floats). A copy costs each GPU at most this beyond its share of
/// one GPU's memory (docs/SCALE.md), and an index this small is searched in about the time of
/// its per-query work, which sharding would repeat on every GPU.
pub const REPLICATE_MAX_BYTES: usize = 512 << 20;

/// How a kNN index over a GPU set ([`Device::Gpus`](crate::Device::Gpus)) holds its training
/// rows. Either way the answer is one GPU's, bit for bit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum KnnLayout {
    /// [`KnnLayout::Replicate`] for training rows of at most
    /// [`REPLICATE_MAX_BYTES`] (FAISS's default for a GPU
    /// set), else [`KnnLayout::Shard`].
    #[default]
    Auto,
    /// A contiguous part of the rows on each GPU (FAISS's `IndexShards`): every search runs on
    /// every part and each query's k nearest are merged by (distance, row). Each GPU holds its
    /// share of the rows, but repeats the per-query work (thresholds, re-ranking) of a search.
    Shard,
    /// Every GPU holds all the rows (FAISS's `IndexReplicas`) and answers a contiguous share of
    /// each search's queries: no per-query work is repeated and nothing is merged.
    Replicate,
}

impl fmt::Display for KnnLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KnnLayout::Auto => "auto",
            KnnLayout::Shard => "shard",
            KnnLayout::Replicate => "replicate",
        })
    }
}

impl FromStr for KnnLayout {
    type Err = Error;

    /// `auto`, `shard`, `replicate`; case-insensitive.
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(KnnLayout::Auto),
            "shard" => Ok(KnnLayout::Shard),
            "replicate" => Ok(KnnLayout::Replicate),
            _ => Err(Error::invalid(
                "knn layout",
                format!("'{s}' is not one of auto, shard, replicate"),
            )),
        }
    }
}
