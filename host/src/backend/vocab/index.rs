/// A neighbour's training-row index as a search returns it: `u32` (compact), or `i64` (NumPy's
/// `intp`, the type scikit-learn returns), which the GPU writes straight from its keys so that no
/// second pass over the answer widens it.
pub(crate) trait NeighbourIndex: Copy + Default + Send + Sync + From<u32> + 'static {}

impl NeighbourIndex for u32 {}

impl NeighbourIndex for i64 {}
