//! The seeding kernels run whole in the emulator (warp sums by shuffles included) against a
//! plain twin of what each computes: the seeding distance of `row_distance`, the integer weights
//! of `WeightScale`, and a linear search of the cumulative weights for every draw.

use super::tests::values;
use super::*;
use crate::exec::emu::launch;
use crate::math::sq_norm;
use crate::seeding::row_distance;

const L2: u32 = AssignMetric::SqL2 as u32;
const L1: u32 = AssignMetric::L1 as u32;

/// How a point's units are given.
#[derive(Clone, Copy, Debug)]
enum Units {
    One,
    /// Sample weights, some of them 0 (points that weigh nothing).
    Weights,
    /// k-means‖ candidate counts.
    Counts,
}

/// A data set, every point's current seeding distance (to row 0) and nearest seed.
struct Fixture {
    metric: AssignMetric,
    n: usize,
    d: usize,
    x: Vec<f32>,
    norms: Vec<f32>,
    weights: Vec<f32>,
    counts: Vec<u64>,
    min_dist: Vec<f32>,
    owner: Vec<u32>,
    ws: WeightScale,
}

impl Fixture {
    /// `levels` > 0: integer coordinates below it (duplicate rows, equal distances, zeros).
    fn new(metric: AssignMetric, n: usize, d: usize, levels: u32, units: Units) -> Self {
        let x = values(n * d, levels, (3 * n + d) as u32);
        let norms: Vec<f32> = x.chunks(d).map(sq_norm).collect();
        let (weights, counts) = match units {
            Units::One => (vec![], vec![]),
            Units::Weights => (
                (0..n)
                    .map(|i| [0.0, 1.0, 2.5, 7.0][i * 7 % 13 % 4])
                    .collect(),
                vec![],
            ),
            Units::Counts => (vec![], (0..n as u64).map(|i| 1 + i * 5 % 9).collect()),
        };
        let mut f = Fixture {
            metric,
            n,
            d,
            x,
            norms,
            weights,
            counts,
            min_dist: vec![],
            owner: vec![0; n],
            ws: WeightScale { scale: 1.0, cap: 0 },
        };
        f.min_dist = (0..n).map(|i| f.dist(i, 0)).collect();
        let bound = f.min_dist.iter().fold(0f64, |b, &m| b.max(m as f64));
        let bound = if metric == AssignMetric::L1 {
            bound * bound
        } else {
            bound
        };
        f.ws = WeightScale::new(bound, n);
        f
    }

    fn row(&self, i: usize) -> &[f32] {
        &self.x[i * self.d..(i + 1) * self.d]
    }

    fn dist(&self, i: usize, r: u32) -> f32 {
        let r = r as usize;
        row_distance(
            self.metric,
            self.row(i),
            self.row(r),
            self.norms[i],
            self.norms[r],
        )
    }

    fn units(&self, i: usize) -> u64 {
        if !self.counts.is_empty() {
            self.counts[i]
        } else {
            unsafe { units_at(self.weights_ptr().as_ptr(), i) as u64 }
        }
    }

    fn weight(&self, i: usize, m: f32) -> u64 {
        self.ws.weight_of(self.metric, m, self.units(i))
    }

    /// `min_dist` lowered to the distance to `pending`, as every kernel applies it.
    fn with_pending(&self, pending: Option<u32>) -> Vec<f32> {
        (0..self.n)
            .map(|i| match pending {
                Some(p) if self.dist(i, p) < self.min_dist[i] => self.dist(i, p),
                _ => self.min_dist[i],
            })
            .collect()
    }

    /// Every point's weight at seeding distances `mins`.
    fn weights_at(&self, mins: &[f32]) -> Vec<u64> {
        (0..self.n).map(|i| self.weight(i, mins[i])).collect()
    }

