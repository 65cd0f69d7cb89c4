//! Seeding on the GPU (`kernels_gpu::init`): the data stays where the Lloyd iterations use it;
//! a k-means++ step uploads its draws, runs the locate and trials kernels and reads back the
//! candidates and their potentials (O(trials) numbers); a k-means‖ round reads back its sampled
//! rows. CPU twins: `backend/cpu/init.rs`.

use super::{CudaBackend, NULL, arg_u32};
use crate::backend::{Picks, Seeds, Trials};
use crate::error::Result;
use cudarc::driver::{CudaSlice, LaunchArgs, PushKernelArg};
use kernels_gpu::launch::{BLOCK, SEED_CANDIDATES, SEED_SHARED_BYTES};
use kernels_gpu::math::AssignMetric;
use kernels_gpu::seeding::{NO_ROW, WeightScale};

/// The resident rows seeding works on.
pub(crate) struct Rows<'r> {
    pub gpu: &'r CudaBackend,
    pub x: &'r CudaSlice<f32>,
    /// Every row's units; `None`: one each.
    pub weights: Option<&'r CudaSlice<f32>>,
    pub n: usize,
    pub d: usize,
    pub metric: AssignMetric,
}

impl Rows<'_> {
    fn blocks(&self) -> usize {
        self.n.div_ceil(BLOCK as usize)
    }

    fn kernel(&self, l2: &'static str, l1: &'static str) -> &'static str {
        match self.metric {
            AssignMetric::SqL2 => l2,
            AssignMetric::L1 => l1,
        }
    }

    /// Pushes the weights argument (null without weights).
    fn push_weights<'l>(&'l self, args: &mut LaunchArgs<'l>) {
        match self.weights {
            Some(w) => args.arg(w),
            None => args.arg(&NULL),
        };
    }
}

/// Seeding buffers on the GPU (see `crate::backend::Seeding`).
pub(crate) struct CudaSeeder {
    min_dist: CudaSlice<f32>,
    owner: CudaSlice<u32>,
    /// `SEED_CANDIDATES × blocks` weight sums of the last pass (one row per trial).
    block_sums: CudaSlice<u64>,
    /// Candidate rows of the current pass (k-means‖: the new rows, grown as needed).
    candidates: CudaSlice<u32>,
    draws: CudaSlice<u64>,
    /// Trial potentials, or the total weight in slot 0.
    potentials: CudaSlice<u64>,
    /// k-means‖'s sampled rows (room for all `n`) and their count.
    sampled: CudaSlice<u32>,
    count: CudaSlice<u32>,
    /// The last step's candidates; the accepted one, applied by the next pass.
    last: Vec<u32>,
    pending: Option<usize>,
}

