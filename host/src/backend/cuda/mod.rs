//! The CUDA backend: one context, stream and loaded kernel module (SASS or PTX) per GPU, and the only place that
//! allocates device memory, copies and launches kernels (so every driver error says what it was
//! doing, and out-of-memory becomes [`Error::GpuOutOfMemory`]).

pub mod driver;
pub mod faults;
pub mod image;
mod init;
mod kmeans;
pub(crate) mod knn;
mod launch;
mod minibatch;
pub mod nccl;
mod nvml;
mod shelf;
mod slot;
mod staging;
pub mod start_cost;

use crate::backend::vocab::Metric;
use crate::backend::{Backend, Footprint, Layout, Lloyd, LloydSpec, MiniBatch};
use crate::error::{Error, Result};
use crate::matrix::MatrixView;
use cudarc::driver::sys::{CUdevice_attribute, CUevent_flags, CUfunction_attribute, CUresult};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DeviceRepr,
    DriverError, PinnedHostSlice, ValidAsZeroBits,
};
use shelf::Shelf;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Page-locked host memory mapped into the GPU's address space: a kernel writes a few result
/// values straight into it, and the host reads them after a synchronisation, with no copy
/// command in between (the k-means step's summary).
pub(crate) struct Mapped<T> {
    host: PinnedHostSlice<T>,
    /// The address kernels write to.
    device: u64,
}

impl<T> Mapped<T> {
    /// The device address, as a kernel pointer argument.
    pub(crate) fn device(&self) -> &u64 {
        &self.device
    }

    /// Values it holds.
    pub(crate) fn len(&self) -> usize {
        self.host.len()
    }

    /// Sets its first `len` values to `value` from the host, before queuing kernels that write
    /// them (none may be running).
    pub(crate) fn fill(&mut self, len: usize, value: T) -> Result<()>
    where
        T: Copy + ValidAsZeroBits,
    {
        let slice =
            (self.host.as_mut_slice()).map_err(|e| cuda("writing mapped host memory", e))?;
        slice[..len].fill(value);
        Ok(())
    }
}

/// Most bytes of page-locked memory that downloads stage through.
const STAGING_BYTES: usize = 64 << 20;

/// Smallest part of a download that is copied beside the host's taking of the part before.
const MIN_PIECE_BYTES: usize = 1 << 20;

/// How a download of `len` values of `value_bytes` each goes through the staging buffer: values
/// a part, bytes a half of the buffer, and bytes of the buffer it needs. Four parts or more, of
/// 1 MiB at least (smaller copies cost more than they overlap).
fn download_layout(len: usize, value_bytes: usize) -> (usize, usize, usize) {
    let piece_bytes = (len * value_bytes / 4).clamp(MIN_PIECE_BYTES, STAGING_BYTES / 2);
    let per_piece = (piece_bytes / value_bytes).clamp(1, len);
    let slot_bytes = per_piece * value_bytes;
    (
        per_piece,
        slot_bytes,
        slot_bytes * len.div_ceil(per_piece).min(2),
    )
}

/// The download staging buffer and, for each of its halves, the end of the last copy into it.
struct DownloadStaging {
    buffer: PinnedHostSlice<u8>,
    copied: [CudaEvent; 2],
}

/// A CUDA GPU with the kernels loaded.
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    module: Arc<CudaModule>,
    functions: Mutex<HashMap<&'static str, CudaFunction>>,
    /// Page-locked memory that downloads land in before they are copied out (made on first use,
    /// grown up to `STAGING_BYTES`): a copy straight into pageable memory runs at ~1 GB/s
    /// (8 MB of kNN keys took 8 ms).
    staging: Shelf<DownloadStaging>,
    /// Page-locked memory that rows are uploaded through (made on first use): pairs of buffers
    /// for the compute stream's uploads and others for the copy stream's, so that a query
    /// upload never waits behind a long upload beside it.
    upload_staging: Shelf<staging::UploadStaging>,
    copy_staging: Shelf<staging::UploadStaging>,
    /// A non-blocking stream for uploads that overlap the compute stream's work (made on first
    /// use); work across the two is ordered by explicit events.
    copies: OnceLock<Arc<CudaStream>>,
    info: GpuInfo,
}

/// What the driver says about a GPU.
#[derive(Clone, Debug, serde::Serialize)]
pub struct GpuInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub total_memory: usize,
    pub multiprocessors: usize,
    /// Dynamic shared memory one block may have when its kernel opts in, in bytes.
    pub max_shared_per_block: usize,
    pub driver_version: i32,
    /// The kernel image loaded: SASS for this architecture, or PTX the driver JIT-compiled.
    pub kernels: image::KernelImage,
}

