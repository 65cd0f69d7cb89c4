//! `kmeans-knn segment`: k-means colour segmentation of a photo.

use super::{CliError, FitOpts, Ui, about, check_outputs, fit_with_progress};
use crate::image_ops::{Pixels, palette_strip, recolor};
use crate::io::Outputs;
use crate::io::image::{output_format, read_image};
use crate::{KMeansModel, Metric, Precision};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub const EXAMPLES: &str = "\
Examples:
  kmeans-knn segment photo.jpg --k 8 -o segmented.png
  kmeans-knn segment photo.png --k 255 --metric l2 -o out.png --palette-out palette.png
  kmeans-knn segment scan.png --k 4 --device cpu --seed 3 -o out.jpg

Every pixel is a point (R, G, B in 0..255; grey images use one channel) and takes the colour of
its cluster's centroid. The palette strip shows one square per colour, most frequent first.
The default metric is l1 (Manhattan), the classic recipe for colour segmentation.";

/// Arguments of `segment`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The photo: PNG or JPEG.
    #[arg(value_name = "IMAGE")]
    image: PathBuf,
    /// The recoloured image (.png, .jpg).
    #[arg(short, long, value_name = "OUT.png")]
    output: PathBuf,
    #[command(flatten)]
    pub(super) fit: FitOpts,
    /// Colour distance: l1 (Manhattan) or l2 (squared Euclidean).
    #[arg(long, value_name = "METRIC", default_value = "l1")]
    metric: Metric,
    /// Also write the palette as a strip of squares, most frequent colour first (.png).
    #[arg(long, value_name = "FILE")]
    palette_out: Option<PathBuf>,
    /// Side of one palette square in pixels.
    #[arg(long, value_name = "PX", default_value_t = 32,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    swatch: u32,
    /// Print one JSON object on stdout instead of the summary.
    #[arg(long)]
    json: bool,
}

/// The result of segmenting one image.
pub struct Segmented {
    pub model: KMeansModel,
    pub image: image::RgbImage,
    pub palette: image::RgbImage,
    pub colours: usize,
    pub seconds: f64,
}

/// Segments `pixels` (shared with `demo`).
pub fn segment(
    ui: Ui,
    pixels: &Pixels,
    fit: &FitOpts,
    metric: Metric,
    swatch: u32,
    name: &Path,
) -> Result<Segmented, CliError> {
    let start = Instant::now();
    let model = about(
        name,
        fit_with_progress(ui, fit, metric, Precision::Exact, pixels.matrix(), None),
    )?;
    let seconds = start.elapsed().as_secs_f64();
    let image = about(
        name,
        recolor(
            &model.labels,
            &model.centroids,
            pixels.channels,
            pixels.width,
            pixels.height,
        ),
    )?;
    let palette = about(
        name,
        palette_strip(
            &model.centroids,
            pixels.channels,
            &model.cluster_sizes,
            swatch,
        ),
    )?;
    let colours = distinct_colours(&image);
    Ok(Segmented {
        model,
        image,
        palette,
        colours,
        seconds,
    })
}

/// Number of distinct colours in `img`.
pub fn distinct_colours(img: &image::RgbImage) -> usize {
    let mut seen: Vec<[u8; 3]> = img.pixels().map(|p| p.0).collect();
    seen.sort_unstable();
    seen.dedup();
    seen.len()
}

pub fn run(a: Args, ui: Ui) -> Result<(), CliError> {
    if a.metric == Metric::Cosine {
        // Unit-length centroids are directions, not colours to paint with.
        return Err(CliError::usage(
            "--metric cosine is not a colour distance: use l1 or l2",
        ));
    }
    output_format(&a.output)?;
    if let Some(p) = &a.palette_out {
        output_format(p)?;
    }
    let outs: Vec<&Path> = std::iter::once(&a.output)
        .chain(&a.palette_out)
        .map(PathBuf::as_path)
        .collect();
    check_outputs(outs.iter().copied())?;
    let img = read_image(&a.image)?;
    let pixels = Pixels::from_image(&img);
    let seg = segment(ui, &pixels, &a.fit, a.metric, a.swatch, &a.image)?;
    let mut outputs = Outputs::new();
    outputs.image(&a.output, &seg.image)?;
    if let Some(p) = &a.palette_out {
        outputs.image(p, &seg.palette)?;
    }
    outputs.commit()?;
    let m = &seg.model;
    if a.json {
        return super::print_json(&json!({
            "k": m.k,
            "width": pixels.width,
            "height": pixels.height,
            "channels": pixels.channels,
            "n": pixels.len(),
            "iterations": m.n_iter,
            "inertia": m.inertia,
            "converged": m.converged,
            "device": m.device,
            "seconds": seg.seconds,
            "metric": a.metric.to_string(),
            "colours": seg.colours,
            "outputs": outs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        }));
    }
    let text = format!(
        "segment: {} — {}×{} pixels, k = {}, {} metric\n  device      {}\n  iterations  {}{}\n  inertia     {:.6e}\n  elapsed     {}\n  colours     {} in the output\n  wrote       {}\n",
        a.image.display(),
        pixels.width,
        pixels.height,
        m.k,
        a.metric,
        m.device,
        m.n_iter,
        if m.converged {
            " (converged)"
        } else {
            " (stopped at --max-iter)"
        },
        m.inertia,
        super::seconds(seg.seconds),
        seg.colours,
        super::list_paths(&outs)
    );
    super::print_stdout(&text)
}
