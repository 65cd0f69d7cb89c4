//! `kmeans-knn`: the command-line tool. Parses the arguments, runs the subcommand, maps failures
//! to exit codes (0 success, 2 bad usage or bad input, 1 anything else) and prints errors as one
//! sentence on stderr.

use kmeans_knn::cli;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = cli::Cli::parse_args();
    cli::start_only_the_gpus_used(&mut args);
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.code)
        }
    }
}
