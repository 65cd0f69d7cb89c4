//! `kmeans-knn demo`: every kind of work on sample data built into the binary.

use super::{CliError, FitOpts, Ui, about, fit_with_progress};
use crate::image_ops::Pixels;
use crate::io::Outputs;
use crate::io::image::decode_image;
use crate::{Device, Init, Metric, Precision};
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};
use std::time::Instant;

pub const EXAMPLES: &str = "\
Examples:
  kmeans-knn demo
  kmeans-knn demo -o /tmp/demo --device cpu

Writes, into the folder:
  k-means on 3 generated blobs:
    blobs.csv, blobs_labels.csv, blobs_centroids.csv, blobs_model.json
  8-colour segmentation of the photo (L1):
    chelsea.png, chelsea_segmented.png, chelsea_palette.png
  5×5 patch clustering, k = 16:
    chelsea_patches.png, chelsea_patch_sizes.csv
  kNN classification of a train / query split of the blobs:
    blobs_train.csv, blobs_query.csv, blobs_truth.csv, blobs_predicted.csv

The photo is Chelsea the cat by Stefan van der Walt (CC0), from scikit-image's sample data.";

/// The sample photo (451 × 300, CC0; see host/assets/ATTRIBUTION.md).
pub const CHELSEA: &[u8] = include_bytes!("../../assets/chelsea.png");

/// Arguments of `demo`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Folder for the results (created when missing).
    #[arg(short, long, value_name = "DIR", default_value = "kmeans-knn-demo")]
    output: PathBuf,
    /// Where to compute: auto, cpu, gpu, gpu:N.
    #[arg(long, value_name = "DEVICE", default_value = "auto")]
    pub(super) device: Device,
}

fn fit_opts(k: usize, device: Device) -> FitOpts {
    FitOpts {
        k,
        init: Init::KMeansPlusPlus,
        seed: 0,
        max_iter: crate::kmeans::DEFAULT_MAX_ITER,
        tol: 1e-4,
        n_init: 1,
        device,
        gpu_memory: None,
        empty_clusters: crate::EmptyClusters::FarthestPoint,
    }
}

/// `n` points in 2-D around three centres, with their blob ids, reproducibly.
pub fn blobs(n: usize, seed: u64) -> (Vec<f32>, Vec<u32>) {
    const CENTRES: [[f32; 2]; 3] = [[-4.0, 1.0], [3.0, 4.0], [2.0, -3.5]];
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut points = Vec::with_capacity(2 * n);
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let b = i % 3;
        for c in CENTRES[b] {
            // Box–Muller: one standard normal from two uniforms.
            let u1: f32 = rng.random_range(f32::EPSILON..1.0);
            let u2: f32 = rng.random();
            let z = (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos();
            points.push(c + 1.1 * z);
        }
        ids.push(b as u32);
    }
    (points, ids)
}

fn csv_rows(points: &[f32], labels: Option<&[u32]>, header: &str) -> String {
    let mut s = format!("{header}\n");
    for (i, p) in points.chunks(2).enumerate() {
        match labels {
            Some(l) => s += &format!("{},{},blob{}\n", p[0], p[1], l[i]),
            None => s += &format!("{},{}\n", p[0], p[1]),
        }
    }
    s
}