/// CUDA devices this process sees (`CUDA_VISIBLE_DEVICES` applies); 0 without a usable driver.
pub(crate) fn device_count() -> usize {
    if driver::check().is_err() {
        return 0;
    }
    CudaContext::device_count().map_or(0, |count| count.max(0) as usize)
}

/// GPU `ordinal`'s facts without starting the driver where that can be done: the backend's own
/// description once it is up, else NVML's answer (~20 ms) where its numbering is certainly
/// CUDA's, else the driver's (`cuInit`, ~0.2 s, but no context, which would cost ~0.1 s more to
/// make and as much to tear down at exit); with the kernel image it would load
/// ([`image::expected`]).
pub(crate) fn gpu_info(ordinal: usize) -> Result<GpuInfo> {
    if let Some(gpu) = CudaBackend::started().get(&ordinal) {
        return Ok(gpu.info.clone());
    }
    use cudarc::driver::result::device;
    let driver_version = driver::check()?;
    if let Some(info) = nvml_info(ordinal, driver_version) {
        return Ok(info);
    }
    let count = CudaContext::device_count().map_err(no_device)?;
    if ordinal >= count.max(0) as usize {
        return Err(Error::NoGpu(format!(
            "GPU {ordinal} was asked for but {count} CUDA device(s) are present"
        )));
    }
    let dev = device::get(ordinal as i32).map_err(|e| cuda("querying the device", e))?;
    // SAFETY: `dev` is a device the driver just returned; each query writes one int.
    let attr =
        |a| unsafe { device::get_attribute(dev, a) }.map_err(|e| cuda("querying the device", e));
    let major = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    Ok(GpuInfo {
        ordinal,
        name: device::get_name(dev).map_err(|e| cuda("querying the device name", e))?,
        compute_capability: (major, minor),
        // SAFETY: as above.
        total_memory: unsafe { device::total_mem(dev) }.map_err(|e| cuda("querying memory", e))?,
        multiprocessors: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?
            as usize,
        max_shared_per_block: attr(
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )? as usize,
        driver_version,
        kernels: image::expected(major, minor),
    })
}

/// NVML's GPUs and, for each CUDA ordinal of this process, its index among them, where that
/// mapping is certain ([`nvml::cuda_to_nvml`]).
fn nvml_in_cuda_order() -> Option<(&'static [nvml::NvmlGpu], Vec<usize>)> {
    let gpus = nvml::gpus()?;
    let visible = std::env::var(driver::VISIBLE_VAR).ok();
    let pci_order = std::env::var("CUDA_DEVICE_ORDER").is_ok_and(|o| o == "PCI_BUS_ID");
    let order = nvml::cuda_to_nvml(gpus, visible.as_deref(), pci_order)?;
    Some((gpus, order))
}

/// GPU `ordinal`'s facts from NVML, when it maps CUDA's numbering for certain and knows them all.
fn nvml_info(ordinal: usize, driver_version: i32) -> Option<GpuInfo> {
    let (gpus, order) = nvml_in_cuda_order()?;
    let gpu = &gpus[*order.get(ordinal)?];
    let (major, minor) = gpu.compute_capability;
    Some(GpuInfo {
        ordinal,
        name: gpu.name.clone(),
        compute_capability: (major, minor),
        total_memory: gpu.total_memory,
        multiprocessors: nvml::multiprocessors(gpu.cores?, (major, minor))?,
        max_shared_per_block: nvml::max_shared_per_block((major, minor))?,
        driver_version,
        kernels: image::expected(major, minor),
    })
}

/// The GPUs the driver sees or will see in this process: its own count once it has started,
/// else NVML's where its numbering maps for certain, else the driver's (which starts it).
pub(crate) fn visible_gpu_count() -> usize {
    if !CudaBackend::started().is_empty() || driver::check().is_err() {
        return device_count();
    }
    nvml_in_cuda_order().map_or_else(device_count, |(_, order)| order.len())
}

/// `cuda:0 (NVIDIA H100 80GB HBM3; the driver started 1 of 4 GPUs)`.
pub(crate) fn describe_gpu(info: &GpuInfo) -> String {
    let started = visible_gpu_count();
    let of = driver::host_gpus().filter(|&host| host > started);
    let of = of.map_or(String::new(), |host| format!(" of {host}"));
    let gpus = if started == 1 { "GPU" } else { "GPUs" };
    format!(
        "cuda:{} ({}; the driver started {started}{of} {gpus})",
        info.ordinal, info.name
    )
}