    fn ptr<T>(v: &[T]) -> DevPtr<T> {
        if v.is_empty() {
            DevPtr::NULL
        } else {
            DevPtr::from_ptr(v.as_ptr())
        }
    }
    fn weights_ptr(&self) -> DevPtr<f32> {
        Self::ptr(&self.weights)
    }
    fn counts_ptr(&self) -> DevPtr<u64> {
        Self::ptr(&self.counts)
    }
}

/// The sums of `weights` over blocks of `BLOCK` points.
fn block_sums_of(weights: &[u64]) -> Vec<u64> {
    weights
        .chunks(BLOCK as usize)
        .map(|c| c.iter().sum())
        .collect()
}

/// The first point whose cumulative weight exceeds `r`.
fn first_exceeding(weights: &[u64], r: u64) -> u32 {
    let mut through = 0;
    for (i, &w) in weights.iter().enumerate() {
        through += w;
        if through > r {
            return i as u32;
        }
    }
    panic!("draw {r} past the total {through}");
}

/// Draws that test every edge: 0, the last, each block boundary and its neighbours, and a few
/// spread over the total.
fn edge_draws(weights: &[u64]) -> Vec<u64> {
    let total: u64 = weights.iter().sum();
    let mut draws = vec![0, total - 1, total / 2, total / 3 + 1];
    // Every boundary of a few blocks, every eighth block's of many (each draw is a launch).
    let sums = block_sums_of(weights);
    let every = sums.len().div_ceil(8);
    let mut through = 0;
    for (b, s) in sums.iter().enumerate() {
        through += s;
        if b % every == 0 {
            draws.extend([through.saturating_sub(1), through, through + 1]);
        }
    }
    draws.retain(|&r| r < total);
    draws
}

fn check_trials(f: &Fixture, candidates: &[u32], pending: Option<u32>, stop: bool) {
    let (n, grid, trials) = (f.n, point_blocks(f.n), candidates.len());
    let mut min_dist = f.min_dist.clone();
    let mut block_sums = vec![u64::MAX; trials * grid];
    let mut potentials = vec![0u64; trials];
    let pending_word = [pending.unwrap_or(NO_ROW)];
    let stop_word = [u32::from(stop)];
    let params = TrialsParams {
        x: DevPtr::from_ptr(f.x.as_ptr()),
        norms: DevPtr::from_ptr(f.norms.as_ptr()),
        n: n as u32,
        d: f.d as u32,
        weights: f.weights_ptr(),
        counts: f.counts_ptr(),
        min_dist: DevPtr::from_ptr(min_dist.as_mut_ptr()),
        candidates: DevPtr::from_ptr(candidates.as_ptr()),
        count: trials as u32,
        pending: if pending.is_some() {
            DevPtr::from_ptr(pending_word.as_ptr())
        } else {
            DevPtr::NULL
        },
        stop: DevPtr::from_ptr(stop_word.as_ptr()),
        scale: f.ws.scale,
        cap: f.ws.cap,
        block_sums: DevPtr::from_ptr(block_sums.as_mut_ptr()),
        potentials: DevPtr::from_ptr(potentials.as_mut_ptr()),
    };
    launch(grid, BLOCK as usize, seed_shared_bytes(f.d), |e| unsafe {
        match f.metric {
            AssignMetric::SqL2 => trials_kernel::<L2, _>(e, &params),
            AssignMetric::L1 => trials_kernel::<L1, _>(e, &params),
        }
    });
    let what = format!(
        "{:?} n={n} d={} trials={trials} pending={pending:?}",
        f.metric, f.d
    );
    if stop {
        assert_eq!(min_dist, f.min_dist, "{what}: stopped");
        assert!(block_sums.iter().all(|&s| s == u64::MAX), "{what}: stopped");
        assert_eq!(potentials, vec![0; trials], "{what}: stopped");
        return;
    }
    let mins = f.with_pending(pending);
    let got: Vec<u32> = min_dist.iter().map(|m| m.to_bits()).collect();
    let want: Vec<u32> = mins.iter().map(|m| m.to_bits()).collect();
    assert_eq!(got, want, "{what}: min_dist");
    for (t, &c) in candidates.iter().enumerate() {
        let tried: Vec<f32> = (0..n).map(|i| f.dist(i, c).min(mins[i])).collect();
        let sums = block_sums_of(&f.weights_at(&tried));
        assert_eq!(
            block_sums[t * grid..(t + 1) * grid],
            sums,
            "{what}: block sums of trial {t}"
        );
        assert_eq!(
            potentials[t],
            sums.iter().sum::<u64>(),
            "{what}: potential of trial {t}"
        );
    }
}

