//! Mini-batch k-means steps on the GPU (`kernels_gpu::minibatch`): the data is uploaded once (by
//! the Lloyd object that also labels every row at the end); a step uploads its row indices,
//! lays the centroids out by dimension, runs the assign and update kernels and reads back the
//! batch's distances and per-centroid counts. CPU twin: `backend/cpu/minibatch.rs`.

use super::kmeans::CudaLloyd;
use super::launch::{Reads, Writes};
use super::{CudaBackend, arg_u32};
use crate::backend::vocab::Metric;
use crate::backend::{BatchReport, Layout, Lloyd, LloydSpec, MiniBatch, Readback};
use crate::error::{Error, Result};
use crate::matrix::MatrixView;
use cudarc::driver::CudaSlice;
use kernels_gpu::centroids::{
    CentroidsByDimensionParams, KMEANS_CENTROIDS_BY_DIMENSION,
    SHARED_BYTES as CENTROIDS_BY_DIMENSION_SHARED_BYTES, centroids_by_dimension_grid,
};
use kernels_gpu::fixed::{inv_pow2_f64, pow2_f32};
use kernels_gpu::math::AssignMetric;
use kernels_gpu::minibatch::{
    KMEANS_MINIBATCH_ASSIGN_L1, KMEANS_MINIBATCH_ASSIGN_L2, KMEANS_MINIBATCH_SHIFT,
    KMEANS_MINIBATCH_UPDATE, MinibatchAssignParams, MinibatchShiftParams, MinibatchUpdateParams,
    assign_blocks, assign_shared_bytes, shift_grid, update_grid,
};

pub(crate) struct CudaMiniBatch<'a> {
    gpu: &'a CudaBackend,
    /// The resident rows, and the assignment of all of them at the end of a fit.
    lloyd: CudaLloyd<'a>,
    d: usize,
    k: usize,
    metric: AssignMetric,
    scales: CudaSlice<f32>,
    inv_scales: CudaSlice<f64>,
    current: CudaSlice<f32>,
    next: CudaSlice<f32>,
    /// The current centroids by dimension (`d × k_padded`) and their squared norms.
    centroids_t: CudaSlice<f32>,
    c_sq_norms: CudaSlice<f32>,
    /// The batch's fixed-point sums and counts: zero between steps (the update kernel clears
    /// them after reading).
    sums: CudaSlice<i64>,
    batch_counts: CudaSlice<u32>,
    counts: CudaSlice<u64>,
    /// The batch's row indices and distances (room for `capacity` rows), its counts per centroid.
    rows: CudaSlice<u32>,
    distances: CudaSlice<f32>,
    capacity: usize,
    report: CudaSlice<u32>,
    shifts: CudaSlice<f64>,
}

impl Drop for CudaMiniBatch<'_> {
    fn drop(&mut self) {
        self.gpu.bind_for_drop();
    }
}

impl<'a> CudaMiniBatch<'a> {
    pub(crate) fn new(
        gpu: &'a CudaBackend,
        data: &'a MatrixView<'a>,
        k: usize,
        metric: Metric,
        scales: &[i32],
    ) -> Result<Self> {
        let d = data.cols();
        let lloyd = CudaLloyd::new(
            gpu,
            data,
            Layout::default(),
            &LloydSpec::predict(k, d, metric),
        )?;
        let f32_scales: Vec<f32> = scales.iter().map(|&s| pow2_f32(s)).collect();
        let f64_inv: Vec<f64> = scales.iter().map(|&s| inv_pow2_f64(s)).collect();
        Ok(CudaMiniBatch {
            gpu,
            lloyd,
            d,
            k,
            metric: metric.assign(),
            scales: gpu.upload(&f32_scales, "fixed-point scales")?,
            inv_scales: gpu.upload(&f64_inv, "fixed-point scales")?,
            current: gpu.zeros(k * d, "centroids")?,
            next: gpu.zeros(k * d, "centroids")?,
            centroids_t: gpu.zeros(d * k.next_multiple_of(4), "centroids by dimension")?,
            c_sq_norms: gpu.zeros(k, "centroid norms")?,
            sums: gpu.zeros(k * d, "cluster sums")?,
            batch_counts: gpu.zeros(k, "batch counts")?,
            counts: gpu.zeros(k, "cluster counts")?,
            rows: gpu.zeros(0, "batch rows")?,
            distances: gpu.zeros(0, "batch distances")?,
            capacity: 0,
            report: gpu.zeros(k, "batch counts")?,
            shifts: gpu.zeros(k, "centroid shifts")?,
        })
    }

    /// Makes room for a batch of `len` rows.
    fn reserve(&mut self, len: usize) -> Result<()> {
        if len > self.capacity {
            self.rows = self.gpu.zeros(len, "batch rows")?;
            self.distances = self.gpu.zeros(len, "batch distances")?;
            self.capacity = len;
        }
        Ok(())
    }

