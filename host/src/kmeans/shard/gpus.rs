//! A k-means fit over the GPUs of this machine ([`Device::Gpus`]), or over rows beyond one GPU's
//! memory budget: the rows are cut into one contiguous part per GPU, and a part the GPU's budget
//! cannot hold resident into batches
//! ([`Backend::lloyd_batches`](crate::backend::Backend::lloyd_batches)). Each part and batch is a
//! shard of the sharded protocol, in this process; every GPU answers each request on a thread of
//! its own (so the GPUs compute at the same time), its batches one after another (the runners of
//! `backend::multi`). A step's exact partial sums are added by an NCCL all-reduce on the devices
//! when the GPUs are distinct and hold their rows resident ([`Device::sum_group`]; the first GPU
//! reads the totals back), otherwise by the sharded client on the host. Either way the fit
//! equals, bit for bit, the fit on one GPU and on the CPU: integer sums add up to the same totals
//! in any order. Sample weights are quantised here, from all of them, as a single-process fit
//! does; each shard gets its rows' units.

use super::client::add_partials;
use super::{Partial, Reply, Request, Shard, Transport, client};
use crate::backend::{SumGroup, Turn, answer_in_turns, on_each};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::kmeans::weights::Weighting;
use crate::kmeans::{KMeansModel, KMeansParams};
use crate::matrix::MatrixView;
use std::ops::Range;
use std::time::Instant;

/// The rows one device holds, in the batches that take turns on it (one when resident).
pub(crate) struct Placement {
    device: Device,
    batches: Vec<Range<usize>>,
}

impl Placement {
    /// Whether the device's rows take turns on it (they exceed its memory budget).
    pub(crate) fn streamed(&self) -> bool {
        self.batches.len() > 1
    }
}

/// Where `data`'s rows go for a fit with `params` over `devices` (a device may repeat): a
/// contiguous part per device, cut into batches where it exceeds the device's memory budget
/// (`params`' budget, or [`DEFAULT_BUDGET_SHARE`](crate::backend::DEFAULT_BUDGET_SHARE) of what
/// it has free). A device named twice gets its budget twice.
pub(crate) fn place(
    params: &KMeansParams,
    data: &MatrixView<'_>,
    devices: &[Device],
) -> Result<Vec<Placement>> {
    let (n, d) = (data.rows(), data.cols());
    let parts = devices.len().min(n).max(1);
    let seeds_at_once = client::seeds_at_once(params);
    let mut placed = Vec::with_capacity(parts);
    for (i, &device) in devices.iter().take(parts).enumerate() {
        let (start, end) = (i * n / parts, (i + 1) * n / parts);
        let fits = device.backend()?.lloyd_batches(
            end - start,
            d,
            params.k(),
            seeds_at_once,
            params.budget(),
        )?;
        placed.push(Placement {
            device,
            batches: fits
                .into_iter()
                .map(|b| start + b.start..start + b.end)
                .collect(),
        });
    }
    Ok(placed)
}

/// The least memory budget of `device` under which a fit with `params` of `rows × d` rows takes at
/// most `batches` batches there (1: resident), or with `None` any (below it the fit is refused);
/// `None` where the device has no memory of its own.
pub(crate) fn least_budget(
    params: &KMeansParams,
    rows: usize,
    d: usize,
    device: Device,
    batches: Option<usize>,
) -> Result<Option<usize>> {
    let seeds_at_once = client::seeds_at_once(params);
    device
        .backend()?
        .lloyd_budget(rows, d, params.k(), seeds_at_once, batches)
}

/// Fits `data` (validated by the shards) with `sample_weight` as `placed` says, as
/// [`KMeansParams::fit`] or [`KMeansParams::fit_weighted`] would on one device.
pub(crate) fn fit(
    params: &KMeansParams,
    data: &MatrixView<'_>,
    sample_weight: Option<&[f32]>,
    placed: &[Placement],
) -> Result<KMeansModel> {
    let (n, d) = (data.rows(), data.cols());
    // Errors in a single-process fit's order: the data, the parameters, then the weights.
    let weights = match sample_weight {
        Some(w) => {
            data.validate("the data")?;
            params.check(n, d)?;
            Some(Weighting::new(w, n)?)
        }
        None => None,
    };
    let mut groups = Vec::with_capacity(placed.len());
    for p in placed {
        let mut shards = Vec::with_capacity(p.batches.len());
        for rows in &p.batches {
            let view = MatrixView::new(
                &data.as_slice()[rows.start * d..rows.end * d],
                rows.len(),
                d,
            )?;
            // SAFETY: the shards live in `groups`, which this function drops before it returns
            // (also on every error path), and nothing a shard answers borrows its rows; so no
            // reference to `data` outlives this call, although `Shard` asks for 'static rows (it
            // is also the long-lived shard of a Dask worker, which owns its rows).
            let view: MatrixView<'static> = unsafe { std::mem::transmute(view) };
            let units = (weights.as_ref())
                .and_then(Weighting::units)
                .map(|u| u[rows.clone()].to_vec());
            shards.push(Shard::weighted(view, rows.start as u64, p.device, units)?);
        }
        groups.push(shards);
    }
    let across = sum_group(placed);
    let summed_by = across.as_ref().and_then(|group| group.describe());
    let mut transport = OnThreads { groups, across };
    let mut model = super::fit(params, &mut transport, weights.as_ref())?;
    let mut labels = Vec::with_capacity(n);
    for (i, reply) in transport
        .broadcast(&Request::Labels)?
        .into_iter()
        .enumerate()
    {
        match reply {
            Reply::Labels(part) => labels.extend(part),
            _ => return Err(Error::Shard(format!("shard {i} did not send its labels"))),
        }
    }
    model.labels = labels;
    if placed.iter().any(Placement::streamed) {
        model.device += ", streamed past the memory budget";
    }
    if let Some(by) = summed_by {
        model.device += &format!(", sums added by {by}");
    }
    Ok(model)
}

