//! `kmeans-knn classify`: kNN classification with text labels, scaling, accuracy and a
//! confusion matrix.

use super::knn::{NeighbourWeights, device_name};
use super::supervised::{Loaded, NeighbourArgs, report};
use super::{CliError, Ui, about, check_outputs};
use crate::io::{Format, LabelColumn, Outputs, read_labelled, read_labels, read_matrix};
use crate::{Device, DistanceMetric, KnnClassifier, MatrixView, Scaler, TieBreak, Weights};
use serde_json::json;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub const EXAMPLES: &str = "\
Examples:
  kmeans-knn classify --train train.csv --query test.csv --k 15      # labels on stdout
  kmeans-knn classify --train kdd.csv --query q.csv --k 25 --scale zscore --truth truth.csv
  kmeans-knn classify --train t.csv --label-column first --query q.csv --k 5 \\
      --weights distance --out pred.csv
  kmeans-knn classify --train t.npy --query q.npy --k 3 --truth y.npy --json
  kmeans-knn classify --train t.csv --query q.csv --k 9 --sample-weight w.csv

Training rows carry their label in the label column (any text, e.g. \"normal.\"; NPY: a number);
query rows do not. --scale fits the scaler on the training features and applies it to both.
--sample-weight is a file with one weight per training row: each neighbour's vote is scaled by
its row's weight.
--tie-break decides a tie of votes between classes: nearest (the default) gives it to the class
whose nearest member ranks first among the neighbours, smallest-label to the class that sorts
first (scikit-learn's rule; the winner is then the class with the largest share).
--truth is a file with one label per query row (an optional header line is skipped); it adds
the accuracy and a confusion matrix (rows: true label, columns: predicted).";

/// Feature scaling before the distances.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scale {
    /// No scaling.
    None,
    /// Subtract the mean, divide by the standard deviation (per column).
    Zscore,
    /// Map each column's training range to [0, 1].
    Minmax,
}

impl Scale {
    /// The name `--scale` takes.
    fn name(self) -> &'static str {
        match self {
            Scale::None => "none",
            Scale::Zscore => "zscore",
            Scale::Minmax => "minmax",
        }
    }
}

/// Arguments of `classify`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub(super) knn: NeighbourArgs,
    /// Which column of the training file holds the label: first, last, or N (from 1).
    #[arg(long, value_name = "COLUMN", default_value = "last")]
    label_column: LabelColumn,
    /// Feature scaling fitted on the training rows: none, zscore, minmax.
    #[arg(long, value_enum, value_name = "SCALE", default_value = "none")]
    scale: Scale,
    /// Who wins a tie of votes: nearest (the class whose nearest member ranks first) or
    /// smallest-label (the class that sorts first, as scikit-learn).
    #[arg(long, value_name = "RULE", default_value = "nearest")]
    tie_break: TieBreak,
    /// The true label of every query row: prints the accuracy and a confusion matrix.
    #[arg(long, value_name = "FILE")]
    truth: Option<PathBuf>,
    /// Write the predicted labels here (CSV/text one per line, .json, or .npy for numeric labels).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// Distinct labels in a stable order: numerically when all are numbers, else as text.
pub fn sorted_classes<'a>(labels: impl IntoIterator<Item = &'a String>) -> Vec<String> {
    let mut v: Vec<String> = labels.into_iter().cloned().collect();
    v.sort();
    v.dedup();
    if v.iter().all(|s| s.parse::<f64>().is_ok()) {
        v.sort_by(|a, b| {
            let (x, y) = (a.parse::<f64>().unwrap(), b.parse::<f64>().unwrap());
            x.total_cmp(&y).then(a.cmp(b))
        });
    }
    v
}

/// Accuracy and confusion matrix of `predicted` against `truth`.
pub struct Confusion {
    /// Every label seen in either, in a stable order.
    pub labels: Vec<String>,
    /// `matrix[t][p]`: rows with true label `labels[t]` predicted as `labels[p]`.
    pub matrix: Vec<Vec<usize>>,
    /// Share of rows predicted right.
    pub accuracy: f64,
}

impl Confusion {
    pub fn new(truth: &[String], predicted: &[String]) -> Confusion {
        let labels = sorted_classes(truth.iter().chain(predicted));
        let at: HashMap<&str, usize> = labels
            .iter()
            .enumerate()
            .map(|(i, l)| (l.as_str(), i))
            .collect();
        let mut matrix = vec![vec![0usize; labels.len()]; labels.len()];
        let mut right = 0usize;
        for (t, p) in truth.iter().zip(predicted) {
            matrix[at[t.as_str()]][at[p.as_str()]] += 1;
            right += usize::from(t == p);
        }
        Confusion {
            labels,
            matrix,
            accuracy: right as f64 / truth.len().max(1) as f64,
        }
    }

