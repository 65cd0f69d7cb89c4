//! `kmeans-knn knn`: exact k nearest neighbours.

use super::{CliError, CsvOpts, Ui, about, check_outputs};
use crate::io::{Outputs, Table, read_matrix};
use crate::{Device, DistanceMetric, KnnIndex, Selection};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub const EXAMPLES: &str = "\
Examples:
  kmeans-knn knn --train train.csv --query query.csv --k 5       # indices on stdout
  kmeans-knn knn --train train.npy --query query.npy --k 25 \\
      --indices-out nn.npy --distances-out d.npy
  kmeans-knn knn --train docs.npy --query q.npy --k 10 --metric cosine --select bitonic
  kmeans-knn knn --train x.npy --query x.npy --k 15 --graph-out g.npz --graph-mode distance

Metrics: l2 (Euclidean), sqeuclidean, l1 (Manhattan), ip (negated inner product: larger
products are nearer), cosine (1 − cosine similarity), chebyshev (max |x − y|), minkowski with
--p P (P ≥ 1: (Σ |x − y|^P)^(1/P); 1 is l1, 2 is l2). Selection of the k smallest: kmin (k rounds
of parallel minimum), bitonic (sort), radix (radix select, then a sort of the k), or auto (picked
per run by timing the three on a sample).
Row i of the outputs lists query i's neighbours, nearest first, as 0-based training row indices.";

/// Arguments of `knn`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Training points (CSV or NPY), one per row.
    #[arg(long, value_name = "FILE")]
    train: PathBuf,
    /// Query points (CSV or NPY) with the same number of columns.
    #[arg(long, value_name = "FILE")]
    query: PathBuf,
    /// Neighbours per query.
    #[arg(short = 'k', long = "k", value_name = "K")]
    k: usize,
    #[command(flatten)]
    metric: super::metric::MetricArgs,
    /// Top-k selection: auto, kmin, bitonic, radix.
    #[arg(long = "select", value_name = "METHOD", default_value = "auto")]
    selection: Selection,
    /// Write the queries × k neighbour indices here (.npy or CSV).
    #[arg(long, value_name = "FILE")]
    indices_out: Option<PathBuf>,
    /// Write the queries × k neighbour distances here (.npy or CSV).
    #[arg(long, value_name = "FILE")]
    distances_out: Option<PathBuf>,
    /// Write the queries × train k-neighbours graph here (.npz, scipy's CSR format).
    #[arg(long, value_name = "FILE")]
    graph_out: Option<PathBuf>,
    /// What the graph's entries hold: connectivity (1) or distance.
    #[arg(
        long,
        value_name = "MODE",
        default_value = "connectivity",
        requires = "graph_out"
    )]
    graph_mode: super::radius::GraphMode,
    /// Where to compute: auto, cpu, gpu, gpu:N; or several GPUs, gpu:N,M,… or gpu:all, over
    /// which the training rows are cut.
    #[arg(long, value_name = "DEVICE", default_value = "auto")]
    pub(super) device: Device,
    /// GPU memory the index may use, e.g. 8GiB or 500M (default: 70 % of what is free); a
    /// larger training set stays in host memory and streams through the GPU (same answer).
    #[arg(long, value_name = "BYTES")]
    gpu_memory: Option<super::Bytes>,
    #[command(flatten)]
    layout: super::LayoutArgs,
    /// Print one JSON object on stdout (k, queries, device, seconds, selection, streamed).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    csv: CsvOpts,
}

/// Checks that `query` has the training data's columns; the message names both files.
pub fn same_columns(train: (&Path, &Table), query: (&Path, &Table)) -> Result<(), CliError> {
    if train.1.cols != query.1.cols {
        return Err(CliError::usage(format!(
            "{}: the rows have {} columns but the training rows in {} have {}",
            query.0.display(),
            query.1.cols,
            train.0.display(),
            train.1.cols
        )));
    }
    Ok(())
}

/// Checks `1 ≤ k ≤ n` for `n` training rows.
pub fn check_k(k: usize, n: usize, train: &Path) -> Result<(), CliError> {
    if k == 0 {
        return Err(CliError::usage("--k must be at least 1"));
    }
    if k > n {
        return Err(CliError::usage(format!(
            "--k {k} is larger than the number of training rows in {} ({n})",
            train.display()
        )));
    }
    Ok(())
}

/// The backend a device choice runs on, for summaries.
pub fn device_name(device: Device) -> String {
    device.describe().unwrap_or_else(|_| device.to_string())
}

