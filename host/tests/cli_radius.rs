//! End-to-end tests of `kmeans-knn radius` and `knn --graph-out`: CSR arrays as NPY, the `.npz`
//! graph with scipy's members, and typed usage errors that leave no file behind.

use std::io::Read;
use std::path::Path;
use std::process::Command;

/// The binary under test: `KMEANS_KNN_BIN` (the GPU bundle's), else the one cargo built.
fn bin() -> String {
    std::env::var("KMEANS_KNN_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_kmeans-knn").into())
}

/// Runs the binary in `dir`: exit code, stdout, stderr.
fn run(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin())
        .args(args)
        .current_dir(dir)
        .env("RAYON_NUM_THREADS", "2")
        .output()
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The header dictionary and body of an NPY file's bytes.
fn split_npy(bytes: &[u8]) -> (String, Vec<u8>) {
    assert_eq!(&bytes[..6], b"\x93NUMPY");
    let len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = String::from_utf8_lossy(&bytes[10..10 + len]).into_owned();
    (header, bytes[10 + len..].to_vec())
}

fn le<const N: usize>(body: &[u8]) -> Vec<[u8; N]> {
    body.chunks_exact(N)
        .map(|c| c.try_into().unwrap())
        .collect()
}

fn i64s(body: &[u8]) -> Vec<i64> {
    le::<8>(body).into_iter().map(i64::from_le_bytes).collect()
}

fn f32s(body: &[u8]) -> Vec<f32> {
    le::<4>(body).into_iter().map(f32::from_le_bytes).collect()
}

/// The members of an `.npz` by name.
fn npz(path: &Path) -> std::collections::BTreeMap<String, (String, Vec<u8>)> {
    let mut zip = zip::ZipArchive::new(std::fs::File::open(path).unwrap()).unwrap();
    (0..zip.len())
        .map(|i| {
            let mut f = zip.by_index(i).unwrap();
            let name = f.name().unwrap().trim_end_matches(".npy").to_string();
            let mut bytes = Vec::new();
            f.read_to_end(&mut bytes).unwrap();
            (name, split_npy(&bytes))
        })
        .collect()
}

/// Points on a line (one column): 0, 1, 1, 3, 7; queries 1 and 10.
fn line_files(dir: &Path) {
    std::fs::write(dir.join("train.csv"), "0\n1\n1\n3\n7\n").unwrap();
    std::fs::write(dir.join("query.csv"), "1\n10\n").unwrap();
}

#[test]
fn radius_writes_csr_arrays_and_a_scipy_graph() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    line_files(dir);
    let args = [
        "radius",
        "--device",
        "cpu",
        "--train",
        "train.csv",
        "--query",
        "query.csv",
        "--radius",
        "2",
        "--metric",
        "l1",
        "--indices-out",
        "i.npy",
        "--distances-out",
        "d.npy",
        "--offsets-out",
        "o.npy",
        "--graph-out",
        "g.npz",
    ];
    let (code, out, err) = run(dir, &args);
    assert_eq!(code, 0, "{out}{err}");
    // Query 1: rows 1, 2 (distance 0), 0 (1), 3 (2, exactly the radius); query 10: none.
    let (_, body) = split_npy(&std::fs::read(dir.join("i.npy")).unwrap());
    let indices: Vec<u32> = le::<4>(&body).into_iter().map(u32::from_le_bytes).collect();
    assert_eq!(indices, vec![1, 2, 0, 3]);
    let (_, body) = split_npy(&std::fs::read(dir.join("d.npy")).unwrap());
    assert_eq!(f32s(&body), vec![0.0, 0.0, 1.0, 2.0]);
    let (_, body) = split_npy(&std::fs::read(dir.join("o.npy")).unwrap());
    assert_eq!(i64s(&body), vec![0, 4, 4]);

    let g = npz(&dir.join("g.npz"));
    let names: Vec<&str> = g.keys().map(String::as_str).collect();
    assert_eq!(names, ["data", "format", "indices", "indptr", "shape"]);
    assert_eq!(i64s(&g["indices"].1), vec![1, 2, 0, 3]);
    assert_eq!(i64s(&g["indptr"].1), vec![0, 4, 4]);
    assert_eq!(i64s(&g["shape"].1), vec![2, 5]);
    assert_eq!(f32s(&g["data"].1), vec![0.0, 0.0, 1.0, 2.0]);
    assert!(g["format"].0.contains("'|S3'") && g["format"].0.contains("'shape': ()"));
    assert_eq!(g["format"].1, b"csr");

    // Without outputs: one line per query on stdout, empty for a query with no neighbour.
    let (code, out, err) = run(dir, &args[..11]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "1,2,0,3\n\n");
}

#[test]
fn knn_graph_holds_connectivity_or_distances() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    line_files(dir);
    for (mode, data) in [
        ("connectivity", vec![1.0, 1.0, 1.0, 1.0]),
        ("distance", vec![0.0, 0.0, 3.0, 7.0]),
    ] {
        let args = [
            "knn",
            "--device",
            "cpu",
            "--train",
            "train.csv",
            "--query",
            "query.csv",
            "--k",
            "2",
            "--metric",
            "l1",
            "--graph-out",
            "g.npz",
            "--graph-mode",
            mode,
        ];
        let (code, out, err) = run(dir, &args);
        assert_eq!(code, 0, "{out}{err}");
        let g = npz(&dir.join("g.npz"));
        assert_eq!(i64s(&g["indices"].1), vec![1, 2, 4, 3], "{mode}");
        assert_eq!(i64s(&g["indptr"].1), vec![0, 2, 4], "{mode}");
        assert_eq!(i64s(&g["shape"].1), vec![2, 5], "{mode}");
        assert_eq!(f32s(&g["data"].1), data, "{mode}");
    }
}

#[test]
fn bad_radius_is_a_usage_error_and_writes_nothing() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    line_files(dir);
    for (radius, needle) in [("-1", "radius"), ("nan", "radius")] {
        let args = [
            "radius",
            "--device",
            "cpu",
            "--train",
            "train.csv",
            "--query",
            "query.csv",
            "--radius",
            radius,
            "--graph-out",
            "g.npz",
        ];
        let (code, _, err) = run(dir, &args);
        assert_eq!(code, 2, "{err}");
        assert!(err.to_lowercase().contains(needle), "{err}");
        assert!(!dir.join("g.npz").exists());
    }
    std::fs::write(dir.join("wide.csv"), "1,2\n").unwrap();
    let args = [
        "radius",
        "--device",
        "cpu",
        "--train",
        "train.csv",
        "--query",
        "wide.csv",
        "--radius",
        "1",
    ];
    let (code, _, err) = run(dir, &args);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("columns"), "{err}");
}