impl CudaBackend {
    /// The backends started in this process, by ordinal.
    fn started() -> std::sync::MutexGuard<'static, HashMap<usize, Arc<CudaBackend>>> {
        static CACHE: OnceLock<Mutex<HashMap<usize, Arc<CudaBackend>>>> = OnceLock::new();
        CACHE
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Whether GPU `ordinal`'s backend is already up in this process (its driver start paid).
    pub fn is_started(ordinal: usize) -> bool {
        Self::started().contains_key(&ordinal)
    }

    /// The backend for GPU `ordinal`, made on first use and shared afterwards.
    pub fn shared(ordinal: usize) -> Result<Arc<CudaBackend>> {
        let mut cache = Self::started();
        if let Some(gpu) = cache.get(&ordinal) {
            return Ok(gpu.clone());
        }
        // `driver::check` keeps cudarc's missing-symbol panics from happening; this catches any
        // other panic of the driver layer during start-up, so that it too is an error.
        let gpu =
            std::panic::catch_unwind(|| CudaBackend::new(ordinal)).unwrap_or_else(|panic| {
                let what = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("unknown failure");
                Err(Error::UnsupportedDriver(format!(
                    "starting the CUDA driver failed: {what}"
                )))
            })?;
        let gpu = Arc::new(gpu);
        if cache.is_empty() {
            start_cost::first_backend_ready(device_count());
        }
        cache.insert(ordinal, gpu.clone());
        Ok(gpu)
    }

