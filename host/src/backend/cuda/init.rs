//! Seeding on the GPU (`kernels_gpu::init`): the data stays where the Lloyd iterations use it.
//! Greedy k-means++ runs every step on the device ([`CudaSeeder::greedy`]: the step kernels
//! queued back to back, the uniforms uploaded once and the seeds read back once); the step by
//! step path (sharded fits) uploads a step's draws and reads back its candidates and potentials.
//! A k-means‖ round reads back its sampled rows, and its candidates are reduced to k on the
//! device ([`CudaCandidates`]). Squared-L2 distances take the expanded form from every row's
//! squared norm, computed once when the seeding buffers are made (and for scratch rows as points
//! are staged into them, [`CudaSeeder::restaged`]). Every launch fills its kernel's parameter
//! struct from `kernels_gpu::init`; CPU twins: `backend/cpu/init.rs`.

use super::launch::{Reads, Writes};
use super::{CudaBackend, arg_u32};
use crate::backend::cpu::kmeans::row_sq_norms;
use crate::backend::cpu::locate::{BlockWeights, MinDist};
use crate::backend::traffic;
use crate::backend::{GreedyPlan, Picks, Seeding, Seeds, Trials};
use crate::error::{Error, Result};
use cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};
use kernels_gpu::fixed::weight_units;
use kernels_gpu::init::{
    GreedyDrawParams, LocateParams, NEAREST_SHARED_BYTES, NearestParams, OwnerWeightsParams,
    SEED_GREEDY_DRAW_L1, SEED_GREEDY_DRAW_L2, SEED_LOCATE_L1, SEED_LOCATE_L2, SEED_NEAREST_L1,
    SEED_NEAREST_L2, SEED_OWNER_WEIGHTS, SEED_SAMPLE_L1, SEED_SAMPLE_L2, SEED_TRIALS_L1,
    SEED_TRIALS_L2, SampleParams, TrialsParams, point_blocks, seed_shared_bytes,
};
use kernels_gpu::launch::SEED_CANDIDATES;
use kernels_gpu::launch::{BLOCK, Kernel};
use kernels_gpu::math::AssignMetric;
use kernels_gpu::norms::{ROW_SQ_NORMS, RowSqNormsParams, row_sq_norms_grid};
use kernels_gpu::params::DevPtr;
use kernels_gpu::seeding::{NO_ROW, WeightScale};

/// The resident rows seeding works on.
pub(crate) struct Rows<'r> {
    pub gpu: &'r CudaBackend,
    pub x: &'r CudaSlice<f32>,
    /// Every row's units as sample weights; `None`: one each (unless `counts`).
    pub weights: Option<&'r CudaSlice<f32>>,
    /// Every row's units as integers (k-means‖ candidates), in place of `weights`.
    pub counts: Option<&'r CudaSlice<u64>>,
    pub n: usize,
    pub d: usize,
    pub metric: AssignMetric,
}

impl Rows<'_> {
    /// Blocks of the one-thread-per-point launches, and block weight sums per candidate.
    fn blocks(&self) -> usize {
        point_blocks(self.n)
    }

    /// The kernel of a seeding pair for the rows' metric.
    fn kernel<P>(&self, l2: Kernel<P>, l1: Kernel<P>) -> Kernel<P> {
        match self.metric {
            AssignMetric::SqL2 => l2,
            AssignMetric::L1 => l1,
        }
    }

    /// The points, as a kernel reads them.
    fn points(&self) -> DevPtr<f32> {
        self.x.reads(self.n * self.d)
    }

    /// `norms`, which hold the squared norm of every row of `x` where the metric reads them
    /// (the expanded squared-L2 distance; `None` for L1).
    fn norms(&self, norms: Option<&CudaSlice<f32>>) -> DevPtr<f32> {
        let rows = self.x.len() / self.d.max(1);
        debug_assert!(self.metric == AssignMetric::L1 || norms.is_some());
        norms.reads(rows)
    }

    /// The optional units as sample weights.
    fn weights(&self) -> DevPtr<f32> {
        self.weights.reads(self.n)
    }

    /// The optional units as integers.
    fn counts(&self) -> DevPtr<u64> {
        self.counts.reads(self.n)
    }
}

