//! [`Shard`]: rows that stay on one backend (a GPU, or the CPU) for a whole fit and answer a
//! sharded fit's [`Request`]s.

use super::Tally;
use super::protocol::{Prepare, Reply, Request};
use super::{Moments, column_max_abs};
use crate::backend::{Backend, Layout, Lloyd, LloydSpec, Picks, Seeds, SumGroup};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::kmeans::Metric;
use crate::matrix::MatrixView;
use kernels_gpu::launch::SEED_CANDIDATES;
use kernels_gpu::seeding::WeightScale;
use self_cell::self_cell;
use std::sync::{Arc, OnceLock};

/// The rows and the backend they live on.
struct Held {
    backend: Arc<dyn Backend>,
    data: MatrixView<'static>,
    first_row: u64,
    /// Every row's sample weight in units (integer-valued); `None`: one each.
    units: Option<Vec<f32>>,
    /// The rows' units in all.
    total_units: u64,
    /// The rows scaled to unit length, for spherical k-means (made on first use).
    unit: OnceLock<MatrixView<'static>>,
}

impl Held {
    /// The rows a fit uses: the data, or with `unit` its rows scaled to unit length.
    fn rows(&self, unit: bool) -> Result<&MatrixView<'static>> {
        if !unit {
            return Ok(&self.data);
        }
        if let Some(rows) = self.unit.get() {
            return Ok(rows);
        }
        let rows = self.data.normalized("the data").map_err(|e| match e {
            Error::ZeroVector { what, row } => Error::ZeroVector {
                what,
                row: row + self.first_row as usize,
            },
            e => e,
        })?;
        Ok(self.unit.get_or_init(|| rows))
    }
}

/// The resident state of the current fit, borrowing the rows.
type Fit<'a> = Option<Box<dyn Lloyd + Send + 'a>>;

self_cell!(
    struct Cell {
        owner: Held,
        #[covariant]
        dependent: Fit,
    }
);

/// Where seeding stands, to refuse requests out of order.
#[derive(Clone, Copy, Default)]
struct Seeding {
    /// Trials of the last `SeedTrials` (0 after `SeedNearest`).
    trials: usize,
    /// Seed ids handed out so far.
    ids: usize,
}

/// One shard of a sharded k-means fit: rows `first_row..first_row + rows` of the whole data
/// set, kept by the shard for as long as it lives, and on its backend (uploaded once per fit,
/// at [`Request::Prepare`]) for the fit's every step.
///
/// ```
/// use kmeans_knn::{Device, MatrixView, kmeans::shard::{Reply, Request, Shard}};
/// let rows = MatrixView::from_vec(vec![0.0, 1.0, 2.0, 3.0], 2, 2)?;
/// let mut shard = Shard::new(rows, 10, Device::Cpu)?;
/// let columns = Request::Columns { unit_rows: false };
/// let Reply::Columns { first_row, max_abs, .. } = shard.handle(&columns)? else {
///     unreachable!()
/// };
/// assert_eq!((first_row, max_abs), (10, vec![2.0, 3.0]));
/// # Ok::<(), kmeans_knn::Error>(())
/// ```
pub struct Shard {
    cell: Cell,
    /// Whether the fit under way uses the rows scaled to unit length (see [`Request::Columns`]).
    unit_rows: bool,
    k: usize,
    seeding: Option<Seeding>,
}

impl Shard {
    /// Holds `data` (validated: non-empty, finite), rows `first_row..` of the whole data set,
    /// for fits on `device`. Rows of the whole set are counted in 32 bits, as the backends do.
    pub fn new(data: MatrixView<'static>, first_row: u64, device: Device) -> Result<Self> {
        Self::weighted(data, first_row, device, None)
    }

    /// [`Shard::new`] for rows weighing `units` each (integer-valued sample weights in units,
    /// quantised from all the rows' weights as a single-process fit does), for a fit in this
    /// process that holds all the weights.
    pub(crate) fn weighted(
        data: MatrixView<'static>,
        first_row: u64,
        device: Device,
        units: Option<Vec<f32>>,
    ) -> Result<Self> {
        if units.as_ref().is_some_and(|u| u.len() != data.rows()) {
            return Err(Error::Shard("a shard's units are not one per row".into()));
        }
        if let Err(e) = data.validate("the data") {
            return Err(match e {
                Error::NonFinite {
                    what,
                    row,
                    col,
                    value,
                } => Error::NonFinite {
                    what,
                    row: row + first_row as usize,
                    col,
                    value,
                },
                e => e,
            });
        }
        if first_row + data.rows() as u64 > u64::from(u32::MAX) {
            return Err(Error::invalid(
                "rows",
                "a sharded fit takes at most 2^32 − 1 rows in all",
            ));
        }
        let total_units = units
            .as_ref()
            .map_or(data.rows() as u64, |u| u.iter().map(|&u| u as u64).sum());
        let held = Held {
            backend: device.backend()?,
            data,
            first_row,
            units,
            total_units,
            unit: OnceLock::new(),
        };
        Ok(Shard {
            cell: Cell::new(held, |_| None),
            unit_rows: false,
            k: 0,
            seeding: None,
        })
    }