    fn new(ordinal: usize) -> Result<Self> {
        let driver_version = driver::check()?;
        let count = CudaContext::device_count().map_err(no_device)?;
        if ordinal >= count.max(0) as usize {
            return Err(Error::NoGpu(format!(
                "GPU {ordinal} was asked for but {count} CUDA device(s) are present"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| cuda("creating the CUDA context", e))?;
        let attr = |a| ctx.attribute(a).map_err(|e| cuda("querying the device", e));
        let major = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let (module, kernels) = image::load(&ctx, major, minor)?;
        let info = GpuInfo {
            ordinal,
            name: ctx
                .name()
                .map_err(|e| cuda("querying the device name", e))?,
            compute_capability: (major, minor),
            total_memory: ctx.total_mem().map_err(|e| cuda("querying memory", e))?,
            multiprocessors: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?
                as usize,
            max_shared_per_block: attr(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )? as usize,
            driver_version,
            kernels,
        };
        keep_freed_memory(&ctx)?;
        // One stream only: cudarc's per-buffer events (two made per allocation) order work
        // across streams, which never happens here.
        // SAFETY: called before any buffer of this context exists; the backend never creates a
        // second stream.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.default_stream();
        Ok(CudaBackend {
            ctx,
            stream,
            module,
            functions: Mutex::default(),
            staging: Shelf::default(),
            upload_staging: Shelf::default(),
            copy_staging: Shelf::default(),
            copies: OnceLock::new(),
            info,
        })
    }

    /// The stream every search and step runs on.
    pub(crate) fn compute_stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The copy stream (see `copies`).
    pub(crate) fn copy_stream(&self) -> Result<&Arc<CudaStream>> {
        if let Some(copies) = self.copies.get() {
            return Ok(copies);
        }
        let made = (self.ctx.new_stream()).map_err(|e| cuda("creating a copy stream", e))?;
        Ok(self.copies.get_or_init(|| made))
    }

    /// What the driver reports about this GPU.
    pub fn info(&self) -> &GpuInfo {
        &self.info
    }

    /// Free and total device memory in bytes; free includes what the allocator's pool holds for
    /// reuse (freed buffers it keeps, see `keep_freed_memory`).
    pub fn memory(&self) -> Result<(usize, usize)> {
        let (free, total) = self
            .ctx
            .mem_get_info()
            .map_err(|e| cuda("querying free memory", e))?;
        Ok(((free + self.pool_unused()).min(total), total))
    }

    /// Bytes the default memory pool has reserved but no live buffer uses.
    fn pool_unused(&self) -> usize {
        use cudarc::driver::sys::CUmemPool_attribute as A;
        let Some(pool) = default_pool(&self.ctx) else {
            return 0;
        };
        let attr = |a: A| pool_attribute(pool, a).unwrap_or(0);
        let reserved = attr(A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
        let used = attr(A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
        reserved.saturating_sub(used) as usize
    }

    /// The kernel `name` of the loaded module.
    pub(crate) fn function(&self, name: &'static str) -> Result<CudaFunction> {
        let mut functions = self.functions.lock().unwrap();
        if let Some(f) = functions.get(name) {
            return Ok(f.clone());
        }
        let f = self
            .module
            .load_function(name)
            .map_err(|e| cuda(&format!("loading kernel {name}"), e))?;
        // Kernels may use all the shared memory a block can have, not only the default 48 KiB.
        let max_shared = i32::try_from(self.info.max_shared_per_block).unwrap_or(i32::MAX);
        f.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            max_shared,
        )
        .map_err(|e| cuda(&format!("configuring kernel {name}"), e))?;
        functions.insert(name, f.clone());
        Ok(f)
    }

    /// Whether the loaded image has kernel `name` (sm_90a's are only in the sm_90 cubin).
    pub(crate) fn has_function(&self, name: &'static str) -> bool {
        self.function(name).is_ok()
    }

    /// `len` zeroed elements of device memory; `what` names the buffer in errors.
    pub(crate) fn zeros<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        len: usize,
        what: &str,
    ) -> Result<CudaSlice<T>> {
        self.zeros_on(&self.stream, len, what)
    }

    /// [`CudaBackend::zeros`], ordered on `stream` (freed on it too).
    pub(crate) fn zeros_on<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        stream: &Arc<CudaStream>,
        len: usize,
        what: &str,
    ) -> Result<CudaSlice<T>> {
        injected_oom(what, len * size_of::<T>())?;
        stream
            .alloc_zeros::<T>(len.max(1))
            .map_err(|e| alloc_error(what, len * size_of::<T>(), e))
    }

    /// Copies `host` to new device memory.
    pub(crate) fn upload<T: DeviceRepr>(&self, host: &[T], what: &str) -> Result<CudaSlice<T>> {
        if host.is_empty() {
            return self.zeros_raw(what);
        }
        injected_oom(what, std::mem::size_of_val(host))?;
        self.stream
            .clone_htod(host)
            .map_err(|e| alloc_error(what, std::mem::size_of_val(host), e))
    }

    fn zeros_raw<T: DeviceRepr>(&self, what: &str) -> Result<CudaSlice<T>> {
        // SAFETY: a one-element buffer that is never read before it is written.
        unsafe { self.uninit(1, what) }
    }

    /// `len` elements of device memory left as they are (no clearing pass).
    ///
    /// # Safety
    /// Kernels write every element before anything reads it.
    pub(crate) unsafe fn uninit<T: DeviceRepr>(
        &self,
        len: usize,
        what: &str,
    ) -> Result<CudaSlice<T>> {
        unsafe { self.uninit_on(&self.stream, len, what) }
    }

    /// [`CudaBackend::uninit`], ordered on `stream` (freed on it too).
    ///
    /// # Safety
    /// Kernels write every element before anything reads it.
    pub(crate) unsafe fn uninit_on<T: DeviceRepr>(
        &self,
        stream: &Arc<CudaStream>,
        len: usize,
        what: &str,
    ) -> Result<CudaSlice<T>> {
        injected_oom(what, len * size_of::<T>())?;
        unsafe { stream.alloc::<T>(len.max(1)) }
            .map_err(|e| alloc_error(what, len * size_of::<T>(), e))
    }

    /// Copies `host` into the start of `dev`.
    pub(crate) fn write<T: DeviceRepr>(
        &self,
        host: &[T],
        dev: &mut CudaSlice<T>,
        what: &str,
    ) -> Result<()> {
        self.stream
            .memcpy_htod(host, &mut dev.slice_mut(..host.len()))
            .map_err(|e| cuda(&format!("copying {what} to the GPU"), e))
    }

    /// Copies `host` into `dev[at..at + host.len()]`.
    pub(crate) fn write_at<T: DeviceRepr>(
        &self,
        host: &[T],
        dev: &mut CudaSlice<T>,
        at: usize,
        what: &str,
    ) -> Result<()> {
        self.stream
            .memcpy_htod(host, &mut dev.slice_mut(at..at + host.len()))
            .map_err(|e| cuda(&format!("copying {what} to the GPU"), e))
    }

    /// Zeroes `dev`.
    pub(crate) fn clear<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        dev: &mut CudaSlice<T>,
        what: &str,
    ) -> Result<()> {
        self.stream
            .memset_zeros(dev)
            .map_err(|e| cuda(&format!("clearing {what}"), e))
    }

    /// Copies the first `len` elements of `dev` back to the host (waits for queued work).
    pub(crate) fn download<T: DeviceRepr + ValidAsZeroBits + Clone>(
        &self,
        dev: &CudaSlice<T>,
        len: usize,
        what: &str,
    ) -> Result<Vec<T>> {
        let mut host = Vec::with_capacity(len);
        self.download_each(dev, len, what, |part| host.extend_from_slice(part))?;
        Ok(host)
    }

    /// Copies the first `len` elements of `dev` into `host` (made `len` long), through the
    /// page-locked staging buffer and on the rayon threads (waits for queued work). Memory that
    /// `host` already holds is reused: a streamed batch parks its per-row state into the same
    /// pages at every turn, instead of faulting in fresh ones.
    pub(crate) fn download_into<T: DeviceRepr + ValidAsZeroBits + Copy + Default + Send + Sync>(
        &self,
        dev: &CudaSlice<T>,
        len: usize,
        host: &mut Vec<T>,
        what: &str,
    ) -> Result<()> {
        if host.len() != len {
            // Zeroed pages, mapped as the threads of the fill first touch them.
            *host = vec![T::default(); len];
        }
        let mut at = 0;
        self.download_each(dev, len, what, |part| {
            staging::fill(&mut host[at..at + part.len()], part);
            at += part.len();
        })
    }

    /// Copies `dev[range]` back to the host (waits for queued work).
    pub(crate) fn download_range<T: DeviceRepr>(
        &self,
        dev: &CudaSlice<T>,
        range: std::ops::Range<usize>,
        what: &str,
    ) -> Result<Vec<T>> {
        self.stream
            .clone_dtoh(&dev.slice(range))
            .map_err(|e| cuda(&format!("copying {what} from the GPU"), e))
    }

    /// `len` zeroed values of mapped page-locked host memory; `what` names it in errors.
    pub(crate) fn mapped<T: DeviceRepr + ValidAsZeroBits + Copy + Default>(
        &self,
        len: usize,
        what: &str,
    ) -> Result<Mapped<T>> {
        let err = |e| cuda(&format!("allocating mapped host memory for {what}"), e);
        injected_oom(what, len * size_of::<T>())?;
        let flags = cudarc::driver::sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: zeroed before any use.
        let mut host =
            unsafe { self.ctx.alloc_pinned_with_flags::<T>(len.max(1), flags) }.map_err(err)?;
        host.as_mut_slice().map_err(err)?.fill(T::default());
        let mut device = 0;
        let p = host.as_mut_ptr().map_err(err)?.cast();
        // SAFETY: `p` is a live DEVICEMAP allocation; the driver writes one address.
        let rc = unsafe { cudarc::driver::sys::cuMemHostGetDevicePointer_v2(&mut device, p, 0) };
        if rc != CUresult::CUDA_SUCCESS {
            return Err(err(DriverError(rc)));
        }
        Ok(Mapped { host, device })
    }

    /// Waits for the queued work, then reads `mapped` (which kernels have written).
    pub(crate) fn read_mapped<T: Copy + ValidAsZeroBits>(
        &self,
        mapped: &Mapped<T>,
        what: &str,
    ) -> Result<Vec<T>> {
        self.stream
            .synchronize()
            .map_err(|e| cuda(&format!("waiting for {what}"), e))?;
        let err = |e| cuda(&format!("reading {what}"), e);
        let p = mapped.host.as_ptr().map_err(err)?;
        // SAFETY: `len` values of live memory; volatile, as the GPU wrote them behind the
        // compiler's back.
        Ok((0..mapped.host.len())
            .map(|i| unsafe { p.add(i).read_volatile() })
            .collect())
    }

    /// Copies the first `len` elements of `dev` into the page-locked staging buffer (waits for
    /// queued work) and hands each part to `each` in order. The buffer's two halves alternate:
    /// the next part is copied while `each` takes this one.
    pub(crate) fn download_each<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        dev: &CudaSlice<T>,
        len: usize,
        what: &str,
        mut each: impl FnMut(&[T]),
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let err = |e| cuda(&format!("copying {what} from the GPU"), e);
        let (per_piece, slot_bytes, bytes) = download_layout(len, size_of::<T>());
        let mut staging = self
            .staging
            .lend(|old| self.grown_download_staging(old, bytes))?;
        let base = staging.buffer.as_mut_ptr().map_err(err)?;
        // SAFETY (both closures): each half holds `per_piece` values of T, each zero bits (valid
        // for `ValidAsZeroBits`) or a T copied from the GPU; a half is written by the copy of
        // piece p and read by `each` only after `copied[p % 2]` says that copy is done, and
        // refilled only after `each` is done with it; nothing else uses the buffer while it is
        // lent.
        let half = |p: usize| {
            let count = per_piece.min(len - p * per_piece);
            let ptr = unsafe { base.add((p % 2) * slot_bytes) }.cast::<T>();
            unsafe { std::slice::from_raw_parts_mut(ptr, count) }
        };
        let copied = &staging.copied;
        let queue = |p: usize| -> Result<()> {
            let dst = half(p);
            let view = dev.slice(p * per_piece..p * per_piece + dst.len());
            let (src, _read) = view.device_ptr(&self.stream);
            // SAFETY: `dst` and `src` both hold `dst.len()` values.
            unsafe { cudarc::driver::result::memcpy_dtoh_async(dst, src, self.stream.cu_stream()) }
                .map_err(err)?;
            copied[p % 2].record(&self.stream).map_err(err)
        };
        let pieces = len.div_ceil(per_piece);
        queue(0)?;
        for p in 0..pieces {
            if p + 1 < pieces {
                queue(p + 1)?;
            }
            copied[p % 2].synchronize().map_err(err)?;
            each(half(p));
        }
        Ok(())
    }