/// Seeding buffers on the GPU (see `crate::backend::Seeding`).
pub(crate) struct CudaSeeder {
    /// The squared norm of every row of the rows' `x` (points and scratch rows), for squared L2.
    norms: Option<CudaSlice<f32>>,
    min_dist: CudaSlice<f32>,
    owner: CudaSlice<u32>,
    /// `SEED_CANDIDATES × blocks` weight sums of the last pass (one row per trial).
    block_sums: CudaSlice<u64>,
    /// Rows of `block_sums` that the last pass wrote (its trials; one for a nearest pass).
    sums_rows: usize,
    /// Candidate rows of the current pass (k-means‖: the new rows, grown as needed).
    candidates: CudaSlice<u32>,
    draws: CudaSlice<u64>,
    /// Trial potentials, or the total weight in slot 0.
    potentials: CudaSlice<u64>,
    /// k-means‖'s sampled rows (room for all `n`) and their count.
    sampled: CudaSlice<u32>,
    count: CudaSlice<u32>,
    /// The accepted row of the last step, read by the next trials pass.
    pending_row: CudaSlice<u32>,
    /// The last step's candidates; the accepted one, applied by the next pass.
    last: Vec<u32>,
    pending: Option<usize>,
}

/// A [`CudaSeeder`]'s buffers in host memory ([`CudaSeeder::park`]): its per-row state (each
/// row's seeding distance and nearest seed) and the small buffers. The rows' squared norms are
/// computed again from the rows when it goes back (the same kernel, the same bits), and
/// k-means‖'s samples, which no request reads after the one that drew them, come back as zeros.
/// A greedy k-means++ seeding's per-row state is not kept but replayed from its seeds
/// ([`SeedReplay`]): then `min_dist` and `owner` are only memory for a later park.
pub(crate) struct ParkedSeeder {
    norms: bool,
    /// The seeds whose distances `min_dist` would hold, when it was not kept.
    replay: Option<SeedReplay>,
    min_dist: Vec<f32>,
    owner: Vec<u32>,
    /// The rows of the block sums that the last pass wrote (the rest come back as zeros).
    block_sums: Vec<u64>,
    sums_rows: usize,
    candidates: Vec<u32>,
    draws: Vec<u64>,
    potentials: Vec<u64>,
    sampled: usize,
    count: Vec<u32>,
    pending_row: Vec<u32>,
    last: Vec<u32>,
    pending: Option<usize>,
}

/// The host memory of a seeder's per-row state while the seeder is on the device, kept for its
/// next park (no fresh pages to fault in at every turn).
#[derive(Default)]
pub(crate) struct SeederSpare {
    min_dist: Vec<f32>,
    owner: Vec<u32>,
}

/// The seeds of a greedy k-means++ seeding so far (row-major, in the order they lowered the
/// distances): the first seed, alone in a fresh nearest pass with id 0, then each accepted
/// trial. Every row's seeding distance is then the least of its distances to them (`min` is
/// exact and ignores order, and the nearest and trials kernels compute a distance alike), and
/// its nearest seed is 0. A streamed batch replays them ([`CudaSeeder::replay`]) instead of
/// moving its 8 bytes a row of seeding state down and up again at every turn, while a replay's
/// work stays below [`SeedReplay::MAX_VALUES`].
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct SeedReplay {
    pub points: Vec<f32>,
}

impl SeedReplay {
    /// Seed values (seeds × d) up to which a replay is cheaper than moving the state: a
    /// replay costs a multiply-add per value and row, which the GPU does at ~10^13 a second;
    /// the state costs 16 bytes a row over a bus of ~2.5 · 10^10 bytes a second, as long as
    /// ~6,000 multiply-adds. A quarter of that leaves room for the replay's staging and launches.
    pub const MAX_VALUES: usize = 1536;

    /// Whether replaying is cheaper than keeping the state.
    pub fn pays(&self) -> bool {
        self.points.len() <= Self::MAX_VALUES
    }
}

impl ParkedSeeder {
    /// The seeder on the device again over the rows `r` (its `x` as at the park), as it was
    /// parked; with the host memory it was parked in. A seeder whose state was not kept comes
    /// back with zeros for it, and with the seeds to replay ([`CudaSeeder::replay`]).
    pub(crate) fn restore(
        self,
        r: &Rows<'_>,
    ) -> Result<(CudaSeeder, SeederSpare, Option<SeedReplay>)> {
        let (gpu, what) = (r.gpu, "seeding state");
        let (min_dist, owner) = match &self.replay {
            Some(_) => (
                gpu.zeros(r.n, "seeding distances")?,
                gpu.zeros(r.n, "nearest seeds")?,
            ),
            None => {
                traffic::up(size_of_val(&self.min_dist[..]) + size_of_val(&self.owner[..]));
                (
                    gpu.upload_rows(&self.min_dist, &[], what)?,
                    gpu.upload_rows(&self.owner, &[], what)?,
                )
            }
        };
        let seeder = CudaSeeder {
            norms: self.norms.then(|| row_norms(r)).transpose()?,
            min_dist,
            owner,
            block_sums: {
                let mut sums = gpu.zeros(SEED_CANDIDATES * r.blocks(), "seeding weight sums")?;
                if !self.block_sums.is_empty() {
                    gpu.write(&self.block_sums, &mut sums, what)?;
                }
                sums
            },
            sums_rows: self.sums_rows,
            candidates: gpu.upload(&self.candidates, what)?,
            draws: gpu.upload(&self.draws, what)?,
            potentials: gpu.upload(&self.potentials, what)?,
            sampled: gpu.zeros(self.sampled, "k-means|| samples")?,
            count: gpu.upload(&self.count, what)?,
            pending_row: gpu.upload(&self.pending_row, what)?,
            last: self.last,
            pending: self.pending,
        };
        let spare = SeederSpare {
            min_dist: self.min_dist,
            owner: self.owner,
        };
        Ok((seeder, spare, self.replay))
    }

