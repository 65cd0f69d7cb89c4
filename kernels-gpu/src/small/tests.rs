use super::*;
use crate::exec::emu::{P, launch};
use crate::fixed::{
    inertia_exponent, inertia_term, inv_pow2_f64, mean, pow2_f32, scale_exponent, to_fixed,
    weight_units,
};
use crate::math::{assign_score, assign_step, distance, sq_norm};

/// Values on a coarse grid, so that exact distance ties between centroids happen.
fn grid(len: usize, seed: u32) -> Vec<f32> {
    (0..len)
        .map(|i| {
            let h = (i as u32 ^ seed).wrapping_mul(2_654_435_761) >> 7;
            (h % 9) as f32 * 0.5 - 2.0
        })
        .collect()
}

/// Quantised weights 0..=3 (a quarter of the points weigh nothing).
fn units(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7 + i / 3) % 4) as f32).collect()
}

/// What the CPU twin computes.
struct Want {
    labels: Vec<u32>,
    dists: Vec<f32>,
    sums: Vec<i64>,
    counts: Vec<u64>,
    inertia: i64,
}

/// The labels, distances, weighted sums, weights and fixed-point inertia the CPU twin computes.
fn reference(
    x: &[f32],
    c: &[f32],
    d: usize,
    metric: AssignMetric,
    scales: &[f32],
    weights: Option<&[f32]>,
    inertia_scale: f32,
) -> Want {
    let k = c.len() / d;
    let (mut labels, mut dists) = (vec![], vec![]);
    let mut sums = vec![0i64; k * d];
    let mut counts = vec![0u64; k];
    let mut inertia = 0i64;
    for (i, row) in x.chunks(d).enumerate() {
        let w = weight_units(weights.map(|w| w[i]));
        let x_sq = sq_norm(row);
        let (mut best, mut label) = (f32::INFINITY, 0);
        for (j, cr) in c.chunks(d).enumerate() {
            let mut acc = 0.0;
            for q in 0..d {
                acc = assign_step(metric, acc, row[q], cr[q]);
            }
            let score = assign_score(metric, acc, sq_norm(cr));
            if score < best {
                (best, label) = (score, j);
            }
        }
        let dist = assign_distance(metric, x_sq, best);
        if metric == AssignMetric::SqL2 {
            // The GEMM form recovers the direct distance up to rounding (relative to the norms).
            let near = 1e-3 + 1e-5 * (x_sq + sq_norm(&c[label * d..][..d]));
            assert!((dist - distance(metric, row, &c[label * d..][..d])).abs() < near);
        }
        labels.push(label as u32);
        dists.push(dist);
        inertia += inertia_term(dist, inertia_scale, w);
        counts[label] += w as u64;
        for q in 0..d {
            sums[label * d + q] += w * to_fixed(row[q], scales[q]);
        }
    }
    Want {
        labels,
        dists,
        sums,
        counts,
        inertia,
    }
}

/// 16-byte aligned storage for the points, so that both staging paths run.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct Quad([f32; 4]);

/// `x` copied to 16-byte aligned memory, or to one word past it when `misalign`.
fn placed(x: &[f32], misalign: bool) -> (Vec<Quad>, usize) {
    let skip = misalign as usize;
    let mut buf = vec![Quad([0.0; 4]); (x.len() + skip).div_ceil(4)];
    let words = buf.as_mut_ptr().cast::<f32>();
    let dst = unsafe { core::slice::from_raw_parts_mut(words.add(skip), x.len()) };
    dst.copy_from_slice(x);
    (buf, skip)
}

fn run<const MAXD: usize, const PTS: usize, const CU: usize>(
    n: usize,
    d: usize,
    k: usize,
    metric: AssignMetric,
    misalign: bool,
) {
    run_weighted::<MAXD, PTS, CU>(n, d, k, metric, misalign, None);
    run_weighted::<MAXD, PTS, CU>(n, d, k, metric, misalign, Some(units(n)));
}

