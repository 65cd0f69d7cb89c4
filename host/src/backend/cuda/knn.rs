//! Pairwise distances, kNN search and votes on the GPU.
//!
//! * Distances: the GEMM-style `pairwise_dot` / `pairwise_l1` kernels write row blocks of the
//!   matrix (64-bit offsets), sized to the memory budget and copied back block by block.
//! * Search, `k ≤ MAX_STREAM_K`: queries in batches; one distance launch per
//!   `LAUNCH_COLUMNS` of training rows (batch × span), then per tile one selection launch
//!   (a block per query) that merges the tile into the query's running k keys. The batch × n
//!   matrix is never stored.
//! * Search, larger k: whole distance rows of a batch, sorted as keys by a bitonic network in
//!   global memory (chunks of `SELECT_CAP` keys in shared memory, longer strides in global
//!   memory); the first k of every row are kept.
//! * Votes: `knn_vote` on the device-resident neighbour keys; only labels (and shares) come back.

use super::launch::{Reads, Writes};
use super::{CudaBackend, Mapped, arg_u32};
use crate::backend::vocab::{NeighbourIndex, PrefilterReport, Selection, rows_per_block};
use crate::backend::{
    BlockSink, Distances, KeySink, KnnSearch, Neighbours, Votes, split_keys_into,
};
use crate::error::{Error, Result};
use crate::host_tasks;
use crate::matrix::MatrixView;
use cudarc::driver::{CudaEvent, CudaSlice, CudaView};
use kernels_gpu::distance::{PAIRWISE_DOT, PAIRWISE_L1, PairwiseParams};
use kernels_gpu::fixed::pow2_f32;
use kernels_gpu::knn::{
    MAX_STREAM_K, PairMetric, SELECT_CAP, VoteRule, dist_blocks, dist_shared_bytes, stream_tile,
    vote_scale_exponent,
};
use kernels_gpu::knn_tf32::candidates::approx_stride;
use kernels_gpu::knn_tf32::candidates::{
    CANDIDATE_SHARED_BYTES, CandidatesParams, KNN_TF32_CANDIDATES, candidates_grid,
};
use kernels_gpu::knn_tf32::{
    KNN_TF32_RERANK, KNN_TF32_THRESHOLD, RERANK_SHARED_BYTES, RerankParams, ScanParams,
    THRESHOLD_SHARED_BYTES, ThresholdParams, scan_kernel, tf32_scan_grid,
};
use kernels_gpu::knn_tf32::{
    KNN_TF32_SCAN_WG, SCAN_CANDIDATES, SCAN_GROUPS, TF32_CAP, TF32_COLS, TF32_ROWS,
    bound_coefficient, tf32_group, tf32_groups_per_row, tf32_metric, tf32_scan_shared_bytes,
    tf32_xc, wg_scan_shared_bytes,
};
use kernels_gpu::launch::DEFAULT_SHARED_BYTES;
use kernels_gpu::lp::{ChebyshevParams, MinkowskiParams, PAIRWISE_CHEBYSHEV, PAIRWISE_MINKOWSKI};
use kernels_gpu::norms::{
    ROW_NORM_ROOTS, ROW_SQ_NORMS, RowNormRootsParams, RowSqNormsParams, row_sq_norms_grid,
};
use kernels_gpu::params::DevPtr;
use kernels_gpu::select::{BY_BITONIC, BY_KMIN, BY_RADIX};
use kernels_gpu::select::{
    KNN_BITONIC_MERGE_GLOBAL, KNN_BITONIC_MERGE_LOCAL, KNN_SELECT_BITONIC, KNN_SELECT_KEYS_BITONIC,
    KNN_SELECT_KEYS_KMIN, KNN_SELECT_KEYS_RADIX, KNN_SELECT_KMIN, KNN_SELECT_RADIX,
    KNN_SORT_CHUNKS, KNN_TAKE, MergeGlobalParams, MergeLocalParams, SORT_SHARED_BYTES,
    SelectKeysParams, SelectParams, SortChunksParams, TakeParams, merge_global_grid,
    select_method_shared_bytes, sort_chunks_grid, take_grid,
};
use kernels_gpu::vote::{KNN_VOTE, VoteParams};
use kernels_gpu::vote::{vote_block_bytes, vote_grid, vote_queries_per_block};
use ndarray::ArrayView2;
use std::sync::{Arc, Mutex};

mod auto;
mod clock;
mod radius;

use clock::KernelClock;

/// Share of the free device memory that a call plans to use when the caller sets no limit.
const FREE_SHARE: f64 = 0.7;
/// Most query rows per batch.
pub(crate) const MAX_BATCH_ROWS: usize = 1 << 16;
/// Training rows whose distances one streaming launch computes at least, in whole selection
/// tiles: four tiles of the smallest k. A wider launch fills the GPU with more blocks (one tile
/// alone can leave most of the last wave empty); large k have narrower tiles, and four of them
/// (640 blocks for 1,200 queries at k = 2048) left a third of the last of three waves idle.
const LAUNCH_COLUMNS: usize = 4 * stream_tile(1);
/// Most training rows for which the prefilter stores its approximations (1 MiB a query) and
/// reads them back for the candidates instead of a second tensor-core scan.
const STORE_MAX_N: usize = 1 << 18;
/// Queries a batch must still hold (or all of a smaller call's) for the prefilter to store its
/// approximations: with fewer the batches stay large and the scan runs twice (a GPU of a set
/// holding a quarter of F's rows, storing in batches of 536 queries under [`STORE_MAX_BYTES`],
/// took 17–19.5 ms against 16.4 ms for a whole batch).
const STORE_MIN_ROWS: usize = 4096;
/// Most bytes of stored approximations a batch holds: the store is 4 bytes a query and training
/// row, which the memory budget alone would let grow to many times the rest of a search (a GPU
/// of a set holding a quarter of 10^6 rows stored 10^4 queries' worth, 9.3 GiB, where one GPU
/// with all the rows stores none). Storing batches are cut to this size instead.
pub(crate) const STORE_MAX_BYTES: usize = 512 << 20;

/// Device bytes per query of a search's batch buffers that do not grow with the training rows:
/// the query and its norm, the running keys, the prefilter's candidates and counters (the
/// approximations' groups, `8 · n / 64` bytes for a query, do). What a GPU of a set holds beyond
/// its share of one GPU's peak is at most this for a batch of queries plus [`STORE_MAX_BYTES`].
pub(crate) fn query_overhead_bytes(d: usize, k: usize) -> usize {
    4 * (d + 1) + 8 * k + 4 * TF32_CAP + 12
}

/// Queries a storing batch holds for `n` training rows ([`STORE_MAX_BYTES`]).
fn store_rows(n: usize) -> usize {
    STORE_MAX_BYTES / (4 * approx_stride(n)).max(1)
}

impl CudaBackend {
    /// Bytes a call may use: `max_bytes`, else a share of what the driver reports free plus the
    /// `held` bytes of buffers that the call may free before it allocates.
    fn budget(&self, max_bytes: Option<usize>, held: usize) -> Result<usize> {
        match max_bytes {
            Some(b) => Ok(b),
            None => Ok(((self.memory()?.0 + held) as f64 * FREE_SHARE) as usize),
        }
    }
}

/// One side of a distance launch: rows of a device matrix and their squared norms.
struct Side<'a> {
    x: &'a CudaSlice<f32>,
    norms: &'a CudaSlice<f32>,
    first: usize,
    rows: usize,
}

