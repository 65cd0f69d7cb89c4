//! Fused distance + argmin: every point's nearest centroid, without an n×k matrix.
//!
//! One thread per point. Centroids stream through shared memory in tiles; each thread keeps its
//! running minimum and compares candidates in centroid order with a strict `<`, so ties go to the
//! lowest centroid index exactly as on the CPU.

use crate::gpu::{self, atomic_add_u32, block_sum_f64, shared, sync_threads};
use crate::launch::{ASSIGN_SCRATCH_BYTES, BLOCK};
use crate::math::{AssignMetric, step};

/// Assigns each of the `n` points of `x` (row-major, `d` columns) to its nearest of the `k`
/// centroids, writing `labels` and `min_dist`.
///
/// With `changed` non-null, adds the number of labels that differ from what `labels` held; with
/// `block_inertia` non-null, writes each block's sum of `min_dist` (fixed order) at its index.
/// `tile_k` centroids are staged in dynamic shared memory after a scratch of `2 × BLOCK` f64; a
/// `tile_k` of 0 reads centroids from global memory.
///
/// # Safety
/// Pointers are valid for the sizes above; launched with `BLOCK` threads and
/// `ceil(n / BLOCK)` blocks.
#[unsafe(no_mangle)]
pub unsafe extern "gpu-kernel" fn kmeans_assign(
    x: *const f32,
    n: u32,
    d: u32,
    centroids: *const f32,
    k: u32,
    tile_k: u32,
    metric: u32,
    labels: *mut u32,
    min_dist: *mut f32,
    changed: *mut u32,
    block_inertia: *mut f64,
) {
    let args = Assign {
        x,
        n: n as usize,
        d: d as usize,
        centroids,
        k: k as usize,
        tile_k: tile_k as usize,
        labels,
        min_dist,
        changed,
        block_inertia,
    };
    unsafe {
        match AssignMetric::from_id(metric) {
            AssignMetric::SqL2 => args.run::<0>(),
            AssignMetric::L1 => args.run::<1>(),
        }
    }
}

struct Assign {
    x: *const f32,
    n: usize,
    d: usize,
    centroids: *const f32,
    k: usize,
    tile_k: usize,
    labels: *mut u32,
    min_dist: *mut f32,
    changed: *mut u32,
    block_inertia: *mut f64,
}

impl Assign {
    unsafe fn run<const METRIC: u32>(&self) {
        let t = gpu::thread();
        let i = gpu::block() * BLOCK as usize + t;
        let active = i < self.n;
        let scratch = shared::<f64>();
        let tile = unsafe { scratch.byte_add(ASSIGN_SCRATCH_BYTES) }.cast::<f32>();
        let row = if active {
            unsafe { self.x.add(i * self.d) }
        } else {
            self.x
        };

        let mut best = Best {
            dist: f32::INFINITY,
            label: 0,
        };
        if self.tile_k == 0 {
            if active {
                unsafe { best.scan::<METRIC>(row, self.centroids, 0, self.k, self.d) };
            }
        } else {
            let mut first = 0;
            while first < self.k {
                let count = self.tile_k.min(self.k - first);
                sync_threads();
                let src = unsafe { self.centroids.add(first * self.d) };
                let mut e = t;
                while e < count * self.d {
                    unsafe { *tile.add(e) = *src.add(e) };
                    e += BLOCK as usize;
                }
                sync_threads();
                if active {
                    unsafe { best.scan::<METRIC>(row, tile, first, count, self.d) };
                }
                first += count;
            }
        }

        let mut moved = 0.0;
        let mut dist = 0.0;
        if active {
            unsafe {
                if *self.labels.add(i) != best.label {
                    moved = 1.0;
                }
                *self.labels.add(i) = best.label;
                *self.min_dist.add(i) = best.dist;
            }
            dist = best.dist as f64;
        }
        if !self.changed.is_null() {
            let total = unsafe { block_sum_f64(scratch, moved) };
            if t == 0 && total > 0.0 {
                unsafe { atomic_add_u32(self.changed, total as u32) };
            }
        }
        if !self.block_inertia.is_null() {
            let total = unsafe { block_sum_f64(scratch.add(BLOCK as usize), dist) };
            if t == 0 {
                unsafe { *self.block_inertia.add(gpu::block()) = total };
            }
        }
    }
}

struct Best {
    dist: f32,
    label: u32,
}

impl Best {
    #[inline(always)]
    fn offer(&mut self, dist: f32, label: usize) {
        if dist < self.dist {
            self.dist = dist;
            self.label = label as u32;
        }
    }

    /// Scans `count` centroids stored row-major at `cents`, whose first has index `first`.
    /// Four centroids share each load of the point's coordinate.
    #[inline(always)]
    unsafe fn scan<const METRIC: u32>(
        &mut self,
        row: *const f32,
        cents: *const f32,
        first: usize,
        count: usize,
        d: usize,
    ) {
        let m = AssignMetric::from_id(METRIC);
        let mut c = 0;
        while c + 4 <= count {
            let (mut a0, mut a1, mut a2, mut a3) = (0.0, 0.0, 0.0, 0.0);
            let base = unsafe { cents.add(c * d) };
            for j in 0..d {
                unsafe {
                    let v = *row.add(j);
                    a0 = step(m, a0, v, *base.add(j));
                    a1 = step(m, a1, v, *base.add(d + j));
                    a2 = step(m, a2, v, *base.add(2 * d + j));
                    a3 = step(m, a3, v, *base.add(3 * d + j));
                }
            }
            self.offer(a0, first + c);
            self.offer(a1, first + c + 1);
            self.offer(a2, first + c + 2);
            self.offer(a3, first + c + 3);
            c += 4;
        }
        while c < count {
            let base = unsafe { cents.add(c * d) };
            let mut a = 0.0;
            for j in 0..d {
                unsafe { a = step(m, a, *row.add(j), *base.add(j)) };
            }
            self.offer(a, first + c);
            c += 1;
        }
    }
}
