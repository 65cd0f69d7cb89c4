use super::*;
use crate::exec::emu::{P, launch};
use crate::fixed::{inv_pow2_f64, pow2_f32, scale_exponent};

/// Values on a coarse grid, so that exact distance ties between centroids happen.
fn grid(len: usize, seed: u32) -> Vec<f32> {
    (0..len)
        .map(|i| {
            let h = (i as u32 ^ seed).wrapping_mul(2_654_435_761) >> 7;
            (h % 9) as f32 * 0.5 - 2.0
        })
        .collect()
}

/// The nearest centroid of `row` and its distance, scanned as the CPU backend does.
fn nearest(metric: AssignMetric, row: &[f32], centroids: &[f32]) -> (u32, f32) {
    let d = row.len();
    let (mut best, mut label) = (f32::INFINITY, 0);
    for (c, cr) in centroids.chunks(d).enumerate() {
        let mut acc = 0.0;
        for j in 0..d {
            acc = assign_step(metric, acc, row[j], cr[j]);
        }
        let score = assign_score(metric, acc, sq_norm(cr));
        if score < best {
            (best, label) = (score, c as u32);
        }
    }
    (label, assign_distance(metric, sq_norm(row), best))
}

/// One batch through the emulated assign and update kernels, against the plain formulas.
fn check(n: usize, d: usize, k: usize, rows: &[u32], metric: AssignMetric, threads: usize) {
    let case = format!(
        "{metric:?} n={n} d={d} k={k} batch={} threads={threads}",
        rows.len()
    );
    let x = grid(n * d, 1);
    let centroids = grid(k * d, 2);
    let k_padded = k.next_multiple_of(4);
    let mut by_dim = vec![f32::NAN; d * k_padded];
    for c in 0..k {
        for j in 0..d {
            by_dim[j * k_padded + c] = centroids[c * d + j];
        }
    }
    let norms: Vec<f32> = centroids.chunks(d).map(sq_norm).collect();
    let exps: Vec<i32> = (0..d).map(|_| scale_exponent(2.0, rows.len())).collect();
    let scales: Vec<f32> = exps.iter().map(|&s| pow2_f32(s)).collect();
    let inv_scales: Vec<f64> = exps.iter().map(|&s| inv_pow2_f64(s)).collect();

    let (mut want_sums, mut want_counts) = (vec![0i64; k * d], vec![0u32; k]);
    let mut want_dist = vec![];
    for &r in rows {
        let row = &x[r as usize * d..][..d];
        let (label, dist) = nearest(metric, row, &centroids);
        want_dist.push(dist);
        want_counts[label as usize] += 1;
        for j in 0..d {
            want_sums[label as usize * d + j] += to_fixed(row[j], scales[j]);
        }
    }

    let (mut sums, mut counts) = (vec![0i64; k * d], vec![0u32; k]);
    let mut distances = vec![f32::NAN; rows.len()];
    let a = BatchAssign {
        x: x.as_ptr(),
        d,
        rows: rows.as_ptr(),
        batch: rows.len(),
        centroids_t: by_dim.as_ptr(),
        k_padded,
        c_sq_norms: norms.as_ptr(),
        k,
        scales: scales.as_ptr(),
        sums: sums.as_mut_ptr(),
        counts: counts.as_mut_ptr(),
        distances: distances.as_mut_ptr(),
    };
    let a = P(&a as *const BatchAssign as *mut BatchAssign);
    let blocks = assign_blocks(rows.len());
    launch(blocks, threads, assign_shared_bytes(threads), |e| unsafe {
        match metric {
            AssignMetric::L1 => assign::<true, _>(e, threads, *a.get()),
            AssignMetric::SqL2 => assign::<false, _>(e, threads, *a.get()),
        }
    });
    let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&distances), bits(&want_dist), "{case}: distances");
    assert_eq!(counts, want_counts, "{case}: counts");
    assert_eq!(sums, want_sums, "{case}: sums");

    check_update(
        &case,
        &centroids,
        d,
        &want_counts,
        &want_sums,
        &inv_scales,
        sums,
        counts,
    );
}

