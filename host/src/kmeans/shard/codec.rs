//! Bytes for [`Request`] and [`Reply`]: a tag byte, then the fields in order, numbers
//! little-endian, vectors and strings after their length (u64). Large arrays (centroids, sums)
//! cost one copy each way.

use super::protocol::{Prepare, Reply, Request};
use super::{Farthest, Moments, Partial, Tally};
use crate::error::{Error, Result};
use crate::kmeans::{Metric, Precision};
use kernels_gpu::seeding::WeightScale;

/// A fixed-size little-endian number.
trait Word: Copy {
    const SIZE: usize;
    fn put(self, out: &mut Vec<u8>);
    fn get(bytes: &[u8]) -> Self;
}

macro_rules! words {
    ($($t:ty),*) => {$(
        impl Word for $t {
            const SIZE: usize = size_of::<$t>();
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("SIZE bytes"))
            }
        }
    )*};
}
words!(u8, u32, u64, u128, i32, i64, f32, f64);

#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn word<T: Word>(&mut self, v: T) -> &mut Self {
        v.put(&mut self.0);
        self
    }
    fn len(&mut self, n: usize) -> &mut Self {
        self.word(n as u64)
    }
    fn words<T: Word>(&mut self, v: &[T]) -> &mut Self {
        self.len(v.len());
        self.0.reserve(v.len() * T::SIZE);
        v.iter().for_each(|&x| x.put(&mut self.0));
        self
    }
    fn weights(&mut self, ws: WeightScale) -> &mut Self {
        self.word(ws.scale).word(ws.cap)
    }
    fn option(&mut self, v: Option<usize>) -> &mut Self {
        self.word(u8::from(v.is_some())).len(v.unwrap_or(0))
    }
}

struct Reader<'b>(&'b [u8]);

fn truncated() -> Error {
    Error::Shard("a truncated or malformed shard message".into())
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        if n > self.0.len() {
            return Err(truncated());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn word<T: Word>(&mut self) -> Result<T> {
        Ok(T::get(self.take(T::SIZE)?))
    }
    fn len(&mut self) -> Result<usize> {
        usize::try_from(self.word::<u64>()?).map_err(|_| truncated())
    }
    fn words<T: Word>(&mut self) -> Result<Vec<T>> {
        let n = self.len()?;
        let bytes = self.take(n.checked_mul(T::SIZE).ok_or_else(truncated)?)?;
        Ok(bytes.chunks_exact(T::SIZE).map(T::get).collect())
    }
    fn flag(&mut self) -> Result<bool> {
        Ok(self.word::<u8>()? != 0)
    }
    fn weights(&mut self) -> Result<WeightScale> {
        Ok(WeightScale {
            scale: self.word()?,
            cap: self.word()?,
        })
    }
    fn option(&mut self) -> Result<Option<usize>> {
        let some = self.flag()?;
        let v = self.len()?;
        Ok(some.then_some(v))
    }
    fn string(&mut self) -> Result<String> {
        String::from_utf8(self.words::<u8>()?).map_err(|_| truncated())
    }
    /// Fails unless every byte was read.
    fn end<T>(&self, value: T) -> Result<T> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(truncated())
        }
    }
}

fn metric_id(m: Metric) -> u8 {
    match m {
        Metric::L2 => 0,
        Metric::L1 => 1,
        Metric::Cosine => 2,
    }
}

fn precision_id(p: Precision) -> u8 {
    match p {
        Precision::Exact => 0,
        Precision::Tf32 => 1,
        Precision::Auto => 2,
    }
}

/// The requests' names, by tag.
pub(crate) const REQUESTS: [&str; 17] = [
    "Columns",
    "Moments",
    "Prepare",
    "Assign",
    "Step",
    "Accumulate",
    "SetLabels",
    "Farthest",
    "Tally",
    "Labels",
    "Distances",
    "Gather",
    "SeedNearest",
    "SeedLocate",
    "SeedTrials",
    "SeedSample",
    "SeedOwnerCounts",
];

