//! The kernel image the GPU backend loads: the cubin of the GPU's architecture by default, the
//! PTX (JIT-compiled by the driver) with `KMEANS_KNN_FORCE_PTX=1` — and either computes what the
//! CPU does; and the PTX too when the driver rejects the cubin (`KMEANS_KNN_FAULTS=wrong-cubin`
//! hands it another architecture's). The backend, and so its image, is made once per process:
//! the GPU bundle's run.sh runs this binary all three ways, which proves the same binary runs on
//! a GPU it has no usable cubin for.

use kmeans_knn::{Device, DistanceMetric, FORCE_PTX_VAR, ImageKind, KMeans, KnnIndex, MatrixView};
use kmeans_knn_tests::{blobs, gpu, uniform};

#[test]
fn loads_the_cubin_or_the_forced_ptx() {
    let Some(_) = gpu("loads_the_cubin_or_the_forced_ptx") else {
        return;
    };
    let info = kmeans_knn::gpu_info(0).unwrap();
    let image = &info.kernels;
    eprintln!(
        "{} (compute capability {:?}): {image}",
        info.name, info.compute_capability
    );
    let major = info.compute_capability.0;
    let forced = std::env::var(FORCE_PTX_VAR).is_ok_and(|v| v == "1");
    let rejected = std::env::var("KMEANS_KNN_FAULTS").is_ok_and(|v| v.contains("wrong-cubin"));
    if forced {
        assert_eq!(image.kind, ImageKind::Ptx, "{image}");
        assert!(image.detail.contains(FORCE_PTX_VAR), "{image}");
    } else if rejected && (7..=9).contains(&major) {
        assert_eq!(image.kind, ImageKind::Ptx, "{image}");
        assert!(image.detail.contains("rejected"), "{image}");
    } else if (7..=9).contains(&major) {
        // Every major from Volta to Hopper has a cubin.
        assert_eq!(image.kind, ImageKind::Sass, "{image}");
        assert!(image.arch.starts_with(&format!("sm_{major}")), "{image}");
    }
    if image.kind == ImageKind::Ptx {
        let ptx = if major >= 8 { "sm_80" } else { "sm_70" };
        assert_eq!(image.arch, ptx, "{image}");
    }
}

#[test]
fn the_loaded_kernels_fit_and_search_as_the_cpu_does() {
    let Some(device) = gpu("the_loaded_kernels_fit_and_search_as_the_cpu_does") else {
        return;
    };
    let (n, d) = (3000, 8);
    let (points, _) = blobs(6, n / 6, d, 11);
    let data = MatrixView::new(&points, n, d).unwrap();
    let params = KMeans::params(6).seed(5).max_iter(50);
    let cpu = params
        .clone()
        .device(Device::Cpu)
        .fit(data.clone())
        .unwrap();
    let dev = params.device(device).fit(data.clone()).unwrap();
    assert!(dev.device.starts_with("cuda"), "ran on {}", dev.device);
    assert_eq!(cpu.labels, dev.labels);
    assert_eq!(cpu.centroids, dev.centroids);

    let queries = uniform(200, d, 12);
    let queries = MatrixView::new(&queries, 200, d).unwrap();
    let search = |device| {
        KnnIndex::new(data.clone(), DistanceMetric::SqEuclidean, device)
            .unwrap()
            .search(queries.clone(), 10)
            .unwrap()
    };
    let (cpu, dev) = (search(Device::Cpu), search(device));
    assert_eq!(cpu.indices, dev.indices);
    for (a, b) in cpu.distances.iter().zip(&dev.distances) {
        assert!((a - b).abs() <= 1e-4 * a.abs().max(1.0), "{a} vs {b}");
    }
}
