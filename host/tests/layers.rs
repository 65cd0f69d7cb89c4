//! The layers hold: the backends import nothing from the algorithm modules that drive them, and
//! no two modules of the host crate or of the kernel crate import each other. Read from the
//! sources (comments and unit-test modules left out), so it runs without building anything else.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Modules whose submodules count as modules of their own (`backend::cpu`, `kmeans::shard`, …).
const SPLIT: [&str; 3] = ["backend", "kmeans", "knn"];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `a` or `a::b` for the module path `parts` (a file's, or an import's).
fn unit(parts: &[&str]) -> String {
    match parts {
        [top, sub, ..] if SPLIT.contains(top) && sub.starts_with(|c: char| c.is_lowercase()) => {
            format!("{top}::{sub}")
        }
        [top, ..] => top.to_string(),
        [] => String::new(),
    }
}

/// Which modules each module's code names through `crate::`.
fn imports(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(root, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(root).unwrap().with_extension("");
        let mut parts: Vec<&str> = rel.iter().map(|p| p.to_str().unwrap()).collect();
        if parts.last() == Some(&"mod") {
            parts.pop();
        }
        if matches!(parts.as_slice(), ["lib"] | ["main"]) || parts.last() == Some(&"tests") {
            continue;
        }
        let from = unit(&parts);
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (i, _) in line.match_indices("crate::") {
                let path: Vec<&str> = line[i + 7..]
                    .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .next()
                    .unwrap()
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .collect();
                let to = unit(&path);
                if !to.is_empty() && to != from {
                    graph.entry(from.clone()).or_default().insert(to);
                }
            }
        }
    }
    graph
}

/// Pairs of modules that import each other (a module and its own parent excepted).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<(String, String)> {
    let nested = |a: &str, b: &str| a.starts_with(&format!("{b}::"));
    let mut found = Vec::new();
    for (a, targets) in graph {
        for b in targets {
            let back = graph.get(b).is_some_and(|t| t.contains(a));
            if a < b && back && !nested(a, b) && !nested(b, a) {
                found.push((a.clone(), b.clone()));
            }
        }
    }
    found
}

fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
        .join("src")
}

#[test]
fn no_two_modules_import_each_other() {
    for krate in ["host", "kernels-gpu"] {
        let graph = imports(&crate_src(krate));
        assert!(graph.len() > 5, "{krate}: no modules found");
        assert_eq!(
            circles(&graph),
            vec![],
            "{krate}: modules importing each other"
        );
    }
}

#[test]
fn backends_import_nothing_from_the_modules_that_drive_them() {
    let graph = imports(&crate_src("host"));
    let drivers = [
        "kmeans",
        "knn",
        "distances",
        "cli",
        "io",
        "image_ops",
        "bench",
        "device",
    ];
    for (module, targets) in graph.iter().filter(|(m, _)| m.starts_with("backend")) {
        for target in targets {
            let top = target.split("::").next().unwrap();
            assert!(!drivers.contains(&top), "{module} imports {target}");
        }
    }
}
