//! The kernel names and parameters the host launches with, checked against the committed
//! PTX and the twin table; no GPU needed.

use crate::backend::cuda::image::{PTX, PTX_SM80};

/// The sm_90a build, which only the sm_90 cubin is compiled from.
const PTX_SM90A: &str = include_str!("../../../../ptx/kernels_sm90a.ptx");

/// The PTX builds, oldest first.
#[derive(Clone, Copy, PartialEq, PartialOrd)]
enum Build {
    Sm70,
    Sm80,
    Sm90a,
}

/// Whether `build` has `k`.
fn built(k: &kernels_gpu::launch::Kernel, build: Build) -> bool {
    (build >= Build::Sm80 || !k.sm80_only) && (build == Build::Sm90a || !k.sm90a_only)
}
use kernels_gpu::KERNELS;
use std::collections::BTreeMap;

/// A parameter as the PTX declares it, or as a parameter struct's field says it must be.
#[derive(Debug, PartialEq)]
struct Param {
    /// Its size in bytes.
    size: usize,
    /// Whether it is a pointer (`.ptr`).
    pointer: bool,
}

/// Every `.entry` of `ptx` with its parameter list.
fn entries(ptx: &str) -> BTreeMap<String, Vec<Option<Param>>> {
    let mut found = BTreeMap::new();
    for (at, _) in ptx.match_indices(".entry ") {
        let rest = &ptx[at + ".entry ".len()..];
        let open = rest.find('(').expect("a parameter list after .entry");
        let close = rest.find(')').expect("the end of the parameter list");
        let list = rest[open + 1..close]
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(param)
            .collect();
        found.insert(rest[..open].to_string(), list);
    }
    found
}

/// A scalar or pointer parameter (`.param .u32 k_param_1`, `.param .u64 .ptr .align 1
/// k_param_0`); `None` for any other, such as a by-value aggregate (`.param .align 8 .b8
/// k_param_0[40]`).
fn param(decl: &str) -> Option<Param> {
    let words: Vec<&str> = decl.split_whitespace().collect();
    let (ty, pointer) = match words[..] {
        [".param", ty, ".ptr", ".align", _, _] => (ty, true),
        [".param", ty, _] => (ty, false),
        _ => return None,
    };
    let (".u" | ".s" | ".b" | ".f") = ty.get(..2)? else {
        return None;
    };
    let bits: usize = ty[2..].parse().ok()?;
    Some(Param {
        size: bits / 8,
        pointer,
    })
}

/// The kernels of `KERNELS` that a PTX build has, each with the fields of its parameter struct
/// on the host: one parameter each, in order, of the field's size, a pointer where the field is
/// a `DevPtr`. Equal to the PTX's lists, they show that the driver copies each parameter from
/// the field the host filled.
fn expected(build: Build) -> BTreeMap<String, Vec<Option<Param>>> {
    KERNELS
        .iter()
        .filter(|k| built(k, build))
        .map(|k| {
            let params = k
                .params
                .iter()
                .map(|f| {
                    Some(Param {
                        size: f.size,
                        pointer: f.pointer,
                    })
                })
                .collect();
            (k.name.to_string(), params)
        })
        .collect()
}

#[test]
fn parameters_are_read_with_their_size_and_kind() {
    let ptx = ".entry k(\n\t.param .u64 .ptr .align 1 k_param_0,\n\t.param .u32 k_param_1,\n\
               \t.param .f64 k_param_2,\n\t.param .align 8 .b8 k_param_3[24]\n)\n{";
    let p = |size, pointer| Some(Param { size, pointer });
    assert_eq!(
        entries(ptx)["k"],
        [p(8, true), p(4, false), p(8, false), None]
    );
}

#[test]
fn every_kernel_is_an_entry_taking_its_struct_fields_in_order() {
    assert_eq!(entries(PTX), expected(Build::Sm70), "host/ptx/kernels.ptx");
    assert_eq!(
        entries(PTX_SM80),
        expected(Build::Sm80),
        "host/ptx/kernels_sm80.ptx"
    );
    assert_eq!(
        entries(PTX_SM90A),
        expected(Build::Sm90a),
        "host/ptx/kernels_sm90a.ptx"
    );
}

