//! Timing hooks for the benchmarks (not part of the stable API).

use crate::backend::LloydSpec;
use crate::device::Device;
use crate::error::Result;
use crate::kmeans::{Metric, Precision};
use crate::matrix::MatrixView;
use kernels_gpu::fixed::scale_exponent;

/// What [`lloyd_iteration_ms`] measured.
pub struct LloydTiming {
    /// Milliseconds of every timed iteration.
    pub ms: Vec<f64>,
    /// Device memory the iterations held (data, centroids, labels, sums…), where the backend
    /// has a device of its own: the growth of the memory in use from before the data was
    /// uploaded to after the warm-up.
    pub device_bytes: Option<usize>,
    /// The labels of the last iteration's assignment (from `centroids`).
    pub labels: Vec<u32>,
}

/// Untimed work before the timed runs: at least this long, so that the GPU has left its idle
/// clocks (a few warm-up iterations of a 0.1 ms step took under a millisecond, and the medians
/// of the small cases then moved by up to 40 % from run to run).
const WARMUP: std::time::Duration = std::time::Duration::from_millis(250);

/// Runs `run` untimed, `warmup` times (at least once) and for at least `WARMUP`.
fn warm_up<T>(warmup: usize, mut run: impl FnMut() -> Result<T>) -> Result<()> {
    let start = std::time::Instant::now();
    let mut done = 0;
    while done < warmup.max(1) || start.elapsed() < WARMUP {
        run()?;
        done += 1;
    }
    Ok(())
}

/// Times `reps` Lloyd iterations (assign + update) with the assignment's `precision` after
/// `warmup` untimed ones (and at least `WARMUP` of them), each starting from the same
/// `centroids`.
pub fn lloyd_iteration_ms(
    device: Device,
    data: &MatrixView<'_>,
    centroids: &[f32],
    metric: Metric,
    precision: Precision,
    warmup: usize,
    reps: usize,
) -> Result<LloydTiming> {
    let (n, d) = (data.rows(), data.cols());
    let k = centroids.len() / d;
    let backend = device.backend()?;
    let mut max_abs = vec![0f32; d];
    for row in data.as_slice().chunks_exact(d) {
        for (m, v) in max_abs.iter_mut().zip(row) {
            *m = m.max(v.abs());
        }
    }
    let spec = LloydSpec {
        precision,
        scales: max_abs.iter().map(|&m| scale_exponent(m, n)).collect(),
        ..LloydSpec::predict(k, d, metric)
    };
    let before = backend.device_memory_in_use()?;
    let mut lloyd = backend.lloyd(data, &spec)?;
    let mut step = || -> Result<f64> {
        lloyd.set_centroids(centroids)?;
        backend.time_ms(&mut || {
            lloyd.step()?;
            Ok(())
        })
    };
    warm_up(warmup, &mut step)?;
    let device_bytes = match (before, backend.device_memory_in_use()?) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    let times = (0..reps).map(|_| step()).collect::<Result<Vec<f64>>>()?;
    Ok(LloydTiming {
        ms: times,
        device_bytes,
        labels: lloyd.labels()?,
    })
}

/// The most bytes of device memory that this process's buffers held at once on each GPU of
/// `device` since the last call with `reset` (which starts a new count); `None` for the CPU.
pub fn device_peak_bytes(device: Device, reset: bool) -> Result<Vec<Option<usize>>> {
    let one = |device: Device| device.backend()?.device_memory_peak(reset);
    match device {
        Device::Gpus(set) => (set.ordinals()?.into_iter())
            .map(|ordinal| one(Device::Cuda(ordinal)))
            .collect(),
        _ => Ok(vec![one(device)?]),
    }
}

/// The most device memory a GPU of a set of `gpus` holds for a kNN search of `queries` queries
/// (k = `k`) over `n` training rows of `d` dimensions in `layout` (`Shard` or `Replicate`)
/// beyond its share of one GPU's peak for the same search: one batch's buffers that do not grow
/// with the training rows, the prefilter's stored approximations, which only a GPU with few
/// enough rows or queries keeps, and for a copy of the rows the rows beyond its share,
/// `(gpus − 1) / gpus` of them (`docs/SCALE.md`).
pub fn knn_set_overhead_bytes(
    n: usize,
    d: usize,
    queries: usize,
    k: usize,
    gpus: usize,
    layout: crate::KnnLayout,
) -> usize {
    use crate::backend::cuda::knn::{MAX_BATCH_ROWS, STORE_MAX_BYTES, query_overhead_bytes};
    let rows = match layout {
        crate::KnnLayout::Replicate => n * d * 4 / gpus.max(1) * (gpus.max(1) - 1),
        _ => 0,
    };
    queries.min(MAX_BATCH_ROWS) * query_overhead_bytes(d, k) + STORE_MAX_BYTES + rows
}

/// One assignment of every point of `data` to its nearest of `centroids` (`k × d`) with
/// `precision`: the labels and each point's distance to its centroid (for tests and the
/// benchmark's agreement figures).
pub fn assign_once(
    device: Device,
    data: &MatrixView<'_>,
    centroids: &[f32],
    metric: Metric,
    precision: Precision,
) -> Result<(Vec<u32>, Vec<f32>)> {
    let (n, d) = (data.rows(), data.cols());
    let k = centroids.len() / d;
    let backend = device.backend()?;
    let spec = LloydSpec {
        precision,
        scales: vec![scale_exponent(1.0, n); d],
        ..LloydSpec::predict(k, d, metric)
    };
    let mut lloyd = backend.lloyd(data, &spec)?;
    lloyd.set_centroids(centroids)?;
    lloyd.assign()?;
    Ok((lloyd.labels()?, lloyd.min_distances()?))
}

