//! `kmeans-knn kmeans`: cluster a CSV/NPY file.

use super::{
    CliError, CsvOpts, FitOpts, SampleWeightOpts, Ui, about, check_outputs, fit_with_progress,
};
use crate::io::{IoError, Outputs, read_matrix};
use crate::{KMeansModel, Metric, Precision};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub const EXAMPLES: &str = "\
Examples:
  kmeans-knn kmeans points.csv --k 8
  kmeans-knn kmeans points.npy --k 80 --n-init 3 --seed 7 \\
      --labels-out labels.npy --centroids-out centroids.npy
  kmeans-knn kmeans pixels.csv --k 16 --metric l1 --save-model model.json --json
  kmeans-knn kmeans data.tsv --k 4 --device cpu --quiet
  kmeans-knn kmeans embeddings.npy --k 1024 --precision tf32 --device gpu
  kmeans-knn kmeans docs.npy --k 50 --metric cosine --labels-out topics.npy
  kmeans-knn kmeans points.csv --k 8 --sample-weight weights.csv

Labels are written one per row (cluster ids from 0), centroids k × d. --json prints
{k, n, d, iterations, inertia, converged, device, seconds, ...} on stdout. With
--sample-weight, centroids are weighted means and inertia the weighted sum of distances
(integer weights: the same result as rows repeated that many times). --metric cosine is
spherical k-means: rows scaled to unit length, centroids renormalised, inertia Σ(1 − cos).";

/// Arguments of `kmeans`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Points to cluster, one per row: CSV (header detected) or NPY (2-D, any float or int
    /// dtype).
    #[arg(value_name = "INPUT")]
    input: PathBuf,
    #[command(flatten)]
    pub(super) fit: FitOpts,
    #[command(flatten)]
    weights: SampleWeightOpts,
    /// Assignment distance: l2 (squared Euclidean), l1 (Manhattan) or cosine (spherical
    /// k-means: rows of norm 0 are an error).
    #[arg(long, value_name = "METRIC", default_value = "l2")]
    metric: Metric,
    /// Assignment arithmetic, the same answer bit for bit whichever: auto (tf32 where it is
    /// faster, else exact), exact (FP32 only) or tf32 (distance products on TF32 tensor cores
    /// with a proven error bound, every centroid the bound cannot rule out re-scored in FP32;
    /// l2 only, GPU of compute capability 8.0+; the CPU computes it in FP32).
    #[arg(long, value_name = "PRECISION", default_value = "auto")]
    precision: Precision,
    #[command(flatten)]
    out: FitOutputs,
    #[command(flatten)]
    csv: CsvOpts,
}

/// The files and format a k-means fit writes (`kmeans` and `minibatch`).
#[derive(clap::Args, Debug)]
pub struct FitOutputs {
    /// Write the label of every row here (.npy or CSV).
    #[arg(long, value_name = "FILE")]
    pub labels_out: Option<PathBuf>,
    /// Write the k × d centroids here (.npy or CSV).
    #[arg(long, value_name = "FILE")]
    pub centroids_out: Option<PathBuf>,
    /// Save the model (centroids and parameters, JSON) for `kmeans-knn predict`.
    #[arg(long, value_name = "FILE")]
    pub save_model: Option<PathBuf>,
    /// Print one JSON object on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
}

impl FitOutputs {
    /// The output files asked for.
    pub fn paths(&self) -> Vec<&Path> {
        [&self.labels_out, &self.centroids_out, &self.save_model]
            .into_iter()
            .flatten()
            .map(PathBuf::as_path)
            .collect()
    }

    /// Queues the labels and the centroids (with the input's column names) where asked; the
    /// model file is the caller's, which knows the parameters.
    pub fn write_fit(
        &self,
        outputs: &mut Outputs,
        model: &KMeansModel,
        header: Option<&[String]>,
    ) -> Result<(), IoError> {
        if let Some(p) = &self.labels_out {
            outputs.vector(p, &model.labels)?;
        }
        if let Some(p) = &self.centroids_out {
            outputs.matrix(p, model.k, model.d, &model.centroids, header)?;
        }
        Ok(())
    }

    /// What a fit prints, as every subcommand does: with `--json` the summary object on
    /// stdout; else, with no output file, the labels on stdout (one per line, as `knn`,
    /// `predict` and `classify` print their results) and the summary on stderr; else the
    /// summary on stdout. `labels` is the fit's, `text` the summary.
    pub fn print(
        &self,
        ui: Ui,
        labels: &[u32],
        summary: &serde_json::Value,
        text: &str,
    ) -> Result<(), CliError> {
        if self.json {
            return super::print_json(summary);
        }
        if !self.paths().is_empty() {
            return super::print_stdout(text);
        }
        let mut lines = String::with_capacity(labels.len() * 4);
        for label in labels {
            lines += &label.to_string();
            lines.push('\n');
        }
        super::print_stdout(&lines)?;
        ui.note(text.trim_end());
        Ok(())
    }
}

/// The parameters a model was fitted with, saved beside it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SavedParams {
    pub init: String,
    pub seed: u64,
    pub max_iter: usize,
    pub tol: f64,
    pub n_init: usize,
    pub input: Option<String>,
}

/// The model file: the library's model plus how it was made.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SavedModel {
    #[serde(default = "format_name")]
    pub format: String,
    #[serde(flatten)]
    pub model: KMeansModel,
    #[serde(default)]
    pub params: Option<SavedParams>,
    #[serde(default)]
    pub columns: Option<Vec<String>>,
}

fn format_name() -> String {
    "kmeans-knn model".into()
}

