//! How work is cut into blocks of rows.

/// Points per rayon task of the CPU backend; fixed, so the order of float sums does not depend on
/// the thread count.
pub(crate) const CHUNK: usize = 1024;

/// Rows per block: `max_bytes` (or `default_bytes`) of `cols` f32 each, at least 1, at most
/// `rows`.
pub(crate) fn rows_per_block(
    rows: usize,
    cols: usize,
    max_bytes: Option<usize>,
    default_bytes: usize,
) -> usize {
    let bytes = max_bytes.unwrap_or(default_bytes);
    (bytes / (cols.max(1) * 4)).clamp(1, rows.max(1))
}
