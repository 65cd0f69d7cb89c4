//! Launches of kernels that take a parameter struct (`kernels_gpu::params`): the call site fills
//! the kernel's own struct by field name, taking each buffer's address with [`Reads`] or
//! [`Writes`] (which check its length in debug builds), and [`CudaBackend::launch`] passes the
//! driver a pointer to each field, the entry's parameters in order.

use crate::backend::cuda::{CudaBackend, cuda, faults};
use crate::error::{Error, Result};
use cudarc::driver::sys::{
    CUlaunchAttribute, CUlaunchAttributeID, CUlaunchAttributeValue, CUlaunchConfig, CUresult,
    cuLaunchKernelEx,
};
use cudarc::driver::{
    CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DriverError, result,
};
use kernels_gpu::launch::Kernel;
use kernels_gpu::params::{DevPtr, KernelParams};
use std::ffi::c_void;

impl CudaBackend {
    /// Launches `kernel` on the compute stream: `grid` blocks of its `block` threads, `shared`
    /// bytes of dynamic shared memory, and `params`.
    pub(crate) fn launch<P: KernelParams>(
        &self,
        kernel: Kernel<P>,
        grid: usize,
        shared: usize,
        params: P,
    ) -> Result<()> {
        self.launch_on(self.compute_stream(), kernel, grid, shared, params)
    }

    /// [`CudaBackend::launch`] queued on `stream`.
    pub(crate) fn launch_on<P: KernelParams>(
        &self,
        stream: &CudaStream,
        kernel: Kernel<P>,
        grid: usize,
        shared: usize,
        params: P,
    ) -> Result<()> {
        self.launch_with(stream, false, kernel, grid, shared, params)
    }

    /// [`CudaBackend::launch_on`]; with `early`, the kernel may start while the kernel before
    /// it on the stream ends (programmatic dependent launch), so that its launch and the part
    /// before its `kernels_gpu::exec::wait_for_prior_grid` overlap that kernel's last blocks.
    /// Only for kernels that wait so, and where the loaded image has the waits
    /// ([`CudaBackend::early_launches`]).
    pub(crate) fn launch_with<P: KernelParams>(
        &self,
        stream: &CudaStream,
        early: bool,
        kernel: Kernel<P>,
        grid: usize,
        shared: usize,
        params: P,
    ) -> Result<()> {
        let failed = |e| cuda(&format!("launching kernel {}", kernel.name), e);
        let grid = u32::try_from(grid.max(1))
            .map_err(|_| Error::invalid("input size", "too many blocks for one kernel launch"))?;
        let f = self.function(kernel.name)?;
        if faults::launch_fails() {
            return Err(failed(DriverError(
                CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
            )));
        }
        // `cuLaunchKernel` takes a pointer to each parameter's value: the struct's fields, which
        // are the entry's parameters in order, of their sizes (`launch::tests` checks both
        // against the committed PTX). It copies them before returning.
        let base = (&raw const params).cast::<u8>();
        let mut args: Vec<*mut c_void> = P::FIELDS
            .iter()
            .map(|field| base.wrapping_add(field.offset).cast_mut().cast())
            .collect();
        stream.context().bind_to_thread().map_err(failed)?;
        if early {
            let mut attr = CUlaunchAttribute {
                id: CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                pad: [0; 4],
                value: CUlaunchAttributeValue {
                    programmaticStreamSerializationAllowed: 1,
                },
            };
            let config = CUlaunchConfig {
                gridDimX: grid,
                gridDimY: 1,
                gridDimZ: 1,
                blockDimX: kernel.block,
                blockDimY: 1,
                blockDimZ: 1,
                sharedMemBytes: shared as u32,
                hStream: stream.cu_stream(),
                attrs: &mut attr,
                numAttrs: 1,
            };
            // SAFETY: as below, with `config` and `attr` alive until the call returns.
            let code = unsafe {
                cuLaunchKernelEx(
                    &config,
                    f.cu_function(),
                    args.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            };
            return code.result().map_err(failed);
        }
        // SAFETY: `args` points into `params`, alive until the call returns, at the fields the
        // entry takes (its parameter list is `P`'s, generated from the same field list), filled
        // with buffers of the sizes `Reads`/`Writes` checked; `block` is the kernel's own.
        unsafe {
            result::launch_kernel(
                f.cu_function(),
                (grid, 1, 1),
                (kernel.block, 1, 1),
                shared as u32,
                stream.cu_stream(),
                &mut args,
            )
        }
        .map_err(failed)
    }
}

// The backend's contexts track no events (`CudaBackend::new`): the guard `device_ptr` returns
// records nothing, so an address may outlive it; the streams' own order keeps launches ordered.

/// A buffer a kernel reads.
pub(crate) trait Reads<T> {
    /// Its device address, for a kernel that reads its first `len` values.
    fn reads(&self, len: usize) -> DevPtr<T>;
}

/// A buffer a kernel writes.
pub(crate) trait Writes<T> {
    /// Its device address, for a kernel that writes (or reads) its first `len` values.
    fn writes(&mut self, len: usize) -> DevPtr<T>;
}

fn read_address<T>(buf: &impl DevicePtr<T>, len: usize) -> DevPtr<T> {
    debug_assert!(
        buf.len() >= len,
        "{} values where a kernel reads {len}",
        buf.len()
    );
    DevPtr::from_address(buf.device_ptr(buf.stream()).0)
}

fn write_address<T>(buf: &mut impl DevicePtrMut<T>, len: usize) -> DevPtr<T> {
    debug_assert!(
        buf.len() >= len,
        "{} values where a kernel writes {len}",
        buf.len()
    );
    let stream = buf.stream().clone();
    DevPtr::from_address(buf.device_ptr_mut(&stream).0)
}

impl<T> Reads<T> for CudaSlice<T> {
    fn reads(&self, len: usize) -> DevPtr<T> {
        read_address(self, len)
    }
}

impl<T> Reads<T> for CudaView<'_, T> {
    fn reads(&self, len: usize) -> DevPtr<T> {
        read_address(self, len)
    }
}

/// An optional buffer: [`DevPtr::NULL`] when absent.
impl<T, B: Reads<T>> Reads<T> for Option<&B> {
    fn reads(&self, len: usize) -> DevPtr<T> {
        self.map_or(DevPtr::NULL, |buf| buf.reads(len))
    }
}

impl<T> Writes<T> for CudaSlice<T> {
    fn writes(&mut self, len: usize) -> DevPtr<T> {
        write_address(self, len)
    }
}

impl<T> Writes<T> for CudaViewMut<'_, T> {
    fn writes(&mut self, len: usize) -> DevPtr<T> {
        write_address(self, len)
    }
}

/// An optional buffer: [`DevPtr::NULL`] when absent.
impl<T, B: Writes<T>> Writes<T> for Option<&mut B> {
    fn writes(&mut self, len: usize) -> DevPtr<T> {
        self.as_mut().map_or(DevPtr::NULL, |buf| buf.writes(len))
    }
}
