//! Multi-GPU rows of `gpu-bench` (`--gpus gpu:0,1`): a Lloyd step and a kNN search over a GPU
//! set against one GPU of the same machine, wall clock around the public API (the set's shards
//! answer on threads of their own, so CUDA events of one device would not cover them).
//!
//! A step's time is `(fit(1 + M) − fit(1)) / M` for fits from the same given centroids with
//! `tol = 0`: the upload, the shards' setup and the final labels cancel out.

use crate::data::{Case, KnnCase, uniform};
use crate::whole::median;
use kmeans_knn::bench::{
    StreamCounters, TurnSeconds, Upload, device_peak_bytes, stream_counters, upload_ms,
};
use kmeans_knn::{
    Device, DistanceMetric, Init, KMeans, KMeansModel, KnnIndex, KnnLayout, MatrixView,
};
use std::ops::Range;
use std::time::Instant;

/// Steps timed per fit pair.
const STEPS: usize = 10;

/// Steps timed per fit pair of a streamed fit (a streamed step takes seconds at the sizes that
/// stream).
const STREAMED_STEPS: usize = 3;

/// Wall ms of a fit of `iters` Lloyd steps from `centroids` with `tol = 0` (within `budget`
/// bytes of device memory when given), and the model.
fn fit_ms(
    x: &MatrixView<'_>,
    centroids: &[f32],
    k: usize,
    iters: usize,
    device: Device,
    budget: Option<usize>,
) -> kmeans_knn::Result<(f64, KMeansModel)> {
    let params = KMeans::params(k)
        .init(Init::Centroids(centroids.to_vec()))
        .max_iter(iters)
        .tol(0.0)
        .device(device);
    let params = match budget {
        Some(b) => params.memory_budget(b),
        None => params,
    };
    let start = Instant::now();
    let model = params.fit(x.clone())?;
    Ok((start.elapsed().as_secs_f64() * 1e3, model))
}

/// Median ms per Lloyd step, `(fit(1 + steps) − fit(1)) / steps` over `reps` pairs of fits
/// (see [`fit_ms`]), and the last fit (for the identity check).
fn steps_ms(
    x: &MatrixView<'_>,
    centroids: &[f32],
    k: usize,
    device: Device,
    budget: Option<usize>,
    steps: usize,
    reps: usize,
) -> kmeans_knn::Result<(f64, KMeansModel)> {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..reps.max(1) {
        let (one, _) = fit_ms(x, centroids, k, 1, device, budget)?;
        let (many, model) = fit_ms(x, centroids, k, 1 + steps, device, budget)?;
        times.push((many - one) / steps as f64);
        last = Some(model);
    }
    Ok((median(times), last.expect("one repetition")))
}

/// Median ms per Lloyd step of `case` on `device` (after an untimed fit), and the last fit.
pub fn step_ms(
    case: &Case,
    x: &MatrixView<'_>,
    centroids: &[f32],
    device: Device,
    reps: usize,
) -> kmeans_knn::Result<(f64, KMeansModel)> {
    fit_ms(x, centroids, case.k, 1, device, None)?;
    steps_ms(x, centroids, case.k, device, None, STEPS, reps)
}

/// Median ms of a whole kNN search of `case` (index made once) on `device`, its indices, and
/// the index's layout over a GPU set; with `rows`, against that range of the training rows alone
/// (a GPU set's part).
pub fn knn_ms(
    case: &KnnCase,
    device: Device,
    reps: usize,
    rows: Option<Range<usize>>,
) -> kmeans_knn::Result<(f64, Vec<u32>, Option<KnnLayout>)> {
    let train = uniform(case.n * case.d, 1);
    let queries = uniform(case.m * case.d, 2);
    let rows = rows.unwrap_or(0..case.n);
    let index = KnnIndex::new(
        MatrixView::new(
            &train[rows.start * case.d..rows.end * case.d],
            rows.len(),
            case.d,
        )?,
        DistanceMetric::SqEuclidean,
        device,
    )?;
    let queries = MatrixView::new(&queries, case.m, case.d)?;
    index.search(queries.clone(), case.k)?;
    let (mut times, mut found) = (Vec::new(), None);
    for _ in 0..reps.max(1) {
        let start = Instant::now();
        let answer = index.search(queries.clone(), case.k)?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
        // The answer before is freed here, untimed: a search's time is its own, not that of
        // giving the last answer's pages back (12 MB for F).
        found = Some(answer);
    }
    let indices = found.expect("one repetition").indices.into_iter().collect();
    Ok((median(times), indices, index.layout()))
}

