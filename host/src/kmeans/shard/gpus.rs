//! A k-means fit over several GPUs of this machine ([`Device::Gpus`](crate::Device::Gpus)): the
//! rows are cut into one contiguous shard per GPU, every shard answers each request on a thread
//! of its own (so the GPUs compute at the same time), and the sharded client adds up their exact
//! partial sums on the host. The fit therefore equals, bit for bit, the fit on one GPU and on
//! the CPU, and only `k × d` sums and `k` weights per GPU cross PCIe per step. Sample weights are
//! quantised here, from all of them, as a single-process fit does; each shard gets its rows'
//! units.

use super::{Reply, Request, Shard, Transport};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::kmeans::weights::Weighting;
use crate::kmeans::{KMeansModel, KMeansParams};
use crate::matrix::MatrixView;
use std::thread;

/// Fits `data` (validated by the shards) with `sample_weight` over `devices` (the GPUs of a set;
/// a device may repeat) as [`KMeansParams::fit`] or [`KMeansParams::fit_weighted`] would on one
/// of them.
pub(crate) fn fit(
    params: &KMeansParams,
    data: &MatrixView<'_>,
    sample_weight: Option<&[f32]>,
    devices: &[Device],
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
    let parts = devices.len().min(n).max(1);
    let mut shards = Vec::with_capacity(parts);
    for (i, &device) in devices.iter().take(parts).enumerate() {
        let (start, end) = (i * n / parts, (i + 1) * n / parts);
        let rows = MatrixView::new(&data.as_slice()[start * d..end * d], end - start, d)?;
        // SAFETY: the shards live in `shards`, which this function drops before it returns
        // (also on every error path), and nothing a shard answers borrows its rows; so no
        // reference to `data` outlives this call, although `Shard` asks for 'static rows (it
        // is also the long-lived shard of a Dask worker, which owns its rows).
        let rows: MatrixView<'static> = unsafe { std::mem::transmute(rows) };
        let units = weights
            .as_ref()
            .and_then(|w| w.units())
            .map(|u| u[start..end].to_vec());
        shards.push(Shard::weighted(rows, start as u64, device, units)?);
    }
    let mut transport = OnThreads(shards);
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
    Ok(model)
}

/// Shards in this process, each answering on a thread of its own.
struct OnThreads(Vec<Shard>);

impl Transport for OnThreads {
    fn broadcast(&mut self, request: &Request) -> Result<Vec<Reply>> {
        thread::scope(|scope| {
            let running: Vec<_> = (self.0.iter_mut())
                .map(|shard| scope.spawn(move || shard.handle(request)))
                .collect();
            running.into_iter().enumerate().map(joined).collect()
        })
    }

    fn scatter(&mut self, requests: Vec<Request>) -> Result<Vec<Reply>> {
        thread::scope(|scope| {
            let running: Vec<_> = (self.0.iter_mut().zip(&requests))
                .map(|(shard, request)| scope.spawn(move || shard.handle(request)))
                .collect();
            running.into_iter().enumerate().map(joined).collect()
        })
    }
}

/// The reply of shard `i`'s thread; a panic there becomes an error.
fn joined((i, running): (usize, thread::ScopedJoinHandle<'_, Result<Reply>>)) -> Result<Reply> {
    running
        .join()
        .unwrap_or_else(|_| Err(Error::Shard(format!("shard {i}'s thread panicked"))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kmeans::{Init, KMeans};

    /// Shards on threads (here CPU shards: the same code as on GPUs) equal one fit.
    #[test]
    fn shards_on_threads_fit_as_one() {
        let (n, d) = (301, 3);
        let rows: Vec<f32> = (0..n * d)
            .map(|i| ((i * 7919) % 101) as f32 / 10.0)
            .collect();
        let data = MatrixView::new(&rows, n, d).unwrap();
        for params in [
            KMeans::params(9).seed(3),
            KMeans::params(9)
                .seed(3)
                .init(Init::KMeansParallel)
                .n_init(2),
        ] {
            let one = params.clone().device(Device::Cpu).fit(&data).unwrap();
            let threads = fit(&params, &data, None, &[Device::Cpu; 4]).unwrap();
            assert_eq!(threads.centroids, one.centroids);
            assert_eq!(threads.labels, one.labels);
            assert_eq!(threads.inertia.to_bits(), one.inertia.to_bits());
            assert_eq!(threads.n_iter, one.n_iter);
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
                let split = fit(&params, &data, Some(weights), &[Device::Cpu; 3]).unwrap();
                assert_eq!(split.centroids, one.centroids);
                assert_eq!(split.labels, one.labels);
                assert_eq!(split.inertia.to_bits(), one.inertia.to_bits());
                assert_eq!(split.n_iter, one.n_iter);
                assert_eq!(split.cluster_sizes, one.cluster_sizes);
            }
        }
        // Bad weights are the single-process fit's errors.
        let bad = fit(
            &KMeans::params(2),
            &data,
            Some(&[1.0; 3]),
            &[Device::Cpu; 2],
        );
        assert!(
            matches!(bad, Err(Error::SampleWeightCount { .. })),
            "{bad:?}"
        );
    }
}
