//! The client of a sharded fit: the shards, reached through a [`Transport`], seen as one set of
//! resident rows (the `Lloyd` and `Seeding` traits), so that the very loop of
//! [`KMeansParams::fit`] drives them and combines and finishes their partial results.

use super::protocol::{Prepare, Reply, Request};
use super::{
    Moments, Partial, Tally, merge_farthest, merge_max_abs, scale_exponents, squared_shift,
};
use crate::backend::{
    AcrossGpus, AssignStats, Lloyd, Picks, Readback, Residency, Seeding, Seeds, StepStats, Trials,
};
use crate::error::{Error, Result};
use crate::kmeans::lloyd::{Setup, drive};
use crate::kmeans::prepare::{distance_bound, init_centroids};
use crate::kmeans::shard::Farthest;
use crate::kmeans::weights::Weighting;
use crate::kmeans::{Init, KMeansModel, KMeansParams, Metric, init};
use kernels_gpu::fixed::{inertia_exponent, inv_pow2_f64};
use kernels_gpu::seeding::WeightScale;
use rayon::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;

/// Values a thread copies at a time when the shards' per-row answers are put together.
const COPY_GRAIN: usize = 1 << 20;

/// How a sharded fit's client reaches its shards: each [`Shard`](super::Shard) answers with
/// [`Shard::handle`](super::Shard::handle), wherever it lives (this process, another process,
/// another host). Shards are numbered in the order of their rows: shard `i + 1` holds the rows
/// right after shard `i`'s.
pub trait Transport {
    /// Sends `request` to every shard; returns their replies in shard order.
    fn broadcast(&mut self, request: &Request) -> Result<Vec<Reply>>;
    /// Sends `requests[i]` to shard `i`; returns their replies in shard order.
    fn scatter(&mut self, requests: Vec<Request>) -> Result<Vec<Reply>>;
    /// The [`Reply::Partial`]s of the `shards` shards to `request` (a [`Request::Step`] or
    /// [`Request::Accumulate`]) added up, for `k` clusters of `d` dimensions. By default the
    /// client adds up every shard's reply; a transport whose shards add their sums among
    /// themselves (a GPU set, through NCCL) answers with the total.
    fn partial(&mut self, request: &Request, shards: usize, k: usize, d: usize) -> Result<Partial> {
        add_partials(self.broadcast(request)?, shards, k, d)
    }
}

/// The sum of `shards` replies that are each a [`Reply::Partial`] of `k` clusters of `d`
/// dimensions.
pub(crate) fn add_partials(
    replies: Vec<Reply>,
    shards: usize,
    k: usize,
    d: usize,
) -> Result<Partial> {
    if replies.len() != shards {
        return Err(Error::Shard(format!(
            "{} replies from {shards} shards",
            replies.len()
        )));
    }
    let mut total = Partial::zeros(k, d);
    for (i, reply) in replies.into_iter().enumerate() {
        match reply {
            Reply::Partial(p) if p.sums.len() == k * d && p.weights.len() == k => total.merge(&p),
            _ => return Err(unexpected(i, "Step")),
        }
    }
    Ok(total)
}

/// A transport to shards held in this process (for tests, and as the reference of what a
/// transport does).
impl Transport for Vec<super::Shard> {
    fn broadcast(&mut self, request: &Request) -> Result<Vec<Reply>> {
        self.iter_mut().map(|s| s.handle(request)).collect()
    }

    fn scatter(&mut self, requests: Vec<Request>) -> Result<Vec<Reply>> {
        self.iter_mut()
            .zip(&requests)
            .map(|(s, r)| s.handle(r))
            .collect()
    }
}

/// The seeds a fit with `params` gives its shards as points at once (k-means‖'s candidates).
pub(super) fn seeds_at_once(params: &KMeansParams) -> usize {
    match params.init {
        Init::KMeansParallel => 2 * params.k,
        _ => 0,
    }
}

