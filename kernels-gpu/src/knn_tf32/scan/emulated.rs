//! `knn_tf32_scan` run whole in the emulator (its `mma`s over the PTX fragment layout, its
//! `cp.async` ring landing only when waited for), alone and with the rest of the prefilter as
//! the host queues it (`CudaKnn::tf32_batch`): the k smallest group keys, the exact threshold,
//! the candidates (from a second scan and from the stored approximations), the exact re-rank.
//! Whatever the order of the tensor cores' sums, every approximation lies within the bound of
//! its exact distance, and the neighbours are the exact search's, bit for bit.

use super::*;
use crate::exec::emu::{P, launch};
use crate::knn::{PairMetric, SELECT_BLOCK, distance, key_distance, key_index, stream_tile};
use crate::knn_tf32::candidates::{
    CANDIDATE_BLOCK, CANDIDATE_SHARED_BYTES, Stored, approx_stride, candidates, candidates_grid,
};
use crate::knn_tf32::tests::Rng;
use crate::math::{sq_norm, sqrt};
use crate::params::DevPtr;
use crate::select::{BY_BITONIC, BY_KMIN, BY_RADIX, Tile, select, select_method_shared_bytes};

/// A search's shape: `m` queries and `n` training rows of `d` dimensions, the scan's group
/// size, staged query dimensions `xc` and training tiles per block.
#[derive(Clone, Copy, Debug)]
struct Shape {
    m: usize,
    n: usize,
    d: usize,
    group: usize,
    xc: usize,
    tiles: usize,
}

/// Queries and training rows with what the host computes for them before the scan.
struct Data<'a> {
    s: Shape,
    q: &'a [f32],
    x: &'a [f32],
    qn: Vec<f32>,
    xn: Vec<f32>,
    xr: Vec<f32>,
}

impl<'a> Data<'a> {
    fn new(s: Shape, q: &'a [f32], x: &'a [f32]) -> Self {
        let qn: Vec<f32> = q.chunks(s.d).map(sq_norm).collect();
        let xn: Vec<f32> = x.chunks(s.d).map(sq_norm).collect();
        let xr = xn.iter().map(|&v| sqrt(v)).collect();
        Data {
            s,
            q,
            x,
            qn,
            xn,
            xr,
        }
    }

    fn ldg(&self) -> usize {
        tf32_groups_per_row(self.s.n, self.s.group)
    }

    /// `E` of query `i` and training row `j`, as the kernels evaluate it.
    fn bound(&self, i: usize, j: usize) -> f32 {
        let c1q = bound_coefficient(self.s.d) * sqrt(self.qn[i]);
        error_bound(c1q, self.xr[j], self.qn[i], self.xn[j])
    }

    /// One scan launch, as the host's (`tf32_scan_grid` blocks of `TF32_BLOCK` threads).
    #[allow(clippy::too_many_arguments)]
    fn scan(
        &self,
        mode: u32,
        gkeys: &mut [u64],
        approx: Option<&mut [f32]>,
        t_sq: &[f32],
        counts: &mut [u32],
        cand: &mut [u32],
    ) {
        let Shape {
            m,
            n,
            d,
            group,
            xc,
            tiles,
        } = self.s;
        let ptr = |v: &[f32]| DevPtr::from_ptr(v.as_ptr());
        let params = ScanParams {
            q: ptr(self.q),
            q_norms: ptr(&self.qn),
            m: m as u32,
            x: ptr(self.x),
            x_norms: ptr(&self.xn),
            x_roots: ptr(&self.xr),
            n: n as u32,
            d: d as u32,
            xc: xc as u32,
            tiles: tiles as u32,
            mode,
            group: group as u32,
            gkeys: DevPtr::from_ptr(gkeys.as_mut_ptr()),
            ldg: self.ldg() as u64,
            approx: approx.map_or(DevPtr::NULL, |a| DevPtr::from_ptr(a.as_mut_ptr())),
            lda: approx_stride(n) as u64,
            t_sq: ptr(t_sq),
            counts: DevPtr::from_ptr(counts.as_mut_ptr()),
            cand: DevPtr::from_ptr(cand.as_mut_ptr()),
            c1: bound_coefficient(d),
        };
        launch(
            tf32_scan_grid(m, n, tiles),
            TF32_BLOCK as usize,
            tf32_scan_shared_bytes(xc),
            |e| unsafe { scan(e, params) },
        );
    }

