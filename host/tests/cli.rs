//! End-to-end tests of the `kmeans-knn` binary: every subcommand on small files, every error case
//! (exit code, a message naming the problem, no output left behind), image sizes and colours.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_kmeans-knn");

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run_in(dir: &Path, args: &[&str]) -> Run {
    let out: Output = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env("RAYON_NUM_THREADS", "2")
        .output()
        .expect("the binary runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[track_caller]
fn ok(dir: &Path, args: &[&str]) -> Run {
    let r = run_in(dir, args);
    assert_eq!(
        r.code, 0,
        "{args:?} failed:\nstdout: {}\nstderr: {}",
        r.stdout, r.stderr
    );
    r
}

/// Runs a failing command: the exit code, the message on stderr containing every `needles`
/// (case-insensitive), one line of error, and no new file in `dir`.
#[track_caller]
fn fails(dir: &Path, args: &[&str], code: i32, needles: &[&str]) -> Run {
    let before = listing(dir);
    let r = run_in(dir, args);
    assert_eq!(
        r.code, code,
        "{args:?}: expected exit {code}\nstdout: {}\nstderr: {}",
        r.stdout, r.stderr
    );
    let err = r.stderr.to_lowercase();
    for n in needles {
        assert!(
            err.contains(&n.to_lowercase()),
            "{args:?}: stderr lacks {n:?}: {}",
            r.stderr
        );
    }
    assert_eq!(listing(dir), before, "{args:?} left files behind");
    r
}

fn listing(dir: &Path) -> BTreeSet<String> {
    walk(dir)
        .into_iter()
        .map(|p| p.strip_prefix(dir).unwrap().display().to_string())
        .collect()
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

fn json(r: &Run) -> serde_json::Value {
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON line expected: {}", r.stdout);
    serde_json::from_str(lines[0]).unwrap()
}

/// Two well separated groups of points in 2-D, with a header.
fn two_groups(n_each: usize) -> String {
    let mut s = String::from("x,y\n");
    for i in 0..n_each {
        let t = i as f32 * 0.01;
        s += &format!("{},{}\n", t, 0.5 - t);
        s += &format!("{},{}\n", 10.0 + t, 10.0 - t);
    }
    s
}

/// An NPY file: version 1.0 header, then `body`.
fn npy(descr: &str, shape: &str, body: &[u8]) -> Vec<u8> {
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + dict.len() + 1) % 64 != 0 {
        dict.push(' ');
    }
    dict.push('\n');
    let mut v = b"\x93NUMPY\x01\x00".to_vec();
    v.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    v.extend_from_slice(dict.as_bytes());
    v.extend_from_slice(body);
    v
}

fn f64_bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Parses our own NPY output: (descr, shape, body).
fn read_npy(path: &Path) -> (String, Vec<usize>, Vec<u8>) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..6], b"\x93NUMPY");
    let len = u16::from_le_bytes([b[8], b[9]]) as usize;
    assert_eq!((10 + len) % 64, 0);
    let h = std::str::from_utf8(&b[10..10 + len]).unwrap();
    let descr = h.split('\'').nth(3).unwrap().to_string();
    let shape = h[h.find('(').unwrap() + 1..h.find(')').unwrap()]
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().unwrap())
        .collect();
    (descr, shape, b[10 + len..].to_vec())
}

fn colours(img: &image::RgbImage) -> usize {
    img.pixels().map(|p| p.0).collect::<BTreeSet<_>>().len()
}

/// A `w × h` image of four flat quadrants.
fn quadrants(w: u32, h: u32) -> image::RgbImage {
    image::RgbImage::from_fn(w, h, |x, y| match (x < w / 2, y < h / 2) {
        (true, true) => image::Rgb([230, 20, 20]),
        (false, true) => image::Rgb([20, 200, 30]),
        (true, false) => image::Rgb([10, 10, 220]),
        (false, false) => image::Rgb([240, 240, 240]),
    })
}

// ---------------------------------------------------------------- kmeans / predict

#[test]
fn kmeans_writes_labels_centroids_model_and_json() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(d, "pts.csv", &two_groups(20));
    let r = ok(
        d,
        &[
            "kmeans",
            "pts.csv",
            "--k",
            "2",
            "--seed",
            "3",
            "--labels-out",
            "labels.csv",
            "--centroids-out",
            "centroids.npy",
            "--save-model",
            "model.json",
            "--json",
        ],
    );
    let j = json(&r);
    for key in [
        "k",
        "n",
        "d",
        "iterations",
        "inertia",
        "converged",
        "device",
        "seconds",
    ] {
        assert!(j.get(key).is_some(), "missing {key}: {j}");
    }
    assert_eq!(j["k"], 2);
    assert_eq!(j["n"], 40);
    assert_eq!(j["d"], 2);
    assert_eq!(j["converged"], true);

    let labels: Vec<u32> = std::fs::read_to_string(d.join("labels.csv"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(labels.len(), 40);
    assert!(labels.chunks(2).all(|p| p[0] != p[1]));
    assert!(labels.iter().step_by(2).all(|&l| l == labels[0]));

    let (descr, shape, body) = read_npy(&d.join("centroids.npy"));
    assert_eq!((descr.as_str(), shape), ("<f4", vec![2, 2]));
    assert_eq!(body.len(), 16);

    let model: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("model.json")).unwrap()).unwrap();
    assert_eq!(model["k"], 2);
    assert_eq!(model["params"]["seed"], 3);
    assert_eq!(model["centroids"].as_array().unwrap().len(), 4);

    // Without output files: the labels on stdout, the human summary (iterations, inertia,
    // elapsed, device) on stderr.
    let r = ok(d, &["kmeans", "pts.csv", "--k", "2", "--metric", "l1"]);
    assert!(
        r.stdout.lines().all(|l| l == "0" || l == "1"),
        "{}",
        r.stdout
    );
    for word in ["iterations", "inertia", "elapsed", "device", "l1"] {
        assert!(r.stderr.contains(word), "{}", r.stderr);
    }
}

#[test]
fn kmeans_reads_npy_and_tsv_and_other_delimiters() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let vals = [0.0, 0.0, 0.1, 0.1, 9.0, 9.0, 9.1, 9.0, 0.2, 0.0, 9.2, 9.1];
    std::fs::write(d.join("m.npy"), npy("<f8", "(6, 2)", &f64_bytes(&vals))).unwrap();
    let j = json(&ok(
        d,
        &["kmeans", "m.npy", "--k", "2", "--json", "--init", "random"],
    ));
    assert_eq!((j["n"].as_u64(), j["d"].as_u64()), (Some(6), Some(2)));

    write(d, "m.tsv", "1\t2\n1.1\t2\n5\t6\n");
    let j = json(&ok(d, &["kmeans", "m.tsv", "--k", "2", "--json"]));
    assert_eq!(j["n"], 3);

    write(d, "semi.csv", "a;b\n1;2\n1.1;2\n5;6\n");
    let j = json(&ok(
        d,
        &[
            "kmeans",
            "semi.csv",
            "--k",
            "2",
            "--delimiter",
            ";",
            "--json",
        ],
    ));
    assert_eq!(j["n"], 3);
    ok(
        d,
        &[
            "kmeans",
            "m.npy",
            "--k",
            "2",
            "--labels-out",
            "l.npy",
            "--n-init",
            "3",
            "--init",
            "random-labels",
            "-q",
        ],
    );
    let (descr, shape, body) = read_npy(&d.join("l.npy"));
    assert_eq!((descr.as_str(), shape, body.len()), ("<u4", vec![6], 24));
}