/// Fits k-means over the shards behind `transport`; see [`KMeansParams::fit_sharded`]. With
/// `weights` (every row's, quantised as a single-process fit does: a fit in this process, whose
/// shards hold the same units), the fit is [`KMeansParams::fit_weighted`]'s.
pub(crate) fn fit(
    params: &KMeansParams,
    transport: &mut dyn Transport,
    weights: Option<&Weighting>,
) -> Result<KMeansModel> {
    let cosine = params.metric == Metric::Cosine;
    let survey = Survey::of(transport, cosine)?;
    let (n, d) = (
        *survey.starts.last().expect("a start") as usize,
        survey.max_abs.len(),
    );
    params.check(n, d)?;
    let uniform;
    let weights = match weights {
        Some(w) if w.rows() == n => w,
        Some(w) => {
            return Err(Error::Shard(format!(
                "{} rows weighted, {n} held by the shards",
                w.rows()
            )));
        }
        None => {
            uniform = Weighting::uniform(n);
            &uniform
        }
    };
    weights.check_k(params.k)?;
    let total = weights.total();
    let (starts, max_abs, devices) = (survey.starts, survey.max_abs, survey.devices);
    let scales = scale_exponents(&max_abs, total as usize);
    let mut moments = Moments::zeros(d);
    let replies = transport.broadcast(&Request::Moments {
        scales: scales.clone(),
    })?;
    for (i, reply) in replies.into_iter().enumerate() {
        match reply {
            Reply::Moments(m) if m.sums.len() == d => moments.merge(&m),
            _ => return Err(unexpected(i, "Moments")),
        }
    }
    if moments.rows != total {
        return Err(Error::Shard(format!(
            "the shards' moments count {} units, the weights {total}",
            moments.rows
        )));
    }
    // What `Prepared::new` derives from the rows (unit rows for cosine) and their units, from
    // the shards' exact summaries.
    let init_centroids = init_centroids(params, d)?;
    let mut reach = max_abs.clone();
    if let Some(c) = &init_centroids {
        for row in c.chunks_exact(d) {
            reach
                .iter_mut()
                .zip(row)
                .for_each(|(m, v)| *m = m.max(v.abs()));
        }
    }
    let inertia_exponent = inertia_exponent(distance_bound(&reach, params.metric), total);
    let tol = params.tol_for(|| moments.mean_variance(&scales));
    let setup = Setup {
        d,
        tol: &|| tol,
        seeding: init::weight_scale(&max_abs, total, params.metric),
        weights,
        init_centroids: init_centroids.as_deref(),
    };
    let prepare = Request::Prepare(Prepare {
        k: params.k,
        metric: params.metric,
        precision: params.precision,
        scales: scales.clone(),
        seeds_at_once: seeds_at_once(params),
        inertia_exponent,
    });
    expect_done(transport.broadcast(&prepare)?)?;
    let mut shards = Sharded {
        transport: RefCell::new(transport),
        starts,
        k: params.k,
        d,
        inv_scales: scales.iter().map(|&s| inv_pow2_f64(s)).collect(),
        // Units are 2^shift per unit of weight; spherical k-means' distances are 2·(1 − cos),
        // its inertia Σ(1 − cos).
        inertia_unit: inv_pow2_f64(inertia_exponent + weights.shift() + i32::from(cosine)),
        spherical: cosine,
        inertia: 0,
        current: vec![0.0; params.k * d],
        next: vec![0.0; params.k * d],
        weights: vec![0; params.k],
        seeding: vec![],
        accept: None,
    };
    let fitted = drive(params, &mut shards, &setup)?;
    let device = format!("{} shards on {}", shards.shards(), devices.join(", "));
    Ok(fitted.into_model(params, Vec::new(), device))
}

/// Where the shards' rows are, their column maxima and their backends.
struct Survey {
    /// The first row of every shard, then the number of rows.
    starts: Vec<u64>,
    max_abs: Vec<f32>,
    devices: Vec<String>,
}

