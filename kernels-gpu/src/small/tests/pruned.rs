//! The pruned scan ([`crate::small::prune`]): steps with bounds give the full step's labels,
//! distances, sums and inertia bit for bit, iteration after iteration, while skipping groups.

use super::*;
use crate::small::prune::{ErrorBound, group_size, groups, moved_lower};

/// Deterministic values in `[0, 1)`.
fn uniform(len: usize, seed: u64) -> Vec<f64> {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        })
        .collect()
}

/// `n` points around `centers` blobs, every coordinate shifted by `offset` (large norms with
/// small differences when the offset dwarfs the spread).
fn blobs(n: usize, d: usize, centers: usize, offset: f32, seed: u64) -> Vec<f32> {
    let u = uniform(centers * d + n * (d + 1), seed);
    let (means, rest) = u.split_at(centers * d);
    let mut x = Vec::with_capacity(n * d);
    for (i, r) in rest.chunks(d + 1).enumerate().take(n) {
        let c = (r[0] * centers as f64) as usize;
        for j in 0..d {
            let v = (means[c * d + j] - 0.5) * 40.0 + (r[j + 1] - 0.5) * 6.0;
            // Every seventh point repeats the one before (duplicates).
            x.push(if i % 7 == 6 {
                x[x.len() - d]
            } else {
                v as f32 + offset
            });
        }
    }
    x
}

/// The CPU's squared norm of `row` and score against `c` (the scan's arithmetic).
fn cpu_score(row: &[f32], c: &[f32]) -> (f32, f32) {
    let mut acc = 0.0;
    for (&a, &b) in row.iter().zip(c) {
        acc = assign_step(AssignMetric::SqL2, acc, a, b);
    }
    (
        sq_norm(row),
        assign_score(AssignMetric::SqL2, acc, sq_norm(c)),
    )
}

/// Runs `iters` Lloyd steps of shape 3 with bounds from the first `k` points, checking every
/// step against the CPU twin; returns how many (point, group) scans the bounds skipped in all.
fn pruned_fit(x: &[f32], d: usize, k: usize, iters: usize, case: &str) -> usize {
    pruned_fit_weighted(x, d, k, iters, None, case)
}

