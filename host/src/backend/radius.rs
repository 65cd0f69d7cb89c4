//! What a radius search returns from a backend, and how answers over parts of the training rows
//! become one.

use crate::backend::vocab::PrefilterReport;
use crate::error::{Error, Result};
use rayon::prelude::*;

/// Every query's neighbours within a radius as keys ([`kernels_gpu::knn::key`]) in CSR form:
/// query `q`'s keys are `keys[offsets[q] .. offsets[q + 1]]`, ascending (by distance, then
/// training row). `prefilter`: what the TF32 prefilter did, where it ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RadiusKeys {
    pub offsets: Vec<usize>,
    pub keys: Vec<u64>,
    pub prefilter: Option<PrefilterReport>,
}

impl Default for RadiusKeys {
    /// The answer for no queries.
    fn default() -> RadiusKeys {
        RadiusKeys {
            offsets: vec![0],
            keys: Vec::new(),
            prefilter: None,
        }
    }
}

impl RadiusKeys {
    /// The CSR form of per-query keys, each sorted here.
    pub(crate) fn from_rows(mut rows: Vec<Vec<u64>>) -> Result<RadiusKeys> {
        rows.par_iter_mut().for_each(|row| row.sort_unstable());
        let mut offsets = Vec::with_capacity(rows.len() + 1);
        offsets.push(0);
        for row in &rows {
            offsets.push(offsets.last().expect("offsets start at 0") + row.len());
        }
        let mut keys = Vec::new();
        reserve_keys(&mut keys, *offsets.last().expect("offsets start at 0"))?;
        rows.iter().for_each(|row| keys.extend_from_slice(row));
        Ok(RadiusKeys {
            keys,
            offsets,
            prefilter: None,
        })
    }

    /// Query `q`'s keys.
    pub(crate) fn row(&self, q: usize) -> &[u64] {
        &self.keys[self.offsets[q]..self.offsets[q + 1]]
    }

    /// One answer from the answers of parts of the training rows (`(first row of the part, its
    /// answer)`, rows counted from the part's first): each query's keys from every part, the
    /// rows offset to the whole set's, sorted as one index's (keys are unique, so this is the
    /// single index's answer). The prefilter reports add up (a query counts once per part).
    pub(crate) fn merge_parts(queries: usize, parts: &[(u32, RadiusKeys)]) -> Result<RadiusKeys> {
        let rows: Vec<Vec<u64>> = (0..queries)
            .into_par_iter()
            .map(|q| {
                let mut row = Vec::new();
                for (first_row, part) in parts {
                    // The row index is the key's low half: offsetting it cannot carry.
                    row.extend(part.row(q).iter().map(|&key| key + *first_row as u64));
                }
                row
            })
            .collect();
        let mut merged = RadiusKeys::from_rows(rows)?;
        merged.prefilter = (parts.iter().filter_map(|(_, p)| p.prefilter)).reduce(|a, b| a + b);
        Ok(merged)
    }

    /// One answer from the answers to consecutive shares of the queries, in query order. The
    /// prefilter reports add up.
    pub(crate) fn end_to_end(shares: Vec<RadiusKeys>) -> Result<RadiusKeys> {
        let mut whole = RadiusKeys::default();
        reserve_keys(&mut whole.keys, shares.iter().map(|s| s.keys.len()).sum())?;
        for share in shares {
            let base = whole.keys.len();
            whole
                .offsets
                .extend(share.offsets[1..].iter().map(|o| o + base));
            whole.keys.extend_from_slice(&share.keys);
            whole.prefilter = (whole.prefilter.into_iter())
                .chain(share.prefilter)
                .reduce(|a, b| a + b);
        }
        Ok(whole)
    }
}

/// Room for `more` keys in `keys`, or a typed error when the host cannot hold them (a radius
/// that catches too much).
pub(crate) fn reserve_keys(keys: &mut Vec<u64>, more: usize) -> Result<()> {
    keys.try_reserve(more).map_err(|_| {
        let gib = (keys.len() + more) as f64 * 8.0 / (1u64 << 30) as f64;
        Error::invalid(
            "radius",
            format!(
                "{} neighbours ({gib:.1} GiB of results) do not fit in host memory: use a smaller \
                 radius or fewer queries at a time",
                keys.len() + more
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernels_gpu::knn::key;

    #[test]
    fn parts_merge_by_distance_then_row() {
        let a = RadiusKeys::from_rows(vec![vec![key(1.0, 0), key(0.5, 1)], vec![]]).unwrap();
        let b = RadiusKeys::from_rows(vec![vec![key(0.5, 0)], vec![key(2.0, 2)]]).unwrap();
        let merged = RadiusKeys::merge_parts(2, &[(0, a), (5, b)]).unwrap();
        assert_eq!(merged.offsets, vec![0, 3, 4]);
        assert_eq!(
            merged.keys,
            vec![key(0.5, 1), key(0.5, 5), key(1.0, 0), key(2.0, 7)]
        );
    }

    #[test]
    fn results_past_the_host_memory_are_a_typed_error() {
        let err = reserve_keys(&mut Vec::new(), usize::MAX / 16).unwrap_err();
        assert!(matches!(
            err,
            Error::InvalidParameter { name: "radius", .. }
        ));
    }
}
