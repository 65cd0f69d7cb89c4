//! `kmeans-knn knn` (waiting for the kNN library API).

use super::{CliError, Ui};

pub const EXAMPLES: &str = "Examples:\n  kmeans-knn knn --help   (arrives with the kNN library)";

/// Arguments of `knn`.
#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_a: Args, _ui: Ui) -> Result<(), CliError> {
    Err(CliError::failure("knn is not available yet"))
}
