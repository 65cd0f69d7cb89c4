//! `kmeans-knn classify` (waiting for the kNN library API).

use super::{CliError, Ui};

pub const EXAMPLES: &str =
    "Examples:\n  kmeans-knn classify --help   (arrives with the kNN library)";

/// Arguments of `classify`.
#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_a: Args, _ui: Ui) -> Result<(), CliError> {
    Err(CliError::failure("classify is not available yet"))
}

/// The demo's classification step (empty until kNN lands).
pub fn demo_step(
    _ui: Ui,
    _dir: &std::path::Path,
    _device: kmeans_knn::Device,
) -> Result<String, CliError> {
    Ok(String::new())
}