    /// Step 1: the group keys and the stored approximations. Checks every approximation
    /// against the bound and every group key against the group's smallest approximation.
    fn groups(&self, what: &str) -> (Vec<u64>, Vec<f32>) {
        let Shape { m, n, group, .. } = self.s;
        let (ldg, lda) = (self.ldg(), approx_stride(n));
        let mut gkeys = vec![0u64; m * ldg];
        let mut approx = vec![f32::NAN; m * lda];
        self.scan(
            SCAN_GROUPS,
            &mut gkeys,
            Some(&mut approx),
            &[],
            &mut [],
            &mut [],
        );
        for i in 0..m {
            let (qi, mut want) = (&self.q[i * self.s.d..][..self.s.d], vec![NO_KEY; ldg]);
            for j in 0..n {
                let a = approx[i * lda + j];
                let exact = distance(
                    PairMetric::SqEuclidean,
                    qi,
                    &self.x[j * self.s.d..][..self.s.d],
                );
                let (gap, e) = ((a as f64 - exact as f64).abs(), self.bound(i, j));
                assert!(
                    gap <= e as f64,
                    "{what}: query {i} row {j}: |A − D| = {gap:e} > E = {e:e} (A {a}, D {exact})"
                );
                // The lowest index of the smallest finite value (as the scan ranks them).
                let g = group_of(j, group);
                if a.is_finite() && (want[g] == NO_KEY || a < key_distance(want[g])) {
                    want[g] = key(a, j as u32);
                }
            }
            assert_eq!(
                &gkeys[i * ldg..][..ldg],
                &want[..],
                "{what}: query {i} groups"
            );
        }
        (gkeys, approx)
    }

    /// Step 4 from a second scan, from the stored `approx` (`knn_tf32_candidates`) and from the
    /// formula: the same rows for every query. Returns the scan's counts and lists.
    fn candidates(&self, approx: &[f32], t_sq: &[f32], what: &str) -> (Vec<u32>, Vec<u32>) {
        let Shape { m, n, .. } = self.s;
        let lda = approx_stride(n);
        let (mut counts, mut cand) = (vec![0u32; m], vec![u32::MAX; m * TF32_CAP]);
        self.scan(SCAN_CANDIDATES, &mut [], None, t_sq, &mut counts, &mut cand);
        let (mut stored_counts, mut stored_cand) = (vec![0u32; m], vec![u32::MAX; m * TF32_CAP]);
        let stored = Stored {
            approx: approx.as_ptr(),
            lda,
            rows: m,
            n,
            q_norms: self.qn.as_ptr(),
            x_norms: self.xn.as_ptr(),
            x_roots: self.xr.as_ptr(),
            t_sq: t_sq.as_ptr(),
            c1: bound_coefficient(self.s.d),
            counts: stored_counts.as_mut_ptr(),
            cand: stored_cand.as_mut_ptr(),
        };
        let stored = P(&stored as *const Stored as *mut Stored);
        launch(
            candidates_grid(m, n),
            CANDIDATE_BLOCK as usize,
            CANDIDATE_SHARED_BYTES,
            |e| unsafe { candidates(e, *stored.get()) },
        );
        let list = |counts: &[u32], cand: &[u32], i: usize| {
            let mut l = cand[i * TF32_CAP..][..counts[i] as usize].to_vec();
            l.sort_unstable();
            l
        };
        for i in 0..m {
            let want: Vec<u32> = (0..n)
                .filter(|&j| may_be_near(approx[i * lda + j], self.bound(i, j), t_sq[i]))
                .map(|j| j as u32)
                .collect();
            assert_eq!(list(&counts, &cand, i), want, "{what}: query {i} scanned");
            let stored = list(&stored_counts, &stored_cand, i);
            assert_eq!(stored, want, "{what}: query {i} stored");
        }
        (counts, cand)
    }
}

/// The group of training row `j` (see `epilogue`): 64 consecutive rows, or for 16 those of
/// one lane in a warp's 64 (rows `2q` and `2q + 1` of every 8).
fn group_of(j: usize, group: usize) -> usize {
    if group == 64 {
        j / 64
    } else {
        j / 64 * 4 + j % 8 / 2
    }
}

