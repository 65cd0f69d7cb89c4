//! The bitonic sorting network as index arithmetic, shared by the selection kernels and tested
//! here on the host.
//!
//! A network over `P = 2^p` keys runs stages `size = 2, 4, …, P`; stage `size` runs steps
//! `stride = size/2, …, 1`; a step compare-exchanges the `P/2` pairs `(i, i + stride)` given by
//! [`pair`], ascending when `i & size == 0` ([`ascending`]). Rows of a larger buffer sort
//! independently when they are `P`-aligned and the direction reads `i & (P − 1)`.

/// The pair `(i, i + stride)` handled by compare-exchange number `p` (`0 ≤ p < P/2`) of a step
/// with power-of-two `stride`.
#[inline(always)]
pub fn pair(p: usize, stride: usize) -> (usize, usize) {
    let low = p & (stride - 1);
    let i = ((p - low) << 1) | low;
    (i, i + stride)
}

/// Whether the pair starting at `i` sorts ascending in stage `size` of rows of `row_len` keys
/// (a power of two, at least `size`).
#[inline(always)]
pub fn ascending(i: usize, size: usize, row_len: usize) -> bool {
    i & (row_len - 1) & size == 0
}

/// Orders `a` and `b` ascending (or descending); returns the new pair.
#[inline(always)]
pub fn compare_exchange(a: u64, b: u64, ascending: bool) -> (u64, u64) {
    if (a > b) == ascending { (b, a) } else { (a, b) }
}

/// Sorts `keys` (rows of `row_len` keys each, `row_len` a power of two) with the network, one
/// step at a time, as the kernels do; the host reference of the device sort.
pub fn sort_rows(keys: &mut [u64], row_len: usize) {
    assert!(row_len.is_power_of_two() && keys.len().is_multiple_of(row_len));
    let mut size = 2;
    while size <= row_len {
        let mut stride = size / 2;
        while stride > 0 {
            for p in 0..keys.len() / 2 {
                let (i, j) = pair(p, stride);
                let (a, b) = compare_exchange(keys[i], keys[j], ascending(i, size, row_len));
                keys[i] = a;
                keys[j] = b;
            }
            stride /= 2;
        }
        size *= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_cover_every_index_once() {
        for stride in [1usize, 2, 4, 8] {
            let mut seen = [0; 32];
            for p in 0..16 {
                let (i, j) = pair(p, stride);
                assert_eq!(j - i, stride);
                assert_eq!(i & stride, 0);
                seen[i] += 1;
                seen[j] += 1;
            }
            assert!(seen.iter().all(|&s| s == 1), "{stride}");
        }
    }

    #[test]
    fn network_sorts_rows() {
        let mut state = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % 50
        };
        for row_len in [1usize, 2, 8, 64, 256] {
            let mut keys: Vec<u64> = (0..4 * row_len).map(|_| next()).collect();
            let mut expect = keys.clone();
            expect.chunks_mut(row_len).for_each(|r| r.sort_unstable());
            sort_rows(&mut keys, row_len);
            assert_eq!(keys, expect, "{row_len}");
        }
    }
}
