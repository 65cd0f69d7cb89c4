//! What `classify` and `regress` share: training rows that carry one value per row (a label or a
//! target), query rows without it, the neighbours' options, a truth file with one value per
//! query, and how the result is reported.

use super::knn::{NeighbourWeights, check_k, device_name, same_columns};
use super::{CliError, CsvOpts, SampleWeightOpts, Ui, about, print_json, print_stdout};
use crate::io::{Format, LabelColumn, Labelled, ReadOptions, Table, read_labelled, read_labels};
use crate::{Device, KnnIndex, MatrixView, Selection};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The options of a supervised kNN command besides its value column and its outputs.
#[derive(clap::Args, Debug)]
pub struct NeighbourArgs {
    /// Training rows (CSV or NPY): features plus the label or target column.
    #[arg(long, value_name = "FILE")]
    pub train: PathBuf,
    /// Query rows (CSV or NPY): features only.
    #[arg(long, value_name = "FILE")]
    pub query: PathBuf,
    /// Neighbours per query: they vote (classify) or their targets are averaged (regress).
    #[arg(short = 'k', long = "k", value_name = "K")]
    pub k: usize,
    /// How each neighbour counts: uniform, or weighted by 1 / distance.
    #[arg(long, value_enum, value_name = "WEIGHTS", default_value = "uniform")]
    pub weights: NeighbourWeights,
    #[command(flatten)]
    pub metric: super::metric::MetricArgs,
    /// Top-k selection: auto, kmin, bitonic, radix.
    #[arg(long = "select", value_name = "METHOD", default_value = "auto")]
    pub selection: Selection,
    /// Where to compute: auto, cpu, gpu, gpu:N; or several GPUs, gpu:N,M,… or gpu:all, over
    /// which the training rows are cut.
    #[arg(long, value_name = "DEVICE", default_value = "auto")]
    pub device: Device,
    /// GPU memory the index may use, e.g. 8GiB or 500M (default: 70 % of what is free); a
    /// larger training set stays in host memory and streams through the GPU (same answer).
    #[arg(long, value_name = "BYTES")]
    pub gpu_memory: Option<super::Bytes>,
    #[command(flatten)]
    pub layout: super::LayoutArgs,
    #[command(flatten)]
    pub sample_weight: SampleWeightOpts,
    /// Print one JSON object on stdout (with --truth: the scores too).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub csv: CsvOpts,
}

impl NeighbourArgs {
    /// `--device auto` settled for the loaded job's size ([`Device::for_pairs`]).
    pub fn choose_device(&mut self, loaded: &Loaded) {
        let pairs = loaded.query.rows as f64 * loaded.train.features.rows as f64;
        self.device = self.device.for_pairs(pairs, loaded.query.cols);
    }

    /// The index over the training features, within `--gpu-memory`.
    pub fn index(&self, train: MatrixView<'_>) -> Result<KnnIndex, CliError> {
        let budget = self.gpu_memory.map(|b| b.0);
        let device = self.layout.on(self.device);
        let index = KnnIndex::with_memory_budget(train, self.metric.get()?, device, budget);
        Ok(about(&self.train, index)?.with_selection(self.selection))
    }
}

/// The files of a supervised command, read and checked against each other.
pub struct Loaded {
    pub opts: ReadOptions,
    pub train: Labelled,
    pub query: Table,
    pub sample_weight: Option<Vec<f32>>,
}

impl NeighbourArgs {
    /// Reads the training rows (their value in `column`), the queries and the sample weights,
    /// and checks that the queries have the training features' columns and that `k` fits.
    pub fn load(&self, column: LabelColumn) -> Result<Loaded, CliError> {
        let opts = self.csv.read();
        let train = read_labelled(&self.train, &opts, column)?;
        let query = crate::io::read_matrix(&self.query, &opts)
            .map_err(|e| self.query_with_value(&opts, train.features.cols, e.into()))?;
        if query.cols == train.features.cols + 1 {
            return Err(self.carries_value(query.cols, train.features.cols));
        }
        same_columns((&self.train, &train.features), (&self.query, &query))?;
        check_k(self.k, train.features.rows, &self.train)?;
        let sample_weight = self
            .sample_weight
            .read(&opts, train.features.rows, &self.train)?;
        Ok(Loaded {
            opts,
            train,
            query,
            sample_weight,
        })
    }

    /// A CSV query file whose rows carry a text value fails as "not a number": says why.
    fn query_with_value(&self, opts: &ReadOptions, features: usize, e: CliError) -> CliError {
        let fields = first_line_fields(&self.query, opts.delimiter);
        if Format::of(&self.query) == Format::Csv && fields == Some(features + 1) {
            self.carries_value(features + 1, features)
        } else {
            e
        }
    }

    fn carries_value(&self, cols: usize, features: usize) -> CliError {
        CliError::usage(format!(
            "{}: the rows have {cols} columns, one more than the training features of {} \
             ({features}); query rows must not carry a label or target",
            self.query.display(),
            self.train.display(),
        ))
    }

    /// The `rows` values of a truth file (an optional header line is skipped); `what` names
    /// them in the error.
    pub fn read_truth(
        &self,
        path: &Path,
        opts: &ReadOptions,
        rows: usize,
        what: &str,
    ) -> Result<Vec<String>, CliError> {
        let mut t = read_labels(path, opts)?;
        if t.len() == rows + 1 {
            t.remove(0);
        }
        if t.len() != rows {
            return Err(CliError::usage(format!(
                "{}: it has {} {what} but {} has {rows} query rows",
                path.display(),
                t.len(),
                self.query.display(),
            )));
        }
        Ok(t)
    }

    /// The JSON fields every supervised command reports.
    pub fn json(&self, loaded: &Loaded, secs: f64) -> Value {
        json!({
            "k": self.k,
            "queries": loaded.query.rows,
            "train": loaded.train.features.rows,
            "d": loaded.query.cols,
            "metric": self.metric.label(),
            "sample_weight": self.sample_weight.name(),
            "device": device_name(self.device),
            "seconds": secs,
        })
    }
}

/// The number of fields on the first non-empty line of a CSV file, if it can be read.
fn first_line_fields(path: &Path, delimiter: Option<u8>) -> Option<usize> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| !l.trim().is_empty())?;
    let d = crate::io::delimiter_for(path, delimiter) as char;
    Some(line.split(d).count())
}

/// How a supervised command ends: the JSON object with `--json`; else, without an output file
/// or scores, the predictions on stdout and the summary on stderr; else the summary on stdout.
pub fn report(
    a: &NeighbourArgs,
    ui: Ui,
    json: Value,
    summary: String,
    predictions: impl FnOnce() -> String,
    wrote_or_scored: bool,
) -> Result<(), CliError> {
    if a.json {
        return print_json(&json);
    }
    if wrote_or_scored {
        return print_stdout(&summary);
    }
    print_stdout(&predictions())?;
    ui.note(summary.trim_end());
    Ok(())
}