#[test]
fn emulated_trials_match_the_twin() {
    for metric in [AssignMetric::SqL2, AssignMetric::L1] {
        let f = Fixture::new(metric, 300, 5, 0, Units::One);
        check_trials(&f, &[7, 299, 7, 0], Some(150), false);
        check_trials(&f, &[7, 299], None, false);
        check_trials(&f, &[7, 299], Some(150), true);
        // d = 1, one trial, duplicate rows (ties, zero distances), weights with zeros.
        let f = Fixture::new(metric, 257, 1, 3, Units::Weights);
        check_trials(&f, &[1], Some(2), false);
        // Two dimension tiles, candidate counts, a full candidate tile with the pending row.
        let f = Fixture::new(metric, 90, 40, 2, Units::Counts);
        let all: Vec<u32> = (0..SEED_CANDIDATES as u32 - 1)
            .map(|c| c * 7 % 90)
            .collect();
        check_trials(&f, &all, Some(89), false);
    }
}

fn check_nearest(f: &Fixture, rows: &[u32], first_id: u32, fresh: bool) {
    let (n, grid) = (f.n, point_blocks(f.n));
    let (mut min_dist, mut owner) = (f.min_dist.clone(), f.owner.clone());
    let mut block_sums = vec![u64::MAX; grid];
    let mut total = [0u64];
    let params = NearestParams {
        x: DevPtr::from_ptr(f.x.as_ptr()),
        norms: DevPtr::from_ptr(f.norms.as_ptr()),
        n: n as u32,
        d: f.d as u32,
        weights: f.weights_ptr(),
        counts: f.counts_ptr(),
        min_dist: DevPtr::from_ptr(min_dist.as_mut_ptr()),
        owner: DevPtr::from_ptr(owner.as_mut_ptr()),
        rows: DevPtr::from_ptr(rows.as_ptr()),
        count: rows.len() as u32,
        first_id,
        fresh: u32::from(fresh),
        scale: f.ws.scale,
        cap: f.ws.cap,
        block_sums: DevPtr::from_ptr(block_sums.as_mut_ptr()),
        total: DevPtr::from_ptr(total.as_mut_ptr()),
    };
    launch(grid, BLOCK as usize, NEAREST_SHARED_BYTES, |e| unsafe {
        match f.metric {
            AssignMetric::SqL2 => nearest_kernel::<L2, _>(e, &params),
            AssignMetric::L1 => nearest_kernel::<L1, _>(e, &params),
        }
    });
    let what = format!(
        "{:?} n={n} d={} rows={} fresh={fresh}",
        f.metric,
        f.d,
        rows.len()
    );
    let mut mins = vec![];
    for i in 0..n {
        let (mut m, mut o) = if fresh {
            (f32::INFINITY, first_id)
        } else {
            (f.min_dist[i], f.owner[i])
        };
        for (c, &r) in rows.iter().enumerate() {
            if f.dist(i, r) < m {
                (m, o) = (f.dist(i, r), first_id + c as u32);
            }
        }
        assert_eq!(
            (min_dist[i].to_bits(), owner[i]),
            (m.to_bits(), o),
            "{what}: point {i}"
        );
        mins.push(m);
    }
    let sums = block_sums_of(&f.weights_at(&mins));
    assert_eq!(block_sums, sums, "{what}: block sums");
    assert_eq!(total[0], sums.iter().sum::<u64>(), "{what}: total");
}