    /// [`CudaSeeder::accept`] while parked.
    pub(crate) fn accept(&mut self, trial: usize) {
        self.pending = Some(trial);
    }

    /// The accepted trial of the last step, when one is pending.
    pub(crate) fn pending(&self) -> Option<usize> {
        self.pending
    }

    /// [`CudaSeeder::owner_weights`] on the host, from the parked state: the units (`units`,
    /// or one each) of the rows whose nearest seed is each of the ids `0..ids`.
    pub(crate) fn owner_weights(
        &self,
        ids: usize,
        n: usize,
        units: Option<&[f32]>,
    ) -> Result<Vec<u64>> {
        let mut totals = vec![0u64; ids];
        if self.replay.is_some() {
            // Every row's nearest seed is the first (id 0).
            if let Some(first) = totals.first_mut() {
                *first = (0..n)
                    .map(|i| weight_units(units.map(|u| u[i])) as u64)
                    .sum();
            }
            return Ok(totals);
        }
        for (i, &o) in self.owner.iter().enumerate() {
            let total = totals.get_mut(o as usize).ok_or_else(|| {
                Error::invalid(
                    "ids",
                    format!("a row's nearest seed is {o}, not below {ids}"),
                )
            })?;
            *total += weight_units(units.map(|u| u[i])) as u64;
        }
        Ok(totals)
    }

    /// [`CudaSeeder::locate`] on the host, from the parked state: the rows `draws` pick among
    /// `x` (the batch's rows; staged points, which the pending winner may be, in `scratch`).
    pub(crate) fn locate(
        &self,
        x: &[f32],
        scratch: &[f32],
        h: &HostRows<'_>,
        draws: &[u64],
        ws: WeightScale,
    ) -> Vec<u32> {
        let (d, n) = (h.d, x.len() / h.d.max(1));
        let nb = point_blocks(n);
        let trial = self.pending.unwrap_or(0);
        let pending = self.pending.map(|t| {
            let row = self.last[t] as usize;
            match row.checked_sub(n) {
                None => &x[row * d..(row + 1) * d],
                Some(s) => &scratch[s * d..(s + 1) * d],
            }
        });
        let weights = BlockWeights {
            x,
            d,
            metric: h.metric,
            min_dist: match &self.replay {
                Some(r) => MinDist::Seeds(&r.points),
                None => MinDist::Kept(&self.min_dist),
            },
            units: h.units,
            sums: &self.block_sums[trial * nb..(trial + 1) * nb],
            block: BLOCK as usize,
        };
        draws
            .iter()
            .map(|&r| weights.locate(r, pending, ws))
            .collect()
    }
}

/// What a parked seeder's host-side locate reads beside its own state.
pub(crate) struct HostRows<'a> {
    pub d: usize,
    pub metric: AssignMetric,
    /// Every row's units; `None`: one each.
    pub units: Option<&'a [f32]>,
}

impl CudaSeeder {
    /// The buffers for `r`, with the squared norms of all its rows (squared L2).
    pub(crate) fn new(r: &Rows<'_>) -> Result<Self> {
        let gpu = r.gpu;
        Ok(CudaSeeder {
            norms: match r.metric {
                AssignMetric::SqL2 => Some(row_norms(r)?),
                AssignMetric::L1 => None,
            },
            min_dist: gpu.zeros(r.n, "seeding distances")?,
            owner: gpu.zeros(r.n, "nearest seeds")?,
            block_sums: gpu.zeros(SEED_CANDIDATES * r.blocks(), "seeding weight sums")?,
            sums_rows: 0,
            candidates: gpu.zeros(SEED_CANDIDATES, "seeding candidates")?,
            draws: gpu.zeros(SEED_CANDIDATES, "seeding draws")?,
            potentials: gpu.zeros(SEED_CANDIDATES, "seeding potentials")?,
            sampled: gpu.zeros(r.n, "k-means|| samples")?,
            count: gpu.zeros(1, "k-means|| sample count")?,
            pending_row: gpu.zeros(1, "the accepted seed")?,
            last: vec![],
            pending: None,
        })
    }

