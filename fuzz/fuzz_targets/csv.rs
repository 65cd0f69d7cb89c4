//! The CSV reader on any bytes: never a panic; what it accepts is a finite rows × cols matrix
//! that the CSV writer writes and the reader reads back bit for bit.
#![no_main]

use kmeans_knn::io::{Outputs, ReadOptions, csv};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the options, as --delimiter / --header / --no-header would.
    let Some((&pick, text)) = data.split_first() else {
        return;
    };
    let opts = ReadOptions {
        delimiter: [None, Some(b';'), Some(b'\t'), Some(b' '), Some(b'|')][usize::from(pick % 5)],
        header: [None, Some(true), Some(false)][usize::from(pick / 5 % 3)],
    };
    let Ok(t) = csv::table_from_reader(text, Path::new("fuzz.csv"), &opts) else {
        return;
    };
    assert!(t.rows >= 1 && t.cols >= 1);
    assert_eq!(t.data.len(), t.rows * t.cols);
    assert!(t.data.iter().all(|v| v.is_finite()));

    let dir = std::env::temp_dir().join(format!("kmk-fuzz-csv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("round.csv");
    let mut out = Outputs::new();
    out.matrix(&path, t.rows, t.cols, &t.data, t.header.as_deref())
        .unwrap();
    out.commit().unwrap();
    let back = ReadOptions {
        delimiter: None,
        header: Some(t.header.is_some()),
    };
    let r = csv::read_matrix(&path, &back).unwrap();
    assert_eq!((r.rows, r.cols), (t.rows, t.cols));
    assert_eq!(r.header, t.header);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&r.data), bits(&t.data));
});