/// Queues `out[i · ld + j] = dist(a row i, b row b.first + j)` (a from its first row).
fn distances(
    gpu: &CudaBackend,
    metric: PairMetric,
    a: Side<'_>,
    b: Side<'_>,
    d: usize,
    out: &mut CudaSlice<f32>,
    ld: usize,
) -> Result<()> {
    let b_end = b.first + b.rows;
    debug_assert!(b.rows <= ld);
    let out_len = a.rows.checked_sub(1).map_or(0, |last| last * ld + b.rows);
    let (grid, shared) = (dist_blocks(a.rows, b.rows), dist_shared_bytes());
    // The Lp kernels' parameters: the same rows without norms and metric, `p` before `out`.
    macro_rules! lp {
        ($params:ident { $($field:ident: $value:expr),* }) => {
            $params {
                a: a.x.reads(a.rows * d),
                a_rows: a.rows as u32,
                b: b.x.reads(b_end * d),
                b_first: b.first as u32,
                b_cols: b.rows as u32,
                d: d as u32,
                $($field: $value,)*
                out: out.writes(out_len),
                ld: ld as u64,
            }
        };
    }
    match metric {
        PairMetric::Chebyshev => {
            gpu.launch(PAIRWISE_CHEBYSHEV, grid, shared, lp!(ChebyshevParams {}))
        }
        PairMetric::Minkowski(p) => gpu.launch(
            PAIRWISE_MINKOWSKI,
            grid,
            shared,
            lp!(MinkowskiParams { p: p.get() }),
        ),
        _ => gpu.launch(
            if metric.is_l1() {
                PAIRWISE_L1
            } else {
                PAIRWISE_DOT
            },
            grid,
            shared,
            PairwiseParams {
                a: a.x.reads(a.rows * d),
                a_norms: a.norms.reads(a.rows),
                a_rows: a.rows as u32,
                b: b.x.reads(b_end * d),
                b_norms: b.norms.reads(b_end),
                b_first: b.first as u32,
                b_cols: b.rows as u32,
                d: d as u32,
                metric: metric.id(),
                out: out.writes(out_len),
                ld: ld as u64,
            },
        ),
    }
}

impl Distances for CudaBackend {
    fn pairwise(
        &self,
        a: &MatrixView<'_>,
        b: &MatrixView<'_>,
        metric: PairMetric,
        max_bytes: Option<usize>,
        on_block: &mut BlockSink<'_>,
    ) -> Result<()> {
        let (m, n, d) = (a.rows(), b.rows(), a.cols());
        arg_u32(m, "number of rows")?;
        arg_u32(n, "number of rows")?;
        arg_u32(d, "number of dimensions")?;
        let b_dev = self.upload(b.as_slice(), "the second matrix")?;
        let mut b_norms = self.zeros::<f32>(n, "row norms")?;
        if metric.needs_norms() {
            self.launch(
                ROW_SQ_NORMS,
                row_sq_norms_grid(n),
                0,
                RowSqNormsParams {
                    x: b_dev.reads(n * d),
                    n: n as u32,
                    d: d as u32,
                    out: b_norms.writes(n),
                },
            )?;
        }
        // A block fits the caller's limit and the device's free memory (rows of A, norms, out).
        let device_rows = self.budget(None, 0)? / (4 * (n + d + 1));
        let rows = rows_per_block(m, n, max_bytes, usize::MAX)
            .min(device_rows.max(1))
            .min(MAX_BATCH_ROWS * 64);
        let mut a_dev = self.zeros::<f32>(rows * d, "rows of the first matrix")?;
        let mut a_norms = self.zeros::<f32>(rows, "row norms")?;
        let mut out = self.zeros::<f32>(rows * n, "a block of distances")?;
        let mut first = 0;
        while first < m {
            let r = rows.min(m - first);
            self.write(
                &a.as_slice()[first * d..(first + r) * d],
                &mut a_dev,
                "rows of the first matrix",
            )?;
            if metric.needs_norms() {
                self.launch(
                    ROW_SQ_NORMS,
                    row_sq_norms_grid(r),
                    0,
                    RowSqNormsParams {
                        x: a_dev.reads(r * d),
                        n: r as u32,
                        d: d as u32,
                        out: a_norms.writes(r),
                    },
                )?;
            }
            let a_side = Side {
                x: &a_dev,
                norms: &a_norms,
                first: 0,
                rows: r,
            };
            let b_side = Side {
                x: &b_dev,
                norms: &b_norms,
                first: 0,
                rows: n,
            };
            distances(self, metric, a_side, b_side, d, &mut out, n)?;
            let host = self.download(&out, r * n, "a block of distances")?;
            let view = ArrayView2::from_shape((r, n), &host[..]).expect("r × n block");
            on_block(first, view)?;
            first += r;
        }
        Ok(())
    }

    fn knn_index(&self, train: &MatrixView<'_>, metric: PairMetric) -> Result<Box<dyn KnnSearch>> {
        Ok(Box::new(CudaKnn::build(self, train, metric, false)?))
    }

    fn knn_index_beside(
        &self,
        train: &MatrixView<'_>,
        metric: PairMetric,
    ) -> Result<Box<dyn KnnSearch>> {
        Ok(Box::new(CudaKnn::build(self, train, metric, true)?))
    }
}

impl CudaKnn {
    /// Uploads `train` and queues its squared norms (and, where the prefilter can run, their
    /// roots, which its bound takes) on the compute stream, or with `beside` on the copy stream,
    /// with the event that the searches wait for.
    fn build(
        gpu: &CudaBackend,
        train: &MatrixView<'_>,
        metric: PairMetric,
        beside: bool,
    ) -> Result<CudaKnn> {
        let (n, d) = (train.rows(), train.cols());
        arg_u32(n, "number of training rows")?;
        arg_u32(d, "number of dimensions")?;
        let gpu = CudaBackend::shared(gpu.info().ordinal)?;
        let (stream, x) = if beside {
            let x = gpu.upload_rows_beside(train.as_slice(), &[], "the training data")?;
            (gpu.copy_stream()?.clone(), x)
        } else {
            let x = gpu.upload_rows(train.as_slice(), &[], "the training data")?;
            (gpu.compute_stream().clone(), x)
        };
        let mut norms = gpu.zeros_on::<f32>(&stream, n, "training norms")?;
        if metric.needs_norms() {
            gpu.launch_on(
                &stream,
                ROW_SQ_NORMS,
                row_sq_norms_grid(n),
                0,
                RowSqNormsParams {
                    x: x.reads(n * d),
                    n: n as u32,
                    d: d as u32,
                    out: norms.writes(n),
                },
            )?;
        }
        let tensor_cores = gpu.info().compute_capability.0 >= 8;
        let roots = if tensor_cores && tf32_metric(metric) {
            // SAFETY: the launch below writes all `n`.
            let mut roots = unsafe { gpu.uninit_on::<f32>(&stream, n, "training norm roots")? };
            gpu.launch_on(
                &stream,
                ROW_NORM_ROOTS,
                row_sq_norms_grid(n),
                0,
                RowNormRootsParams {
                    sq_norms: norms.reads(n),
                    n: n as u32,
                    out: roots.writes(n),
                },
            )?;
            roots
        } else {
            gpu.zeros_on::<f32>(&stream, 1, "training norm roots")?
        };
        let ready = match beside {
            true => Some(gpu.copies_done("the training data")?),
            false => None,
        };
        // The warpgroup scan reads 16-byte pieces of the rows, and only the sm_90 cubin has it
        // (whether it runs is settled with the batches: `plan_batches`).
        let warpgroup_scan = d.is_multiple_of(4) && gpu.has_function(KNN_TF32_SCAN_WG.name);
        Ok(CudaKnn {
            gpu,
            n,
            d,
            metric,
            x,
            norms,
            roots,
            ready,
            labels: None,
            row_weights: None,
            classes: 0,
            prefilter: tensor_cores,
            warpgroup_scan,
            spare: Mutex::default(),
        })
    }
}

