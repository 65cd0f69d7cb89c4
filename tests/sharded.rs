//! Sharded k-means: a fit over shards equals the single-process fit on the concatenated rows,
//! bit for bit (labels, centroids, inertia, iterations), however the rows are split; with a
//! GPU, shards on the GPU equal the CPU's single-process fit.

use kmeans_knn::kmeans::shard::{Reply, Request, Shard, WeightScale};
use kmeans_knn::{
    Device, EmptyClusters, GpuSet, Init, KMeans, KMeansModel, KMeansParams, MatrixView, Metric,
};
use kmeans_knn_tests::{blobs, gpu, lattice, uniform};

/// The rows `data` (`n × d`) as shards of the given sizes, on `device`.
fn shards(data: &[f32], d: usize, sizes: &[usize], device: Device) -> Vec<Shard> {
    let mut first = 0;
    sizes
        .iter()
        .map(|&rows| {
            let part = data[first * d..(first + rows) * d].to_vec();
            let shard = Shard::new(
                MatrixView::from_vec(part, rows, d).unwrap(),
                first as u64,
                device,
            );
            first += rows;
            shard.unwrap()
        })
        .collect()
}

/// Every shard's labels, in row order.
fn labels(shards: &mut [Shard]) -> Vec<u32> {
    shards
        .iter_mut()
        .flat_map(|s| match s.handle(&Request::Labels).unwrap() {
            Reply::Labels(l) => l,
            other => panic!("{other:?}"),
        })
        .collect()
}

/// Splits of `n` rows: one shard, uneven shards, a shard of one row, many small shards.
fn splits(n: usize) -> Vec<Vec<usize>> {
    let mut out = vec![vec![n]];
    if n >= 3 {
        out.push(vec![1, n - 1]);
        out.push(vec![n / 3, 1, n - n / 3 - 1]);
    }
    if n >= 10 {
        let mut small = vec![7; n / 7];
        small.push(n % 7);
        small.retain(|&s| s > 0);
        out.push(small);
    }
    out
}

fn assert_same(case: &str, whole: &KMeansModel, sharded: &KMeansModel, labels: &[u32]) {
    assert_eq!(sharded.centroids, whole.centroids, "{case}: centroids");
    assert_eq!(labels, whole.labels.as_slice(), "{case}: labels");
    assert_eq!(
        sharded.inertia.to_bits(),
        whole.inertia.to_bits(),
        "{case}: inertia"
    );
    assert_eq!(sharded.n_iter, whole.n_iter, "{case}: iterations");
    assert_eq!(sharded.converged, whole.converged, "{case}");
    assert_eq!(sharded.cluster_sizes, whole.cluster_sizes, "{case}: sizes");
}

/// Fits `params` on the whole of `data` on the CPU and over every split on `device`.
fn check(case: &str, data: &[f32], d: usize, params: KMeansParams, device: Device) {
    check_splits(case, data, d, params, device, splits(data.len() / d));
}

/// [`check`] over the shard sizes of `splits` only.
fn check_splits(
    case: &str,
    data: &[f32],
    d: usize,
    params: KMeansParams,
    device: Device,
    splits: Vec<Vec<usize>>,
) {
    let n = data.len() / d;
    let whole = params
        .clone()
        .device(Device::Cpu)
        .fit(MatrixView::new(data, n, d).unwrap())
        .unwrap();
    for sizes in splits {
        let mut shards = shards(data, d, &sizes, device);
        let sharded = params.fit_sharded(&mut shards).unwrap();
        let case = format!("{case}, shards of {sizes:?}");
        assert_same(&case, &whole, &sharded, &labels(&mut shards));
    }
}