#[test]
fn predict_uses_the_saved_model() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(d, "pts.csv", &two_groups(10));
    ok(
        d,
        &[
            "kmeans",
            "pts.csv",
            "--k",
            "2",
            "--save-model",
            "model.json",
            "--labels-out",
            "fit.csv",
        ],
    );
    write(d, "new.csv", "0.05,0.4\n10.02,9.9\n0,0\n");
    let r = ok(d, &["predict", "--model", "model.json", "new.csv"]);
    let labels: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(labels.len(), 3);
    assert_ne!(labels[0], labels[1]);
    assert_eq!(labels[0], labels[2]);
    let fit = std::fs::read_to_string(d.join("fit.csv")).unwrap();
    assert_eq!(fit.lines().next().unwrap(), labels[0]);

    ok(
        d,
        &[
            "predict",
            "--model",
            "model.json",
            "new.csv",
            "--labels-out",
            "l.npy",
            "--transform",
            "dist.csv",
        ],
    );
    let dist = std::fs::read_to_string(d.join("dist.csv")).unwrap();
    let rows: Vec<Vec<f32>> = dist
        .lines()
        .map(|l| l.split(',').map(|v| v.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|r| r.len() == 2));
    assert!(rows[2].iter().any(|&v| v < 1.0) && rows[2].iter().any(|&v| v > 10.0));
    assert_eq!(read_npy(&d.join("l.npy")).1, vec![3]);

    // Wrong width, broken model.
    write(d, "wide.csv", "1,2,3\n");
    fails(
        d,
        &[
            "predict",
            "--model",
            "model.json",
            "wide.csv",
            "--labels-out",
            "x.csv",
        ],
        2,
        &["wide.csv", "3 columns"],
    );
    write(d, "bad.json", "{\"k\": 2}");
    fails(
        d,
        &[
            "predict",
            "--model",
            "bad.json",
            "new.csv",
            "--labels-out",
            "x.csv",
        ],
        2,
        &["bad.json", "not a kmeans-knn model"],
    );
}

// ---------------------------------------------------------------- images

#[test]
fn segment_recolours_with_k_colours_and_writes_a_palette() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    quadrants(40, 30).save(d.join("q.png")).unwrap();
    let r = ok(
        d,
        &[
            "segment",
            "q.png",
            "--k",
            "4",
            "-o",
            "out.png",
            "--palette-out",
            "pal.png",
            "--json",
        ],
    );
    let j = json(&r);
    assert_eq!(j["colours"], 4);
    let out = image::open(d.join("out.png")).unwrap().to_rgb8();
    assert_eq!(out.dimensions(), (40, 30));
    assert_eq!(colours(&out), 4);
    assert_eq!(out.get_pixel(0, 0).0, [230, 20, 20]);
    let pal = image::open(d.join("pal.png")).unwrap().to_rgb8();
    assert_eq!(pal.dimensions(), (4 * 32, 32));
    assert_eq!(colours(&pal), 4);

    // Fewer clusters than colours, Euclidean, JPEG input and output.
    quadrants(40, 30).save(d.join("q.jpg")).unwrap();
    ok(
        d,
        &[
            "segment", "q.jpg", "--k", "2", "--metric", "l2", "-o", "two.png",
        ],
    );
    let two = image::open(d.join("two.png")).unwrap().to_rgb8();
    assert_eq!((two.dimensions(), colours(&two)), ((40, 30), 2));
}

#[test]
fn segment_handles_k_255() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let img = image::RgbImage::from_fn(48, 32, |x, y| {
        image::Rgb([(x * 5) as u8, (y * 7) as u8, ((x * y) % 256) as u8])
    });
    img.save(d.join("g.png")).unwrap();
    ok(
        d,
        &[
            "segment",
            "g.png",
            "--k",
            "255",
            "-o",
            "o.png",
            "--max-iter",
            "20",
            "-q",
        ],
    );
    let out = image::open(d.join("o.png")).unwrap().to_rgb8();
    assert_eq!(out.dimensions(), (48, 32));
    let c = colours(&out);
    assert!((200..=255).contains(&c), "{c} colours");
}

#[test]
fn patches_writes_a_grid_ordered_by_size_and_the_sizes() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    quadrants(20, 16).save(d.join("q.png")).unwrap();
    let r = ok(
        d,
        &[
            "patches",
            "q.png",
            "--patch",
            "5",
            "--stride",
            "1",
            "--k",
            "6",
            "-o",
            "grid.png",
            "--sizes-out",
            "sizes.csv",
            "--zoom",
            "4",
            "--json",
        ],
    );
    let j = json(&r);
    assert_eq!(j["n"], 16 * 12);
    assert_eq!(j["d"], 75);
    // 6 patches: 3 columns × 2 rows of 20-pixel cells with 2-pixel gaps.
    let grid = image::open(d.join("grid.png")).unwrap().to_rgb8();
    assert_eq!(grid.dimensions(), (3 * 22 + 2, 2 * 22 + 2));
    let sizes = std::fs::read_to_string(d.join("sizes.csv")).unwrap();
    let lines: Vec<&str> = sizes.lines().collect();
    assert_eq!(lines[0], "rank,cluster,size");
    assert_eq!(lines.len(), 7);
    let s: Vec<u32> = lines[1..]
        .iter()
        .map(|l| l.rsplit(',').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(s.iter().sum::<u32>(), 192);
    assert!(s.windows(2).all(|w| w[0] >= w[1]), "{s:?}");
    // The top-left cell holds the largest cluster's centroid patch.
    assert!(colours(&grid) > 1);

    // Stride 2, grey input, default zoom.
    let grey = image::GrayImage::from_fn(12, 12, |x, _| image::Luma([(x * 20) as u8]));
    grey.save(d.join("g.png")).unwrap();
    let j = json(&ok(
        d,
        &[
            "patches", "g.png", "--patch", "4", "--stride", "2", "--k", "4", "-o", "gg.png",
            "--json",
        ],
    ));
    assert_eq!((j["n"].as_u64(), j["d"].as_u64()), (Some(25), Some(16)));
    let gg = image::open(d.join("gg.png")).unwrap().to_rgb8();
    assert_eq!(gg.dimensions(), (2 * 42 + 2, 2 * 42 + 2));
}

// ---------------------------------------------------------------- info / demo / help

#[test]
fn info_names_backend_ptx_and_threads() {
    let t = tempfile::tempdir().unwrap();
    let r = ok(t.path(), &["info"]);
    for word in ["backend", "PTX target", "sm_", "CPU threads"] {
        assert!(r.stdout.contains(word), "{}", r.stdout);
    }
    let j = json(&ok(t.path(), &["info", "--json"]));
    assert!(j["cpu_threads"].as_u64().unwrap() >= 1);
}

#[test]
fn threads_sets_the_pool_and_results_do_not_change() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    // Before or after the subcommand; over RAYON_NUM_THREADS (2 in these runs).
    let threads = |args: &[&str]| json(&ok(d, args))["cpu_threads"].as_u64().unwrap();
    assert_eq!(threads(&["--threads", "3", "info", "--json"]), 3);
    assert_eq!(threads(&["info", "--json", "--threads", "5"]), 5);
    assert!(threads(&["info", "--json", "--threads", "0"]) >= 1);
    write(d, "pts.csv", &two_groups(400));
    let mut labels = Vec::new();
    for n in ["1", "3", "8"] {
        let out = format!("labels{n}.csv");
        let args = ["kmeans", "pts.csv", "--k", "2", "--seed", "4"];
        ok(
            d,
            &[
                &args[..],
                &[
                    "--device",
                    "cpu",
                    "--threads",
                    n,
                    "--labels-out",
                    &out,
                    "-q",
                ],
            ]
            .concat(),
        );
        labels.push(std::fs::read_to_string(d.join(out)).unwrap());
    }
    assert!(labels.iter().all(|l| *l == labels[0]));
    fails(
        d,
        &["info", "--threads=-1"],
        2,
        &["--threads", "not a thread count"],
    );
    fails(d, &["info", "--threads", "many"], 2, &["--threads", "many"]);
    fails(
        d,
        &["info", "--threads", "100000"],
        2,
        &["--threads", "at most 4096"],
    );
    let help = ok(d, &["kmeans", "--help"]).stdout;
    assert!(help.contains("--threads <N>"), "{help}");
}

