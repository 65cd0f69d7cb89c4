//! The shortlist against brute force: TF32 products emulated as the tensor cores may form them
//! (`crate::knn_tf32::tests::tf32_dot`), the candidates split over the kernel's lanes and warp
//! columns and merged as it merges them, then re-scored as the kernel does; labels and distances
//! equal the exact scan's bit for bit on near-tie lattices, duplicated centroids, large offsets,
//! d = 1, k = 1, k = 2, k = n and non-finite rows.

use super::Shortlist;
use crate::assign_tf32::TF32_CENTROIDS;
use crate::assign_tf32::bound::{
    RowTerms, TILE_MAXIMA_WORDS, error_bound, product_coefficient, tile_bound, tile_maxima_of,
};
use crate::knn_tf32::tests::{Rng, tf32_dot};
use crate::math::{better, fma, l2_score, sq_norm};

fn exact_score(x: &[f32], c: &[f32], nc: f32) -> f32 {
    let dot = x.iter().zip(c).fold(0f32, |acc, (&a, &b)| fma(a, b, acc));
    l2_score(dot, nc)
}

/// The exact path: every centroid in index order, strict `<` from (+∞, 0).
fn exact_nearest(x: &[f32], cents: &[f32], norms: &[f32], d: usize) -> (u32, f32) {
    let (mut best, mut label) = (f32::INFINITY, 0u32);
    for (c, &nc) in norms.iter().enumerate() {
        let s = exact_score(x, &cents[c * d..][..d], nc);
        if s < best {
            (best, label) = (s, c as u32);
        }
    }
    (label, (sq_norm(x) + best).max(0.0))
}

/// The kernel's part of centroid `c`: warp column `(c % 128) / 64`, lane column `(c % 8) / 2`.
fn part(c: usize) -> usize {
    ((c % 128) / 64) * 4 + (c % 8) / 2
}

/// The kernel's answer for one point, with whether it took the full pass.
fn shortlisted_nearest(
    x: &[f32],
    cents: &[f32],
    norms: &[f32],
    d: usize,
    order: u32,
    truncated: bool,
) -> (u32, f32, bool) {
    let nx = sq_norm(x);
    let (p, x_sum) = RowTerms::of(x, true).point(d, product_coefficient(d));
    let (_, maxima) = tile_maxima_of(cents, d);
    let mut parts = [Shortlist::EMPTY; 8];
    let mut trusted = true;
    for (c, &nc) in norms.iter().enumerate() {
        let m = &maxima[c / TF32_CENTROIDS * TILE_MAXIMA_WORDS..][..TILE_MAXIMA_WORDS];
        let bar = tile_bound(p, x_sum, m[0], m[1], m[2]);
        trusted &= bar < f32::INFINITY;
        let row = &cents[c * d..][..d];
        let t = l2_score(tf32_dot(x, row, order, truncated), nc);
        let s = exact_score(x, row, nc);
        if bar < f32::INFINITY {
            // As the kernel forms it: L = fl(T − Ē) ≤ fl(T − E) ≤ S, and T is finite.
            let (c_norm, q) = RowTerms::of(row, false).centroid(d);
            assert!(error_bound(p, x_sum, c_norm, q, nc) <= bar);
            assert!(
                t.is_finite() && t - bar <= s,
                "centroid {c}: T = {t}, S = {s}, Ē = {bar}"
            );
        }
        parts[part(c)].insert(t - bar, c as u32);
        // Padding centroids past k (squared norm +∞) are never kept.
        parts[part(c)].insert(l2_score(0.0, f32::INFINITY) - bar, u32::MAX);
    }
    if !trusted {
        parts = [Shortlist::UNTRUSTED; 8];
    }
    // The lanes' butterfly (masks 1 and 2) inside each warp column, then both columns.
    for mask in [1, 2] {
        let before = parts;
        for (p, list) in parts.iter_mut().enumerate() {
            list.merge(before[(p & !3) | ((p % 4) ^ mask)]);
        }
    }
    let mut list = Shortlist::EMPTY;
    list.merge(parts[0]);
    list.merge(parts[4]);
    let score = |c: u32| exact_score(x, &cents[c as usize * d..][..d], norms[c as usize]);
    let (mut best, mut label) = (f32::INFINITY, u32::MAX);
    for c in list.index.into_iter().filter(|&c| c != u32::MAX) {
        if better(score(c), c, best, label) {
            (best, label) = (score(c), c);
        }
    }
    let full = list.needs_full_pass(best);
    if full {
        for c in 0..norms.len() as u32 {
            if better(score(c), c, best, label) {
                (best, label) = (score(c), c);
            }
        }
    }
    // `better` never takes NaN: every score was +∞ or NaN.
    if best == f32::INFINITY {
        label = 0;
    }
    (label, (nx + best).max(0.0), full)
}