fn cases() -> Vec<(&'static str, Vec<f32>, usize, KMeansParams)> {
    let p = |k| KMeans::params(k).seed(5).max_iter(60);
    vec![
        ("k-means++ uniform d=3", uniform(900, 3, 1), 3, p(6)),
        (
            "cosine (spherical) k-means++ blobs d=5",
            blobs(5, 90, 5, 12).0,
            5,
            p(5).metric(Metric::Cosine),
        ),
        (
            "cosine k-means|| n_init=2, lattice ties",
            lattice(400, 3, 3, 13)
                .into_iter()
                .map(|v| v + 0.25)
                .collect(),
            3,
            p(7).metric(Metric::Cosine)
                .init(Init::KMeansParallel)
                .n_init(2),
        ),
        (
            "cosine from given centroids (scaled to unit length)",
            uniform(300, 2, 14),
            2,
            p(3).metric(Metric::Cosine)
                .init(Init::Centroids(vec![2.0, 0.0, 0.0, -3.0, -1.0, 1.0])),
        ),
        (
            "k-means|| blobs d=5",
            blobs(4, 120, 5, 2).0,
            5,
            p(4).init(Init::KMeansParallel),
        ),
        (
            "k-means|| uniform k=40 L1",
            uniform(700, 4, 3),
            4,
            p(40).init(Init::KMeansParallel).metric(Metric::L1),
        ),
        (
            "random points n_init=3",
            uniform(500, 2, 4),
            2,
            p(5).init(Init::RandomPoints).n_init(3),
        ),
        (
            "random labels (empty clusters at the start)",
            uniform(40, 2, 5),
            2,
            p(30).init(Init::RandomLabels),
        ),
        (
            "lattice ties and duplicates, k-means++ n_init=2",
            lattice(600, 2, 3, 6),
            2,
            p(12).n_init(2),
        ),
        (
            "empty clusters relocated to the farthest rows",
            lattice(300, 1, 2, 7),
            1,
            p(3).init(Init::Centroids(vec![0.0, 0.5, 100.0])),
        ),
        (
            "empty clusters kept",
            lattice(300, 1, 2, 7),
            1,
            p(3).init(Init::Centroids(vec![0.0, 0.5, 100.0]))
                .empty_clusters(EmptyClusters::KeepPrevious),
        ),
        (
            "tol 0, max_iter reached",
            uniform(400, 6, 8),
            6,
            p(9).tol(0.0).max_iter(4),
        ),
        ("k = n", uniform(13, 2, 9), 2, p(13)),
        (
            "large tol stops on the shift",
            uniform(800, 3, 10),
            3,
            p(7).tol(0.05),
        ),
    ]
}

#[test]
fn sharded_fits_equal_the_single_process_fit_on_the_cpu() {
    for (case, data, d, params) in cases() {
        check(case, &data, d, params, Device::Cpu);
    }
}

#[test]
fn sharded_fits_on_the_gpu_equal_the_cpu_fit() {
    let Some(gpu) = gpu("sharded_fits_on_the_gpu_equal_the_cpu_fit") else {
        return;
    };
    for (case, data, d, params) in cases() {
        check(case, &data, d, params, gpu);
    }
    // Shapes past the fused small step: the register-tiled assign with global sums, and TF32.
    let data = uniform(3000, 40, 11);
    check(
        "tiled d=40 k=150",
        &data,
        40,
        KMeans::params(150).seed(2).max_iter(8),
        gpu,
    );
    let tf32 = KMeans::params(150)
        .seed(2)
        .max_iter(8)
        .precision(kmeans_knn::Precision::Tf32);
    let mut parts = shards(&data, 40, &[1000, 2000], gpu);
    let whole = tf32
        .clone()
        .device(gpu)
        .fit(MatrixView::new(&data, 3000, 40).unwrap())
        .unwrap();
    let sharded = tf32.fit_sharded(&mut parts).unwrap();
    assert_same("tf32", &whole, &sharded, &labels(&mut parts));
}

/// Small shapes for compute-sanitizer (run with this binary's `sanitize_` filter): the step by
/// step seeding of a sharded fit on GPU shards, whose trials pass takes the accepted row from
/// device memory and whose locate kernel applies it.
#[test]
fn sanitize_sharded_seeding_on_the_gpu() {
    let Some(gpu) = gpu("sanitize_sharded_seeding_on_the_gpu") else {
        return;
    };
    let data = uniform(300, 37, 3);
    for init in [Init::KMeansPlusPlus, Init::KMeansParallel] {
        let params = KMeans::params(5).seed(2).max_iter(3).init(init);
        // One, two and three shards: the same kernels as 43 shards of 7 rows, which under
        // racecheck's blocking launches take minutes.
        let few = splits(300).into_iter().take(3).collect();
        check_splits("sanitize", &data, 37, params, gpu, few);
    }
}