impl Survey {
    /// The shards' answers to `Columns` (of their unit rows with `unit_rows`).
    fn of(transport: &mut dyn Transport, unit_rows: bool) -> Result<Self> {
        let mut survey = Survey {
            starts: vec![0],
            max_abs: vec![],
            devices: vec![],
        };
        for (i, reply) in transport
            .broadcast(&Request::Columns { unit_rows })?
            .into_iter()
            .enumerate()
        {
            let Reply::Columns {
                first_row,
                rows,
                max_abs,
                device,
            } = reply
            else {
                return Err(unexpected(i, "Columns"));
            };
            let end = *survey.starts.last().expect("a start");
            if first_row != end || rows == 0 {
                return Err(Error::Shard(format!(
                    "shard {i} holds rows {first_row}..{}, but rows {end}.. were expected next",
                    first_row + rows
                )));
            }
            if i > 0 && max_abs.len() != survey.max_abs.len() {
                return Err(Error::Shard(format!(
                    "shard {i} has {} columns, shard 0 has {}",
                    max_abs.len(),
                    survey.max_abs.len()
                )));
            }
            survey.max_abs = if i == 0 {
                max_abs
            } else {
                merge_max_abs(survey.max_abs, &max_abs)
            };
            survey.starts.push(end + rows);
            if !survey.devices.contains(&device) {
                survey.devices.push(device);
            }
        }
        if survey.starts.len() == 1 {
            return Err(Error::Shard("no shards".into()));
        }
        Ok(survey)
    }
}

/// The reply of shard `i` to a request was not what that request returns.
fn unexpected(i: usize, request: &str) -> Error {
    Error::Shard(format!(
        "shard {i} sent a reply that does not answer {request}"
    ))
}

fn expect_done(replies: Vec<Reply>) -> Result<()> {
    match replies.into_iter().position(|r| r != Reply::Done) {
        Some(i) => Err(unexpected(i, "a request that returns nothing")),
        None => Ok(()),
    }
}

/// The shards as one set of resident rows.
struct Sharded<'t> {
    transport: RefCell<&'t mut dyn Transport>,
    /// The first row of every shard, then the number of rows.
    starts: Vec<u64>,
    k: usize,
    d: usize,
    inv_scales: Vec<f64>,
    /// The value of one unit of the fixed-point inertia.
    inertia_unit: f64,
    /// Spherical k-means: every centroid with weight is scaled to unit length.
    spherical: bool,
    /// The fixed-point inertia of the last assignment.
    inertia: i64,
    current: Vec<f32>,
    next: Vec<f32>,
    /// Cluster weights of the last update.
    weights: Vec<u64>,
    /// Every shard's seeding weight (`[shard][0]` after a nearest pass, `[shard][trial]` after
    /// a trials pass).
    seeding: Vec<Vec<u64>>,
    /// The accepted trial, until it is sent.
    accept: Option<usize>,
}

