//! Results are the same bits at every thread count: k-means fits, kNN searches and kNN votes on
//! the CPU run with 1, 2, 3 and 8 threads (`kmeans_knn::with_threads`) and are compared with the
//! global pool's; a GPU search run inside such a pool matches the CPU (skipped without a GPU).

use kmeans_knn::{
    Device, DistanceMetric, KMeans, KMeansModel, KnnClassifier, KnnIndex, KnnRegressor, MatrixView,
    Selection, Weights, with_threads,
};
use kmeans_knn_tests::{assert_same_fit, blobs, uniform};

const COUNTS: [usize; 4] = [1, 2, 3, 8];

#[test]
fn kmeans_fits_the_same_at_every_thread_count() {
    let (n, d) = (12_000, 6);
    let data = uniform(n, d, 7);
    let fit = || -> KMeansModel {
        assert!(rayon::current_num_threads() >= 1);
        KMeans::params(12)
            .seed(5)
            .n_init(2)
            .max_iter(30)
            .device(Device::Cpu)
            .fit(MatrixView::new(&data, n, d).unwrap())
            .unwrap()
    };
    let reference = fit();
    for threads in COUNTS {
        let model = with_threads(threads, || {
            assert_eq!(rayon::current_num_threads(), threads);
            fit()
        })
        .unwrap();
        assert_same_fit(&format!("{threads} threads"), &reference, &model);
    }
}

#[test]
fn knn_searches_the_same_at_every_thread_count() {
    let (n, m, d) = (3000, 400, 12);
    let train = uniform(n, d, 11);
    let queries = uniform(m, d, 12);
    for metric in [DistanceMetric::SqEuclidean, DistanceMetric::L1] {
        for (k, selection) in [
            (1, Selection::Auto),
            (10, Selection::KMin),
            (100, Selection::Radix),
        ] {
            let search = || {
                let index =
                    KnnIndex::new(MatrixView::new(&train, n, d).unwrap(), metric, Device::Cpu)
                        .unwrap()
                        .with_selection(selection);
                index
                    .search(MatrixView::new(&queries, m, d).unwrap(), k)
                    .unwrap()
            };
            let reference = search();
            for threads in COUNTS {
                let found = with_threads(threads, search).unwrap();
                let bits = |r: &kmeans_knn::KnnResult| r.distances.mapv(f32::to_bits);
                assert_eq!(
                    found.indices, reference.indices,
                    "{metric} k={k} {threads} threads"
                );
                assert_eq!(
                    bits(&found),
                    bits(&reference),
                    "{metric} k={k} {threads} threads"
                );
            }
        }
    }
}

#[test]
fn knn_votes_the_same_at_every_thread_count() {
    let (train, labels) = blobs(5, 800, 8, 3);
    let n = labels.len();
    let queries = uniform(900, 8, 4);
    let q = || MatrixView::new(&queries, 900, 8).unwrap();
    let x = || MatrixView::new(&train, n, 8).unwrap();
    let predict = || {
        let classifier = KnnClassifier::fit(
            x(),
            &labels,
            15,
            Weights::Distance,
            DistanceMetric::Euclidean,
            Device::Cpu,
        )
        .unwrap();
        let targets: Vec<f32> = labels.iter().map(|&l| l as f32 * 0.1).collect();
        let regressor = KnnRegressor::fit(
            x(),
            MatrixView::new(&targets, n, 1).unwrap(),
            15,
            Weights::Distance,
            DistanceMetric::Euclidean,
            Device::Cpu,
        )
        .unwrap();
        (
            classifier.predict(q()).unwrap(),
            classifier.predict_proba(q()).unwrap().mapv(f32::to_bits),
            regressor.predict(q()).unwrap().mapv(f32::to_bits),
        )
    };
    let reference = predict();
    for threads in COUNTS {
        assert_eq!(
            with_threads(threads, predict).unwrap(),
            reference,
            "{threads} threads"
        );
    }
}

#[test]
fn gpu_search_in_a_chosen_pool_matches_the_cpu() {
    let Some(device) = kmeans_knn_tests::gpu("gpu_search_in_a_chosen_pool_matches_the_cpu") else {
        return;
    };
    // Large enough that the answer's arrays are made beside the search (≥ 1 MiB).
    let (n, m, d, k) = (20_000, 3000, 16, 50);
    let train = uniform(n, d, 21);
    let queries = uniform(m, d, 22);
    let search = |device| {
        let index = KnnIndex::new(
            MatrixView::new(&train, n, d).unwrap(),
            DistanceMetric::SqEuclidean,
            device,
        )
        .unwrap();
        index
            .search(MatrixView::new(&queries, m, d).unwrap(), k)
            .unwrap()
    };
    let cpu = search(Device::Cpu);
    for threads in COUNTS {
        let found = with_threads(threads, || search(device)).unwrap();
        assert_eq!(found.indices, cpu.indices, "{threads} threads");
        let bits = |r: &kmeans_knn::KnnResult| r.distances.mapv(f32::to_bits);
        assert_eq!(bits(&found), bits(&cpu), "{threads} threads");
    }
}