/// A kNN index resident on a GPU.
pub(crate) struct CudaKnn {
    gpu: Arc<CudaBackend>,
    n: usize,
    d: usize,
    metric: PairMetric,
    x: CudaSlice<f32>,
    norms: CudaSlice<f32>,
    /// `sqrt(norms)` when the prefilter can run (one value otherwise).
    roots: CudaSlice<f32>,
    /// For an index built beside other work: the end of its rows' upload and norms, which
    /// every search waits for.
    ready: Option<CudaEvent>,
    labels: Option<CudaSlice<u32>>,
    /// Every training row's sample weight over the largest; `None`: no sample weights.
    row_weights: Option<CudaSlice<f32>>,
    classes: usize,
    /// Whether the TF32 prefilter may run (tensor cores present and not forbidden).
    prefilter: bool,
    /// Whether its scan may run on Hopper's warpgroup `mma` (`knn_tf32_scan_wg`).
    warpgroup_scan: bool,
    /// The device buffers of the last search to finish and its plan, kept for the next search
    /// of the same shape. A search takes them out while it runs, so concurrent and nested
    /// searches (the exact fallback, `Auto`'s timings) never share a set.
    spare: Mutex<Option<Planned>>,
}

/// A search's plan ([`CudaKnn::plan_batches`]) with the device buffers made for it.
struct Planned {
    /// The search it was made for (its shape, and whether it asked for the prefilter).
    job: (JobShape, bool),
    /// Queries per batch.
    rows: usize,
    plan: Option<Tf32Plan>,
    shape: BatchShape,
    bufs: BatchBuffers,
}

impl Drop for CudaKnn {
    fn drop(&mut self) {
        // The fields, the spare buffers among them, free their device memory after this.
        self.gpu.bind_for_drop();
    }
}

/// How a search selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    /// Streaming, k rounds of a parallel minimum per tile.
    KMin,
    /// Streaming, a bitonic sort of each tile's candidates and a merge into the running k.
    Bitonic,
    /// Streaming, a radix selection of the running k and each tile's candidates, then a sort of
    /// the k.
    Radix,
    /// Whole rows sorted in global memory (k > `MAX_STREAM_K`).
    Sort,
}

/// A search's way through: the selection method, and whether the prefilter runs where it
/// applies (`Selection::Auto` times both ways).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Path {
    method: Method,
    prefilter: bool,
}

/// The streaming selections that `Selection::Auto` times.
const STREAMING: [Method; 3] = [Method::KMin, Method::Bitonic, Method::Radix];

impl Method {
    fn reported(self) -> Selection {
        match self {
            Method::KMin => Selection::KMin,
            Method::Bitonic | Method::Sort => Selection::Bitonic,
            Method::Radix => Selection::Radix,
        }
    }

    /// The `kernels_gpu::select` method of the selection kernels.
    fn kernel_method(self) -> u32 {
        match self {
            Method::KMin => BY_KMIN,
            Method::Radix => BY_RADIX,
            Method::Bitonic | Method::Sort => BY_BITONIC,
        }
    }
}

/// What a vote asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
struct VoteJob {
    rule: VoteRule,
    proba: bool,
}

/// Where a search's keys go when it asks for keys rather than indices and distances.
enum Keys<'s> {
    /// Appended to this vector.
    Kept(Vec<u64>),
    /// Put in place by the caller's sink as each piece comes back.
    Sink(&'s mut dyn KeySink),
}

/// What [`CudaKnn::run`] brings back, with indices of type `I`.
#[derive(Default)]
struct Output<'s, I = u32> {
    /// The neighbours as keys, when the search asked for them (else split into the next two).
    keys: Option<Keys<'s>>,
    indices: Vec<I>,
    distances: Vec<f32>,
    classes: Vec<u32>,
    proba: Vec<f32>,
    prefilter: Option<PrefilterReport>,
}

impl<I: NeighbourIndex> Output<'_, I> {
    /// Overwrites the neighbours of queries `first + i` (`i` in `rows`) with `keys`, `k` a query,
    /// in whichever form the answer takes (keys, or indices and distances).
    fn patch_rows(&mut self, k: usize, first: usize, rows: &[usize], keys: &[u64]) {
        for (row, &i) in keys.chunks_exact(k).zip(rows) {
            let at = (first + i) * k..(first + i + 1) * k;
            match &mut self.keys {
                Some(Keys::Kept(all)) => all[at].copy_from_slice(row),
                Some(Keys::Sink(sink)) => sink.put(at.start, row),
                None => {
                    let indices = &mut self.indices[at.clone()];
                    split_keys_into(row, indices, &mut self.distances[at]);
                }
            }
        }
    }
}

/// Launch plan of the TF32 prefilter for one index and k.
#[derive(Clone, Copy, Debug)]
struct Tf32Plan {
    /// Training rows per group of the first scan (16 or 64).
    group: usize,
    /// Groups per query row.
    ldg: usize,
    /// Dimensions of the staged query tile.
    xc: usize,
    /// Training tiles per scan block.
    tiles: usize,
    /// Whether the first scan stores its approximations for `knn_tf32_candidates` (rows of
    /// `approx_stride(n)`), else the candidates come from a second scan.
    store: bool,
    /// Whether the scan runs on Hopper's warpgroup `mma` (`knn_tf32_scan_wg`).
    wgmma: bool,
}

/// Device buffers of the prefilter for a batch of `rows` queries.
struct Tf32Buffers {
    gkeys: CudaSlice<u64>,
    t_sq: CudaSlice<f32>,
    counts: CudaSlice<u32>,
    cand: CudaSlice<u32>,
    /// Per query, set by the re-rank when it overflowed: host memory the kernel writes into
    /// (read once the batch's answer has come back, or before its vote).
    overflow: Mapped<u32>,
    /// The stored approximations, when the plan stores them.
    approx: Option<CudaSlice<f32>>,
}

/// What one search asks for, shared by its steps.
struct SearchJob<'a, 'q> {
    queries: &'a MatrixView<'q>,
    k: usize,
    method: Method,
    max_bytes: Option<usize>,
    vote: Option<VoteJob>,
    /// Where `Auto`'s timing reads the kernels' time, when it asks.
    clock: Option<&'a KernelClock>,
}

/// What sizes a search: its query rows and the rest of its [`SearchJob`].
#[derive(Clone, Copy, PartialEq, Eq)]
struct JobShape {
    rows: usize,
    k: usize,
    method: Method,
    max_bytes: Option<usize>,
    vote: Option<VoteJob>,
}

impl<'a, 'q> SearchJob<'a, 'q> {
    fn shape(&self) -> JobShape {
        JobShape {
            rows: self.queries.rows(),
            k: self.k,
            method: self.method,
            max_bytes: self.max_bytes,
            vote: self.vote,
        }
    }

    /// A search (no vote).
    fn new(
        queries: &'a MatrixView<'q>,
        k: usize,
        method: Method,
        max_bytes: Option<usize>,
    ) -> Self {
        SearchJob {
            queries,
            k,
            method,
            max_bytes,
            vote: None,
            clock: None,
        }
    }
}

/// What sizes the buffers of a search ([`BatchBuffers`]): searches of one shape on an index can
/// use the same set.
#[derive(Clone, Copy, PartialEq, Eq)]
struct BatchShape {
    /// Queries per batch.
    rows: usize,
    k: usize,
    /// Whole rows sorted (`Method::Sort`) rather than streamed in tiles.
    sort: bool,
    /// The prefilter's group keys per query and whether it stores approximations.
    tf32: Option<(usize, bool)>,
    /// A vote's class shares per query (0 without them); `None`: no vote.
    vote: Option<usize>,
}

impl BatchShape {
    /// Whether buffers made for `self` serve a search of shape `need`: batches of as many
    /// queries or fewer (every kernel takes the batch's rows, as the last, shorter batch of a
    /// search always has), all else the same.
    fn serves(&self, need: &BatchShape) -> bool {
        self.rows >= need.rows
            && BatchShape {
                rows: need.rows,
                ..*self
            } == *need
    }
}

/// Device buffers of a search, sized for its batch of queries.
struct BatchBuffers {
    /// The batch's query rows and their squared norms.
    q: CudaSlice<f32>,
    q_norms: CudaSlice<f32>,
    /// The running (then final) neighbour keys, `k` per query.
    best: CudaSlice<u64>,
    /// Distances of the streaming tiles or of whole rows (one value under the prefilter).
    dist: CudaSlice<f32>,
    /// Whole-row keys of the sort path.
    sort_keys: Option<CudaSlice<u64>>,
    /// Predicted classes and class shares of a vote.
    pred: Option<CudaSlice<u32>>,
    shares: Option<CudaSlice<f32>>,
    /// The prefilter's buffers, when it runs.
    tf32: Option<Tf32Buffers>,
}

