//! # kmeans-knn
//!
//! k-means clustering and exact k-nearest-neighbour search on an NVIDIA GPU — with kernels
//! written in Rust and compiled to PTX — or on the CPU with rayon. Both backends give the same
//! labels for the same input and seed.
//!
//! * [`KMeans`]: k-means++ / k-means‖ / random / random-labels initialisation, Lloyd iterations
//!   with squared-L2, L1 or cosine (spherical) assignment, sample weights, tol and
//!   unchanged-label stopping, n_init restarts, empty-cluster policy, `predict` and `transform`.
//! * [`MiniBatchKMeans`]: mini-batch k-means (Sculley 2010, as scikit-learn) with
//!   `partial_fit` for data in pieces; the same centroids on the CPU and the GPU.
//! * [`KnnIndex`], [`KnnClassifier`], [`KnnRegressor`], [`pairwise_distances`]: exact kNN search
//!   (top-k by k rounds of parallel minimum, bitonic sort or radix select, chosen by timing),
//!   majority or
//!   distance-weighted votes and averages (optionally with sample weights), distance matrices in
//!   row blocks; [`Scaler`] for feature scaling.
//! * [`kmeans::shard`]: k-means over rows split into shards (Dask partitions, GPUs, batches),
//!   equal bit for bit to [`KMeans`] on the concatenated rows however they are split.
//! * [`Device`]: `Auto` picks the GPU when libcuda and a device are present, else the CPU.
//!
//! **Threads.** [`KMeansParams`], [`KMeansModel`], [`KnnIndex`], [`KnnClassifier`] and [`Device`]
//! are `Send + Sync`: fit, predict and search from as many threads as you like, each result equal
//! bit for bit to the same call made alone. On a GPU every thread shares one CUDA context and
//! stream per device (the work is queued in turn); on the CPU, one rayon pool.
//!
//! **Drivers.** The GPU path needs a driver for CUDA 12.0 or later ([`MIN_DRIVER_VERSION`]); it
//! checks the version and every entry point it calls ([`DRIVER_ENTRY_POINTS`]) before the first
//! call, so a missing or older driver is an [`Error`], never a panic, and [`Device::Auto`] falls
//! back to the CPU.
//!
//! **Kernels.** The library embeds SASS (cubins from ptxas [`PTXAS_VERSION`]) for sm_70, 75, 80,
//! 86, 89 and 90, and PTX for every other GPU of compute capability 7.0 or later, which the
//! driver JIT-compiles on first use. [`GpuInfo::kernels`] says which was loaded;
//! `KMEANS_KNN_FORCE_PTX=1` ([`FORCE_PTX_VAR`]) makes the backend load the PTX everywhere.
//!
//! Results are reproducible: centroid sums are exact 64-bit fixed-point sums (see
//! [`kernels_gpu::fixed`]) and distances are accumulated in the same order on both backends.

mod backend;
#[doc(hidden)]
pub mod bench;
mod beside;
/// The `kmeans-knn` command line (the binary's body), public only for its fuzz tests.
#[doc(hidden)]
pub mod cli;
pub mod device;
pub mod distances;
pub mod error;
mod host_tasks;
pub mod image_ops;
pub mod io;
pub mod kmeans;
pub mod knn;
pub mod matrix;
mod sample_weight;
pub mod threads;
pub mod user_cache;
mod warm;

pub use backend::cpu::{SIMD_ENV as CPU_SIMD_VAR, SimdLevel};
pub use backend::cuda::GpuInfo;
pub use backend::cuda::driver::{ENTRY_POINTS as DRIVER_ENTRY_POINTS, MIN_DRIVER_VERSION};
/// Fault injection for tests: see the module's documentation.
#[cfg(feature = "fault-injection")]
pub use backend::cuda::faults;
pub use backend::cuda::image::{FORCE_PTX_VAR, ImageKind, KernelImage, PTXAS_VERSION};
pub use backend::cuda::nccl::{MIN_NCCL_VERSION, NCCL_VAR, Nccl};
pub use device::{Device, GpuSet};
pub use distances::{
    DistanceMetric, MinkowskiP, pairwise_distances, pairwise_distances_blocks,
    pairwise_distances_to_writer,
};
pub use error::{Error, Result};
pub use kmeans::{
    EmptyClusters, Init, Iteration, KMeans, KMeansModel, KMeansParams, Metric, MiniBatchKMeans,
    MiniBatchKMeansModel, MiniBatchParams, MiniBatchStep, Precision, Stop,
};
pub use knn::{
    AutoReport, AutoSource, FittedScaler, KnnClassifier, KnnIndex, KnnLayout, KnnRegressor,
    KnnResult, PathTiming, PrefilterReport, RadiusNeighbors, Scaler, Selection, TieBreak, Weights,
};
pub use matrix::MatrixView;
pub use threads::{set_global_threads, with_threads};
pub use warm::warm_up;

/// What the driver reports about GPU `ordinal`, or why it is not usable. Makes no CUDA context:
/// before the GPU has started in this process, `kernels` is the image it will load.
pub fn gpu_info(ordinal: usize) -> Result<GpuInfo> {
    backend::cuda::gpu_info(ordinal)
}

/// CUDA devices this process sees (after `CUDA_VISIBLE_DEVICES`); 0 without a usable driver.
/// Makes no CUDA context.
pub fn gpu_count() -> usize {
    backend::cuda::device_count()
}

/// Free and total memory of GPU `ordinal`, in bytes.
pub fn gpu_memory(ordinal: usize) -> Result<(usize, usize)> {
    backend::cuda::CudaBackend::shared(ordinal)?.memory()
}

/// The sm_70 PTX the GPU backend falls back to (for `info` and inspection).
pub fn ptx() -> &'static str {
    backend::cuda::image::PTX
}

/// The README's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeExamples;

/// docs/RUST.md's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/RUST.md")]
struct RustGuideExamples;