    /// Makes the page-locked download buffer large enough for a download of `len` values of T
    /// ahead of it (allocating page-locked memory takes milliseconds).
    pub(crate) fn reserve_download<T>(&self, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let (_, _, bytes) = download_layout(len, size_of::<T>());
        self.staging
            .lend(|old| self.grown_download_staging(old, bytes))
            .map(drop)
    }

    /// `staging` when it holds at least `bytes`, else a new buffer that does.
    fn grown_download_staging(
        &self,
        staging: Option<DownloadStaging>,
        bytes: usize,
    ) -> Result<DownloadStaging> {
        if let Some(s) = staging.filter(|s| s.buffer.num_bytes() >= bytes) {
            return Ok(s);
        }
        // The smaller buffer is freed first (dropped above); sizes grow by powers of two up to
        // the cap.
        let size = bytes.next_power_of_two().min(STAGING_BYTES).max(bytes);
        injected_oom("the download staging buffer", size)?;
        let pin_err = |e| cuda("allocating page-locked host memory", e);
        // SAFETY: flags 0 (cached, fast to read from the CPU); zeroed before any use.
        let mut buffer =
            unsafe { self.ctx.alloc_pinned_with_flags::<u8>(size, 0) }.map_err(pin_err)?;
        buffer.as_mut_slice().map_err(pin_err)?.fill(0);
        let event = || self.ctx.new_event(None).map_err(pin_err);
        Ok(DownloadStaging {
            buffer,
            copied: [event()?, event()?],
        })
    }

