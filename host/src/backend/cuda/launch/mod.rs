//! Launching a kernel: its call site fills the kernel's `kernels_gpu` parameter struct by field
//! name, taking every buffer's address through [`Reads`] / [`Writes`], and
//! `CudaBackend::launch` pushes that struct as the kernel's one argument with the block size of
//! its `Kernel` constant. The tests check each struct against the committed PTX and the twin
//! table in `kernels_gpu`'s crate documentation, which maps every kernel to its parameter struct
//! and its CPU twin.

mod params;

pub(crate) use params::{Reads, Writes};

#[cfg(test)]
mod tests;