impl SavedModel {
    pub fn new(
        model: KMeansModel,
        fit: &FitOpts,
        input: &Path,
        columns: Option<Vec<String>>,
    ) -> Self {
        SavedModel {
            format: format_name(),
            model,
            params: Some(SavedParams {
                init: match &fit.init {
                    crate::Init::KMeansPlusPlus => "kmeans++".into(),
                    crate::Init::KMeansParallel => "kmeans||".into(),
                    crate::Init::RandomPoints => "random".into(),
                    crate::Init::RandomLabels => "random-labels".into(),
                    crate::Init::Centroids(_) => "centroids".into(),
                },
                seed: fit.seed,
                max_iter: fit.max_iter,
                tol: fit.tol,
                n_init: fit.n_init,
                input: Some(input.display().to_string()),
            }),
            columns,
        }
    }

    /// Reads and checks a model file.
    pub fn load(path: &Path) -> Result<SavedModel, IoError> {
        let text = std::fs::read_to_string(path).map_err(|e| IoError::read(path, &e))?;
        SavedModel::parse(&text, path)
    }

    /// Parses and checks the text of a model file; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<SavedModel, IoError> {
        if text.trim().is_empty() {
            return Err(IoError::input(path, "the file is empty"));
        }
        let saved: SavedModel = serde_json::from_str(text)
            .map_err(|e| IoError::input(path, format!("not a kmeans-knn model file: {e}")))?;
        let m = &saved.model;
        let problem = if m.k == 0 || m.d == 0 {
            Some("k and d must be at least 1".to_string())
        } else if m.k.checked_mul(m.d) != Some(m.centroids.len()) {
            Some(format!(
                "it holds {} centroid values, k × d = {} × {}",
                m.centroids.len(),
                m.k,
                m.d
            ))
        } else if m.centroids.iter().any(|v| !v.is_finite()) {
            Some("a centroid value is not finite".into())
        } else {
            None
        };
        match problem {
            Some(p) => Err(IoError::input(
                path,
                format!("the model is inconsistent: {p}"),
            )),
            None => Ok(saved),
        }
    }
}

pub fn run(a: Args, ui: Ui) -> Result<(), CliError> {
    let outs = a.out.paths();
    check_outputs(outs.iter().copied())?;
    let table = read_matrix(&a.input, &a.csv.read())?;
    let weights = a.weights.read(&a.csv.read(), table.rows, &a.input)?;
    let start = Instant::now();
    let view = table.view();
    let fitted = fit_with_progress(ui, &a.fit, a.metric, a.precision, view, weights.as_deref());
    let model = about(&a.input, fitted)?;
    let secs = start.elapsed().as_secs_f64();

    let mut outputs = Outputs::new();
    a.out
        .write_fit(&mut outputs, &model, table.header.as_deref())?;
    let cluster_sizes = model.cluster_sizes.clone();
    let summary = json!({
        "k": model.k,
        "n": table.rows,
        "d": table.cols,
        "iterations": model.n_iter,
        "inertia": model.inertia,
        "converged": model.converged,
        "stop": model.stop,
        "device": model.device,
        "seconds": secs,
        "metric": a.metric.to_string(),
        "precision": a.precision.to_string(),
        "cluster_sizes": cluster_sizes,
        "sample_weight": a.weights.name(),
        "outputs": outs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
    });
    let text = summary_text(&a, &model, table.rows, secs, &outs);
    // With a model file the labels are not printed (an output file was asked for).
    let labels = match &a.out.save_model {
        Some(p) => {
            let saved = SavedModel::new(model, &a.fit, &a.input, table.header.clone());
            outputs.json(p, &saved)?;
            Vec::new()
        }
        None => model.labels,
    };
    outputs.commit()?;
    a.out.print(ui, &labels, &summary, &text)
}

fn summary_text(a: &Args, m: &KMeansModel, n: usize, secs: f64, outs: &[&Path]) -> String {
    let mut s = format!(
        "k-means: {} — {n} points × {} dimensions, k = {}, {} metric\n",
        a.input.display(),
        m.d,
        m.k,
        a.metric
    );
    s += &format!("  device      {}\n", m.device);
    s += &format!(
        "  iterations  {}{}\n",
        m.n_iter,
        if m.converged {
            " (converged)"
        } else {
            " (stopped at --max-iter)"
        }
    );
    s += &super::fit_summary_tail(m, secs, outs);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> String {
        SavedModel::parse(text, Path::new("m.json"))
            .map(|_| "ok".into())
            .unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn model_files_are_checked_before_use() {
        let model = |k: &str, d: &str, c: &str| {
            format!(
                r#"{{"k":{k},"d":{d},"metric":"L2","centroids":{c},"cluster_sizes":[1],
                "inertia":0,"n_iter":1,"converged":true,"device":"cpu"}}"#
            )
        };
        assert_eq!(parse(&model("1", "2", "[0.5,1]")), "ok");
        assert_eq!(parse(" \n"), "m.json: the file is empty");
        assert!(parse("{").starts_with("m.json: not a kmeans-knn model file: EOF"));
        assert!(parse(&model("-1", "2", "[]")).contains("not a kmeans-knn model file"));
        assert_eq!(
            parse(&model("0", "2", "[]")),
            "m.json: the model is inconsistent: k and d must be at least 1"
        );
        assert_eq!(
            parse(&model("2", "2", "[1,2,3]")),
            "m.json: the model is inconsistent: it holds 3 centroid values, k × d = 2 × 2"
        );
        // k × d overflows: the check must not (it panicked with debug assertions).
        assert!(parse(&model("4294967296", "4294967296", "[1]")).contains("k × d = 4294967296 × "));
        assert_eq!(
            parse(&model("1", "1", "[1e39]")),
            "m.json: the model is inconsistent: a centroid value is not finite"
        );
    }
}
