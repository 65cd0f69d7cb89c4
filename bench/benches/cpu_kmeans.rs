//! CPU criterion benches: one Lloyd iteration (assign + update) on `Device::Cpu` for cases A–D
//! of `gpu-bench` (same data: uniform [0, 1), seed 1; initial centroids = the first k rows).
//!
//! `cargo bench -p kmeans-knn-bench --bench cpu_kmeans [-- FILTER]`; `bench/cpu_baseline.py
//! --ours target/criterion` puts the medians next to scikit-learn and faiss-cpu.

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use kmeans_knn::bench::lloyd_iteration_ms;
use kmeans_knn::{Device, Init, KMeans, MatrixView, Metric, Precision};
use kmeans_knn_bench::data::case;
use std::time::Duration;

fn lloyd(c: &mut Criterion) {
    let mut group = c.benchmark_group("cpu_lloyd");
    // One iteration takes milliseconds (A–C) to about a second (D): few, flat samples.
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    for name in ["A", "B", "C", "D"] {
        let case = case(name).expect("known case");
        let (data, centroids) = case.data();
        let x = MatrixView::new(&data, case.n, case.d).expect("valid shape");
        group.throughput(Throughput::Elements(case.n as u64));
        let (warm_up, measure) = if name == "D" { (2, 10) } else { (1, 4) };
        group.warm_up_time(Duration::from_secs(warm_up));
        group.measurement_time(Duration::from_secs(measure));
        let id = BenchmarkId::new(name, format!("n{}_d{}_k{}", case.n, case.d, case.k));
        group.bench_function(id, |b| {
            b.iter_custom(|iters| {
                let ms = lloyd_iteration_ms(
                    Device::Cpu,
                    &x,
                    &centroids,
                    Metric::L2,
                    Precision::Exact,
                    0,
                    iters as usize,
                )
                .expect("CPU Lloyd iteration")
                .ms;
                Duration::from_secs_f64(ms.iter().sum::<f64>() / 1e3)
            })
        });
    }
    group.finish();
}

/// k-means++ seeding alone and a whole fit (k-means++ then Lloyd to convergence) on
/// 200,000 × 128 uniform points (seed 1), k = 256: `bench/cpu_baseline.py --seeding` times
/// scikit-learn's `kmeans_plusplus` and `KMeans.fit` on the same data.
fn seeding(c: &mut Criterion) {
    let (n, d, k) = (200_000, 128, 256);
    let data = kmeans_knn_bench::data::uniform(n * d, 1);
    let x = || MatrixView::new(&data, n, d).expect("valid shape");
    let params = KMeans::params(k).seed(0).device(Device::Cpu);
    let mut group = c.benchmark_group("cpu_seeding");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(20));
    let id = format!("n{n}_d{d}_k{k}");
    group.bench_function(BenchmarkId::new("kmeans++", &id), |b| {
        b.iter(|| params.initial_centroids(x()).expect("seeding"))
    });
    let parallel = params.clone().init(Init::KMeansParallel);
    group.bench_function(BenchmarkId::new("kmeans||", &id), |b| {
        b.iter(|| parallel.initial_centroids(x()).expect("seeding"))
    });
    group.bench_function(BenchmarkId::new("fit", &id), |b| {
        b.iter(|| params.fit(x()).expect("fit"))
    });
    group.finish();
}

criterion_group!(benches, lloyd, seeding);
criterion_main!(benches);
