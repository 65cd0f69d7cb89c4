//! The CPU backend: rayon over fixed chunks, with the same distance steps, tie-break and
//! fixed-point sums as the GPU kernels, so both give the same labels and centroids.

mod init;
mod kmeans;
mod knn;
mod simd;

use crate::backend::{Backend, Layout, Lloyd};
use crate::error::Result;
use crate::kmeans::Precision;
use crate::matrix::MatrixView;
use kernels_gpu::math::AssignMetric;
use std::sync::{Arc, OnceLock};

pub(crate) use init::Seeder;

/// Points per rayon task; fixed, so the order of float sums does not depend on the thread count.
pub(crate) const CHUNK: usize = 1024;

/// The rayon backend.
pub struct CpuBackend;

impl CpuBackend {
    pub(crate) fn shared() -> Arc<dyn Backend> {
        static CPU: OnceLock<Arc<CpuBackend>> = OnceLock::new();
        CPU.get_or_init(|| Arc::new(CpuBackend)).clone()
    }
}

impl Backend for CpuBackend {
    fn describe(&self) -> String {
        format!("cpu ({} threads)", rayon::current_num_threads())
    }

    fn lloyd_at<'a>(
        &'a self,
        data: &'a MatrixView<'a>,
        layout: Layout,
        k: usize,
        metric: AssignMetric,
        _precision: Precision,
        scales: &[i32],
    ) -> Result<Box<dyn Lloyd + Send + 'a>> {
        // Precision::Tf32 is a GPU speed-up; here the assignment stays exact.
        let lloyd = kmeans::CpuLloyd::new(data, k, metric, scales, layout.first_row);
        Ok(Box::new(lloyd))
    }

    fn time_ms(&self, work: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
        let start = std::time::Instant::now();
        work()?;
        Ok(start.elapsed().as_secs_f64() * 1e3)
    }
}