    /// Copies the buffers to host memory (the per-row state into `spare`'s, unless `replay`
    /// makes it again) and frees them (a streamed batch between its turns; waits for the work
    /// queued before). See [`ParkedSeeder`] for what is not kept.
    pub(crate) fn park(
        self,
        gpu: &CudaBackend,
        spare: SeederSpare,
        replay: Option<SeedReplay>,
    ) -> Result<ParkedSeeder> {
        fn down<T: DeviceRepr + ValidAsZeroBits + Clone>(
            gpu: &CudaBackend,
            buf: &CudaSlice<T>,
        ) -> Result<Vec<T>> {
            gpu.download(buf, buf.len(), "seeding state")
        }
        let what = "seeding state";
        let SeederSpare {
            mut min_dist,
            mut owner,
        } = spare;
        if replay.is_none() {
            gpu.download_into(&self.min_dist, self.min_dist.len(), &mut min_dist, what)?;
            gpu.download_into(&self.owner, self.owner.len(), &mut owner, what)?;
            traffic::down(size_of_val(&min_dist[..]) + size_of_val(&owner[..]));
        }
        Ok(ParkedSeeder {
            norms: self.norms.is_some(),
            replay,
            min_dist,
            owner,
            block_sums: {
                let used = self.sums_rows * (self.block_sums.len() / SEED_CANDIDATES);
                gpu.download(&self.block_sums, used, what)?
            },
            sums_rows: self.sums_rows,
            candidates: down(gpu, &self.candidates)?,
            draws: down(gpu, &self.draws)?,
            potentials: down(gpu, &self.potentials)?,
            sampled: self.sampled.len(),
            count: down(gpu, &self.count)?,
            pending_row: down(gpu, &self.pending_row)?,
            last: self.last,
            pending: self.pending,
        })
    }

    /// Takes the squared norms of `points` (row-major), just written to the rows from `first`
    /// (scratch rows of staged seeds), computed on the host: [`row_sq_norms`] gives the bits of
    /// the GPU's `row_sq_norms`.
    pub(crate) fn restaged(
        &mut self,
        gpu: &CudaBackend,
        first: usize,
        points: &[f32],
        d: usize,
    ) -> Result<()> {
        match self.norms.as_mut() {
            Some(norms) => gpu.write_at(&row_sq_norms(points, d), norms, first, "seeding norms"),
            None => Ok(()),
        }
    }

    pub(crate) fn nearest(
        &mut self,
        r: &Rows<'_>,
        rows: &[u32],
        first_id: u32,
        fresh: bool,
        ws: WeightScale,
    ) -> Result<u64> {
        let gpu = r.gpu;
        self.pending = None;
        self.last.clear();
        if self.candidates.len() < rows.len() {
            self.candidates = gpu.zeros(rows.len(), "seeding candidates")?;
        }
        gpu.write(rows, &mut self.candidates, "seeding candidates")?;
        gpu.clear(&mut self.potentials, "seeding potentials")?;
        self.sums_rows = 1;
        let n = r.n;
        gpu.launch(
            r.kernel(SEED_NEAREST_L2, SEED_NEAREST_L1),
            r.blocks(),
            NEAREST_SHARED_BYTES,
            NearestParams {
                x: r.points(),
                norms: r.norms(self.norms.as_ref()),
                n: n as u32,
                d: r.d as u32,
                weights: r.weights(),
                counts: r.counts(),
                min_dist: self.min_dist.writes(n),
                owner: self.owner.writes(n),
                rows: self.candidates.reads(rows.len()),
                count: arg_u32(rows.len(), "seeding candidates")?,
                first_id,
                fresh: u32::from(fresh),
                scale: ws.scale,
                cap: ws.cap,
                block_sums: self.block_sums.writes(r.blocks()),
                total: self.potentials.writes(1),
            },
        )?;
        Ok(gpu.download(&self.potentials, 1, "the seeding weight")?[0])
    }