/// [`pruned_fit`] with the points' quantised `weights` (units; `None`: one each).
fn pruned_fit_weighted(
    x: &[f32],
    d: usize,
    k: usize,
    iters: usize,
    weights: Option<&[f32]>,
    case: &str,
) -> usize {
    const S: SmallStep = crate::small::SMALL_STEPS[3];
    let n = x.len() / d;
    let (x_buf, skip) = placed(x, false);
    let exps: Vec<i32> = (0..d).map(|_| scale_exponent(2048.0, n)).collect();
    let scales: Vec<f32> = exps.iter().map(|&s| pow2_f32(s)).collect();
    let inv: Vec<f64> = exps.iter().map(|&s| inv_pow2_f64(s)).collect();
    let inertia_scale = pow2_f32(inertia_exponent(1e7 * d as f64, n as u64));
    let blocks = n.div_ceil(S.block_points());
    let mut c = x[..k * d].to_vec();
    let mut labels = vec![u32::MAX; n];
    let (size, groups) = (group_size(k), groups(k));
    let mut lower = vec![f32::NAN; groups * n];
    let mut drift = vec![f32::NAN; k];
    let mut skipped = 0;
    // Steps with bounds keep the sums from step to step.
    let mut sums = vec![0i64; k * d];
    let mut counts = vec![0u64; k];
    for iter in 0..iters {
        let case = format!("{case} iteration {iter}");
        let want = reference(
            x,
            &c,
            d,
            AssignMetric::SqL2,
            &scales,
            weights,
            inertia_scale,
        );
        // The points whose scan the kernel may skip: the same test on the CPU.
        if iter > 0 {
            let c_sq_max = c.chunks(d).map(sq_norm).fold(0f32, f32::max);
            for (i, row) in x.chunks(d).enumerate() {
                let a = labels[i] as usize;
                let (x_sq, score) = cpu_score(row, &c[a * d..][..d]);
                for g in 0..groups {
                    let most = drift[g * size..((g + 1) * size).min(k)]
                        .iter()
                        .fold(0f32, |m, &v| m.max(v));
                    let moved = moved_lower(lower[g * n + i], most);
                    if ErrorBound::new(d, c_sq_max).point(x_sq).skips(moved, score) {
                        skipped += 1;
                        let w = want.labels[i] as usize;
                        assert!(w == a || w / size != g, "{case}: point {i} skipped wrongly");
                    }
                }
            }
        }
        let old = labels.clone();
        let mut min_dist = vec![f32::NAN; n];
        let mut changed = vec![0u32];
        let mut inertia = vec![0i64; blocks];
        let args = Step {
            x: unsafe { x_buf.as_ptr().cast::<f32>().add(skip) },
            n,
            d,
            centroids: c.as_ptr(),
            k,
            metric: AssignMetric::SqL2,
            labels: labels.as_mut_ptr(),
            min_dist: min_dist.as_mut_ptr(),
            changed: changed.as_mut_ptr(),
            block_inertia: inertia.as_mut_ptr(),
            inertia_scale,
            weights: weights.map_or(core::ptr::null(), |w| w.as_ptr()),
            scales: scales.as_ptr(),
            sums: sums.as_mut_ptr(),
            counts: counts.as_mut_ptr(),
            assign: true,
            accumulate: true,
            lower: lower.as_mut_ptr(),
            drift: if iter == 0 {
                core::ptr::null()
            } else {
                drift.as_ptr()
            },
            halt: core::ptr::null(),
        };
        let args = P(&args as *const Step as *mut Step);
        launch(blocks, BLOCK as usize, S.layout(k, d).bytes, |e| unsafe {
            step::<{ S.max_d }, { S.points }, { S.unroll }, _>(e, *args.get())
        });
        assert_eq!(labels, want.labels, "{case}");
        assert_eq!(next_bits(&min_dist), next_bits(&want.dists), "{case}");
        assert_eq!(sums, want.sums, "{case}");
        assert_eq!(counts, want.counts, "{case}");
        assert_eq!(inertia.iter().sum::<i64>(), want.inertia, "{case}");
        let weighty = |i: usize| weights.is_none_or(|w| w[i] > 0.0);
        let moved = (0..n)
            .filter(|&i| old[i] != labels[i] && weighty(i))
            .count();
        assert_eq!(changed[0] as usize, moved, "{case}");
        // Every bound is below the true distance to every other centroid of its group.
        for (i, row) in x.chunks(d).enumerate() {
            for (j, cr) in c.chunks(d).enumerate() {
                if j != labels[i] as usize {
                    let true_sq: f64 = (row.iter().zip(cr))
                        .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
                        .sum();
                    let bound = lower[(j / size) * n + i] as f64;
                    assert!(bound <= true_sq.sqrt(), "{case}: bound of {i} for {j}");
                }
            }
        }

        // The kept sums go through the finalize and come back for the next step.
        let mut out = StepOut {
            sums: core::mem::take(&mut sums),
            counts: core::mem::take(&mut counts),
            changed,
            inertia,
        };
        let mut fin = Finalized::new(k, d);
        fin.run(&mut out, &c, &inv, HaltRule::NEVER, drift.as_mut_ptr());
        (sums, counts) = (out.sums, out.counts);
        let next = fin.next;
        for (j, (a, b)) in c.chunks(d).zip(next.chunks(d)).enumerate() {
            let true_drift = (a.iter().zip(b))
                .map(|(&u, &v)| (u as f64 - v as f64).powi(2))
                .sum::<f64>()
                .sqrt();
            let got = drift[j] as f64;
            assert!(
                got >= true_drift,
                "{case}: drift of {j}: {got} < {true_drift}"
            );
            assert!(
                got <= true_drift * 1.001 + 1e-30,
                "{case}: drift of {j}: {got}"
            );
        }
        c = next;
    }
    skipped
}

#[test]
fn pruned_steps_match_full_steps() {
    // n not a multiple of the block; d odd (padded quads) and even; k = 1, k = n.
    let x = blobs(600, 75, 12, 0.0, 1);
    let skipped = pruned_fit(&x, 75, 80, 6, "blobs 600 × 75, k = 80");
    // 5 steps with bounds × 600 points × 10 groups.
    assert!(
        skipped > 15_000,
        "the bounds skipped only {skipped} group scans"
    );
    let x = blobs(300, 40, 5, 1000.0, 2);
    let skipped = pruned_fit(&x, 40, 6, 5, "offset blobs 300 × 40, k = 6");
    // 4 × 300 × 1 group.
    assert!(
        skipped > 300,
        "the bounds skipped only {skipped} group scans"
    );
    pruned_fit(&blobs(260, 33, 3, 0.0, 3), 33, 1, 3, "k = 1");
    pruned_fit(&blobs(90, 64, 4, 0.0, 4), 64, 90, 3, "k = n");
    // Ties: a coarse grid, whose centroids tie exactly.
    pruned_fit(&grid(300 * 36, 5), 36, 17, 4, "grid 300 × 36, k = 17");
    // Weights 0..=3: the kept sums move weighted points; points without weight still move.
    let x = blobs(520, 48, 6, 0.0, 6);
    pruned_fit_weighted(&x, 48, 20, 5, Some(&units(520)), "weighted blobs 520 × 48");
}