#[test]
fn emulated_nearest_pass_sums_match_the_twin() {
    for metric in [AssignMetric::SqL2, AssignMetric::L1] {
        let f = Fixture::new(metric, 300, 7, 0, Units::Counts);
        let rows: Vec<u32> = (0..70).map(|c| c * 13 % 300).collect();
        check_nearest(&f, &rows, 5, true);
        check_nearest(&f, &rows[..3], 100, false);
        let f = Fixture::new(metric, 129, 1, 4, Units::Weights);
        check_nearest(&f, &[3], 1, false);
    }
}

fn check_locate(f: &Fixture, pending: Option<u32>) {
    let weights = f.weights_at(&f.with_pending(pending));
    let sums = block_sums_of(&weights);
    let draws = edge_draws(&weights);
    let mut out = vec![u32::MAX; draws.len()];
    let params = LocateParams {
        x: DevPtr::from_ptr(f.x.as_ptr()),
        norms: DevPtr::from_ptr(f.norms.as_ptr()),
        n: f.n as u32,
        d: f.d as u32,
        weights: f.weights_ptr(),
        counts: f.counts_ptr(),
        min_dist: DevPtr::from_ptr(f.min_dist.as_ptr()),
        pending: pending.unwrap_or(NO_ROW),
        sums: DevPtr::from_ptr(sums.as_ptr()),
        nb: sums.len() as u32,
        draws: DevPtr::from_ptr(draws.as_ptr()),
        scale: f.ws.scale,
        cap: f.ws.cap,
        out: DevPtr::from_ptr(out.as_mut_ptr()),
    };
    launch(
        draws.len(),
        BLOCK as usize,
        seed_shared_bytes(f.d),
        |e| unsafe {
            match f.metric {
                AssignMetric::SqL2 => locate_kernel::<L2, _>(e, &params),
                AssignMetric::L1 => locate_kernel::<L1, _>(e, &params),
            }
        },
    );
    for (&r, &got) in draws.iter().zip(&out) {
        assert_eq!(
            got,
            first_exceeding(&weights, r),
            "{:?} n={} d={} pending={pending:?} draw {r}",
            f.metric,
            f.n,
            f.d
        );
    }
}

#[test]
fn emulated_locate_finds_the_first_point_past_each_draw() {
    for metric in [AssignMetric::SqL2, AssignMetric::L1] {
        let f = Fixture::new(metric, 300, 40, 0, Units::One);
        check_locate(&f, Some(17));
        check_locate(&f, None);
        let f = Fixture::new(metric, 700, 3, 3, Units::Weights);
        check_locate(&f, Some(699));
    }
    // More blocks than threads: the block is found in two rounds of narrowing.
    let f = Fixture::new(
        AssignMetric::SqL2,
        BLOCK as usize * 260 + 17,
        1,
        0,
        Units::Weights,
    );
    check_locate(&f, Some(5));
}

/// A trial's potential: the total weight with row `c` added as a seed.
fn potential(f: &Fixture, c: u32) -> u64 {
    let tried: Vec<f32> = (0..f.n).map(|i| f.dist(i, c).min(f.min_dist[i])).collect();
    f.weights_at(&tried).iter().sum()
}

