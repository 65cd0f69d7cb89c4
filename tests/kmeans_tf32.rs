//! `Precision::Tf32`: a TF32 tensor-core shortlist re-scored in exact FP32. Labels and
//! distances equal the exact CPU assignment bit for bit, whatever the data (near-tie lattices,
//! duplicated centroids, large offsets, d = 1, k = 1, k = n), and so do whole fits: centroids,
//! inertia and iteration counts.

use kmeans_knn::bench::assign_once;
use kmeans_knn::{Device, Error, KMeans, MatrixView, Metric, Precision};
use kmeans_knn_tests::{blobs, gpu, lattice, same_partition, sample_weights, uniform};

struct Shape {
    name: String,
    data: Vec<f32>,
    n: usize,
    d: usize,
    centroids: Vec<f32>,
}

fn shape(name: &str, data: Vec<f32>, d: usize, centroids: Vec<f32>) -> Shape {
    Shape {
        name: name.to_string(),
        n: data.len() / d,
        data,
        d,
        centroids,
    }
}

fn random(n: usize, d: usize, k: usize, seed: u64) -> Shape {
    shape(
        &format!("uniform n={n} d={d} k={k}"),
        uniform(n, d, seed),
        d,
        uniform(k, d, seed + 1000),
    )
}

/// Shapes the TF32 kernel serves (past the small step: more than 96 dimensions, or centroids
/// that do not fit its shared memory), and a few the small step takes.
fn shapes() -> Vec<Shape> {
    let mut v = vec![
        random(1000, 3, 5, 1),
        random(257, 1, 3, 2),
        random(777, 9, 1, 3),
        random(3001, 75, 127, 4),
        random(1500, 129, 200, 5),
        random(20000, 128, 1024, 6),
        random(5000, 64, 300, 7),
        random(2000, 256, 130, 8),
        random(1001, 100, 1, 9),
        random(300, 1, 40_000, 10),
        // Four dimensions (16-byte staging) over 157 centroid tiles, and one centroid with the
        // dimensions past the point tile.
        random(600, 4, 20_000, 11),
        random(400, 160, 1, 12),
        // Hopper's warpgroup kernel (d a multiple of 4 up to 128): k = 1 over a last block of
        // one point, and nine pieces of 4 dimensions in a chunk padded to 32.
        random(129, 4, 1, 13),
        random(1000, 36, 260, 14),
    ];
    // k = n: every point is also a centroid (distance 0 for itself), on both kernels.
    let data = uniform(300, 130, 9);
    v.push(shape("k=n=300 d=130", data.clone(), 130, data));
    let data = uniform(300, 12, 10);
    v.push(shape("k=n=300 d=12", data.clone(), 12, data));
    // Integer lattices: duplicate points and exact distance ties between centroids, which the
    // exact re-check must resolve to the lowest index like the CPU.
    for (n, d, k, levels) in [
        (2000, 2, 10, 4),
        (3000, 16, 64, 3),
        (1000, 3, 27, 3),
        (1500, 128, 300, 2),
        (999, 100, 129, 3),
        (500, 1, 30_000, 50),
    ] {
        let name = format!("lattice n={n} d={d} k={k}");
        v.push(shape(
            &name,
            lattice(n, d, levels, 11),
            d,
            lattice(k, d, levels, 12),
        ));
    }
    // Duplicated centroids: every one three times; the lowest index wins.
    let mut centroids = uniform(50, 128, 13);
    centroids.extend_from_within(..);
    centroids.extend_from_within(..50 * 128);
    v.push(shape(
        "duplicated d=128 k=150",
        uniform(1300, 128, 14),
        128,
        centroids,
    ));
    // Large norms, small differences: everything offset by 1e4.
    v.push(shape(
        "offset 1e4 d=128 k=200",
        offset(uniform(2000, 128, 15)),
        128,
        offset(uniform(200, 128, 16)),
    ));
    v
}

/// `v` offset by 1e4: large norms, small differences.
fn offset(mut v: Vec<f32>) -> Vec<f32> {
    v.iter_mut().for_each(|x| *x += 1e4);
    v
}

fn check_assignment(gpu: Device, s: &Shape) {
    let x = MatrixView::new(&s.data, s.n, s.d).unwrap();
    let (cpu_labels, cpu_dist) =
        assign_once(Device::Cpu, &x, &s.centroids, Metric::L2, Precision::Exact).unwrap();
    let (labels, dist) = assign_once(gpu, &x, &s.centroids, Metric::L2, Precision::Tf32).unwrap();
    for i in 0..s.n {
        assert_eq!(labels[i], cpu_labels[i], "{}: point {i}", s.name);
        assert_eq!(
            dist[i].to_bits(),
            cpu_dist[i].to_bits(),
            "{}: point {i}: distance {} vs {}",
            s.name,
            dist[i],
            cpu_dist[i]
        );
    }
}