    /// Copies `len` elements from `src[src_at..]` to `dst[dst_at..]` on the device.
    pub(crate) fn copy_within<T: DeviceRepr>(
        &self,
        src: &CudaSlice<T>,
        src_at: usize,
        dst: &mut CudaSlice<T>,
        dst_at: usize,
        len: usize,
        what: &str,
    ) -> Result<()> {
        self.stream
            .memcpy_dtod(
                &src.slice(src_at..src_at + len),
                &mut dst.slice_mut(dst_at..dst_at + len),
            )
            .map_err(|e| cuda(&format!("copying {what} on the GPU"), e))
    }

    /// Makes this GPU's context current on the calling thread.
    pub(crate) fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| cuda("making the GPU's context current", e))
    }

    /// The stream every queued call of this GPU runs on.
    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Makes this GPU's context current on the calling thread before a value frees its device
    /// buffers. cudarc frees a buffer (`cuMemFreeAsync`) without making its context current, and
    /// on a thread where it is not (a Dask worker dropping a shard on its event loop's thread, a
    /// GPU set's buffers dropped on the caller's thread) the free fails, leaks, and the context's
    /// next call reports `CUDA_ERROR_INVALID_CONTEXT`.
    pub(crate) fn bind_for_drop(&self) {
        // SAFETY: the context outlives `self`; making it current has no other effect.
        let bound = unsafe { cudarc::driver::result::ctx::set_current(self.ctx.cu_ctx()) };
        self.ctx.record_err(bound);
    }

    /// Waits for the work queued on the compute stream, for a value about to free buffers that
    /// it may still read; an error is kept for the context's next call.
    pub(crate) fn finish_queued_for_drop(&self) {
        self.ctx.record_err(self.stream.synchronize());
    }

    /// Shared memory one block may use, in bytes.
    pub(crate) fn max_shared_per_block(&self) -> usize {
        self.info.max_shared_per_block
    }

    /// Number of multiprocessors (sizes the grids of the reduction kernels).
    pub(crate) fn multiprocessors(&self) -> usize {
        self.info.multiprocessors
    }

    /// Whether kernels that wait for the one before them may be launched early
    /// ([`CudaBackend::launch_with`]): only sm_90's image (built from sm_90a) has the waits.
    pub(crate) fn early_launches(&self) -> bool {
        self.info.kernels.arch == "sm_90"
    }

    /// A timing event recorded after the work queued so far on the compute stream.
    pub(crate) fn mark(&self) -> Result<CudaEvent> {
        let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
        (self.stream.record_event(timing)).map_err(|e| cuda("recording an event", e))
    }
}

