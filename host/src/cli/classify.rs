//! `kmeans-knn classify`: kNN classification with text labels, scaling, accuracy and a
//! confusion matrix.

use super::knn::{NeighbourWeights, check_k, device_name, metric_name, same_columns};
use super::{CliError, CsvOpts, SampleWeightOpts, Ui, about, check_outputs};
use crate::io::{Format, LabelColumn, Outputs, read_labelled, read_labels, read_matrix};
use crate::{Device, DistanceMetric, KnnClassifier, MatrixView, Scaler, Selection, Weights};
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

/// Arguments of `classify`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Labelled training rows (CSV or NPY): features plus a label column.
    #[arg(long, value_name = "FILE")]
    train: PathBuf,
    /// Query rows to classify (CSV or NPY): features only.
    #[arg(long, value_name = "FILE")]
    query: PathBuf,
    /// Neighbours that vote.
    #[arg(short = 'k', long = "k", value_name = "K")]
    k: usize,
    /// Which column of the training file holds the label: first, last, or N (from 1).
    #[arg(long, value_name = "COLUMN", default_value = "last")]
    label_column: LabelColumn,
    /// Neighbour votes: uniform or distance-weighted.
    #[arg(long, value_enum, value_name = "WEIGHTS", default_value = "uniform")]
    weights: NeighbourWeights,
    /// Feature scaling fitted on the training rows: none, zscore, minmax.
    #[arg(long, value_enum, value_name = "SCALE", default_value = "none")]
    scale: Scale,
    /// The true label of every query row: prints the accuracy and a confusion matrix.
    #[arg(long, value_name = "FILE")]
    truth: Option<PathBuf>,
    /// Write the predicted labels here (CSV/text one per line, .json, or .npy for numeric labels).
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
    /// Print one JSON object on stdout (adds accuracy and the confusion matrix with --truth).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    csv: CsvOpts,
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

/// Number of fields on the first non-empty line of a CSV file.
fn first_line_fields(path: &Path, delimiter: Option<u8>) -> Option<usize> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| !l.trim().is_empty())?;
    let d = crate::io::delimiter_for(path, delimiter) as char;
    Some(line.split(d).count())
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

