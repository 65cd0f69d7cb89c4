//! Lloyd iterations on the GPU: the data stays resident, each step launches a handful of kernels
//! and copies back a few bytes (changed labels, inertia, empty clusters, shift).

use super::{CudaBackend, arg_u32};
use crate::backend::{AssignStats, Lloyd};
use crate::error::Result;
use crate::matrix::MatrixView;
use cudarc::driver::{CudaSlice, PushKernelArg};
use kernels_gpu::fixed::{inv_pow2_f64, pow2_f32};
use kernels_gpu::launch::{
    ASSIGN_SCRATCH_BYTES, BLOCK, REDUCE_BLOCK, assign_tile_k, sums_fit_shared,
};
use kernels_gpu::math::AssignMetric;

pub(crate) struct CudaLloyd<'a> {
    gpu: &'a CudaBackend,
    n: usize,
    d: usize,
    k: usize,
    metric: AssignMetric,
    x: CudaSlice<f32>,
    scales: CudaSlice<f32>,
    inv_scales: CudaSlice<f64>,
    centroids: CudaSlice<f32>,
    next: CudaSlice<f32>,
    labels: CudaSlice<u32>,
    min_dist: CudaSlice<f32>,
    block_inertia: CudaSlice<f64>,
    /// `[changed labels, empty clusters]`.
    counters: CudaSlice<u32>,
    total: CudaSlice<f64>,
    sizes: CudaSlice<u32>,
    sums: Sums,
}

/// Where the update step accumulates: per-block partials (shared memory) or one global set.
struct Sums {
    parts: usize,
    shared: bool,
    sums: CudaSlice<i64>,
    counts: CudaSlice<u32>,
}

impl<'a> CudaLloyd<'a> {
    pub(crate) fn new(
        gpu: &'a CudaBackend,
        data: &MatrixView<'_>,
        k: usize,
        metric: AssignMetric,
        scales: &[i32],
    ) -> Result<Self> {
        let (n, d) = (data.rows(), data.cols());
        arg_u32(n, "number of points")?;
        arg_u32(d, "number of dimensions")?;
        arg_u32(k, "k")?;
        let blocks = n.div_ceil(BLOCK as usize);
        let shared = sums_fit_shared(k, d);
        let parts = if shared {
            blocks.min(2 * gpu.multiprocessors()).max(1)
        } else {
            1
        };
        let f32_scales: Vec<f32> = scales.iter().map(|&s| pow2_f32(s)).collect();
        let f64_inv: Vec<f64> = scales.iter().map(|&s| inv_pow2_f64(s)).collect();
        Ok(CudaLloyd {
            gpu,
            n,
            d,
            k,
            metric,
            x: gpu.upload(data.as_slice(), "the data")?,
            scales: gpu.upload(&f32_scales, "fixed-point scales")?,
            inv_scales: gpu.upload(&f64_inv, "fixed-point scales")?,
            centroids: gpu.zeros(k * d, "centroids")?,
            next: gpu.zeros(k * d, "centroids")?,
            labels: gpu.zeros(n, "labels")?,
            min_dist: gpu.zeros(n, "distances")?,
            block_inertia: gpu.zeros(blocks, "inertia partials")?,
            counters: gpu.zeros(2, "counters")?,
            total: gpu.zeros(1, "a reduction result")?,
            sizes: gpu.zeros(k, "cluster sizes")?,
            sums: Sums {
                parts,
                shared,
                sums: gpu.zeros(parts * k * d, "cluster sums")?,
                counts: gpu.zeros(parts * k, "cluster counts")?,
            },
        })
    }

    /// Single-block fixed-order sum of `block_inertia` or squared difference into `total`.
    fn reduce(&mut self, kernel: &'static str) -> Result<f64> {
        let gpu = self.gpu;
        let f = gpu.function(kernel)?;
        let mut launch = gpu.launch(kernel, &f);
        let (len_inertia, len_cent) = (
            self.n.div_ceil(BLOCK as usize) as u32,
            (self.k * self.d) as u32,
        );
        match kernel {
            "sum_f64" => launch
                .args()
                .arg(&self.block_inertia)
                .arg(&len_inertia)
                .arg(&mut self.total),
            _ => launch
                .args()
                .arg(&self.next)
                .arg(&self.centroids)
                .arg(&len_cent)
                .arg(&mut self.total),
        };
        launch.run(1, REDUCE_BLOCK, REDUCE_BLOCK as usize * 8)?;
        Ok(gpu.download(&self.total, 1, "a reduction result")?[0])
    }
}

