//! `kmeans-knn distances`: the distance matrix of two files, streamed in row blocks.

use super::knn::{device_name, metric_name};
use super::{CliError, CsvOpts, Ui, about, check_outputs};
use crate::io::atomic::MatrixWriter;
use crate::io::{IoError, Outputs, read_matrix};
use crate::{Device, pairwise_distances_blocks};
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

pub const EXAMPLES: &str = "\
Examples:
  kmeans-knn distances a.csv b.csv -o d.csv            # Euclidean, |A| × |B| values
  kmeans-knn distances points.npy centroids.npy --metric sqeuclidean -o d.npy
  kmeans-knn distances a.npy a.npy --metric cosine --block-mib 64 -o big.npy

Row i, column j of the output is the distance from row i of A to row j of B. The matrix is
computed and written in blocks of rows (at most --block-mib MiB each), so it may be far larger
than memory; NPY is much faster to write than CSV.";

/// Arguments of `distances`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// First matrix (CSV or NPY): the output's rows.
    #[arg(value_name = "A")]
    a: PathBuf,
    /// Second matrix (CSV or NPY), same number of columns: the output's columns.
    #[arg(value_name = "B")]
    b: PathBuf,
    #[command(flatten)]
    metric: super::metric::MetricArgs,
    /// The distance matrix (.npy or CSV).
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// Most MiB of distances computed at once.
    #[arg(long, value_name = "MIB", default_value_t = 256,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 30))]
    block_mib: usize,
    /// Where to compute: auto, cpu, gpu, gpu:N.
    #[arg(long, value_name = "DEVICE", default_value = "auto")]
    pub(super) device: Device,
    /// Print one JSON object on stdout instead of the summary.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    csv: CsvOpts,
}

pub fn run(mut a: Args, ui: Ui) -> Result<(), CliError> {
    check_outputs([a.output.as_path()])?;
    let metric = a.metric.get()?;
    let opts = a.csv.read();
    let ta = read_matrix(&a.a, &opts)?;
    let tb = read_matrix(&a.b, &opts)?;
    super::knn::same_columns((&a.a, &ta), (&a.b, &tb))?;
    let pairs = ta.rows as f64 * tb.rows as f64;
    a.device = a.device.for_pairs(pairs, ta.cols);

    let start = Instant::now();
    let mut writer = MatrixWriter::create(&a.output, ta.rows, tb.rows, "<f4", None)?;
    let bar = ui.counter("distances", ta.rows as u64);
    let mut write_error: Option<IoError> = None;
    let mut blocks = 0usize;
    let result = pairwise_distances_blocks(
        ta.view(),
        tb.view(),
        metric,
        a.device,
        Some(a.block_mib << 20),
        |_first_row, block| {
            let written = match block.as_slice() {
                Some(s) => writer.write_rows(s),
                None => writer.write_rows(&block.iter().copied().collect::<Vec<f32>>()),
            };
            blocks += 1;
            bar.inc(block.nrows() as u64);
            written.map_err(|e| {
                let reason = e.to_string();
                write_error = Some(e);
                crate::Error::InvalidParameter {
                    name: "output",
                    reason,
                }
            })
        },
    );
    bar.finish_and_clear();
    if let Some(e) = write_error {
        return Err(e.into());
    }
    about(&a.a, result)?;
    let mut outputs = Outputs::new();
    outputs.push(writer.finish()?)?;
    outputs.commit()?;
    let secs = start.elapsed().as_secs_f64();
    let device = device_name(a.device);
    if a.json {
        return super::print_json(&json!({
            "rows": ta.rows,
            "cols": tb.rows,
            "d": ta.cols,
            "metric": metric_name(metric),
            "device": device,
            "blocks": blocks,
            "seconds": secs,
            "output": a.output.display().to_string(),
        }));
    }
    super::print_stdout(&format!(
        "distances: {} × {} matrix ({} dimensions), {} metric\n  device      {device}\n  blocks      {blocks}\n  elapsed     {}\n  wrote       {}\n",
        ta.rows,
        tb.rows,
        ta.cols,
        metric_name(metric),
        super::seconds(secs),
        a.output.display()
    ))
}
