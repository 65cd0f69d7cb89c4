//! The subcommands of `kmeans-knn`, one module each, and what they share: the error type with its
//! exit code, common options, progress bars and printing.

mod classify;
mod demo;
mod distances;
mod info;
mod kmeans;
mod knn;
mod metric;
mod minibatch;
mod patches;
mod predict;
mod radius;
mod regress;
mod segment;
mod supervised;

pub use kmeans::SavedModel;

use crate::device::visible;
use crate::io::{Blame, IoError, ReadOptions};
use crate::{Device, EmptyClusters, Init, KMeans, KMeansParams, Metric};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::fmt;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

const ABOUT: &str = "k-means clustering and exact k-nearest-neighbour search on an NVIDIA GPU \
(Rust kernels compiled to PTX) or on the CPU";

const EXAMPLES: &str = "\
Examples:
  kmeans-knn demo                  # built-in sample data; writes ./kmeans-knn-demo/
  kmeans-knn kmeans points.csv --k 8 --labels-out labels.csv --save-model model.json
  kmeans-knn minibatch big.npy --k 1024 --batch-size 4096 --labels-out labels.npy
  kmeans-knn predict --model model.json new.csv --labels-out new_labels.csv
  kmeans-knn knn --train train.npy --query query.npy --k 10 --indices-out nn.npy
  kmeans-knn radius --train train.npy --query query.npy --radius 0.5 --graph-out g.npz
  kmeans-knn classify --train train.csv --query test.csv --k 25 --scale zscore --truth truth.csv
  kmeans-knn regress --train train.csv --query test.csv --k 10 --weights distance --truth y.csv
  kmeans-knn distances a.csv b.csv --metric cosine -o d.npy
  kmeans-knn segment photo.jpg --k 16 -o segmented.png --palette-out palette.png
  kmeans-knn patches photo.png --patch 5 --stride 1 --k 80 -o centroids.png
  kmeans-knn info

Inputs: CSV (header detected; --delimiter), NPY (2-D, any float or int dtype), PNG/JPEG images.
Outputs: .npy is NPY, .json JSON, anything else CSV; written whole or not at all.
Exit codes: 0 success, 2 bad usage or bad input, 1 other failures.";

/// The command line.
#[derive(Parser, Debug)]
#[command(name = "kmeans-knn", version, about = ABOUT, after_help = EXAMPLES, max_term_width = 100)]
pub struct Cli {
    /// No progress bars and no summaries on stderr.
    #[arg(short, long, global = true)]
    pub quiet: bool,

    /// CPU threads for the work (0 = every core; default: every core, or RAYON_NUM_THREADS).
    /// Results are identical at every count.
    #[arg(long, global = true, value_name = "N", value_parser = parse_threads)]
    pub threads: Option<usize>,

    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Cluster the rows of a CSV/NPY file with k-means.
    #[command(after_help = kmeans::EXAMPLES)]
    Kmeans(kmeans::Args),
    /// Cluster the rows of a CSV/NPY file with mini-batch k-means (random batches of rows: for
    /// data too large for many full passes).
    #[command(after_help = minibatch::EXAMPLES)]
    Minibatch(minibatch::Args),
    /// Label new rows with a saved k-means model.
    #[command(after_help = predict::EXAMPLES)]
    Predict(predict::Args),
    /// Exact k nearest neighbours of every query row among the training rows.
    #[command(after_help = knn::EXAMPLES)]
    Knn(knn::Args),
    /// Every training row within a distance of each query row (exact; CSR arrays or a graph).
    #[command(after_help = radius::EXAMPLES)]
    Radius(radius::Args),
    /// kNN classification: predict labels of query rows from labelled training rows.
    #[command(after_help = classify::EXAMPLES)]
    Classify(classify::Args),
    /// kNN regression: predict a numeric target of query rows from training rows.
    #[command(after_help = regress::EXAMPLES)]
    Regress(regress::Args),
    /// The distance matrix between the rows of two files, written in row blocks.
    #[command(after_help = distances::EXAMPLES)]
    Distances(distances::Args),
    /// Colour segmentation: every pixel takes the colour of its k-means cluster.
    #[command(after_help = segment::EXAMPLES)]
    Segment(segment::Args),
    /// Cluster the p×p patches of an image and draw the centroid patches as a grid.
    #[command(after_help = patches::EXAMPLES)]
    Patches(patches::Args),
    /// Which backend runs the work: GPU name, compute capability, memory, driver, kernel image.
    #[command(after_help = info::EXAMPLES)]
    Info(info::Args),
    /// Run k-means, segmentation and patch clustering on built-in sample data.
    #[command(after_help = demo::EXAMPLES)]
    Demo(demo::Args),
}