#[test]
fn bad_shards_are_typed_errors() {
    let data = uniform(20, 2, 1);
    // A gap between shards.
    let mut gap = vec![
        Shard::new(
            MatrixView::from_vec(data[..10].to_vec(), 5, 2).unwrap(),
            0,
            Device::Cpu,
        )
        .unwrap(),
        Shard::new(
            MatrixView::from_vec(data[10..20].to_vec(), 5, 2).unwrap(),
            6,
            Device::Cpu,
        )
        .unwrap(),
    ];
    let err = KMeans::params(2).fit_sharded(&mut gap).unwrap_err();
    assert!(err.to_string().contains("rows 5.. were expected"), "{err}");
    // A non-finite value names its row in the whole data set.
    let mut bad = data.clone();
    bad[7] = f32::NAN;
    let err = Shard::new(MatrixView::from_vec(bad, 20, 2).unwrap(), 100, Device::Cpu)
        .err()
        .unwrap();
    assert!(err.to_string().contains("row 103"), "{err}");
    // k above the number of rows of all shards.
    let mut two = shards(&data, 2, &[4, 6], Device::Cpu);
    assert!(KMeans::params(11).fit_sharded(&mut two).is_err());
    // Requests a shard cannot serve.
    let mut shard = shards(&data, 2, &[10], Device::Cpu).remove(0);
    let step = Request::Step {
        centroids: vec![0.0; 4],
    };
    assert!(shard.handle(&step).is_err(), "no fit prepared");
    let locate = Request::SeedLocate {
        accept: Some(3),
        draws: vec![1],
        weights: WeightScale::new(1.0, 10),
    };
    assert!(shard.handle(&locate).is_err(), "seeding out of order");
    assert!(shard.handle(&Request::Moments { scales: vec![1] }).is_err());
    // Seeding weights capped for fewer rows than the shard's last (its sums could overflow),
    // and owner counts for ids never handed out.
    let prepare = Request::Prepare(kmeans_knn::kmeans::shard::Prepare {
        k: 2,
        metric: Metric::L2,
        precision: kmeans_knn::Precision::Exact,
        scales: vec![20, 20],
        seeds_at_once: 0,
        inertia_exponent: 20,
    });
    shard.handle(&prepare).unwrap();
    let nearest = |weights| Request::SeedNearest {
        points: vec![0.5, 0.5],
        first_id: 0,
        fresh: true,
        weights,
    };
    let err = shard
        .handle(&nearest(WeightScale::new(1.0, 9)))
        .unwrap_err();
    assert!(err.to_string().contains("its sums could overflow"), "{err}");
    shard.handle(&nearest(WeightScale::new(1.0, 10))).unwrap();
    for ids in [0, 2, 1 << 40] {
        let owners = Request::SeedOwnerCounts { ids };
        assert!(shard.handle(&owners).is_err(), "{ids} owner ids");
    }
    assert!(matches!(
        shard.handle(&Request::SeedOwnerCounts { ids: 1 }).unwrap(),
        Reply::Counts(c) if c == [10]
    ));
}

/// Cosine: a row of norm 0 is named by its row in the whole data set, and a shard refuses to
/// prepare a fit whose metric does not match the rows its `Columns` chose.
#[test]
fn sharded_cosine_errors_are_typed() {
    let mut data = uniform(40, 3, 5);
    data[3 * 21..3 * 22].fill(0.0);
    let mut parts = shards(&data, 3, &[15, 25], Device::Cpu);
    let err = KMeans::params(3)
        .metric(Metric::Cosine)
        .fit_sharded(&mut parts)
        .unwrap_err();
    assert!(
        matches!(err, kmeans_knn::Error::ZeroVector { row: 21, .. }),
        "{err}"
    );
    let prepare = |metric| {
        Request::Prepare(kmeans_knn::kmeans::shard::Prepare {
            k: 3,
            metric,
            precision: kmeans_knn::Precision::Exact,
            scales: vec![0; 3],
            seeds_at_once: 0,
            inertia_exponent: 0,
        })
    };
    parts[0]
        .handle(&Request::Columns { unit_rows: false })
        .unwrap();
    assert!(parts[0].handle(&prepare(Metric::Cosine)).is_err());
    parts[0]
        .handle(&Request::Columns { unit_rows: true })
        .unwrap();
    assert!(parts[0].handle(&prepare(Metric::L2)).is_err());
    parts[0].handle(&prepare(Metric::Cosine)).unwrap();
}

