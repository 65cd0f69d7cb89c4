//! Launching a kernel: its call site fills the kernel's `kernels_gpu` parameter struct by field
//! name, taking every buffer's address through [`Reads`] / [`Writes`], and
//! `CudaBackend::launch` passes the driver a pointer to each of its fields (the entry's
//! parameters, in order) with the block size of its `Kernel` constant. The tests check each
//! struct's fields against the committed PTX's parameter lists and the twin
//! table in `kernels_gpu`'s crate documentation, which maps every kernel to its parameter struct
//! and its CPU twin.

mod params;

pub(crate) use params::{Reads, Writes};

#[cfg(test)]
mod tests;