/// The whole prefilter for `k` nearest by `metric` with selection `method`, against the exact
/// search: the k smallest keys of every training row's exact distance.
fn search(s: Shape, q: &[f32], x: &[f32], k: usize, metric: PairMetric, method: u32, what: &str) {
    let data = Data::new(s, q, x);
    let (m, n, d, ldg) = (s.m, s.n, s.d, data.ldg());
    let (gkeys, approx) = data.groups(what);

    // Step 2: the k smallest group keys, in tiles of `stream_tile(k)` as the host takes them.
    let mut best = vec![0u64; m * k];
    let mut first = 0;
    while first < ldg {
        let cols = stream_tile(k).min(ldg - first);
        let tile = Tile {
            dist: core::ptr::null(),
            keys: gkeys[first..].as_ptr(),
            ld: ldg,
            cols,
            first_index: 0,
            best: best.as_mut_ptr(),
            k,
            fresh: first == 0,
            last: first + cols == ldg,
        };
        let tile = P(&tile as *const Tile as *mut Tile);
        launch(
            m,
            SELECT_BLOCK as usize,
            select_method_shared_bytes(method, k),
            |e| unsafe {
                match method {
                    BY_KMIN => select::<BY_KMIN, _>(e, *tile.get()),
                    BY_RADIX => select::<BY_RADIX, _>(e, *tile.get()),
                    _ => select::<BY_BITONIC, _>(e, *tile.get()),
                }
            },
        );
        first += cols;
    }
    for i in 0..m {
        let mut want = gkeys[i * ldg..][..ldg].to_vec();
        want.sort_unstable();
        want.resize(k.max(ldg), NO_KEY);
        assert_eq!(
            &best[i * k..][..k],
            &want[..k],
            "{what}: query {i} group keys kept"
        );
    }

    // Step 3: their exact keys and the threshold; step 4; step 5.
    let (mut t_sq, mut counts) = (vec![f32::NAN; m], vec![7u32; m]);
    let mut overflow = vec![7u32; m];
    let mut exact = Exact {
        q: q.as_ptr(),
        q_norms: data.qn.as_ptr(),
        x: x.as_ptr(),
        x_norms: data.xn.as_ptr(),
        d,
        metric,
        k,
        best: best.as_mut_ptr(),
        t_sq: t_sq.as_mut_ptr(),
        counts: counts.as_mut_ptr(),
        cand: core::ptr::null(),
        overflow: core::ptr::null_mut(),
    };
    let pa = P(&exact as *const Exact as *mut Exact);
    launch(
        m,
        SELECT_BLOCK as usize,
        THRESHOLD_SHARED_BYTES,
        |e| unsafe { threshold(e, *pa.get()) },
    );
    assert_eq!(counts, vec![0; m], "{what}: counts cleared");
    let (counts, cand) = data.candidates(&approx, &t_sq, what);
    (exact.counts, exact.cand, exact.overflow) = (
        counts.as_ptr().cast_mut(),
        cand.as_ptr(),
        overflow.as_mut_ptr(),
    );
    let pa = P(&exact as *const Exact as *mut Exact);
    launch(m, SELECT_BLOCK as usize, RERANK_SHARED_BYTES, |e| unsafe {
        match method {
            BY_KMIN => rerank::<BY_KMIN, _>(e, *pa.get()),
            BY_RADIX => rerank::<BY_RADIX, _>(e, *pa.get()),
            _ => rerank::<BY_BITONIC, _>(e, *pa.get()),
        }
    });
    assert_eq!(overflow, vec![0; m], "{what}: overflow");
    for i in 0..m {
        let qi = &q[i * d..][..d];
        let mut want: Vec<u64> = (0..n)
            .map(|j| key(distance(metric, qi, &x[j * d..][..d]), j as u32))
            .collect();
        want.sort_unstable();
        let got = &best[i * k..][..k];
        let show = |keys: &[u64]| -> Vec<(u32, f32)> {
            keys.iter()
                .map(|&c| (key_index(c), key_distance(c)))
                .collect()
        };
        assert_eq!(
            got,
            &want[..k],
            "{what}: query {i}: {:?} vs {:?}",
            show(got),
            show(&want[..k])
        );
    }
}

