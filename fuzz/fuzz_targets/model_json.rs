//! The saved-model JSON that `predict` reads: never a panic; a model it accepts predicts and
//! transforms a row, and saving it again gives the same centroids bit for bit.
#![no_main]

use kmeans_knn::cli::SavedModel;
use kmeans_knn::{Device, MatrixView};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let name = Path::new("fuzz.json");
    let Ok(saved) = SavedModel::parse(text, name) else {
        return;
    };
    let m = &saved.model;
    let row = vec![0.5f32; m.d];
    let x = MatrixView::new(&row, 1, m.d).unwrap();
    let labels = m.predict_on(x.clone(), Device::Cpu).unwrap();
    assert!((labels[0] as usize) < m.k);
    assert_eq!(m.transform(x).unwrap().dim(), (1, m.k));

    let again = SavedModel::parse(&serde_json::to_string(&saved).unwrap(), name).unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&again.model.centroids), bits(&m.centroids));
});