impl CudaSeeder {
    pub(crate) fn new(r: &Rows<'_>) -> Result<Self> {
        let gpu = r.gpu;
        Ok(CudaSeeder {
            min_dist: gpu.zeros(r.n, "seeding distances")?,
            owner: gpu.zeros(r.n, "nearest seeds")?,
            block_sums: gpu.zeros(SEED_CANDIDATES * r.blocks(), "seeding weight sums")?,
            candidates: gpu.zeros(SEED_CANDIDATES, "seeding candidates")?,
            draws: gpu.zeros(SEED_CANDIDATES, "seeding draws")?,
            potentials: gpu.zeros(SEED_CANDIDATES, "seeding potentials")?,
            sampled: gpu.zeros(r.n, "k-means|| samples")?,
            count: gpu.zeros(1, "k-means|| sample count")?,
            last: vec![],
            pending: None,
        })
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
        let name = r.kernel("seed_nearest_l2", "seed_nearest_l1");
        let f = gpu.function(name)?;
        let mut launch = gpu.launch(name, &f);
        let (n, d) = (r.n as u32, r.d as u32);
        let count = arg_u32(rows.len(), "seeding candidates")?;
        let fresh = u32::from(fresh);
        launch.args().arg(r.x).arg(&n).arg(&d);
        r.push_weights(launch.args());
        launch
            .args()
            .arg(&mut self.min_dist)
            .arg(&mut self.owner)
            .arg(&self.candidates)
            .arg(&count)
            .arg(&first_id)
            .arg(&fresh)
            .arg(&ws.scale)
            .arg(&ws.cap)
            .arg(&mut self.block_sums)
            .arg(&mut self.potentials);
        launch.run(r.blocks(), BLOCK, SEED_SHARED_BYTES)?;
        Ok(gpu.download(&self.potentials, 1, "the seeding weight")?[0])
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
        let (n, d) = (r.n as u32, r.d as u32);
        let trials = match picks {
            Picks::Seeds(Seeds::Rows(rows)) => {
                gpu.write(rows, &mut self.candidates, "seeding candidates")?;
                rows.len()
            }
            Picks::Seeds(Seeds::Points(_)) => {
                unreachable!("points are staged as rows by CudaLloyd")
            }
            Picks::Draws(draws) => {
                self.queue_locate(r, draws, accepted, pending, ws)?;
                draws.len()
            }
        };
        gpu.clear(&mut self.potentials, "seeding potentials")?;
        let name = r.kernel("seed_trials_l2", "seed_trials_l1");
        let f = gpu.function(name)?;
        let mut launch = gpu.launch(name, &f);
        let count = trials as u32;
        launch.args().arg(r.x).arg(&n).arg(&d);
        r.push_weights(launch.args());
        launch
            .args()
            .arg(&mut self.min_dist)
            .arg(&self.candidates)
            .arg(&count)
            .arg(&pending)
            .arg(&ws.scale)
            .arg(&ws.cap)
            .arg(&mut self.block_sums)
            .arg(&mut self.potentials);
        launch.run(r.blocks(), BLOCK, SEED_SHARED_BYTES)?;
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
        let (n, d) = (r.n as u32, r.d as u32);
        gpu.write(draws, &mut self.draws, "seeding draws")?;
        let nb = r.blocks();
        let row = accepted.unwrap_or(0);
        let sums = self.block_sums.slice(row * nb..(row + 1) * nb);
        let name = r.kernel("seed_locate_l2", "seed_locate_l1");
        let f = gpu.function(name)?;
        let mut launch = gpu.launch(name, &f);
        let nb = nb as u32;
        launch.args().arg(r.x).arg(&n).arg(&d);
        r.push_weights(launch.args());
        launch
            .args()
            .arg(&self.min_dist)
            .arg(&pending)
            .arg(&sums)
            .arg(&nb)
            .arg(&self.draws)
            .arg(&ws.scale)
            .arg(&ws.cap)
            .arg(&mut self.candidates);
        launch.run(draws.len(), BLOCK, SEED_SHARED_BYTES)
    }

    pub(crate) fn accept(&mut self, trial: usize) {
        self.pending = Some(trial);
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
        let name = r.kernel("seed_sample_l2", "seed_sample_l1");
        let f = gpu.function(name)?;
        let mut launch = gpu.launch(name, &f);
        let n = r.n as u32;
        r.push_weights(launch.args());
        launch
            .args()
            .arg(&self.min_dist)
            .arg(&n)
            .arg(&seed)
            .arg(&round)
            .arg(&first_row)
            .arg(&ell)
            .arg(&phi)
            .arg(&ws.scale)
            .arg(&ws.cap)
            .arg(&mut self.sampled)
            .arg(&mut self.count);
        launch.run(r.blocks(), BLOCK, 0)?;
        let count = gpu.download(&self.count, 1, "k-means|| sample count")?[0] as usize;
        // The kernel appends in whatever order blocks run; the set is what is deterministic.
        let mut rows = gpu.download(&self.sampled, count, "k-means|| samples")?;
        rows.sort_unstable();
        Ok(rows)
    }

    pub(crate) fn owner_weights(&mut self, r: &Rows<'_>, ids: usize) -> Result<Vec<u64>> {
        let gpu = r.gpu;
        let mut totals = gpu.zeros::<u64>(ids, "k-means|| candidate weights")?;
        let f = gpu.function("seed_owner_weights")?;
        let mut launch = gpu.launch("seed_owner_weights", &f);
        let n = r.n as u32;
        launch.args().arg(&self.owner).arg(&n);
        r.push_weights(launch.args());
        launch.args().arg(&mut totals);
        launch.run(r.blocks(), BLOCK, 0)?;
        gpu.download(&totals, ids, "k-means|| candidate weights")
    }
}