/// The update of one batch (its `sums` and batch `counts` as the assign kernel left them)
/// through the emulated update and shift kernels, against the running-mean formula: centroids
/// that received rows move, the others stay; sums and batch counts are left at zero, the
/// running counts grow, the report holds the batch counts.
#[allow(clippy::too_many_arguments)]
fn check_update(
    case: &str,
    centroids: &[f32],
    d: usize,
    want_counts: &[u32],
    want_sums: &[i64],
    inv_scales: &[f64],
    mut sums: Vec<i64>,
    mut counts: Vec<u32>,
) {
    let k = want_counts.len();
    let seen: Vec<u64> = (0..k as u64).map(|c| c * 3 % 5).collect();
    let mut running = seen.clone();
    let mut next = vec![f32::NAN; k * d];
    let mut report = vec![u32::MAX; k];
    let u = BatchUpdate {
        current: centroids.as_ptr(),
        next: next.as_mut_ptr(),
        d,
        sums: sums.as_mut_ptr(),
        batch_counts: counts.as_mut_ptr(),
        counts: running.as_mut_ptr(),
        inv_scales: inv_scales.as_ptr(),
        report: report.as_mut_ptr(),
    };
    let u = P(&u as *const BatchUpdate as *mut BatchUpdate);
    launch(k, 4, 0, |e| unsafe { update(e, 4, *u.get()) });
    for c in 0..k {
        for (j, &inv_scale) in inv_scales.iter().enumerate() {
            let i = c * d + j;
            let want = match want_counts[c] {
                0 => centroids[i],
                b => learning_rate_update(centroids[i], seen[c], want_sums[i], inv_scale, b),
            };
            assert_eq!(
                next[i].to_bits(),
                want.to_bits(),
                "{case}: centroid {c}, dim {j}"
            );
        }
        assert_eq!(running[c], seen[c] + want_counts[c] as u64, "{case}");
    }
    assert_eq!(report, want_counts, "{case}: report");
    assert!(
        sums.iter().all(|&s| s == 0) && counts.iter().all(|&c| c == 0),
        "{case}"
    );

    let mut shift = vec![f64::NAN; k];
    let out = P::of(&mut shift);
    launch(k.div_ceil(4), 4, 0, |e| unsafe {
        shifts(e, 4, next.as_ptr(), centroids.as_ptr(), k, d, out.get())
    });
    for c in 0..k {
        let want = row_shift(&next[c * d..][..d], &centroids[c * d..][..d]);
        assert_eq!(shift[c].to_bits(), want.to_bits(), "{case}: shift {c}");
    }
}

#[test]
fn emulated_batch_step_matches_the_formulas() {
    for metric in [AssignMetric::SqL2, AssignMetric::L1] {
        // Batch not a multiple of the block's rows, with repeats; more centroids than threads.
        let rows: Vec<u32> = (0..13).map(|i| i * 7 % 20).collect();
        check(20, 5, 70, &rows, metric, 32);
        // d = 1; k = 1; k = batch; one row; every row the same.
        check(30, 1, 6, &[3, 29, 0, 3, 17, 8, 8, 1, 2], metric, 32);
        check(30, 4, 1, &[5, 6, 7, 8, 9, 10, 11, 12, 13], metric, 32);
        check(16, 3, 16, &(0..16).rev().collect::<Vec<_>>(), metric, 32);
        check(9, 6, 3, &[4], metric, 32);
        check(9, 2, 5, &[2; 17], metric, 32);
    }
    // The launch shape of the GPU.
    let rows: Vec<u32> = (0..40).map(|i| i * 11 % 37).collect();
    check(
        37,
        9,
        300,
        &rows,
        AssignMetric::SqL2,
        crate::launch::BLOCK as usize,
    );
}

#[test]
fn the_update_is_the_running_mean() {
    // Two rows seen at 1.0, then a batch of two rows summing to 8.0: the mean of all four is 2.5.
    let s = scale_exponent(4.0, 2);
    let sum = to_fixed(3.0, pow2_f32(s)) + to_fixed(5.0, pow2_f32(s));
    assert_eq!(learning_rate_update(1.0, 2, sum, inv_pow2_f64(s), 2), 2.5);
    // A centroid that has seen nothing becomes the batch mean.
    assert_eq!(learning_rate_update(9.0, 0, sum, inv_pow2_f64(s), 2), 4.0);
    assert_eq!(row_shift(&[1.0, 2.0], &[0.0, 4.0]), 5.0);
}