    /// Rows held.
    pub fn rows(&self) -> usize {
        self.cell.borrow_owner().data.rows()
    }

    /// The row of the whole data set that the first row held is.
    pub fn first_row(&self) -> u64 {
        self.cell.borrow_owner().first_row
    }

    /// The backend the rows live on, e.g. `cuda:0 (NVIDIA H100 80GB HBM3)`.
    pub fn device(&self) -> String {
        self.cell.borrow_owner().backend.describe()
    }

    /// Frees the device's copy of the rows until a request needs them again (a streamed batch
    /// between its turns, as a batch that takes turns on its device).
    pub(crate) fn release_rows(&mut self) -> Result<()> {
        self.cell.with_dependent_mut(|_, fit| match fit {
            Some(lloyd) => lloyd.release_rows(),
            None => Ok(()),
        })
    }

    /// Starts uploading the rows released by [`Shard::release_rows`] beside the device's other
    /// work, for a request that reads them.
    pub(crate) fn prefetch_rows(&mut self) -> Result<()> {
        self.cell.with_dependent_mut(|_, fit| match fit {
            Some(lloyd) => lloyd.prefetch_rows(),
            None => Ok(()),
        })
    }

    /// Answers `request` (a [`Request::Step`] or [`Request::Accumulate`]) leaving the cluster
    /// sums and weights on the device for [`Shard::sum_across`]: its partial comes without them.
    pub(crate) fn accumulate_held(&mut self, request: &Request) -> Result<Reply> {
        self.with_fit(|lloyd| lloyd.hold_sums(true))?;
        let reply = self.handle(request);
        self.with_fit(|lloyd| lloyd.hold_sums(false))?;
        reply
    }

    /// Adds the sums and weights held by [`Shard::accumulate_held`] over the GPUs of `group`,
    /// this shard's on its GPU `gpu` (every shard of the group at once); the first gets the
    /// totals.
    pub(crate) fn sum_across(
        &mut self,
        group: &dyn SumGroup,
        gpu: usize,
    ) -> Result<Option<(Vec<i64>, Vec<u64>)>> {
        self.with_fit(|lloyd| group.sum_across(gpu, lloyd))
    }

    fn with_fit<T>(&mut self, f: impl FnOnce(&mut dyn Lloyd) -> Result<T>) -> Result<T> {
        self.cell.with_dependent_mut(|_, fit| match fit {
            Some(lloyd) => f(lloyd.as_mut()),
            None => Err(Error::Shard("no fit is prepared on this shard".into())),
        })
    }

    /// Answers `request` (see [`Request`] for what each one does and returns).
    pub fn handle(&mut self, request: &Request) -> Result<Reply> {
        let held = self.cell.borrow_owner();
        let (d, first_row) = (held.data.cols(), held.first_row);
        match request {
            Request::Columns { unit_rows } => {
                let rows = held.rows(*unit_rows)?;
                self.unit_rows = *unit_rows;
                Ok(Reply::Columns {
                    first_row,
                    rows: rows.rows() as u64,
                    max_abs: column_max_abs(rows, held.units.as_deref()),
                    device: held.backend.describe(),
                })
            }
            Request::Moments { scales } => {
                expect_len("scales", scales.len(), d)?;
                let rows = held.rows(self.unit_rows)?;
                Ok(Reply::Moments(Moments::of(
                    rows,
                    held.units.as_deref(),
                    scales,
                )))
            }
            Request::Gather { rows } => self.gather(rows),
            Request::Prepare(p) => self.prepare(p).map(|()| Reply::Done),
            _ => {
                self.check_seeding(request)?;
                let k = self.k;
                let reply = self.cell.with_dependent_mut(|held, fit| match fit {
                    Some(lloyd) => serve(lloyd.as_mut(), held, k, request),
                    None => Err(Error::Shard("no fit prepared on this shard".into())),
                })?;
                self.note_seeding(request);
                Ok(reply)
            }
        }
    }

