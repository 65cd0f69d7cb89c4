//! One typed launcher per kernel, one module per kernel family of `kernels_gpu`: a struct whose
//! fields are the kernel's parameters, in the kernel's order and under its names, and a `launch`
//! that checks the buffer lengths (debug builds), pushes every field and runs the grid the
//! kernel's documentation asks for. The kernel names come from the `Kernel` constants exported
//! next to the kernels; the twin table in `kernels_gpu`'s crate documentation maps every kernel
//! to its launcher here and its CPU twin.

mod params;

pub(crate) use params::{Reads, Writes};

#[cfg(test)]
mod tests;