impl BatchBuffers {
    /// Device memory the set holds, in bytes.
    fn device_bytes(&self) -> usize {
        let bytes = |b: Option<usize>| b.unwrap_or(0);
        let tf32 = self.tf32.as_ref().map(|t| {
            t.gkeys.num_bytes()
                + t.t_sq.num_bytes()
                + t.counts.num_bytes()
                + t.cand.num_bytes()
                + bytes(t.approx.as_ref().map(CudaSlice::num_bytes))
        });
        self.q.num_bytes()
            + self.q_norms.num_bytes()
            + self.best.num_bytes()
            + self.dist.num_bytes()
            + bytes(self.sort_keys.as_ref().map(CudaSlice::num_bytes))
            + bytes(self.pred.as_ref().map(CudaSlice::num_bytes))
            + bytes(self.shares.as_ref().map(CudaSlice::num_bytes))
            + bytes(tf32)
    }
}

impl CudaKnn {
    /// The path for `selection` and `k`: `Auto` takes the choice made for this shape (in this
    /// process, or kept in the user cache), else times the paths on a sample of `queries`
    /// ([`CudaKnn::auto_path`]); a fixed selection takes the prefilter where it applies.
    fn path(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
    ) -> Result<Path> {
        match self.fixed_path(k, selection) {
            Some(path) => Ok(path),
            None => self.auto_path(queries, k, max_bytes),
        }
    }

    /// The path of a fixed selection, or of any selection past the streaming k; `None` for
    /// `Auto`.
    fn fixed_path(&self, k: usize, selection: Selection) -> Option<Path> {
        let method = match selection {
            _ if k > MAX_STREAM_K => Method::Sort,
            Selection::KMin => Method::KMin,
            Selection::Bitonic => Method::Bitonic,
            Selection::Radix => Method::Radix,
            Selection::Auto => return None,
        };
        Some(Path {
            method,
            prefilter: true,
        })
    }

    /// The prefilter's plan for `k` with `method`, when it applies.
    fn tf32_plan(&self, k: usize, method: Method) -> Option<Tf32Plan> {
        if !self.prefilter || !tf32_metric(self.metric) || method == Method::Sort {
            return None;
        }
        let group = tf32_group(self.n, k)?;
        Some(Tf32Plan {
            group,
            ldg: tf32_groups_per_row(self.n, group),
            xc: self.scan_xc()?,
            tiles: 1,
            store: false,
            wgmma: self.warpgroup_scan,
        })
    }

    /// Dimensions of the scan's staged query tile: the most whose shared memory fits a block.
    fn scan_xc(&self) -> Option<usize> {
        let max_shared = self.gpu.max_shared_per_block();
        let shared = if self.warpgroup_scan {
            wg_scan_shared_bytes
        } else {
            tf32_scan_shared_bytes
        };
        [256, 128, 64, 32]
            .into_iter()
            .map(|c| tf32_xc(self.d, c))
            .find(|&c| shared(c) <= max_shared)
    }

    /// Training tiles per scan block for a batch of `rows` queries: the fewest waves × tiles
    /// (plus one for staging the queries) over the multiprocessors, one block each (a block's
    /// 8 warps at 255 registers fill a multiprocessor's register file, whatever its shared
    /// memory).
    fn tf32_tiles(&self, rows: usize) -> usize {
        let slots = self.gpu.multiprocessors().max(1);
        let (row_tiles, col_tiles) = (rows.div_ceil(TF32_ROWS), self.n.div_ceil(TF32_COLS));
        let cost = |t: usize| (row_tiles * col_tiles.div_ceil(t)).div_ceil(slots) * (t + 1);
        (1..=col_tiles).min_by_key(|&t| (cost(t), t)).unwrap_or(1)
    }

    /// The distance columns a streaming launch covers per query (the row stride of its
    /// distances): the selection tiles that make `LAUNCH_COLUMNS`, or the whole index when it is
    /// smaller, so that a small index (a streamed part of a few rows) does not reserve 64 KB a
    /// query and shrink its batches to one query.
    fn stream_span(&self, k: usize) -> usize {
        let tile = stream_tile(k);
        (tile * LAUNCH_COLUMNS.div_ceil(tile)).min(self.n.max(1))
    }

    /// Device bytes per query row of a batch.
    fn bytes_per_row(
        &self,
        k: usize,
        method: Method,
        vote: Option<VoteJob>,
        plan: Option<&Tf32Plan>,
    ) -> usize {
        let fixed = 4 * (self.d + 1) + 8 * k;
        let work = match (plan, method) {
            (Some(p), _) => {
                let stored = if p.store {
                    4 * approx_stride(self.n)
                } else {
                    0
                };
                8 * p.ldg + 4 * TF32_CAP + 12 + stored
            }
            (None, Method::KMin | Method::Bitonic | Method::Radix) => 4 * self.stream_span(k),
            (None, Method::Sort) => 4 * self.n + 8 * self.n.next_power_of_two(),
        };
        let votes = match vote {
            None => 0,
            Some(v) => {
                let c = self.classes.max(1);
                4 + if v.proba { 4 * c } else { 0 } + vote_block_bytes(1, c)
            }
        };
        fixed + work + votes
    }

