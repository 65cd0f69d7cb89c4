//! k-means past the GPU memory budget: rows beyond it take turns on the GPU in batches, and the
//! fit equals the resident one and the CPU's, bit for bit. A budget per regime (resident, a few
//! batches, many, refused), from the plan's own footprint, makes every path stream on small shapes.

use kmeans_knn::bench::kmeans_least_budget;
use kmeans_knn::{Device, Error, GpuSet, Init, KMeans, KMeansModel, KMeansParams, MatrixView};
use kmeans_knn::{Metric, Precision};
use kmeans_knn_tests::{assert_same_fit, gpu, lattice, uniform};

/// Budgets for each streaming regime of a fit with `params` of `rows × d` rows per GPU of
/// `device`: resident, two and three batches, sixteen, and a byte below the least that streams
/// (refused). The least budget itself, a few rows a batch, is
/// `a_budget_of_a_few_rows_a_batch_fits_and_does_not_grow_with_n`'s.
fn budgets(params: &KMeansParams, rows: usize, d: usize, device: Device) -> Vec<usize> {
    let one = match device {
        Device::Gpus(set) => Device::Cuda(set.ordinals().unwrap()[0]),
        device => device,
    };
    let least = |batches| {
        kmeans_least_budget(params, rows, d, one, batches)
            .unwrap()
            .expect("a GPU has a budget")
    };
    let mut budgets: Vec<usize> = [1, 2, 3, 16].map(|b| least(Some(b))).into();
    budgets.push(least(None) - 1);
    budgets
}

/// The shards a fit ran on (1 for a resident fit), from its device description.
fn batches(model: &KMeansModel) -> usize {
    model
        .device
        .split_once(" shards on ")
        .map_or(1, |(count, _)| count.parse().unwrap())
}

/// Fits `params` on `device` (with `weights`, when given) under a budget of each regime
/// ([`budgets`]): each fit equals the CPU's, but for the one below the least budget, which is
/// refused for its budget; returns the most batches seen.
fn under_budgets(
    case: &str,
    view: &MatrixView<'_>,
    weights: Option<&[f32]>,
    params: &KMeansParams,
    device: Device,
) -> usize {
    let fit = |params: KMeansParams| match weights {
        Some(w) => params.fit_weighted(view, w),
        None => params.fit(view),
    };
    let cpu = fit(params.clone().device(Device::Cpu)).unwrap();
    let parts = match device {
        Device::Gpus(set) => set.ordinals().unwrap().len(),
        _ => 1,
    };
    let (rows, d) = (view.rows().div_ceil(parts), view.cols());
    let (mut most, mut refused) = (0, 0);
    for budget in budgets(params, rows, d, device) {
        let case = format!("{case}, budget {budget}");
        match fit(params.clone().device(device).memory_budget(budget)) {
            Ok(fit) => {
                assert_same_fit(&case, &cpu, &fit);
                most = most.max(batches(&fit));
            }
            Err(Error::InvalidParameter {
                name: "memory budget",
                ..
            }) => refused += 1,
            Err(e) => panic!("{case}: {e}"),
        }
    }
    assert_eq!(
        refused, 1,
        "{case}: only the budget below the least is refused"
    );
    most
}

fn cases() -> Vec<(&'static str, Vec<f32>, usize, KMeansParams)> {
    let p = |k| KMeans::params(k).seed(4).max_iter(12);
    vec![
        (
            "k-means++ tiled d=40 k=150",
            uniform(20_000, 40, 1),
            40,
            p(150),
        ),
        (
            "k-means|| small step d=16 k=6",
            uniform(80_000, 16, 2),
            16,
            p(6).init(Init::KMeansParallel),
        ),
        (
            "random points n_init=2, L1",
            uniform(60_000, 24, 3),
            24,
            p(20).init(Init::RandomPoints).n_init(2).metric(Metric::L1),
        ),
        (
            "random labels, ties and duplicates",
            lattice(60_000, 32, 2, 4),
            32,
            p(9).init(Init::RandomLabels),
        ),
        (
            "cosine k-means||",
            uniform(60_000, 32, 6)
                .into_iter()
                .map(|v| v + 0.125)
                .collect(),
            32,
            p(12).metric(Metric::Cosine).init(Init::KMeansParallel),
        ),
        (
            "tf32",
            uniform(60_000, 40, 5),
            40,
            p(64).precision(Precision::Tf32),
        ),
    ]
}