impl Sharded<'_> {
    fn shards(&self) -> usize {
        self.starts.len() - 1
    }

    /// An assignment's stats from its changed rows and fixed-point inertia, as a backend
    /// reports them.
    fn stats(&self, changed: u64, inertia: i64) -> AssignStats {
        AssignStats {
            changed,
            inertia: inertia as f64 * self.inertia_unit,
        }
    }

    fn broadcast(&self, request: &Request) -> Result<Vec<Reply>> {
        let replies = self.transport.borrow_mut().broadcast(request)?;
        self.expect_count(replies)
    }

    fn scatter(&self, requests: Vec<Request>) -> Result<Vec<Reply>> {
        let replies = self.transport.borrow_mut().scatter(requests)?;
        self.expect_count(replies)
    }

    /// Every shard's reply to `request`, one vector each, concatenated in row order.
    fn concat<T: Copy + Default + Send + Sync>(
        &self,
        request: Request,
        take: impl Fn(Reply) -> Option<Vec<T>>,
    ) -> Result<Vec<T>> {
        let mut parts = (self.broadcast(&request)?.into_iter().enumerate())
            .map(|(i, reply)| take(reply).ok_or_else(|| unexpected(i, "a request for every row")))
            .collect::<Result<Vec<_>>>()?;
        if parts.len() == 1 {
            return Ok(parts.pop().expect("one part"));
        }
        // A value for every row of a large data set: copied into zeroed pages on the rayon
        // threads, a piece each.
        let mut all = vec![T::default(); parts.iter().map(Vec::len).sum()];
        let mut pieces = Vec::new();
        let mut rest = &mut all[..];
        for part in &parts {
            let (to, tail) = rest.split_at_mut(part.len());
            pieces.extend(to.chunks_mut(COPY_GRAIN).zip(part.chunks(COPY_GRAIN)));
            rest = tail;
        }
        pieces
            .into_par_iter()
            .for_each(|(to, from)| to.copy_from_slice(from));
        Ok(all)
    }

    fn expect_count(&self, replies: Vec<Reply>) -> Result<Vec<Reply>> {
        if replies.len() == self.shards() {
            Ok(replies)
        } else {
            Err(Error::Shard(format!(
                "{} replies from {} shards",
                replies.len(),
                self.shards()
            )))
        }
    }

    /// The merged partial of a step (with `assign`) or of an update.
    fn partial(&self, assign: bool) -> Result<Partial> {
        let request = if assign {
            Request::Step {
                centroids: self.current.clone(),
            }
        } else {
            Request::Accumulate
        };
        (self.transport.borrow_mut()).partial(&request, self.shards(), self.k, self.d)
    }

    /// Finishes a merged partial into the next centroids; returns the empty clusters.
    fn finish(&mut self, partial: &Partial) -> usize {
        let empty = partial.finish(
            &self.current,
            &self.inv_scales,
            self.spherical,
            &mut self.next,
        );
        self.weights.clone_from(&partial.weights);
        empty
    }

    /// The values of rows `rows` (in that order, repeats allowed).
    fn gather_rows(&self, rows: &[u64]) -> Result<Vec<f32>> {
        let d = self.d;
        let replies = self.broadcast(&Request::Gather {
            rows: rows.to_vec(),
        })?;
        let mut found = HashMap::new();
        for (i, reply) in replies.into_iter().enumerate() {
            let Reply::Points { rows, points } = reply else {
                return Err(unexpected(i, "Gather"));
            };
            for (r, p) in rows.into_iter().zip(points.chunks_exact(d)) {
                found.insert(r, p.to_vec());
            }
        }
        rows.iter()
            .map(|r| {
                found
                    .get(r)
                    .cloned()
                    .ok_or_else(|| Error::Shard(format!("no shard holds row {r}")))
            })
            .collect::<Result<Vec<_>>>()
            .map(|p| p.concat())
    }

    /// Where each of `draws` falls among the shards' weights of the accepted trial: the rows
    /// and their values, in draw order.
    fn locate(&mut self, draws: &[u64], ws: WeightScale) -> Result<(Vec<u64>, Vec<f32>)> {
        let accept = self.accept.take();
        let trial = accept.unwrap_or(0);
        let shards = self.shards();
        let mut mine: Vec<Vec<(usize, u64)>> = vec![vec![]; shards];
        for (j, &r) in draws.iter().enumerate() {
            let mut rest = r;
            let mut s = 0;
            while s + 1 < shards && rest >= self.seeding[s][trial] {
                rest -= self.seeding[s][trial];
                s += 1;
            }
            mine[s].push((j, rest));
        }
        let requests = mine
            .iter()
            .map(|m| Request::SeedLocate {
                accept,
                draws: m.iter().map(|&(_, r)| r).collect(),
                weights: ws,
            })
            .collect();
        let (mut rows, mut points) = (vec![0u64; draws.len()], vec![0f32; draws.len() * self.d]);
        for (s, reply) in self.scatter(requests)?.into_iter().enumerate() {
            match reply {
                Reply::Points { rows: r, points: p } if r.len() == mine[s].len() => {
                    for (t, &(j, _)) in mine[s].iter().enumerate() {
                        rows[j] = r[t];
                        points[j * self.d..(j + 1) * self.d]
                            .copy_from_slice(&p[t * self.d..(t + 1) * self.d]);
                    }
                }
                _ => return Err(unexpected(s, "SeedLocate")),
            }
        }
        Ok((rows, points))
    }

    /// The shards' potentials of trial points `points`, with the accepted trial applied first.
    fn trials(&mut self, points: Vec<f32>, ws: WeightScale) -> Result<Vec<u64>> {
        let request = Request::SeedTrials {
            accept: self.accept.take(),
            points,
            weights: ws,
        };
        self.seeding = self.weights_of(&request)?;
        let trials = self.seeding.first().map_or(0, Vec::len);
        Ok((0..trials)
            .map(|t| self.seeding.iter().map(|w| w[t]).sum())
            .collect())
    }

    /// Every shard's weights in its reply to `request`.
    fn weights_of(&self, request: &Request) -> Result<Vec<Vec<u64>>> {
        let replies = self.broadcast(request)?;
        let mut weights = Vec::with_capacity(replies.len());
        for (i, reply) in replies.into_iter().enumerate() {
            match reply {
                Reply::Weights(w)
                    if weights
                        .first()
                        .is_none_or(|f: &Vec<u64>| f.len() == w.len()) =>
                {
                    weights.push(w)
                }
                _ => return Err(unexpected(i, "a seeding pass")),
            }
        }
        Ok(weights)
    }
}