    /// Searches `job`'s queries in batches that fit the budget, into `output` (its keys when it
    /// has them, else indices and distances); with a vote, votes on the device and brings back
    /// classes (and shares) instead. With `tf32` the prefilter runs where
    /// it applies ([`CudaKnn::tf32_plan`]). Steps: [`CudaKnn::plan_batches`],
    /// [`CudaKnn::batch_buffers`] (or the spare set of the last search of the same shape), then
    /// per batch [`CudaKnn::search_batch`] and [`CudaKnn::collect_batch`], with
    /// [`CudaKnn::exact_fallback`] for prefilter overflows: before the vote, which reads the keys
    /// on the device, else after the keys have come back (their download is the batch's one
    /// wait) into the answer's rows.
    fn run<'s, I: NeighbourIndex>(
        &self,
        job: SearchJob<'_, '_>,
        tf32: bool,
        mut output: Output<'s, I>,
    ) -> Result<Output<'s, I>> {
        arg_u32(job.k, "k")?;
        if let Some(ready) = &self.ready {
            self.gpu.wait_for(ready)?;
        }
        let mut planned = self.take_buffers(&job.shape(), tf32)?;
        let (rows, plan, bufs) = (planned.rows, planned.plan, &mut planned.bufs);
        let mut report = plan.map(|_| PrefilterReport::default());
        let m = job.queries.rows();
        let len = m * job.k;
        let split = job.vote.is_none() && output.keys.is_none();
        // Large answers' arrays are made (their pages first touched, on the rayon threads), or
        // a sink readied, while the GPU works on the first batch: fresh pages cost the host more
        // than the copy that fills them. Smaller ones are not worth a thread.
        let sink = matches!(output.keys, Some(Keys::Sink(_)));
        let beside = (split || sink) && len * 8 >= host_tasks::BESIDE_BYTES;
        if split && !beside {
            (output.indices, output.distances) = (vec![I::default(); len], vec![0.0; len]);
        }
        let mut first = 0;
        while first < m {
            let r = rows.min(m - first);
            if beside && first == 0 {
                // A task of the caller's rayon pool (the one `install` chose, else the global
                // one) makes the arrays while this thread queues the batch.
                let mut made = (Vec::new(), Vec::new());
                let searched = rayon::in_place_scope(|s| {
                    match &mut output.keys {
                        Some(Keys::Sink(sink)) => s.spawn(|_| sink.prepare()),
                        _ => s.spawn(|_| made = (host_tasks::zeroed(len), host_tasks::zeroed(len))),
                    }
                    self.search_batch(&job, plan.as_ref(), bufs, 0, r, report.as_mut())
                });
                if split {
                    (output.indices, output.distances) = made;
                }
                searched?;
            } else {
                self.search_batch(&job, plan.as_ref(), bufs, first, r, report.as_mut())?;
            }
            self.collect_batch(&job, bufs, first, r, &mut output)?;
            if let (None, Some(tf32), Some(rep)) = (job.vote, &bufs.tf32, report.as_mut()) {
                let (over, keys) = self.exact_fallback(&job, first, r, &tf32.overflow, rep)?;
                output.patch_rows(job.k, first, &over, &keys);
            }
            first += r;
        }
        output.prefilter = report;
        // A set that another search put back meanwhile is freed outside the lock.
        let replaced = self.spare.lock().unwrap().replace(planned);
        drop(replaced);
        Ok(output)
    }

    /// The plan of a search of `job` ([`CudaKnn::plan_batches`]) and its device buffers: the
    /// spare set and its plan when they were made for the same search (planning asks the
    /// driver for the free memory, 0.1 ms a search on the GPU machines; a batch's size never
    /// changes an answer), else a new plan with the spare set when it serves the plan's shape
    /// (its memory counts as free to the plan: it is reused, or freed before a new set is
    /// made), else with a new set.
    fn take_buffers(&self, job: &JobShape, tf32: bool) -> Result<Planned> {
        let spare = match self.spare.lock().unwrap().take() {
            Some(planned) if planned.job == (*job, tf32) => return Ok(planned),
            other => other,
        };
        let held = spare.as_ref().map_or(0, |s| s.bufs.device_bytes());
        let (rows, plan) = self.plan_batches(job, tf32, held)?;
        let need = BatchShape {
            rows,
            k: job.k,
            sort: job.method == Method::Sort,
            tf32: plan.map(|p| (p.ldg, p.store)),
            vote: (job.vote).map(|v| if v.proba { self.classes.max(1) } else { 0 }),
        };
        let (shape, bufs) = match spare {
            Some(s) if s.shape.serves(&need) => (s.shape, s.bufs),
            other => {
                drop(other);
                (need, self.batch_buffers(&need)?)
            }
        };
        Ok(Planned {
            job: (*job, tf32),
            rows,
            plan,
            shape,
            bufs,
        })
    }

    /// Makes the spare buffers serve a search of `job` along `path`, outside any timing: the
    /// first search (and each of `Auto`'s timed runs) then finds them made. Returns the
    /// queries per batch.
    fn reserve(&self, job: &JobShape, path: Path) -> Result<usize> {
        let planned = self.take_buffers(job, path.prefilter)?;
        let rows = planned.rows;
        let replaced = self.spare.lock().unwrap().replace(planned);
        drop(replaced);
        Ok(rows)
    }

    /// Plan: the queries per batch under the memory budget, and the prefilter's plan (with its
    /// training tiles per scan block for that batch) when `tf32` asks for it and it applies.
    /// `held`: device bytes that the search may free first (see [`CudaBackend::budget`]).
    fn plan_batches(
        &self,
        job: &JobShape,
        tf32: bool,
        held: usize,
    ) -> Result<(usize, Option<Tf32Plan>)> {
        let (k, method) = (job.k, job.method);
        let plan = if tf32 {
            self.tf32_plan(k, method)
        } else {
            None
        };
        let budget = self.gpu.budget(job.max_bytes, held)?;
        let m = job.rows.min(MAX_BATCH_ROWS);
        let rows_of = |p: Option<&Tf32Plan>| {
            (budget / self.bytes_per_row(k, method, job.vote, p)).clamp(1, m)
        };
        let stored_rows = |p: &Tf32Plan| rows_of(Some(p)).min(store_rows(self.n)).max(1);
        let plan = plan.map(|p| {
            let stored = Tf32Plan { store: true, ..p };
            let fits = stored_rows(&stored) >= m.min(STORE_MIN_ROWS);
            if self.n <= STORE_MAX_N && fits {
                stored
            } else {
                p
            }
        });
        let rows = match &plan {
            Some(p) if p.store => stored_rows(p),
            other => rows_of(other.as_ref()),
        };
        // The warpgroup scan where the approximations are stored (one scan: S 0.76 → 0.70 ms,
        // its scan 301 → 232 µs under ncu); with two scans (F: n = 10^6, d = 128) it measured
        // slower (61.0 → 65.3 ms).
        let plan = plan.map(|p| Tf32Plan {
            tiles: self.tf32_tiles(rows),
            wgmma: p.wgmma && p.store,
            ..p
        });
        Ok((rows, plan))
    }

    /// The device buffers of a search of `shape`. A set serves batch after batch of a search,
    /// then later searches of the same shape on this index, which are more batches to it: each
    /// buffer is written for a batch's rows before they are read (below, and the SAFETY notes).
    /// `q_norms` keeps its zeros where the metric takes no norms, which for an index is always
    /// or never; the zeros of the others are never read.
    fn batch_buffers(&self, shape: &BatchShape) -> Result<BatchBuffers> {
        let gpu = &*self.gpu;
        let (d, n, k, rows) = (self.d, self.n, shape.k, shape.rows);
        let tf32 = match shape.tf32 {
            // SAFETY: every buffer is written for a batch's rows before it is read: the group
            // keys by the first scan, thresholds and (cleared) counts by the threshold kernel,
            // the candidates that the re-rank reads (the first `counts` of a row) by the second
            // scan or `knn_tf32_candidates`, the overflow flags by the re-rank, the stored
            // approximations of a batch's rows by the first scan.
            Some((ldg, store)) => Some(unsafe {
                Tf32Buffers {
                    gkeys: gpu.uninit::<u64>(rows * ldg, "group keys")?,
                    t_sq: gpu.uninit::<f32>(rows, "thresholds")?,
                    counts: gpu.uninit::<u32>(rows, "candidate counts")?,
                    cand: gpu.uninit::<u32>(rows * TF32_CAP, "candidates")?,
                    overflow: gpu.mapped::<u32>(rows, "overflow flags")?,
                    approx: match store {
                        true => Some(gpu.uninit(rows * approx_stride(n), "approximations")?),
                        false => None,
                    },
                }
            }),
            None => None,
        };
        // SAFETY: each batch's query rows are copied in before use, and its keys are first
        // written whole (the first selection starts fresh; the sort path's take).
        let (q, best) = unsafe {
            (
                gpu.uninit::<f32>(rows * d, "query rows")?,
                gpu.uninit::<u64>(rows * k, "neighbour keys")?,
            )
        };
        let q_norms = gpu.zeros::<f32>(rows, "query norms")?;
        let (dist, sort_keys) = match (shape.tf32, shape.sort) {
            (Some(_), _) => (gpu.zeros::<f32>(1, "distances")?, None),
            (None, false) => (
                gpu.zeros::<f32>(rows * self.stream_span(k), "distances")?,
                None,
            ),
            (None, true) => (
                gpu.zeros::<f32>(rows * n, "distances")?,
                Some(gpu.zeros::<u64>(rows * n.next_power_of_two(), "sort keys")?),
            ),
        };
        let pred = (shape.vote)
            .map(|_| gpu.zeros::<u32>(rows, "predicted classes"))
            .transpose()?;
        let shares = (shape.vote.filter(|&c| c > 0))
            .map(|c| gpu.zeros::<f32>(rows * c, "class shares"))
            .transpose()?;
        Ok(BatchBuffers {
            q,
            q_norms,
            best,
            dist,
            sort_keys,
            pred,
            shares,
            tf32,
        })
    }

    /// Batch: copies queries `first..first + r` in, queues their norms, then their search into
    /// `bufs.best` by the prefilter (`plan`; with a vote, its overflows take
    /// [`CudaKnn::exact_fallback`] here, else after the answer's download), the streaming
    /// selection or the row sort; the job's clock, when it has one, times what follows the copy.
    fn search_batch(
        &self,
        job: &SearchJob<'_, '_>,
        plan: Option<&Tf32Plan>,
        bufs: &mut BatchBuffers,
        first: usize,
        r: usize,
        report: Option<&mut PrefilterReport>,
    ) -> Result<()> {
        let gpu = &*self.gpu;
        let (d, k) = (self.d, job.k);
        gpu.write_rows(
            &job.queries.as_slice()[first * d..(first + r) * d],
            &mut bufs.q,
            0,
            "query rows",
        )?;
        let start = job.clock.map(|_| gpu.mark()).transpose()?;
        if self.metric.needs_norms() {
            gpu.launch(
                ROW_SQ_NORMS,
                row_sq_norms_grid(r),
                0,
                RowSqNormsParams {
                    x: bufs.q.reads(r * d),
                    n: r as u32,
                    d: d as u32,
                    out: bufs.q_norms.writes(r),
                },
            )?;
        }
        let queued = match (plan, job.method) {
            (Some(p), method) => {
                let tf32 = bufs.tf32.as_mut().expect("prefilter buffers");
                self.tf32_batch(
                    p,
                    tf32,
                    &bufs.q,
                    &bufs.q_norms,
                    r,
                    k,
                    method,
                    &mut bufs.best,
                )?;
                let rep = report.expect("report");
                rep.queries += r;
                rep.stored += if p.store { r } else { 0 };
                if job.vote.is_some() {
                    let (over, keys) = self.exact_fallback(job, first, r, &tf32.overflow, rep)?;
                    for (row, &i) in keys.chunks_exact(k).zip(&over) {
                        gpu.write_at(row, &mut bufs.best, i * k, "neighbour keys")?;
                    }
                }
                Ok(())
            }
            (None, Method::KMin | Method::Bitonic | Method::Radix) => {
                self.stream_batch(job, bufs, r)
            }
            (None, Method::Sort) => {
                let keys = bufs.sort_keys.as_mut().expect("sort keys");
                let a = Side {
                    x: &bufs.q,
                    norms: &bufs.q_norms,
                    first: 0,
                    rows: r,
                };
                let b = Side {
                    x: &self.x,
                    norms: &self.norms,
                    first: 0,
                    rows: self.n,
                };
                distances(gpu, self.metric, a, b, d, &mut bufs.dist, self.n)?;
                let row_len = self.n.next_power_of_two();
                self.sort_rows(&bufs.dist, keys, row_len, r, k, &mut bufs.best)
            }
        };
        queued?;
        match (job.clock, start) {
            (Some(clock), Some(start)) => clock.add(start, gpu),
            _ => Ok(()),
        }
    }

    /// Fallback: the batch's queries (`r` from `first`) whose flags say they had too many
    /// prefilter candidates (read once the queued work is done: after the answer's download it
    /// has nothing left to wait for), counted in
    /// `report` and searched again on the exact path (a recursive [`CudaKnn::run`] without the
    /// prefilter). Returns their rows in the batch and their keys, `k` a query.
    fn exact_fallback(
        &self,
        job: &SearchJob<'_, '_>,
        first: usize,
        r: usize,
        flags: &Mapped<u32>,
        report: &mut PrefilterReport,
    ) -> Result<(Vec<usize>, Vec<u64>)> {
        let flags = self.gpu.read_mapped(flags, "the overflow flags")?;
        let over: Vec<usize> = (0..r).filter(|&i| flags[i] != 0).collect();
        report.exact_fallbacks += over.len();
        if over.is_empty() {
            return Ok((over, Vec::new()));
        }
        let (d, k) = (self.d, job.k);
        let rows_of = job.queries.as_slice();
        let mut sub = Vec::with_capacity(over.len() * d);
        for &i in &over {
            sub.extend_from_slice(&rows_of[(first + i) * d..(first + i + 1) * d]);
        }
        let view = MatrixView::new(&sub, over.len(), d)?;
        let keys = Output::<u32> {
            keys: Some(Keys::Kept(Vec::with_capacity(over.len() * k))),
            ..Output::default()
        };
        let exact = self.run(
            SearchJob {
                clock: job.clock,
                ..SearchJob::new(&view, k, job.method, job.max_bytes)
            },
            false,
            keys,
        )?;
        match exact.keys {
            Some(Keys::Kept(keys)) => Ok((over, keys)),
            _ => unreachable!("the fallback asked for its keys kept"),
        }
    }

    /// The streaming search of a batch of `r` queries: distances to `LAUNCH_COLUMNS` (whole tiles) of
    /// training rows at a time, each tile merged into the running keys.
    fn stream_batch(
        &self,
        job: &SearchJob<'_, '_>,
        bufs: &mut BatchBuffers,
        r: usize,
    ) -> Result<()> {
        let (n, k) = (self.n, job.k);
        let (tile, span) = (stream_tile(k), self.stream_span(k));
        let mut t0 = 0;
        while t0 < n {
            let width = span.min(n - t0);
            let a = Side {
                x: &bufs.q,
                norms: &bufs.q_norms,
                first: 0,
                rows: r,
            };
            let b = Side {
                x: &self.x,
                norms: &self.norms,
                first: t0,
                rows: width,
            };
            distances(&self.gpu, self.metric, a, b, self.d, &mut bufs.dist, span)?;
            let mut s = 0;
            while s < width {
                let cols = tile.min(width - s);
                let part = bufs.dist.slice(s..);
                self.select(job.method, &part, span, cols, t0 + s, &mut bufs.best, k, r)?;
                s += cols;
            }
            t0 += width;
        }
        Ok(())
    }

    /// Collect: brings the answers of a batch's `r` queries from query `first` back into
    /// `output`, as keys (appended) or split into its indices and distances (made whole by
    /// [`CudaKnn::run`]), or (with a vote) as the device's classes and shares.
    fn collect_batch<I: NeighbourIndex>(
        &self,
        job: &SearchJob<'_, '_>,
        bufs: &mut BatchBuffers,
        first: usize,
        r: usize,
        output: &mut Output<'_, I>,
    ) -> Result<()> {
        let gpu = &*self.gpu;
        let k = job.k;
        match job.vote {
            // Split (or copied) straight out of the page-locked buffer.
            None => {
                let mut at = first * k;
                gpu.download_each(&bufs.best, r * k, "neighbour keys", |keys| {
                    match &mut output.keys {
                        Some(Keys::Kept(all)) => all.extend_from_slice(keys),
                        Some(Keys::Sink(sink)) => sink.put(at, keys),
                        None => {
                            let to = at..at + keys.len();
                            let (i, d) =
                                (&mut output.indices[to.clone()], &mut output.distances[to]);
                            split_keys_into(keys, i, d);
                        }
                    }
                    at += keys.len();
                })
            }
            Some(v) => {
                let pred = bufs.pred.as_mut().expect("prediction buffer");
                self.vote_batch(&bufs.best, r, k, v, pred, bufs.shares.as_mut())?;
                output
                    .classes
                    .extend(gpu.download(pred, r, "predicted classes")?);
                if let Some(s) = &bufs.shares {
                    let c = self.classes.max(1);
                    output.proba.extend(gpu.download(s, r * c, "class shares")?);
                }
                Ok(())
            }
        }
    }

    /// Queues the prefilter for a batch of `rows` queries (`q`, `q_norms`): group minima, their
    /// k smallest, the exact threshold, the candidates, the exact re-rank into `best`, and the
    /// overflow flags.
    #[allow(clippy::too_many_arguments)]
    fn tf32_batch(
        &self,
        plan: &Tf32Plan,
        bufs: &mut Tf32Buffers,
        q: &CudaSlice<f32>,
        q_norms: &CudaSlice<f32>,
        rows: usize,
        k: usize,
        method: Method,
        best: &mut CudaSlice<u64>,
    ) -> Result<()> {
        let gpu = &*self.gpu;
        let (n, d) = (self.n, self.d);
        let (n32, d32, k32) = (n as u32, d as u32, k as u32);
        let by = method.kernel_method();
        for mode in [SCAN_GROUPS, SCAN_CANDIDATES] {
            if mode == SCAN_CANDIDATES {
                // The k smallest group keys (k distinct training rows), then their exact
                // distances → the threshold; clears the candidate counts.
                let tile = stream_tile(k);
                let mut s = 0;
                while s < plan.ldg {
                    let cols = tile.min(plan.ldg - s);
                    let kernel = match by {
                        BY_KMIN => KNN_SELECT_KEYS_KMIN,
                        BY_RADIX => KNN_SELECT_KEYS_RADIX,
                        _ => KNN_SELECT_KEYS_BITONIC,
                    };
                    debug_assert!(k + cols <= SELECT_CAP);
                    let tile_len = rows.checked_sub(1).map_or(0, |last| last * plan.ldg + cols);
                    gpu.launch(
                        kernel,
                        rows,
                        select_method_shared_bytes(by, k),
                        SelectKeysParams {
                            keys: bufs.gkeys.slice(s..).reads(tile_len),
                            ld: plan.ldg as u64,
                            cols: cols as u32,
                            best: best.writes(rows * k),
                            k: k32,
                            fresh: u32::from(s == 0),
                            last: u32::from(s + cols == plan.ldg),
                        },
                    )?;
                    s += cols;
                }
                gpu.launch(
                    KNN_TF32_THRESHOLD,
                    rows,
                    THRESHOLD_SHARED_BYTES,
                    ThresholdParams {
                        q: q.reads(rows * d),
                        q_norms: q_norms.reads(rows),
                        x: self.x.reads(n * d),
                        x_norms: self.norms.reads(n),
                        d: d32,
                        metric: self.metric.id(),
                        k: k32,
                        best: best.writes(rows * k),
                        t_sq: bufs.t_sq.writes(rows),
                        counts: bufs.counts.writes(rows),
                    },
                )?;
            }
            if mode == SCAN_CANDIDATES
                && let Some(approx) = &bufs.approx
            {
                let lda = approx_stride(n);
                gpu.launch(
                    KNN_TF32_CANDIDATES,
                    candidates_grid(rows, n),
                    CANDIDATE_SHARED_BYTES,
                    CandidatesParams {
                        approx: approx.reads(rows * lda),
                        lda: lda as u64,
                        rows: rows as u32,
                        n: n32,
                        q_norms: q_norms.reads(rows),
                        x_norms: self.norms.reads(n),
                        x_roots: self.roots.reads(n),
                        t_sq: bufs.t_sq.reads(rows),
                        c1: bound_coefficient(d),
                        counts: bufs.counts.writes(rows),
                        cand: bufs.cand.writes(rows * TF32_CAP),
                    },
                )?;
                continue;
            }
            let (kernel, shared) = scan_kernel(plan.wgmma, plan.xc);
            let lda = approx_stride(n);
            gpu.launch(
                kernel,
                tf32_scan_grid(rows, n, plan.tiles),
                shared,
                ScanParams {
                    q: q.reads(rows * d),
                    q_norms: q_norms.reads(rows),
                    m: rows as u32,
                    x: self.x.reads(n * d),
                    x_norms: self.norms.reads(n),
                    x_roots: self.roots.reads(n),
                    n: n32,
                    d: d32,
                    xc: plan.xc as u32,
                    tiles: plan.tiles as u32,
                    mode,
                    group: plan.group as u32,
                    gkeys: bufs.gkeys.writes(rows * plan.ldg),
                    ldg: plan.ldg as u64,
                    approx: bufs.approx.as_mut().writes(rows * lda),
                    lda: lda as u64,
                    t_sq: bufs.t_sq.reads(rows),
                    counts: bufs.counts.writes(rows),
                    cand: bufs.cand.writes(rows * TF32_CAP),
                    c1: bound_coefficient(d),
                },
            )?;
        }
        debug_assert!(bufs.overflow.len() >= rows);
        gpu.launch(
            KNN_TF32_RERANK,
            rows,
            RERANK_SHARED_BYTES,
            RerankParams {
                q: q.reads(rows * d),
                q_norms: q_norms.reads(rows),
                x: self.x.reads(n * d),
                x_norms: self.norms.reads(n),
                d: d32,
                metric: self.metric.id(),
                k: k32,
                best: best.writes(rows * k),
                counts: bufs.counts.writes(rows),
                cand: bufs.cand.reads(rows * TF32_CAP),
                overflow: DevPtr::from_address(*bufs.overflow.device()),
                method: by,
            },
        )
    }

    /// Queues the merge of a tile's distances (`rows × cols`, row stride `ld`, training rows
    /// from `first_index`) into the running keys.
    #[allow(clippy::too_many_arguments)]
    fn select(
        &self,
        method: Method,
        dist: &CudaView<'_, f32>,
        ld: usize,
        cols: usize,
        first_index: usize,
        best: &mut CudaSlice<u64>,
        k: usize,
        rows: usize,
    ) -> Result<()> {
        let by = method.kernel_method();
        let kernel = match by {
            BY_KMIN => KNN_SELECT_KMIN,
            BY_RADIX => KNN_SELECT_RADIX,
            _ => KNN_SELECT_BITONIC,
        };
        debug_assert!(k >= 1 && k + cols <= SELECT_CAP);
        let tile_len = rows.checked_sub(1).map_or(0, |last| last * ld + cols);
        self.gpu.launch(
            kernel,
            rows,
            select_method_shared_bytes(by, k),
            SelectParams {
                dist: dist.reads(tile_len),
                ld: ld as u64,
                cols: cols as u32,
                first_index: first_index as u32,
                best: best.writes(rows * k),
                k: k as u32,
                // The first tile starts from empty running keys (nothing to clear beforehand).
                fresh: u32::from(first_index == 0),
                // The last leaves them sorted for whatever reads them next.
                last: u32::from(first_index + cols == self.n),
            },
        )
    }

    /// Queues the sort of `rows` distance rows (`n` each) as keys in rows of `row_len` (a power
    /// of two ≥ `SELECT_CAP`) and the copy of the first `k` of each row to `best`.
    fn sort_rows(
        &self,
        dist: &CudaSlice<f32>,
        keys: &mut CudaSlice<u64>,
        row_len: usize,
        rows: usize,
        k: usize,
        best: &mut CudaSlice<u64>,
    ) -> Result<()> {
        let gpu = &*self.gpu;
        debug_assert!(row_len >= SELECT_CAP && row_len.is_power_of_two());
        let total = rows * row_len;
        let row_log2 = row_len.trailing_zeros();
        debug_assert!(total.is_multiple_of(SELECT_CAP));
        let n = self.n;
        gpu.launch(
            KNN_SORT_CHUNKS,
            sort_chunks_grid(total),
            SORT_SHARED_BYTES,
            SortChunksParams {
                dist: dist.reads(rows * n),
                ld: n as u64,
                n: n as u32,
                row_log2,
                keys: keys.writes(total),
            },
        )?;
        let mut size = 2 * SELECT_CAP;
        while size <= row_len {
            let mut stride = size / 2;
            while stride >= SELECT_CAP {
                gpu.launch(
                    KNN_BITONIC_MERGE_GLOBAL,
                    merge_global_grid(total / 2),
                    0,
                    MergeGlobalParams {
                        keys: keys.writes(total),
                        pairs: (total / 2) as u64,
                        row_log2,
                        size: size as u64,
                        stride: stride as u64,
                    },
                )?;
                stride /= 2;
            }
            gpu.launch(
                KNN_BITONIC_MERGE_LOCAL,
                sort_chunks_grid(total),
                SORT_SHARED_BYTES,
                MergeLocalParams {
                    keys: keys.writes(total),
                    row_log2,
                    size: size as u64,
                },
            )?;
            size *= 2;
        }
        gpu.launch(
            KNN_TAKE,
            take_grid(rows, k),
            0,
            TakeParams {
                keys: keys.reads(total),
                row_log2,
                rows: rows as u32,
                k: k as u32,
                best: best.writes(rows * k),
            },
        )
    }

    /// Queues the votes of `rows` queries whose keys are in `best`.
    fn vote_batch(
        &self,
        best: &CudaSlice<u64>,
        rows: usize,
        k: usize,
        job: VoteJob,
        pred: &mut CudaSlice<u32>,
        mut shares: Option<&mut CudaSlice<f32>>,
    ) -> Result<()> {
        let gpu = &*self.gpu;
        let labels = self
            .labels
            .as_ref()
            .ok_or_else(|| Error::invalid("labels", "the index has no labels to vote with"))?;
        let c = self.classes.max(1);
        // As many queries per block as fit the shared memory; a class count too large for even
        // one query puts the histograms in global scratch.
        let per_block = vote_queries_per_block(rows, c);
        let grid = vote_grid(rows, per_block);
        let in_shared = vote_block_bytes(per_block, c) <= DEFAULT_SHARED_BYTES;
        let mut scratch = if in_shared {
            None
        } else {
            Some(gpu.zeros::<u64>(grid * vote_block_bytes(1, c) / 8, "vote scratch")?)
        };
        let shared = if in_shared {
            vote_block_bytes(per_block, c)
        } else {
            0
        };
        gpu.launch(
            KNN_VOTE,
            grid,
            shared,
            VoteParams {
                best: best.reads(rows * k),
                rows: rows as u32,
                k: k as u32,
                // Indexed by training row.
                labels: labels.reads(self.n),
                row_weights: self.row_weights.as_ref().reads(self.n),
                classes: c as u32,
                rule: job.rule.flags(),
                scale: pow2_f32(vote_scale_exponent(k)),
                per_block: per_block as u32,
                pred: pred.writes(rows),
                proba: shares.writes(rows * c),
                scratch: scratch.as_mut().writes(grid * vote_block_bytes(1, c) / 8),
            },
        )
    }
}