impl Request {
    /// The name of the request (its variant) that `bytes` from [`Request::to_bytes`] hold, read
    /// from its first byte alone (for logs and timings).
    pub fn name_of(bytes: &[u8]) -> Option<&'static str> {
        REQUESTS.get(usize::from(*bytes.first()?)).copied()
    }

    /// The request's tag: its first byte in [`Request::to_bytes`], its name's index in
    /// [`REQUESTS`].
    pub(crate) fn tag(&self) -> usize {
        match self {
            Request::Columns { .. } => 0,
            Request::Moments { .. } => 1,
            Request::Prepare(_) => 2,
            Request::Assign { .. } => 3,
            Request::Step { .. } => 4,
            Request::Accumulate => 5,
            Request::SetLabels { .. } => 6,
            Request::Farthest { .. } => 7,
            Request::Tally => 8,
            Request::Labels => 9,
            Request::Distances => 10,
            Request::Gather { .. } => 11,
            Request::SeedNearest { .. } => 12,
            Request::SeedLocate { .. } => 13,
            Request::SeedTrials { .. } => 14,
            Request::SeedSample { .. } => 15,
            Request::SeedOwnerCounts { .. } => 16,
        }
    }

    /// The request as bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.word(self.tag() as u8);
        match self {
            Request::Columns { unit_rows } => w.word(u8::from(*unit_rows)),
            Request::Moments { scales } => w.words(scales),
            Request::Prepare(p) => w
                .len(p.k)
                .word(metric_id(p.metric))
                .word(precision_id(p.precision))
                .words(&p.scales)
                .len(p.seeds_at_once)
                .word(p.inertia_exponent),
            Request::Assign { centroids } => w.words(centroids),
            Request::Step { centroids } => w.words(centroids),
            Request::Accumulate | Request::Tally | Request::Labels | Request::Distances => &mut w,
            Request::SetLabels { labels } => w.words(labels),
            Request::Farthest { count } => w.len(*count),
            Request::Gather { rows } => w.words(rows),
            Request::SeedNearest {
                points,
                first_id,
                fresh,
                weights,
            } => w
                .words(points)
                .word(*first_id)
                .word(u8::from(*fresh))
                .weights(*weights),
            Request::SeedLocate {
                accept,
                draws,
                weights,
            } => w.option(*accept).words(draws).weights(*weights),
            Request::SeedTrials {
                accept,
                points,
                weights,
            } => w.option(*accept).words(points).weights(*weights),
            Request::SeedSample {
                seed,
                round,
                ell,
                phi,
                weights,
            } => w
                .word(*seed)
                .word(*round)
                .word(*ell)
                .word(*phi)
                .weights(*weights),
            Request::SeedOwnerCounts { ids } => w.len(*ids),
        };
        w.0
    }

    /// A request from [`Request::to_bytes`]; an [`Error::Shard`] for anything else.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader(bytes);
        let request = match r.word::<u8>()? {
            0 => Request::Columns {
                unit_rows: r.flag()?,
            },
            1 => Request::Moments { scales: r.words()? },
            2 => Request::Prepare(Prepare {
                k: r.len()?,
                metric: match r.word::<u8>()? {
                    0 => Metric::L2,
                    1 => Metric::L1,
                    2 => Metric::Cosine,
                    _ => return Err(truncated()),
                },
                precision: match r.word::<u8>()? {
                    0 => Precision::Exact,
                    1 => Precision::Tf32,
                    2 => Precision::Auto,
                    _ => return Err(truncated()),
                },
                scales: r.words()?,
                seeds_at_once: r.len()?,
                inertia_exponent: r.word()?,
            }),
            3 => Request::Assign {
                centroids: r.words()?,
            },
            4 => Request::Step {
                centroids: r.words()?,
            },
            5 => Request::Accumulate,
            6 => Request::SetLabels { labels: r.words()? },
            7 => Request::Farthest { count: r.len()? },
            8 => Request::Tally,
            9 => Request::Labels,
            10 => Request::Distances,
            11 => Request::Gather { rows: r.words()? },
            12 => Request::SeedNearest {
                points: r.words()?,
                first_id: r.word()?,
                fresh: r.flag()?,
                weights: r.weights()?,
            },
            13 => Request::SeedLocate {
                accept: r.option()?,
                draws: r.words()?,
                weights: r.weights()?,
            },
            14 => Request::SeedTrials {
                accept: r.option()?,
                points: r.words()?,
                weights: r.weights()?,
            },
            15 => Request::SeedSample {
                seed: r.word()?,
                round: r.word()?,
                ell: r.word()?,
                phi: r.word()?,
                weights: r.weights()?,
            },
            16 => Request::SeedOwnerCounts { ids: r.len()? },
            _ => return Err(truncated()),
        };
        r.end(request)
    }
}