#[test]
fn tf32_labels_equal_exact() {
    let Some(gpu) = gpu("tf32_labels_equal_exact") else {
        return;
    };
    for s in shapes() {
        check_assignment(gpu, &s);
    }
}

/// Whole fits: TF32 on the GPU gives the exact CPU fit bit for bit.
#[test]
fn tf32_fits_equal_exact() {
    let Some(gpu) = gpu("tf32_fits_equal_exact") else {
        return;
    };
    let bits = |c: &[f32]| c.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let (data, truth) = blobs(12, 200, 130, 5);
    let mut cases = vec![("blobs d=130", data, 130, 12)];
    cases.push(("uniform d=128", uniform(6000, 128, 21), 128, 50));
    cases.push(("lattice d=100", lattice(3000, 100, 3, 22), 100, 40));
    let mut far = uniform(2500, 128, 23);
    far.iter_mut().for_each(|v| *v += 1e4);
    cases.push(("offset 1e4 d=128", far, 128, 30));
    for (name, data, d, k) in cases {
        let x = MatrixView::new(&data, data.len() / d, d).unwrap();
        let params = KMeans::params(k).seed(2).n_init(2).max_iter(40);
        let tf32 = params
            .clone()
            .precision(Precision::Tf32)
            .device(gpu)
            .fit(&x)
            .unwrap();
        let exact = params
            .precision(Precision::Exact)
            .device(Device::Cpu)
            .fit(&x)
            .unwrap();
        assert_eq!(tf32.labels, exact.labels, "{name}");
        assert_eq!(bits(&tf32.centroids), bits(&exact.centroids), "{name}");
        assert_eq!(tf32.inertia.to_bits(), exact.inertia.to_bits(), "{name}");
        assert_eq!(tf32.n_iter, exact.n_iter, "{name}");
        if name.starts_with("blobs") {
            assert!(tf32.converged && same_partition(&tf32.labels, &truth));
        }
    }
}

/// Small shapes through every path of both TF32 kernels (word and 16-byte staging, several
/// centroid tiles, dimensions past the point tile; on Hopper the warpgroup kernel for d a
/// multiple of 4 up to 128); the GPU bundle runs this under compute-sanitizer.
#[test]
fn sanitize_kmeans_tf32() {
    let Some(gpu) = gpu("sanitize_kmeans_tf32") else {
        return;
    };
    for s in [
        random(300, 5, 7, 31),
        random(200, 8, 130, 32),
        random(130, 129, 3, 33),
        random(70, 160, 20, 34),
        random(200, 1, 40_000, 35),
        random(100, 4, 40_000, 36),
        random(150, 132, 129, 37),
        random(130, 128, 200, 38),
        random(140, 36, 130, 39),
        // The warpgroup kernel with fewer than three centroids, and k = n.
        random(129, 4, 1, 40),
        random(150, 64, 2, 41),
        shape(
            "k=n=140 d=12",
            uniform(140, 12, 42),
            12,
            uniform(140, 12, 42),
        ),
        // Offsets of 1e4: most points go to the full pass (queued from both kernels).
        shape(
            "offset 1e4 d=36 k=300",
            offset(uniform(150, 36, 43)),
            36,
            offset(uniform(300, 36, 44)),
        ),
        shape(
            "offset 1e4 d=7 k=130",
            offset(uniform(150, 7, 45)),
            7,
            offset(uniform(130, 7, 46)),
        ),
    ] {
        check_assignment(gpu, &s);
    }
    let data = uniform(500, 6, 35);
    let model = KMeans::params(9)
        .seed(4)
        .max_iter(5)
        .precision(Precision::Tf32)
        .device(gpu)
        .fit(MatrixView::new(&data, 500, 6).unwrap())
        .unwrap();
    assert!(model.labels.iter().all(|&l| l < 9));
    // Enough points per cluster for the update's sorted sums (80,000 on an H100) and its
    // column slices (60,000: too few a block to sort); `update_sums_equal_the_cpu`.
    for n in [80_000, 60_000] {
        let (d, k) = (128, 48);
        let data = uniform(n, d, 36);
        let model = KMeans::params(k)
            .seed(4)
            .max_iter(2)
            .precision(Precision::Tf32)
            .device(gpu)
            .fit(MatrixView::new(&data, n, d).unwrap())
            .unwrap();
        assert!(model.labels.iter().all(|&l| l < k as u32));
    }
}