#[test]
fn demo_writes_its_folder() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let r = ok(d, &["demo", "-o", "out", "--device", "cpu", "-q"]);
    assert!(r.stdout.contains("Try next"), "{}", r.stdout);
    for f in [
        "blobs.csv",
        "blobs_labels.csv",
        "blobs_centroids.csv",
        "blobs_model.json",
        "chelsea.png",
        "chelsea_segmented.png",
        "chelsea_palette.png",
        "chelsea_patches.png",
        "chelsea_patch_sizes.csv",
    ] {
        assert!(d.join("out").join(f).is_file(), "{f} missing");
    }
    let seg = image::open(d.join("out/chelsea_segmented.png"))
        .unwrap()
        .to_rgb8();
    assert_eq!(seg.dimensions(), (451, 300));
    assert!(colours(&seg) <= 8);
    // The demo's files feed the other commands.
    ok(
        d,
        &[
            "predict",
            "--model",
            "out/blobs_model.json",
            "out/blobs.csv",
            "--labels-out",
            "p.csv",
        ],
    );
}

#[test]
fn help_has_examples_for_every_subcommand() {
    let t = tempfile::tempdir().unwrap();
    let r = ok(t.path(), &["--help"]);
    assert!(r.stdout.contains("Examples:"));
    for sub in [
        "kmeans",
        "minibatch",
        "predict",
        "knn",
        "classify",
        "regress",
        "distances",
        "segment",
        "patches",
        "info",
        "demo",
    ] {
        let r = ok(t.path(), &[sub, "--help"]);
        assert!(r.stdout.contains("Examples:"), "{sub}: {}", r.stdout);
        assert!(r.stdout.contains(&format!("kmeans-knn {sub}")), "{sub}");
    }
}

// ---------------------------------------------------------------- errors

#[test]
fn bad_text_input_names_file_line_and_column() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(d, "ragged.csv", "x,y\n1,2\n3,4\n5\n");
    fails(
        d,
        &["kmeans", "ragged.csv", "--k", "2", "--labels-out", "l.csv"],
        2,
        &["ragged.csv", "line 4", "column 2", "1 field"],
    );
    write(d, "text.csv", "1,2\n3,abc\n");
    fails(
        d,
        &["kmeans", "text.csv", "--k", "1", "--labels-out", "l.csv"],
        2,
        &["text.csv", "line 2", "column 2", "'abc' is not a number"],
    );
    write(d, "empty.csv", "");
    fails(
        d,
        &["kmeans", "empty.csv", "--k", "1", "--labels-out", "l.csv"],
        2,
        &["empty.csv", "empty"],
    );
    write(d, "header.csv", "a,b\n");
    fails(
        d,
        &["kmeans", "header.csv", "--k", "1"],
        2,
        &["header.csv", "no data rows"],
    );
    fails(
        d,
        &["kmeans", "missing.csv", "--k", "1"],
        2,
        &["missing.csv", "no such file"],
    );
    let r = fails(d, &["kmeans", "text.csv", "--k", "2"], 2, &["text.csv"]);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
}

#[test]
fn bad_npy_input_is_named() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    std::fs::write(
        d.join("flags.npy"),
        npy("|b1", "(3, 2)", &[1, 0, 1, 1, 0, 0]),
    )
    .unwrap();
    fails(
        d,
        &["kmeans", "flags.npy", "--k", "1", "--labels-out", "l.npy"],
        2,
        &["flags.npy", "dtype is bool", "X.astype(numpy.float32)"],
    );
    std::fs::write(d.join("z.npy"), npy("<c8", "(3, 1)", &[0; 24])).unwrap();
    fails(
        d,
        &["kmeans", "z.npy", "--k", "1"],
        2,
        &["z.npy", "complex", "X.real"],
    );
    std::fs::write(d.join("obj.npy"), npy("|O", "(3, 1)", &[0; 24])).unwrap();
    fails(
        d,
        &["kmeans", "obj.npy", "--k", "1"],
        2,
        &["obj.npy", "Python objects"],
    );
    std::fs::write(d.join("vec.npy"), npy("<f8", "(6,)", &f64_bytes(&[0.0; 6]))).unwrap();
    fails(
        d,
        &["kmeans", "vec.npy", "--k", "1", "--labels-out", "l.npy"],
        2,
        &[
            "vec.npy",
            "1-D (shape (6,))",
            "X.reshape(-1, 1)",
            "X.reshape(1, -1)",
        ],
    );
    std::fs::write(
        d.join("short.npy"),
        npy("<f8", "(4, 2)", &f64_bytes(&[0.0; 6])),
    )
    .unwrap();
    fails(
        d,
        &["kmeans", "short.npy", "--k", "1"],
        2,
        &["short.npy", "truncated"],
    );
    std::fs::write(d.join("fake.npy"), "1,2\n3,4\n").unwrap();
    fails(
        d,
        &["kmeans", "fake.npy", "--k", "1"],
        2,
        &["fake.npy", "not an NPY file"],
    );
}

#[test]
fn bad_images_and_image_outputs_are_named() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(d, "broken.png", "this is not a png");
    fails(
        d,
        &["segment", "broken.png", "--k", "2", "-o", "o.png"],
        2,
        &["broken.png", "cannot read the image"],
    );
    fails(
        d,
        &["patches", "broken.png", "--k", "2", "-o", "o.png"],
        2,
        &["broken.png"],
    );
    quadrants(8, 8).save(d.join("q.png")).unwrap();
    fails(
        d,
        &["segment", "q.png", "--k", "2", "-o", "o.bmp"],
        2,
        &["o.bmp", ".png"],
    );
    fails(
        d,
        &[
            "patches", "q.png", "--patch", "9", "--k", "2", "-o", "o.png",
        ],
        2,
        &["9×9 patch does not fit"],
    );
    fails(
        d,
        &["segment", "q.png", "--k", "65", "-o", "o.png"],
        2,
        &["q.png", "larger than the number of points"],
    );
}

#[test]
fn bad_usage_exits_2_and_writes_nothing() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(d, "pts.csv", &two_groups(5));
    fails(d, &["kmeans", "pts.csv"], 2, &["--k"]);
    fails(
        d,
        &["kmeans", "pts.csv", "--k", "2", "--init", "magic"],
        2,
        &["magic"],
    );
    fails(
        d,
        &["kmeans", "pts.csv", "--k", "2", "--metric", "chebyshev"],
        2,
        &["chebyshev", "l2, l1, cosine"],
    );
    fails(
        d,
        &["kmeans", "pts.csv", "--k", "0"],
        2,
        &["k must be at least 1"],
    );
    fails(
        d,
        &["kmeans", "pts.csv", "--k", "11", "--labels-out", "l.csv"],
        2,
        &["pts.csv", "larger than the number of points"],
    );
    // An unwritable second output: neither output appears.
    fails(
        d,
        &[
            "kmeans",
            "pts.csv",
            "--k",
            "2",
            "--labels-out",
            "l.csv",
            "--centroids-out",
            "no/such/dir/c.csv",
        ],
        2,
        &["no/such/dir", "does not exist"],
    );
    fails(d, &["frobnicate"], 2, &["frobnicate"]);
    fails(
        d,
        &["kmeans", "pts.csv", "--k", "2", "--device", "tpu"],
        2,
        &["tpu"],
    );
}

#[test]
fn an_unusable_gpu_is_a_failure_not_a_usage_error() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(d, "pts.csv", &two_groups(5));
    let r = run_in(
        d,
        &[
            "kmeans",
            "pts.csv",
            "--k",
            "2",
            "--device",
            "gpu:63",
            "--labels-out",
            "l.csv",
        ],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    // "no usable CUDA GPU: …" with a driver, "unsupported CUDA driver: …" without one.
    assert!(r.stderr.contains("CUDA"), "{}", r.stderr);
    assert!(!d.join("l.csv").exists());
}