impl Lloyd for CudaLloyd<'_> {
    fn set_centroids(&mut self, centroids: &[f32]) -> Result<()> {
        self.gpu.write(centroids, &mut self.centroids, "centroids")
    }

    fn set_labels(&mut self, labels: &[u32]) -> Result<()> {
        self.gpu.write(labels, &mut self.labels, "labels")
    }

    fn assign(&mut self) -> Result<AssignStats> {
        let gpu = self.gpu;
        gpu.clear(&mut self.counters, "counters")?;
        let tile_k = assign_tile_k(self.d, self.k);
        let f = gpu.function("kmeans_assign")?;
        let mut launch = gpu.launch("kmeans_assign", &f);
        let (n, d, k, tk, m) = (
            self.n as u32,
            self.d as u32,
            self.k as u32,
            tile_k as u32,
            self.metric.id(),
        );
        launch
            .args()
            .arg(&self.x)
            .arg(&n)
            .arg(&d)
            .arg(&self.centroids)
            .arg(&k)
            .arg(&tk)
            .arg(&m)
            .arg(&mut self.labels)
            .arg(&mut self.min_dist)
            .arg(&mut self.counters)
            .arg(&mut self.block_inertia);
        let shared = ASSIGN_SCRATCH_BYTES + 4 * tile_k * self.d;
        launch.run(self.n.div_ceil(BLOCK as usize), BLOCK, shared)?;
        let inertia = self.reduce("sum_f64")?;
        let changed = gpu.download(&self.counters, 1, "the changed-label count")?[0];
        Ok(AssignStats {
            changed: changed as u64,
            inertia,
        })
    }

    fn update(&mut self) -> Result<usize> {
        let gpu = self.gpu;
        let (n, d, k) = (self.n as u32, self.d as u32, self.k as u32);
        gpu.clear(&mut self.counters, "counters")?;
        let s = &mut self.sums;
        if s.shared {
            let f = gpu.function("kmeans_accumulate_shared")?;
            let mut launch = gpu.launch("kmeans_accumulate_shared", &f);
            launch
                .args()
                .arg(&self.x)
                .arg(&n)
                .arg(&d)
                .arg(&self.labels)
                .arg(&k)
                .arg(&self.scales)
                .arg(&mut s.sums)
                .arg(&mut s.counts);
            launch.run(s.parts, BLOCK, 8 * self.k * self.d + 4 * self.k)?;
        } else {
            gpu.clear(&mut s.sums, "cluster sums")?;
            gpu.clear(&mut s.counts, "cluster counts")?;
            let f = gpu.function("kmeans_accumulate_global")?;
            let mut launch = gpu.launch("kmeans_accumulate_global", &f);
            launch
                .args()
                .arg(&self.x)
                .arg(&n)
                .arg(&d)
                .arg(&self.labels)
                .arg(&self.scales)
                .arg(&mut s.sums)
                .arg(&mut s.counts);
            let grid = (self.n * self.d)
                .div_ceil(BLOCK as usize)
                .min(8 * gpu.multiprocessors());
            launch.run(grid, BLOCK, 0)?;
        }
        let f = gpu.function("kmeans_finalize")?;
        let mut launch = gpu.launch("kmeans_finalize", &f);
        let parts = s.parts as u32;
        let mut empty = self.counters.slice_mut(1..2);
        launch
            .args()
            .arg(&s.sums)
            .arg(&s.counts)
            .arg(&parts)
            .arg(&k)
            .arg(&d)
            .arg(&self.inv_scales)
            .arg(&self.centroids)
            .arg(&mut self.next)
            .arg(&mut self.sizes)
            .arg(&mut empty);
        let grid = (self.k * self.d)
            .div_ceil(BLOCK as usize)
            .min(8 * gpu.multiprocessors());
        launch.run(grid, BLOCK, 0)?;
        let counters = gpu.download(&self.counters, 2, "the empty-cluster count")?;
        Ok(counters[1] as usize)
    }

    fn relocate(&mut self, cluster: usize, point: usize) -> Result<()> {
        let d = self.d;
        self.gpu.copy_within(
            &self.x,
            point * d,
            &mut self.next,
            cluster * d,
            d,
            "a point into an empty cluster",
        )
    }

    fn commit(&mut self) -> Result<f64> {
        let shift = self.reduce("sum_sq_diff")?;
        std::mem::swap(&mut self.centroids, &mut self.next);
        Ok(shift)
    }

    fn min_distances(&self) -> Result<Vec<f32>> {
        self.gpu.download(&self.min_dist, self.n, "distances")
    }

    fn sizes(&self) -> Result<Vec<u32>> {
        self.gpu.download(&self.sizes, self.k, "cluster sizes")
    }

    fn centroids(&self) -> Result<Vec<f32>> {
        self.gpu
            .download(&self.centroids, self.k * self.d, "centroids")
    }

    fn labels(&self) -> Result<Vec<u32>> {
        self.gpu.download(&self.labels, self.n, "labels")
    }
}