/// Median wall ms of a GPU set's searches of `case` without the set around them: each GPU
/// `ordinals[i]` gets an index of its own, cut as the set cuts its work in `layout` (its part of
/// the rows, `Shard`; all rows and its share of the queries, `Replicate`), and they search at
/// once on threads of their own, each answering for itself. Against the set, what its merge or
/// split and its threads cost; against each GPU's work alone, what running side by side costs.
pub fn knn_side_by_side_ms(
    case: &KnnCase,
    ordinals: &[usize],
    layout: KnnLayout,
    reps: usize,
) -> kmeans_knn::Result<f64> {
    let train = uniform(case.n * case.d, 1);
    let queries = uniform(case.m * case.d, 2);
    let count = ordinals.len();
    let cut = |i: usize, len: usize| i * len / count..(i + 1) * len / count;
    let copies = layout == KnnLayout::Replicate;
    let work = (ordinals.iter().enumerate())
        .map(|(i, &o)| {
            let rows = if copies { 0..case.n } else { cut(i, case.n) };
            let part = &train[rows.start * case.d..rows.end * case.d];
            let part = MatrixView::new(part, rows.len(), case.d)?;
            let share = if copies { cut(i, case.m) } else { 0..case.m };
            let share = &queries[share.start * case.d..share.end * case.d];
            let share = MatrixView::new(share, share.len() / case.d, case.d)?;
            let index = KnnIndex::new(part, DistanceMetric::SqEuclidean, Device::Cuda(o))?;
            index.search(share.clone(), case.k)?;
            Ok((index, share))
        })
        .collect::<kmeans_knn::Result<Vec<_>>>()?;
    let mut times = Vec::new();
    for _ in 0..reps.max(1) {
        let start = Instant::now();
        let answers = std::thread::scope(|scope| {
            let running: Vec<_> = (work.iter())
                .map(|(index, share)| scope.spawn(|| index.search(share.clone(), case.k)))
                .collect();
            (running.into_iter())
                .map(|r| r.join().expect("a GPU's search thread"))
                .collect::<kmeans_knn::Result<Vec<_>>>()
        })?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
        drop(answers);
    }
    Ok(median(times))
}

/// `run`'s result and the peak device memory of each GPU of `device` while it ran.
pub fn with_peak<T>(
    device: Device,
    run: impl FnOnce() -> kmeans_knn::Result<T>,
) -> kmeans_knn::Result<(T, Vec<Option<usize>>)> {
    device_peak_bytes(device, true)?;
    let out = run()?;
    Ok((out, device_peak_bytes(device, true)?))
}

/// What a streamed job measured (`gpu-bench --stream`, `--stream-kmeans`).
pub struct Streamed {
    /// Bytes of rows crossing to the device per pass (a search, a Lloyd step).
    pub bytes: f64,
    /// Bytes of per-row state crossing to the device beside the rows per pass (a streamed
    /// k-means step's, as the turns counted them), and back from it (its labels and distances).
    pub state_up: f64,
    pub state_down: f64,
    /// Median ms of one upload of all rows through the staging buffers (as the streams copy
    /// them: the floor) and by the driver's pageable path.
    pub upload_ms: f64,
    pub pageable_ms: f64,
    /// Median ms of a pass with the rows resident, when they fit.
    pub resident_ms: Option<f64>,
    /// Median ms of a streamed pass (within the budget).
    pub streamed_ms: f64,
    /// Whether the job streamed and answered as the resident one (without a resident run: as
    /// itself, every repetition).
    pub identical: bool,
    /// The most device memory the streamed passes held at once (with the index or fit's own).
    pub peak_bytes: Option<usize>,
    /// Where a streamed k-means step's turns spent their wall time, in seconds a step.
    pub turns: Option<TurnSeconds>,
}

