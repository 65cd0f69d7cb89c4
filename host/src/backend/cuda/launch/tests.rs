//! The kernel names and parameter counts the host launches with, checked against the committed
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

/// Every `.entry` of `ptx` with its number of parameters.
fn entries(ptx: &str) -> BTreeMap<String, usize> {
    let mut found = BTreeMap::new();
    for (at, _) in ptx.match_indices(".entry ") {
        let rest = &ptx[at + ".entry ".len()..];
        let open = rest.find('(').expect("a parameter list after .entry");
        let close = rest.find(')').expect("the end of the parameter list");
        let params = rest[open..close].matches(".param ").count();
        found.insert(rest[..open].to_string(), params);
    }
    found
}

/// The kernels of `KERNELS` that a PTX build has.
fn expected(build: Build) -> BTreeMap<String, usize> {
    KERNELS
        .iter()
        .filter(|k| built(k, build))
        .map(|k| (k.name.to_string(), k.params))
        .collect()
}

#[test]
fn every_kernel_is_an_entry_of_its_ptx_builds_with_its_parameter_count() {
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

#[test]
fn the_twin_table_lists_every_kernel_in_order() {
    let lib = include_str!("../../../../../kernels-gpu/src/lib.rs");
    let rows: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//! | `"))
        .filter_map(|row| row.split('`').next())
        .collect();
    let names: Vec<&str> = KERNELS.iter().map(|k| k.name).collect();
    assert_eq!(rows, names);
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
