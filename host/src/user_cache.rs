//! Small measurements kept between processes in the user's cache folder: the GPU start cost that
//! `Device::Auto` weighs, and the kNN paths that `Selection::Auto` timed.
//!
//! The folder is `$KMEANS_KNN_CACHE_DIR`, else `$XDG_CACHE_HOME/kmeans-knn`, else
//! `$HOME/.cache/kmeans-knn`; `KMEANS_KNN_CACHE_DIR=off` turns the cache off. Entries are small
//! text files written whole (a temporary file renamed into place), so processes running at once
//! never read half an entry. The cache is only ever a hint: an entry that is missing, unreadable
//! or malformed is measured again, and a failure to write one is ignored.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// The variable that moves the cache folder, or turns the cache off with `off`.
pub const CACHE_DIR_VAR: &str = "KMEANS_KNN_CACHE_DIR";

/// The cache folder, or `None` when the cache is off or no folder can be named.
pub fn dir() -> Option<PathBuf> {
    let from = |var: &str| std::env::var_os(var).filter(|v| !v.is_empty());
    if let Some(dir) = from(CACHE_DIR_VAR) {
        return (dir != "off").then(|| PathBuf::from(dir));
    }
    if let Some(xdg) = from("XDG_CACHE_HOME") {
        return Some(PathBuf::from(xdg).join("kmeans-knn"));
    }
    from("HOME").map(|home| PathBuf::from(home).join(".cache").join("kmeans-knn"))
}

/// The entry `name` (a plain file name), if the cache holds it.
pub fn read(name: &str) -> Option<String> {
    std::fs::read_to_string(dir()?.join(name)).ok()
}

/// Stores `contents` as the entry `name`; best effort (the cache is a hint, never an error).
pub fn write(name: &str, contents: &str) {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let Some(dir) = dir() else { return };
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let temp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    if std::fs::write(&temp, contents).is_err() || std::fs::rename(&temp, dir.join(name)).is_err() {
        let _ = std::fs::remove_file(&temp);
    }
}

/// A file name made of `parts`, with anything but letters, digits, `.`, `-` and `_` replaced,
/// so that a GPU's name or a shape can key an entry.
pub fn entry_name(parts: &[&str]) -> String {
    parts
        .iter()
        .map(|part| {
            part.chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                        c
                    } else {
                        '_'
                    }
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names_are_plain_file_names() {
        assert_eq!(
            entry_name(&["knn", "NVIDIA H100 80GB HBM3", "n=1000/d"]),
            "knn-NVIDIA_H100_80GB_HBM3-n_1000_d"
        );
    }
}