/// Checks every point of `data` against `cents`; returns the number of full passes.
fn check(name: &str, data: &[f32], cents: &[f32], d: usize) -> usize {
    let norms: Vec<f32> = cents.chunks(d).map(sq_norm).collect();
    let mut full = 0;
    for (i, x) in data.chunks(d).enumerate() {
        let (want, want_dist) = exact_nearest(x, cents, &norms, d);
        for (order, truncated) in [(0, true), (1, false), (2, true)] {
            let (label, dist, f) = shortlisted_nearest(x, cents, &norms, d, order, truncated);
            assert_eq!(label, want, "{name}: point {i} (order {order})");
            assert_eq!(dist.to_bits(), want_dist.to_bits(), "{name}: point {i}");
            full += usize::from(f && order == 0);
        }
    }
    full
}

fn uniform(rng: &mut Rng, len: usize, scale: f32, offset: f32) -> Vec<f32> {
    (0..len).map(|_| offset + scale * rng.unit()).collect()
}

fn lattice(rng: &mut Rng, len: usize, levels: u64) -> Vec<f32> {
    (0..len).map(|_| (rng.next() % levels) as f32).collect()
}

#[test]
fn random_points_mostly_shortlist() {
    let mut rng = Rng(11);
    let (n, d, k) = (400, 32, 200);
    let data = uniform(&mut rng, n * d, 1.0, 0.0);
    let cents = uniform(&mut rng, k * d, 1.0, 0.0);
    let full = check("uniform", &data, &cents, d);
    eprintln!("uniform n={n} d={d} k={k}: {full} full passes");
    assert!(full <= n / 5, "{full} of {n} points took the full pass");
}

#[test]
fn near_tie_lattices_are_exact() {
    let mut rng = Rng(12);
    let mut full = 0;
    for (n, d, k, levels) in [
        (300, 2, 10, 4),
        (200, 16, 64, 3),
        (300, 3, 27, 3),
        (100, 1, 5, 3),
    ] {
        let data = lattice(&mut rng, n * d, levels);
        let cents = lattice(&mut rng, k * d, levels);
        full += check(&format!("lattice d={d} k={k}"), &data, &cents, d);
    }
    // Exact ties between three or more centroids (duplicates among them) take the full pass.
    assert!(full > 0);
}

#[test]
fn duplicated_centroids_are_exact() {
    let mut rng = Rng(13);
    let d = 8;
    let data = uniform(&mut rng, 200 * d, 1.0, 0.0);
    let mut cents = uniform(&mut rng, 20 * d, 1.0, 0.0);
    // Every centroid three times: the lowest index must win.
    let copy = cents.clone();
    cents.extend_from_slice(&copy);
    cents.extend_from_slice(&copy);
    check("duplicated", &data, &cents, d);
}

#[test]
fn large_norms_with_small_differences_are_exact() {
    let mut rng = Rng(14);
    let d = 16;
    for offset in [1e4f32, -3e4, 1e6] {
        let data = uniform(&mut rng, 300 * d, 1.0, offset);
        let cents = uniform(&mut rng, 40 * d, 1.0, offset);
        check(&format!("offset {offset}"), &data, &cents, d);
    }
}

#[test]
fn awkward_shapes_are_exact() {
    let mut rng = Rng(15);
    // d = 1, k = 1, k = 2, and k = n (every point is a centroid).
    for (n, d, k) in [(150, 1, 7), (100, 5, 1), (100, 5, 2), (130, 129, 3)] {
        let data = uniform(&mut rng, n * d, 2.0, -1.0);
        let cents = uniform(&mut rng, k * d, 2.0, -1.0);
        check(&format!("n={n} d={d} k={k}"), &data, &cents, d);
    }
    let data = uniform(&mut rng, 97 * 12, 1.0, 0.0);
    check("k=n", &data, &data, 12);
}

