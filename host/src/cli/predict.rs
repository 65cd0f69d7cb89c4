//! `kmeans-knn predict`: label rows with a saved model.

use super::kmeans::SavedModel;
use super::{CliError, CsvOpts, Ui, about, check_outputs};
use crate::Device;
use crate::io::{Outputs, read_matrix};
use std::path::{Path, PathBuf};
use std::time::Instant;

pub const EXAMPLES: &str = "\
Examples:
  kmeans-knn kmeans train.csv --k 8 --save-model model.json
  kmeans-knn predict --model model.json new.csv                 # labels on stdout, one per line
  kmeans-knn predict --model model.json new.npy --labels-out labels.npy --transform dist.npy

--transform writes the n × k distances to every centroid (Euclidean for an l2 model, Manhattan
for an l1 model).";

/// Arguments of `predict`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A model saved by `kmeans-knn kmeans --save-model`.
    #[arg(long, value_name = "FILE")]
    model: PathBuf,
    /// Rows to label: CSV or NPY with the model's number of columns.
    #[arg(value_name = "INPUT")]
    input: PathBuf,
    /// Write the labels here (.npy or CSV) instead of printing them.
    #[arg(long, value_name = "FILE")]
    labels_out: Option<PathBuf>,
    /// Write the n × k distances of every row to every centroid here (.npy or CSV).
    #[arg(long, value_name = "FILE")]
    transform: Option<PathBuf>,
    /// Where to compute: auto, cpu, gpu, gpu:N.
    #[arg(long, value_name = "DEVICE", default_value = "auto")]
    pub(super) device: Device,
    #[command(flatten)]
    csv: CsvOpts,
}

pub fn run(mut a: Args, ui: Ui) -> Result<(), CliError> {
    let outs: Vec<&Path> = [&a.labels_out, &a.transform]
        .into_iter()
        .flatten()
        .map(PathBuf::as_path)
        .collect();
    check_outputs(outs.iter().copied())?;
    let saved = SavedModel::load(&a.model)?;
    let model = saved.model;
    let table = read_matrix(&a.input, &a.csv.read())?;
    if table.cols != model.d {
        return Err(CliError::usage(format!(
            "{}: the rows have {} columns but the model {} was fitted on {}",
            a.input.display(),
            table.cols,
            a.model.display(),
            model.d
        )));
    }
    let pairs = table.rows as f64 * model.k as f64;
    a.device = a.device.for_pairs(pairs, table.cols);
    let start = Instant::now();
    let labels = about(&a.input, model.predict_on(table.view(), a.device))?;
    let mut outputs = Outputs::new();
    if let Some(p) = &a.labels_out {
        outputs.vector(p, &labels)?;
    }
    if let Some(p) = &a.transform {
        let dist = about(&a.input, model.transform(table.view()))?;
        let (n, k) = dist.dim();
        let values = dist.into_raw_vec_and_offset().0;
        outputs.matrix(p, n, k, &values, None)?;
    }
    outputs.commit()?;
    let secs = start.elapsed().as_secs_f64();
    if a.labels_out.is_none() && a.transform.is_none() {
        let mut text = String::with_capacity(labels.len() * 3);
        for l in &labels {
            text += &format!("{l}\n");
        }
        super::print_stdout(&text)?;
    }
    let device = a.device.describe().unwrap_or_else(|_| a.device.to_string());
    ui.note(&format!(
        "predict: {} rows of {} with the k = {} model {} on {} in {}{}",
        table.rows,
        a.input.display(),
        model.k,
        a.model.display(),
        device,
        super::seconds(secs),
        if outs.is_empty() {
            String::new()
        } else {
            format!("; wrote {}", super::list_paths(&outs))
        }
    ));
    Ok(())
}
