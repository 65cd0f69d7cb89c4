//! A k-means fit over several GPUs of this machine ([`Device::Gpus`](crate::Device::Gpus)): the
//! rows are cut into one contiguous shard per GPU, every shard answers each request on a thread
//! of its own (so the GPUs compute at the same time), and the sharded client adds up their exact
//! partial sums on the host. The fit therefore equals, bit for bit, the fit on one GPU and on
//! the CPU, and only `k × d` sums and `k` weights per GPU cross PCIe per step.

use super::{Reply, Request, Shard, Transport};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::kmeans::{KMeansModel, KMeansParams};
use crate::matrix::MatrixView;
use std::thread;

/// Fits `data` (validated by the shards) over `devices` (the GPUs of a set; a device may
/// repeat) as [`KMeansParams::fit`] would on one of them.
pub(crate) fn fit(
    params: &KMeansParams,
    data: &MatrixView<'_>,
    devices: &[Device],
) -> Result<KMeansModel> {
    let (n, d) = (data.rows(), data.cols());
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
        shards.push(Shard::new(rows, start as u64, device)?);
    }
    let mut transport = OnThreads(shards);
    let mut model = super::fit(params, &mut transport)?;
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
            let threads = fit(&params, &data, &[Device::Cpu; 4]).unwrap();
            assert_eq!(threads.centroids, one.centroids);
            assert_eq!(threads.labels, one.labels);
            assert_eq!(threads.inertia.to_bits(), one.inertia.to_bits());
            assert_eq!(threads.n_iter, one.n_iter);
        }
    }
}
