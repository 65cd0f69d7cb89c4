//! `Selection::Auto` on the GPU: its choice is reported, lies near the fastest path it timed, is
//! kept for the process and in the user cache for the next (a damaged entry is timed again), and
//! a prepared index (`KnnIndex::prepare`) searches like the CPU at any query count. Each test is
//! skipped visibly without a GPU.

use kmeans_knn::{
    AutoSource, Device, DistanceMetric, KnnClassifier, KnnIndex, KnnResult, MatrixView, Selection,
    Weights,
};
use kmeans_knn_tests::{gpu, uniform};
use std::process::Command;

/// Set in the child processes of `gpu_auto_choice_is_kept_between_processes`.
const CHILD_VAR: &str = "KMEANS_KNN_AUTO_CHILD";

fn view(data: &[f32], d: usize) -> MatrixView<'_> {
    MatrixView::new(data, data.len() / d, d).unwrap()
}

#[track_caller]
fn assert_same(a: &KnnResult, b: &KnnResult, what: &str) {
    assert_eq!(a.indices, b.indices, "{what}: indices");
    let bits = |r: &KnnResult| r.distances.mapv(f32::to_bits);
    assert_eq!(bits(a), bits(b), "{what}: distances");
}

#[test]
fn gpu_auto_report_names_a_path_near_the_fastest() {
    let Some(device) = gpu("gpu_auto_report_names_a_path_near_the_fastest") else {
        return;
    };
    let (n, m, d) = (40_000, 700, 32);
    let train = uniform(n, d, 61);
    let queries = uniform(m, d, 62);
    for k in [16, 512] {
        let index = KnnIndex::new(view(&train, d), DistanceMetric::SqEuclidean, device).unwrap();
        let found = index.search(view(&queries, d), k).unwrap();
        let report = index.auto_report(k).expect("Auto chose");
        assert_eq!(report.selection, found.selection, "k = {k}");
        assert_eq!(report.prefilter, found.prefilter.is_some(), "k = {k}");
        let fastest = (report.timings.iter())
            .filter_map(|t| t.min_ms)
            .fold(f64::INFINITY, f64::min);
        let chosen = (report.timings.iter())
            .find(|t| (t.selection, t.prefilter) == (report.selection, report.prefilter))
            .expect("the choice is among the timings");
        assert!(
            chosen.min_ms.is_some_and(|ms| ms <= 1.2 * fastest),
            "k = {k}: {report:?}"
        );
        let cpu = KnnIndex::new(view(&train, d), DistanceMetric::SqEuclidean, Device::Cpu)
            .unwrap()
            .search(view(&queries, d), k)
            .unwrap();
        assert_same(&found, &cpu, &format!("k = {k}"));
        // Kept per shape for the process: another index of the shape reports the same choice.
        let other = KnnIndex::new(view(&train, d), DistanceMetric::SqEuclidean, device).unwrap();
        other.search(view(&queries[..5 * d], d), k).unwrap();
        assert_eq!(other.auto_report(k), Some(report));
    }
}

/// The child process's work: an `Auto` search on a fixed shape, and its choice and source on
/// stdout.
#[test]
#[ignore = "run by gpu_auto_choice_is_kept_between_processes"]
fn auto_child() {
    if std::env::var_os(CHILD_VAR).is_none() {
        return;
    }
    let device = Device::Cuda(0);
    let (n, m, d, k) = (20_000, 300, 16, 64);
    let train = uniform(n, d, 71);
    let queries = uniform(m, d, 72);
    let index = KnnIndex::new(view(&train, d), DistanceMetric::SqEuclidean, device).unwrap();
    let found = index.search(view(&queries, d), k).unwrap();
    let report = index.auto_report(k).unwrap();
    let source = match report.source {
        AutoSource::Timed => "timed",
        AutoSource::Cached => "cached",
    };
    println!(
        "AUTO {} {} {source}",
        found.selection,
        found.prefilter.is_some()
    );
}

