//! The command-line parser on any arguments (NUL-separated in the input): never a panic, and
//! every refusal renders as a message.
#![no_main]

use clap::{CommandFactory, FromArgMatches};
use kmeans_knn::cli::Cli;
use libfuzzer_sys::fuzz_target;
use std::sync::{LazyLock, Mutex};

/// Built once: building the command is most of the cost of a parse.
static COMMAND: LazyLock<Mutex<clap::Command>> = LazyLock::new(|| Mutex::new(Cli::command()));

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let args = std::iter::once("kmeans-knn").chain(text.split('\0'));
    let mut command = COMMAND.lock().unwrap();
    let parsed = command
        .try_get_matches_from_mut(args)
        .and_then(|m| Cli::from_arg_matches(&m));
    match parsed {
        Ok(cli) => drop(format!("{cli:?}")),
        Err(e) => drop(e.render().to_string()),
    }
});