impl Reply {
    /// The reply as bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::default();
        match self {
            Reply::Done => w.word(0u8),
            Reply::Columns {
                first_row,
                rows,
                max_abs,
                device,
            } => w
                .word(1u8)
                .word(*first_row)
                .word(*rows)
                .words(max_abs)
                .words(device.as_bytes()),
            Reply::Moments(m) => w.word(2u8).word(m.rows).words(&m.sums).words(&m.squares),
            Reply::Assigned { changed, inertia } => w.word(3u8).word(*changed).word(*inertia),
            Reply::Partial(p) => w
                .word(4u8)
                .words(&p.sums)
                .words(&p.weights)
                .word(p.changed)
                .word(p.inertia),
            Reply::Farthest(f) => {
                let distances: Vec<f32> = f.iter().map(|f| f.distance).collect();
                let rows: Vec<u64> = f.iter().map(|f| f.row).collect();
                w.word(5u8).words(&distances).words(&rows)
            }
            Reply::Tally(t) => w.word(6u8).words(&t.sizes),
            Reply::Labels(l) => w.word(7u8).words(l),
            Reply::Distances(d) => w.word(8u8).words(d),
            Reply::Points { rows, points } => w.word(9u8).words(rows).words(points),
            Reply::Weights(v) => w.word(10u8).words(v),
            Reply::Rows(v) => w.word(11u8).words(v),
            Reply::Counts(v) => w.word(12u8).words(v),
        };
        w.0
    }

    /// A reply from [`Reply::to_bytes`]; an [`Error::Shard`] for anything else.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader(bytes);
        let reply = match r.word::<u8>()? {
            0 => Reply::Done,
            1 => Reply::Columns {
                first_row: r.word()?,
                rows: r.word()?,
                max_abs: r.words()?,
                device: r.string()?,
            },
            2 => Reply::Moments(Moments {
                rows: r.word()?,
                sums: r.words()?,
                squares: r.words()?,
            }),
            3 => Reply::Assigned {
                changed: r.word()?,
                inertia: r.word()?,
            },
            4 => Reply::Partial(Partial {
                sums: r.words()?,
                weights: r.words()?,
                changed: r.word()?,
                inertia: r.word()?,
            }),
            5 => {
                let distances: Vec<f32> = r.words()?;
                let rows: Vec<u64> = r.words()?;
                if rows.len() != distances.len() {
                    return Err(truncated());
                }
                let f = distances.into_iter().zip(rows);
                Reply::Farthest(
                    f.map(|(distance, row)| Farthest { distance, row })
                        .collect(),
                )
            }
            6 => Reply::Tally(Tally { sizes: r.words()? }),
            7 => Reply::Labels(r.words()?),
            8 => Reply::Distances(r.words()?),
            9 => Reply::Points {
                rows: r.words()?,
                points: r.words()?,
            },
            10 => Reply::Weights(r.words()?),
            11 => Reply::Rows(r.words()?),
            12 => Reply::Counts(r.words()?),
            _ => return Err(truncated()),
        };
        r.end(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> WeightScale {
        WeightScale::new(3.5, 1000)
    }

    #[test]
    fn requests_round_trip() {
        let requests = [
            Request::Columns { unit_rows: false },
            Request::Columns { unit_rows: true },
            Request::Moments {
                scales: vec![3, -2],
            },
            Request::Prepare(Prepare {
                k: 7,
                metric: Metric::L1,
                precision: Precision::Tf32,
                scales: vec![1, 2, 3],
                seeds_at_once: 14,
                inertia_exponent: -7,
            }),
            Request::Assign {
                centroids: vec![1.5, -0.0],
            },
            Request::Step {
                centroids: vec![f32::MIN_POSITIVE],
            },
            Request::Accumulate,
            Request::SetLabels {
                labels: vec![0, 4, u32::MAX],
            },
            Request::Farthest { count: 3 },
            Request::Tally,
            Request::Labels,
            Request::Distances,
            Request::Gather { rows: vec![9, 1] },
            Request::SeedNearest {
                points: vec![0.25; 6],
                first_id: 5,
                fresh: true,
                weights: ws(),
            },
            Request::SeedLocate {
                accept: Some(2),
                draws: vec![u64::MAX, 0],
                weights: ws(),
            },
            Request::SeedTrials {
                accept: None,
                points: vec![],
                weights: ws(),
            },
            Request::SeedSample {
                seed: 11,
                round: 4,
                ell: 20,
                phi: 1 << 60,
                weights: ws(),
            },
            Request::SeedOwnerCounts { ids: 30 },
        ];
        for request in requests {
            let bytes = request.to_bytes();
            assert_eq!(Request::from_bytes(&bytes).unwrap(), request);
            let name = Request::name_of(&bytes).unwrap();
            assert!(format!("{request:?}").starts_with(name), "{name}");
            assert!(Request::from_bytes(&bytes[..bytes.len() - 1]).is_err());
        }
    }

    #[test]
    fn replies_round_trip() {
        let replies = [
            Reply::Done,
            Reply::Columns {
                first_row: 12,
                rows: 3,
                max_abs: vec![2.0, 0.5],
                device: "cuda:0 (NVIDIA H200)".into(),
            },
            Reply::Moments(Moments {
                rows: 3,
                sums: vec![-5, 1 << 61],
                squares: vec![u128::MAX, 7],
            }),
            Reply::Assigned {
                changed: 2,
                inertia: -3,
            },
            Reply::Partial(Partial {
                sums: vec![i64::MIN, i64::MAX],
                weights: vec![1],
                changed: 9,
                inertia: i64::MAX,
            }),
            Reply::Farthest(vec![Farthest {
                distance: 3.0,
                row: 77,
            }]),
            Reply::Tally(Tally { sizes: vec![4, 0] }),
            Reply::Labels(vec![1, 0]),
            Reply::Distances(vec![0.5]),
            Reply::Points {
                rows: vec![4],
                points: vec![1.0, 2.0],
            },
            Reply::Weights(vec![u64::MAX]),
            Reply::Rows(vec![1, 2, 3]),
            Reply::Counts(vec![]),
        ];
        for reply in replies {
            let bytes = reply.to_bytes();
            assert_eq!(Reply::from_bytes(&bytes).unwrap(), reply);
            assert!(Reply::from_bytes(&bytes[..bytes.len() - 1]).is_err());
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bytes in [
            &[][..],
            &[200],
            &[3, 255, 255, 255, 255, 255, 255, 255, 255],
            &[0, 0, 0],
        ] {
            assert!(Request::from_bytes(bytes).is_err(), "{bytes:?}");
            assert!(Reply::from_bytes(bytes).is_err(), "{bytes:?}");
        }
    }
}
