//! The layers hold: no modules of the host, kernel or xtask crate import each other, directly or
//! round a longer circle; the backends import nothing from the algorithm modules that drive
//! them; and the algorithms reach the backends through one door, the traits and types of
//! `backend` itself and the objects `device` makes, never a concrete backend or a scale
//! mechanism over them. Read from the sources (comments and unit-test modules left out), so it
//! runs without building anything else.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Modules whose submodules count as modules of their own (`backend::cpu`, `kmeans::shard`, …),
/// in the crates where they are folders.
const SPLIT: [&str; 3] = ["backend", "kmeans", "knn"];

/// Which modules import which, by module name.
type Graph = BTreeMap<String, BTreeSet<String>>;

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

/// Whether `parts` names a module of the crate under `src` (a file or a folder).
fn is_module(src: &Path, parts: &[&str]) -> bool {
    let path: PathBuf = parts.iter().collect();
    src.join(&path).with_extension("rs").is_file() || src.join(&path).is_dir()
}

/// The module that the path `parts` (a file's, or an import's) belongs to: `a`, or `a::b` under
/// [`SPLIT`]; `None` for an item of the crate root (`crate::Error`, `crate::root()`).
fn unit(src: &Path, parts: &[&str]) -> Option<String> {
    match parts {
        [top, sub, ..] if SPLIT.contains(top) && is_module(src, &[top, sub]) => {
            Some(format!("{top}::{sub}"))
        }
        [top, ..] if is_module(src, &[top]) => Some(top.to_string()),
        _ => None,
    }
}

fn skip_blanks(s: &[u8], i: &mut usize) {
    while *i < s.len() && s[*i].is_ascii_whitespace() {
        *i += 1;
    }
}

fn ident(s: &[u8], i: &mut usize) -> String {
    let start = *i;
    while *i < s.len() && (s[*i].is_ascii_alphanumeric() || s[*i] == b'_') {
        *i += 1;
    }
    String::from_utf8_lossy(&s[start..*i]).into_owned()
}

/// Reads the path (or `use` tree: `a::{b, c::{d, e}}`) at `s[*i..]` into one path per leaf,
/// each after `prefix`.
fn use_tree(s: &[u8], i: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = prefix;
    loop {
        skip_blanks(s, i);
        if s.get(*i) == Some(&b'{') {
            *i += 1;
            loop {
                skip_blanks(s, i);
                match s.get(*i) {
                    None => return,
                    Some(b'}') => {
                        *i += 1;
                        return;
                    }
                    _ => use_tree(s, i, path.clone(), out),
                }
                // Past an `as name`, to the next item.
                while *i < s.len() && s[*i] != b',' && s[*i] != b'}' {
                    *i += 1;
                }
                if s.get(*i) == Some(&b',') {
                    *i += 1;
                }
            }
        }
        let name = ident(s, i);
        if name.is_empty() {
            out.push(path);
            return;
        }
        path.push(name);
        if s[*i..].starts_with(b"::") {
            *i += 2;
        } else {
            out.push(path);
            return;
        }
    }
}

/// Every path that `code` names from the crate root: `crate::…` as written, and `super::…`
/// resolved against `module`, the path of the module whose code it is.
fn crate_paths(code: &str, module: &[&str]) -> Vec<Vec<String>> {
    let s = code.as_bytes();
    let mut found = Vec::new();
    for start in ["crate::", "super::"] {
        for (at, _) in code.match_indices(start) {
            let before = at.checked_sub(1).map(|b| s[b]);
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || b"_$:".contains(&c)) {
                continue;
            }
            let mut paths = Vec::new();
            let mut i = at;
            use_tree(s, &mut i, Vec::new(), &mut paths);
            for path in paths {
                let ups = path.iter().take_while(|p| *p == "super").count();
                let resolved: Vec<String> = match path.first().map(String::as_str) {
                    Some("crate") => path[1..].to_vec(),
                    _ if ups <= module.len() => module[..module.len() - ups]
                        .iter()
                        .map(|p| p.to_string())
                        .chain(path[ups..].iter().cloned())
                        .collect(),
                    _ => continue,
                };
                found.push(resolved);
            }
        }
    }
    found
}