#[test]
fn tf32_needs_l2() {
    let data = uniform(100, 3, 41);
    let err = KMeans::params(4)
        .metric(Metric::L1)
        .precision(Precision::Tf32)
        .device(Device::Cpu)
        .fit(MatrixView::new(&data, 100, 3).unwrap())
        .unwrap_err();
    match &err {
        Error::InvalidParameter { name, reason } => {
            assert_eq!(*name, "precision");
            assert!(reason.contains("l2"), "{reason}");
        }
        other => panic!("expected an invalid-parameter error, got {other:?}"),
    }
}

#[test]
fn tf32_on_the_cpu_is_exact() {
    let data = uniform(800, 7, 42);
    let x = MatrixView::new(&data, 800, 7).unwrap();
    let p = KMeans::params(6).seed(9).device(Device::Cpu);
    let exact = p.clone().fit(&x).unwrap();
    let tf32 = p.precision(Precision::Tf32).fit(&x).unwrap();
    assert_eq!(exact.labels, tf32.labels);
    assert_eq!(exact.centroids, tf32.centroids);
    assert_eq!(exact.inertia, tf32.inertia);
}

/// The default, `Precision::Auto`, on shapes where it takes the TF32 assignment (d a multiple of 4
/// from 32 to 512, k ≥ 1024) and where it does not: whole fits equal to `Precision::Exact`'s bit
/// for bit.
#[test]
fn auto_precision_fits_equal_exact() {
    let Some(gpu) = gpu("auto_precision_fits_equal_exact") else {
        return;
    };
    for (n, d, k) in [
        (6000, 128, 300),
        (3000, 64, 256),
        (2000, 130, 20),
        (4000, 40, 300),
        (2500, 512, 1024),
    ] {
        let data = uniform(n, d, 50 + d as u64);
        let x = MatrixView::new(&data, n, d).unwrap();
        let p = KMeans::params(k).seed(3).max_iter(6).device(gpu);
        let auto = p.clone().fit(&x).unwrap();
        let exact = p.precision(Precision::Exact).fit(&x).unwrap();
        let what = format!("n={n} d={d} k={k}");
        assert_eq!(auto.labels, exact.labels, "{what}");
        let bits = |c: &[f32]| c.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&auto.centroids), bits(&exact.centroids), "{what}");
        assert_eq!(auto.inertia.to_bits(), exact.inertia.to_bits(), "{what}");
        assert_eq!(auto.n_iter, exact.n_iter, "{what}");
    }
}

/// Shapes whose update takes the sums in shared memory (the TF32 step leaves the sums to the
/// update): sorted by label in each block (`kmeans_accumulate_sorted`: 150,000 points, k = 64,
/// 378 a block on an H100) or a slice of columns at a time (`kmeans_accumulate_columns`:
/// 120,000 points, k = 256, too few a block to sort; d = 100 leaves the last slice part
/// empty). Whole fits equal the exact CPU fit bit for bit, with and without sample weights.
#[test]
fn update_sums_equal_the_cpu() {
    let Some(gpu) = gpu("update_sums_equal_the_cpu") else {
        return;
    };
    let bits = |c: &[f32]| c.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for (n, d, k) in [(150_000, 128, 64), (120_000, 128, 256), (120_000, 100, 256)] {
        let data = uniform(n, d, 60);
        let x = MatrixView::new(&data, n, d).unwrap();
        let weights = sample_weights(n, false, 61);
        for weighted in [false, true] {
            let p = KMeans::params(k).seed(5).max_iter(4);
            let fit = |p: kmeans_knn::KMeansParams| match weighted {
                true => p.fit_weighted(&x, &weights).unwrap(),
                false => p.fit(&x).unwrap(),
            };
            let tf32 = fit(p.clone().precision(Precision::Tf32).device(gpu));
            let cpu = fit(p.precision(Precision::Exact).device(Device::Cpu));
            let what = format!("n={n} d={d} k={k} weighted={weighted}");
            assert_eq!(tf32.labels, cpu.labels, "{what}");
            assert_eq!(bits(&tf32.centroids), bits(&cpu.centroids), "{what}");
            assert_eq!(tf32.inertia.to_bits(), cpu.inertia.to_bits(), "{what}");
            assert_eq!(tf32.n_iter, cpu.n_iter, "{what}");
        }
    }
}

#[test]
fn precision_parses() {
    assert_eq!("tf32".parse::<Precision>().unwrap(), Precision::Tf32);
    assert_eq!("exact".parse::<Precision>().unwrap(), Precision::Exact);
    assert_eq!("auto".parse::<Precision>().unwrap(), Precision::Auto);
    assert_eq!(Precision::default(), Precision::Auto);
    assert!("bf16".parse::<Precision>().is_err());
}