    /// Lowers the seeding distances to the rows `rows` (staged seeds; from +∞ with `fresh`):
    /// a step of [`SeedReplay`]. A nearest pass, into weight sums of its own (the next request
    /// reads the last pass's), that leaves the pending winner pending. The nearest seeds it
    /// writes are cleared by [`CudaSeeder::replayed`].
    pub(crate) fn replay(&mut self, r: &Rows<'_>, rows: &[u32], fresh: bool) -> Result<()> {
        let gpu = r.gpu;
        let sums = gpu.zeros(r.blocks(), "replayed weight sums")?;
        let sums = std::mem::replace(&mut self.block_sums, sums);
        let total = gpu.zeros(1, "replayed seeding weight")?;
        let potentials = std::mem::replace(&mut self.potentials, total);
        let (pending, last, sums_rows) =
            (self.pending, std::mem::take(&mut self.last), self.sums_rows);
        let no_weights = WeightScale { scale: 1.0, cap: 0 };
        let done = self.nearest(r, rows, 0, fresh, no_weights);
        (self.block_sums, self.potentials) = (sums, potentials);
        (self.pending, self.last, self.sums_rows) = (pending, last, sums_rows);
        done.map(drop)
    }

    /// Ends a replay: every row's nearest seed is the first, as [`SeedReplay`] says.
    pub(crate) fn replayed(&mut self, gpu: &CudaBackend) -> Result<()> {
        gpu.clear(&mut self.owner, "nearest seeds")
    }

    pub(crate) fn trials(
        &mut self,
        r: &Rows<'_>,
        picks: Picks<'_>,
        ws: WeightScale,
    ) -> Result<Trials> {
        let gpu = r.gpu;
        let accepted = self.pending.take();
        let pending = accepted.map_or(NO_ROW, |t| self.last[t]);
        let trials = match picks {
            Picks::Seeds(Seeds::Rows(rows)) => {
                check_trials(rows.len())?;
                gpu.write(rows, &mut self.candidates, "seeding candidates")?;
                rows.len()
            }
            Picks::Seeds(Seeds::Points(_)) => {
                return Err(Error::invalid(
                    "seeds",
                    "the GPU seeds from resident rows; stage points as rows first",
                ));
            }
            Picks::Draws(draws) => {
                check_trials(draws.len())?;
                self.queue_locate(r, draws, accepted, pending, ws)?;
                draws.len()
            }
        };
        if pending != NO_ROW {
            gpu.write(&[pending], &mut self.pending_row, "the accepted seed")?;
        }
        gpu.clear(&mut self.potentials, "seeding potentials")?;
        self.sums_rows = trials;
        let pending_row = self.pending_row.slice(..);
        debug_assert!(trials < SEED_CANDIDATES);
        gpu.launch(
            r.kernel(SEED_TRIALS_L2, SEED_TRIALS_L1),
            r.blocks(),
            seed_shared_bytes(r.d),
            TrialsParams {
                x: r.points(),
                norms: r.norms(self.norms.as_ref()),
                n: r.n as u32,
                d: r.d as u32,
                weights: r.weights(),
                counts: r.counts(),
                min_dist: self.min_dist.writes(r.n),
                candidates: self.candidates.reads(trials),
                count: trials as u32,
                pending: (pending != NO_ROW).then_some(&pending_row).reads(1),
                stop: DevPtr::NULL,
                scale: ws.scale,
                cap: ws.cap,
                block_sums: self.block_sums.writes(trials * r.blocks()),
                potentials: self.potentials.writes(trials),
            },
        )?;
        let candidates = gpu.download(&self.candidates, trials, "seeding candidates")?;
        let potentials = gpu.download(&self.potentials, trials, "seeding potentials")?;
        self.last.clone_from(&candidates);
        Ok(Trials {
            candidates,
            potentials,
        })
    }

    /// The rows `draws` pick, with the accepted trial applied but still pending.
    pub(crate) fn locate(
        &mut self,
        r: &Rows<'_>,
        draws: &[u64],
        ws: WeightScale,
    ) -> Result<Vec<u32>> {
        if draws.is_empty() {
            return Ok(vec![]);
        }
        check_trials(draws.len())?;
        let pending = self.pending.map_or(NO_ROW, |t| self.last[t]);
        self.queue_locate(r, draws, self.pending, pending, ws)?;
        r.gpu
            .download(&self.candidates, draws.len(), "seeding candidates")
    }

    /// Queues the locate kernel: `draws` into `candidates`, in the weights of trial `accepted`
    /// of the last pass (or of the last nearest pass) with row `pending` applied.
    fn queue_locate(
        &mut self,
        r: &Rows<'_>,
        draws: &[u64],
        accepted: Option<usize>,
        pending: u32,
        ws: WeightScale,
    ) -> Result<()> {
        let gpu = r.gpu;
        gpu.write(draws, &mut self.draws, "seeding draws")?;
        let nb = r.blocks();
        let row = accepted.unwrap_or(0);
        let sums = self.block_sums.slice(row * nb..(row + 1) * nb);
        gpu.launch(
            r.kernel(SEED_LOCATE_L2, SEED_LOCATE_L1),
            draws.len(),
            seed_shared_bytes(r.d),
            LocateParams {
                x: r.points(),
                norms: r.norms(self.norms.as_ref()),
                n: r.n as u32,
                d: r.d as u32,
                weights: r.weights(),
                counts: r.counts(),
                min_dist: self.min_dist.reads(r.n),
                pending,
                sums: sums.reads(nb),
                nb: nb as u32,
                draws: self.draws.reads(draws.len()),
                scale: ws.scale,
                cap: ws.cap,
                out: self.candidates.writes(draws.len()),
            },
        )
    }

