//! `Selection::Auto` on the GPU: which way through a search (a streaming selection, with the TF32
//! prefilter or on the exact FP32 path) is fastest for a shape, decided once per shape and kept.
//!
//! * **Measured, resisting noise**: the first candidate path runs once untimed (the driver loads
//!   the prefilter's kernels on their first launch, and the GPU's clock rises from idle); then
//!   every candidate runs once for the cut below (the warm-up), then `TIMED_ROUNDS` interleaved
//!   rounds time each survivor. A search's time is its kernels' ([`KernelClock`]: CUDA events
//!   from the queries on the device to the answer ready), which is what differs between paths:
//!   the host's part around them is the same for all, and its stalls (milliseconds in a Python
//!   process) would otherwise decide. A path's figure is its minimum (jitter only ever adds
//!   time). The way (with the prefilter or exact) is chosen first, the two tied
//!   only within `WAY_TIE` (3 %); within it, selections within `TIE` (10 %) of its fastest
//!   count as tied and the first in a fixed order wins, so near-equal paths do not flip the
//!   choice from one process to the next.
//! * **A cost model skips paths that cannot win**: the exact path's distance arithmetic alone, at
//!   the GPU's FP32 peak, is a lower bound on its time; when it exceeds the fastest prefilter
//!   path's warm-up, the exact paths are not run at all. A path over twice the fastest warm-up is
//!   not timed again.
//! * **Kept**: per (GPU model, n, d, k, metric, prefilter allowed, warpgroup scan) for the
//!   process, and in the user's cache folder ([`crate::user_cache`]) for later processes, keyed
//!   by the library's version and a fingerprint of its kernels. An entry is parsed whole and
//!   checked against the paths this index could take; anything else is timed again.
//!
//! The buffers of each path are made before its timed runs ([`CudaKnn::reserve`]), so that no
//! timing holds an allocation.

use super::{CudaKnn, KernelClock, Method, Output, Path, STREAMING, SearchJob};
use crate::backend::vocab::{AutoReport, AutoSource, PathTiming, Selection};
use crate::error::Result;
use crate::matrix::MatrixView;
use crate::user_cache;
use kernels_gpu::knn::MAX_STREAM_K;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Query rows the paths are timed on (the queries repeated when there are fewer), the same
/// whatever the caller's query count, since the choice is kept per shape. Enough for several
/// waves of the exact path's distance tiles: it pays more than the prefilter in fixed costs
/// (tails of its waves) and less per row, so a short sample favours the prefilter. On 512 rows
/// S1024's two radix paths lay within 10 % and the choice went either way, while at 1,200
/// queries the exact one was 1.26–1.33× faster (2026-11-27); with 128, even S512's went either
/// way.
pub(super) const SAMPLE_ROWS: usize = 1024;
/// Timed rounds of each surviving path after the warm-up.
const TIMED_ROUNDS: usize = 5;
/// Paths whose warm-up took over this many times the fastest are not timed again.
const WARM_UP_CUTOFF: f64 = 2.0;
/// Selections of one way (with the prefilter, or exact) whose minimum is within this share of
/// that way's fastest are tied and the first in order wins: S1's radix and k-min kernels lie
/// 4 % apart, S512's radix and bitonic 10 % (H100, 2026-11-28); a tie costs at most this share.
const TIE: f64 = 0.10;
/// The two ways are tied only within this share: they are different algorithms, whose kernels
/// lie 26–30 % apart at S512 and S1024 (H100), and a wider tie could keep the slower one.
const WAY_TIE: f64 = 0.03;
/// FP32 lanes per multiprocessor that the cost model assumes: the most of any architecture
/// (Ampere's GA10x, Ada, Hopper), so that its bound stays below the real time everywhere.
const FP32_LANES: f64 = 128.0;
/// First line of a cache entry.
const ENTRY_HEADER: &str = "kmeans-knn knn auto 3";

/// What a choice is kept under.
#[derive(Clone, PartialEq, Eq, Hash)]
struct ShapeKey {
    gpu: String,
    n: usize,
    d: usize,
    k: usize,
    metric: u32,
    prefilter: bool,
    warpgroup: bool,
}