/// One step of the device-side k-means++ loop against the host's step: the winner of the last
/// trials `rows` (the earliest of equal potentials, which are the trials' real ones unless
/// `forced`), its potential as the total, and each trial's draw located with the winner
/// applied.
fn check_greedy(f: &Fixture, step: u32, k: u32, rows: &[u32], forced: Option<u64>) {
    let trials = rows.len().max(3);
    let grid = point_blocks(f.n);
    let last_potentials: Vec<u64> = rows
        .iter()
        .map(|&c| forced.unwrap_or_else(|| potential(f, c)))
        .collect();
    // Every trial's block sums in its row (step 1: the nearest pass's, in row 0).
    let mut block_sums = vec![0u64; trials * grid];
    let first_weights = f.weights_at(&f.min_dist);
    block_sums[..grid].copy_from_slice(&block_sums_of(&first_weights));
    for (t, &c) in rows.iter().enumerate() {
        let sums = block_sums_of(&f.weights_at(&f.with_pending(Some(c))));
        block_sums[t * grid..(t + 1) * grid].copy_from_slice(&sums);
    }
    let winner = (step > 1).then(|| {
        let p = &last_potentials;
        (0..rows.len()).fold(0, |b, c| if p[c] < p[b] { c } else { b })
    });
    let uniforms: Vec<u64> = (0..k as u64 * trials as u64)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i << 60))
        .collect();
    let mut chosen = vec![u32::MAX; k as usize];
    let mut next_candidates = vec![u32::MAX; trials];
    let mut next_potentials = vec![7u64; trials];
    let mut stop = [0u32];
    let first_total = first_weights.iter().sum();
    let params = GreedyDrawParams {
        x: DevPtr::from_ptr(f.x.as_ptr()),
        norms: DevPtr::from_ptr(f.norms.as_ptr()),
        n: f.n as u32,
        d: f.d as u32,
        weights: f.weights_ptr(),
        counts: f.counts_ptr(),
        min_dist: DevPtr::from_ptr(f.min_dist.as_ptr()),
        block_sums: DevPtr::from_ptr(block_sums.as_ptr()),
        nb: grid as u32,
        trials: trials as u32,
        step,
        k,
        first_total,
        chosen: DevPtr::from_ptr(chosen.as_mut_ptr()),
        uniforms: DevPtr::from_ptr(uniforms.as_ptr()),
        last_candidates: Fixture::ptr(rows),
        last_potentials: Fixture::ptr(&last_potentials),
        next_candidates: DevPtr::from_ptr(next_candidates.as_mut_ptr()),
        next_potentials: DevPtr::from_ptr(next_potentials.as_mut_ptr()),
        stop: DevPtr::from_ptr(stop.as_mut_ptr()),
        scale: f.ws.scale,
        cap: f.ws.cap,
    };
    launch(trials, BLOCK as usize, seed_shared_bytes(f.d), |e| unsafe {
        match f.metric {
            AssignMetric::SqL2 => greedy_draw_kernel::<L2, _>(e, &params),
            AssignMetric::L1 => greedy_draw_kernel::<L1, _>(e, &params),
        }
    });
    let what = format!("{:?} n={} step {step} of {k}", f.metric, f.n);
    let mut want_chosen = vec![u32::MAX; k as usize];
    if let Some(w) = winner {
        want_chosen[step as usize - 1] = rows[w];
    }
    assert_eq!(chosen, want_chosen, "{what}: chosen");
    let total = winner.map_or(first_total, |w| last_potentials[w]);
    if step >= k || total == 0 {
        assert_eq!(next_candidates, vec![u32::MAX; trials], "{what}: no draws");
        let stopped = if step < k { step } else { 0 };
        assert_eq!(stop[0], stopped, "{what}: stop");
        return;
    }
    assert_eq!(stop[0], 0, "{what}: stop");
    assert_eq!(
        next_potentials,
        vec![0; trials],
        "{what}: next potentials zeroed"
    );
    let weights = f.weights_at(&f.with_pending(winner.map(|w| rows[w])));
    for (b, &got) in next_candidates.iter().enumerate() {
        let u = uniforms[(step as usize - 1) * trials + b];
        let want = first_exceeding(&weights, draw(u, total));
        assert_eq!(got, want, "{what}: trial {b}");
    }
}