#[test]
fn outputs_replace_old_files_only_on_success() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(d, "pts.csv", &two_groups(5));
    write(d, "l.csv", "old\n");
    write(d, "bad.csv", "1,2\nx,3\n");
    fails(
        d,
        &["kmeans", "bad.csv", "--k", "1", "--labels-out", "l.csv"],
        2,
        &["bad.csv"],
    );
    assert_eq!(std::fs::read_to_string(d.join("l.csv")).unwrap(), "old\n");
    ok(
        d,
        &["kmeans", "pts.csv", "--k", "2", "--labels-out", "l.csv"],
    );
    assert_eq!(
        std::fs::read_to_string(d.join("l.csv"))
            .unwrap()
            .lines()
            .count(),
        10
    );
}

// ---------------------------------------------------------------- knn / classify / distances

/// Training points on a line at 0, 1, …, n−1 (column 2 zero) and queries near some of them.
fn line_points(n: usize) -> String {
    (0..n).map(|i| format!("{i},0\n")).collect()
}

#[test]
fn knn_takes_chebyshev_and_minkowski_with_p() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(d, "train.csv", "0,0\n1,1\n2,0\n0,3\n");
    write(d, "query.csv", "0,0\n2,2\n");
    let knn = |metric: &[&str]| -> Vec<String> {
        let head = [
            "knn",
            "--train",
            "train.csv",
            "--query",
            "query.csv",
            "--k",
            "2",
        ];
        let tail = ["--device", "cpu", "--distances-out", "d.csv", "--json"];
        (head.iter().chain(metric).chain(&tail))
            .map(|a| a.to_string())
            .collect()
    };
    for (metric, name, want) in [
        (
            &["--metric", "minkowski", "--p", "3"][..],
            "minkowski:3",
            "0,1.2599211\n1.2599211,2\n",
        ),
        (
            &["--metric", "minkowski:3"][..],
            "minkowski:3",
            "0,1.2599211\n1.2599211,2\n",
        ),
        (&["--metric", "chebyshev"][..], "chebyshev", "0,1\n1,2\n"),
        (
            &["--metric", "minkowski", "--p", "1"][..],
            "l1",
            "0,2\n2,2\n",
        ),
    ] {
        let args = knn(metric);
        let j = json(&ok(d, &args.iter().map(String::as_str).collect::<Vec<_>>()));
        assert_eq!(j["metric"], name, "{metric:?}");
        let got = std::fs::read_to_string(d.join("d.csv")).unwrap();
        assert_eq!(got, want, "{metric:?}");
    }
    for (metric, needles) in [
        (
            &["--metric", "minkowski", "--p", "0.5"][..],
            &["p", "≥ 1", "0.5"][..],
        ),
        (
            &["--metric", "minkowski", "--p", "inf"][..],
            &["p", "chebyshev"][..],
        ),
        (
            &["--metric", "minkowski", "--p", "nan"][..],
            &["p", "NaN"][..],
        ),
        (
            &["--metric", "l1", "--p", "3"][..],
            &["--p", "minkowski only"][..],
        ),
    ] {
        let args = knn(metric);
        fails(
            d,
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
            2,
            needles,
        );
    }
}

#[test]
fn knn_finds_the_nearest_rows() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(d, "train.csv", &line_points(10));
    write(d, "query.csv", "2.1,0\n8.8,0\n");
    let r = ok(
        d,
        &[
            "knn",
            "--train",
            "train.csv",
            "--query",
            "query.csv",
            "--k",
            "3",
        ],
    );
    let rows: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(rows, vec!["2,3,1", "9,8,7"]);

    for select in ["auto", "kmin", "bitonic"] {
        let r = ok(
            d,
            &[
                "knn",
                "--train",
                "train.csv",
                "--query",
                "query.csv",
                "--k",
                "2",
                "--select",
                select,
                "--indices-out",
                "i.npy",
                "--distances-out",
                "dist.csv",
                "--json",
            ],
        );
        let j = json(&r);
        for key in ["k", "queries", "device", "seconds", "selection"] {
            assert!(j.get(key).is_some(), "missing {key}: {j}");
        }
        assert_eq!((j["k"].as_u64(), j["queries"].as_u64()), (Some(2), Some(2)));
        if select != "auto" {
            assert_eq!(j["selection"], select);
        }
        let (descr, shape, body) = read_npy(&d.join("i.npy"));
        assert_eq!((descr.as_str(), shape), ("<u4", vec![2, 2]));
        let idx: Vec<u32> = body
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(idx, vec![2, 3, 9, 8]);
        let dist: Vec<f32> = std::fs::read_to_string(d.join("dist.csv"))
            .unwrap()
            .lines()
            .flat_map(|l| {
                l.split(',')
                    .map(|v| v.parse::<f32>().unwrap())
                    .collect::<Vec<_>>()
            })
            .collect();
        let want = [0.1, 0.9, 0.2, 0.8];
        assert!(
            dist.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-4),
            "{dist:?}"
        );
    }
    ok(
        d,
        &[
            "knn",
            "--train",
            "train.csv",
            "--query",
            "query.csv",
            "--k",
            "1",
            "--metric",
            "l1",
        ],
    );

    write(d, "wide.csv", "1,2,3\n");
    fails(
        d,
        &[
            "knn",
            "--train",
            "train.csv",
            "--query",
            "wide.csv",
            "--k",
            "1",
            "--indices-out",
            "x.csv",
        ],
        2,
        &["wide.csv", "3 columns", "train.csv"],
    );
    fails(
        d,
        &[
            "knn",
            "--train",
            "train.csv",
            "--query",
            "query.csv",
            "--k",
            "11",
        ],
        2,
        &["--k 11", "train.csv"],
    );
    fails(
        d,
        &[
            "knn",
            "--train",
            "train.csv",
            "--query",
            "query.csv",
            "--k",
            "1",
            "--metric",
            "hamming",
        ],
        2,
        &["hamming"],
    );
    fails(
        d,
        &[
            "knn",
            "--train",
            "train.csv",
            "--query",
            "query.csv",
            "--k",
            "1",
            "--select",
            "heap",
        ],
        2,
        &["heap"],
    );
    fails(
        d,
        &[
            "knn",
            "--train",
            "train.csv",
            "--query",
            "query.csv",
            "--k",
            "1",
            "--knn-layout",
            "mirror",
        ],
        2,
        &["mirror", "shard", "replicate"],
    );
}

fn labelled_groups() -> String {
    let mut s = String::from("f1,f2,kind\n");
    for i in 0..12 {
        let t = i as f32 * 0.1;
        s += &format!("{t},{},normal.\n", 100.0 + t);
        s += &format!("{},{},smurf.\n", 5.0 + t, 300.0 - t);
        s += &format!("{},{},neptune.\n", 10.0 + t, 100.0 + t);
    }
    s
}

