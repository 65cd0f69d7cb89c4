//! Small measurements kept between processes in the user's cache folder: the GPU start cost that
//! `Device::Auto` weighs, and the kNN paths that `Selection::Auto` timed.
//!
//! The folder is `$KMEANS_KNN_CACHE_DIR`, else `$XDG_CACHE_HOME/kmeans-knn`, else
//! `$HOME/.cache/kmeans-knn`; `KMEANS_KNN_CACHE_DIR=off` turns the cache off. Entries are small
//! text files written whole (a temporary file renamed into place), so processes running at once
//! never read half an entry. The cache is only ever a hint: an entry that is missing, unreadable
//! or malformed is measured again, and a failure to write one is ignored.

use std::ops::Range;
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

/// This machine's name, for keys of measurements that belong to the machine.
pub fn host() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    name.trim().to_owned()
}

/// The figures kept in the entry `name` (numbers separated by spaces, the newest last) that lie
/// in `plausible`; anything else is dropped.
pub fn figures(name: &str, plausible: Range<f64>) -> Vec<f64> {
    parse_figures(read(name).as_deref().unwrap_or(""), plausible)
}

/// Appends `value` to the figures of the entry `name`, keeping the last `kept`.
pub fn keep_figure(name: &str, plausible: Range<f64>, value: f64, kept: usize) {
    let mut values = figures(name, plausible);
    values.push(value);
    let values = &values[values.len().saturating_sub(kept)..];
    let text: Vec<String> = values.iter().map(|v| format!("{v:.4e}")).collect();
    write(name, &text.join(" "));
}

/// The median of `values` (the upper one of an even count), so that one outlier does not move it.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

fn parse_figures(text: &str, plausible: Range<f64>) -> Vec<f64> {
    text.split_whitespace()
        .filter_map(|s| s.parse::<f64>().ok())
        .filter(|v| v.is_finite() && plausible.contains(v))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_figures_are_dropped_and_the_median_resists_one_outlier() {
        let kept = parse_figures("0.21 x 0.25 -1 NaN 1e9 3e-1", 0.0..600.0);
        assert_eq!(kept, vec![0.21, 0.25, 0.3]);
        assert_eq!(median(parse_figures("0.9 0.2 0.3", 0.0..600.0)), Some(0.3));
        assert_eq!(median(parse_figures("garbage", 0.0..600.0)), None);
    }

    #[test]
    fn entry_names_are_plain_file_names() {
        assert_eq!(
            entry_name(&["knn", "NVIDIA H100 80GB HBM3", "n=1000/d"]),
            "knn-NVIDIA_H100_80GB_HBM3-n_1000_d"
        );
    }
}
