//! Radius search: the GPU (one GPU in batches and fill groups, streamed parts, a GPU set)
//! returns the CPU's CSR arrays bit for bit, on awkward shapes, every metric, ties at exactly
//! the radius, radius 0 and a radius that catches everything.
//!
//! GPU tests skip with a visible message without a GPU (and fail with
//! `KMEANS_KNN_REQUIRE_GPU=1`); `sanitize_radius_matches_cpu` and
//! `sanitize_radius_prefilter_matches_exact_and_cpu` run the kernels on small shapes, for
//! compute-sanitizer.

use kmeans_knn::{
    Device, DistanceMetric, GpuSet, KnnIndex, KnnLayout, MatrixView, RadiusNeighbors,
};
use kmeans_knn_tests::{copies_of_one_point, gpu, lattice, uniform};

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
    // The sanitizer's run: the same kernels with fewer launches (racecheck blocks on every
    // launch; the full set ran past 500 s beside other runs on an H200): lattice data (ties)
    // only, radii at the nearest, at half the rows and at nothing.
    let shapes: &[(usize, usize, usize)] = if small {
        &[(1, 1, 3), (37, 3, 20), (100, 5, 17)]
    } else {
        &[(1, 1, 3), (257, 1, 40), (1000, 3, 300), (4099, 17, 150)]
    };
    let Device::Cuda(o) = device else {
        unreachable!("the gate resolves to a GPU")
    };
    for &(n, d, m) in shapes {
        let sets = [
            ("lattice", lattice(n, d, 3, 7), lattice(m, d, 3, 8)),
            ("uniform", uniform(n, d, 9), uniform(m, d, 10)),
        ];
        for (data, train, queries) in sets.into_iter().take(if small { 1 } else { 2 }) {
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
                let sets = [KnnLayout::Shard, KnnLayout::Replicate].map(|layout| {
                    let set = GpuSet::new(&[o, o]).unwrap().with_knn_layout(layout);
                    KnnIndex::new(view(&train, d), metric, Device::Gpus(set)).unwrap()
                });
                let every = radii(&cpu, &queries, d);
                for radius in every.into_iter().step_by(if small { 2 } else { 1 }) {
                    let want = bits(&cpu.radius_search(view(&queries, d), radius).unwrap());
                    let case = format!("{case} radius {radius}");
                    // The default budget; one query a batch and one row a fill group (for
                    // shapes small enough: it launches per query and row, which under a
                    // sanitizer takes minutes past a few hundred pairs); a few.
                    let tiny = (n * m <= if small { 1_000 } else { 20_000 }).then_some(1);
                    for limit in [None, tiny, Some(5 * 4 * (d + n + 4))] {
                        let index = KnnIndex::new(view(&train, d), metric, device).unwrap();
                        let got = (index.with_memory_limit(limit))
                            .radius_search(view(&queries, d), radius)
                            .unwrap();
                        assert_eq!(bits(&got), want, "{case} limit {limit:?}");
                    }
                    let got = streamed.radius_search(view(&queries, d), radius).unwrap();
                    assert_eq!(bits(&got), want, "{case} streamed");
                    for set in &sets {
                        let got = set.radius_search(view(&queries, d), radius).unwrap();
                        assert_eq!(bits(&got), want, "{case} GPU set {:?}", set.layout());
                    }
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

/// Whether GPU 0 has tensor cores that the TF32 prefilter runs on (sm_80 and later).
fn tensor_cores() -> bool {
    kmeans_knn::gpu_info(0).is_ok_and(|i| i.compute_capability.0 >= 8)
}

/// The prefiltered radius search (L2 metrics) returns exactly the CPU's arrays and the exact GPU
/// path's, in one batch and in batches of a query, on one GPU and a GPU set; it reports that it
/// ran wherever the radius is finite and the GPU has tensor cores.
fn prefilter_against_exact_and_cpu(device: Device, small: bool) {
    let shapes: &[(usize, usize, usize)] = if small {
        &[(1, 1, 3), (130, 3, 20), (700, 5, 17)]
    } else {
        &[
            (1, 1, 3),
            (257, 1, 40),
            (1000, 3, 300),
            (4099, 17, 150),
            (20_000, 128, 64),
        ]
    };
    let Device::Cuda(o) = device else {
        unreachable!("the gate resolves to a GPU")
    };
    let set = Device::Gpus(GpuSet::new(&[o, o]).unwrap());
    let tc = tensor_cores();
    for &(n, d, m) in shapes {
        for (data, train, queries) in [
            ("lattice", lattice(n, d, 3, 7), lattice(m, d, 3, 8)),
            ("uniform", uniform(n, d, 9), uniform(m, d, 10)),
        ] {
            for metric in [DistanceMetric::SqEuclidean, DistanceMetric::Euclidean] {
                let case = format!("{data} n={n} d={d} m={m} {metric}");
                let cpu = KnnIndex::new(view(&train, d), metric, Device::Cpu).unwrap();
                let exact = KnnIndex::new(view(&train, d), metric, device)
                    .unwrap()
                    .with_prefilter(false);
                // Radius 0, ties at exactly the radius, ∞, and a finite one that holds every
                // row (more candidates than the list holds where n > 4096).
                let mut all = radii(&cpu, &queries, d);
                all.push(1e30);
                for radius in all {
                    let case = format!("{case} radius {radius}");
                    let want = bits(&cpu.radius_search(view(&queries, d), radius).unwrap());
                    let plain = exact.radius_search(view(&queries, d), radius).unwrap();
                    assert!(plain.prefilter.is_none(), "{case}");
                    assert_eq!(bits(&plain), want, "{case} exact path");
                    for limit in [None, Some(1)] {
                        let index = KnnIndex::new(view(&train, d), metric, device)
                            .unwrap()
                            .with_memory_limit(limit);
                        let got = index.radius_search(view(&queries, d), radius).unwrap();
                        assert_eq!(bits(&got), want, "{case} limit {limit:?}");
                        let expect = tc && radius.is_finite();
                        assert_eq!(
                            got.prefilter.is_some(),
                            expect,
                            "{case} {:?}",
                            got.prefilter
                        );
                        if let Some(p) = got.prefilter {
                            assert_eq!(p.queries, m, "{case}");
                            if radius == 1e30 && n > 4096 && limit.is_none() {
                                assert_eq!(p.exact_fallbacks, m, "{case}: every query overflows");
                            }
                        }
                    }
                    let got = (KnnIndex::new(view(&train, d), metric, set).unwrap())
                        .radius_search(view(&queries, d), radius)
                        .unwrap();
                    assert_eq!(bits(&got), want, "{case} GPU set");
                }
            }
        }
    }
}

#[test]
fn gpu_radius_prefilter_matches_exact_and_cpu() {
    if let Some(device) = gpu("gpu_radius_prefilter_matches_exact_and_cpu") {
        prefilter_against_exact_and_cpu(device, false);
    }
}

#[test]
fn sanitize_radius_prefilter_matches_exact_and_cpu() {
    if let Some(device) = gpu("sanitize_radius_prefilter_matches_exact_and_cpu") {
        prefilter_against_exact_and_cpu(device, true);
    }
}

/// Thousands of copies of one point: queries on them have more candidates than the list holds
/// and take the exact path, the others do not; the answer is the CPU's either way, in one batch
/// and in batches of a query (a batch of overflows sends the rest to the exact path).
fn prefilter_fallback(device: Device, small: bool) {
    let (n, dup, d) = if small {
        (6_000, 5_000, 3)
    } else {
        (40_000, 20_000, 16)
    };
    let (train, p) = copies_of_one_point(n, dup, d);
    let mut queries = uniform(6, d, 92);
    queries[..d].copy_from_slice(&p); // on the duplicates
    queries[5 * d..].copy_from_slice(&p); // on them, in a later batch
    for metric in [DistanceMetric::SqEuclidean, DistanceMetric::Euclidean] {
        let cpu = KnnIndex::new(view(&train, d), metric, Device::Cpu).unwrap();
        for radius in [0.0, 1e-3, 0.05] {
            let want = bits(&cpu.radius_search(view(&queries, d), radius).unwrap());
            for limit in [None, Some(1)] {
                let index = KnnIndex::new(view(&train, d), metric, device)
                    .unwrap()
                    .with_memory_limit(limit);
                let got = index.radius_search(view(&queries, d), radius).unwrap();
                let case = format!("{metric} radius {radius} limit {limit:?}");
                assert_eq!(bits(&got), want, "{case}");
                if tensor_cores() {
                    let p = got.prefilter.expect("the prefilter ran");
                    assert!(p.exact_fallbacks >= 2, "{case}: {p:?}");
                }
            }
        }
    }
}

#[test]
fn gpu_radius_prefilter_falls_back_exactly() {
    if let Some(device) = gpu("gpu_radius_prefilter_falls_back_exactly") {
        prefilter_fallback(device, false);
    }
}

#[test]
fn sanitize_radius_prefilter_falls_back_exactly() {
    if let Some(device) = gpu("sanitize_radius_prefilter_falls_back_exactly") {
        prefilter_fallback(device, true);
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