/// Which modules each module's code names through `crate::` and `super::`.
fn imports(src: &Path) -> Graph {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut graph = Graph::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap().with_extension("");
        let mut parts: Vec<&str> = rel.iter().map(|p| p.to_str().unwrap()).collect();
        if parts.last() == Some(&"mod") {
            parts.pop();
        }
        if matches!(parts.as_slice(), ["lib"] | ["main"]) || parts.last() == Some(&"tests") {
            continue;
        }
        let from = unit(src, &parts).expect("a source file is a module");
        let text = std::fs::read_to_string(&file).unwrap();
        let code: String = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for path in crate_paths(&code, &parts) {
            let path: Vec<&str> = path.iter().map(String::as_str).collect();
            if let Some(to) = unit(src, &path).filter(|to| *to != from) {
                graph.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    graph
}

/// Every set of two or more modules that import each other round a circle, a module and its own
/// parent excepted (a parent declares its submodules, and they may use its items).
fn circles(graph: &Graph) -> Vec<BTreeSet<String>> {
    let nested =
        |a: &str, b: &str| a.starts_with(&format!("{b}::")) || b.starts_with(&format!("{a}::"));
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(m) = todo.pop() {
            for next in graph.get(&m).into_iter().flatten() {
                if !nested(&m, next) && seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|m| (m, reach(m))).collect();
    let mut found: Vec<BTreeSet<String>> = Vec::new();
    for (m, from_m) in &reached {
        if !from_m.contains(*m) || found.iter().any(|c| c.contains(*m)) {
            continue;
        }
        let circle = from_m
            .iter()
            .filter(|o| reached.get(o).is_some_and(|r| r.contains(*m)))
            .cloned()
            .collect();
        found.push(circle);
    }
    found
}

/// The algorithm modules of the host crate: they drive a backend without knowing which.
const ALGORITHMS: [&str; 4] = ["kmeans", "knn", "distances", "image_ops"];

/// What the algorithms may not name: the concrete backends and the scale mechanisms over them.
const CONCRETE: [&str; 3] = ["backend::cpu", "backend::cuda", "backend::multi"];

/// Every `(module, import)` of `graph` where an algorithm module (or one of its submodules)
/// imports a concrete backend.
fn concrete_imports(graph: &Graph) -> Vec<(String, String)> {
    let algorithm = |m: &str| ALGORITHMS.contains(&m.split("::").next().unwrap_or(m));
    (graph.iter())
        .filter(|(module, _)| algorithm(module))
        .flat_map(|(module, targets)| targets.iter().map(move |t| (module.clone(), t.clone())))
        .filter(|(_, target)| {
            CONCRETE
                .iter()
                .any(|c| target == c || target.starts_with(&format!("{c}::")))
        })
        .collect()
}

fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
        .join("src")
}

#[test]
fn grouped_nested_and_relative_imports_are_read() {
    let code = "use crate::{gpu, math::fma, tile::{load, store as put}};\n\
                use super::super::vocab::Metric;\nlet x = crate::knn::sqrt(y); $crate::no";
    let paths = crate_paths(code, &["backend", "cpu", "kmeans"]);
    let names: BTreeSet<String> = paths.iter().map(|p| p.join("::")).collect();
    let want = [
        "gpu",
        "math::fma",
        "tile::load",
        "tile::store",
        "backend::vocab::Metric",
        "knn::sqrt",
    ];
    assert_eq!(names, want.iter().map(|s| s.to_string()).collect());
}

#[test]
fn a_circle_round_three_modules_is_found_and_a_parent_is_not_one() {
    let graph: Graph = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["d::e"]),
        ("d::e", vec!["d"]),
    ]
    .into_iter()
    .map(|(m, to)| (m.to_string(), to.into_iter().map(String::from).collect()))
    .collect();
    let abc: BTreeSet<String> = ["a", "b", "c"].into_iter().map(String::from).collect();
    assert_eq!(circles(&graph), vec![abc]);
}

#[test]
fn an_algorithm_naming_a_concrete_backend_is_found() {
    let graph: Graph = [
        ("kmeans::shard", vec!["backend", "backend::cuda", "device"]),
        ("knn", vec!["backend::vocab", "backend::multi"]),
        ("distances", vec!["backend"]),
        ("device", vec!["backend::cpu", "backend::multi"]),
    ]
    .into_iter()
    .map(|(m, to)| (m.to_string(), to.into_iter().map(String::from).collect()))
    .collect();
    let pair = |m: &str, t: &str| (m.to_string(), t.to_string());
    assert_eq!(
        concrete_imports(&graph),
        vec![
            pair("kmeans::shard", "backend::cuda"),
            pair("knn", "backend::multi")
        ]
    );
}

/// The tests that read the source tree: they run where the sources are (`cargo test`), and the
/// GPU bundle, which carries only the executables, skips them (`--skip source_tree::`).
mod source_tree {
    use super::{BTreeSet, circles, concrete_imports, crate_src, imports};

    #[test]
    fn no_modules_import_each_other_in_any_crate() {
        for krate in ["host", "kernels-gpu", "xtask"] {
            let graph = imports(&crate_src(krate));
            assert!(!graph.is_empty(), "{krate}: no imports found");
            assert_eq!(
                circles(&graph),
                Vec::<BTreeSet<String>>::new(),
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

    #[test]
    fn algorithms_import_no_concrete_backend() {
        let graph = imports(&crate_src("host"));
        for algorithm in super::ALGORITHMS {
            assert!(
                graph.contains_key(algorithm),
                "{algorithm}: no imports found"
            );
        }
        assert_eq!(concrete_imports(&graph), Vec::<(String, String)>::new());
    }
}