    /// Queues the copy of the current centroids by dimension, with their squared norms for
    /// squared L2.
    fn queue_centroids_by_dimension(&mut self) -> Result<()> {
        let (k, d, k_padded) = (self.k, self.d, self.k.next_multiple_of(4));
        let mut norms = (self.metric == AssignMetric::SqL2).then_some(&mut self.c_sq_norms);
        self.gpu.launch(
            KMEANS_CENTROIDS_BY_DIMENSION,
            centroids_by_dimension_grid(k),
            CENTROIDS_BY_DIMENSION_SHARED_BYTES,
            CentroidsByDimensionParams {
                centroids: self.current.reads(k * d),
                k: k as u32,
                d: d as u32,
                k_padded: k_padded as u32,
                out: self.centroids_t.writes(d * k_padded),
                norms: norms.writes(k),
            },
        )
    }

    /// Queues the assignment of the first `batch` rows of `self.rows`, with their sums.
    fn queue_assign(&mut self, batch: usize) -> Result<()> {
        let (d, k, k_padded) = (self.d, self.k, self.k.next_multiple_of(4));
        let kernel = match self.metric {
            AssignMetric::SqL2 => KMEANS_MINIBATCH_ASSIGN_L2,
            AssignMetric::L1 => KMEANS_MINIBATCH_ASSIGN_L1,
        };
        let x = self.lloyd.rows()?;
        self.gpu.launch(
            kernel,
            assign_blocks(batch),
            assign_shared_bytes(kernel.block as usize),
            MinibatchAssignParams {
                // Any resident row may be in the batch.
                x: x.reads(x.len()),
                d: d as u32,
                rows: self.rows.reads(batch),
                batch: batch as u32,
                centroids_t: self.centroids_t.reads(d * k_padded),
                k_padded: k_padded as u32,
                c_sq_norms: self.c_sq_norms.reads(k),
                k: k as u32,
                scales: self.scales.reads(d),
                sums: self.sums.writes(k * d),
                counts: self.batch_counts.writes(k),
                distances: self.distances.writes(batch),
            },
        )
    }

    /// Queues the learning-rate update of every centroid into `next`.
    fn queue_update(&mut self) -> Result<()> {
        let (d, k) = (self.d, self.k);
        self.gpu.launch(
            KMEANS_MINIBATCH_UPDATE,
            update_grid(k),
            0,
            MinibatchUpdateParams {
                current: self.current.reads(k * d),
                next: self.next.writes(k * d),
                d: d as u32,
                sums: self.sums.writes(k * d),
                batch_counts: self.batch_counts.writes(k),
                counts: self.counts.writes(k),
                inv_scales: self.inv_scales.reads(d),
                report: self.report.writes(k),
            },
        )
    }
}

impl MiniBatch for CudaMiniBatch<'_> {
    fn set_centroids(&mut self, centroids: &[f32]) -> Result<()> {
        self.gpu.write(centroids, &mut self.current, "centroids")
    }

    fn set_counts(&mut self, counts: &[u64]) -> Result<()> {
        self.gpu.write(counts, &mut self.counts, "cluster counts")
    }

    fn step(&mut self, rows: &[u32]) -> Result<BatchReport> {
        if rows.is_empty() {
            return Err(Error::invalid(
                "batch",
                "a mini-batch needs at least one row",
            ));
        }
        arg_u32(rows.len(), "batch size")?;
        self.reserve(rows.len())?;
        self.gpu.write(rows, &mut self.rows, "the batch's rows")?;
        self.queue_centroids_by_dimension()?;
        self.queue_assign(rows.len())?;
        self.queue_update()?;
        Ok(BatchReport {
            distances: self
                .gpu
                .download(&self.distances, rows.len(), "batch distances")?,
            counts: self.gpu.download(&self.report, self.k, "batch counts")?,
        })
    }

    fn relocate(&mut self, cluster: usize, row: usize) -> Result<()> {
        let d = self.d;
        let what = "a row into a reassigned centroid";
        self.gpu.copy_within(
            self.lloyd.rows()?,
            row * d,
            &mut self.next,
            cluster * d,
            d,
            what,
        )
    }

    fn shifts(&mut self) -> Result<Vec<f64>> {
        let gpu = self.gpu;
        let (d, k) = (self.d, self.k);
        gpu.launch(
            KMEANS_MINIBATCH_SHIFT,
            shift_grid(k),
            0,
            MinibatchShiftParams {
                next: self.next.reads(k * d),
                current: self.current.reads(k * d),
                k: k as u32,
                d: d as u32,
                out: self.shifts.writes(k),
            },
        )?;
        gpu.download(&self.shifts, self.k, "centroid shifts")
    }

    fn commit(&mut self) {
        std::mem::swap(&mut self.current, &mut self.next);
    }

    fn centroids(&self) -> Result<Vec<f32>> {
        self.gpu
            .download(&self.current, self.k * self.d, "centroids")
    }

    fn assign_all(&mut self) -> Result<(Vec<u32>, Vec<f32>)> {
        let centroids = self.centroids()?;
        self.lloyd.set_centroids(&centroids)?;
        self.lloyd.assign()?;
        Ok((self.lloyd.labels()?, self.lloyd.min_distances()?))
    }
}