    pub(crate) fn accept(&mut self, trial: usize) {
        self.pending = Some(trial);
    }

    /// The accepted trial of the last step, when one is pending.
    pub(crate) fn pending(&self) -> Option<usize> {
        self.pending
    }

    /// The row of the accepted trial of the last step, when one is pending.
    pub(crate) fn pending_row_mut(&mut self) -> Option<&mut u32> {
        match self.pending {
            Some(t) => Some(&mut self.last[t]),
            None => None,
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn sample(
        &mut self,
        r: &Rows<'_>,
        seed: u64,
        round: u32,
        first_row: u32,
        ell: u64,
        phi: u64,
        ws: WeightScale,
    ) -> Result<Vec<u32>> {
        let gpu = r.gpu;
        gpu.clear(&mut self.count, "k-means|| sample count")?;
        gpu.launch(
            r.kernel(SEED_SAMPLE_L2, SEED_SAMPLE_L1),
            r.blocks(),
            0,
            SampleParams {
                weights: r.weights(),
                counts: r.counts(),
                min_dist: self.min_dist.reads(r.n),
                n: r.n as u32,
                seed,
                round,
                first_row,
                ell,
                phi,
                scale: ws.scale,
                cap: ws.cap,
                out: self.sampled.writes(r.n),
                count: self.count.writes(1),
            },
        )?;
        let count = gpu.download(&self.count, 1, "k-means|| sample count")?[0] as usize;
        // The kernel appends in whatever order blocks run; the set is what is deterministic.
        let mut rows = gpu.download(&self.sampled, count, "k-means|| samples")?;
        rows.sort_unstable();
        Ok(rows)
    }

    pub(crate) fn owner_weights(&mut self, r: &Rows<'_>, ids: usize) -> Result<Vec<u64>> {
        let gpu = r.gpu;
        let mut totals = gpu.zeros::<u64>(ids, "k-means|| candidate weights")?;
        gpu.launch(
            SEED_OWNER_WEIGHTS,
            r.blocks(),
            0,
            OwnerWeightsParams {
                owner: self.owner.reads(r.n),
                n: r.n as u32,
                weights: r.weights(),
                counts: r.counts(),
                // Every owner is below `ids`.
                totals: totals.writes(ids),
            },
        )?;
        gpu.download(&totals, ids, "k-means|| candidate weights")
    }
}

/// The squared norms of every row of `r.x` (the points and any rows past them), on the device.
fn row_norms(r: &Rows<'_>) -> Result<CudaSlice<f32>> {
    let rows = r.x.len() / r.d.max(1);
    let mut norms = r.gpu.zeros(rows, "seeding norms")?;
    r.gpu.launch(
        ROW_SQ_NORMS,
        row_sq_norms_grid(rows),
        0,
        RowSqNormsParams {
            x: r.x.reads(rows * r.d),
            n: arg_u32(rows, "rows")?,
            d: r.d as u32,
            out: norms.writes(rows),
        },
    )?;
    Ok(norms)
}

/// Candidates one pass can try besides the previous winner.
fn check_trials(trials: usize) -> Result<()> {
    if trials == 0 || trials >= SEED_CANDIDATES {
        return Err(Error::invalid(
            "trials",
            format!(
                "{trials} candidates per k-means++ step (1 to {} on the GPU)",
                SEED_CANDIDATES - 1
            ),
        ));
    }
    Ok(())
}

/// The two halves of a double buffer: the one step `step` reads, and the one it writes.
fn read_write<T>(pair: &mut [T; 2], step: usize) -> (&T, &mut T) {
    let [a, b] = pair;
    if step.is_multiple_of(2) {
        (b, a)
    } else {
        (a, b)
    }
}

/// The device-side state of [`CudaSeeder::greedy`]'s loop.
struct GreedyLoop {
    /// `k` rows: the first seed, then each step's winner.
    chosen: CudaSlice<u32>,
    uniforms: CudaSlice<u64>,
    /// Candidates and potentials, alternating between steps (one read, one written).
    candidates: [CudaSlice<u32>; 2],
    potentials: [CudaSlice<u64>; 2],
    /// The number of seeds chosen when a step left no weight; 0 while the loop runs.
    stop: CudaSlice<u32>,
}

impl GreedyLoop {
    fn new(gpu: &CudaBackend, plan: &GreedyPlan<'_>, steps: usize) -> Result<Self> {
        let (k, trials) = (plan.k, plan.trials);
        let mut chosen = gpu.zeros::<u32>(k, "k-means++ seeds")?;
        gpu.write(&[plan.first], &mut chosen, "k-means++ seeds")?;
        Ok(GreedyLoop {
            chosen,
            uniforms: gpu.upload(&plan.uniforms[..steps], "k-means++ uniforms")?,
            candidates: [
                gpu.zeros(trials, "k-means++ candidates")?,
                gpu.zeros(trials, "k-means++ candidates")?,
            ],
            potentials: [
                gpu.zeros(trials, "k-means++ potentials")?,
                gpu.zeros(trials, "k-means++ potentials")?,
            ],
            stop: gpu.zeros(1, "k-means++ stop")?,
        })
    }
}

impl CudaSeeder {
    /// Greedy k-means++ after the first seed, every step on the device: per step the
    /// `seed_greedy_draw` kernel settles the last step's winner and locates the next draws, then
    /// the trials kernel applies the winner and scores the candidates. One upload of the
    /// uniforms, one read-back of the seeds (fewer than `k` when a step left no weight: see
    /// [`crate::backend::greedy_steps`]).
    pub(crate) fn greedy(
        &mut self,
        r: &Rows<'_>,
        plan: &GreedyPlan<'_>,
        ws: WeightScale,
    ) -> Result<Vec<u32>> {
        let gpu = r.gpu;
        let k = plan.k;
        check_trials(plan.trials)?;
        let steps = k.saturating_sub(1) * plan.trials;
        if k < 2 || plan.uniforms.len() < steps || plan.first as usize >= r.n {
            return Err(Error::invalid(
                "k-means++ plan",
                "needs k ≥ 2, a first row in the data and trials uniforms per step",
            ));
        }
        arg_u32(k, "k")?;
        self.pending = None;
        self.last.clear();
        self.sums_rows = plan.trials;
        let mut state = GreedyLoop::new(gpu, plan, steps)?;
        for step in 1..k {
            self.queue_greedy_draw(r, &mut state, plan, step, ws)?;
            self.queue_greedy_trials(r, &mut state, plan.trials, step, ws)?;
        }
        self.queue_greedy_draw(r, &mut state, plan, k, ws)?;
        let stopped = gpu.download(&state.stop, 1, "k-means++ stop")?[0] as usize;
        let found = if stopped == 0 { k } else { stopped };
        gpu.download(&state.chosen, found, "k-means++ seeds")
    }

    /// Queues `seed_greedy_draw` for `step` (`step == k`: the last winner only).
    fn queue_greedy_draw(
        &self,
        r: &Rows<'_>,
        state: &mut GreedyLoop,
        plan: &GreedyPlan<'_>,
        step: usize,
        ws: WeightScale,
    ) -> Result<()> {
        let (last_c, next_c) = read_write(&mut state.candidates, step);
        let (last_p, next_p) = read_write(&mut state.potentials, step);
        let (trials, k, nb) = (plan.trials, plan.k, r.blocks());
        debug_assert!(trials < SEED_CANDIDATES && (1..=k).contains(&step));
        let uniforms = if step == k { 0 } else { step * trials };
        r.gpu.launch(
            r.kernel(SEED_GREEDY_DRAW_L2, SEED_GREEDY_DRAW_L1),
            trials,
            seed_shared_bytes(r.d),
            GreedyDrawParams {
                x: r.points(),
                norms: r.norms(self.norms.as_ref()),
                n: r.n as u32,
                d: r.d as u32,
                weights: r.weights(),
                counts: r.counts(),
                min_dist: self.min_dist.reads(r.n),
                block_sums: self.block_sums.reads(trials * nb),
                nb: nb as u32,
                trials: trials as u32,
                step: step as u32,
                k: k as u32,
                first_total: plan.total,
                chosen: state.chosen.writes(k),
                uniforms: state.uniforms.reads(uniforms),
                last_candidates: last_c.reads(trials),
                last_potentials: last_p.reads(trials),
                next_candidates: next_c.writes(trials),
                next_potentials: next_p.writes(trials),
                stop: state.stop.writes(1),
                scale: ws.scale,
                cap: ws.cap,
            },
        )
    }

    /// Queues the trials pass of `step < k`: the candidates `seed_greedy_draw` located, against
    /// the winner of the step before (step 1: the first seed, already applied).
    fn queue_greedy_trials(
        &mut self,
        r: &Rows<'_>,
        state: &mut GreedyLoop,
        trials: usize,
        step: usize,
        ws: WeightScale,
    ) -> Result<()> {
        let winner = state.chosen.slice(step - 1..step);
        let (_, tried) = read_write(&mut state.candidates, step);
        let (_, scored) = read_write(&mut state.potentials, step);
        r.gpu.launch(
            r.kernel(SEED_TRIALS_L2, SEED_TRIALS_L1),
            r.blocks(),
            seed_shared_bytes(r.d),
            TrialsParams {
                x: r.points(),
                norms: r.norms(self.norms.as_ref()),
                n: r.n as u32,
                d: r.d as u32,
                weights: r.weights(),
                counts: r.counts(),
                min_dist: self.min_dist.writes(r.n),
                candidates: tried.reads(trials),
                count: trials as u32,
                pending: (step != 1).then_some(&winner).reads(1),
                stop: state.stop.reads(1),
                scale: ws.scale,
                cap: ws.cap,
                block_sums: self.block_sums.writes(trials * r.blocks()),
                potentials: scored.writes(trials),
            },
        )
    }
}

/// k-means‖'s candidates on the GPU: their rows in a buffer of their own, each weighing the
/// units of the points nearest to it, reduced to k by the same seeding kernels.
pub(crate) struct CudaCandidates<'g> {
    gpu: &'g CudaBackend,
    x: CudaSlice<f32>,
    units: CudaSlice<u64>,
    m: usize,
    d: usize,
    metric: AssignMetric,
    seeder: Option<CudaSeeder>,
}

impl Drop for CudaCandidates<'_> {
    fn drop(&mut self) {
        self.gpu.bind_for_drop();
    }
}