impl Cli {
    /// Parses the process's arguments as `Cli::parse` does (printing clap's message and exiting
    /// on bad usage), and points a flag in the wrong case to its lower-case name: `--K 3` is
    /// answered with a tip to write `--k 3`.
    pub fn parse_args() -> Cli {
        let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
        Cli::try_parse_from(&args).unwrap_or_else(|e| {
            let lower: Vec<std::ffi::OsString> = args
                .iter()
                .map(|a| match a.to_str() {
                    Some(flag) if flag.starts_with("--") => flag.to_ascii_lowercase().into(),
                    _ => a.clone(),
                })
                .collect();
            if e.kind() == clap::error::ErrorKind::UnknownArgument
                && Cli::try_parse_from(&lower).is_ok()
            {
                let wrong = match e.get(clap::error::ContextKind::InvalidArg) {
                    Some(clap::error::ContextValue::String(flag)) => flag.clone(),
                    _ => String::new(),
                };
                let right = wrong.split('=').next().unwrap_or("").to_ascii_lowercase();
                let tip = format!("tip: flags are lower case: write '{right}', not '{wrong}'");
                let _ = writeln!(std::io::stderr(), "{}\n{tip}", e.render());
                std::process::exit(2);
            }
            e.exit()
        })
    }
}

impl Command {
    /// The device the subcommand computes on.
    fn device_mut(&mut self) -> &mut Device {
        match self {
            Command::Kmeans(a) => &mut a.fit.device,
            Command::Segment(a) => &mut a.fit.device,
            Command::Patches(a) => &mut a.fit.device,
            Command::Classify(a) => &mut a.knn.device,
            Command::Regress(a) => &mut a.knn.device,
            Command::Minibatch(a) => &mut a.device,
            Command::Predict(a) => &mut a.device,
            Command::Knn(a) => &mut a.device,
            Command::Radius(a) => &mut a.device,
            Command::Distances(a) => &mut a.device,
            Command::Info(a) => &mut a.device,
            Command::Demo(a) => &mut a.device,
        }
    }
}

/// What [`start_only_the_gpus_used`] did: `CUDA_VISIBLE_DEVICES`'s new value and the
/// `--device` it was set for.
static NARROWED: OnceLock<(String, Device)> = OnceLock::new();

/// Lets the CUDA driver see only the GPUs the command uses, so that it starts only those (the
/// driver's start grows with the GPUs it sees: ~1 s with four, ~0.25 s with one): sets
/// `CUDA_VISIBLE_DEVICES` and renumbers `--device` in it (see [`crate::device::visible`]).
/// `info` reports it. The binary calls this first, before any other thread exists; the library
/// never changes the environment.
pub fn start_only_the_gpus_used(cli: &mut Cli) {
    let device = cli.command.device_mut();
    let visible = std::env::var(visible::VISIBLE_VAR).ok();
    let host = crate::backend::cuda::driver::host_gpus();
    if let Some(narrowed) = visible::narrowed(*device, visible.as_deref(), host) {
        // SAFETY: the binary calls this at its start, before any thread that could read the
        // environment exists, and before the driver (which reads this variable) is loaded.
        unsafe { std::env::set_var(visible::VISIBLE_VAR, &narrowed.value) };
        let _ = NARROWED.set((narrowed.value, *device));
        *device = narrowed.device;
    }
}

/// The narrower `CUDA_VISIBLE_DEVICES` this process set, and the `--device` it was set for.
fn narrowed() -> Option<&'static (String, Device)> {
    NARROWED.get()
}