fn run_weighted<const MAXD: usize, const PTS: usize, const CU: usize>(
    n: usize,
    d: usize,
    k: usize,
    metric: AssignMetric,
    misalign: bool,
    weights: Option<Vec<f32>>,
) {
    let shape = SmallStep {
        max_d: MAXD,
        points: PTS,
        unroll: CU,
    };
    let x = grid(n * d, 1);
    let c = x[..k * d].to_vec();
    let (x_buf, skip) = placed(&x, misalign);
    let total = weights
        .as_ref()
        .map_or(n, |w| w.iter().sum::<f32>() as usize);
    let exps: Vec<i32> = (0..d).map(|_| scale_exponent(2.0, total)).collect();
    let scales: Vec<f32> = exps.iter().map(|&s| pow2_f32(s)).collect();
    let inertia_scale = pow2_f32(inertia_exponent(16.0 * d as f64, total as u64));
    let w = weights.as_deref();
    let want = reference(&x, &c, d, metric, &scales, w, inertia_scale);

    let blocks = n.div_ceil(shape.block_points());
    let mut labels = vec![u32::MAX; n];
    let mut min_dist = vec![f32::NAN; n];
    let mut changed = vec![0u32];
    let mut inertia = vec![0i64; blocks];
    let mut sums = vec![0i64; k * d];
    let mut counts = vec![0u64; k];
    let args = Step {
        x: unsafe { x_buf.as_ptr().cast::<f32>().add(skip) },
        n,
        d,
        centroids: c.as_ptr(),
        k,
        metric,
        labels: labels.as_mut_ptr(),
        min_dist: min_dist.as_mut_ptr(),
        changed: changed.as_mut_ptr(),
        block_inertia: inertia.as_mut_ptr(),
        inertia_scale,
        weights: w.map_or(core::ptr::null(), |w| w.as_ptr()),
        scales: scales.as_ptr(),
        sums: sums.as_mut_ptr(),
        counts: counts.as_mut_ptr(),
        assign: true,
        accumulate: true,
        lower: core::ptr::null_mut(),
        drift: core::ptr::null(),
        halt: core::ptr::null(),
    };
    let bytes = shape.layout(k, d).bytes;
    // A step whose halt word an earlier finalize set writes nothing (it reads the word after
    // staging its rows).
    let set = [1u32];
    let halted = Step {
        halt: set.as_ptr(),
        ..args
    };
    let halted = P(&halted as *const Step as *mut Step);
    launch(blocks, BLOCK as usize, bytes, |e| unsafe {
        step::<MAXD, PTS, CU, _>(e, *halted.get())
    });
    let untouched = labels.iter().all(|&l| l == u32::MAX)
        && min_dist.iter().all(|v| v.is_nan())
        && changed == [0]
        && inertia.iter().all(|&v| v == 0)
        && sums.iter().all(|&v| v == 0)
        && counts.iter().all(|&v| v == 0);
    assert!(
        untouched,
        "n={n} d={d} k={k} {shape:?}: a halted step wrote"
    );
    let args = P(&args as *const Step as *mut Step);
    launch(blocks, BLOCK as usize, bytes, |e| unsafe {
        step::<MAXD, PTS, CU, _>(e, *args.get())
    });
    let case = format!(
        "{metric:?} n={n} d={d} k={k} {shape:?} misaligned {misalign} weighted {}",
        w.is_some()
    );
    assert_eq!(labels, want.labels, "{case}");
    assert_eq!(
        min_dist.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        want.dists.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        "{case}"
    );
    // Every old label was u32::MAX, so every point with weight changed.
    let weighty = w.map_or(n, |w| w.iter().filter(|&&u| u > 0.0).count());
    assert_eq!(changed[0] as usize, weighty, "{case}");
    assert_eq!(sums, want.sums, "{case}");
    assert_eq!(counts, want.counts, "{case}");
    assert_eq!(inertia.iter().sum::<i64>(), want.inertia, "{case}");

    let step = StepOut {
        sums,
        counts,
        changed,
        inertia,
    };
    check_finalize(&case, &c, d, &exps, &want, step, weighty);
}

/// What the emulated step left for the finalize kernel.
struct StepOut {
    sums: Vec<i64>,
    counts: Vec<u64>,
    changed: Vec<u32>,
    inertia: Vec<i64>,
}