    /// Makes the resident state of a new fit (freeing the last one's first).
    fn prepare(&mut self, p: &Prepare) -> Result<()> {
        let d = self.cell.borrow_owner().data.cols();
        expect_len("scales", p.scales.len(), d)?;
        if p.k == 0 {
            return Err(Error::invalid("k", "k must be at least 1"));
        }
        if (p.metric == Metric::Cosine) != self.unit_rows {
            return Err(Error::Shard(
                "a fit prepared for cosine without unit rows, or unit rows for another metric \
                 (Columns with unit_rows starts a cosine fit)"
                    .into(),
            ));
        }
        self.seeding = None;
        self.k = 0;
        let unit = self.unit_rows;
        self.cell.with_dependent_mut(|held, fit| {
            *fit = None;
            let layout = Layout {
                first_row: held.first_row as u32,
                seeds_at_once: p.seeds_at_once,
            };
            // The inertia's unit is the client's.
            let spec = LloydSpec {
                k: p.k,
                metric: p.metric,
                precision: p.precision,
                scales: p.scales.clone(),
                inertia_exponent: p.inertia_exponent,
                inertia_unit: kernels_gpu::fixed::inv_pow2_f64(p.inertia_exponent),
                weights: held.units.as_deref(),
            };
            let lloyd = held.backend.lloyd_at(held.rows(unit)?, layout, &spec)?;
            *fit = Some(lloyd);
            Ok::<(), Error>(())
        })?;
        self.k = p.k;
        Ok(())
    }

    /// The rows of `rows` that this shard holds, with their values.
    fn gather(&self, rows: &[u64]) -> Result<Reply> {
        let held = self.cell.borrow_owner();
        let data = held.rows(self.unit_rows)?;
        let range = held.first_row..held.first_row + data.rows() as u64;
        let mine: Vec<u64> = rows.iter().copied().filter(|r| range.contains(r)).collect();
        let points = mine
            .iter()
            .flat_map(|&r| data.row((r - held.first_row) as usize))
            .copied()
            .collect();
        Ok(Reply::Points { rows: mine, points })
    }

    /// Refuses seeding requests that do not follow the ones before.
    fn check_seeding(&self, request: &Request) -> Result<()> {
        let held = self.cell.borrow_owner();
        let d = held.data.cols();
        if let Some(ws) = seeding_scale(request) {
            // The client's cap is ⌊2^63 / n⌋ for the n units of the whole data set, at least
            // this shard's: a larger one would let this shard's sums overflow.
            let units = held.total_units.max(1);
            if ws.cap > (1u64 << 63) / units {
                return Err(Error::Shard(format!(
                    "a seeding weight scale capped at {} for a shard of {units} units: its sums \
                     could overflow",
                    ws.cap
                )));
            }
        }
        let state = self.seeding;
        let out_of_order = || Error::Shard("a seeding request out of order".into());
        let accepted = |accept: &Option<usize>| match (accept, state) {
            (Some(t), Some(s)) if *t >= s.trials => Err(out_of_order()),
            _ => Ok(()),
        };
        match request {
            Request::SeedNearest { points, fresh, .. } => {
                expect_rows("seed points", points.len(), d)?;
                if !fresh && state.is_none() {
                    return Err(out_of_order());
                }
            }
            Request::SeedLocate { accept, draws, .. } => {
                state.ok_or_else(out_of_order)?;
                accepted(accept)?;
                if draws.len() >= SEED_CANDIDATES {
                    return Err(Error::invalid("draws", "too many draws for one step"));
                }
            }
            Request::SeedTrials { accept, points, .. } => {
                state.ok_or_else(out_of_order)?;
                accepted(accept)?;
                let trials = expect_rows("trial points", points.len(), d)?;
                if trials == 0 || trials >= SEED_CANDIDATES {
                    return Err(Error::invalid("trials", "1 to 31 trials per step"));
                }
            }
            Request::SeedSample { .. } => {
                state.ok_or_else(out_of_order)?;
            }
            // Exactly the seeds handed out: fewer leave owners without a slot, more were never
            // seeds.
            Request::SeedOwnerCounts { ids } if state.is_none_or(|s| *ids != s.ids) => {
                return Err(out_of_order());
            }
            _ => {}
        }
        Ok(())
    }

    /// Records where seeding stands after a request that was served.
    fn note_seeding(&mut self, request: &Request) {
        let d = self.cell.borrow_owner().data.cols();
        match request {
            Request::SeedNearest {
                points,
                first_id,
                fresh,
                ..
            } => {
                let ids = *first_id as usize + points.len() / d;
                let before = if *fresh {
                    0
                } else {
                    self.seeding.map_or(0, |s| s.ids)
                };
                self.seeding = Some(Seeding {
                    trials: 0,
                    ids: before.max(ids),
                });
            }
            Request::SeedTrials { points, .. } => {
                if let Some(s) = self.seeding.as_mut() {
                    s.trials = points.len() / d;
                }
            }
            _ => {}
        }
    }
}

