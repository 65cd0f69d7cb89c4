//! Radius search ([`KnnIndex::radius_search`]): every training row within a distance of each
//! query, as CSR arrays.

use super::KnnIndex;
use crate::backend::split_keys;
use crate::backend::vocab::PrefilterReport;
use crate::distances::DistanceMetric;
use crate::error::{Error, Result};
use crate::matrix::MatrixView;

/// Every query row's training rows within a radius, in CSR form: query `q`'s neighbours are
/// `indices[offsets[q] .. offsets[q + 1]]` at `distances[..]` of the same range, by distance,
/// then training index.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RadiusNeighbors {
    /// `queries + 1` offsets, from 0 to the number of neighbours found.
    pub offsets: Vec<usize>,
    /// Training row indices.
    pub indices: Vec<u32>,
    /// Their distances, in the metric's units (as [`KnnIndex::search`] reports them).
    pub distances: Vec<f32>,
    /// What the TF32 prefilter did, when it ran (GPU, L2 metrics, a finite radius; see
    /// [`KnnIndex::with_prefilter`]): `exact_fallbacks` queries took the exact path.
    pub prefilter: Option<PrefilterReport>,
}

impl RadiusNeighbors {
    /// Number of query rows.
    pub fn queries(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// The training rows within the radius of query `q`, nearest first.
    pub fn indices_of(&self, q: usize) -> &[u32] {
        &self.indices[self.offsets[q]..self.offsets[q + 1]]
    }

    /// Their distances.
    pub fn distances_of(&self, q: usize) -> &[f32] {
        &self.distances[self.offsets[q]..self.offsets[q + 1]]
    }
}

/// A radius for `metric`: not NaN, and not negative where every distance is non-negative.
fn check_radius(radius: f32, metric: DistanceMetric) -> Result<()> {
    if radius.is_nan() {
        return Err(Error::invalid("radius", "the radius is NaN"));
    }
    if radius < 0.0 && metric.is_non_negative() {
        return Err(Error::invalid(
            "radius",
            format!("{radius} is negative, and {metric} distances never are"),
        ));
    }
    Ok(())
}

impl KnnIndex {
    /// Every training row at distance `≤ radius` of every row of `queries` (scikit-learn's
    /// rule), nearest first (equal distances by index). Distances are the same floats that
    /// [`KnnIndex::search`] reports for the same pairs, on every device, so the CPU and the GPU
    /// return identical arrays. The radius is in the metric's units (a squared distance for
    /// [`DistanceMetric::SqEuclidean`], `−x·y` for the inner product, where it may be negative).
    pub fn radius_search<'q>(
        &self,
        queries: impl Into<MatrixView<'q>>,
        radius: f32,
    ) -> Result<RadiusNeighbors> {
        let queries = queries.into();
        check_radius(radius, self.metric)?;
        queries.validate("the queries")?;
        queries.expect_cols("the queries", self.d)?;
        let found = self.inner.radius(&queries, radius, self.max_bytes)?;
        let (mut indices, mut distances) = (Vec::new(), Vec::new());
        split_keys(&found.keys, &mut indices, &mut distances);
        Ok(RadiusNeighbors {
            offsets: found.offsets,
            indices,
            distances,
            prefilter: found.prefilter,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;

    /// Rows on an integer grid: duplicates and many exact ties.
    fn grid(rows: usize, d: usize, salt: usize) -> Vec<f32> {
        (0..rows * d).map(|i| ((i * 7 + salt) % 5) as f32).collect()
    }

    /// The radius answer equals the prefix of the full search (k = n) within the radius.
    fn check_against_search(index: &KnnIndex, queries: &MatrixView<'_>, radius: f32) {
        let n = index.len();
        let full = index.search(queries, n).unwrap();
        let got = index.radius_search(queries, radius).unwrap();
        assert_eq!(got.queries(), queries.rows());
        for q in 0..queries.rows() {
            let dists = full.distances.row(q);
            let within = dists.iter().take_while(|&&d| d <= radius).count();
            let want_i = full.indices.row(q).to_vec()[..within].to_vec();
            let want_d: Vec<u32> = dists.iter().take(within).map(|d| d.to_bits()).collect();
            let got_d: Vec<u32> = got.distances_of(q).iter().map(|d| d.to_bits()).collect();
            assert_eq!(got.indices_of(q), &want_i[..], "query {q} radius {radius}");
            assert_eq!(got_d, want_d, "query {q} radius {radius}");
        }
    }

    #[test]
    fn radius_is_the_search_prefix_within_the_radius() {
        for (n, d, metric) in [
            (1, 1, DistanceMetric::L1),
            (37, 1, DistanceMetric::SqEuclidean),
            (530, 3, DistanceMetric::L1),
            (70, 2, DistanceMetric::Euclidean),
            (41, 4, DistanceMetric::InnerProduct),
            (33, 3, DistanceMetric::Cosine),
        ] {
            let train = grid(n, d, 1);
            let mut qs = grid(7, d, 3);
            // Cosine needs directions: no zero rows.
            if metric == DistanceMetric::Cosine {
                qs.iter_mut().for_each(|v| *v += 1.0);
            }
            let train_rows = if metric == DistanceMetric::Cosine {
                train.iter().map(|v| v + 1.0).collect()
            } else {
                train
            };
            let index = KnnIndex::new(
                MatrixView::new(&train_rows, n, d).unwrap(),
                metric,
                Device::Cpu,
            )
            .unwrap();
            let queries = MatrixView::new(&qs, 7, d).unwrap();
            // Radius 0, attained distances (ties at exactly the radius), one between them,
            // everything, and (inner product) negative radii.
            let radii: &[f32] = if metric.is_non_negative() {
                &[0.0, 0.1, 1.0, 2.0, 2.5, 9.0, f32::INFINITY]
            } else {
                &[
                    -20.0,
                    -9.0,
                    -4.5,
                    0.0,
                    3.0,
                    f32::INFINITY,
                    f32::NEG_INFINITY,
                ]
            };
            for &radius in radii {
                check_against_search(&index, &queries, radius);
            }
            let all = index.radius_search(&queries, f32::INFINITY).unwrap();
            assert_eq!(all.offsets.last(), Some(&(7 * n)), "{metric} catches all");
        }
    }

    #[test]
    fn an_empty_answer_has_offsets_of_zero() {
        let train = [0.0f32, 10.0, 20.0];
        let index = KnnIndex::new(
            MatrixView::new(&train, 3, 1).unwrap(),
            DistanceMetric::L1,
            Device::Cpu,
        )
        .unwrap();
        let q = [5.0f32, 10.0];
        let got = index
            .radius_search(MatrixView::new(&q, 2, 1).unwrap(), 4.0)
            .unwrap();
        assert_eq!(got.offsets, vec![0, 0, 1]);
        assert_eq!((got.indices, got.distances), (vec![1], vec![0.0]));
    }

    #[test]
    fn bad_radius_and_queries_are_typed_errors() {
        let train = [0.0f32, 1.0, 2.0, 3.0];
        let index = KnnIndex::new(
            MatrixView::new(&train, 2, 2).unwrap(),
            DistanceMetric::Euclidean,
            Device::Cpu,
        )
        .unwrap();
        let q = MatrixView::new(&[0.0, 0.0], 1, 2).unwrap();
        for radius in [f32::NAN, -0.5, f32::NEG_INFINITY] {
            assert!(matches!(
                index.radius_search(&q, radius),
                Err(Error::InvalidParameter { name: "radius", .. })
            ));
        }
        let q3 = MatrixView::new(&[0.0, 0.0, 0.0], 1, 3).unwrap();
        assert!(matches!(
            index.radius_search(&q3, 1.0),
            Err(Error::DimensionMismatch { .. })
        ));
        let inf = MatrixView::new(&[0.0, f32::INFINITY], 1, 2).unwrap();
        assert!(matches!(
            index.radius_search(&inf, 1.0),
            Err(Error::NonFinite { .. })
        ));
    }

    /// Streamed parts and parts over several devices (here the CPU backend: the same code as
    /// over GPUs) answer as one index.
    #[test]
    fn parts_and_streams_answer_as_one_index() {
        use crate::backend::KnnSearch;
        use crate::backend::multi::{GpuParts, stream};
        let (n, d, m) = (61, 2, 300);
        let (train, qs) = (grid(n, d, 2), grid(m, d, 4));
        let train = MatrixView::new(&train, n, d).unwrap();
        let queries = MatrixView::new(&qs, m, d).unwrap();
        let metric = DistanceMetric::SqEuclidean.kernel();
        let cpu = Device::Cpu.backend().unwrap();
        let one = cpu.knn_index(&train, metric).unwrap();
        let on_cpu = |_| Device::Cpu.backend();
        let parts = GpuParts::new(&train, metric, 3, &on_cpu, None).unwrap();
        let row = 4 * stream::device_bytes_per_row(d);
        for radius in [0.0, 2.0, 5.0, f32::INFINITY] {
            let want = one.radius(&queries, radius, None).unwrap();
            assert_eq!(parts.radius(&queries, radius, None).unwrap(), want);
            for budget in [row, 7 * row, 1000 * row] {
                let streamed =
                    stream::Streamed::new(cpu.clone(), train.clone(), metric, budget).unwrap();
                let got = streamed.radius(&queries, radius, None).unwrap();
                assert_eq!(got, want, "budget {budget} radius {radius}");
            }
        }
    }
}
