//! `kmeans-knn regress`: kNN regression of one numeric target column, with RMSE and R².

use super::knn::{NeighbourWeights, check_k, device_name, metric_name, same_columns};
use super::{CliError, CsvOpts, SampleWeightOpts, Ui, about, check_outputs};
use crate::io::{LabelColumn, Outputs, read_labelled, read_labels, read_matrix};
use crate::{Device, DistanceMetric, KnnRegressor, MatrixView, Selection, Weights};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub const EXAMPLES: &str = "\
Examples:
  kmeans-knn regress --train train.csv --query test.csv --k 10      # predictions on stdout
  kmeans-knn regress --train t.csv --target-column first --query q.csv --k 5 \\
      --weights distance --out pred.csv
  kmeans-knn regress --train t.npy --query q.npy --k 3 --truth y.npy --json
  kmeans-knn regress --train t.csv --query q.csv --k 10 --sample-weight w.csv

Training rows carry their numeric target in the target column; query rows do not. The
prediction is the mean of the k nearest targets (--weights distance: weighted by 1 / distance;
--sample-weight FILE, one weight per training row: times each row's weight).
--truth is a file with one number per query row (an optional header line is skipped); it adds
the RMSE and R².";

/// Arguments of `regress`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Training rows (CSV or NPY): features plus a numeric target column.
    #[arg(long, value_name = "FILE")]
    train: PathBuf,
    /// Query rows to predict (CSV or NPY): features only.
    #[arg(long, value_name = "FILE")]
    query: PathBuf,
    /// Neighbours averaged per prediction.
    #[arg(short = 'k', long = "k", value_name = "K")]
    k: usize,
    /// Which column of the training file holds the target: first, last, or N (from 1).
    #[arg(long, value_name = "COLUMN", default_value = "last")]
    target_column: LabelColumn,
    /// Average of the neighbours' targets: uniform or distance-weighted.
    #[arg(long, value_enum, value_name = "WEIGHTS", default_value = "uniform")]
    weights: NeighbourWeights,
    /// The true target of every query row: prints the RMSE and R².
    #[arg(long, value_name = "FILE")]
    truth: Option<PathBuf>,
    /// Write the predictions here (CSV one per line, or .npy).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Distance: l2, sqeuclidean, l1, ip, cosine.
    #[arg(long, value_name = "METRIC", default_value = "l2")]
    metric: DistanceMetric,
    /// Top-k selection: auto, kmin, bitonic.
    #[arg(long = "select", value_name = "METHOD", default_value = "auto")]
    selection: Selection,
    /// Where to compute: auto, cpu, gpu, gpu:N.
    #[arg(long, value_name = "DEVICE", default_value = "auto")]
    device: Device,
    #[command(flatten)]
    sample_weight: SampleWeightOpts,
    /// Print one JSON object on stdout (adds rmse and r2 with --truth).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    csv: CsvOpts,
}

/// Root mean squared error and coefficient of determination of `predicted` against `truth`.
struct Fit {
    rmse: f64,
    r2: f64,
}

impl Fit {
    fn new(truth: &[f64], predicted: &[f32]) -> Fit {
        let n = truth.len().max(1) as f64;
        let mean = truth.iter().sum::<f64>() / n;
        let residual: f64 = truth
            .iter()
            .zip(predicted)
            .map(|(t, &p)| (t - f64::from(p)).powi(2))
            .sum();
        let total: f64 = truth.iter().map(|t| (t - mean).powi(2)).sum();
        // Constant truth: R² is 1 for a perfect fit, else 0 (scikit-learn's finite convention).
        let r2 = match (total > 0.0, residual == 0.0) {
            (true, _) => 1.0 - residual / total,
            (false, true) => 1.0,
            (false, false) => 0.0,
        };
        Fit {
            rmse: (residual / n).sqrt(),
            r2,
        }
    }
}

/// Numbers from the text of `path`'s values (`what` names them in the error).
fn numbers(path: &Path, what: &str, values: &[String]) -> Result<Vec<f64>, CliError> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| match v.trim().parse::<f64>() {
            Ok(x) if x.is_finite() => Ok(x),
            _ => Err(CliError::usage(format!(
                "{}: {what} {} is '{v}', which is not a finite number",
                path.display(),
                i + 1
            ))),
        })
        .collect()
}

