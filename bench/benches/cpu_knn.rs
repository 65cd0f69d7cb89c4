//! CPU criterion bench: kNN search (squared L2) on `Device::Cpu` for case S of `gpu-bench`
//! (a mid-sized search: 1,200 queries, 32,768 training rows, d = 256, k = 25; uniform [0, 1),
//! training seed 2, query seed 3). The index is built once, outside the timing, as a FAISS
//! user's `IndexFlatL2.add` would be.
//!
//! `cargo bench -p kmeans-knn-bench --bench cpu_knn`; `bench/cpu_baseline.py --cases S --ours
//! target/criterion` puts the median next to scikit-learn and faiss-cpu.

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use kmeans_knn::{Device, DistanceMetric, KnnIndex, MatrixView};
use kmeans_knn_bench::data::{KNN_CASES, uniform};
use std::time::Duration;

fn search(c: &mut Criterion) {
    let mut group = c.benchmark_group("cpu_knn");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(2));
    group.measurement_time(Duration::from_secs(8));
    let case = KNN_CASES.iter().find(|c| c.name == "S").expect("case S");
    let train = uniform(case.n * case.d, 2);
    let queries = uniform(case.m * case.d, 3);
    let x = MatrixView::new(&train, case.n, case.d).expect("valid shape");
    let q = MatrixView::new(&queries, case.m, case.d).expect("valid shape");
    let index = KnnIndex::new(x, DistanceMetric::SqEuclidean, Device::Cpu).expect("CPU index");
    group.throughput(Throughput::Elements(case.m as u64));
    let id = BenchmarkId::new(
        case.name,
        format!("m{}_n{}_d{}_k{}", case.m, case.n, case.d, case.k),
    );
    group.bench_function(id, |b| b.iter(|| index.search(&q, case.k).expect("search")));
    group.finish();
}

criterion_group!(benches, search);
criterion_main!(benches);