fn rows_u32(rows: Vec<u64>) -> Vec<u32> {
    rows.into_iter().map(|r| r as u32).collect()
}

impl Seeding for Sharded<'_> {
    fn seed_nearest(
        &mut self,
        seeds: Seeds<'_>,
        first_id: u32,
        fresh: bool,
        ws: WeightScale,
    ) -> Result<u64> {
        let points = match seeds {
            Seeds::Rows(rows) => {
                self.gather_rows(&rows.iter().map(|&r| u64::from(r)).collect::<Vec<_>>())?
            }
            Seeds::Points(p) => p.to_vec(),
        };
        self.accept = None;
        let request = Request::SeedNearest {
            points,
            first_id,
            fresh,
            weights: ws,
        };
        self.seeding = self.weights_of(&request)?;
        Ok(self.seeding.iter().flatten().sum())
    }

    fn seed_trials(&mut self, picks: Picks<'_>, ws: WeightScale) -> Result<Trials> {
        let (candidates, points) = match picks {
            Picks::Draws(draws) => {
                let (rows, points) = self.locate(draws, ws)?;
                (rows_u32(rows), points)
            }
            Picks::Seeds(Seeds::Rows(rows)) => {
                let global: Vec<u64> = rows.iter().map(|&r| u64::from(r)).collect();
                (rows.to_vec(), self.gather_rows(&global)?)
            }
            Picks::Seeds(Seeds::Points(p)) => (vec![], p.to_vec()),
        };
        let potentials = self.trials(points, ws)?;
        Ok(Trials {
            candidates,
            potentials,
        })
    }

    fn seed_locate(&mut self, draws: &[u64], ws: WeightScale) -> Result<Vec<u32>> {
        let accept = self.accept;
        let (rows, _) = self.locate(draws, ws)?;
        self.accept = accept;
        Ok(rows_u32(rows))
    }

    fn seed_accept(&mut self, trial: usize) {
        self.accept = Some(trial);
    }

    fn seed_sample(
        &mut self,
        seed: u64,
        round: u32,
        ell: u64,
        phi: u64,
        ws: WeightScale,
    ) -> Result<Vec<u32>> {
        let request = Request::SeedSample {
            seed,
            round,
            ell,
            phi,
            weights: ws,
        };
        let mut sampled = Vec::new();
        for (i, reply) in self.broadcast(&request)?.into_iter().enumerate() {
            let Reply::Rows(rows) = reply else {
                return Err(unexpected(i, "SeedSample"));
            };
            sampled.extend(rows_u32(rows));
        }
        Ok(sampled)
    }

    fn seed_owner_weights(&mut self, ids: usize) -> Result<Vec<u64>> {
        let mut counts = vec![0u64; ids];
        for (i, reply) in self
            .broadcast(&Request::SeedOwnerCounts { ids })?
            .into_iter()
            .enumerate()
        {
            match reply {
                Reply::Counts(c) if c.len() == ids => {
                    counts.iter_mut().zip(&c).for_each(|(a, b)| *a += b)
                }
                _ => return Err(unexpected(i, "SeedOwnerCounts")),
            }
        }
        Ok(counts)
    }
}

