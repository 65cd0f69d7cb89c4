//! `kmeans-knn regress`: kNN regression of one numeric target column, with RMSE and R².

use super::knn::device_name;
use super::supervised::{Loaded, NeighbourArgs, report};
use super::{CliError, Ui, about, check_outputs};
use crate::io::{LabelColumn, Outputs};
use crate::{KnnRegressor, MatrixView, Weights};
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
    #[command(flatten)]
    pub(super) knn: NeighbourArgs,
    /// Which column of the training file holds the target: first, last, or N (from 1).
    #[arg(long, value_name = "COLUMN", default_value = "last")]
    target_column: LabelColumn,
    /// The true target of every query row: prints the RMSE and R².
    #[arg(long, value_name = "FILE")]
    truth: Option<PathBuf>,
    /// Write the predictions here (CSV one per line, or .npy).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
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

pub fn run(mut a: Args, ui: Ui) -> Result<(), CliError> {
    check_outputs(a.out.iter().map(PathBuf::as_path))?;
    let loaded = a.knn.load(a.target_column)?;
    a.knn.choose_device(&loaded);
    let (train, query) = (&loaded.train, &loaded.query);
    let targets: Vec<f32> = numbers(&a.knn.train, "the target of row", &train.labels)?
        .into_iter()
        .map(|t| t as f32)
        .collect();
    let truth = match &a.truth {
        Some(p) => {
            let values = a.knn.read_truth(p, &loaded.opts, query.rows, "values")?;
            Some(numbers(p, "value", &values)?)
        }
        None => None,
    };

    let start = Instant::now();
    let spinner = ui.spinner(&format!(
        "predicting {} queries from {} training points",
        query.rows, train.features.rows
    ));
    let result = predict(&a.knn, &loaded, &targets);
    spinner.finish_and_clear();
    let predicted = result?;
    let secs = start.elapsed().as_secs_f64();

    let mut outputs = Outputs::new();
    if let Some(p) = &a.out {
        outputs.vector(p, &predicted)?;
    }
    outputs.commit()?;

    let fit = truth.as_ref().map(|t| Fit::new(t, &predicted));
    let weights = Weights::from(a.knn.weights);
    let mut j = a.knn.json(&loaded, secs);
    j["weights"] = json!(weights.to_string());
    if let Some(f) = &fit {
        j["rmse"] = json!(f.rmse);
        j["r2"] = json!(f.r2);
    }
    if let Some(p) = &a.out {
        j["output"] = json!(p.display().to_string());
    }
    let mut summary = format!(
        "regress: {} queries, {} training points ({} dimensions), k = {}, {} metric, {weights} weights\n  device      {}\n  elapsed     {}\n",
        query.rows,
        train.features.rows,
        query.cols,
        a.knn.k,
        a.knn.metric.label(),
        device_name(a.knn.device),
        super::seconds(secs),
    );
    if let Some(f) = &fit {
        summary += &format!("  rmse        {:.6}\n  r2          {:.6}\n", f.rmse, f.r2);
    }
    if let Some(p) = &a.out {
        summary += &format!("  wrote       {}\n", p.display());
    }
    let lines = || predicted.iter().map(|v| format!("{v}\n")).collect();
    report(
        &a.knn,
        ui,
        j,
        summary,
        lines,
        a.out.is_some() || fit.is_some(),
    )
}

/// The prediction for every query row.
fn predict(k: &NeighbourArgs, loaded: &Loaded, targets: &[f32]) -> Result<Vec<f32>, CliError> {
    let targets = MatrixView::new(targets, targets.len(), 1)?;
    let index = k.index(loaded.train.features.view())?;
    let mut reg = about(
        &k.train,
        KnnRegressor::from_index(index, targets, k.k, k.weights.into()),
    )?;
    if let Some(w) = &loaded.sample_weight {
        reg = reg.with_sample_weight(w)?;
    }
    Ok(about(&k.query, reg.predict(loaded.query.view()))?
        .into_iter()
        .collect())
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