/// Runs the parsed command line.
pub fn run(mut cli: Cli) -> Result<(), CliError> {
    let ui = Ui { quiet: cli.quiet };
    if let Some(threads) = cli.threads {
        crate::set_global_threads(threads)?;
    }
    // `info` tells what it can without starting the driver.
    let start = match cli.command {
        Command::Info(_) => None,
        _ => start_named_gpus(*cli.command.device_mut()),
    };
    let result = run_command(cli.command, ui);
    // Joined so that the process never exits while the driver is starting on another thread.
    if let Some(start) = start {
        let _ = start.join();
    }
    result
}

/// Starts the GPUs that `device` names (the driver, their contexts and kernels) on a thread, so
/// that the input is read and checked meanwhile; the job's first GPU call waits for it. Only for
/// GPUs asked for by name: `auto` may settle on the CPU for a small job, which should not pay
/// for a driver it does not use.
fn start_named_gpus(device: Device) -> Option<std::thread::JoinHandle<()>> {
    matches!(device, Device::Cuda(_) | Device::Gpus(_)).then(|| {
        std::thread::spawn(move || {
            // An error shows again, with its context, where the job asks for the GPU.
            let _ = device.resolve();
        })
    })
}

fn run_command(command: Command, ui: Ui) -> Result<(), CliError> {
    match command {
        Command::Kmeans(a) => kmeans::run(a, ui),
        Command::Minibatch(a) => minibatch::run(a, ui),
        Command::Predict(a) => predict::run(a, ui),
        Command::Knn(a) => knn::run(a, ui),
        Command::Radius(a) => radius::run(a, ui),
        Command::Classify(a) => classify::run(a, ui),
        Command::Regress(a) => regress::run(a, ui),
        Command::Distances(a) => distances::run(a, ui),
        Command::Segment(a) => segment::run(a, ui),
        Command::Patches(a) => patches::run(a, ui),
        Command::Info(a) => info::run(a, ui),
        Command::Demo(a) => demo::run(a, ui),
    }
}

/// `--threads N`: 0 (every core) up to [`crate::threads::MAX_THREADS`].
fn parse_threads(text: &str) -> Result<usize, String> {
    let n: usize = (text.parse()).map_err(|_| format!("'{text}' is not a thread count"))?;
    if n > crate::threads::MAX_THREADS {
        return Err(format!(
            "{n} threads; at most {} (0 = every core)",
            crate::threads::MAX_THREADS
        ));
    }
    Ok(n)
}

/// A failure with its exit code: 2 for bad usage or bad input, 1 for anything else.
#[derive(Debug)]
pub struct CliError {
    /// The process exit code.
    pub code: u8,
    /// One sentence.
    pub message: String,
}

impl CliError {
    /// Bad usage or bad input (exit code 2).
    pub fn usage(message: impl Into<String>) -> Self {
        CliError {
            code: 2,
            message: message.into(),
        }
    }

    /// Any other failure (exit code 1).
    pub fn failure(message: impl Into<String>) -> Self {
        CliError {
            code: 1,
            message: message.into(),
        }
    }