#[test]
fn a_kept_label_is_the_first_minimum_under_large_norms() {
    // Centroids of large norm, a hair to far apart, and points among them: wherever the test
    // keeps a label with the exact lower bound, the FP32 scan picks that label, and the bound
    // from the second-best score is below every true distance.
    let d = 96;
    let mut kept = 0;
    for (seed, spread) in [0.1f64, 30.0, 1000.0].into_iter().enumerate() {
        let u = uniform(80 * d, seed as u64 + 9);
        let c: Vec<f32> = u[..40 * d]
            .iter()
            .map(|&v| (1e4 + v * spread) as f32)
            .collect();
        let c_sq_max = c.chunks(d).map(sq_norm).fold(0f32, f32::max);
        for (i, noise) in u[40 * d..].chunks(d).enumerate() {
            // Each point near a centroid of its own, at a distance of the spread's order.
            let near = &c[(i % 40) * d..][..d];
            let row: Vec<f32> = (near.iter().zip(noise))
                .map(|(&q, &v)| (q as f64 + (v - 0.5) * spread * 0.3) as f32)
                .collect();
            kept += check_kept(&row, &c, d, ErrorBound::new(d, c_sq_max));
        }
    }
    assert!(kept > 0, "no label kept: the test shows nothing");
}

/// The labels that the test keeps for `row` with exact lower bounds (all must be the FP32
/// scan's first minimum), after checking the bound from the second-best score.
fn check_kept(row: &[f32], c: &[f32], d: usize, error: ErrorBound) -> usize {
    let true_dist = |cr: &[f32]| {
        (row.iter().zip(cr))
            .map(|(&p, &q)| (p as f64 - q as f64).powi(2))
            .sum::<f64>()
            .sqrt()
    };
    let scores: Vec<(f32, f32)> = c.chunks(d).map(|cr| cpu_score(row, cr)).collect();
    let first = (0..scores.len())
        .min_by(|&a, &b| scores[a].1.total_cmp(&scores[b].1).then(a.cmp(&b)))
        .unwrap();
    let mut kept = 0;
    for (a, &(x_sq, score)) in scores.iter().enumerate() {
        let true_lower = (c.chunks(d).enumerate())
            .filter(|&(j, _)| j != a)
            .map(|(_, cr)| true_dist(cr))
            .fold(f64::INFINITY, f64::min);
        let lower = (true_lower * (1.0 - 1e-7)) as f32;
        if error.point(x_sq).skips(lower, score) {
            kept += 1;
            assert_eq!(a, first);
        }
    }
    let second = (0..scores.len())
        .filter(|&j| j != first)
        .map(|j| scores[j].1)
        .fold(f32::INFINITY, f32::min);
    let lower = error.point(scores[first].0).lower(second) as f64;
    for (j, cr) in c.chunks(d).enumerate().filter(|&(j, _)| j != first) {
        assert!(lower <= true_dist(cr), "centroid {j}");
    }
    kept
}

#[test]
fn rank_keys_order_as_score_then_label() {
    use crate::small::prune::{from_key, rank_key};
    let scores = [
        f32::NEG_INFINITY,
        -3.5,
        -1e-30,
        0.0,
        1e-30,
        2.0,
        2.5e30,
        f32::INFINITY,
    ];
    let mut pairs = vec![];
    for &s in &scores {
        for l in [0u32, 1, 7, u32::MAX] {
            pairs.push((s, l));
        }
    }
    for &(s, l) in &pairs {
        assert_eq!(from_key(rank_key(s, l)).0.to_bits(), s.to_bits());
        assert_eq!(from_key(rank_key(s, l)).1, l);
        for &(t, m) in &pairs {
            let want = (s < t) || (s == t && l < m);
            let got = rank_key(s, l) < rank_key(t, m);
            assert_eq!(got, want, "({s}, {l}) against ({t}, {m})");
        }
    }
}

#[test]
fn bounds_round_toward_safety() {
    use crate::small::prune::moved_lower;
    // A bound moved by a drift is at most the exact difference, and never negative.
    for (lower, drift) in [
        (1.0f32, 0.1f32),
        (3.0e-7, 1.0e-7),
        (1.0e10, 1.0),
        (0.5, 0.5),
        (0.1, 2.0),
    ] {
        let moved = moved_lower(lower, drift) as f64;
        assert!(
            moved <= lower as f64 - drift as f64 || moved == 0.0,
            "{lower} − {drift}"
        );
        assert!(moved >= 0.0);
    }
    assert_eq!(moved_lower(f32::INFINITY, 1.0), f32::INFINITY);
}