#[test]
fn streamed_fits_equal_the_resident_fit_and_the_cpu() {
    let Some(gpu) = gpu("streamed_fits_equal_the_resident_fit_and_the_cpu") else {
        return;
    };
    for (case, data, d, params) in cases() {
        let view = MatrixView::new(&data, data.len() / d, d).unwrap();
        let most = under_budgets(case, &view, None, &params, gpu);
        assert!(
            most >= 3,
            "{case}: no budget streamed in 3 batches or more ({most})"
        );
    }
}

/// A GPU set whose parts each exceed the budget: batches on every part, all equal to the CPU.
#[test]
fn a_gpu_set_streams_each_part() {
    let Some(Device::Cuda(ordinal)) = gpu("a_gpu_set_streams_each_part") else {
        return;
    };
    let set = Device::Gpus(GpuSet::new(&[ordinal, ordinal]).unwrap());
    let data = uniform(40_000, 40, 6);
    let view = MatrixView::new(&data, 40_000, 40).unwrap();
    let params = KMeans::params(50).seed(1).max_iter(10);
    assert!(under_budgets("gpu set", &view, None, &params, set) >= 4);
}

/// Sample weights stream too (units per batch, quantised once); a budget below what stays on the
/// GPU is refused, naming the least that would do.
#[test]
fn weighted_streamed_fits_equal_the_cpu_and_small_budgets_are_refused() {
    let Some(gpu) = gpu("weighted_streamed_fits_equal_the_cpu_and_small_budgets_are_refused")
    else {
        return;
    };
    let data = uniform(60_000, 40, 7);
    let view = MatrixView::new(&data, 60_000, 40).unwrap();
    let weights: Vec<f32> = (0..60_000)
        .map(|i| ((i * 37) % 11) as f32 * 0.173)
        .collect();
    let params = KMeans::params(40).seed(3).max_iter(8);
    let most = under_budgets("weighted", &view, Some(&weights), &params, gpu);
    assert!(
        most >= 3,
        "no budget streamed in 3 batches or more ({most})"
    );
    let e = params
        .device(gpu)
        .memory_budget(1000)
        .fit(&view)
        .unwrap_err()
        .to_string();
    assert!(e.contains("even with the rows streamed in batches"), "{e}");
}

/// Small shapes for compute-sanitizer (this binary's `sanitize_` filter): seeding over batches
/// whose rows, staged seeds included, are released and uploaded again between turns.
#[test]
fn sanitize_streamed_seeding_and_steps() {
    let Some(gpu) = gpu("sanitize_streamed_seeding_and_steps") else {
        return;
    };
    let data = uniform(6000, 48, 8);
    let view = MatrixView::new(&data, 6000, 48).unwrap();
    for init in [Init::KMeansPlusPlus, Init::KMeansParallel] {
        let params = KMeans::params(5).seed(2).max_iter(3).init(init);
        let cpu = params.clone().device(Device::Cpu).fit(&view).unwrap();
        let fit = params
            .device(gpu)
            .memory_budget(1200 << 10)
            .fit(&view)
            .unwrap();
        assert!(batches(&fit) >= 2, "{}", fit.device);
        assert_same_fit("sanitize", &cpu, &fit);
    }
}

/// Fits `params` on the CPU, resident on `gpu` and on `gpu` within `budget` bytes; asserts the
/// three equal bit for bit and returns the batches the budgeted fit streamed in.
fn streamed_equals_resident_and_cpu(
    case: &str,
    view: &MatrixView<'_>,
    params: &KMeansParams,
    gpu: Device,
    budget: usize,
) -> usize {
    let cpu = params.clone().device(Device::Cpu).fit(view).unwrap();
    let resident = params.clone().device(gpu).fit(view).unwrap();
    let streamed = params
        .clone()
        .device(gpu)
        .memory_budget(budget)
        .fit(view)
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    assert_same_fit(&format!("{case}: resident"), &cpu, &resident);
    assert_same_fit(&format!("{case}: streamed"), &cpu, &streamed);
    batches(&streamed)
}