#[test]
fn gpu_auto_choice_is_kept_between_processes() {
    if gpu("gpu_auto_choice_is_kept_between_processes").is_none() {
        return;
    }
    let cache = tempfile::tempdir().unwrap();
    let child = || {
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "auto_child", "--nocapture"])
            .env(CHILD_VAR, "1")
            .env("KMEANS_KNN_CACHE_DIR", cache.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{stdout}");
        let line = (stdout.lines())
            .find_map(|l| l.strip_prefix("AUTO "))
            .unwrap_or_else(|| panic!("no choice in {stdout}"))
            .to_string();
        let (path, source) = line.rsplit_once(' ').unwrap();
        (path.to_string(), source.to_string())
    };
    let (path, source) = child();
    assert_eq!(source, "timed");
    for _ in 0..3 {
        assert_eq!(child(), (path.clone(), "cached".to_string()));
    }
    // A damaged entry is timed again (and rewritten).
    let entries: Vec<_> = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("knn-auto")
        })
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    std::fs::write(&entries[0], "kmeans-knn knn auto 1\nchoice heap tf32\n").unwrap();
    assert_eq!(child().1, "timed");
    assert_eq!(child().1, "cached");
}

fn prepared_searches_like_the_cpu(device: Device, small: bool) {
    let (n, d, k) = if small { (700, 8, 9) } else { (30_000, 24, 40) };
    let train = uniform(n, d, 81);
    let counts = if small { [3, 40, 65] } else { [37, 1000, 1500] };
    let cpu = KnnIndex::new(view(&train, d), DistanceMetric::Euclidean, Device::Cpu).unwrap();
    for (selection, prefilter) in [
        (Selection::Auto, true),
        (Selection::Radix, true),
        (Selection::KMin, false),
    ] {
        let index = KnnIndex::new(view(&train, d), DistanceMetric::Euclidean, device)
            .unwrap()
            .with_selection(selection)
            .with_prefilter(prefilter);
        index.prepare(counts[1], k).unwrap();
        // With `Auto`, prepare made the choice before any search.
        if selection == Selection::Auto {
            assert!(index.auto_report(k).is_some());
        }
        for m in counts {
            let queries = uniform(m, d, 82 + m as u64);
            let what = format!("{selection} prefilter {prefilter}, {m} queries");
            let found = index.search(view(&queries, d), k).unwrap();
            assert_same(&found, &cpu.search(view(&queries, d), k).unwrap(), &what);
        }
    }
    // A classifier prepared for probabilities predicts like the CPU's, with and without them.
    let labels: Vec<u32> = (0..n as u32).map(|i| i % 5).collect();
    let classifier = |device| {
        let x = view(&train, d);
        KnnClassifier::fit(
            x,
            &labels,
            k,
            Weights::Distance,
            DistanceMetric::Euclidean,
            device,
        )
        .unwrap()
    };
    let (on_gpu, on_cpu) = (classifier(device), classifier(Device::Cpu));
    on_gpu.prepare(counts[1], true).unwrap();
    for m in counts {
        let queries = uniform(m, d, 90 + m as u64);
        let q = || view(&queries, d);
        assert_eq!(on_gpu.predict(q()).unwrap(), on_cpu.predict(q()).unwrap());
        assert_eq!(
            on_gpu.predict_proba(q()).unwrap().mapv(f32::to_bits),
            on_cpu.predict_proba(q()).unwrap().mapv(f32::to_bits)
        );
    }
    let index = KnnIndex::new(view(&train, d), DistanceMetric::Euclidean, device).unwrap();
    assert!(index.prepare(10, 0).is_err());
    assert!(index.prepare(10, n + 1).is_err());
    index.prepare(0, 1).unwrap();
}

#[test]
fn gpu_prepared_index_searches_like_the_cpu() {
    if let Some(device) = gpu("gpu_prepared_index_searches_like_the_cpu") {
        prepared_searches_like_the_cpu(device, false);
    }
}

#[test]
fn sanitize_prepared_index_searches_like_the_cpu() {
    if let Some(device) = gpu("sanitize_prepared_index_searches_like_the_cpu") {
        prepared_searches_like_the_cpu(device, true);
    }
}
