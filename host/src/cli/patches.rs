//! `kmeans-knn patches`: cluster the p×p×c patches of an image.

use super::{CliError, FitOpts, Ui, about, check_outputs, fit_with_progress};
use crate::image_ops::{GridLayout, Pixels, order_by_size, patch_grid};
use crate::io::image::{output_format, read_image};
use crate::io::{Format, Outputs};
use crate::{KMeansModel, Metric, Precision};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub const EXAMPLES: &str = "\
Examples:
  kmeans-knn patches photo.png --patch 5 --stride 1 --k 80 -o centroids.png
  kmeans-knn patches photo.jpg --patch 8 --stride 4 --k 64 -o grid.png --sizes-out sizes.csv

A W×H image with c channels gives ((W−p)/s+1)·((H−p)/s+1) patches of p·p·c values. The grid
shows the k centroid patches, largest cluster first, row by row, enlarged by --zoom. The sizes
file lists rank, cluster and size (CSV, or JSON / NPY by extension) in the grid's order.";

/// Arguments of `patches`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The image: PNG or JPEG.
    #[arg(value_name = "IMAGE")]
    image: PathBuf,
    /// Patch side p in pixels.
    #[arg(long, value_name = "P", default_value_t = 5)]
    patch: usize,
    /// Step between patch corners in pixels.
    #[arg(long, value_name = "S", default_value_t = 1)]
    stride: usize,
    #[command(flatten)]
    pub(super) fit: FitOpts,
    /// The grid of centroid patches (.png, .jpg).
    #[arg(short, long, value_name = "GRID.png")]
    output: PathBuf,
    /// Write the cluster sizes in grid order here (CSV: rank,cluster,size; .json; .npy).
    #[arg(long, value_name = "FILE")]
    sizes_out: Option<PathBuf>,
    /// Pixels per patch pixel in the grid [default: enough for 40-pixel patches].
    #[arg(long, value_name = "Z", value_parser = clap::value_parser!(u32).range(1..=64))]
    zoom: Option<u32>,
    /// Print one JSON object on stdout instead of the summary.
    #[arg(long)]
    json: bool,
}

/// The result of clustering the patches of one image.
pub struct Clustered {
    pub model: KMeansModel,
    pub grid: image::RgbImage,
    pub order: Vec<usize>,
    pub patches: usize,
    pub dims: usize,
    pub seconds: f64,
}

/// Cuts, clusters and draws (shared with `demo`).
pub fn cluster_patches(
    ui: Ui,
    pixels: &Pixels,
    p: usize,
    stride: usize,
    fit: &FitOpts,
    zoom: Option<u32>,
    name: &Path,
) -> Result<Clustered, CliError> {
    let patches = about(name, pixels.patches(p, stride))?;
    let start = Instant::now();
    let model = about(
        name,
        fit_with_progress(
            ui,
            fit,
            Metric::L2,
            Precision::Exact,
            patches.matrix(),
            None,
        ),
    )?;
    let seconds = start.elapsed().as_secs_f64();
    let order = order_by_size(&model.cluster_sizes);
    let mut layout = GridLayout::for_patches(model.k, p);
    if let Some(z) = zoom {
        layout.zoom = z.max(1);
    }
    let grid = about(
        name,
        patch_grid(&model.centroids, p, pixels.channels, &order, layout),
    )?;
    Ok(Clustered {
        model,
        grid,
        order,
        patches: patches.rows,
        dims: patches.cols,
        seconds,
    })
}

/// Writes the sizes in grid order to `path`.
pub fn write_sizes(
    outputs: &mut Outputs,
    path: &Path,
    order: &[usize],
    sizes: &[u32],
) -> Result<(), CliError> {
    match Format::of(path) {
        Format::Json => {
            let rows: Vec<_> = order
                .iter()
                .enumerate()
                .map(|(r, &c)| json!({"rank": r, "cluster": c, "size": sizes[c]}))
                .collect();
            outputs.json(path, &rows)?;
        }
        _ => {
            let values: Vec<u32> = order
                .iter()
                .enumerate()
                .flat_map(|(r, &c)| [r as u32, c as u32, sizes[c]])
                .collect();
            let header = ["rank".to_string(), "cluster".into(), "size".into()];
            outputs.matrix(path, order.len(), 3, &values, Some(&header))?;
        }
    }
    Ok(())
}

pub fn run(a: Args, ui: Ui) -> Result<(), CliError> {
    output_format(&a.output)?;
    let outs: Vec<&Path> = std::iter::once(&a.output)
        .chain(&a.sizes_out)
        .map(PathBuf::as_path)
        .collect();
    check_outputs(outs.iter().copied())?;
    let img = read_image(&a.image)?;
    let pixels = Pixels::from_image(&img);
    let c = cluster_patches(ui, &pixels, a.patch, a.stride, &a.fit, a.zoom, &a.image)?;
    let mut outputs = Outputs::new();
    outputs.image(&a.output, &c.grid)?;
    if let Some(p) = &a.sizes_out {
        write_sizes(&mut outputs, p, &c.order, &c.model.cluster_sizes)?;
    }
    outputs.commit()?;
    let m = &c.model;
    let sizes_in_order: Vec<u32> = c.order.iter().map(|&i| m.cluster_sizes[i]).collect();
    if a.json {
        return super::print_json(&json!({
            "k": m.k,
            "n": c.patches,
            "d": c.dims,
            "patch": a.patch,
            "stride": a.stride,
            "iterations": m.n_iter,
            "inertia": m.inertia,
            "converged": m.converged,
            "device": m.device,
            "seconds": c.seconds,
            "grid": [c.grid.width(), c.grid.height()],
            "order": c.order,
            "sizes": sizes_in_order,
            "outputs": outs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        }));
    }
    let text = format!(
        "patches: {} — {}×{} pixels, {} patches of {}×{}×{} (stride {}), k = {}\n  device      {}\n  iterations  {}{}\n  inertia     {:.6e}\n  elapsed     {}\n  sizes       {}\n  grid        {}×{} pixels, largest cluster first\n  wrote       {}\n",
        a.image.display(),
        pixels.width,
        pixels.height,
        c.patches,
        a.patch,
        a.patch,
        pixels.channels,
        a.stride,
        m.k,
        m.device,
        m.n_iter,
        if m.converged {
            " (converged)"
        } else {
            " (stopped at --max-iter)"
        },
        m.inertia,
        super::seconds(c.seconds),
        super::sizes_line(&m.cluster_sizes, 8),
        c.grid.width(),
        c.grid.height(),
        super::list_paths(&outs)
    );
    super::print_stdout(&text)
}