impl CudaKnn {
    /// [`KnnSearch::search`] with indices of type `I`, split straight out of the downloaded keys.
    fn neighbours<I: NeighbourIndex>(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
    ) -> Result<Neighbours<I>> {
        let path = self.path(queries, k, selection, max_bytes)?;
        let out = self.run(
            SearchJob::new(queries, k, path.method, max_bytes),
            path.prefilter,
            Output::<I>::default(),
        )?;
        Ok(Neighbours {
            indices: out.indices,
            distances: out.distances,
            selection: path.method.reported(),
            prefilter: out.prefilter,
        })
    }
}

impl CudaKnn {
    /// A search whose neighbours go to `keys`: the selection that ran, the prefilter's report,
    /// and `keys` back.
    fn keys_search<'s>(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
        keys: Keys<'s>,
    ) -> Result<(Selection, Option<PrefilterReport>, Option<Keys<'s>>)> {
        let path = self.path(queries, k, selection, max_bytes)?;
        let output = Output::<u32> {
            keys: Some(keys),
            ..Output::default()
        };
        let job = SearchJob::new(queries, k, path.method, max_bytes);
        let out = self.run(job, path.prefilter, output)?;
        Ok((path.method.reported(), out.prefilter, out.keys))
    }
}

impl KnnSearch for CudaKnn {
    fn search(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
    ) -> Result<Neighbours> {
        self.neighbours(queries, k, selection, max_bytes)
    }