impl<'g> CudaCandidates<'g> {
    /// The `units.len()` candidates `points` (row-major, `d` columns).
    pub(crate) fn new(
        gpu: &'g CudaBackend,
        points: &[f32],
        units: &[u64],
        d: usize,
        metric: AssignMetric,
    ) -> Result<Self> {
        Ok(CudaCandidates {
            gpu,
            x: gpu.upload(points, "k-means|| candidates")?,
            units: gpu.upload(units, "k-means|| candidate weights")?,
            m: units.len(),
            d,
            metric,
            seeder: None,
        })
    }

    /// The candidate rows and their seeding buffers (made on first use).
    fn seeding(&mut self) -> Result<(Rows<'_>, &mut CudaSeeder)> {
        let rows = Rows {
            gpu: self.gpu,
            x: &self.x,
            weights: None,
            counts: Some(&self.units),
            n: self.m,
            d: self.d,
            metric: self.metric,
        };
        if self.seeder.is_none() {
            self.seeder = Some(CudaSeeder::new(&rows)?);
        }
        Ok((rows, self.seeder.as_mut().expect("just made")))
    }
}

impl Seeding for CudaCandidates<'_> {
    fn seed_nearest(
        &mut self,
        seeds: Seeds<'_>,
        first_id: u32,
        fresh: bool,
        ws: WeightScale,
    ) -> Result<u64> {
        let Seeds::Rows(rows) = seeds else {
            return Err(Error::invalid(
                "seeds",
                "candidates seed from their own rows",
            ));
        };
        let (r, s) = self.seeding()?;
        s.nearest(&r, rows, first_id, fresh, ws)
    }

    fn seed_trials(&mut self, picks: Picks<'_>, ws: WeightScale) -> Result<Trials> {
        let (r, s) = self.seeding()?;
        s.trials(&r, picks, ws)
    }

    fn seed_locate(&mut self, draws: &[u64], ws: WeightScale) -> Result<Vec<u32>> {
        let (r, s) = self.seeding()?;
        s.locate(&r, draws, ws)
    }

    fn seed_accept(&mut self, trial: usize) {
        if let Some(s) = self.seeder.as_mut() {
            s.accept(trial);
        }
    }

    fn seed_sample(
        &mut self,
        seed: u64,
        round: u32,
        ell: u64,
        phi: u64,
        ws: WeightScale,
    ) -> Result<Vec<u32>> {
        let (r, s) = self.seeding()?;
        s.sample(&r, seed, round, 0, ell, phi, ws)
    }

    fn seed_owner_weights(&mut self, ids: usize) -> Result<Vec<u64>> {
        let (r, s) = self.seeding()?;
        s.owner_weights(&r, ids)
    }

    fn seed_greedy(&mut self, plan: &GreedyPlan<'_>, ws: WeightScale) -> Result<Vec<u32>> {
        let (r, s) = self.seeding()?;
        s.greedy(&r, plan, ws)
    }
}