    /// The matrix as a table for people.
    pub fn table(&self) -> String {
        let corner = "true \\ predicted";
        let label_w = self
            .labels
            .iter()
            .map(|l| l.chars().count())
            .chain([corner.len()])
            .max()
            .unwrap_or(1);
        let cell_w = self
            .labels
            .iter()
            .map(|l| l.chars().count())
            .chain(self.matrix.iter().flatten().map(|c| c.to_string().len()))
            .max()
            .unwrap_or(1);
        let mut s = format!("    {corner:>label_w$} |");
        for l in &self.labels {
            s += &format!(" {l:>cell_w$}");
        }
        s.push('\n');
        s += &format!(
            "    {}-+{}\n",
            "-".repeat(label_w),
            "-".repeat((cell_w + 1) * self.labels.len())
        );
        for (l, row) in self.labels.iter().zip(&self.matrix) {
            s += &format!("    {l:>label_w$} |");
            for c in row {
                s += &format!(" {c:>cell_w$}");
            }
            s.push('\n');
        }
        s
    }
}

fn scaled(
    scale: Scale,
    train: MatrixView<'_>,
    query: MatrixView<'_>,
) -> crate::Result<Option<(Vec<f32>, Vec<f32>)>> {
    let scaler = match scale {
        Scale::None => return Ok(None),
        Scale::Zscore => Scaler::ZScore,
        Scale::Minmax => Scaler::MinMax,
    };
    let fitted = scaler.fit(&train)?;
    Ok(Some((fitted.transform(&train)?, fitted.transform(&query)?)))
}

/// Writes predicted labels to `path`.
fn write_predictions(
    outputs: &mut Outputs,
    path: &Path,
    labels: &[String],
) -> Result<(), CliError> {
    match Format::of(path) {
        Format::Json => outputs.json(path, &labels)?,
        Format::Npy => {
            let numbers: Option<Vec<i64>> = labels.iter().map(|l| l.parse::<i64>().ok()).collect();
            match numbers {
                Some(n) => outputs.vector(path, &n)?,
                None => {
                    return Err(CliError::usage(format!(
                        "{}: the labels are text, which NPY cannot hold; use a .csv or .json file",
                        path.display()
                    )));
                }
            }
        }
        Format::Csv => {
            let mut text = String::new();
            for l in labels {
                text += l;
                text.push('\n');
            }
            outputs.text(path, &text)?
        }
    }
    Ok(())
}

pub fn run(mut a: Args, ui: Ui) -> Result<(), CliError> {
    check_outputs(a.out.iter().map(PathBuf::as_path))?;
    let loaded = a.knn.load(a.label_column)?;
    a.knn.choose_device(&loaded);
    let (train, query) = (&loaded.train, &loaded.query);
    let truth = match &a.truth {
        Some(p) => Some(a.knn.read_truth(p, &loaded.opts, query.rows, "labels")?),
        None => None,
    };
    let classes = sorted_classes(&train.labels);
    let start = Instant::now();
    let spinner = ui.spinner(&format!(
        "classifying {} queries with {} training points",
        query.rows, train.features.rows
    ));
    let predicted_ids = predict(&a, &loaded, &classes);
    spinner.finish_and_clear();
    let predicted: Vec<String> = predicted_ids?
        .iter()
        .map(|&i| classes[i as usize].clone())
        .collect();
    let secs = start.elapsed().as_secs_f64();

    let mut outputs = Outputs::new();
    if let Some(p) = &a.out {
        write_predictions(&mut outputs, p, &predicted)?;
    }
    outputs.commit()?;

    let confusion = truth.as_ref().map(|t| Confusion::new(t, &predicted));
    let mut j = a.knn.json(&loaded, secs);
    j["classes"] = json!(classes);
    j["tie_break"] = json!(a.tie_break.to_string());
    if let Some(c) = &confusion {
        j["accuracy"] = json!(c.accuracy);
        j["confusion"] = json!({"labels": c.labels, "matrix": c.matrix});
    }
    if let Some(p) = &a.out {
        j["output"] = json!(p.display().to_string());
    }
    let summary = summary(&a, &loaded, classes.len(), secs, confusion.as_ref());
    let lines = || predicted.iter().map(|l| format!("{l}\n")).collect();
    report(
        &a.knn,
        ui,
        j,
        summary,
        lines,
        a.out.is_some() || confusion.is_some(),
    )
}