pub fn run(mut a: Args, ui: Ui) -> Result<(), CliError> {
    let outs: Vec<&Path> = [&a.indices_out, &a.distances_out, &a.graph_out]
        .into_iter()
        .flatten()
        .map(PathBuf::as_path)
        .collect();
    check_outputs(outs.iter().copied())?;
    let metric = a.metric.get()?;
    let opts = a.csv.read();
    let train = read_matrix(&a.train, &opts)?;
    let query = read_matrix(&a.query, &opts)?;
    same_columns((&a.train, &train), (&a.query, &query))?;
    check_k(a.k, train.rows, &a.train)?;
    let pairs = query.rows as f64 * train.rows as f64;
    a.device = a.device.for_pairs(pairs, train.cols);

    let start = Instant::now();
    let spinner = ui.spinner(&format!(
        "searching {} queries among {} points",
        query.rows, train.rows
    ));
    let budget = a.gpu_memory.map(|b| b.0);
    let device = a.layout.on(a.device);
    let index = KnnIndex::with_memory_budget(train.view(), metric, device, budget);
    let mut streamed = false;
    let result = about(&a.train, index).and_then(|index| {
        streamed = index.is_streamed();
        about(
            &a.query,
            index.with_selection(a.selection).search(query.view(), a.k),
        )
    });
    spinner.finish_and_clear();
    let result = result?;
    let secs = start.elapsed().as_secs_f64();
    let (nq, k) = result.indices.dim();
    let indices: Vec<u32> = result.indices.iter().copied().collect();
    let distances: Vec<f32> = result.distances.iter().copied().collect();

    let mut outputs = Outputs::new();
    if let Some(p) = &a.indices_out {
        outputs.matrix(p, nq, k, &indices, None)?;
    }
    if let Some(p) = &a.distances_out {
        outputs.matrix(p, nq, k, &distances, None)?;
    }
    if let Some(p) = &a.graph_out {
        let (n, mode) = (train.rows, a.graph_mode);
        super::radius::knn_graph(&mut outputs, p, n, k, &indices, &distances, mode)?;
    }
    outputs.commit()?;

    let device = device_name(a.device);
    let selection = result.selection.to_string();
    if a.json {
        return super::print_json(&json!({
            "k": k,
            "queries": nq,
            "train": train.rows,
            "d": train.cols,
            "metric": metric_name(metric),
            "device": device,
            "seconds": secs,
            "selection": selection,
            "streamed": streamed,
            "outputs": outs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        }));
    }
    let summary = format!(
        "knn: {nq} queries × {} training points ({} dimensions), k = {k}, {} metric\n  device      {device}{}\n  selection   {selection}\n  elapsed     {}\n",
        train.rows,
        train.cols,
        metric_name(metric),
        if streamed {
            " (training rows streamed: above --gpu-memory)"
        } else {
            ""
        },
        super::seconds(secs),
    );
    if outs.is_empty() {
        // The neighbours go to stdout, the summary to stderr.
        let mut text = String::with_capacity(nq * k * 6);
        for row in indices.chunks(k) {
            let line: Vec<String> = row.iter().map(u32::to_string).collect();
            text += &line.join(",");
            text.push('\n');
        }
        super::print_stdout(&text)?;
        ui.note(summary.trim_end());
        Ok(())
    } else {
        super::print_stdout(&format!(
            "{summary}  wrote       {}\n",
            super::list_paths(&outs)
        ))
    }
}

/// The command-line name of a distance metric.
pub fn metric_name(m: DistanceMetric) -> String {
    match m {
        DistanceMetric::Euclidean => "l2",
        DistanceMetric::SqEuclidean => "sqeuclidean",
        DistanceMetric::L1 => "l1",
        DistanceMetric::InnerProduct => "ip",
        DistanceMetric::Cosine => "cosine",
        DistanceMetric::Chebyshev => "chebyshev",
        DistanceMetric::Minkowski(_) => return m.to_string(),
    }
    .to_string()
}

/// How `classify` and `regress` weigh the k neighbours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NeighbourWeights {
    /// Each neighbour counts the same.
    Uniform,
    /// Weighted by 1 / distance.
    Distance,
}

impl From<NeighbourWeights> for crate::Weights {
    fn from(w: NeighbourWeights) -> Self {
        match w {
            NeighbourWeights::Uniform => crate::Weights::Uniform,
            NeighbourWeights::Distance => crate::Weights::Distance,
        }
    }
}