    fn search_i64(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
    ) -> Result<Neighbours<i64>> {
        self.neighbours(queries, k, selection, max_bytes)
    }

    fn search_keys(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
        keys: &mut Vec<u64>,
    ) -> Result<(Selection, Option<PrefilterReport>)> {
        keys.clear();
        let kept = Keys::Kept(std::mem::take(keys));
        let (selection, report, back) = self.keys_search(queries, k, selection, max_bytes, kept)?;
        if let Some(Keys::Kept(kept)) = back {
            *keys = kept;
        }
        Ok((selection, report))
    }

    fn search_to(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
        sink: &mut dyn KeySink,
    ) -> Result<(Selection, Option<PrefilterReport>)> {
        let to = Keys::Sink(sink);
        let (selection, report, _) = self.keys_search(queries, k, selection, max_bytes, to)?;
        Ok((selection, report))
    }

    fn radius(
        &self,
        queries: &MatrixView<'_>,
        radius: f32,
        max_bytes: Option<usize>,
    ) -> Result<crate::backend::radius::RadiusKeys> {
        self.radius_keys(queries, radius, max_bytes)
    }

    fn set_prefilter(&mut self, allowed: bool) {
        self.prefilter = allowed && self.gpu.info().compute_capability.0 >= 8;
    }