/// What adds the sums on the GPUs of `placed` ([`Device::sum_group`]) when each holds its rows
/// resident; `None` (the client adds them on the host, to the same result) otherwise.
fn sum_group(placed: &[Placement]) -> Option<Box<dyn SumGroup>> {
    if placed.iter().any(Placement::streamed) {
        return None;
    }
    Device::sum_group(&placed.iter().map(|p| p.device).collect::<Vec<_>>())
}

/// Shards in this process, a group per device: the groups answer at the same time, each on a
/// thread of its own, and the shards of a group one after another. In a group of several (a
/// streamed device) a shard's rows are on the device only for its turn. With `across` (one shard
/// per GPU, see [`sum_group`]) the GPUs add a step's sums among themselves.
struct OnThreads {
    groups: Vec<Vec<Shard>>,
    across: Option<Box<dyn SumGroup>>,
}

/// A shard takes its turn on a streamed device as a batch.
impl Turn for Shard {
    type Request = Request;
    type Reply = Reply;

    fn reads_rows(request: &Request) -> bool {
        request.reads_rows()
    }

    fn answer(&mut self, request: &Request) -> Result<Reply> {
        self.handle(request)
    }

    fn prefetch_rows(&mut self) -> Result<()> {
        Shard::prefetch_rows(self)
    }

    fn release_rows(&mut self) -> Result<()> {
        Shard::release_rows(self)
    }
}

impl Transport for OnThreads {
    fn broadcast(&mut self, request: &Request) -> Result<Vec<Reply>> {
        let start = Instant::now();
        let replies = answer_in_turns(&mut self.groups, &|_| request);
        super::phases::record(request, start.elapsed());
        replies
    }

    fn scatter(&mut self, requests: Vec<Request>) -> Result<Vec<Reply>> {
        let shards: usize = self.groups.iter().map(Vec::len).sum();
        if requests.len() != shards {
            return Err(Error::Shard(format!(
                "{} requests for {shards} shards",
                requests.len()
            )));
        }
        let start = Instant::now();
        let replies = answer_in_turns(&mut self.groups, &|i| &requests[i]);
        if let Some(first) = requests.first() {
            super::phases::record(first, start.elapsed());
        }
        replies
    }

    /// With NCCL, every GPU accumulates and keeps its sums; once all have (so that none waits
    /// in the all-reduce for one that failed), they add them up on the devices and the first
    /// reads the totals back: `k × d` sums cross PCIe once per step, not once per GPU.
    fn partial(&mut self, request: &Request, shards: usize, k: usize, d: usize) -> Result<Partial> {
        let Some(across) = &self.across else {
            return add_partials(self.broadcast(request)?, shards, k, d);
        };
        let held = on_each(&mut self.groups, |_, group| {
            group[0].accumulate_held(request)
        })?;
        let mut total = Partial::zeros(0, 0);
        for (i, reply) in held.into_iter().enumerate() {
            match reply {
                Reply::Partial(p) if p.sums.is_empty() && p.weights.is_empty() => total.merge(&p),
                _ => return Err(Error::Shard(format!("GPU {i} did not hold its sums"))),
            }
        }
        let summed = on_each(&mut self.groups, |i, group| {
            group[0].sum_across(across.as_ref(), i)
        })?;
        match summed.into_iter().next().flatten() {
            Some((sums, weights)) if sums.len() == k * d && weights.len() == k => {
                (total.sums, total.weights) = (sums, weights);
                Ok(total)
            }
            _ => Err(Error::Shard(
                "the first GPU did not read the sums back".into(),
            )),
        }
    }
}

// A part of one batch is a list of one range of rows.
#[allow(clippy::single_range_in_vec_init)]
#[cfg(test)]
mod tests {
    use super::*;
    use crate::kmeans::{Init, KMeans};