/// The true targets of the `rows` queries, skipping a header line.
fn read_truth(path: &Path, a: &Args, rows: usize) -> Result<Vec<f64>, CliError> {
    let mut t = read_labels(path, &a.csv.read())?;
    if t.len() == rows + 1 {
        t.remove(0);
    }
    if t.len() != rows {
        return Err(CliError::usage(format!(
            "{}: it has {} values but {} has {rows} query rows",
            path.display(),
            t.len(),
            a.query.display(),
        )));
    }
    numbers(path, "value", &t)
}

pub fn run(a: Args, ui: Ui) -> Result<(), CliError> {
    check_outputs(a.out.iter().map(PathBuf::as_path))?;
    let opts = a.csv.read();
    let train = read_labelled(&a.train, &opts, a.target_column)?;
    let query = read_matrix(&a.query, &opts)?;
    same_columns((&a.train, &train.features), (&a.query, &query))?;
    check_k(a.k, train.features.rows, &a.train)?;
    let sample_weight = a.sample_weight.read(&opts, train.features.rows, &a.train)?;
    let targets: Vec<f32> = numbers(&a.train, "the target of row", &train.labels)?
        .into_iter()
        .map(|t| t as f32)
        .collect();
    let truth = a
        .truth
        .as_ref()
        .map(|p| read_truth(p, &a, query.rows))
        .transpose()?;

    let start = Instant::now();
    let spinner = ui.spinner(&format!(
        "predicting {} queries from {} training points",
        query.rows, train.features.rows
    ));
    let weights = Weights::from(a.weights);
    let result = (|| {
        let targets = MatrixView::new(&targets, targets.len(), 1)?;
        let mut reg = about(
            &a.train,
            KnnRegressor::fit(
                train.features.view(),
                targets,
                a.k,
                weights,
                a.metric,
                a.device,
            ),
        )?
        .with_selection(a.selection);
        if let Some(w) = &sample_weight {
            reg = reg.with_sample_weight(w)?;
        }
        about(&a.query, reg.predict(query.view()))
    })();
    spinner.finish_and_clear();
    let predicted: Vec<f32> = result?.into_iter().collect();
    let secs = start.elapsed().as_secs_f64();

    let mut outputs = Outputs::new();
    if let Some(p) = &a.out {
        outputs.vector(p, &predicted)?;
    }
    outputs.commit()?;

    let fit = truth.as_ref().map(|t| Fit::new(t, &predicted));
    let device = device_name(a.device);
    if a.json {
        let mut j = json!({
            "k": a.k,
            "queries": query.rows,
            "train": train.features.rows,
            "d": query.cols,
            "weights": weights.to_string(),
            "sample_weight": a.sample_weight.name(),
            "metric": metric_name(a.metric),
            "device": device,
            "seconds": secs,
        });
        if let Some(f) = &fit {
            j["rmse"] = json!(f.rmse);
            j["r2"] = json!(f.r2);
        }
        if let Some(p) = &a.out {
            j["output"] = json!(p.display().to_string());
        }
        return super::print_json(&j);
    }
    let mut summary = format!(
        "regress: {} queries, {} training points ({} dimensions), k = {}, {} metric, {weights} weights\n  device      {device}\n  elapsed     {}\n",
        query.rows,
        train.features.rows,
        query.cols,
        a.k,
        metric_name(a.metric),
        super::seconds(secs),
    );
    if let Some(f) = &fit {
        summary += &format!("  rmse        {:.6}\n  r2          {:.6}\n", f.rmse, f.r2);
    }
    if let Some(p) = &a.out {
        summary += &format!("  wrote       {}\n", p.display());
    }
    if a.out.is_none() && fit.is_none() {
        let text: String = predicted.iter().map(|v| format!("{v}\n")).collect();
        super::print_stdout(&text)?;
        ui.note(summary.trim_end());
        Ok(())
    } else {
        super::print_stdout(&summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmse_and_r2_follow_their_definitions() {
        let f = Fit::new(&[1.0, 2.0, 3.0], &[1.0, 2.0, 5.0]);
        assert!((f.rmse - (4.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert!((f.r2 - (1.0 - 4.0 / 2.0)).abs() < 1e-12);
        assert_eq!(Fit::new(&[2.0, 2.0], &[2.0, 2.0]).r2, 1.0);
        assert_eq!(Fit::new(&[2.0, 2.0], &[2.0, 3.0]).r2, 0.0);
    }
}
