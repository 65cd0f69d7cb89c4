//! `kmeans-knn radius`: every training row within a distance of each query (exact).

use super::knn::{device_name, metric_name, same_columns};
use super::{CliError, CsvOpts, Ui, about, check_outputs};
use crate::io::npz::Csr;
use crate::io::{Outputs, read_matrix};
use crate::{Device, KnnIndex};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub const EXAMPLES: &str = "\
Examples:
  kmeans-knn radius --train train.csv --query query.csv --radius 0.5     # indices on stdout
  kmeans-knn radius --train train.npy --query q.npy --radius 2 --metric l1 \\
      --indices-out nn.npy --distances-out d.npy --offsets-out offsets.npy
  kmeans-knn radius --train train.npy --query q.npy --radius 0.3 --graph-out g.npz

A neighbour is a training row at distance <= the radius, in the metric's units (squared for
sqeuclidean; for ip, where distances are −x·y, the radius may be negative). The outputs are CSR
arrays: query i's neighbours are indices[offsets[i] .. offsets[i + 1]], nearest first (equal
distances by index), with their distances. --graph-out writes them as a sparse queries × train
matrix of distances that scipy.sparse.load_npz reads.";

/// Arguments of `radius`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Training points (CSV or NPY), one per row.
    #[arg(long, value_name = "FILE")]
    train: PathBuf,
    /// Query points (CSV or NPY) with the same number of columns.
    #[arg(long, value_name = "FILE")]
    query: PathBuf,
    /// Largest distance of a neighbour (inclusive), in the metric's units.
    #[arg(long, value_name = "R", allow_negative_numbers = true)]
    radius: f32,
    #[command(flatten)]
    metric: super::metric::MetricArgs,
    /// Write every query's neighbour indices here, one after another (.npy or CSV).
    #[arg(long, value_name = "FILE")]
    indices_out: Option<PathBuf>,
    /// Write their distances here (.npy or CSV).
    #[arg(long, value_name = "FILE")]
    distances_out: Option<PathBuf>,
    /// Write the queries + 1 offsets of every query's neighbours here (.npy or CSV).
    #[arg(long, value_name = "FILE")]
    offsets_out: Option<PathBuf>,
    /// Write the queries × train sparse matrix of distances here (.npz, scipy's CSR format).
    #[arg(long, value_name = "FILE")]
    graph_out: Option<PathBuf>,
    /// Where to compute: auto, cpu, gpu, gpu:N; or several GPUs, gpu:N,M,… or gpu:all.
    #[arg(long, value_name = "DEVICE", default_value = "auto")]
    pub(super) device: Device,
    /// GPU memory the index may use, e.g. 8GiB or 500M (default: 70 % of what is free).
    #[arg(long, value_name = "BYTES")]
    gpu_memory: Option<super::Bytes>,
    #[command(flatten)]
    layout: super::LayoutArgs,
    /// Print one JSON object on stdout (radius, queries, neighbours, device, seconds).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    csv: CsvOpts,
}

pub fn run(mut a: Args, ui: Ui) -> Result<(), CliError> {
    let outs: Vec<&Path> = [
        &a.indices_out,
        &a.distances_out,
        &a.offsets_out,
        &a.graph_out,
    ]
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
    a.device = a
        .device
        .for_pairs(query.rows as f64 * train.rows as f64, train.cols);

    let start = Instant::now();
    let spinner = ui.spinner(&format!(
        "searching {} queries among {} points",
        query.rows, train.rows
    ));
    let budget = a.gpu_memory.map(|b| b.0);
    let device = a.layout.on(a.device);
    let index = KnnIndex::with_memory_budget(train.view(), metric, device, budget);
    let result = about(&a.train, index)
        .and_then(|index| about(&a.query, index.radius_search(query.view(), a.radius)));
    spinner.finish_and_clear();
    let result = result?;
    let secs = start.elapsed().as_secs_f64();
    let nq = result.queries();
    let found = result.indices.len();

    let mut outputs = Outputs::new();
    if let Some(p) = &a.indices_out {
        outputs.vector(p, &result.indices)?;
    }
    if let Some(p) = &a.distances_out {
        outputs.vector(p, &result.distances)?;
    }
    if let Some(p) = &a.offsets_out {
        let offsets: Vec<i64> = result.offsets.iter().map(|&o| o as i64).collect();
        outputs.vector(p, &offsets)?;
    }
    if let Some(p) = &a.graph_out {
        let csr = Csr {
            rows: nq,
            cols: train.rows,
            indptr: &result.offsets,
            indices: &result.indices,
            data: &result.distances,
        };
        outputs.csr_npz(p, &csr)?;
    }
    outputs.commit()?;

    let device = device_name(a.device);
    let metric = metric_name(metric);
    if a.json {
        return super::print_json(&json!({
            "radius": a.radius,
            "queries": nq,
            "train": train.rows,
            "d": train.cols,
            "metric": metric,
            "neighbours": found,
            "device": device,
            "seconds": secs,
            "outputs": outs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        }));
    }
    let summary = format!(
        "radius: {nq} queries × {} training points ({} dimensions), radius {}, {metric} metric\n  neighbours  {found}\n  device      {device}\n  elapsed     {}\n",
        train.rows,
        train.cols,
        a.radius,
        super::seconds(secs),
    );
    if outs.is_empty() {
        // The neighbours go to stdout (a line per query, maybe empty), the summary to stderr.
        let mut text = String::with_capacity(found * 6 + nq);
        for q in 0..nq {
            let line: Vec<String> = result.indices_of(q).iter().map(u32::to_string).collect();
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

/// What the entries of `knn --graph-out` hold (scikit-learn's `kneighbors_graph` modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum GraphMode {
    /// 1 for every neighbour.
    Connectivity,
    /// The neighbour's distance.
    Distance,
}

/// Adds the queries × `train_rows` k-neighbours graph (`k` neighbours a query) to `outputs` as
/// an `.npz` at `path`.
pub fn knn_graph(
    outputs: &mut Outputs,
    path: &Path,
    train_rows: usize,
    k: usize,
    indices: &[u32],
    distances: &[f32],
    mode: GraphMode,
) -> Result<(), CliError> {
    let rows = indices.len() / k;
    let indptr: Vec<usize> = (0..=rows).map(|r| r * k).collect();
    let ones;
    let data = match mode {
        GraphMode::Distance => distances,
        GraphMode::Connectivity => {
            ones = vec![1f32; indices.len()];
            &ones[..]
        }
    };
    let csr = Csr {
        rows,
        cols: train_rows,
        indptr: &indptr,
        indices,
        data,
    };
    Ok(outputs.csr_npz(path, &csr)?)
}
