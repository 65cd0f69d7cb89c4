//! The device memory of a kNN search over a GPU set: each GPU's peak against one GPU's. Its own
//! test binary, so that no other test's buffers share the process's memory pools while it
//! measures their high-water marks.

use kmeans_knn::bench::{device_peak_bytes, knn_set_overhead_bytes};
use kmeans_knn::{Device, DistanceMetric, GpuSet, KnnIndex, KnnLayout, MatrixView};
use kmeans_knn_tests::{gpu, uniform};

fn view(data: &[f32], d: usize) -> MatrixView<'_> {
    MatrixView::new(data, data.len() / d, d).unwrap()
}

/// Each GPU of a set holds at most its share of one GPU's peak for the same search plus the
/// fixed overhead of `docs/SCALE.md` (`knn_set_overhead_bytes`), in both layouts: with a part
/// small enough for the prefilter to store its approximations (one GPU with all the rows stores
/// none), the store no longer grows with the queries; a copy of all the rows holds the rows
/// beyond its share and a share of the queries' buffers. Needs two GPUs or more (every GPU of
/// the machine).
#[test]
fn each_gpu_of_a_set_peaks_at_its_share_plus_the_overhead() {
    let test = "each_gpu_of_a_set_peaks_at_its_share_plus_the_overhead";
    if gpu(test).is_none() {
        return;
    }
    let count = kmeans_knn::gpu_count();
    if count < 2 {
        let line = format!("SKIPPED (fewer than 2 GPUs): {test}: {count} GPU");
        std::io::Write::write_all(&mut std::io::stderr(), (line + "\n").as_bytes()).unwrap();
        return;
    }
    let (n, d, m, k) = (400_000, 32, 4000, 32);
    let (train, queries) = (uniform(n, d, 97), uniform(m, d, 98));
    let peaks = |device: Device| {
        device_peak_bytes(device, true).unwrap();
        let index = KnnIndex::new(view(&train, d), DistanceMetric::SqEuclidean, device).unwrap();
        let found = index.search(view(&queries, d), k).unwrap();
        let peaks = device_peak_bytes(device, true).unwrap();
        (
            found.indices,
            peaks.into_iter().map(Option::unwrap).collect::<Vec<_>>(),
        )
    };
    let (one, one_peak) = peaks(Device::Cuda(0));
    let ordinals: Vec<usize> = (0..count).collect();
    for layout in [KnnLayout::Shard, KnnLayout::Replicate] {
        let set = GpuSet::new(&ordinals).unwrap().with_knn_layout(layout);
        let (found, set_peaks) = peaks(Device::Gpus(set));
        assert!(
            one == found,
            "the set's answer differs from one GPU's ({layout})"
        );
        let overhead = knn_set_overhead_bytes(n, d, m, k, count, layout);
        for (g, &peak) in set_peaks.iter().enumerate() {
            let rows = (g + 1) * n / count - g * n / count;
            let bound = one_peak[0] * rows / n + overhead;
            assert!(
                peak <= bound,
                "{layout}, GPU {g} of {count}: peak {peak} bytes above {bound} (one GPU {}, \
                 overhead {overhead})",
                one_peak[0]
            );
        }
    }
}