/// Times a kNN search of `m` queries against `n × d` uniform rows on `device`, streamed within
/// `budget` bytes, against the upload of those rows and (below 16 GB of rows, which leaves host
/// memory for the index's own copy) the resident search. The streamed index takes the rows
/// over, so host memory holds them once.
pub fn streamed_search(
    n: usize,
    d: usize,
    m: usize,
    k: usize,
    budget: usize,
    device: Device,
    reps: usize,
) -> kmeans_knn::Result<Streamed> {
    let train = uniform(n * d, 1);
    let queries = uniform(m * d, 2);
    let q = MatrixView::new(&queries, m, d)?;
    let time = |index: &KnnIndex| -> kmeans_knn::Result<(f64, Option<Vec<u32>>)> {
        index.search(q.clone(), k)?;
        let (mut ms, mut first, mut same) = (Vec::new(), None::<Vec<u32>>, true);
        for _ in 0..reps.max(1) {
            let start = Instant::now();
            let found = index.search(q.clone(), k)?;
            ms.push(start.elapsed().as_secs_f64() * 1e3);
            let indices: Vec<u32> = found.indices.into_iter().collect();
            same &= first.as_ref().is_none_or(|f| *f == indices);
            first.get_or_insert(indices);
        }
        Ok((median(ms), first.filter(|_| same)))
    };
    // The pieces the stream copies: a quarter of the budget of rows (and their norms etc.).
    let piece = budget / 4 / (4 * (d + 4)) * d;
    let staged = upload_ms(device, &train, piece, Upload::Staged, reps)?;
    let pageable = upload_ms(device, &train, piece, Upload::Pageable, reps)?;
    let bytes = (n * d * 4) as f64;
    let resident = if bytes <= 16e9 {
        let index = KnnIndex::new(
            MatrixView::new(&train, n, d)?,
            DistanceMetric::SqEuclidean,
            device,
        )?;
        Some(time(&index)?)
    } else {
        None
    };
    let rows = MatrixView::from_vec(train, n, d)?;
    let ((streamed, (streamed_ms, indices)), peaks) = with_peak(device, || {
        let index =
            KnnIndex::with_memory_budget(rows, DistanceMetric::SqEuclidean, device, Some(budget))?;
        let timed = time(&index)?;
        Ok((index, timed))
    })?;
    let identical = match (&resident, &indices) {
        (Some((_, Some(r))), Some(s)) => r == s,
        (None, Some(_)) => true,
        _ => false,
    };
    Ok(Streamed {
        bytes,
        state_up: 0.0,
        state_down: 0.0,
        turns: None,
        upload_ms: staged,
        pageable_ms: pageable,
        resident_ms: resident.map(|(ms, _)| ms),
        streamed_ms,
        identical: identical && streamed.is_streamed(),
        peak_bytes: peaks[0],
    })
}

/// Times a Lloyd step of k-means on `n × d` uniform rows, `k` centroids from the first rows,
/// streamed within `budget` bytes, against one upload of the rows and (below 16 GB of rows) the
/// resident step; with the streamed fit's device (its batch count).
pub fn streamed_fit(
    n: usize,
    d: usize,
    k: usize,
    budget: usize,
    device: Device,
    reps: usize,
) -> kmeans_knn::Result<(Streamed, String)> {
    let data = uniform(n * d, 3);
    let x = MatrixView::new(&data, n, d)?;
    let centroids = &data[..k * d];
    let staged = upload_ms(device, &data, 1 << 28, Upload::Staged, reps)?;
    let pageable = upload_ms(device, &data, 1 << 28, Upload::Pageable, reps)?;
    let bytes = (n * d * 4) as f64;
    let resident = if bytes <= 16e9 {
        Some(steps_ms(&x, centroids, k, device, None, STEPS, reps)?)
    } else {
        None
    };
    let ((streamed_ms, streamed), peaks) = with_peak(device, || {
        steps_ms(&x, centroids, k, device, Some(budget), STREAMED_STEPS, reps)
    })?;
    // What crosses the bus a step: the turns' counts over a fit of 1 + STREAMED_STEPS steps
    // less those over a fit of one.
    let mut traffic = [(0, 0, TurnSeconds::default()); 2];
    for (counted, steps) in traffic.iter_mut().zip([1, 1 + STREAMED_STEPS]) {
        stream_counters(true);
        fit_ms(&x, centroids, k, steps, device, Some(budget))?;
        let c = stream_counters(true);
        *counted = (c.up_bytes, c.down_bytes, c.turns);
    }
    let per_step = |a: u64, b: u64| b.saturating_sub(a) as f64 / STREAMED_STEPS as f64;
    let (one, more) = (traffic[0].2, traffic[1].2);
    let turns = TurnSeconds {
        answer: (more.answer - one.answer) / STREAMED_STEPS as f64,
        release: (more.release - one.release) / STREAMED_STEPS as f64,
        upload_wait: (more.upload_wait - one.upload_wait) / STREAMED_STEPS as f64,
    };
    // The resident fit of as many steps as the streamed one's, for the identity check.
    let resident_fit = match resident {
        Some(_) => Some(fit_ms(&x, centroids, k, 1 + STREAMED_STEPS, device, None)?.1),
        None => None,
    };
    let streamed_past = streamed.device.contains("streamed past the memory budget");
    let identical = streamed_past
        && resident_fit
            .as_ref()
            .is_none_or(|r| r.labels == streamed.labels && r.centroids == streamed.centroids);
    let measured = Streamed {
        bytes,
        state_up: (per_step(traffic[0].0, traffic[1].0) - bytes).max(0.0),
        state_down: per_step(traffic[0].1, traffic[1].1),
        upload_ms: staged,
        pageable_ms: pageable,
        resident_ms: resident.map(|(ms, _)| ms),
        streamed_ms,
        identical,
        peak_bytes: peaks[0],
        turns: Some(turns),
    };
    let fitted = format!("{} ({} iterations)", streamed.device, streamed.n_iter);
    Ok((measured, fitted))
}