/// The class (an index into `classes`) of every query row.
fn predict(a: &Args, loaded: &Loaded, classes: &[String]) -> Result<Vec<u32>, CliError> {
    let (k, train, query) = (&a.knn, &loaded.train, &loaded.query);
    let id: HashMap<&str, u32> = classes
        .iter()
        .enumerate()
        .map(|(i, c)| (c.as_str(), i as u32))
        .collect();
    let ids: Vec<u32> = train.labels.iter().map(|l| id[l.as_str()]).collect();
    let scaled = about(
        &k.train,
        scaled(a.scale, train.features.view(), query.view()),
    )?;
    let (train_view, query_view) = match &scaled {
        Some((t, q)) => (
            MatrixView::new(t, train.features.rows, train.features.cols)?,
            MatrixView::new(q, query.rows, query.cols)?,
        ),
        None => (train.features.view(), query.view()),
    };
    let fitted = KnnClassifier::from_index(k.index(train_view)?, &ids, k.k, k.weights.into());
    let mut clf = about(&k.train, fitted)?.with_tie_break(a.tie_break);
    if let Some(w) = &loaded.sample_weight {
        clf = clf.with_sample_weight(w)?;
    }
    about(&k.query, clf.predict(query_view))
}

/// The summary for people.
fn summary(
    a: &Args,
    loaded: &Loaded,
    classes: usize,
    secs: f64,
    confusion: Option<&Confusion>,
) -> String {
    let k = &a.knn;
    let mut summary = format!(
        "classify: {} queries, {} training points ({} dimensions, {classes} classes), k = {}, {} metric, {} votes, scale {}\n  device      {}\n  elapsed     {}\n",
        loaded.query.rows,
        loaded.train.features.rows,
        loaded.query.cols,
        k.k,
        k.metric.label(),
        match k.weights {
            NeighbourWeights::Uniform => "uniform",
            NeighbourWeights::Distance => "distance-weighted",
        },
        a.scale.name(),
        device_name(k.device),
        super::seconds(secs),
    );
    if let Some(c) = confusion {
        let right: usize = (0..c.labels.len()).map(|i| c.matrix[i][i]).sum();
        summary += &format!(
            "  accuracy    {:.2}% ({right} of {})\n  confusion matrix:\n{}",
            100.0 * c.accuracy,
            loaded.query.rows,
            c.table()
        );
    }
    if let Some(p) = &a.out {
        summary += &format!("  wrote       {}\n", p.display());
    }
    summary
}

/// The demo's classification step: the blobs split written by `demo`.
pub fn demo_step(ui: Ui, dir: &Path, device: Device) -> Result<String, CliError> {
    let opts = Default::default();
    let train_path = dir.join("blobs_train.csv");
    let train = read_labelled(&train_path, &opts, LabelColumn::Last)?;
    let query = read_matrix(&dir.join("blobs_query.csv"), &opts)?;
    let mut truth = read_labels(&dir.join("blobs_truth.csv"), &opts)?;
    if truth.len() == query.rows + 1 {
        truth.remove(0);
    }
    let classes = sorted_classes(&train.labels);
    let ids: Vec<u32> = train
        .labels
        .iter()
        .map(|l| classes.iter().position(|c| c == l).unwrap_or(0) as u32)
        .collect();
    let k = 15;
    let pairs = query.rows as f64 * train.features.rows as f64;
    let device = device.for_pairs(pairs, query.cols);
    let start = Instant::now();
    let spinner = ui.spinner("classifying");
    let predicted = about(
        &train_path,
        KnnClassifier::fit(
            train.features.view(),
            &ids,
            k,
            Weights::Uniform,
            DistanceMetric::Euclidean,
            device,
        )
        .and_then(|clf| clf.predict(query.view())),
    );
    spinner.finish_and_clear();
    let predicted: Vec<String> = predicted?
        .iter()
        .map(|&i| classes[i as usize].clone())
        .collect();
    let secs = start.elapsed().as_secs_f64();
    let mut outputs = Outputs::new();
    write_predictions(&mut outputs, &dir.join("blobs_predicted.csv"), &predicted)?;
    outputs.commit()?;
    let c = Confusion::new(&truth, &predicted);
    Ok(format!(
        "4. kNN classification, {} queries against {} labelled points, k = {k}: accuracy {:.1}%, {}\n   → blobs_train.csv, blobs_query.csv, blobs_truth.csv, blobs_predicted.csv\n",
        query.rows,
        train.features.rows,
        100.0 * c.accuracy,
        super::seconds(secs)
    ))
}