/// Reproducible values in `[-1, 1)`.
fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed);
    (0..len).map(|_| 2.0 * rng.unit() - 1.0).collect()
}

fn shape(m: usize, n: usize, d: usize, group: usize, tiles: usize) -> Shape {
    Shape {
        m,
        n,
        d,
        group,
        xc: tf32_xc(d, 256),
        tiles,
    }
}

#[test]
fn emulated_prefilter_equals_the_exact_search() {
    use PairMetric::{Euclidean, SqEuclidean};
    // n past a whole tile, d not a multiple of 4 (word copies), blocks of two tiles and of one.
    let s = shape(7, 300, 5, 16, 2);
    search(
        s,
        &values(7 * 5, 1),
        &values(300 * 5, 2),
        4,
        SqEuclidean,
        BY_KMIN,
        "n % 128 ≠ 0",
    );
    // d = 1, k = 1.
    let s = shape(3, 130, 1, 16, 1);
    search(
        s,
        &values(3, 3),
        &values(130, 4),
        1,
        Euclidean,
        BY_BITONIC,
        "d = 1, k = 1",
    );
    // k = n: fewer groups than k, so the threshold is ∞ and every row a candidate.
    let s = shape(4, 40, 8, 16, 1);
    search(
        s,
        &values(4 * 8, 5),
        &values(40 * 8, 6),
        40,
        SqEuclidean,
        BY_RADIX,
        "k = n",
    );
    // Duplicate rows, queries on training rows and exact ties on a coarse grid (every product
    // and sum exact); d a multiple of 4, not of 8.
    let grid = |len: usize, seed: usize| -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7919 + seed * 104_729) % 9) as f32 * 0.5 - 2.0)
            .collect()
    };
    let (n, d) = (200, 12);
    let mut x = grid(n * d, 7);
    x.copy_within(0..d, 9 * d);
    x.copy_within(3 * d..4 * d, 150 * d);
    let mut q = grid(6 * d, 8);
    q[..d].copy_from_slice(&x[9 * d..10 * d]);
    q[2 * d..3 * d].copy_from_slice(&x[150 * d..151 * d]);
    search(
        shape(6, n, d, 16, 1),
        &q,
        &x,
        10,
        Euclidean,
        BY_BITONIC,
        "duplicates and ties",
    );
    // Large norms, small differences: the bound admits every row and the exact re-rank decides;
    // groups of 64 (a quad's lanes merged by shuffles), all three tiles in one block.
    let far = |len: usize, seed: u64| -> Vec<f32> {
        values(len, seed)
            .iter()
            .map(|v| 1000.0 + v * 1e-2)
            .collect()
    };
    let s = shape(5, 260, 3, 64, 3);
    search(
        s,
        &far(5 * 3, 9),
        &far(260 * 3, 10),
        5,
        SqEuclidean,
        BY_KMIN,
        "large norms",
    );
}

/// Two query tiles (the second of two rows), two training tiles (the second partial) in one
/// block and more dimensions than the query tile holds, so that the queries are restaged per
/// slice (two chunks, then one) and again at the second training tile: the approximations stay within the bound, the group keys are the groups' minima, and
/// the candidates of the second scan are the formula's for thresholds that take none, some or
/// all of the rows. Group keys without the stored approximations are the same.
#[test]
fn emulated_scan_over_query_tiles_and_dimension_slices() {
    let s = Shape {
        m: 130,
        n: 200,
        d: 70,
        group: 64,
        xc: 64,
        tiles: 2,
    };
    let (q, x) = (values(s.m * s.d, 11), values(s.n * s.d, 12));
    let data = Data::new(s, &q, &x);
    let (gkeys, approx) = data.groups("slices");
    let mut again = vec![0u64; gkeys.len()];
    data.scan(SCAN_GROUPS, &mut again, None, &[], &mut [], &mut []);
    assert_eq!(again, gkeys, "group keys without approximations");
    let t_sq: Vec<f32> = (0..s.m)
        .map(|i| match i % 3 {
            0 => -1.0,
            1 => f32::INFINITY,
            _ => data.qn[i] + 20.0 + i as f32 * 0.1,
        })
        .collect();
    let (counts, _) = data.candidates(&approx, &t_sq, "slices");
    assert!(
        counts.iter().any(|&c| c > 0 && (c as usize) < s.n),
        "some rows only"
    );
}