    /// The same error, prefixed with the file it is about.
    pub fn in_file(mut self, path: &Path) -> Self {
        self.message = format!("{}: {}", path.display(), self.message);
        self
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<IoError> for CliError {
    fn from(e: IoError) -> Self {
        let code = match e.blame {
            Blame::Input => 2,
            Blame::Output => 1,
        };
        CliError {
            code,
            message: e.to_string(),
        }
    }
}

impl From<crate::Error> for CliError {
    fn from(e: crate::Error) -> Self {
        use crate::Error::*;
        let code = match e {
            EmptyData
            | ZeroDimension
            | ShapeMismatch { .. }
            | NonFinite { .. }
            | DimensionMismatch { .. }
            | LabelCount { .. }
            | TargetCount { .. }
            | SampleWeightCount { .. }
            | InvalidSampleWeight { .. }
            | ZeroSampleWeights
            | ZeroVector { .. }
            | InvalidParameter { .. } => 2,
            _ => 1,
        };
        CliError {
            code,
            message: e.to_string(),
        }
    }
}

/// Result of a library call about input file `path`: errors about the input name the file
/// (others, such as an unusable GPU, are not the file's fault).
pub fn about<T>(path: &Path, r: crate::Result<T>) -> Result<T, CliError> {
    r.map_err(|e| {
        let e = CliError::from(e);
        if e.code == 2 { e.in_file(path) } else { e }
    })
}

/// Options of commands that read CSV.
#[derive(Args, Debug, Clone, Copy, Default)]
pub struct CsvOpts {
    /// Field delimiter of CSV inputs: one character, or 'tab' [default: ',' (tab for .tsv)].
    #[arg(long, value_name = "CHAR", value_parser = parse_delimiter)]
    pub delimiter: Option<u8>,
    /// Treat the first row of CSV inputs as a header (default: detected — a first row with no
    /// numbers is a header).
    #[arg(long, conflicts_with = "no_header")]
    pub header: bool,
    /// Treat the first row of CSV inputs as data.
    #[arg(long)]
    pub no_header: bool,
}

impl CsvOpts {
    /// The library's read options.
    pub fn read(&self) -> ReadOptions {
        ReadOptions {
            delimiter: self.delimiter,
            header: if self.header {
                Some(true)
            } else if self.no_header {
                Some(false)
            } else {
                None
            },
        }
    }
}

fn parse_delimiter(s: &str) -> Result<u8, String> {
    match s {
        "tab" | "\\t" | "\t" => Ok(b'\t'),
        "space" => Ok(b' '),
        _ if s.len() == 1 && s.is_ascii() => Ok(s.as_bytes()[0]),
        _ => Err(format!(
            "'{s}' is not one ASCII character (or 'tab', 'space')"
        )),
    }
}

/// The k-means options shared by `kmeans`, `segment` and `patches`.
#[derive(Args, Debug, Clone)]
pub struct FitOpts {
    /// Number of clusters.
    #[arg(short = 'k', long = "k", value_name = "K")]
    pub k: usize,
    /// Initialisation: kmeans++, kmeans|| (k-means‖), random (k distinct points) or random-labels.
    #[arg(long, value_name = "METHOD", default_value = "kmeans++")]
    pub init: Init,
    /// Seed of every random choice; the same seed gives the same result on CPU and GPU.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,
    /// Most Lloyd iterations per run.
    #[arg(long, value_name = "N", default_value_t = crate::kmeans::DEFAULT_MAX_ITER)]
    pub max_iter: usize,
    /// Stop when the squared centroid shift is at most T × the mean feature variance.
    #[arg(long, value_name = "T", default_value_t = 1e-4)]
    pub tol: f64,
    /// Runs from different initialisations; the lowest inertia wins.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub n_init: usize,
    /// Where to compute: auto (the GPU when there is one, unless the fit is too small to repay
    /// its start), cpu, gpu, gpu:N; or several GPUs, gpu:N,M,… or gpu:all, over which the rows
    /// are sharded (same result as one GPU).
    #[arg(long, value_name = "DEVICE", default_value = "auto")]
    pub device: Device,
    /// GPU memory the fit may use, e.g. 8GiB or 500M (default: 70 % of what is free; per GPU
    /// of a set); rows beyond it stay in host memory and take turns on the GPU in batches (same
    /// result; prefer --init 'kmeans||', as k-means++ passes over the rows once per centroid).
    #[arg(long, value_name = "BYTES")]
    pub gpu_memory: Option<Bytes>,
    /// What a cluster that loses every point does: farthest (moves onto the farthest point,
    /// which also stays in its own cluster's mean: integer weights give the repeated rows'
    /// model), take-farthest (scikit-learn's rule: the point leaves its cluster with its
    /// weight) or keep (stays where it was).
    #[arg(long, value_name = "RULE", default_value = "farthest")]
    pub empty_clusters: EmptyClusters,
}

impl FitOpts {
    /// The library's parameters.
    pub fn params(&self, metric: Metric) -> KMeansParams {
        let params = KMeans::params(self.k)
            .init(self.init.clone())
            .seed(self.seed)
            .max_iter(self.max_iter)
            .tol(self.tol)
            .n_init(self.n_init)
            .metric(metric)
            .device(self.device)
            .empty_clusters(self.empty_clusters);
        match self.gpu_memory {
            Some(Bytes(budget)) => params.memory_budget(budget),
            None => params,
        }
    }
}

/// What the user asked about the terminal.
#[derive(Clone, Copy, Debug)]
pub struct Ui {
    /// `--quiet`.
    pub quiet: bool,
}

impl Ui {
    /// Whether progress bars are drawn: not quiet and stderr is a terminal.
    pub fn bars(&self) -> bool {
        !self.quiet && std::io::stderr().is_terminal()
    }

    /// A bar over k-means iterations (hidden when not drawn).
    pub fn iterations_bar(&self, params: &FitOpts) -> ProgressBar {
        if !self.bars() {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::with_draw_target(
            Some(params.max_iter as u64),
            ProgressDrawTarget::stderr(),
        );
        bar.set_style(
            ProgressStyle::with_template("{prefix} [{bar:16}] {pos}/{len} {msg} {elapsed}")
                .expect("template")
                .progress_chars("=> "),
        );
        bar.set_prefix("k-means");
        bar
    }

    /// A spinner for work without steps.
    pub fn spinner(&self, message: &str) -> ProgressBar {
        if !self.bars() {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("template"),
        );
        bar.set_message(message.to_string());
        bar.enable_steady_tick(Duration::from_millis(100));
        bar
    }

    /// A bar over `len` items.
    pub fn counter(&self, message: &str, len: u64) -> ProgressBar {
        if !self.bars() {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{msg} [{bar:20}] {pos}/{len} rows, eta {eta}")
                .expect("template")
                .progress_chars("=> "),
        );
        bar.set_message(message.to_string());
        bar
    }

    /// Prints a line on stderr unless quiet.
    pub fn note(&self, text: &str) {
        if !self.quiet {
            eprintln!("{text}");
        }
    }
}

/// Fits k-means with a progress bar over iterations.
pub fn fit_with_progress<'a>(
    ui: Ui,
    opts: &FitOpts,
    metric: Metric,
    precision: crate::Precision,
    data: impl Into<crate::MatrixView<'a>>,
    sample_weight: Option<&[f32]>,
) -> crate::Result<crate::KMeansModel> {
    let bar = ui.iterations_bar(opts);
    let n_init = opts.n_init;
    let b = bar.clone();
    let params = opts
        .params(metric)
        .precision(precision)
        .on_iteration(move |it| {
            b.set_position(it.iteration as u64);
            let run = if n_init > 1 {
                format!("run {}/{n_init} ", it.run + 1)
            } else {
                String::new()
            };
            b.set_message(format!(
                "{run}inertia {:.4e}, {} moved",
                it.inertia, it.changed
            ));
        });
    let result = match sample_weight {
        Some(w) => params.fit_weighted(data, w),
        None => params.fit(data),
    };
    bar.finish_and_clear();
    result
}

/// Option of the commands that take sample weights.
#[derive(Args, Debug, Clone, Default)]
pub struct SampleWeightOpts {
    /// One weight per (training) row, finite and ≥ 0 (CSV/text with an optional header line, or
    /// a 1-D or n × 1 NPY array).
    #[arg(long, value_name = "FILE")]
    pub sample_weight: Option<PathBuf>,
}

impl SampleWeightOpts {
    /// The weights file as given, for summaries.
    pub fn name(&self) -> Option<String> {
        self.sample_weight.as_ref().map(|p| p.display().to_string())
    }

    /// The weights of the `rows` rows of `data` (checked: count, values), if asked for.
    pub fn read(
        &self,
        opts: &ReadOptions,
        rows: usize,
        data: &Path,
    ) -> Result<Option<Vec<f32>>, CliError> {
        let Some(path) = &self.sample_weight else {
            return Ok(None);
        };
        let weights = crate::io::read_numbers(path, opts)?;
        if weights.len() != rows {
            return Err(CliError::usage(format!(
                "{}: it has {} weights but {} has {rows} rows",
                path.display(),
                weights.len(),
                data.display()
            )));
        }
        about(path, crate::sample_weight::check(&weights, rows))?;
        Ok(Some(weights))
    }
}

/// Writes `text` to stdout; a closed pipe (`| head`) is not an error.
pub fn print_stdout(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::failure(format!("cannot write to stdout: {e}"))),
    }
}