/// The fit [`fit_against_cpu`] runs: `n × d` uniform rows made in the process (no file), `k`
/// clusters from `init` (seed 0) under `metric`, at most `max_iter` iterations, streamed within
/// `budget` bytes.
#[derive(Clone, Debug)]
pub struct WholeFit {
    pub n: usize,
    pub d: usize,
    pub k: usize,
    pub budget: usize,
    pub max_iter: usize,
    pub init: Init,
    pub metric: kmeans_knn::Metric,
    /// Whether the CPU fits the same rows too, for the bit-for-bit comparison.
    pub cpu: bool,
}

/// What [`fit_against_cpu`] measured.
pub struct AgainstCpu {
    /// Wall ms of the streamed fit on the GPU and of the CPU's (when run).
    pub gpu_ms: f64,
    pub cpu_ms: Option<f64>,
    /// Median ms of one upload of all rows through the page-locked staging, in the same run.
    pub upload_ms: f64,
    /// The streamed fit's phases and traffic.
    pub counters: StreamCounters,
    /// The streamed fit.
    pub model: KMeansModel,
    /// Whether the CPU's fit is the same bit for bit: labels, centroids, inertia, iterations.
    pub identical: Option<bool>,
}

/// A whole k-means fit as `fit` says, streamed on `device`, its phases counted, beside one
/// staged upload of its rows; with `fit.cpu` the CPU's fit of the same rows, compared bit for bit.
pub fn fit_against_cpu(fit: &WholeFit, device: Device) -> kmeans_knn::Result<AgainstCpu> {
    let WholeFit { n, d, k, .. } = *fit;
    let data = uniform(n * d, 5);
    let x = MatrixView::new(&data, n, d)?;
    let upload_ms = upload_ms(device, &data, 1 << 28, Upload::Staged, 3)?;
    let params = KMeans::params(k)
        .seed(0)
        .max_iter(fit.max_iter)
        .init(fit.init.clone())
        .metric(fit.metric);
    stream_counters(true);
    let start = Instant::now();
    let model = (params.clone().device(device).memory_budget(fit.budget)).fit(x.clone())?;
    let gpu_ms = start.elapsed().as_secs_f64() * 1e3;
    let counters = stream_counters(true);
    let (mut cpu_ms, mut identical) = (None, None);
    if fit.cpu {
        let start = Instant::now();
        let on_cpu = params.device(Device::Cpu).fit(x)?;
        cpu_ms = Some(start.elapsed().as_secs_f64() * 1e3);
        let bits = |m: &KMeansModel| m.centroids.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        identical = Some(
            on_cpu.labels == model.labels
                && bits(&on_cpu) == bits(&model)
                && on_cpu.inertia.to_bits() == model.inertia.to_bits()
                && on_cpu.n_iter == model.n_iter,
        );
    }
    Ok(AgainstCpu {
        gpu_ms,
        cpu_ms,
        upload_ms,
        counters,
        model,
        identical,
    })
}
