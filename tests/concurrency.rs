//! Many threads at once on one backend: 16 fits and 16 searches with different seeds and shapes
//! run together, and each result equals the same call run alone, bit for bit. On the GPU every
//! thread shares one context and stream; on the CPU one rayon pool.
//!
//! Thread safety, as documented on the types: `KMeansParams`, `KMeansModel`, `KnnIndex`,
//! `KnnClassifier` and `Device` are `Send + Sync`; a `KnnIndex` is searched from many threads at
//! once through `&self`.

use kmeans_knn::kmeans::shard::Shard;
use kmeans_knn::{
    Device, DistanceMetric, KMeans, KMeansModel, KMeansParams, KnnClassifier, KnnIndex, KnnResult,
    MatrixView, Weights,
};
use kmeans_knn_tests::{gpu, uniform};

const THREADS: usize = 16;

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn public_types_are_send_and_sync() {
    assert_send_sync::<KMeansParams>();
    assert_send_sync::<KMeansModel>();
    assert_send_sync::<KnnIndex>();
    assert_send_sync::<KnnClassifier>();
    assert_send_sync::<Device>();
}

/// Shape and seed of job `i`: n not a multiple of anything, d from 1 to 40, k from 1 to 33.
/// Small, so that the test also finishes under compute-sanitizer's racecheck (which took over
/// 520 s with three times these shapes).
fn job(i: usize) -> (usize, usize, usize, KMeansParams) {
    let (n, d, k) = (100 + 13 * i, 1 + (i * 5) % 40, 1 + (i * 7) % 33);
    (n, d, k, KMeans::params(k).seed(i as u64).max_iter(3))
}

fn fit(i: usize, device: Device) -> KMeansModel {
    let (n, d, _, params) = job(i);
    let data = uniform(n, d, 100 + i as u64);
    params
        .device(device)
        .fit(MatrixView::new(&data, n, d).unwrap())
        .unwrap()
}

fn search(index: &KnnIndex, i: usize) -> KnnResult {
    let rows = 5 + 3 * i;
    let queries = uniform(rows, index.dim(), 200 + i as u64);
    let view = MatrixView::new(&queries, rows, index.dim()).unwrap();
    index.search(view, 1 + i % 25).unwrap()
}

fn run_together(device: Device) {
    let (n, d) = (400, 33);
    let train = uniform(n, d, 7);
    let index = KnnIndex::new(
        MatrixView::new(&train, n, d).unwrap(),
        DistanceMetric::SqEuclidean,
        device,
    )
    .unwrap();
    let labels: Vec<u32> = (0..n as u32).map(|i| i % 5).collect();
    let clf = KnnClassifier::fit(
        MatrixView::new(&train, n, d).unwrap(),
        &labels,
        7,
        Weights::Distance,
        DistanceMetric::Euclidean,
        device,
    )
    .unwrap();
    let queries = uniform(20, d, 8);
    let qview = || MatrixView::new(&queries, 20, d).unwrap();

    let alone_fits: Vec<_> = (0..THREADS).map(|i| fit(i, device)).collect();
    let alone_searches: Vec<_> = (0..THREADS).map(|i| search(&index, i)).collect();
    let alone_votes = clf.predict(qview()).unwrap();

    std::thread::scope(|s| {
        let fits: Vec<_> = (0..THREADS)
            .map(|i| s.spawn(move || fit(i, device)))
            .collect();
        let searches: Vec<_> = (0..THREADS)
            .map(|i| {
                let (index, clf, qview) = (&index, &clf, &qview);
                s.spawn(move || (search(index, i), clf.predict(qview()).unwrap()))
            })
            .collect();
        for (i, h) in fits.into_iter().enumerate() {
            let m = h.join().expect("a fit thread panicked");
            assert_eq!(m.labels, alone_fits[i].labels, "fit {i}: labels");
            assert_eq!(m.centroids, alone_fits[i].centroids, "fit {i}: centroids");
            assert_eq!(m.n_iter, alone_fits[i].n_iter, "fit {i}: iterations");
        }
        for (i, h) in searches.into_iter().enumerate() {
            let (found, votes) = h.join().expect("a search thread panicked");
            assert_eq!(found.indices, alone_searches[i].indices, "search {i}");
            assert_eq!(found.distances, alone_searches[i].distances, "search {i}");
            assert_eq!(votes, alone_votes, "vote {i}");
        }
    });
}

#[test]
fn sixteen_fits_and_searches_at_once_on_the_cpu_equal_each_alone() {
    run_together(Device::Cpu);
}

#[test]
fn sanitize_sixteen_fits_and_searches_at_once_on_the_gpu_equal_each_alone() {
    if let Some(gpu) = gpu("sixteen_fits_and_searches_at_once_on_the_gpu") {
        run_together(gpu);
    }
}

/// GPU values dropped on a thread that never used the GPU (as a Dask worker drops a shard on its
/// event loop's thread): their buffers are freed there, and the GPU's next calls, on yet another
/// thread, work and give the same results.
#[test]
fn gpu_values_dropped_on_a_fresh_thread_leave_the_gpu_working() {
    let Some(device) = gpu("gpu_values_dropped_on_a_fresh_thread_leave_the_gpu_working") else {
        return;
    };
    let (n, d) = (300, 7);
    let data = uniform(n, d, 3);
    let params = KMeans::params(4).seed(1);
    let run = || {
        let mut shards =
            vec![Shard::new(MatrixView::from_vec(data.clone(), n, d).unwrap(), 0, device).unwrap()];
        let model = params.fit_sharded(&mut shards).unwrap();
        let index = KnnIndex::new(
            MatrixView::new(&data, n, d).unwrap(),
            DistanceMetric::SqEuclidean,
            device,
        )
        .unwrap();
        let found = search(&index, 3);
        (shards, index, model, found)
    };
    let (shards, index, first, first_found) = std::thread::scope(|s| s.spawn(run).join().unwrap());
    std::thread::spawn(move || drop((shards, index)))
        .join()
        .unwrap();
    let (_, _, again, again_found) = std::thread::scope(|s| s.spawn(run).join().unwrap());
    assert_eq!(again.centroids, first.centroids);
    assert_eq!(again_found.indices, first_found.indices);
}
