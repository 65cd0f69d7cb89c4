//! A kernel's parameters, written once. [`kernel_params!`](crate::kernel_params) declares a
//! kernel family's `#[repr(C)]` parameter struct, compiled for both targets, and a macro that
//! declares its entry points: each takes the struct's fields as its own parameters, in field
//! order, and rebuilds the struct for the body. The PTX entry so keeps one plain parameter per
//! field (a pointer parameter stays a pointer, which LLVM's nvptx backend marks global: a
//! by-value struct would make every access through it a generic one). The host fills the
//! struct by field name and passes the driver a pointer to each field ([`KernelParams::FIELDS`]).
//! The compiler checks every name and type on both sides; a host test checks on the committed
//! PTX that each entry declares one parameter per field, of the field's size and kind.

/// The device address of a buffer of `T`s, as a kernel parameter: a raw pointer (`NULL` for an
/// absent optional buffer) that only the kernel dereferences; an entry declares it as a `*mut T`
/// parameter.
#[repr(transparent)]
pub struct DevPtr<T>(*mut T);

// Derives would ask `T: Copy`; an address is copied whatever it points to.
impl<T> Clone for DevPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for DevPtr<T> {}

// SAFETY: an address, which only a kernel (or the emulator's `unsafe` body) dereferences.
unsafe impl<T> Send for DevPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for DevPtr<T> {}

impl<T> DevPtr<T> {
    /// No buffer: the kernel reads a null pointer as absent.
    pub const NULL: Self = DevPtr(core::ptr::null_mut());

    /// The buffer at device address `address`.
    pub const fn from_address(address: u64) -> Self {
        DevPtr(core::ptr::without_provenance_mut(address as usize))
    }

    /// The buffer at `ptr` (the emulator's host buffers).
    pub const fn from_ptr(ptr: *const T) -> Self {
        DevPtr(ptr.cast_mut())
    }

    /// The buffer, read-only.
    #[inline(always)]
    pub fn as_ptr(self) -> *const T {
        self.0
    }

    /// The buffer, written.
    #[inline(always)]
    pub fn as_mut_ptr(self) -> *mut T {
        self.0
    }
}

/// A type a kernel parameter may have: the same size and meaning on the host and on nvptx64.
///
/// # Safety
/// Plain data of the same size on both targets: a scalar or a [`DevPtr`].
pub unsafe trait KernelArg: Copy {
    /// What an entry declares: the type itself, or a [`DevPtr`]'s raw pointer.
    type Raw;
    /// Whether it is a device address (declared `.ptr` in the PTX).
    const POINTER: bool;
    /// The value of an entry's parameter.
    fn from_raw(raw: Self::Raw) -> Self;
}

/// Scalars are passed as they are.
macro_rules! scalar_args {
    ($($t:ty),*) => {$(
        // SAFETY: a fixed-size scalar.
        unsafe impl KernelArg for $t {
            type Raw = $t;
            const POINTER: bool = false;
            #[inline(always)]
            fn from_raw(raw: $t) -> $t {
                raw
            }
        }
    )*};
}

scalar_args!(u32, u64, f32, f64);

// SAFETY: a 64-bit address on both targets.
unsafe impl<T> KernelArg for DevPtr<T> {
    type Raw = *mut T;
    const POINTER: bool = true;
    #[inline(always)]
    fn from_raw(raw: *mut T) -> Self {
        DevPtr(raw)
    }
}

/// One field of a parameter struct: one parameter of its entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// Its offset in the host's struct: where the driver copies the parameter from.
    pub offset: usize,
    /// Its size in bytes: that of the entry's parameter.
    pub size: usize,
    /// Whether it is a [`DevPtr`].
    pub pointer: bool,
}

/// A kernel's parameter struct, declared by [`kernel_params!`](crate::kernel_params).
///
/// # Safety
/// `#[repr(C)]`, with only [`KernelArg`] fields, each listed in [`KernelParams::FIELDS`] in order:
/// every entry taking it has these parameters.
pub unsafe trait KernelParams: Copy {
    /// The fields, in declaration order: the entry's parameters.
    const FIELDS: &'static [Field];
}

