//! The CPU backend: rayon over fixed chunks, with the same distance steps, tie-break and
//! fixed-point sums as the GPU kernels, so both give the same labels and centroids.

mod init;
pub(crate) mod kmeans;
pub(crate) mod knn;
pub(crate) mod locate;
pub(crate) mod minibatch;
pub mod partial;
mod simd;
mod vote;

pub use simd::{SIMD_ENV, SimdLevel};

use crate::backend::vocab::Metric;
use crate::backend::{Backend, Layout, Lloyd, LloydSpec, MiniBatch};
use crate::error::Result;
use crate::matrix::MatrixView;
use std::sync::{Arc, OnceLock};

pub(crate) use init::Seeder;
pub(crate) use vote::knn_vote;

/// The rayon backend.
pub struct CpuBackend;

impl CpuBackend {
    /// The one CPU backend; an error where [`SIMD_ENV`] asks for a level this CPU cannot run.
    pub(crate) fn shared() -> Result<Arc<dyn Backend>> {
        static CPU: OnceLock<Arc<CpuBackend>> = OnceLock::new();
        SimdLevel::active()?;
        Ok(CPU.get_or_init(|| Arc::new(CpuBackend)).clone())
    }
}

impl Backend for CpuBackend {
    fn describe(&self) -> String {
        format!(
            "cpu ({} threads, {})",
            rayon::current_num_threads(),
            simd::level().name()
        )
    }

    fn lloyd_at<'a>(
        &'a self,
        data: &'a MatrixView<'a>,
        layout: Layout,
        spec: &LloydSpec<'a>,
    ) -> Result<Box<dyn Lloyd + Send + 'a>> {
        // Precision::Tf32 is a GPU speed-up; here the assignment stays exact.
        Ok(Box::new(kmeans::CpuLloyd::new(
            data,
            spec,
            layout.first_row,
        )))
    }

    fn minibatch<'a>(
        &'a self,
        data: &'a MatrixView<'a>,
        k: usize,
        metric: Metric,
        scales: &[i32],
    ) -> Result<Box<dyn MiniBatch + 'a>> {
        Ok(Box::new(minibatch::CpuMiniBatch::new(
            data, k, metric, scales,
        )))
    }

    fn time_ms(&self, work: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
        let start = std::time::Instant::now();
        work()?;
        Ok(start.elapsed().as_secs_f64() * 1e3)
    }
}