#[test]
fn non_finite_rows_take_the_full_pass() {
    let d = 4;
    let cents = [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 2.0, 0.0, 0.0, 0.0];
    let data = [
        f32::NAN,
        0.0,
        0.0,
        0.0,
        f32::INFINITY,
        1.0,
        1.0,
        1.0,
        1e30,
        1e30,
        0.0,
        0.0,
    ];
    check("non-finite", &data, &cents, d);
}

/// Insertion keeps what a stable sort keeps: the three smallest bounds in order, the first two
/// with the centroid inserted first among equals; NaN and +∞ never enter. Ties, signed zeros,
/// infinities and NaN on every draw.
#[test]
fn insertion_keeps_the_first_three_smallest() {
    let mut rng = Rng(17);
    let values = [-1.0, -0.0, 0.0, 0.5, 1.0, 2.0, f32::INFINITY, f32::NAN];
    for trial in 0..2000 {
        let len = 1 + trial % 12;
        let draws: Vec<(f32, u32)> = (0..len)
            .map(|i| {
                (
                    values[(rng.next() % values.len() as u64) as usize],
                    i as u32,
                )
            })
            .collect();
        let mut list = Shortlist::EMPTY;
        for &(l, i) in &draws {
            list.insert(l, i);
        }
        let mut sorted: Vec<(f32, u32)> = draws
            .iter()
            .copied()
            .filter(|d| d.0 < f32::INFINITY)
            .collect();
        sorted.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
        let want = |j: usize| sorted.get(j).copied().unwrap_or((f32::INFINITY, u32::MAX));
        assert_eq!(list.lower, [0, 1, 2].map(|j| want(j).0), "{draws:?}");
        assert_eq!(list.index, [0, 1].map(|j| want(j).1), "{draws:?}");
    }
}

#[test]
fn merging_keeps_the_three_smallest() {
    let mut a = Shortlist::EMPTY;
    for (l, i) in [(5.0, 5), (1.0, 1), (3.0, 3)] {
        a.insert(l, i);
    }
    let mut b = Shortlist::EMPTY;
    for (l, i) in [(2.0, 2), (0.5, 0), (4.0, 4), (f32::NAN, 9)] {
        b.insert(l, i);
    }
    a.merge(b);
    assert_eq!(a.lower, [0.5, 1.0, 2.0]);
    assert_eq!(a.index, [0, 1]);
    // The third smallest bound must exceed the better exact score of the two kept.
    assert!(!a.needs_full_pass(1.9));
    assert!(a.needs_full_pass(2.0));
    assert!(a.needs_full_pass(f32::NAN));
    // Fewer than three centroids: the kept ones are all.
    let mut two = Shortlist::EMPTY;
    two.insert(1.0, 0);
    two.insert(2.0, 1);
    assert!(!two.needs_full_pass(3.0));
    // An untrusted shortlist stays so through merges and always takes the full pass.
    let mut u = Shortlist::UNTRUSTED;
    u.merge(a);
    assert_eq!(u, Shortlist::UNTRUSTED);
    a.merge(Shortlist::UNTRUSTED);
    assert!(a.needs_full_pass(f32::NEG_INFINITY));
    assert_eq!(a.index, [u32::MAX; 2]);
}

/// The share of points that take the full pass on the benchmark's shape (d = 128, k = 1024),
/// uniform on [0, 1) and centred (uniform on [−1, 1)): printed, and held under a ceiling.
#[test]
fn benchmark_shapes_mostly_shortlist() {
    let (n, d, k) = (300, 128, 1024);
    for (name, scale, offset, ceiling) in
        [("uniform", 1.0, 0.0, 0.10), ("centred", 2.0, -1.0, 0.10)]
    {
        let mut rng = Rng(21);
        let data = uniform(&mut rng, n * d, scale, offset);
        let cents = uniform(&mut rng, k * d, scale, offset);
        let norms: Vec<f32> = cents.chunks(d).map(sq_norm).collect();
        let mut full = 0;
        for (i, x) in data.chunks(d).enumerate() {
            let (want, _) = exact_nearest(x, &cents, &norms, d);
            let (label, _, f) = shortlisted_nearest(x, &cents, &norms, d, 0, true);
            assert_eq!(label, want, "{name}: point {i}");
            full += usize::from(f);
        }
        let share = full as f64 / n as f64;
        eprintln!(
            "{name} {d} dimensions, k={k}: {full} of {n} points ({:.1} %) take the full pass",
            100.0 * share
        );
        assert!(share <= ceiling, "{name}: {full} of {n} full passes");
    }
}