    fn prepare(
        &self,
        queries: usize,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
        vote: Option<bool>,
    ) -> Result<()> {
        arg_u32(k, "k")?;
        if queries == 0 {
            return Ok(());
        }
        let path = match self
            .fixed_path(k, selection)
            .or_else(|| self.auto_choice(k))
        {
            Some(path) => path,
            None => {
                // `Auto` makes its choice now (or reads it from the user cache), timed on the
                // first training rows as the queries.
                if let Some(ready) = &self.ready {
                    self.gpu.wait_for(ready)?;
                }
                let rows = self.n.min(auto::SAMPLE_ROWS);
                let sample =
                    (self.gpu).download_range(&self.x, 0..rows * self.d, "training rows")?;
                self.auto_path(&MatrixView::new(&sample, rows, self.d)?, k, max_bytes)?
            }
        };
        let job = JobShape {
            rows: queries,
            k,
            method: path.method,
            max_bytes,
            // The vote's rule (weights, ties) does not change its buffers.
            vote: vote.map(|proba| VoteJob {
                rule: VoteRule {
                    weighted: false,
                    smallest_label: false,
                },
                proba,
            }),
        };
        let rows = self.reserve(&job, path)?;
        self.gpu.reserve_upload(rows * self.d * size_of::<f32>())?;
        match vote {
            None => self.gpu.reserve_download::<u64>(queries * k),
            Some(_) => Ok(()),
        }
    }

    fn auto_report(&self, k: usize) -> Option<crate::backend::vocab::AutoReport> {
        self.auto_decision(k)
    }

    fn set_labels(&mut self, class_ids: &[u32], classes: usize) -> Result<()> {
        self.labels = Some(self.gpu.upload(class_ids, "training labels")?);
        self.classes = classes;
        Ok(())
    }

    fn set_row_weights(&mut self, relative: &[f32]) -> Result<()> {
        self.row_weights = Some(self.gpu.upload(relative, "sample weights")?);
        Ok(())
    }

    fn vote(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
        rule: VoteRule,
        proba: bool,
    ) -> Result<Votes> {
        let path = self.path(queries, k, selection, max_bytes)?;
        let job = SearchJob {
            vote: Some(VoteJob { rule, proba }),
            ..SearchJob::new(queries, k, path.method, max_bytes)
        };
        let out = self.run(job, path.prefilter, Output::<u32>::default())?;
        Ok(Votes {
            classes: out.classes,
            proba: out.proba,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::BatchShape;

    #[test]
    fn buffers_serve_batches_as_large_or_smaller_of_the_same_shape() {
        let made = BatchShape {
            rows: 1200,
            k: 25,
            sort: false,
            tf32: Some((512, true)),
            vote: None,
        };
        assert!(made.serves(&made));
        assert!(made.serves(&BatchShape { rows: 512, ..made }));
        assert!(!made.serves(&BatchShape { rows: 1201, ..made }));
        assert!(!made.serves(&BatchShape { k: 24, ..made }));
        assert!(!made.serves(&BatchShape { tf32: None, ..made }));
        assert!(!made.serves(&BatchShape {
            tf32: Some((512, false)),
            ..made
        }));
        assert!(!made.serves(&BatchShape {
            vote: Some(0),
            ..made
        }));
        assert!(!made.serves(&BatchShape { sort: true, ..made }));
    }
}
