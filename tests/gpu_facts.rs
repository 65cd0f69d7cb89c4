//! A GPU's facts as told before the driver starts (NVML, for `info`) equal the driver's own once
//! it has started. One test in its own binary: nothing else may start the GPU first.

use kmeans_knn::{Device, warm_up};
use kmeans_knn_tests::gpu;

#[test]
fn facts_before_the_start_match_the_drivers_and_warm_up_starts_it() {
    let before = kmeans_knn::gpu_info(0);
    let Some(_) = gpu("facts_before_the_start_match_the_drivers") else {
        return;
    };
    let before = before.expect("the GPU is usable, so its facts are known");
    let after = kmeans_knn::gpu_info(0).unwrap();
    assert_eq!(before.name, after.name);
    assert_eq!(before.compute_capability, after.compute_capability);
    assert_eq!(before.multiprocessors, after.multiprocessors);
    assert_eq!(before.max_shared_per_block, after.max_shared_per_block);
    assert_eq!(before.driver_version, after.driver_version);
    assert_eq!(before.kernels.kind, after.kernels.kind);
    // NVML counts a little memory the driver keeps for itself.
    let ratio = before.total_memory as f64 / after.total_memory as f64;
    assert!(
        (0.97..=1.03).contains(&ratio),
        "{before:?} against {after:?}"
    );
    let started = warm_up(Device::Cuda(0)).unwrap();
    assert!(started.starts_with("cuda:0 ("), "{started}");
    assert_eq!(
        warm_up(Device::Cpu).unwrap(),
        Device::Cpu.describe().unwrap()
    );
}
