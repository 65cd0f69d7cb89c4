//! `kmeans-knn minibatch`: mini-batch k-means of a CSV/NPY file, with the outputs of `kmeans`
//! (its own subcommand because its options and their defaults are scikit-learn's
//! `MiniBatchKMeans`', not Lloyd's).

use super::kmeans::{FitOutputs, SavedModel};
use super::{CliError, CsvOpts, FitOpts, Ui, about, check_outputs};
use crate::io::{Outputs, read_matrix};
use crate::{Device, Init, Metric, MiniBatchKMeans, MiniBatchKMeansModel, MiniBatchParams};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub const EXAMPLES: &str = "\
Examples:
  kmeans-knn minibatch embeddings.npy --k 1024 --batch-size 4096 --labels-out labels.npy
  kmeans-knn minibatch points.csv --k 8 --seed 7 --save-model model.json --json
  kmeans-knn minibatch big.npy --k 256 --max-iter 5 --max-no-improvement 0 --device cpu

Each step draws --batch-size rows at random and moves their centroids towards them; a fit stops
after --max-iter passes over the data, or earlier when the smoothed batch inertia has not
improved for --max-no-improvement steps (or on --tol). The labels and inertia are those of every
row under the final centroids; the same seed gives the same result on CPU and GPU. The outputs
are those of `kmeans` (the saved model works with `predict`); --json adds steps and batch_size.";

/// Arguments of `minibatch`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Points to cluster, one per row: CSV (header detected) or NPY (2-D, any float or int
    /// dtype).
    #[arg(value_name = "INPUT")]
    input: PathBuf,
    /// Number of clusters.
    #[arg(short = 'k', long = "k", value_name = "K")]
    k: usize,
    /// Rows per step (at most the number of rows).
    #[arg(long, value_name = "N", default_value_t = 1024)]
    batch_size: usize,
    /// Initialisation on --init-size random rows: kmeans++, kmeans|| (k-means‖) or random (k
    /// distinct rows).
    #[arg(long, value_name = "METHOD", default_value = "kmeans++")]
    init: Init,
    /// Rows drawn for the initialisation [default: 3 × batch size, at least 3k].
    #[arg(long, value_name = "N")]
    init_size: Option<usize>,
    /// Initialisations tried, the one with the lowest inertia on other random rows wins
    /// [default: 3 for random, else 1].
    #[arg(long, value_name = "N")]
    n_init: Option<usize>,
    /// Seed of every random choice; the same seed gives the same result on CPU and GPU.
    #[arg(long, value_name = "S", default_value_t = 0)]
    seed: u64,
    /// Most passes over the data (epochs).
    #[arg(long, value_name = "N", default_value_t = 100)]
    max_iter: usize,
    /// Stop when a step's squared centroid shift is at most T × the mean feature variance (0:
    /// off).
    #[arg(long, value_name = "T", default_value_t = 0.0)]
    tol: f64,
    /// Stop after N steps without improvement of the smoothed batch inertia (0: off).
    #[arg(long, value_name = "N", default_value_t = 10)]
    max_no_improvement: usize,
    /// Centroids with fewer rows than this fraction of the largest count move to random rows
    /// of the batch every 10k rows (0: off).
    #[arg(long, value_name = "R", default_value_t = 0.01)]
    reassignment_ratio: f64,
    /// Assignment distance: l2 (squared Euclidean) or l1 (Manhattan).
    #[arg(long, value_name = "METRIC", default_value = "l2")]
    metric: Metric,
    /// Where to compute: auto (GPU when there is one, else CPU), cpu, gpu, gpu:N.
    #[arg(long, value_name = "DEVICE", default_value = "auto")]
    pub(super) device: Device,
    #[command(flatten)]
    out: FitOutputs,
    #[command(flatten)]
    csv: CsvOpts,
}

impl Args {
    fn params(&self) -> MiniBatchParams {
        MiniBatchKMeans::params(self.k)
            .batch_size(self.batch_size)
            .init(self.init.clone())
            .init_size(self.init_size)
            .n_init(self.n_init)
            .seed(self.seed)
            .max_iter(self.max_iter)
            .tol(self.tol)
            .max_no_improvement((self.max_no_improvement > 0).then_some(self.max_no_improvement))
            .reassignment_ratio(self.reassignment_ratio)
            .metric(self.metric)
            .device(self.device)
    }

    /// The parameters as the saved model records them.
    fn saved_fit(&self, params: &MiniBatchParams) -> FitOpts {
        FitOpts {
            k: self.k,
            init: self.init.clone(),
            seed: self.seed,
            max_iter: self.max_iter,
            tol: self.tol,
            n_init: params.runs(),
            device: self.device,
            gpu_memory: None,
            empty_clusters: crate::EmptyClusters::FarthestPoint,
        }
    }
}

pub fn run(a: Args, ui: Ui) -> Result<(), CliError> {
    let outs = a.out.paths();
    check_outputs(outs.iter().copied())?;
    let table = read_matrix(&a.input, &a.csv.read())?;
    let start = Instant::now();
    let model = about(&a.input, fit_with_progress(ui, &a, table.view()))?;
    let secs = start.elapsed().as_secs_f64();

    let mut outputs = Outputs::new();
    a.out
        .write_fit(&mut outputs, &model, table.header.as_deref())?;
    let summary = json!({
        "k": model.k,
        "n": table.rows,
        "d": table.cols,
        "iterations": model.n_iter,
        "steps": model.n_steps,
        "batch_size": a.batch_size.min(table.rows),
        "inertia": model.inertia,
        "converged": model.converged,
        "device": model.device,
        "seconds": secs,
        "metric": a.metric.to_string(),
        "cluster_sizes": model.cluster_sizes,
        "outputs": outs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
    });
    let text = summary_text(&a, &model, table.rows, secs, &outs);
    // With a model file the labels are not printed (an output file was asked for).
    let labels = match &a.out.save_model {
        Some(p) => {
            let fit = a.saved_fit(&a.params());
            let saved = SavedModel::new(model.kmeans, &fit, &a.input, table.header.clone());
            outputs.json(p, &saved)?;
            Vec::new()
        }
        None => model.kmeans.labels,
    };
    outputs.commit()?;
    a.out.print(ui, &labels, &summary, &text)
}

/// Fits with a progress bar over the steps.
fn fit_with_progress<'a>(
    ui: Ui,
    a: &Args,
    data: impl Into<crate::MatrixView<'a>>,
) -> crate::Result<MiniBatchKMeansModel> {
    let params = a.params();
    let bar = ui.iterations_bar(&a.saved_fit(&params));
    bar.set_prefix("mini-batch k-means");
    let b = bar.clone();
    let params = params.on_step(move |s| {
        b.set_length(s.n_steps as u64);
        b.set_position(s.step as u64);
        b.set_message(format!("steps, batch inertia {:.4e}", s.inertia));
    });
    let result = params.fit(data);
    bar.finish_and_clear();
    result
}

fn summary_text(a: &Args, m: &MiniBatchKMeansModel, n: usize, secs: f64, outs: &[&Path]) -> String {
    let mut s = format!(
        "mini-batch k-means: {} — {n} points × {} dimensions, k = {}, {} metric\n",
        a.input.display(),
        m.d,
        m.k,
        a.metric
    );
    s += &format!("  device      {}\n", m.device);
    s += &format!(
        "  steps       {} of {} rows ({} epochs){}\n",
        m.n_steps,
        a.batch_size.min(n),
        m.n_iter,
        if m.converged {
            ", stopped early"
        } else {
            ", stopped at --max-iter"
        }
    );
    s += &super::fit_summary_tail(m, secs, outs);
    s
}
