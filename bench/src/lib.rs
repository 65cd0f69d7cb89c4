//! Shared pieces of the kmeans-knn benchmarks (`gpu-bench`, `benches/cpu_kmeans.rs`).

pub mod all_paths;
pub mod data;
pub mod gpus;
pub mod precision_shapes;
pub mod radius;
pub mod whole;