impl Backend for CudaBackend {
    fn describe(&self) -> String {
        describe_gpu(&self.info)
    }

    fn lloyd_at<'a>(
        &'a self,
        data: &'a MatrixView<'a>,
        layout: Layout,
        spec: &LloydSpec<'a>,
    ) -> Result<Box<dyn Lloyd + Send + 'a>> {
        Ok(Box::new(kmeans::CudaLloyd::new(self, data, layout, spec)?))
    }

    fn minibatch<'a>(
        &'a self,
        data: &'a MatrixView<'a>,
        k: usize,
        metric: Metric,
        scales: &[i32],
    ) -> Result<Box<dyn MiniBatch + 'a>> {
        Ok(Box::new(minibatch::CudaMiniBatch::new(
            self, data, k, metric, scales,
        )?))
    }

    fn time_ms(&self, work: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
        let start = self.mark()?;
        work()?;
        let end = self.mark()?;
        let ms = start
            .elapsed_ms(&end)
            .map_err(|e| cuda("timing with events", e))?;
        Ok(ms as f64)
    }

    fn device_memory_free(&self) -> Result<Option<usize>> {
        Ok(Some(self.memory()?.0))
    }

    fn lloyd_footprint(&self, n: usize, d: usize, k: usize, seeds_at_once: usize) -> Footprint {
        kmeans::footprint(self, n, d, k, seeds_at_once)
    }

    /// The stream-ordered pool's high-water mark of memory in use (every buffer of the library
    /// comes from it where the device has one).
    fn device_memory_peak(&self, reset: bool) -> Result<Option<usize>> {
        use cudarc::driver::sys::{
            CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH as HIGH, cuMemPoolSetAttribute,
        };
        let Some(pool) = default_pool(&self.ctx) else {
            return Ok(None);
        };
        self.stream
            .synchronize()
            .map_err(|e| cuda("waiting for the GPU", e))?;
        let peak =
            pool_attribute(pool, HIGH).map_err(|e| cuda("reading the memory pool's peak", e))?;
        if reset {
            let mut zero = 0u64;
            // SAFETY: the attribute is one u64; the only value it can be set to is 0.
            let rc = unsafe { cuMemPoolSetAttribute(pool, HIGH, (&mut zero as *mut u64).cast()) };
            if rc != CUresult::CUDA_SUCCESS {
                return Err(cuda("resetting the memory pool's peak", DriverError(rc)));
            }
        }
        Ok(Some(peak as usize))
    }

    fn device_memory_in_use(&self) -> Result<Option<usize>> {
        // Freed buffers stay in the stream-ordered allocator's pool; hand them back first so
        // that the figure is what live buffers hold.
        self.stream
            .synchronize()
            .map_err(|e| cuda("waiting for the GPU", e))?;
        if let Some(pool) = default_pool(&self.ctx) {
            // SAFETY: the pool handle is only passed back to the driver.
            let rc = unsafe { cudarc::driver::sys::cuMemPoolTrimTo(pool, 0) };
            if rc != CUresult::CUDA_SUCCESS {
                return Err(cuda("trimming the memory pool", DriverError(rc)));
            }
        }
        let (free, total) = self.memory()?;
        Ok(Some(total - free))
    }
}

