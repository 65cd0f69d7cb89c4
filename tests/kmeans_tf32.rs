//! `Precision::Tf32`: tensor-core candidates re-checked in exact FP32. Labels agree with the
//! exact CPU assignment on ≥ 99.9 % of points (all of them where ties are exact), every distance
//! is the exact FP32 distance to the chosen centroid, and fits are reproducible.

use kmeans_knn::bench::assign_once;
use kmeans_knn::{Device, Error, KMeans, MatrixView, Metric, Precision};
use kmeans_knn_tests::{blobs, gpu, lattice, same_partition, uniform};

/// The CPU's exact distance from `x` to `c`: the GEMM form with dimension-ordered FMA chains.
fn exact_distance(x: &[f32], c: &[f32]) -> f32 {
    let (mut x_sq, mut c_sq, mut dot) = (0f32, 0f32, 0f32);
    for (&a, &b) in x.iter().zip(c) {
        x_sq = a.mul_add(a, x_sq);
        c_sq = b.mul_add(b, c_sq);
        dot = a.mul_add(b, dot);
    }
    (x_sq + (-2f32).mul_add(dot, c_sq)).max(0.0)
}

struct Shape {
    name: &'static str,
    data: Vec<f32>,
    n: usize,
    d: usize,
    centroids: Vec<f32>,
    /// Exact ties everywhere (integer lattice): labels must match exactly.
    exact: bool,
}

fn shape(name: &'static str, n: usize, d: usize, k: usize, seed: u64) -> Shape {
    Shape {
        name,
        data: uniform(n, d, seed),
        n,
        d,
        centroids: uniform(k, d, seed + 1000),
        exact: false,
    }
}

fn shapes() -> Vec<Shape> {
    let mut v = vec![
        shape("n=1000 d=3 k=5", 1000, 3, 5, 1),
        shape("n=257 d=1 k=3", 257, 1, 3, 2),
        shape("n=777 d=9 k=1", 777, 9, 1, 3),
        shape("n=3001 d=75 k=127", 3001, 75, 127, 4),
        shape("n=1500 d=129 k=200", 1500, 129, 200, 5),
        shape("n=20000 d=128 k=1024", 20000, 128, 1024, 6),
        shape("n=5000 d=64 k=300", 5000, 64, 300, 7),
        shape("n=2000 d=256 k=130", 2000, 256, 130, 8),
    ];
    // k = n: every point is also a centroid (distance 0 for itself).
    let data = uniform(97, 12, 9);
    v.push(Shape {
        name: "k=n=97 d=12",
        centroids: data.clone(),
        data,
        n: 97,
        d: 12,
        exact: false,
    });
    // Integer lattices: duplicate points and exact distance ties between centroids, which the
    // exact re-check must resolve to the lowest index like the CPU.
    for (name, n, d, k, levels) in [
        ("lattice n=2000 d=2 k=10", 2000, 2, 10, 4),
        ("lattice n=3000 d=16 k=64", 3000, 16, 64, 3),
        ("lattice n=1000 d=3 k=27", 1000, 3, 27, 3),
    ] {
        let data = lattice(n, d, levels, 11);
        let centroids = lattice(k, d, levels, 12);
        v.push(Shape {
            name,
            data,
            n,
            d,
            centroids,
            exact: true,
        });
    }
    v
}

fn check_assignment(gpu: Device, s: &Shape) {
    let x = MatrixView::new(&s.data, s.n, s.d).unwrap();
    let k = s.centroids.len() / s.d;
    let (cpu_labels, cpu_dist) =
        assign_once(Device::Cpu, &x, &s.centroids, Metric::L2, Precision::Exact).unwrap();
    let (labels, dist) = assign_once(gpu, &x, &s.centroids, Metric::L2, Precision::Tf32).unwrap();
    let mut differ = 0;
    for i in 0..s.n {
        let l = labels[i] as usize;
        assert!(l < k, "{}: point {i} labelled {l} ≥ k = {k}", s.name);
        let row = &s.data[i * s.d..(i + 1) * s.d];
        let want = exact_distance(row, &s.centroids[l * s.d..(l + 1) * s.d]);
        assert_eq!(
            dist[i].to_bits(),
            want.to_bits(),
            "{}: point {i}: distance {} to centroid {l}, exact {want}",
            s.name,
            dist[i]
        );
        if labels[i] != cpu_labels[i] {
            differ += 1;
            // Only a near-tie may differ, and never towards a farther centroid by much.
            assert!(
                dist[i] >= cpu_dist[i],
                "{}: point {i}: tf32 label nearer than the exact one?",
                s.name
            );
        } else {
            assert_eq!(
                dist[i].to_bits(),
                cpu_dist[i].to_bits(),
                "{}: point {i}",
                s.name
            );
        }
    }
    if s.exact {
        assert_eq!(differ, 0, "{}: {differ} labels differ", s.name);
    } else {
        assert!(
            differ as f64 <= 0.001 * s.n as f64,
            "{}: {differ} of {} labels differ",
            s.name,
            s.n
        );
    }
    eprintln!("{}: {differ} of {} labels differ from exact", s.name, s.n);
}