/// The seeding weight scale a request carries.
fn seeding_scale(request: &Request) -> Option<WeightScale> {
    match request {
        Request::SeedNearest { weights, .. }
        | Request::SeedLocate { weights, .. }
        | Request::SeedTrials { weights, .. }
        | Request::SeedSample { weights, .. } => Some(*weights),
        _ => None,
    }
}

/// Answers a request that needs the fit's resident state.
fn serve(lloyd: &mut dyn Lloyd, held: &Held, k: usize, request: &Request) -> Result<Reply> {
    let (n, d, first_row) = (held.data.rows(), held.data.cols(), held.first_row);
    let global = |rows: Vec<u32>| rows.into_iter().map(|r| first_row + u64::from(r)).collect();
    let accept = |lloyd: &mut dyn Lloyd, accept: &Option<usize>| {
        if let Some(t) = *accept {
            lloyd.seed_accept(t);
        }
    };
    Ok(match request {
        Request::Assign { centroids } => {
            set_centroids(lloyd, centroids, k, d)?;
            let stats = lloyd.assign()?;
            Reply::Assigned {
                changed: stats.changed,
                inertia: lloyd.fixed_inertia()?,
            }
        }
        Request::Step { centroids } => {
            set_centroids(lloyd, centroids, k, d)?;
            Reply::Partial(lloyd.accumulate(true)?)
        }
        Request::Accumulate => Reply::Partial(lloyd.accumulate(false)?),
        Request::SetLabels { labels } => {
            expect_len("labels", labels.len(), n)?;
            if labels.iter().any(|&l| l as usize >= k) {
                return Err(Error::invalid(
                    "labels",
                    format!("a label is not below k = {k}"),
                ));
            }
            lloyd.set_labels(labels)?;
            Reply::Done
        }
        Request::Farthest { count } => {
            let mut far = lloyd.farthest(*count)?;
            far.iter_mut().for_each(|f| f.row += first_row);
            Reply::Farthest(far)
        }
        Request::Tally => Reply::Tally(Tally {
            sizes: lloyd.sizes()?,
        }),
        Request::Labels => Reply::Labels(lloyd.labels()?),
        Request::Distances => Reply::Distances(lloyd.min_distances()?),
        Request::SeedNearest {
            points,
            first_id,
            fresh,
            weights,
        } => {
            let seeds = Seeds::Points(points);
            Reply::Weights(vec![
                lloyd.seed_nearest(seeds, *first_id, *fresh, *weights)?,
            ])
        }
        Request::SeedLocate {
            accept: a,
            draws,
            weights,
        } => {
            accept(lloyd, a);
            let rows = lloyd.seed_locate(draws, *weights)?;
            let local: Vec<usize> = rows.iter().map(|&r| r as usize).collect();
            Reply::Points {
                points: lloyd.gather(&local)?,
                rows: global(rows),
            }
        }
        Request::SeedTrials {
            accept: a,
            points,
            weights,
        } => {
            accept(lloyd, a);
            let picks = Picks::Seeds(Seeds::Points(points));
            Reply::Weights(lloyd.seed_trials(picks, *weights)?.potentials)
        }
        Request::SeedSample {
            seed,
            round,
            ell,
            phi,
            weights,
        } => Reply::Rows(global(
            lloyd.seed_sample(*seed, *round, *ell, *phi, *weights)?,
        )),
        Request::SeedOwnerCounts { ids } => Reply::Counts(lloyd.seed_owner_weights(*ids)?),
        Request::Columns { .. } | Request::Moments { .. } | Request::Gather { .. } => {
            unreachable!("answered without the fit's state")
        }
        Request::Prepare(_) => unreachable!("answered by Shard::prepare"),
    })
}

fn set_centroids(lloyd: &mut dyn Lloyd, centroids: &[f32], k: usize, d: usize) -> Result<()> {
    expect_len("centroids", centroids.len(), k * d)?;
    MatrixView::new(centroids, k, d)?.validate("the centroids")?;
    lloyd.set_centroids(centroids)
}

fn expect_len(what: &'static str, got: usize, expected: usize) -> Result<()> {
    if got == expected {
        Ok(())
    } else {
        Err(Error::invalid(
            what,
            format!("{got} values given, {expected} expected"),
        ))
    }
}

/// The rows in `len` values of `d` columns.
fn expect_rows(what: &'static str, len: usize, d: usize) -> Result<usize> {
    if len.is_multiple_of(d) {
        Ok(len / d)
    } else {
        Err(Error::invalid(
            what,
            format!("{len} values are not whole rows of {d}"),
        ))
    }
}