/// The least memory budget in bytes under which a k-means fit with `params` of `rows × d` rows on
/// `device` (one GPU) takes at most `batches` batches (1: resident), or with `None` any (a byte
/// less is refused for its budget); `None` for the CPU. For tests and benchmarks that pick a
/// budget per streaming regime.
pub fn kmeans_least_budget(
    params: &crate::kmeans::KMeansParams,
    rows: usize,
    d: usize,
    device: Device,
    batches: Option<usize>,
) -> Result<Option<usize>> {
    crate::kmeans::shard::gpus::least_budget(params, rows, d, device, batches)
}

pub use crate::backend::traffic::TurnSeconds;
pub use crate::kmeans::shard::phases::{Phase, PhaseTotals};

/// What fits over shards in this process (GPU sets, streamed devices) did since the last
/// [`stream_counters`] call with `reset`.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamCounters {
    /// Seeding, Lloyd steps and the rest, in that order.
    pub phases: [(Phase, PhaseTotals); 3],
    /// Each kind of request sent, by name.
    pub requests: Vec<(&'static str, PhaseTotals)>,
    /// Bytes streamed batches copied to their devices at their turns (rows, per-row state,
    /// seeding state) and back.
    pub up_bytes: u64,
    pub down_bytes: u64,
    /// Where the streamed batches' turns spent their wall time.
    pub turns: TurnSeconds,
}

/// The [`StreamCounters`] since the last call with `reset` (which starts a new count).
pub fn stream_counters(reset: bool) -> StreamCounters {
    let (up_bytes, down_bytes) = crate::backend::traffic::totals(reset);
    StreamCounters {
        phases: crate::kmeans::shard::phases::totals(reset),
        requests: crate::kmeans::shard::phases::by_request(reset),
        up_bytes,
        down_bytes,
        turns: crate::backend::traffic::turn_totals(reset),
    }
}

/// What [`knn_search_ms`] measured.
pub struct KnnTiming {
    /// Per timed search, milliseconds between CUDA events recorded on the search's stream just
    /// before and just after `KnnIndex::search` (on the CPU: wall clock). The stream idles while
    /// the host works, so the span holds the whole call: the input check, the query upload,
    /// every kernel, the download of the results and their split into index and distance
    /// arrays, and the host's gaps between them (buffer allocations, launches).
    pub ms: Vec<f64>,
    /// Wall clock of the same searches, whole calls, in milliseconds.
    pub wall_ms: Vec<f64>,
    /// The last search's result.
    pub result: crate::knn::KnnResult,
}

/// Times `reps` searches of `queries` for `k` neighbours after `warmup` untimed ones (and at
/// least `WARMUP` of them; the first makes the automatic selection's choice).
pub fn knn_search_ms(
    index: &crate::knn::KnnIndex,
    queries: &MatrixView<'_>,
    k: usize,
    warmup: usize,
    reps: usize,
) -> Result<KnnTiming> {
    let backend = index.device().backend()?;
    let (mut ms, mut wall_ms) = (Vec::new(), Vec::new());
    let mut result = None;
    let mut search = || -> Result<(f64, f64)> {
        let start = std::time::Instant::now();
        let mut found = None;
        let t = backend.time_ms(&mut || {
            found = Some(index.search(queries, k)?);
            Ok(())
        })?;
        result = found;
        Ok((t, start.elapsed().as_secs_f64() * 1e3))
    };
    warm_up(warmup, &mut search)?;
    for _ in 0..reps {
        let (t, wall) = search()?;
        ms.push(t);
        wall_ms.push(wall);
    }
    Ok(KnnTiming {
        ms,
        wall_ms,
        result: result.expect("at least one search"),
    })
}

/// How [`upload_ms`] copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upload {
    /// The driver's path for pageable memory.
    Pageable,
    /// Through the backend's page-locked staging buffers, as streamed kNN and k-means copy
    /// their rows.
    Staged,
}

/// Median milliseconds of copying `data` from host memory to `device`'s GPU as `how` says, in
/// pieces of at most `piece` values, each into a new buffer freed before the next (so any size
/// fits), over `reps` rounds after one untimed.
pub fn upload_ms(
    device: Device,
    data: &[f32],
    piece: usize,
    how: Upload,
    reps: usize,
) -> Result<f64> {
    let Device::Cuda(ordinal) = device.resolve()? else {
        return Err(crate::Error::invalid(
            "device",
            "an upload is timed on a GPU",
        ));
    };
    let gpu = crate::backend::cuda::CudaBackend::shared(ordinal)?;
    let backend = device.backend()?;
    let what = "the timed copy";
    let mut copy = || {
        data.chunks(piece.max(1)).try_for_each(|part| match how {
            Upload::Pageable => gpu.upload(part, what).map(drop),
            Upload::Staged => {
                // SAFETY: written whole by the copy.
                let mut dev = unsafe { gpu.uninit(part.len(), what)? };
                gpu.write_rows(part, &mut dev, 0, what)
            }
        })
    };
    copy()?;
    let mut ms = Vec::with_capacity(reps.max(1));
    for _ in 0..reps.max(1) {
        ms.push(backend.time_ms(&mut copy)?);
    }
    ms.sort_by(f64::total_cmp);
    Ok(ms[ms.len() / 2])
}