/// Prints one JSON object on stdout.
pub fn print_json(value: &serde_json::Value) -> Result<(), CliError> {
    print_stdout(&format!("{value}\n"))
}

/// "a.csv, b.npy" for a summary line.
pub fn list_paths(paths: &[&Path]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Cluster sizes for a summary: the largest first, at most `max` shown.
pub fn sizes_line(sizes: &[u32], max: usize) -> String {
    let order = crate::image_ops::order_by_size(sizes);
    let mut parts: Vec<String> = order
        .iter()
        .take(max)
        .map(|&c| format!("#{c}: {}", sizes[c]))
        .collect();
    if order.len() > max {
        parts.push(format!("… {} more", order.len() - max));
    }
    parts.join(", ")
}

/// The end of a k-means summary: inertia, time, cluster sizes and the files written.
pub fn fit_summary_tail(m: &crate::KMeansModel, secs: f64, outs: &[&Path]) -> String {
    let mut s = format!("  inertia     {:.6e}\n", m.inertia);
    s += &format!("  elapsed     {}\n", seconds(secs));
    s += &format!("  sizes       {}\n", sizes_line(&m.cluster_sizes, 8));
    if outs.is_empty() {
        s += "  wrote       nothing (labels on stdout; --labels-out, --centroids-out and --save-model \
              write files)\n";
    } else {
        s += &format!("  wrote       {}\n", list_paths(outs));
    }
    s
}

/// `--knn-layout`: how a kNN index over several GPUs (`--device gpu:0,1`, `gpu:all`) holds its
/// training rows.
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct LayoutArgs {
    /// With several GPUs: replicate (every GPU holds all the training rows and answers a share
    /// of the queries), shard (each GPU holds a part of the rows and every query's neighbours
    /// are merged), or auto (replicate up to 512 MiB of rows). Same answer either way.
    #[arg(long = "knn-layout", value_name = "LAYOUT", default_value = "auto")]
    layout: crate::KnnLayout,
}

impl LayoutArgs {
    /// `device` with this layout where it names several GPUs.
    pub fn on(self, device: crate::Device) -> crate::Device {
        match device {
            crate::Device::Gpus(set) => crate::Device::Gpus(set.with_knn_layout(self.layout)),
            other => other,
        }
    }
}

/// A number of bytes as people write it: `123`, `500M`, `8GiB`, `1.5G` (K, M, G, T are powers of
/// 1024, with or without `iB`/`B`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes(pub usize);

impl std::str::FromStr for Bytes {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
        let (number, unit) = t.split_at(split);
        let shift = match unit
            .to_ascii_lowercase()
            .trim_end_matches("ib")
            .trim_end_matches('b')
        {
            "" => 0,
            "k" => 10,
            "m" => 20,
            "g" => 30,
            "t" => 40,
            _ => {
                return Err(format!(
                    "'{s}': the unit is not one of K, M, G, T (or KiB, …)"
                ));
            }
        };
        match number.trim().parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => Ok(Bytes((v * (1u64 << shift) as f64) as usize)),
            _ => Err(format!("'{s}' is not a number of bytes, e.g. 500M or 8GiB")),
        }
    }
}

/// Formats seconds for people.
pub fn seconds(s: f64) -> String {
    if s < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

/// Checks, before any work, that every output can be created: its directory exists and it is
/// not a directory itself.
pub fn check_outputs<'p>(paths: impl IntoIterator<Item = &'p Path>) -> Result<(), CliError> {
    for p in paths {
        let dir = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if !dir.is_dir() {
            return Err(CliError::usage(format!(
                "{}: cannot write it: the directory {} does not exist",
                p.display(),
                dir.display()
            )));
        }
        if p.is_dir() {
            return Err(CliError::usage(format!(
                "{}: cannot write it: it is a directory",
                p.display()
            )));
        }
    }
    Ok(())
}
