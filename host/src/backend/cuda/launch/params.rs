//! Launches of kernels that take one parameter struct (`kernels_gpu::params`): the call site
//! fills the kernel's own struct by field name, taking each buffer's address with [`Reads`] or
//! [`Writes`] (which check its length in debug builds), and [`CudaBackend::launch`] pushes it
//! as the single argument.

use crate::backend::cuda::{CudaBackend, cuda, faults};
use crate::error::{Error, Result};
use cudarc::driver::sys::CUresult;
use cudarc::driver::{
    CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr, DriverError,
    LaunchConfig, PushKernelArg,
};
use kernels_gpu::launch::Kernel;
use kernels_gpu::params::{DevPtr, KernelParams};

/// A parameter struct as cudarc's kernel argument (the orphan rule keeps cudarc's trait off
/// `kernels_gpu`'s types).
#[repr(transparent)]
struct ByValue<P>(P);

// SAFETY: `KernelParams` are `#[repr(C)]` plain data laid out as the kernel reads them (the
// PTX test in `launch::tests` checks size and alignment).
unsafe impl<P: KernelParams> DeviceRepr for ByValue<P> {}

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
        let failed = |e| cuda(&format!("launching kernel {}", kernel.name), e);
        let grid = u32::try_from(grid.max(1))
            .map_err(|_| Error::invalid("input size", "too many blocks for one kernel launch"))?;
        let cfg = LaunchConfig {
            grid_dim: (grid, 1, 1),
            block_dim: (kernel.block, 1, 1),
            shared_mem_bytes: shared as u32,
        };
        let f = self.function(kernel.name)?;
        if faults::launch_fails() {
            return Err(failed(DriverError(
                CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
            )));
        }
        let params = ByValue(params);
        let mut args = stream.launch_builder(&f);
        args.arg(&params);
        // SAFETY: `P` is the kernel's parameter struct (its type says so, and the tests check its
        // layout against the PTX), filled with buffers of the sizes `Reads`/`Writes` checked.
        unsafe { args.launch(cfg) }.map(|_| ()).map_err(failed)
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
