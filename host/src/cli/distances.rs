//! `kmeans-knn distances` (waiting for the kNN library API).

use super::{CliError, Ui};

pub const EXAMPLES: &str =
    "Examples:\n  kmeans-knn distances --help   (arrives with the kNN library)";

/// Arguments of `distances`.
#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_a: Args, _ui: Ui) -> Result<(), CliError> {
    Err(CliError::failure("distances is not available yet"))
}