/// Every `.entry` of `ptx` with its `.minnctapersm` bound (0 without one).
fn min_blocks(ptx: &str) -> BTreeMap<String, u32> {
    let mut found = BTreeMap::new();
    for (at, _) in ptx.match_indices(".entry ") {
        let rest = &ptx[at + ".entry ".len()..];
        let name = &rest[..rest.find('(').expect("a parameter list after .entry")];
        let head = &rest[..rest.find("\n{").expect("a body after the parameters")];
        let bound = head
            .split_once(".minnctapersm ")
            .map_or(0, |(_, n)| n.trim().parse().expect("a block count"));
        found.insert(name.to_string(), bound);
    }
    found
}

#[test]
fn occupancy_bounds_in_the_ptx_are_those_next_to_the_kernels() {
    for (ptx, build) in [
        (PTX, Build::Sm70),
        (PTX_SM80, Build::Sm80),
        (PTX_SM90A, Build::Sm90a),
    ] {
        let want: BTreeMap<String, u32> = KERNELS
            .iter()
            .filter(|k| built(k, build))
            .map(|k| (k.name.to_string(), k.min_blocks_per_sm))
            .collect();
        assert_eq!(
            min_blocks(ptx),
            want,
            "{}",
            ptx.lines().find(|l| l.starts_with(".target")).unwrap_or("")
        );
    }
}

#[test]
fn kernels_are_listed_once() {
    let mut names: Vec<&str> = KERNELS.iter().map(|k| k.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), KERNELS.len());
}

/// The twin table's rows: its five cells, each as the names it quotes in backticks.
fn twin_table() -> Vec<[Vec<String>; 5]> {
    let lib = include_str!("../../../../../kernels-gpu/src/lib.rs");
    lib.lines()
        .filter_map(|l| l.strip_prefix("//! | `"))
        .map(|row| {
            let cells: Vec<Vec<String>> = format!("`{row}")
                .split(" | ")
                .map(|cell| {
                    cell.split('`')
                        .skip(1)
                        .step_by(2)
                        .map(String::from)
                        .collect()
                })
                .collect();
            cells.try_into().expect("five cells a row")
        })
        .collect()
}

#[test]
fn the_twin_table_lists_every_kernel_in_order() {
    let rows: Vec<String> = twin_table()
        .into_iter()
        .map(|[k, ..]| k[0].clone())
        .collect();
    let names: Vec<&str> = KERNELS.iter().map(|k| k.name).collect();
    assert_eq!(rows, names);
}

/// Tests that read the source tree at run time: they run where the sources are (`cargo test`),
/// and the GPU bundle, which carries only the executables, skips them (`--skip source_tree::`).
mod source_tree {
    use super::{KERNELS, twin_table};

    /// The workspace's folder `rel` (`host/src`, `kernels-gpu/src`, …).
    fn workspace(rel: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(rel)
    }

    /// The source of module `parts` under `src`: its file, and every file in its folder.
    fn module_source(src: &std::path::Path, parts: &[&str]) -> Option<String> {
        let path: std::path::PathBuf = parts.iter().collect();
        let (file, dir) = (src.join(&path).with_extension("rs"), src.join(&path));
        let mut text = std::fs::read_to_string(&file).ok();
        if dir.is_dir() {
            let mut files = vec![dir];
            while let Some(p) = files.pop() {
                if p.is_dir() {
                    files.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
                } else if p.extension().is_some_and(|e| e == "rs") {
                    text.get_or_insert_default()
                        .push_str(&std::fs::read_to_string(&p).unwrap());
                }
            }
        }
        text
    }