/// What the finalize kernel writes: next centroids, sizes, summary and halt word.
struct Finalized {
    next: Vec<f32>,
    sizes: Vec<u64>,
    out: Vec<f64>,
    halt: [u32; 1],
    parts: Vec<u64>,
}

impl Finalized {
    fn new(k: usize, d: usize) -> Self {
        Finalized {
            next: vec![f32::NAN; k * d],
            sizes: vec![0; k],
            out: vec![0.0; 4],
            halt: [0],
            parts: vec![0; finalize_small_parts(k, d)],
        }
    }

    /// Runs the emulated finalize ([`finalize_small_grid`] blocks of 64 threads) of `step` from
    /// centroids `c` under `rule`, with the centroids' drifts written to `drift` unless null;
    /// the count of blocks done is back at zero after it.
    fn run(&mut self, step: &mut StepOut, c: &[f32], inv: &[f64], rule: HaltRule, drift: *mut f32) {
        let (k, d) = (step.counts.len(), c.len() / step.counts.len());
        let f = Finalize {
            sums: step.sums.as_mut_ptr(),
            counts: step.counts.as_mut_ptr(),
            k,
            d,
            inv_scales: inv.as_ptr(),
            current: c.as_ptr(),
            next: self.next.as_mut_ptr(),
            sizes: self.sizes.as_mut_ptr(),
            changed: step.changed.as_mut_ptr(),
            block_inertia: step.inertia.as_ptr(),
            blocks: step.inertia.len(),
            out: self.out.as_mut_ptr(),
            halt: self.halt.as_mut_ptr(),
            rule,
            drift,
            parts: self.parts.as_mut_ptr(),
        };
        let f = P(&f as *const Finalize as *mut Finalize);
        launch(
            finalize_small_grid(k, d),
            64,
            finalize_shared_bytes(k, d, !drift.is_null()),
            |e| unsafe { finalize(e, 64, *f.get()) },
        );
        assert_eq!(self.parts.last(), Some(&0), "blocks done, put back");
    }
}

/// The finalize kernel after a step from centroids `c`: means, sizes and summary match `want`
/// (`weighty` points with weight changed); sums, counts and the change counter are cleared; the
/// halt word is set by a rule that the step meets (any empty cluster), and a halted finalize
/// leaves everything as it was.
fn check_finalize(
    case: &str,
    c: &[f32],
    d: usize,
    exps: &[i32],
    want: &Want,
    mut step: StepOut,
    weighty: usize,
) {
    let k = step.counts.len();
    let inv: Vec<f64> = exps.iter().map(|&s| inv_pow2_f64(s)).collect();
    let rule = HaltRule {
        shift: f64::NEG_INFINITY,
        unchanged: false,
        empty: true,
    };
    let mut fin = Finalized::new(k, d);
    fin.run(&mut step, c, &inv, rule, core::ptr::null_mut());
    // Halted: a second finalize changes nothing (the sums it would read are zero now).
    let (kept_next, kept_out) = (fin.next.clone(), fin.out.clone());
    if fin.halt[0] != 0 {
        fin.run(&mut step, c, &inv, rule, core::ptr::null_mut());
        assert_eq!(
            (next_bits(&fin.next), out_bits(&fin.out)),
            (next_bits(&kept_next), out_bits(&kept_out)),
            "{case}"
        );
    }
    let Finalized {
        next,
        sizes,
        out,
        halt,
        ..
    } = fin;
    let StepOut {
        sums,
        counts,
        changed,
        ..
    } = step;
    let mut empty = 0;
    for cl in 0..k {
        for q in 0..d {
            let mean = if want.counts[cl] > 0 {
                mean(want.sums[cl * d + q], inv[q], want.counts[cl])
            } else {
                c[cl * d + q]
            };
            assert_eq!(next[cl * d + q].to_bits(), mean.to_bits(), "{case}");
        }
        empty += (want.counts[cl] == 0) as usize;
    }
    assert_eq!(sizes, want.counts, "{case}");
    assert_eq!(out[0] as usize, weighty);
    assert_eq!(out[1] as usize, empty);
    assert_eq!(out[2], want.inertia as f64, "{case}");
    assert_eq!(halt[0] != 0, empty > 0, "{case}: halts on an empty cluster");
    assert!(sums.iter().all(|&v| v == 0) && counts.iter().all(|&v| v == 0));
    assert_eq!(
        changed[0], 0,
        "the counter is left at zero for the next step"
    );
}

