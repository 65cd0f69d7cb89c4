//! GPU faults in the middle of a fit or a search (injected with `kmeans_knn::faults`): each ends
//! in a typed error, and the next call on the same GPU succeeds and equals the CPU bit for bit.
//! Also an invalid device ordinal. The faults are process-wide, so the tests take turns.

use kmeans_knn::faults::{self, Fault};
use kmeans_knn::{
    Device, DistanceMetric, Error, KMeans, KMeansModel, KMeansParams, KnnIndex, KnnResult,
    MatrixView,
};
use kmeans_knn_tests::{gpu, uniform};
use std::sync::Mutex;

static TURN: Mutex<()> = Mutex::new(());

const N: usize = 5000;
const D: usize = 24;

fn params() -> KMeansParams {
    KMeans::params(17).seed(9).max_iter(10).n_init(2)
}

fn fit(data: &[f32], device: Device) -> kmeans_knn::Result<KMeansModel> {
    params()
        .device(device)
        .fit(MatrixView::new(data, N, D).unwrap())
}

fn search(train: &[f32], queries: &[f32], device: Device) -> kmeans_knn::Result<KnnResult> {
    let index = KnnIndex::new(
        MatrixView::new(train, N, D).unwrap(),
        DistanceMetric::SqEuclidean,
        device,
    )?;
    index.search(MatrixView::new(queries, 300, D).unwrap(), 20)
}

fn same_model(a: &KMeansModel, b: &KMeansModel) {
    assert_eq!(a.labels, b.labels);
    assert_eq!(a.centroids, b.centroids);
    assert_eq!(a.n_iter, b.n_iter);
}

/// Arms `fault`, runs `work`, disarms, and returns what `work` returned.
fn with_fault<T>(fault: Fault, work: impl FnOnce() -> T) -> T {
    faults::inject(fault);
    let out = work();
    faults::clear();
    out
}

#[test]
fn out_of_memory_at_every_allocation_of_a_fit_is_an_error_then_the_gpu_works() {
    out_of_memory_at("out_of_memory_at_every_allocation_of_a_fit", 1..);
}

/// Under a sanitizer (blocking launches, two fits an allocation) every allocation takes minutes:
/// the first few and a spread of the rest.
#[test]
fn sanitize_out_of_memory_at_some_allocations_of_a_fit_is_an_error_then_the_gpu_works() {
    let spread = (1..=4).chain((3..).map(|i| 1 << i));
    out_of_memory_at(
        "sanitize_out_of_memory_at_some_allocations_of_a_fit",
        spread,
    );
}

/// Out of memory at each allocation `nths` names (increasing), until one past a fit's last, is
/// an error, and the GPU then fits as the CPU does.
fn out_of_memory_at(name: &str, nths: impl Iterator<Item = u64>) {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = gpu(name) else {
        return;
    };
    let data = uniform(N, D, 1);
    let cpu = fit(&data, Device::Cpu).unwrap();
    let mut failed = 0;
    for nth in nths {
        let outcome = with_fault(Fault::Alloc(nth), || fit(&data, gpu));
        same_model(&fit(&data, gpu).unwrap(), &cpu);
        match outcome {
            Err(Error::GpuOutOfMemory { .. }) => failed += 1,
            Err(other) => panic!("allocation {nth}: expected out of memory, got {other}"),
            // A fit makes fewer allocations than `nth`: every one has been made to fail.
            Ok(model) => {
                same_model(&model, &cpu);
                break;
            }
        }
    }
    assert!(failed >= 3, "only {failed} allocations of a fit were tried");
}

#[test]
fn sanitize_a_failed_launch_in_a_fit_is_an_error_then_the_gpu_works() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = gpu("a_failed_launch_in_a_fit") else {
        return;
    };
    let data = uniform(N, D, 2);
    let cpu = fit(&data, Device::Cpu).unwrap();
    for nth in [1, 2, 5, 17, 40] {
        let err = with_fault(Fault::Launch(nth), || fit(&data, gpu)).unwrap_err();
        assert!(
            matches!(&err, Error::Cuda { context, .. } if context.starts_with("launching kernel")),
            "launch {nth}: {err}"
        );
        same_model(&fit(&data, gpu).unwrap(), &cpu);
    }
}

#[test]
fn sanitize_faults_in_a_search_are_errors_then_the_gpu_works() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = gpu("faults_in_a_search") else {
        return;
    };
    let (train, queries) = (uniform(N, D, 3), uniform(300, D, 4));
    let cpu = search(&train, &queries, Device::Cpu).unwrap();
    for nth in 1..=6 {
        match with_fault(Fault::Alloc(nth), || search(&train, &queries, gpu)) {
            Err(Error::GpuOutOfMemory { .. }) => {}
            Err(other) => panic!("allocation {nth}: expected out of memory, got {other}"),
            Ok(found) => assert_eq!(found.indices, cpu.indices),
        }
        let err = with_fault(Fault::Launch(nth), || search(&train, &queries, gpu));
        assert!(matches!(err, Err(Error::Cuda { .. })), "launch {nth}");
        let found = search(&train, &queries, gpu).unwrap();
        assert_eq!(found.indices, cpu.indices);
        assert_eq!(found.distances, cpu.distances);
    }
}

#[test]
fn an_invalid_device_ordinal_is_a_typed_error() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let data = uniform(100, 3, 5);
    let err = KMeans::params(3)
        .device(Device::Cuda(999))
        .fit(MatrixView::new(&data, 100, 3).unwrap())
        .unwrap_err();
    match err {
        // With a driver: the device count; without one: what to install.
        Error::NoGpu(msg) => assert!(
            msg.contains("GPU 999 was asked for") || msg.contains("R525"),
            "{msg}"
        ),
        other => panic!("expected NoGpu, got {other}"),
    }
}