    /// Whether `text` has `word` as a whole identifier after `prefix` (`"fn "`, `"struct "`, or
    /// `""` for any mention).
    fn has(text: &str, prefix: &str, word: &str) -> bool {
        let ident = |c: char| c.is_alphanumeric() || c == '_';
        text.match_indices(&format!("{prefix}{word}"))
            .any(|(at, m)| {
                let before = text[..at].chars().next_back();
                let after = text[at + m.len()..].chars().next();
                !before.is_some_and(ident) && !after.is_some_and(ident)
            })
    }

    /// Whether the item path `path` (`backend::cpu::kmeans::nearest`, `Partial::finish`) is
    /// defined: its longest module prefix under one of `srcs` (else anywhere in them) defines every
    /// name after it as a function or a type.
    fn defined(srcs: &[std::path::PathBuf], path: &str) -> bool {
        let parts: Vec<&str> = path.split("::").collect();
        let (text, items) = (1..parts.len())
            .rev()
            .find_map(|i| {
                srcs.iter()
                    .find_map(|src| module_source(src, &parts[..i]))
                    .map(|text| (text, &parts[i..]))
            })
            .unwrap_or_else(|| {
                let all = srcs
                    .iter()
                    .filter_map(|src| module_source(src, &[]))
                    .collect();
                (all, &parts[..])
            });
        items.iter().all(|item| {
            ["fn ", "struct ", "enum ", "trait ", "type "]
                .iter()
                .any(|kind| has(&text, kind, item))
        })
    }

    #[test]
    fn every_column_of_the_twin_table_names_what_exists() {
        let (kernels, host) = (workspace("kernels-gpu/src"), workspace("host/src"));
        let mut wrong = vec![];
        for [kernel, modules, params, twins, tests] in twin_table() {
            let name = &kernel[0];
            // The kernel is in (one of) its modules.
            let in_module = modules.iter().any(|m| {
                let parts: Vec<&str> = m.split("::").collect();
                module_source(&kernels, &parts).is_some_and(|text| has(&text, "", name))
            });
            if !in_module {
                wrong.push(format!("{name}: not in module {modules:?}"));
            }
            // Its parameter struct is a type of `kernels_gpu`.
            for p in &params {
                if !defined(std::slice::from_ref(&kernels), p) {
                    wrong.push(format!("{name}: no parameter struct {p}"));
                }
            }
            // Its CPU twins exist; `::f` is a sibling of the twin before it.
            let mut last_module = String::new();
            for twin in &twins {
                let full = match twin.strip_prefix("::") {
                    Some(item) => format!("{last_module}::{item}"),
                    None => twin.clone(),
                };
                last_module = full
                    .rsplit_once("::")
                    .map_or(String::new(), |(m, _)| m.to_string());
                if !defined(&[host.clone(), kernels.clone()], &full) {
                    wrong.push(format!("{name}: no CPU twin {twin}"));
                }
            }
            // Each test function is in the file named before it.
            let mut file: Option<String> = None;
            for t in &tests {
                if t.ends_with(".rs") {
                    let roots = [
                        workspace(""),
                        kernels.clone(),
                        host.clone(),
                        kernels.join("knn_tf32"),
                    ];
                    file = roots
                        .iter()
                        .find_map(|r| std::fs::read_to_string(r.join(t)).ok());
                    if file.is_none() {
                        wrong.push(format!("{name}: no test file {t}"));
                    }
                } else if !file.as_ref().is_some_and(|text| has(text, "fn ", t)) {
                    wrong.push(format!("{name}: no test {t}"));
                }
            }
        }
        assert_eq!(wrong, Vec::<String>::new());
    }

    #[test]
    fn kernel_names_are_not_spelled_on_the_host() {
        // Launchers name kernels by their `kernels_gpu` constants, with no exemption.
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = vec![src];
        let mut spelled = vec![];
        while let Some(path) = files.pop() {
            if path.is_dir() {
                files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let shown = path.display().to_string();
            for k in KERNELS {
                if text.contains(&format!("\"{}\"", k.name)) {
                    spelled.push(format!("{shown}: {}", k.name));
                }
            }
        }
        assert_eq!(spelled, Vec::<String>::new());
    }
}