impl Lloyd for Sharded<'_> {
    fn set_centroids(&mut self, centroids: &[f32]) -> Result<()> {
        self.current.copy_from_slice(centroids);
        Ok(())
    }

    fn set_labels(&mut self, labels: &[u32]) -> Result<()> {
        let requests = self
            .starts
            .windows(2)
            .map(|w| Request::SetLabels {
                labels: labels[w[0] as usize..w[1] as usize].to_vec(),
            })
            .collect();
        expect_done(self.scatter(requests)?)
    }

    fn assign(&mut self) -> Result<AssignStats> {
        let request = Request::Assign {
            centroids: self.current.clone(),
        };
        let (mut total_changed, mut total_inertia) = (0u64, 0i64);
        for (i, reply) in self.broadcast(&request)?.into_iter().enumerate() {
            let Reply::Assigned { changed, inertia } = reply else {
                return Err(unexpected(i, "Assign"));
            };
            total_changed += changed;
            total_inertia = total_inertia.wrapping_add(inertia);
        }
        self.inertia = total_inertia;
        Ok(self.stats(total_changed, total_inertia))
    }

    fn step(&mut self) -> Result<StepStats> {
        let partial = self.partial(true)?;
        self.inertia = partial.inertia;
        let empty = self.finish(&partial);
        Ok(StepStats {
            assign: self.stats(partial.changed, partial.inertia),
            empty,
            shift: squared_shift(&self.next, &self.current),
        })
    }

    fn update(&mut self) -> Result<usize> {
        let partial = self.partial(false)?;
        Ok(self.finish(&partial))
    }

    fn relocate(&mut self, cluster: usize, point: usize) -> Result<()> {
        let d = self.d;
        let values = self.gather_rows(&[point as u64])?;
        self.next[cluster * d..(cluster + 1) * d].copy_from_slice(&values);
        Ok(())
    }

    fn copy_next_row(&mut self, from: usize, to: usize) -> Result<()> {
        let d = self.d;
        self.next.copy_within(from * d..(from + 1) * d, to * d);
        Ok(())
    }

    fn shift(&mut self) -> Result<f64> {
        Ok(squared_shift(&self.next, &self.current))
    }

    fn exact_shift(&mut self) -> Result<f64> {
        self.shift()
    }

    fn commit(&mut self) {
        std::mem::swap(&mut self.current, &mut self.next);
    }

    fn accumulate(&mut self, assign: bool) -> Result<Partial> {
        self.partial(assign)
    }
}

impl Readback for Sharded<'_> {
    fn min_distances(&self) -> Result<Vec<f32>> {
        self.concat(Request::Distances, |r| match r {
            Reply::Distances(d) => Some(d),
            _ => None,
        })
    }

    fn farthest(&self, count: usize) -> Result<Vec<Farthest>> {
        let lists = (self
            .broadcast(&Request::Farthest { count })?
            .into_iter()
            .enumerate())
        .map(|(i, reply)| match reply {
            Reply::Farthest(f) => Ok(f),
            _ => Err(unexpected(i, "Farthest")),
        })
        .collect::<Result<Vec<_>>>()?;
        Ok(merge_farthest(lists, count))
    }

    fn fixed_inertia(&self) -> Result<i64> {
        Ok(self.inertia)
    }

    fn sizes(&self) -> Result<Vec<u32>> {
        let mut total = Tally {
            sizes: vec![0; self.k],
        };
        for (i, reply) in self.broadcast(&Request::Tally)?.into_iter().enumerate() {
            match reply {
                Reply::Tally(t) if t.sizes.len() == self.k => total.merge(&t),
                _ => return Err(unexpected(i, "Tally")),
            }
        }
        Ok(total.sizes)
    }

    fn cluster_weights(&self) -> Result<Vec<u64>> {
        Ok(self.weights.clone())
    }

    fn centroids(&self) -> Result<Vec<f32>> {
        Ok(self.current.clone())
    }

    fn labels(&self) -> Result<Vec<u32>> {
        self.concat(Request::Labels, |r| match r {
            Reply::Labels(l) => Some(l),
            _ => None,
        })
    }

    fn gather(&self, rows: &[usize]) -> Result<Vec<f32>> {
        self.gather_rows(&rows.iter().map(|&r| r as u64).collect::<Vec<_>>())
    }

    fn k(&self) -> usize {
        self.k
    }
}

/// The rows lie in host memory, and the sums are added on the host.
impl Residency for Sharded<'_> {}

impl AcrossGpus for Sharded<'_> {}