#[test]
fn emulated_greedy_steps_match_the_host_step() {
    for metric in [AssignMetric::SqL2, AssignMetric::L1] {
        // Integer coordinates: duplicate rows, so two trials can tie.
        let f = Fixture::new(metric, 300, 3, 3, Units::Weights);
        check_greedy(&f, 1, 4, &[], None);
        // The lowest potential that two different rows share, tried after a worse row: the
        // earlier of the two wins.
        let by_potential = {
            let mut rows: Vec<(u64, u32)> =
                (1..f.n as u32).map(|c| (potential(&f, c), c)).collect();
            rows.sort_unstable();
            rows
        };
        let tie = by_potential
            .windows(2)
            .find(|w| w[0].0 == w[1].0 && f.row(w[0].1 as usize) == f.row(w[1].1 as usize))
            .expect("a duplicate row");
        let worst = by_potential.last().unwrap().1;
        let rows = [worst, tie[1].1, tie[0].1, worst];
        check_greedy(&f, 2, 4, &rows, None);
        check_greedy(&f, 3, 5, &[by_potential[0].1, worst, tie[0].1], None);
        // The last step records the winner only; a zero total stops the loop.
        check_greedy(&f, 4, 4, &rows, None);
        check_greedy(&f, 3, 5, &[9, 10, 11], Some(0));
    }
}

#[test]
fn emulated_sampling_and_owner_weights_match_the_twin() {
    for (metric, units) in [
        (AssignMetric::SqL2, Units::Weights),
        (AssignMetric::L1, Units::Counts),
        (AssignMetric::SqL2, Units::One),
    ] {
        let f = Fixture::new(metric, 600, 4, 0, units);
        let weights = f.weights_at(&f.min_dist);
        let phi: u64 = weights.iter().sum();
        let (seed, round, first_row, ell) = (0xfeed, 3, 1000, 40);
        let mut out = vec![u32::MAX; f.n];
        let mut count = [0u32];
        let params = SampleParams {
            weights: f.weights_ptr(),
            counts: f.counts_ptr(),
            min_dist: DevPtr::from_ptr(f.min_dist.as_ptr()),
            n: f.n as u32,
            seed,
            round,
            first_row,
            ell,
            phi,
            scale: f.ws.scale,
            cap: f.ws.cap,
            out: DevPtr::from_ptr(out.as_mut_ptr()),
            count: DevPtr::from_ptr(count.as_mut_ptr()),
        };
        launch(point_blocks(f.n), BLOCK as usize, 0, |e| unsafe {
            match f.metric {
                AssignMetric::SqL2 => sample_kernel::<L2, _>(e, &params),
                AssignMetric::L1 => sample_kernel::<L1, _>(e, &params),
            }
        });
        let mut got = out[..count[0] as usize].to_vec();
        got.sort_unstable();
        let want: Vec<u32> = (0..f.n as u32)
            .filter(|&i| {
                let u = uniform32(seed, round, first_row + i);
                sampled(u, weights[i as usize], ell, phi)
            })
            .collect();
        assert!(
            !want.is_empty() && want.len() < f.n,
            "{metric:?} {units:?}: a real sample"
        );
        assert_eq!(got, want, "{metric:?} {units:?}: sampled rows");

        let owner: Vec<u32> = (0..f.n as u32).map(|i| i * i % 11).collect();
        let mut totals = vec![0u64; 12];
        let params = OwnerWeightsParams {
            owner: DevPtr::from_ptr(owner.as_ptr()),
            n: f.n as u32,
            weights: f.weights_ptr(),
            counts: f.counts_ptr(),
            totals: DevPtr::from_ptr(totals.as_mut_ptr()),
        };
        launch(point_blocks(f.n), BLOCK as usize, 0, |e| unsafe {
            owner_weights_kernel(e, &params)
        });
        let mut want = vec![0u64; 12];
        for (i, &o) in owner.iter().enumerate() {
            want[o as usize] += f.units(i);
        }
        assert_eq!(totals, want, "{units:?}: owner weights");
    }
}