#[test]
fn emulated_small_step_matches_the_cpu() {
    // The shapes the kernels are built with, each with the dimension counts of its
    // specialised scans, odd and even d (contiguous and padded staging), k = 1, k = n, k not
    // a multiple of the unroll, n not a multiple of the block.
    const S: [SmallStep; 4] = crate::small::SMALL_STEPS;
    // Runs shape `SMALL_STEPS[$i]` on each (n, d, k).
    macro_rules! shape {
        ($i:literal, $metric:expr, $misalign:expr, [$(($n:expr, $d:expr, $k:expr)),*]) => {
            $(run::<{ S[$i].max_d }, { S[$i].points }, { S[$i].unroll }>(
                $n, $d, $k, $metric, $misalign,
            );)*
        };
    }
    for metric in [AssignMetric::SqL2, AssignMetric::L1] {
        for misalign in [false, true] {
            shape!(
                0,
                metric,
                misalign,
                [
                    (2100, 3, 7),
                    (5, 1, 5),
                    (777, 2, 9),
                    (1500, 4, 255),
                    (64, 3, 1)
                ]
            );
            shape!(
                1,
                metric,
                misalign,
                [(1030, 9, 16), (600, 6, 5), (300, 16, 3), (90, 13, 90)]
            );
            shape!(
                2,
                metric,
                misalign,
                [(600, 17, 40), (300, 32, 7), (200, 24, 33), (150, 27, 1)]
            );
            shape!(
                3,
                metric,
                misalign,
                [
                    (300, 75, 80),
                    (100, 96, 5),
                    (70, 33, 6),
                    (40, 50, 40),
                    (120, 44, 9),
                    (130, 64, 17),
                    (50, 40, 1)
                ]
            );
        }
    }
}

#[test]
fn labels_only_and_sums_only_modes() {
    let (n, d, k) = (700, 5, 6);
    let x = grid(n * d, 3);
    let c = x[..k * d].to_vec();
    let scales = vec![pow2_f32(scale_exponent(2.0, n)); d];
    let want = reference(&x, &c, d, AssignMetric::SqL2, &scales, None, 1.0);
    let mut labels = want.labels.clone();
    let (mut min_dist, mut changed) = (vec![0f32; n], vec![0u32]);
    let mut inertia = vec![0i64; 1];
    let mut sums = vec![0i64; k * d];
    let mut counts = vec![0u64; k];
    let base = Step {
        x: x.as_ptr(),
        n,
        d,
        centroids: c.as_ptr(),
        k,
        metric: AssignMetric::SqL2,
        labels: labels.as_mut_ptr(),
        min_dist: min_dist.as_mut_ptr(),
        changed: changed.as_mut_ptr(),
        block_inertia: inertia.as_mut_ptr(),
        inertia_scale: 1.0,
        weights: core::ptr::null(),
        scales: scales.as_ptr(),
        sums: sums.as_mut_ptr(),
        counts: counts.as_mut_ptr(),
        assign: true,
        accumulate: false,
        lower: core::ptr::null_mut(),
        drift: core::ptr::null(),
        halt: core::ptr::null(),
    };
    let bytes = SMALL_STEP_8.layout(k, d).bytes;
    for (assign, accumulate) in [(true, false), (false, true)] {
        let args = Step {
            assign,
            accumulate,
            ..base
        };
        let args = P(&args as *const Step as *mut Step);
        launch(1, BLOCK as usize, bytes, |e| unsafe {
            step::<8, 4, 2, _>(e, *args.get())
        });
    }
    // Labels already right: none changed; the sums come from the labels read back.
    assert_eq!(labels, want.labels);
    assert_eq!(changed[0], 0);
    assert_eq!(sums, want.sums);
    assert_eq!(counts, want.counts);
}

const SMALL_STEP_8: SmallStep = SmallStep {
    max_d: 8,
    points: 4,
    unroll: 2,
};

fn next_bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn out_bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

mod pruned;