#[test]
fn classify_maps_text_labels_and_reports_accuracy() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(d, "train.csv", &labelled_groups());
    write(
        d,
        "query.csv",
        "f1,f2\n0.55,100.4\n5.3,299\n10.2,100.1\n0.1,100\n",
    );
    write(d, "truth.csv", "kind\nnormal.\nsmurf.\nneptune.\nsmurf.\n");

    for select in ["auto", "kmin", "bitonic"] {
        let r = ok(
            d,
            &[
                "classify",
                "--train",
                "train.csv",
                "--query",
                "query.csv",
                "--k",
                "3",
                "--select",
                select,
            ],
        );
        assert_eq!(
            r.stdout.lines().collect::<Vec<_>>(),
            vec!["normal.", "smurf.", "neptune.", "normal."]
        );
    }

    for scale in ["none", "zscore", "minmax"] {
        let r = ok(
            d,
            &[
                "classify",
                "--train",
                "train.csv",
                "--query",
                "query.csv",
                "--k",
                "3",
                "--scale",
                scale,
                "--truth",
                "truth.csv",
                "--json",
            ],
        );
        let j = json(&r);
        assert_eq!(j["accuracy"], 0.75, "{scale}: {j}");
        assert_eq!(j["queries"], 4);
        assert!(j.get("device").is_some() && j.get("seconds").is_some());
    }

    let r = ok(
        d,
        &[
            "classify",
            "--train",
            "train.csv",
            "--query",
            "query.csv",
            "--k",
            "5",
            "--weights",
            "distance",
            "--truth",
            "truth.csv",
            "--out",
            "pred.csv",
        ],
    );
    assert!(r.stdout.contains("75.00%"), "{}", r.stdout);
    assert!(r.stdout.contains("confusion"), "{}", r.stdout);
    assert!(r.stdout.contains("neptune."), "{}", r.stdout);
    let pred = std::fs::read_to_string(d.join("pred.csv")).unwrap();
    assert_eq!(pred, "normal.\nsmurf.\nneptune.\nnormal.\n");

    // The label in the first column, numeric labels, NPY output.
    let first: String = labelled_groups()
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let id = match f[2] {
                "normal." => 0,
                "smurf." => 1,
                _ => 2,
            };
            format!("{id},{},{}\n", f[0], f[1])
        })
        .collect();
    write(d, "first.csv", &first);
    ok(
        d,
        &[
            "classify",
            "--train",
            "first.csv",
            "--label-column",
            "first",
            "--query",
            "query.csv",
            "--k",
            "3",
            "--out",
            "p.npy",
        ],
    );
    let (descr, shape, body) = read_npy(&d.join("p.npy"));
    assert_eq!((descr.as_str(), shape), ("<i8", vec![4]));
    let got: Vec<i64> = body
        .chunks(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, vec![0, 1, 2, 0]);
}

#[test]
fn classify_errors_name_the_problem() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(d, "train.csv", &labelled_groups());
    write(d, "query.csv", "0.5,100\n");
    write(d, "labelled_query.csv", "0.5,100,normal.\n");
    fails(
        d,
        &[
            "classify",
            "--train",
            "train.csv",
            "--query",
            "labelled_query.csv",
            "--k",
            "3",
            "--out",
            "p.csv",
        ],
        2,
        &["labelled_query.csv", "must not carry a label"],
    );
    write(d, "truth.csv", "normal.\nsmurf.\nneptune.\n");
    fails(
        d,
        &[
            "classify",
            "--train",
            "train.csv",
            "--query",
            "query.csv",
            "--k",
            "3",
            "--truth",
            "truth.csv",
            "--out",
            "p.csv",
        ],
        2,
        &["truth.csv", "3 labels", "1 query rows"],
    );
    fails(
        d,
        &[
            "classify",
            "--train",
            "train.csv",
            "--query",
            "query.csv",
            "--k",
            "3",
            "--label-column",
            "7",
        ],
        2,
        &["train.csv", "label column is 7"],
    );
    fails(
        d,
        &[
            "classify",
            "--train",
            "train.csv",
            "--query",
            "query.csv",
            "--k",
            "3",
            "--scale",
            "log",
        ],
        2,
        &["log"],
    );
    fails(
        d,
        &[
            "classify",
            "--train",
            "train.csv",
            "--query",
            "query.csv",
            "--k",
            "3",
            "--out",
            "p.npy",
        ],
        2,
        &["p.npy", "text"],
    );
    write(d, "bad_train.csv", "1,2,a\n3,x,b\n");
    fails(
        d,
        &[
            "classify",
            "--train",
            "bad_train.csv",
            "--query",
            "query.csv",
            "--k",
            "1",
            "--out",
            "p.csv",
        ],
        2,
        &["bad_train.csv", "line 2", "column 2"],
    );
}

#[test]
fn distances_writes_the_matrix_in_blocks() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(d, "a.csv", "0,0\n3,4\n1,1\n");
    write(d, "b.csv", "0,0\n0,4\n");
    ok(d, &["distances", "a.csv", "b.csv", "-o", "d.csv"]);
    let rows: Vec<Vec<f32>> = std::fs::read_to_string(d.join("d.csv"))
        .unwrap()
        .lines()
        .map(|l| l.split(',').map(|v| v.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), 3);
    assert!((rows[1][0] - 5.0).abs() < 1e-5 && (rows[1][1] - 3.0).abs() < 1e-5);

    ok(
        d,
        &[
            "distances",
            "a.csv",
            "b.csv",
            "--metric",
            "l1",
            "-o",
            "d.npy",
        ],
    );
    let (descr, shape, body) = read_npy(&d.join("d.npy"));
    assert_eq!((descr.as_str(), shape), ("<f4", vec![3, 2]));
    let v: Vec<f32> = body
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(v, vec![0.0, 4.0, 7.0, 3.0, 2.0, 4.0]);

    // Many small blocks give the same matrix as one.
    let big: String = (0..600)
        .map(|i| format!("{},{}\n", i % 17, i / 17))
        .collect();
    write(d, "big.csv", &big);
    let j = json(&ok(
        d,
        &[
            "distances",
            "big.csv",
            "big.csv",
            "--metric",
            "sqeuclidean",
            "--block-mib",
            "1",
            "-o",
            "one.npy",
            "--json",
        ],
    ));
    assert_eq!(
        (j["rows"].as_u64(), j["cols"].as_u64()),
        (Some(600), Some(600))
    );
    let (_, shape, body) = read_npy(&d.join("one.npy"));
    assert_eq!(shape, vec![600, 600]);
    let at =
        |i: usize, j: usize| f32::from_le_bytes(body[4 * (i * 600 + j)..][..4].try_into().unwrap());
    assert_eq!(at(0, 0), 0.0);
    assert_eq!(at(1, 0), 1.0);
    assert_eq!(
        at(599, 0),
        ((599 % 17) * (599 % 17) + (599 / 17) * (599 / 17)) as f32
    );

    for metric in ["ip", "cosine"] {
        ok(
            d,
            &[
                "distances",
                "a.csv",
                "b.csv",
                "--metric",
                metric,
                "-o",
                "m.csv",
            ],
        );
    }
    write(d, "c.csv", "1,2,3\n");
    fails(
        d,
        &["distances", "a.csv", "c.csv", "-o", "x.npy"],
        2,
        &["c.csv", "3 columns"],
    );
    fails(
        d,
        &["distances", "a.csv", "missing.csv", "-o", "x.npy"],
        2,
        &["missing.csv"],
    );
    fails(d, &["distances", "a.csv", "b.csv"], 2, &["--output"]);
}

/// Labels of `kmeans --k 2` on the CPU for input file `name` in `dir`.
fn cpu_labels(dir: &Path, name: &str) -> String {
    ok(
        dir,
        &[
            "kmeans",
            name,
            "--k",
            "2",
            "--device",
            "cpu",
            "--labels-out",
            "l.csv",
        ],
    );
    std::fs::read_to_string(dir.join("l.csv")).unwrap()
}

