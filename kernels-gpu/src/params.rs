//! A kernel's parameters, written once: each kernel takes one `#[repr(C)]` struct by value,
//! defined next to it and compiled for both targets, which the host fills by field name and
//! pushes as a single argument. The compiler then checks every name and type on both sides; a
//! host test checks on the committed PTX that each entry declares one aggregate of the struct's
//! host size and alignment, so the two targets lay it out alike.

use core::marker::PhantomData;

/// The device address of a buffer of `T`s, as a kernel parameter: a plain 64-bit value
/// (`NULL` for an absent optional buffer) that only the kernel dereferences.
#[repr(transparent)]
pub struct DevPtr<T>(u64, PhantomData<fn() -> T>);

// Derives would ask `T: Copy`; an address is copied whatever it points to.
impl<T> Clone for DevPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for DevPtr<T> {}

impl<T> DevPtr<T> {
    /// No buffer: the kernel reads a null pointer as absent.
    pub const NULL: Self = DevPtr(0, PhantomData);

    /// The buffer at device address `address`.
    pub const fn from_address(address: u64) -> Self {
        DevPtr(address, PhantomData)
    }

    /// The buffer, read-only.
    #[inline(always)]
    pub fn as_ptr(self) -> *const T {
        self.0 as *const T
    }

    /// The buffer, written.
    #[inline(always)]
    pub fn as_mut_ptr(self) -> *mut T {
        self.0 as *mut T
    }
}

/// A kernel's parameter struct.
///
/// # Safety
/// `#[repr(C)]`, with only [`DevPtr`]s and plain scalars as fields, so that its bytes mean the
/// same on the host and on nvptx64 (`host/src/backend/cuda/launch/tests.rs` checks the size and
/// alignment against the committed PTX).
pub unsafe trait KernelParams: Copy {}

/// The size and alignment of a kernel's parameter struct.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamsLayout {
    pub size: usize,
    pub align: usize,
}

impl ParamsLayout {
    /// The layout of `P` on the target compiled for.
    pub const fn of<P: KernelParams>() -> Self {
        ParamsLayout {
            size: size_of::<P>(),
            align: align_of::<P>(),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::DevPtr;

    /// The address of a host buffer a kernel reads, for the emulator (which runs kernels on the
    /// host).
    pub(crate) fn dev<T>(values: &[T]) -> DevPtr<T> {
        DevPtr::from_address(values.as_ptr() as u64)
    }

    /// [`dev`] of a buffer a kernel writes.
    pub(crate) fn dev_mut<T>(values: &mut [T]) -> DevPtr<T> {
        DevPtr::from_address(values.as_mut_ptr() as u64)
    }
}