/// The GPU-set fits, one at a time: a fit whose GPUs' NCCL communicator another fit holds adds
/// its sums on the host (the same bits, but not the path [`assert_summed_by_nccl`] checks).
static GPU_SET_FITS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_gpu_set_fit_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    GPU_SET_FITS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `Device::Gpus`: the rows cut into one shard per GPU, each on its own thread. On one GPU the
/// set repeats its ordinal, which runs the same path (shards, threads, exact sums) as several.
#[test]
fn fits_over_a_gpu_set_equal_one_gpu_and_the_cpu() {
    let Some(gpu) = gpu("fits_over_a_gpu_set_equal_one_gpu_and_the_cpu") else {
        return;
    };
    let Device::Cuda(ordinal) = gpu else {
        unreachable!("the gate resolves to a GPU")
    };
    let _one = one_gpu_set_fit_at_a_time();
    let mut sets = vec![vec![ordinal; 2], vec![ordinal; 3]];
    sets.extend(distinct_gpus());
    let mut all = cases();
    all.push((
        "tiled d=40 k=150",
        uniform(3000, 40, 11),
        40,
        KMeans::params(150).seed(2).max_iter(8),
    ));
    for (case, data, d, params) in all {
        let n = data.len() / d;
        let view = MatrixView::new(&data, n, d).unwrap();
        let cpu = params.clone().device(Device::Cpu).fit(&view).unwrap();
        let one = params.clone().device(gpu).fit(&view).unwrap();
        assert_same(&format!("{case}: one GPU"), &cpu, &one, &one.labels);
        for set in &sets {
            let device = Device::Gpus(GpuSet::new(set).unwrap());
            let several = params.clone().device(device).fit(&view).unwrap();
            let case = format!("{case}: {device}");
            assert_same(&case, &cpu, &several, &several.labels);
            assert_summed_by_nccl(set, &several);
        }
    }
}

/// Sample weights over a GPU set (its ordinal repeated on one GPU): the weighted fit of one GPU
/// and of the CPU, bit for bit.
#[test]
fn weighted_fits_over_a_gpu_set_equal_the_cpu() {
    let Some(Device::Cuda(ordinal)) = gpu("weighted_fits_over_a_gpu_set_equal_the_cpu") else {
        return;
    };
    let _one = one_gpu_set_fit_at_a_time();
    let data = uniform(3000, 40, 21);
    let view = MatrixView::new(&data, 3000, 40).unwrap();
    let weights: Vec<f32> = (0..3000).map(|i| ((i * 37) % 11) as f32 * 0.173).collect();
    for params in [
        KMeans::params(30).seed(2).max_iter(10),
        KMeans::params(30)
            .seed(2)
            .max_iter(10)
            .init(Init::KMeansParallel)
            .metric(Metric::Cosine),
    ] {
        let cpu = params
            .clone()
            .device(Device::Cpu)
            .fit_weighted(&view, &weights)
            .unwrap();
        for set in std::iter::once(vec![ordinal, ordinal]).chain(distinct_gpus()) {
            let device = Device::Gpus(GpuSet::new(&set).unwrap());
            let several = params
                .clone()
                .device(device)
                .fit_weighted(&view, &weights)
                .unwrap();
            assert_same(
                &format!("weighted {device}"),
                &cpu,
                &several,
                &several.labels,
            );
            assert_summed_by_nccl(&set, &several);
        }
    }
}

/// Every GPU of this machine, when it has two or more.
fn distinct_gpus() -> Option<Vec<usize>> {
    Some((0..kmeans_knn::gpu_count()).collect()).filter(|all: &Vec<usize>| all.len() > 1)
}

/// A set of distinct GPUs adds its sums through NCCL where NCCL is required (the GPU bundle's
/// machines have it); a set that repeats a GPU adds them on the host.
fn assert_summed_by_nccl(set: &[usize], model: &KMeansModel) {
    let distinct = set.iter().collect::<std::collections::BTreeSet<_>>().len() == set.len();
    let nccl = model.device.contains("sums added by NCCL");
    if !distinct {
        assert!(!nccl, "{}", model.device);
    } else if std::env::var("KMEANS_KNN_REQUIRE_NCCL").is_ok_and(|v| v == "1") {
        assert!(nccl, "{}", model.device);
    }
}