#[test]
fn npy_of_every_numeric_dtype_byte_order_and_layout_clusters_the_same() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    // Two groups of three rows, two columns, small integers: exact in every dtype.
    let rows = [[0i64, 1], [1, 0], [0, 0], [20, 21], [21, 20], [20, 20]];
    let flat: Vec<i64> = rows.iter().flatten().copied().collect();
    let fortran: Vec<i64> = (0..2)
        .flat_map(|j| rows.iter().map(move |r| r[j]))
        .collect();
    std::fs::write(
        d.join("f4.npy"),
        npy(
            "<f4",
            "(6, 2)",
            &flat
                .iter()
                .flat_map(|&v| (v as f32).to_le_bytes())
                .collect::<Vec<_>>(),
        ),
    )
    .unwrap();
    let want = cpu_labels(d, "f4.npy");
    assert_two_groups(&want, 3);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("|u1", flat.iter().map(|&v| v as u8).collect()),
        ("|i1", flat.iter().map(|&v| v as i8 as u8).collect()),
        (
            ">i2",
            flat.iter()
                .flat_map(|&v| (v as i16).to_be_bytes())
                .collect(),
        ),
        (
            "<u4",
            flat.iter()
                .flat_map(|&v| (v as u32).to_le_bytes())
                .collect(),
        ),
        ("<i8", flat.iter().flat_map(|&v| v.to_le_bytes()).collect()),
        (
            ">u8",
            flat.iter()
                .flat_map(|&v| (v as u64).to_be_bytes())
                .collect(),
        ),
        (
            "<f2",
            flat.iter()
                .flat_map(|&v| half_bits(v).to_le_bytes())
                .collect(),
        ),
        (
            ">f4",
            flat.iter()
                .flat_map(|&v| (v as f32).to_be_bytes())
                .collect(),
        ),
        (
            ">f8",
            flat.iter()
                .flat_map(|&v| (v as f64).to_be_bytes())
                .collect(),
        ),
    ];
    for (descr, body) in cases {
        std::fs::write(d.join("x.npy"), npy(descr, "(6, 2)", &body)).unwrap();
        assert_eq!(cpu_labels(d, "x.npy"), want, "{descr}");
    }
    let body: Vec<u8> = fortran
        .iter()
        .flat_map(|&v| (v as f64).to_le_bytes())
        .collect();
    let mut f = npy("<f8", "(6, 2)", &body);
    let at = f.windows(5).position(|w| w == b"False").unwrap();
    f[at..at + 5].copy_from_slice(b"True ");
    std::fs::write(d.join("fortran.npy"), f).unwrap();
    assert_eq!(cpu_labels(d, "fortran.npy"), want);
}

/// Asserts that `labels` (one per line) put the first `n` rows in one cluster, the rest in
/// the other.
#[track_caller]
fn assert_two_groups(labels: &str, n: usize) {
    let l: Vec<&str> = labels.lines().collect();
    assert!(l[..n].iter().all(|&x| x == l[0]), "{l:?}");
    assert!(l[n..].iter().all(|&x| x == l[n] && x != l[0]), "{l:?}");
}

/// The float16 bits of a small whole number (exact: |v| < 2048).
fn half_bits(v: i64) -> u16 {
    if v == 0 {
        return 0;
    }
    let (sign, m) = (u16::from(v < 0) << 15, v.unsigned_abs());
    let e = 63 - m.leading_zeros() as u16;
    sign | ((e + 15) << 10) | (((m << 10 >> e) & 0x3ff) as u16)
}

#[test]
fn csv_nan_inf_and_missing_spellings_name_line_and_column() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    for (field, needle) in [
        ("NaN", "(NaN)"),
        ("-Infinity", "(infinite)"),
        ("NA", "missing value"),
    ] {
        write(d, "m.csv", &format!("a,b\n1,2\n3,{field}\n"));
        fails(
            d,
            &["kmeans", "m.csv", "--k", "1", "--labels-out", "l.csv"],
            2,
            &["m.csv, line 3, column 2", "not a finite", needle],
        );
    }
    write(d, "q.csv", "a,b\n\"1,000.5\",\"2\"\n\"1,001.5\",3\n");
    ok(
        d,
        &[
            "kmeans",
            "q.csv",
            "--k",
            "1",
            "--device",
            "cpu",
            "--centroids-out",
            "c.csv",
        ],
    );
    assert_eq!(
        std::fs::read_to_string(d.join("c.csv")).unwrap(),
        "a,b\n1001,2.5\n"
    );
}

#[test]
fn rows_of_100000_columns_cluster_and_search_on_the_cpu() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    const D: usize = 100_000;
    let rows: Vec<Vec<f32>> = (0..4)
        .map(|r| {
            (0..D)
                .map(|c| (r / 2 * 10) as f32 + (c % 7) as f32 * 0.25 + r as f32 * 0.5)
                .collect()
        })
        .collect();
    let text: String = rows
        .iter()
        .map(|r| {
            r.iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(",")
                + "\n"
        })
        .collect();
    write(d, "wide.csv", &text);
    let body: Vec<u8> = rows
        .iter()
        .flatten()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    std::fs::write(d.join("wide.npy"), npy("<f4", &format!("(4, {D})"), &body)).unwrap();
    for name in ["wide.csv", "wide.npy"] {
        assert_two_groups(&cpu_labels(d, name), 2);
        ok(
            d,
            &[
                "knn",
                "--train",
                name,
                "--query",
                name,
                "--k",
                "2",
                "--device",
                "cpu",
                "--indices-out",
                "nn.csv",
            ],
        );
        assert_eq!(
            std::fs::read_to_string(d.join("nn.csv")).unwrap(),
            "0,1\n1,0\n2,3\n3,2\n",
            "{name}"
        );
    }
}

#[test]
fn k_1_and_k_equal_to_n_on_the_cpu() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(d, "p.csv", "0,0\n2,0\n0,4\n2,4\n7,9\n");
    ok(
        d,
        &[
            "kmeans",
            "p.csv",
            "--k",
            "1",
            "--device",
            "cpu",
            "--labels-out",
            "l.csv",
            "--centroids-out",
            "c.csv",
        ],
    );
    assert_eq!(
        std::fs::read_to_string(d.join("l.csv")).unwrap(),
        "0\n0\n0\n0\n0\n"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("c.csv")).unwrap(),
        "2.2,3.4\n"
    );
    let r = ok(
        d,
        &[
            "kmeans",
            "p.csv",
            "--k",
            "5",
            "--device",
            "cpu",
            "--labels-out",
            "l.csv",
            "--json",
        ],
    );
    assert_eq!(json(&r)["inertia"], 0.0);
    let labels: BTreeSet<String> = std::fs::read_to_string(d.join("l.csv"))
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(labels.len(), 5, "every point its own cluster");
    fails(
        d,
        &["kmeans", "p.csv", "--k", "6", "--device", "cpu"],
        2,
        &["k = 6 is larger than the number of points (5)"],
    );
    ok(
        d,
        &[
            "knn",
            "--train",
            "p.csv",
            "--query",
            "p.csv",
            "--k",
            "5",
            "--device",
            "cpu",
            "--indices-out",
            "nn.csv",
        ],
    );
    let first: Vec<String> = std::fs::read_to_string(d.join("nn.csv"))
        .unwrap()
        .lines()
        .map(|l| l.split(',').next().unwrap().to_string())
        .collect();
    assert_eq!(
        first,
        ["0", "1", "2", "3", "4"],
        "each row is its own nearest neighbour"
    );
}

#[test]
fn inputs_too_large_are_refused_naming_their_size() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    // Sparse files: their size exists without taking disk or memory.
    let huge = 1u64 << 43;
    let header = npy("<f4", &format!("({}, 16)", huge / 64), &[]);
    std::fs::write(d.join("big.npy"), &header).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("big.npy"))
        .unwrap();
    f.set_len(header.len() as u64 + huge).unwrap();
    fails(
        d,
        &["kmeans", "big.npy", "--k", "2"],
        2,
        &["big.npy: it has 137438953472 rows; kmeans-knn numbers rows in 32 bits"],
    );
    write(d, "big.csv", "1,2\n");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("big.csv"))
        .unwrap();
    f.set_len(huge).unwrap();
    fails(
        d,
        &["kmeans", "big.csv", "--k", "2"],
        2,
        &["big.csv: the file is 8.0 TiB and its values would need about as much memory"],
    );
}

