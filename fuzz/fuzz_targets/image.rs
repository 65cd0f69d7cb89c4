//! The PNG/JPEG loader as `segment` and `patches` use it: decode within a memory budget, then
//! the pixels as points and as patches. Never a panic, nothing allocated beyond the budget.
#![no_main]

use kmeans_knn::image_ops::Pixels;
use kmeans_knn::io::image::decode_image_within;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

/// 32 Ki pixels: small enough that the patches of every accepted image stay far below
/// libFuzzer's -malloc_limit_mb.
const BUDGET: u64 = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Ok(img) = decode_image_within(data, Path::new("fuzz.png"), Some(BUDGET)) else {
        return;
    };
    let px = Pixels::from_image(&img);
    assert_eq!(px.len(), (img.width() * img.height()) as usize);
    let m = px.matrix();
    assert_eq!(m.rows(), px.len());
    assert!(m.as_slice().iter().all(|v| (0.0..=255.0).contains(v)));
    let side = 1 + data.len() % 4;
    if let Ok(p) = px.patches(side, 1 + data.len() % 3) {
        assert_eq!(p.matrix().cols(), side * side * px.channels);
    }
});