    /// Devices on threads, some streaming batches in turn (here CPU shards: the same code as on
    /// GPUs, where releasing the rows does nothing) equal one fit.
    #[test]
    fn shards_on_threads_fit_as_one() {
        let (n, d) = (301, 3);
        let rows: Vec<f32> = (0..n * d)
            .map(|i| ((i * 7919) % 101) as f32 / 10.0)
            .collect();
        let data = MatrixView::new(&rows, n, d).unwrap();
        let placed = |batches: &[&[Range<usize>]]| -> Vec<Placement> {
            (batches.iter())
                .map(|b| Placement {
                    device: Device::Cpu,
                    batches: b.to_vec(),
                })
                .collect()
        };
        let layouts = [
            placed(&[&[0..75], &[75..150], &[150..225], &[225..301]]),
            placed(&[
                &[0..50, 50..51, 51..120],
                &[120..200],
                &[200..230, 230..260, 260..301],
            ]),
            placed(&[&[0..100, 100..200, 200..301]]),
        ];
        for params in [
            KMeans::params(9).seed(3),
            KMeans::params(9)
                .seed(3)
                .init(Init::KMeansParallel)
                .n_init(2),
            KMeans::params(9)
                .seed(5)
                .init(Init::RandomPoints)
                .max_iter(4),
        ] {
            let one = params.clone().device(Device::Cpu).fit(&data).unwrap();
            for placement in &layouts {
                let split = fit(&params, &data, None, placement).unwrap();
                assert_eq!(split.centroids, one.centroids);
                assert_eq!(split.labels, one.labels);
                assert_eq!(split.inertia.to_bits(), one.inertia.to_bits());
                assert_eq!(split.n_iter, one.n_iter);
            }
        }
    }

    /// Sample weights (integers, fractions, zeros) over shards equal the weighted fit, for every
    /// init and for cosine.
    #[test]
    fn weighted_shards_fit_as_one() {
        let (n, d) = (257, 3);
        let rows: Vec<f32> = (0..n * d)
            .map(|i| ((i * 7919) % 101) as f32 / 10.0 + 0.05)
            .collect();
        let data = MatrixView::new(&rows, n, d).unwrap();
        // Three devices, two of them streaming batches in turn.
        let placement: Vec<Placement> = [
            vec![0..40, 40..41, 41..100],
            vec![100..180],
            vec![180..220, 220..257],
        ]
        .into_iter()
        .map(|batches| Placement {
            device: Device::Cpu,
            batches,
        })
        .collect();
        let integer: Vec<f32> = (0..n).map(|i| (i % 4) as f32).collect();
        let fractional: Vec<f32> = (0..n).map(|i| ((i * 37) % 11) as f32 * 0.173).collect();
        for weights in [&integer, &fractional] {
            for params in [
                KMeans::params(7).seed(3),
                KMeans::params(7)
                    .seed(3)
                    .init(Init::KMeansParallel)
                    .n_init(2),
                KMeans::params(7).seed(4).init(Init::RandomPoints),
                KMeans::params(7)
                    .seed(5)
                    .init(Init::RandomLabels)
                    .max_iter(5),
                KMeans::params(5)
                    .seed(6)
                    .metric(crate::kmeans::Metric::Cosine),
                KMeans::params(5).seed(7).metric(crate::kmeans::Metric::L1),
            ] {
                let one = params
                    .clone()
                    .device(Device::Cpu)
                    .fit_weighted(&data, weights)
                    .unwrap();
                let split = fit(&params, &data, Some(weights), &placement).unwrap();
                assert_eq!(split.centroids, one.centroids);
                assert_eq!(split.labels, one.labels);
                assert_eq!(split.inertia.to_bits(), one.inertia.to_bits());
                assert_eq!(split.n_iter, one.n_iter);
                assert_eq!(split.cluster_sizes, one.cluster_sizes);
            }
        }
        // Bad weights are the single-process fit's errors.
        let bad = fit(&KMeans::params(2), &data, Some(&[1.0; 3]), &placement);
        assert!(
            matches!(bad, Err(Error::SampleWeightCount { .. })),
            "{bad:?}"
        );
    }

    /// On the CPU (no device memory) every part is resident, whatever the budget.
    #[test]
    fn the_cpu_places_every_part_resident() {
        let rows = vec![0.5f32; 40 * 2];
        let data = MatrixView::new(&rows, 40, 2).unwrap();
        let params = KMeans::params(3).memory_budget(1);
        let placed = place(&params, &data, &[Device::Cpu; 3]).unwrap();
        let batches: Vec<_> = placed.iter().map(|p| p.batches.clone()).collect();
        assert_eq!(batches, [vec![0..13], vec![13..26], vec![26..40]]);
        assert!(placed.iter().all(|p| !p.streamed()));
    }
}