#[test]
fn numeric_options_out_of_range_are_usage_errors() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(d, "p.csv", "0,0\n1,1\n");
    for (args, needle) in [
        (
            &[
                "segment", "x.png", "--k", "2", "-o", "o.png", "--swatch", "0",
            ][..],
            "--swatch",
        ),
        (
            &[
                "segment",
                "x.png",
                "--k",
                "2",
                "-o",
                "o.png",
                "--swatch",
                "99999999999",
            ][..],
            "--swatch",
        ),
        (
            &[
                "patches",
                "x.png",
                "--k",
                "2",
                "-o",
                "o.png",
                "--zoom",
                "4294967295",
            ][..],
            "--zoom",
        ),
        (
            &[
                "distances",
                "p.csv",
                "p.csv",
                "-o",
                "d.csv",
                "--block-mib",
                "0",
            ][..],
            "--block-mib",
        ),
        (
            &[
                "distances",
                "p.csv",
                "p.csv",
                "-o",
                "d.csv",
                "--block-mib",
                "18446744073709551615",
            ][..],
            "--block-mib",
        ),
        (&["kmeans", "p.csv", "--k", "-1"][..], "--k"),
        (
            &["kmeans", "p.csv", "--k", "1", "--max-iter", "1e3"][..],
            "--max-iter",
        ),
        (
            &[
                "kmeans", "p.csv", "--k", "1", "--tol", "nan", "--device", "cpu",
            ][..],
            "tol must be finite",
        ),
        (
            &[
                "kmeans",
                "p.csv",
                "--k",
                "1",
                "--device",
                "gpu:99999999999999999999999",
            ][..],
            "--device",
        ),
    ] {
        fails(d, args, 2, &[needle]);
    }
}

// ---------------------------------------------------------------- regress

/// y = 10·x on x = 0..6, target in the last column.
fn line_targets() -> String {
    (0..6).map(|i| format!("{i},{}\n", 10 * i)).collect()
}

#[test]
fn regress_averages_neighbour_targets_and_reports_rmse_r2() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(d, "train.csv", &line_targets());
    write(d, "query.csv", "0.4\n2.6\n");
    write(d, "truth.csv", "y\n5\n25\n");
    // k = 2: neighbours {0, 1} → 5 and {3, 2} → 25, exactly the truth.
    let args = [
        "regress",
        "--train",
        "train.csv",
        "--query",
        "query.csv",
        "--k",
        "2",
        "--truth",
        "truth.csv",
        "--out",
        "pred.csv",
    ];
    let r = ok(d, &args);
    assert!(r.stdout.contains("rmse"), "{}", r.stdout);
    assert_eq!(
        std::fs::read_to_string(d.join("pred.csv")).unwrap(),
        "5\n25\n"
    );
    let mut with_json = args.to_vec();
    with_json.push("--json");
    let j = json(&ok(d, &with_json));
    assert_eq!(j["rmse"], 0.0);
    assert_eq!(j["r2"], 1.0);
    // Predictions go to stdout without --out and --truth.
    let r = ok(d, &args[..7]);
    assert_eq!(r.stdout, "5\n25\n");
}

#[test]
fn regress_bad_target_column_exits_2_and_writes_nothing() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(d, "train.csv", &line_targets());
    write(d, "text.csv", "0,low\n1,high\n");
    write(d, "query.csv", "0.4\n");
    let base = [
        "regress",
        "--query",
        "query.csv",
        "--k",
        "1",
        "--out",
        "p.csv",
    ];
    let with = |extra: &[&'static str]| [&base[..], extra].concat();
    fails(
        d,
        &with(&["--train", "train.csv", "--target-column", "3"]),
        2,
        &["train.csv", "column"],
    );
    fails(
        d,
        &with(&["--train", "text.csv"]),
        2,
        &["text.csv", "'low'", "not a finite number"],
    );
}

#[test]
fn minibatch_writes_the_outputs_of_kmeans_and_its_model_predicts() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(d, "pts.csv", &two_groups(200));
    let args = [
        "minibatch",
        "pts.csv",
        "--k",
        "2",
        "--batch-size",
        "50",
        "--seed",
        "3",
        "--labels-out",
        "labels.csv",
        "--centroids-out",
        "centroids.npy",
        "--save-model",
        "model.json",
        "--json",
    ];
    let j = json(&ok(d, &args));
    for key in [
        "iterations",
        "steps",
        "batch_size",
        "inertia",
        "converged",
        "device",
    ] {
        assert!(j.get(key).is_some(), "missing {key}: {j}");
    }
    assert_eq!(
        (j["n"].as_u64(), j["batch_size"].as_u64()),
        (Some(400), Some(50))
    );
    let labels = std::fs::read_to_string(d.join("labels.csv")).unwrap();
    let labels: Vec<&str> = labels.lines().collect();
    assert_eq!(labels.len(), 400);
    assert!(labels.chunks(2).all(|p| p[0] != p[1]));
    let (descr, shape, _) = read_npy(&d.join("centroids.npy"));
    assert_eq!((descr.as_str(), shape), ("<f4", vec![2, 2]));

    write(d, "new.csv", "0.05,0.4\n10.02,9.9\n");
    let r = ok(d, &["predict", "--model", "model.json", "new.csv"]);
    assert_eq!(r.stdout.lines().collect::<Vec<_>>(), labels[..2]);

    let r = ok(d, &["minibatch", "pts.csv", "--k", "2", "--device", "cpu"]);
    assert_eq!(r.stdout.lines().count(), 400);
    for word in ["steps", "epochs", "inertia", "device"] {
        assert!(r.stderr.contains(word), "{}", r.stderr);
    }
    fails(
        d,
        &["minibatch", "pts.csv", "--k", "2", "--batch-size", "0"],
        2,
        &["pts.csv", "batch_size"],
    );
    fails(
        d,
        &[
            "minibatch",
            "pts.csv",
            "--k",
            "2",
            "--init",
            "random-labels",
        ],
        2,
        &["init"],
    );
    fails(
        d,
        &["minibatch", "pts.csv", "--k", "401"],
        2,
        &["larger than the number of points"],
    );
}

#[test]
fn segment_refuses_the_cosine_metric() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    quadrants(8, 8).save(d.join("q.png")).unwrap();
    fails(
        d,
        &[
            "segment", "q.png", "--k", "2", "--metric", "cosine", "-o", "out.png",
        ],
        2,
        &["cosine", "not a colour distance"],
    );
}

#[test]
fn kmeans_sample_weight_is_repeated_rows() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let points: Vec<(f32, f32)> = (0..20)
        .map(|i| ((i % 7) as f32 * 0.3 + (i / 10) as f32 * 9.0, (i % 3) as f32))
        .collect();
    let weights: Vec<u32> = (0..20).map(|i| (i * 5 + 1) % 4).collect();
    let csv = |rows: &mut dyn Iterator<Item = &(f32, f32)>| {
        rows.map(|(x, y)| format!("{x},{y}\n")).collect::<String>()
    };
    write(d, "points.csv", &csv(&mut points.iter()));
    let w: String = weights.iter().map(|w| format!("{w}\n")).collect();
    write(d, "w.csv", &format!("weight\n{w}"));
    let mut repeated = points
        .iter()
        .zip(&weights)
        .flat_map(|(p, &w)| std::iter::repeat_n(p, w as usize));
    write(d, "repeated.csv", &csv(&mut repeated));
    let fit = |input: &str, extra: &[&str], out: &str| {
        let labels = format!("{out}-labels.csv");
        let centroids = format!("{out}-centroids.csv");
        let mut args = vec![
            "kmeans",
            input,
            "--k",
            "3",
            "--seed",
            "2",
            "--device",
            "cpu",
            "--json",
            "--labels-out",
            &labels,
            "--centroids-out",
            &centroids,
        ];
        args.extend_from_slice(extra);
        let j = json(&ok(d, &args));
        let read = |f: &str| std::fs::read_to_string(d.join(f)).unwrap();
        (j, read(&labels), read(&centroids))
    };
    let (jw, lw, cw) = fit("points.csv", &["--sample-weight", "w.csv"], "weighted");
    let (jr, lr, cr) = fit("repeated.csv", &[], "repeated");
    assert_eq!(cw, cr, "centroids");
    assert_eq!(jw["inertia"], jr["inertia"]);
    assert_eq!(jw["iterations"], jr["iterations"]);
    assert_eq!(jw["sample_weight"], "w.csv");
    let expanded: String = lw
        .lines()
        .zip(&weights)
        .flat_map(|(l, &w)| std::iter::repeat_n(format!("{l}\n"), w as usize))
        .collect();
    assert_eq!(expanded, lr, "labels");
}