pub fn run(a: Args, ui: Ui) -> Result<(), CliError> {
    let dir = &a.output;
    std::fs::create_dir_all(dir).map_err(|e| {
        CliError::failure(format!(
            "{}: cannot create the folder: {}",
            dir.display(),
            crate::io::describe_io(&e)
        ))
    })?;
    let total = Instant::now();
    let at = |name: &str| dir.join(name);
    let mut out = String::new();
    out += &format!("kmeans-knn demo — results in {}/\n", dir.display());
    // Describing `auto` would start the GPU's driver, which small steps skip (`Device::for_pairs`).
    let backend = match a.device {
        Device::Auto => {
            "auto (each step on the CPU or the GPU by its size; the same results)".into()
        }
        device => device.describe().unwrap_or_else(|e| format!("none ({e})")),
    };
    out += &format!("  backend: {backend}\n\n");

    // 1. k-means on generated blobs.
    let n = 3000;
    let (points, ids) = blobs(n, 42);
    let data = about(Path::new("blobs"), crate::MatrixView::new(&points, n, 2))?;
    let start = Instant::now();
    let fit = fit_opts(3, a.device);
    let model = about(
        Path::new("blobs"),
        fit_with_progress(ui, &fit, Metric::L2, Precision::Exact, &data, None),
    )?;
    let secs = start.elapsed().as_secs_f64();
    let mut outputs = Outputs::new();
    outputs.text(&at("blobs.csv"), &csv_rows(&points, None, "x,y"))?;
    outputs.vector(&at("blobs_labels.csv"), &model.labels)?;
    let header = ["x".to_string(), "y".to_string()];
    outputs.matrix(
        &at("blobs_centroids.csv"),
        3,
        2,
        &model.centroids,
        Some(&header),
    )?;
    // Train / query split for `knn` and `classify`: every fifth point is a query.
    let (mut train, mut train_ids, mut query, mut truth) = (vec![], vec![], vec![], String::new());
    truth += "label\n";
    for i in 0..n {
        if i % 5 == 0 {
            query.extend_from_slice(&points[2 * i..2 * i + 2]);
            truth += &format!("blob{}\n", ids[i]);
        } else {
            train.extend_from_slice(&points[2 * i..2 * i + 2]);
            train_ids.push(ids[i]);
        }
    }
    outputs.text(
        &at("blobs_train.csv"),
        &csv_rows(&train, Some(&train_ids), "x,y,label"),
    )?;
    outputs.text(&at("blobs_query.csv"), &csv_rows(&query, None, "x,y"))?;
    outputs.text(&at("blobs_truth.csv"), &truth)?;
    let input = at("blobs.csv");
    let agree = agreement(&model.labels, &ids, 3);
    outputs.json(
        &at("blobs_model.json"),
        &super::kmeans::SavedModel::new(model.clone(), &fit, &input, Some(header.to_vec())),
    )?;
    outputs.commit()?;
    out += &format!(
        "1. k-means, {n} points in 3 generated blobs, k = 3: {} iterations, inertia {:.1}, {}; \
         {:.1}% of points in their blob's cluster\n   → blobs.csv, blobs_labels.csv, \
         blobs_centroids.csv, blobs_model.json\n",
        model.n_iter,
        model.inertia,
        super::seconds(secs),
        100.0 * agree
    );

    // 2. Colour segmentation of the photo.
    let name = Path::new("chelsea.png (built in)");
    let img = decode_image(CHELSEA, name)?;
    let pixels = Pixels::from_image(&img);
    let seg = super::segment::segment(ui, &pixels, &fit_opts(8, a.device), Metric::L1, 32, name)?;
    let mut outputs = Outputs::new();
    outputs.image(&at("chelsea.png"), &img.to_rgb8())?;
    outputs.image(&at("chelsea_segmented.png"), &seg.image)?;
    outputs.image(&at("chelsea_palette.png"), &seg.palette)?;
    outputs.commit()?;
    out += &format!(
        "2. segmentation, {}×{} photo, k = 8 (L1): {} iterations, {}; {} colours\n   → chelsea.png, \
         chelsea_segmented.png, chelsea_palette.png\n",
        pixels.width,
        pixels.height,
        seg.model.n_iter,
        super::seconds(seg.seconds),
        seg.colours
    );

    // 3. 5×5 patch clustering on the photo at a third of its size.
    let small = img.resize(
        img.width() / 3,
        img.height() / 3,
        image::imageops::FilterType::Triangle,
    );
    let px = Pixels::from_image(&small);
    let c = super::patches::cluster_patches(ui, &px, 5, 2, &fit_opts(16, a.device), None, name)?;
    let mut outputs = Outputs::new();
    outputs.image(&at("chelsea_patches.png"), &c.grid)?;
    super::patches::write_sizes(
        &mut outputs,
        &at("chelsea_patch_sizes.csv"),
        &c.order,
        &c.model.cluster_sizes,
    )?;
    outputs.commit()?;
    out += &format!(
        "3. patches, {} patches of 5×5×3 (stride 2) from the photo at {}×{}, k = 16: {} \
         iterations, {}\n   → chelsea_patches.png, chelsea_patch_sizes.csv\n",
        c.patches,
        px.width,
        px.height,
        c.model.n_iter,
        super::seconds(c.seconds)
    );

    out += &super::classify::demo_step(ui, dir, a.device)?;

    out += &format!(
        "\ndone in {}. Try next:\n  kmeans-knn kmeans {d}/blobs.csv --k 3 --labels-out labels.csv\n  \
         kmeans-knn predict --model {d}/blobs_model.json {d}/blobs_query.csv\n  \
         kmeans-knn classify --train {d}/blobs_train.csv --query {d}/blobs_query.csv --k 15 \
         --truth {d}/blobs_truth.csv\n  \
         kmeans-knn segment {d}/chelsea.png --k 16 -o seg16.png --palette-out palette16.png\n",
        super::seconds(total.elapsed().as_secs_f64()),
        d = dir.display()
    );
    super::print_stdout(&out)
}

/// Share of points whose cluster's majority blob is their own blob.
fn agreement(labels: &[u32], ids: &[u32], k: usize) -> f64 {
    let mut counts = vec![[0usize; 3]; k];
    for (&l, &b) in labels.iter().zip(ids) {
        counts[l as usize][b as usize] += 1;
    }
    let hits: usize = counts
        .iter()
        .map(|c| c.iter().max().copied().unwrap_or(0))
        .sum();
    hits as f64 / labels.len().max(1) as f64
}
