//! The NPY reader on any bytes: never a panic, no allocation beyond what the file holds (the
//! memory budget is small), and what it accepts the NPY writer writes and reads back bit for bit.
#![no_main]

use kmeans_knn::io::npy::{self, NpyWriter};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

/// Far below libFuzzer's -malloc_limit_mb, so a claim that escapes the checks is a crash.
const BUDGET: u64 = 64 << 20;

fuzz_target!(|data: &[u8]| {
    let name = Path::new("fuzz.npy");
    let _ = npy::labels_from_bytes(data, name);
    let Ok(t) = npy::table_from_bytes(data, name, Some(BUDGET)) else {
        return;
    };
    assert!(t.rows >= 1 && t.cols >= 1);
    assert_eq!(t.data.len(), t.rows * t.cols);
    assert!(t.data.iter().all(|v| v.is_finite()));

    let mut bytes = Vec::new();
    let mut w = NpyWriter::new(&mut bytes, &[t.rows, t.cols], "<f4").unwrap();
    w.write_values(&t.data).unwrap();
    let r = npy::table_from_bytes(&bytes, name, Some(BUDGET)).unwrap();
    assert_eq!((r.rows, r.cols), (t.rows, t.cols));
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&r.data), bits(&t.data));
});