#[test]
fn kmeans_cosine_clusters_directions_and_predict_normalises() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    // Two directions at every length: cosine groups by direction, not by distance.
    let mut s = String::new();
    for i in 1..=10 {
        let r = i as f32;
        s += &format!("{},{}\n", r, 0.1 * r);
        s += &format!("{},{}\n", -0.1 * r, r);
    }
    write(d, "dirs.csv", &s);
    let j = json(&ok(
        d,
        &[
            "kmeans",
            "dirs.csv",
            "--k",
            "2",
            "--metric",
            "cosine",
            "--device",
            "cpu",
            "--json",
            "--labels-out",
            "labels.csv",
            "--save-model",
            "m.json",
        ],
    ));
    assert_eq!(j["metric"], "cosine");
    let labels = std::fs::read_to_string(d.join("labels.csv")).unwrap();
    let labels: Vec<&str> = labels.lines().collect();
    for pair in labels.chunks(2) {
        assert_ne!(pair[0], pair[1]);
        assert_eq!(pair[0], labels[0]);
    }
    assert!(j["inertia"].as_f64().unwrap() < 1e-6, "{j}");
    write(d, "q.csv", "1000,100\n-1,10\n");
    ok(
        d,
        &[
            "predict",
            "--model",
            "m.json",
            "q.csv",
            "--labels-out",
            "q-labels.csv",
        ],
    );
    let q = std::fs::read_to_string(d.join("q-labels.csv")).unwrap();
    assert_eq!(q, format!("{}\n{}\n", labels[0], labels[1]));
    write(d, "zero.csv", "1,2\n0,0\n3,1\n");
    fails(
        d,
        &[
            "kmeans", "zero.csv", "--k", "2", "--metric", "cosine", "--device", "cpu",
        ],
        2,
        &["zero.csv", "row 1", "norm 0"],
    );
}

#[test]
fn sample_weights_scale_votes_and_averages() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(d, "train.csv", &line_targets());
    write(d, "query.csv", "0.4\n");
    // Neighbours 0 (target 0) and 1 (target 10) weigh 3 and 1.
    write(d, "w.csv", "3\n1\n1\n1\n1\n1\n");
    let r = ok(
        d,
        &[
            "regress",
            "--train",
            "train.csv",
            "--query",
            "query.csv",
            "--k",
            "2",
            "--sample-weight",
            "w.csv",
            "--device",
            "cpu",
        ],
    );
    assert_eq!(r.stdout, "2.5\n");
    write(d, "labelled.csv", "0,a\n1,b\n2,b\n");
    write(d, "heavy.csv", "5\n1\n1\n");
    let vote = |extra: &[&str]| {
        let mut args = vec![
            "classify",
            "--train",
            "labelled.csv",
            "--query",
            "query.csv",
            "--k",
            "3",
            "--device",
            "cpu",
        ];
        args.extend_from_slice(extra);
        ok(d, &args).stdout
    };
    assert_eq!(vote(&[]), "b\n");
    assert_eq!(vote(&["--sample-weight", "heavy.csv"]), "a\n");
}

#[test]
fn bad_sample_weights_exit_2_naming_the_file() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(d, "points.csv", &two_groups(5));
    write(d, "train.csv", &line_targets());
    write(d, "labelled.csv", "0,a\n1,b\n2,b\n3,a\n4,a\n5,b\n");
    write(d, "query.csv", "0.4\n");
    write(d, "short.csv", "1\n2\n");
    write(d, "negative.csv", "1\n1\n1\n-2\n1\n1\n1\n1\n1\n1\n");
    write(d, "zeros.csv", "0\n0\n0\n0\n0\n0\n0\n0\n0\n0\n");
    write(d, "text.csv", "1\n1\nheavy\n1\n1\n1\n");
    let kmeans = |w: &'static str| {
        vec![
            "kmeans",
            "points.csv",
            "--k",
            "2",
            "--device",
            "cpu",
            "--labels-out",
            "l.csv",
            "--sample-weight",
            w,
        ]
    };
    fails(
        d,
        &kmeans("short.csv"),
        2,
        &["short.csv", "2 weights", "10 rows"],
    );
    fails(
        d,
        &kmeans("negative.csv"),
        2,
        &["negative.csv", "-2", "row 3"],
    );
    fails(d, &kmeans("zeros.csv"), 2, &["zeros.csv", "weight is zero"]);
    fails(d, &kmeans("missing.csv"), 2, &["missing.csv"]);
    for (cmd, train) in [("regress", "train.csv"), ("classify", "labelled.csv")] {
        let args = |w: &'static str| {
            vec![
                cmd,
                "--train",
                train,
                "--query",
                "query.csv",
                "--k",
                "2",
                "--device",
                "cpu",
                "--out",
                "p.csv",
                "--sample-weight",
                w,
            ]
        };
        fails(d, &args("short.csv"), 2, &["short.csv", "6 rows"]);
        fails(
            d,
            &args("text.csv"),
            2,
            &["text.csv", "'heavy'", "not a number"],
        );
    }
}

#[test]
fn knn_streams_a_training_set_above_the_gpu_memory_budget() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(d, "train.csv", &line_points(10));
    write(d, "query.csv", "2.1,0\n8.8,0\n");
    // 10 rows take 240 bytes on a GPU: a budget of 100 streams them two rows at a time. On the
    // CPU the budget does not apply. Either way the answer is the same.
    let args = [
        "knn",
        "--train",
        "train.csv",
        "--query",
        "query.csv",
        "--k",
        "3",
    ];
    let r = ok(d, &[&args[..], &["--gpu-memory", "100", "--json"]].concat());
    let j = json(&r);
    let on_gpu = j["device"].as_str().unwrap().starts_with("cuda");
    assert_eq!(j["streamed"], on_gpu, "{j}");
    let r = ok(d, &[&args[..], &["--gpu-memory", "0.1KiB"]].concat());
    let rows: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(rows, vec!["2,3,1", "9,8,7"]);
    fails(
        d,
        &[&args[..], &["--gpu-memory", "5X"]].concat(),
        2,
        &["--gpu-memory", "the unit is not one of"],
    );
}

/// `--device auto` (the default) runs jobs the CPU finishes before a GPU's driver could start on
/// the CPU, GPU or not: a fresh process would spend most of its time starting the driver.
#[test]
fn small_jobs_run_on_the_cpu_by_default() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(d, "train.csv", &line_points(10));
    write(d, "query.csv", "2.1,0\n8.8,0\n");
    write(d, "g.csv", &two_groups(20));
    let knn = ["knn", "--train", "train.csv", "--query", "query.csv"];
    let jobs: [&[&str]; 2] = [
        &[&knn[..], &["--k", "2", "--json"]].concat(),
        &[
            "kmeans",
            "g.csv",
            "--k",
            "2",
            "--json",
            "--save-model",
            "m.json",
        ],
    ];
    for args in jobs {
        let j = json(&ok(d, args));
        let device = j["device"].as_str().unwrap_or_default();
        assert!(device.starts_with("cpu"), "{args:?} ran on {device}");
    }
    let r = ok(d, &["predict", "--model", "m.json", "g.csv"]);
    assert!(r.stderr.contains(" on cpu"), "{}", r.stderr);
}
