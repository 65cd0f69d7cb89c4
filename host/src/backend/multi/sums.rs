//! A GPU set's k-means sums added on the GPUs: an NCCL communicator over the set, one [`Rank`]
//! per GPU, that [`AcrossGpus::sum_across`] all-reduces a step's exact integer sums over (the
//! first GPU reads the totals back), so `k × d` sums cross PCIe once per step, not once per GPU.
//! Integer sums add up to the same totals in any order, so the fit is the one the host's
//! addition gives.

use crate::backend::cuda::CudaBackend;
use crate::backend::cuda::nccl::{Nccl, Rank};
use crate::backend::{AcrossGpus, SumGroup};
use crate::error::Result;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// A communicator's ranks, held by one fit at a time.
struct NcclGroup(MutexGuard<'static, Vec<Rank>>);

impl SumGroup for NcclGroup {
    fn sum_across(
        &self,
        gpu: usize,
        fit: &mut dyn AcrossGpus,
    ) -> Result<Option<(Vec<i64>, Vec<u64>)>> {
        fit.sum_across(&self.0[gpu])
    }

    fn describe(&self) -> Option<String> {
        let version = Nccl::shared().ok()?.version;
        Some(format!("NCCL {}", Nccl::version_text(version)))
    }
}

/// The NCCL communicator over the GPUs `ordinals` when they are two or more distinct GPUs and
/// NCCL is installed; otherwise, or while another fit holds the communicator of the same GPUs,
/// `None` (the caller adds the sums on the host, which gives the same result). A communicator is
/// made on first use and kept for the process's later fits: making one takes a good part of a
/// second.
pub(crate) fn nccl_group(ordinals: &[usize]) -> Option<Box<dyn SumGroup>> {
    type Communicators = Mutex<HashMap<Vec<usize>, &'static Mutex<Vec<Rank>>>>;
    static MADE: OnceLock<Communicators> = OnceLock::new();
    let distinct: BTreeSet<usize> = ordinals.iter().copied().collect();
    if ordinals.len() < 2 || distinct.len() != ordinals.len() {
        return None;
    }
    let mut made = MADE.get_or_init(Mutex::default).lock().ok()?;
    let ranks = match made.get(ordinals) {
        Some(&ranks) => ranks,
        None => {
            let gpus: Vec<_> = (ordinals.iter())
                .map(|&o| CudaBackend::shared(o))
                .collect::<Result<_>>()
                .ok()?;
            let ranks = Rank::for_gpus(&gpus.iter().map(|g| g.as_ref()).collect::<Vec<_>>());
            let ranks: &'static _ = Box::leak(Box::new(Mutex::new(ranks.ok()?)));
            made.insert(ordinals.to_vec(), ranks);
            ranks
        }
    };
    Some(Box::new(NcclGroup(ranks.try_lock().ok()?)))
}