pub fn run(a: Args, ui: Ui) -> Result<(), CliError> {
    let outs: Vec<&Path> = a.out.iter().map(PathBuf::as_path).collect();
    check_outputs(outs.iter().copied())?;
    let opts = a.csv.read();
    let train = read_labelled(&a.train, &opts, a.label_column)?;
    let query = read_matrix(&a.query, &opts).map_err(|e| {
        // A query file that carries a text label fails as "not a number": say why.
        let fields = first_line_fields(&a.query, opts.delimiter);
        if Format::of(&a.query) == Format::Csv && fields == Some(train.features.cols + 1) {
            CliError::usage(format!(
                "{}: the rows have {} fields, one more than the training features of {} ({}); \
                 query rows must not carry a label",
                a.query.display(),
                train.features.cols + 1,
                a.train.display(),
                train.features.cols
            ))
        } else {
            e.into()
        }
    })?;
    if query.cols == train.features.cols + 1 {
        return Err(CliError::usage(format!(
            "{}: the rows have {} columns, one more than the training features of {} ({}); \
             query rows must not carry a label",
            a.query.display(),
            query.cols,
            a.train.display(),
            train.features.cols
        )));
    }
    same_columns((&a.train, &train.features), (&a.query, &query))?;
    check_k(a.k, train.features.rows, &a.train)?;
    let sample_weight = a.sample_weight.read(&opts, train.features.rows, &a.train)?;
    let truth = match &a.truth {
        Some(p) => {
            let mut t = read_labels(p, &opts)?;
            if t.len() == query.rows + 1 {
                t.remove(0);
            }
            if t.len() != query.rows {
                return Err(CliError::usage(format!(
                    "{}: it has {} labels but {} has {} query rows",
                    p.display(),
                    t.len(),
                    a.query.display(),
                    query.rows
                )));
            }
            Some(t)
        }
        None => None,
    };

    let classes = sorted_classes(&train.labels);
    let id: HashMap<&str, u32> = classes
        .iter()
        .enumerate()
        .map(|(i, c)| (c.as_str(), i as u32))
        .collect();
    let ids: Vec<u32> = train.labels.iter().map(|l| id[l.as_str()]).collect();

    let start = Instant::now();
    let spinner = ui.spinner(&format!(
        "classifying {} queries with {} training points",
        query.rows, train.features.rows
    ));
    let result = (|| {
        let scaled = about(
            &a.train,
            scaled(a.scale, train.features.view(), query.view()),
        )?;
        let (train_view, query_view) = match &scaled {
            Some((t, q)) => (
                MatrixView::new(t, train.features.rows, train.features.cols)?,
                MatrixView::new(q, query.rows, query.cols)?,
            ),
            None => (train.features.view(), query.view()),
        };
        let weights = Weights::from(a.weights);
        let mut clf = about(
            &a.train,
            KnnClassifier::fit(train_view, &ids, a.k, weights, a.metric, a.device),
        )?
        .with_selection(a.selection);
        if let Some(w) = &sample_weight {
            clf = clf.with_sample_weight(w)?;
        }
        about(&a.query, clf.predict(query_view))
    })();
    spinner.finish_and_clear();
    let predicted_ids = result?;
    let secs = start.elapsed().as_secs_f64();
    let predicted: Vec<String> = predicted_ids
        .iter()
        .map(|&i| classes[i as usize].clone())
        .collect();

    let mut outputs = Outputs::new();
    if let Some(p) = &a.out {
        write_predictions(&mut outputs, p, &predicted)?;
    }
    outputs.commit()?;

    let confusion = truth.as_ref().map(|t| Confusion::new(t, &predicted));
    let device = device_name(a.device);
    if a.json {
        let mut j = json!({
            "k": a.k,
            "queries": query.rows,
            "train": train.features.rows,
            "d": query.cols,
            "classes": classes,
            "metric": metric_name(a.metric),
            "sample_weight": a.sample_weight.name(),
            "device": device,
            "seconds": secs,
        });
        if let Some(c) = &confusion {
            j["accuracy"] = json!(c.accuracy);
            j["confusion"] = json!({"labels": c.labels, "matrix": c.matrix});
        }
        if let Some(p) = &a.out {
            j["output"] = json!(p.display().to_string());
        }
        return super::print_json(&j);
    }
    let mut summary = format!(
        "classify: {} queries, {} training points ({} dimensions, {} classes), k = {}, {} metric, {:?} votes, scale {:?}\n  device      {device}\n  elapsed     {}\n",
        query.rows,
        train.features.rows,
        query.cols,
        classes.len(),
        a.k,
        metric_name(a.metric),
        a.weights,
        a.scale,
        super::seconds(secs),
    )
    .replace("Uniform", "uniform")
    .replace("Distance", "distance-weighted")
    .replace("None", "none")
    .replace("Zscore", "zscore")
    .replace("Minmax", "minmax");
    if let Some(c) = &confusion {
        let right: usize = (0..c.labels.len()).map(|i| c.matrix[i][i]).sum();
        summary += &format!(
            "  accuracy    {:.2}% ({right} of {})\n  confusion matrix:\n{}",
            100.0 * c.accuracy,
            query.rows,
            c.table()
        );
    }
    if let Some(p) = &a.out {
        summary += &format!("  wrote       {}\n", p.display());
    }
    if a.out.is_none() && confusion.is_none() {
        let mut text = String::new();
        for l in &predicted {
            text += l;
            text.push('\n');
        }
        super::print_stdout(&text)?;
        ui.note(summary.trim_end());
        Ok(())
    } else {
        super::print_stdout(&summary)
    }
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