/// Rows narrower than their per-row state stream: labels, distances and seeding state go to host
/// memory between a batch's turns, so a budget smaller than the rows themselves fits, and the
/// fit equals the resident one and the CPU's for d = 1, 3 and 16, k-means++ and k-means‖, and n
/// not a multiple of the batch.
#[test]
fn narrow_rows_stream_under_a_budget_smaller_than_the_rows() {
    let Some(gpu) = gpu("narrow_rows_stream_under_a_budget_smaller_than_the_rows") else {
        return;
    };
    let n = 100_003;
    for d in [1, 3, 16] {
        let data = uniform(n, d, 10 + d as u64);
        let view = MatrixView::new(&data, n, d).unwrap();
        let rows_bytes = n * d * 4;
        for init in [Init::KMeansPlusPlus, Init::KMeansParallel] {
            let params = KMeans::params(8).seed(5).max_iter(10).init(init.clone());
            let budget = rows_bytes / 2;
            let case = format!("d={d}, {init:?}, budget {budget} < rows {rows_bytes}");
            let count = streamed_equals_resident_and_cpu(&case, &view, &params, gpu, budget);
            // n is prime: the last batch is shorter than the others.
            assert!(count >= 3, "{case}: {count} batches");
        }
    }
}

/// The least budget that still fits streams a few rows a batch, and the fit is still the CPU's;
/// it does not grow with the rows: the per-row state streams with them.
#[test]
fn a_budget_of_a_few_rows_a_batch_fits_and_does_not_grow_with_n() {
    let Some(gpu) = gpu("a_budget_of_a_few_rows_a_batch_fits_and_does_not_grow_with_n") else {
        return;
    };
    let params = KMeans::params(3).seed(7).max_iter(4);
    let fit = |n: usize, budget: usize| {
        let data = uniform(n, 3, 20);
        let view = MatrixView::new(&data, n, 3).unwrap();
        let streamed = params.clone().device(gpu).memory_budget(budget).fit(&view);
        let cpu = params.clone().device(Device::Cpu).fit(&view).unwrap();
        streamed.inspect(|s| assert_same_fit(&format!("n = {n}, budget {budget}"), &cpu, s))
    };
    // The least budget for 600 rows of 3 columns, to 64 bytes (a row and its state take more).
    let refused_for_budget = |r: Result<KMeansModel, Error>| match r {
        Ok(_) => false,
        Err(Error::InvalidParameter {
            name: "memory budget",
            ..
        }) => true,
        Err(e) => panic!("{e}"),
    };
    let (mut refused, mut fits) = (1024, 1 << 20);
    assert!(refused_for_budget(fit(600, refused)) && !refused_for_budget(fit(600, fits)));
    while fits - refused > 64 {
        let mid = (refused + fits) / 2;
        match refused_for_budget(fit(600, mid)) {
            true => refused = mid,
            false => fits = mid,
        }
    }
    let count = batches(&fit(600, fits).unwrap());
    assert!(count >= 100, "{count} batches of 600 rows at {fits} bytes");
    // Three times the rows fit the same least budget: a row a batch needs the same whatever n.
    let more = fit(1800, fits).unwrap();
    assert!(batches(&more) >= count, "{}", more.device);
}

/// A budget below what even the centroids and sums need is refused, saying so.
#[test]
fn a_budget_below_the_centroids_names_them() {
    let Some(gpu) = gpu("a_budget_below_the_centroids_names_them") else {
        return;
    };
    let data = uniform(4000, 16, 9);
    let view = MatrixView::new(&data, 4000, 16).unwrap();
    let e = KMeans::params(1000)
        .device(gpu)
        .memory_budget(256 << 10)
        .fit(&view)
        .unwrap_err()
        .to_string();
    assert!(e.contains("the centroids and cluster sums alone"), "{e}");
    assert!(e.contains("even with the rows streamed in batches"), "{e}");
}
