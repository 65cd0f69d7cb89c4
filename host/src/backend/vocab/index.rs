/// A neighbour's training-row index as a search returns it: `u32` (compact), or `i64` (NumPy's
/// `intp`, the type scikit-learn returns), which the GPU writes straight from its keys so that no
/// second pass over the answer widens it.
pub(crate) trait NeighbourIndex: Copy + Default + Send + Sync + From<u32> + 'static {
    /// `indices` as a search writes into them ([`IndicesMut`]).
    fn slice_mut(indices: &mut [Self]) -> IndicesMut<'_>;
}

impl NeighbourIndex for u32 {
    fn slice_mut(indices: &mut [u32]) -> IndicesMut<'_> {
        IndicesMut::U32(indices)
    }
}

impl NeighbourIndex for i64 {
    fn slice_mut(indices: &mut [i64]) -> IndicesMut<'_> {
        IndicesMut::I64(indices)
    }
}

/// The caller's array that a search writes its neighbours' indices into, of either
/// [`NeighbourIndex`] type (a search behind a trait object cannot be generic over it).
pub(crate) enum IndicesMut<'a> {
    U32(&'a mut [u32]),
    I64(&'a mut [i64]),
}