/// Lets the stream-ordered allocator keep freed memory instead of returning it to the driver at
/// every synchronisation (its default): without this every search or fit maps its buffers anew,
/// which costs milliseconds for tens of megabytes.
fn keep_freed_memory(ctx: &CudaContext) -> Result<()> {
    use cudarc::driver::sys::{CUmemPool_attribute, cuMemPoolSetAttribute};
    // No stream-ordered allocator on this device: cudarc allocates synchronously.
    let Some(pool) = default_pool(ctx) else {
        return Ok(());
    };
    let mut threshold = u64::MAX;
    // SAFETY: the pool handle and the u64 attribute value are only passed to the driver.
    unsafe {
        let rc = cuMemPoolSetAttribute(
            pool,
            CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        );
        if rc != CUresult::CUDA_SUCCESS {
            return Err(cuda("configuring the memory pool", DriverError(rc)));
        }
    }
    Ok(())
}

/// A u64 attribute of a memory pool (the sizes and marks of `CUmemPool_attribute`).
fn pool_attribute(
    pool: cudarc::driver::sys::CUmemoryPool,
    attribute: cudarc::driver::sys::CUmemPool_attribute,
) -> std::result::Result<u64, DriverError> {
    let mut v = 0u64;
    // SAFETY: writes one u64 for these attributes; the pool handle is only passed to the driver.
    let rc = unsafe {
        cudarc::driver::sys::cuMemPoolGetAttribute(pool, attribute, (&mut v as *mut u64).cast())
    };
    if rc == CUresult::CUDA_SUCCESS {
        Ok(v)
    } else {
        Err(DriverError(rc))
    }
}

/// The device's stream-ordered allocator pool, if it has one.
fn default_pool(ctx: &CudaContext) -> Option<cudarc::driver::sys::CUmemoryPool> {
    let mut pool = std::ptr::null_mut();
    // SAFETY: a device-level query that writes one handle, which is only passed back to the
    // driver.
    let rc = unsafe { cudarc::driver::sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) };
    (rc == CUresult::CUDA_SUCCESS).then_some(pool)
}

/// A u32 kernel argument, or an error naming the size that does not fit.
pub(crate) fn arg_u32(value: usize, what: &'static str) -> Result<u32> {
    u32::try_from(value).map_err(|_| {
        Error::invalid(
            what,
            format!("{value} exceeds the GPU kernels' limit of 2^32 − 1"),
        )
    })
}

/// Why the driver, which loaded, offers no device.
fn no_device(e: DriverError) -> Error {
    if e.0 == CUresult::CUDA_ERROR_NO_DEVICE {
        let visible = std::env::var("CUDA_VISIBLE_DEVICES")
            .map(|v| format!(" (CUDA_VISIBLE_DEVICES is '{v}')"))
            .unwrap_or_default();
        Error::NoGpu(format!("the CUDA driver sees no device{visible}"))
    } else {
        Error::NoGpu(format!("the CUDA driver did not start: {}", describe(e)))
    }
}

pub(crate) fn cuda(context: &str, e: DriverError) -> Error {
    Error::Cuda {
        context: context.to_string(),
        message: describe(e),
    }
}

/// The error's name and, when the driver library is loaded, its description (the description
/// comes from the driver, which must not be asked when it is absent).
fn describe(e: DriverError) -> String {
    // SAFETY: only probes whether the driver library can be loaded.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        e.to_string()
    } else {
        format!("{:?}", e.0)
    }
}

/// The out-of-memory error of an allocation that a test armed to fail (see [`faults`]).
fn injected_oom(what: &str, bytes: usize) -> Result<()> {
    if faults::alloc_fails() {
        return Err(alloc_error(
            what,
            bytes,
            DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY),
        ));
    }
    Ok(())
}

fn alloc_error(what: &str, bytes: usize, e: DriverError) -> Error {
    if e.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
        Error::GpuOutOfMemory {
            context: format!("allocating {what}"),
            bytes,
        }
    } else {
        cuda(&format!("allocating {what} ({bytes} bytes)"), e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_memory_is_its_own_error() {
        let err = alloc_error(
            "the data",
            1 << 40,
            DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY),
        );
        assert!(matches!(err, Error::GpuOutOfMemory { bytes, .. } if bytes == 1 << 40));
        assert_eq!(
            err.to_string(),
            "out of GPU memory while allocating the data (1099511627776 bytes requested)"
        );
        let other = alloc_error("labels", 8, DriverError(CUresult::CUDA_ERROR_INVALID_VALUE));
        assert!(matches!(other, Error::Cuda { .. }));
        assert!(other.to_string().contains("allocating labels"));
    }
}