#[test]
fn tf32_labels_agree_with_exact() {
    let Some(gpu) = gpu("tf32_labels_agree_with_exact") else {
        return;
    };
    for s in shapes() {
        check_assignment(gpu, &s);
    }
}

#[test]
fn tf32_fits_converge_and_are_reproducible() {
    let Some(gpu) = gpu("tf32_fits_converge_and_are_reproducible") else {
        return;
    };
    let (data, truth) = blobs(12, 200, 40, 5);
    let n = truth.len();
    let x = MatrixView::new(&data, n, 40).unwrap();
    let params = KMeans::params(12)
        .seed(1)
        .n_init(2)
        .precision(Precision::Tf32);
    let tf32 = params.clone().device(gpu).fit(&x).unwrap();
    let exact = params
        .clone()
        .precision(Precision::Exact)
        .device(Device::Cpu)
        .fit(&x)
        .unwrap();
    assert!(tf32.converged);
    assert!(same_partition(&tf32.labels, &truth));
    assert_eq!(tf32.labels, exact.labels);
    assert_eq!(tf32.centroids, exact.centroids);

    let data = uniform(6000, 32, 21);
    let x = MatrixView::new(&data, 6000, 32).unwrap();
    let params = KMeans::params(50)
        .seed(2)
        .max_iter(30)
        .precision(Precision::Tf32)
        .device(gpu);
    let a = params.fit(&x).unwrap();
    let b = params.fit(&x).unwrap();
    assert_eq!(a.labels, b.labels);
    let bits = |c: &[f32]| c.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a.centroids), bits(&b.centroids));
    assert_eq!(a.inertia.to_bits(), b.inertia.to_bits());
    assert_eq!(a.n_iter, b.n_iter);
    // The inertia is the exact sum of squared distances to the returned centroids.
    let (labels, dist) =
        assign_once(Device::Cpu, &x, &a.centroids, Metric::L2, Precision::Exact).unwrap();
    let same = labels.iter().zip(&a.labels).filter(|(p, q)| p == q).count();
    assert!(same as f64 >= 0.999 * 6000.0, "{same} of 6000");
    let inertia: f64 = dist.iter().map(|&v| v as f64).sum();
    assert!(
        (inertia - a.inertia).abs() <= 1e-4 * inertia,
        "{inertia} vs {}",
        a.inertia
    );
}

/// Small shapes through every path of the TF32 kernel (word and 16-byte staging, several
/// centroid tiles, dimensions past the point tile); the GPU bundle runs this under
/// compute-sanitizer.
#[test]
fn sanitize_kmeans_tf32() {
    let Some(gpu) = gpu("sanitize_kmeans_tf32") else {
        return;
    };
    for s in [
        shape("n=300 d=5 k=7", 300, 5, 7, 31),
        shape("n=200 d=8 k=130", 200, 8, 130, 32),
        shape("n=130 d=129 k=3", 130, 129, 3, 33),
        shape("n=70 d=160 k=20", 70, 160, 20, 34),
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

#[test]
fn precision_parses() {
    assert_eq!("tf32".parse::<Precision>().unwrap(), Precision::Tf32);
    assert_eq!("exact".parse::<Precision>().unwrap(), Precision::Exact);
    assert_eq!(Precision::default(), Precision::Exact);
    assert!("bf16".parse::<Precision>().is_err());
}