/// Declares a kernel family's parameter struct and the macro that declares its entry points.
///
/// ```ignore
/// kernel_params! {
///     /// `row_sq_norms`'s parameters: `x` holds `n × d` values and `out` `n`.
///     pub struct RowSqNormsParams {
///         pub x: DevPtr<f32>,
///         pub n: u32,
///         pub d: u32,
///         pub out: DevPtr<f32>,
///     }
///     entries: row_sq_norms_entry;
/// }
///
/// row_sq_norms_entry! {
///     /// Docs of the entry point.
///     fn row_sq_norms(params) {
///         unsafe { sq_norms(crate::exec::Gpu, &params) }
///     }
/// }
/// ```
///
/// The entry macro expands to `#[no_mangle] extern "gpu-kernel" fn row_sq_norms(x: *mut f32,
/// n: u32, d: u32, out: *mut f32)` (nvptx64 only), which binds `params` to the struct of its
/// parameters before running the body. A field is a `DevPtr<T>`, spelled so (the macro reads
/// it as a pointer), or a scalar [`KernelArg`]. The entry macro is a `macro_rules!` in textual
/// scope after the struct: a module further away imports it (`pub(crate) use
/// row_sq_norms_entry;` next to the struct), and the struct must be in scope where it is called.
#[macro_export]
macro_rules! kernel_params {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($(#[$field_meta:meta])* pub $field:ident: $ty:ident $(<$arg:ty>)?),* $(,)?
        }
        entries: $entries:ident;
    ) => {
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy)]
        pub struct $name {
            $($(#[$field_meta])* pub $field: $ty $(<$arg>)?),*
        }

        // SAFETY: `#[repr(C)]`, every field a `KernelArg` (the bound below) and listed in order.
        unsafe impl $crate::params::KernelParams for $name {
            const FIELDS: &'static [$crate::params::Field] = &[$($crate::params::Field {
                offset: core::mem::offset_of!($name, $field),
                size: size_of::<$ty $(<$arg>)?>(),
                pointer: <$ty $(<$arg>)? as $crate::params::KernelArg>::POINTER,
            }),*];
        }

        $crate::__kernel_entries! { ($) $entries $name [$($field: $ty $(<$arg>)?),*] }
    };
}

/// The entry macro of [`kernel_params!`](crate::kernel_params); `$d` is a `$`, which a macro
/// cannot write into the macro it defines any other way.
#[doc(hidden)]
#[macro_export]
macro_rules! __kernel_entries {
    (($d:tt) $entries:ident $name:ident [$($field:ident: $ty:ident $(<$arg:ty>)?),*]) => {
        // Unused on the host, which compiles no entry.
        #[allow(unused_macros)]
        macro_rules! $entries {
            ($d(#[$d meta:meta])* fn $d kernel:ident($d params:ident) $d body:block) => {
                $d(#[$d meta])*
                #[cfg(target_arch = "nvptx64")]
                #[unsafe(no_mangle)]
                #[allow(clippy::too_many_arguments)]
                pub unsafe extern "gpu-kernel" fn $d kernel(
                    $($field: $crate::__entry_param!($ty $(<$arg>)?)),*
                ) {
                    let $d params = $name {
                        $($field: $crate::params::KernelArg::from_raw($field)),*
                    };
                    $d body
                }
            };
        }
    };
}

/// The type an entry declares for a field: a [`DevPtr`]'s raw pointer (which the `gpu-kernel`
/// ABI passes as a pointer parameter, as it promises nothing for a wrapper), a scalar as it is.
#[doc(hidden)]
#[macro_export]
macro_rules! __entry_param {
    (DevPtr<$t:ty>) => { *mut $t };
    ($scalar:ident) => { $scalar };
}

#[cfg(test)]
pub(crate) mod tests {
    use super::{DevPtr, Field, KernelParams};

    kernel_params! {
        /// A parameter list of every kind, with padding after the 32-bit fields.
        pub struct SampleParams {
            pub x: DevPtr<f32>,
            pub n: u32,
            pub total: u64,
            pub scale: f32,
            pub out: DevPtr<u64>,
        }
        entries: sample_entry;
    }

    #[test]
    fn fields_are_listed_in_order_with_their_offset_size_and_kind() {
        let field = |offset, size, pointer| Field {
            offset,
            size,
            pointer,
        };
        assert_eq!(
            SampleParams::FIELDS,
            [
                field(0, 8, true),
                field(8, 4, false),
                field(16, 8, false),
                field(24, 4, false),
                field(32, 8, true)
            ]
        );
    }

    /// The address of a host buffer a kernel reads, for the emulator (which runs kernels on the
    /// host).
    pub(crate) fn dev<T>(values: &[T]) -> DevPtr<T> {
        DevPtr::from_ptr(values.as_ptr())
    }

    /// [`dev`] of a buffer a kernel writes.
    pub(crate) fn dev_mut<T>(values: &mut [T]) -> DevPtr<T> {
        DevPtr(values.as_mut_ptr())
    }
}