impl ShapeKey {
    /// The cache entry's file name.
    fn entry_name(&self) -> String {
        let flag = |b: bool| if b { "1" } else { "0" };
        user_cache::entry_name(&[
            "knn-auto",
            env!("CARGO_PKG_VERSION"),
            &format!("{:016x}", kernels_fingerprint()),
            &self.gpu,
            &format!("n{}", self.n),
            &format!("d{}", self.d),
            &format!("k{}", self.k),
            &format!("m{}", self.metric),
            &format!("p{}", flag(self.prefilter)),
            &format!("w{}", flag(self.warpgroup)),
        ])
    }
}

/// The choices of this process.
fn decisions() -> &'static Mutex<HashMap<ShapeKey, AutoReport>> {
    static DECISIONS: OnceLock<Mutex<HashMap<ShapeKey, AutoReport>>> = OnceLock::new();
    DECISIONS.get_or_init(Default::default)
}

/// A fingerprint of the kernels (their PTX), so that a cached choice is timed again when they
/// change.
fn kernels_fingerprint() -> u64 {
    static FINGERPRINT: OnceLock<u64> = OnceLock::new();
    *FINGERPRINT.get_or_init(|| {
        let bytes = crate::backend::cuda::image::PTX.as_bytes();
        (bytes.chunks(8)).fold(0xcbf2_9ce4_8422_2325, |h: u64, chunk| {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            (h ^ u64::from_le_bytes(word)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    })
}

impl CudaKnn {
    /// `Auto`'s path for `k`: the choice kept for this shape, else one read from the user cache,
    /// else timed on a sample of `queries` (and kept).
    pub(super) fn auto_path(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        max_bytes: Option<usize>,
    ) -> Result<Path> {
        if let Some(path) = self.auto_choice(k) {
            return Ok(path);
        }
        let key = self.shape_key(k);
        let candidates = self.candidates(k);
        if queries.rows() == 0 {
            return Ok(candidates[0]);
        }
        let name = key.entry_name();
        let cached = user_cache::read(&name).and_then(|text| parse_entry(&text, &candidates));
        let report = match cached {
            Some(report) => report,
            None => {
                let report = self.time_paths(queries, k, max_bytes, &candidates)?;
                user_cache::write(&name, &format_entry(&report));
                report
            }
        };
        let path = path_of(&report);
        decisions().lock().unwrap().insert(key, report);
        Ok(path)
    }

    /// The path `Auto` chose for `k` in this process, if it has.
    pub(super) fn auto_choice(&self, k: usize) -> Option<Path> {
        self.auto_decision(k).as_ref().map(path_of)
    }

    /// The report behind [`CudaKnn::auto_choice`].
    pub(super) fn auto_decision(&self, k: usize) -> Option<AutoReport> {
        let key = self.shape_key(k);
        decisions().lock().unwrap().get(&key).cloned()
    }

    fn shape_key(&self, k: usize) -> ShapeKey {
        ShapeKey {
            gpu: self.gpu.info().name.clone(),
            n: self.n,
            d: self.d,
            k,
            metric: self.metric.id(),
            prefilter: self.prefilter,
            warpgroup: self.warpgroup_scan,
        }
    }

    /// The paths `Auto` weighs for `k`, in the order that breaks ties: the streaming selections
    /// (radix, bitonic, k-min) with the prefilter, then, where the prefilter applies, without
    /// it. Where it does not, `prefilter: true` runs the exact path (as a fixed selection does).
    fn candidates(&self, k: usize) -> Vec<Path> {
        if k > MAX_STREAM_K {
            return vec![Path {
                method: Method::Sort,
                prefilter: true,
            }];
        }
        let ways: &[bool] = match self.tf32_plan(k, Method::KMin) {
            Some(_) => &[true, false],
            None => &[true],
        };
        let order = [Method::Radix, Method::Bitonic, Method::KMin];
        debug_assert!(STREAMING.iter().all(|m| order.contains(m)));
        (ways.iter())
            .flat_map(|&prefilter| order.map(|method| Path { method, prefilter }))
            .collect()
    }

    /// Lower bound, in milliseconds, of the exact path's distance arithmetic for `rows` queries:
    /// `rows · n · d` fused multiply-adds at the GPU's FP32 peak (`None` when the driver does
    /// not say its clock).
    fn exact_floor_ms(&self, rows: usize) -> Option<f64> {
        use cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE;
        let khz = self
            .gpu
            .ctx
            .attribute(CU_DEVICE_ATTRIBUTE_CLOCK_RATE)
            .ok()?;
        let fma_per_ms = self.gpu.multiprocessors() as f64 * FP32_LANES * khz as f64;
        (khz > 0).then(|| (rows * self.n * self.d) as f64 / fma_per_ms)
    }

    /// Times `candidates` on a sample of `queries` (see the module documentation).
    fn time_paths(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        max_bytes: Option<usize>,
        candidates: &[Path],
    ) -> Result<AutoReport> {
        let values: Vec<f32> = (queries.as_slice().iter().copied())
            .cycle()
            .take(SAMPLE_ROWS * self.d)
            .collect();
        let sample = MatrixView::new(&values, SAMPLE_ROWS, self.d)?;
        let run = |path: Path| -> Result<f64> {
            let job = SearchJob::new(&sample, k, path.method, max_bytes);
            self.reserve(&job.shape(), path)?;
            let clock = KernelClock::default();
            let job = SearchJob {
                clock: Some(&clock),
                ..job
            };
            self.run(job, path.prefilter, Output::<u32>::default())?;
            clock.total_ms()
        };
        let mut timings: Vec<PathTiming> = (candidates.iter())
            .map(|p| PathTiming {
                selection: p.method.reported(),
                prefilter: p.prefilter,
                warmup_ms: None,
                min_ms: None,
                median_ms: None,
            })
            .collect();
        // Without this run the first path paid the kernels' loading and the idle GPU's clock in
        // its warm-up (2.5–5.2 ms against 0.9–1.8 for the next at S512 on an H100), and the
        // cut dropped it though it was the fastest (2026-11-27).
        if let Some(&first) = candidates.first() {
            let job = SearchJob::new(&sample, k, first.method, max_bytes);
            self.reserve(&job.shape(), first)?;
            self.run(job, first.prefilter, Output::<u32>::default())?;
        }
        let exact_floor = self.exact_floor_ms(sample.rows());
        let has_both = candidates.iter().any(|p| !p.prefilter) && candidates.len() > 1;
        for (i, &path) in candidates.iter().enumerate() {
            let fastest = fastest_warmup(&timings, true);
            let hopeless = has_both
                && !path.prefilter
                && matches!((exact_floor, fastest), (Some(f), Some(w)) if f >= w);
            if !hopeless {
                timings[i].warmup_ms = Some(run(path)?);
            }
        }
        let fastest = fastest_warmup(&timings, false).unwrap_or(f64::INFINITY);
        let live: Vec<usize> = (0..candidates.len())
            .filter(|&i| {
                timings[i]
                    .warmup_ms
                    .is_some_and(|w| w <= WARM_UP_CUTOFF * fastest)
            })
            .collect();
        let mut rounds = vec![Vec::with_capacity(TIMED_ROUNDS); candidates.len()];
        for round in 0..TIMED_ROUNDS {
            // Back and forth from where the warm-up ended, so that buffers are remade once a
            // round, not per path, and the last round ends on the prefilter's paths, whose
            // buffers the search is then most likely to find made.
            let order: Vec<usize> = match round % 2 {
                0 => live.iter().rev().copied().collect(),
                _ => live.clone(),
            };
            for i in order {
                rounds[i].push(run(candidates[i])?);
            }
        }
        for (timing, mut ms) in timings.iter_mut().zip(rounds) {
            if ms.is_empty() {
                continue;
            }
            ms.sort_by(f64::total_cmp);
            (timing.min_ms, timing.median_ms) = (Some(ms[0]), Some(ms[ms.len() / 2]));
        }
        let chosen = choose(&timings).unwrap_or(0);
        Ok(AutoReport {
            selection: timings[chosen].selection,
            prefilter: timings[chosen].prefilter,
            source: AutoSource::Timed,
            timings,
        })
    }
}

/// The fastest warm-up, of the prefilter's paths only with `prefilter_only`.
fn fastest_warmup(timings: &[PathTiming], prefilter_only: bool) -> Option<f64> {
    (timings.iter())
        .filter(|t| t.prefilter || !prefilter_only)
        .filter_map(|t| t.warmup_ms)
        .min_by(f64::total_cmp)
}

/// The chosen timing: first the way — with the prefilter unless the exact paths' fastest minimum
/// beats its fastest by more than `WAY_TIE` — then, within it, the first (in the candidates'
/// order) whose minimum is within `TIE` of the way's fastest; `None` when none was timed.
fn choose(timings: &[PathTiming]) -> Option<usize> {
    let fastest = |prefilter: bool| {
        (timings.iter())
            .filter(|t| t.prefilter == prefilter)
            .filter_map(|t| t.min_ms)
            .min_by(f64::total_cmp)
    };
    let prefilter = match (fastest(true), fastest(false)) {
        (Some(with), Some(exact)) => with <= exact * (1.0 + WAY_TIE),
        (Some(_), None) => true,
        (None, Some(_)) => false,
        (None, None) => return None,
    };
    let best = fastest(prefilter)?;
    (timings.iter()).position(|t| {
        t.prefilter == prefilter && t.min_ms.is_some_and(|ms| ms <= best * (1.0 + TIE))
    })
}

/// The path a report names.
fn path_of(report: &AutoReport) -> Path {
    let method = match report.selection {
        Selection::KMin => Method::KMin,
        Selection::Radix => Method::Radix,
        Selection::Bitonic | Selection::Auto => Method::Bitonic,
    };
    Path {
        method,
        prefilter: report.prefilter,
    }
}

/// A path's two words in a cache entry: the selection, and `tf32` or `fp32`.
fn path_words(selection: Selection, prefilter: bool) -> String {
    format!("{selection} {}", if prefilter { "tf32" } else { "fp32" })
}

/// A report as a cache entry: a header, `choice <selection> <tf32|fp32>`, then one line per
/// path `path <selection> <tf32|fp32> <warm-up ms> <min ms> <median ms>` (`-` where none).
fn format_entry(report: &AutoReport) -> String {
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v}"));
    let mut text = format!(
        "{ENTRY_HEADER}\nchoice {}\n",
        path_words(report.selection, report.prefilter)
    );
    for t in &report.timings {
        text += &format!(
            "path {} {} {} {}\n",
            path_words(t.selection, t.prefilter),
            ms(t.warmup_ms),
            ms(t.min_ms),
            ms(t.median_ms)
        );
    }
    text
}

/// A cache entry read back, if it is whole and its choice is one of `candidates` (the entry is
/// only a hint: anything else is timed again).
fn parse_entry(text: &str, candidates: &[Path]) -> Option<AutoReport> {
    let mut lines = text.lines();
    if lines.next()? != ENTRY_HEADER {
        return None;
    }
    let path = |sel: &str, way: &str| -> Option<(Selection, bool)> {
        let selection = sel.parse::<Selection>().ok()?;
        let prefilter = match way {
            "tf32" => true,
            "fp32" => false,
            _ => return None,
        };
        (selection != Selection::Auto).then_some((selection, prefilter))
    };
    let ms = |word: &str| -> Option<Option<f64>> {
        match word {
            "-" => Some(None),
            _ => word
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .map(Some),
        }
    };
    let choice = match lines.next()?.split(' ').collect::<Vec<_>>()[..] {
        ["choice", sel, way] => path(sel, way)?,
        _ => return None,
    };
    let mut timings = Vec::new();
    for line in lines {
        let [_, sel, way, warmup, min, median] = line.split(' ').collect::<Vec<_>>()[..] else {
            return None;
        };
        if !line.starts_with("path ") {
            return None;
        }
        let (selection, prefilter) = path(sel, way)?;
        timings.push(PathTiming {
            selection,
            prefilter,
            warmup_ms: ms(warmup)?,
            min_ms: ms(min)?,
            median_ms: ms(median)?,
        });
    }
    let report = AutoReport {
        selection: choice.0,
        prefilter: choice.1,
        source: AutoSource::Cached,
        timings,
    };
    candidates.contains(&path_of(&report)).then_some(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(selection: Selection, prefilter: bool, min_ms: Option<f64>) -> PathTiming {
        PathTiming {
            selection,
            prefilter,
            warmup_ms: min_ms.map(|m| 2.0 * m),
            min_ms,
            median_ms: min_ms.map(|m| 1.1 * m),
        }
    }

    fn candidates() -> Vec<Path> {
        [true, false]
            .iter()
            .flat_map(|&prefilter| {
                [Method::Radix, Method::Bitonic, Method::KMin]
                    .map(|method| Path { method, prefilter })
            })
            .collect()
    }

    #[test]
    fn the_fastest_minimum_wins_and_near_ties_go_to_the_first() {
        use Selection::*;
        let mut t = vec![
            timing(Radix, true, Some(0.100)),
            timing(Bitonic, true, Some(0.150)),
            timing(KMin, true, Some(0.090)),
            timing(Radix, false, None),
        ];
        assert_eq!(choose(&t), Some(2));
        // Radix within 10 % of k-min: radix, first in the order, is taken.
        t[0].min_ms = Some(0.098);
        assert_eq!(choose(&t), Some(0));
        t[0].min_ms = Some(0.1);
        assert_eq!(choose(&t), Some(2));
        assert_eq!(choose(&[timing(Radix, true, None)]), None);
    }

    #[test]
    fn the_way_is_chosen_first_with_a_tighter_tie() {
        use Selection::*;
        // S1024-like: the exact way's fastest 8 % under the prefilter's — within `TIE`, not
        // within `WAY_TIE`: the exact way, and its first selection within 10 % of its best.
        let mut t = vec![
            timing(Radix, true, Some(0.108)),
            timing(Bitonic, true, Some(0.112)),
            timing(Radix, false, Some(0.105)),
            timing(Bitonic, false, Some(0.100)),
        ];
        assert_eq!(choose(&t), Some(2));
        // Within 3 %: the prefilter's way, whose first selection is within 10 % of its best.
        t[0].min_ms = Some(0.1025);
        assert_eq!(choose(&t), Some(0));
        // Only exact paths timed (the prefilter's cut by the warm-up).
        t[0].min_ms = None;
        t[1].min_ms = None;
        assert_eq!(choose(&t), Some(2));
        // Only the prefilter's.
        t = vec![timing(Radix, true, Some(0.2)), timing(Radix, false, None)];
        assert_eq!(choose(&t), Some(0));
    }

    #[test]
    fn cache_entries_round_trip() {
        use Selection::*;
        let report = AutoReport {
            selection: KMin,
            prefilter: false,
            source: AutoSource::Timed,
            timings: vec![
                timing(Radix, true, Some(0.0571)),
                timing(KMin, false, Some(0.05)),
                PathTiming {
                    warmup_ms: None,
                    ..timing(Bitonic, false, None)
                },
            ],
        };
        let text = format_entry(&report);
        let back = parse_entry(&text, &candidates()).expect("parses");
        assert_eq!(
            back,
            AutoReport {
                source: AutoSource::Cached,
                ..report
            }
        );
    }

    #[test]
    fn bad_cache_entries_are_ignored() {
        let h = ENTRY_HEADER;
        let good = &format!("{h}\nchoice radix tf32\npath radix tf32 0.2 0.1 0.11\n");
        assert!(parse_entry(good, &candidates()).is_some());
        let bad = [
            String::new(),
            // An older version's entry: its figures were whole searches', host part included.
            "kmeans-knn knn auto 2\nchoice radix tf32\n".to_string(),
            format!("{h}\nchoice heap tf32\n"),
            format!("{h}\nchoice auto tf32\n"),
            format!("{h}\nchoice radix fp16\n"),
            format!("{h}\nchoice radix\n"),
            format!("{h}\nchoice radix tf32\npath radix tf32 0.2 x 0.1\n"),
            format!("{h}\nchoice radix tf32\npath radix tf32 0.2 -1 0.1\n"),
            format!("{h}\nchoice radix tf32\npath radix tf32 0.2 0.1\n"),
            format!("{h}\nchoice radix tf32\nroute radix tf32 0.2 0.1 0.1\n"),
        ];
        for text in &bad {
            assert!(parse_entry(text, &candidates()).is_none(), "{text:?}");
        }
        // A path this index cannot take (the exact path where the prefilter does not apply).
        let only_exact = [Path {
            method: Method::Radix,
            prefilter: true,
        }];
        let fp32 = &format!("{h}\nchoice radix fp32\n");
        assert!(parse_entry(fp32, &only_exact).is_none());
        assert!(parse_entry(fp32, &candidates()).is_some());
    }
}
