//! Radius search: the GPU (one GPU in batches and fill groups, streamed parts, a GPU set)
//! returns the CPU's CSR arrays bit for bit, on awkward shapes, every metric, ties at exactly
//! the radius, radius 0 and a radius that catches everything.
//!
//! GPU tests skip with a visible message without a GPU (and fail with
//! `KMEANS_KNN_REQUIRE_GPU=1`); `sanitize_radius_matches_cpu` runs both kernels on small shapes,
//! for compute-sanitizer.

use kmeans_knn::{Device, DistanceMetric, GpuSet, KnnIndex, MatrixView, RadiusNeighbors};
use kmeans_knn_tests::{gpu, lattice, uniform};

fn view(x: &[f32], d: usize) -> MatrixView<'_> {
    MatrixView::new(x, x.len() / d, d).unwrap()
}

/// Distances as bits, so that the comparison is exact.
fn bits(r: &RadiusNeighbors) -> (Vec<usize>, Vec<u32>, Vec<u32>) {
    let d = r.distances.iter().map(|v| v.to_bits()).collect();
    (r.offsets.clone(), r.indices.clone(), d)
}

/// Radii for `index`: 0, distances that the first query attains (ties at exactly the radius),
/// and everything.
fn radii(index: &KnnIndex, queries: &[f32], d: usize) -> Vec<f32> {
    let n = index.len();
    let full = index.search(view(&queries[..d], d), n).unwrap();
    let at = |i: usize| full.distances[[0, i.min(n - 1)]];
    let mut r = vec![at(0), at(n / 10), at(n / 2), f32::INFINITY];
    if index.metric().is_non_negative() {
        r.push(0.0);
    } else {
        r.push(-1.0);
    }
    r
}

fn radius_against_cpu(device: Device, small: bool) {
    let shapes: &[(usize, usize, usize)] = if small {
        &[(1, 1, 3), (37, 3, 20), (300, 5, 17)]
    } else {
        &[(1, 1, 3), (257, 1, 40), (1000, 3, 300), (4099, 17, 150)]
    };
    let Device::Cuda(o) = device else {
        unreachable!("the gate resolves to a GPU")
    };
    for &(n, d, m) in shapes {
        for (data, train, queries) in [
            ("lattice", lattice(n, d, 3, 7), lattice(m, d, 3, 8)),
            ("uniform", uniform(n, d, 9), uniform(m, d, 10)),
        ] {
            for metric in DistanceMetric::ALL {
                let case = format!("{data} n={n} d={d} m={m} {metric}");
                let cpu = KnnIndex::new(view(&train, d), metric, Device::Cpu).unwrap();
                let row = 4 * (d + 4);
                // Parts of 11 rows streamed through the GPU, where n exceeds 44 rows.
                let budget = 4 * 11 * row;
                let streamed =
                    KnnIndex::with_memory_budget(view(&train, d), metric, device, Some(budget))
                        .unwrap();
                assert_eq!(streamed.is_streamed(), n * row > budget, "{case}");
                let set = KnnIndex::new(
                    view(&train, d),
                    metric,
                    Device::Gpus(GpuSet::new(&[o, o]).unwrap()),
                )
                .unwrap();
                for radius in radii(&cpu, &queries, d) {
                    let want = bits(&cpu.radius_search(view(&queries, d), radius).unwrap());
                    let case = format!("{case} radius {radius}");
                    // The default budget; one query a batch and one row a fill group; a few.
                    for limit in [None, Some(1), Some(5 * 4 * (d + n + 4))] {
                        let index = KnnIndex::new(view(&train, d), metric, device).unwrap();
                        let got = (index.with_memory_limit(limit))
                            .radius_search(view(&queries, d), radius)
                            .unwrap();
                        assert_eq!(bits(&got), want, "{case} limit {limit:?}");
                    }
                    let got = streamed.radius_search(view(&queries, d), radius).unwrap();
                    assert_eq!(bits(&got), want, "{case} streamed");
                    let got = set.radius_search(view(&queries, d), radius).unwrap();
                    assert_eq!(bits(&got), want, "{case} GPU set");
                }
            }
        }
    }
}

#[test]
fn gpu_radius_matches_cpu() {
    if let Some(device) = gpu("gpu_radius_matches_cpu") {
        radius_against_cpu(device, false);
    }
}

#[test]
fn sanitize_radius_matches_cpu() {
    if let Some(device) = gpu("sanitize_radius_matches_cpu") {
        radius_against_cpu(device, true);
    }
}

/// The GPU's distances are the search's: the radius answer is the prefix of the GPU's own
/// k = n search within the radius.
#[test]
fn gpu_radius_is_the_search_prefix() {
    let Some(device) = gpu("gpu_radius_is_the_search_prefix") else {
        return;
    };
    let (n, d, m) = (2000, 8, 64);
    let (train, queries) = (lattice(n, d, 3, 21), lattice(m, d, 3, 22));
    for metric in DistanceMetric::ALL {
        let index = KnnIndex::new(view(&train, d), metric, device).unwrap();
        let full = index.search(view(&queries, d), n).unwrap();
        for radius in radii(&index, &queries, d) {
            let got = index.radius_search(view(&queries, d), radius).unwrap();
            for q in 0..m {
                let dists = full.distances.row(q);
                let within = dists.iter().take_while(|&&v| v <= radius).count();
                let want: Vec<u32> = full.indices.row(q).iter().take(within).copied().collect();
                assert_eq!(
                    got.indices_of(q),
                    &want[..],
                    "{metric} radius {radius} q {q}"
                );
                let want_d: Vec<u32> = dists.iter().take(within).map(|v| v.to_bits()).collect();
                let got_d: Vec<u32> = got.distances_of(q).iter().map(|v| v.to_bits()).collect();
                assert_eq!(got_d, want_d, "{metric} radius {radius} q {q}");
            }
        }
    }
}
