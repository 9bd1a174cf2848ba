//! The tensor model behind `AtenTensorHandle`: dtype (c10 `ScalarType`
//! codes), device, sizes, strides, storage offset, and a shared storage that
//! is either owned (freed when the last view goes) or borrowed.
//!
//! Every view is validated to lie inside its storage when it is made, so
//! code holding a [`Tensor`] may address any of its elements. Memory someone
//! else owns enters only through the `unsafe` [`Tensor::borrowed`].

use crate::dtype::{self, Code};
use crate::error::{invalid, Error, Result};
use crate::stats::{self, Event};
use std::alloc::Layout;
use std::ffi::c_void;
use std::sync::Arc;

/// Largest tensor rank this backend accepts anywhere (shims, C API, Rust API).
pub const MAX_RANK: usize = 16;

/// Alignment of host allocations made for tensors (a cache line; also what
/// ExecuTorch's planned buffers guarantee).
const HOST_ALIGN: usize = 64;

/// c10 `DeviceType` codes used by the shim ABI.
pub(crate) mod device_type {
    pub const CPU: i32 = 0;
    pub const CUDA: i32 = 1;
    pub const XPU: i32 = 12;
    pub const MPS: i32 = 13;
    pub const META: i32 = 14;
    pub const PRIVATEUSE1: i32 = 20;
}

/// Where a tensor's memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    /// Host memory.
    Cpu,
    /// Memory of the CUDA device with this ordinal.
    Cuda(i32),
}

impl Device {
    /// From c10 device type and index codes (index -1 on CUDA: `current()`, the current device).
    pub(crate) fn from_codes(
        device_type: i32,
        index: i32,
        current: impl FnOnce() -> i32,
    ) -> Result<Device> {
        match device_type {
            device_type::CPU => Ok(Device::Cpu),
            device_type::CUDA if index >= 0 => Ok(Device::Cuda(index)),
            device_type::CUDA => Ok(Device::Cuda(current())),
            other => invalid(format!(
                "device type {other} is not supported (only CPU 0 and CUDA 1)"
            )),
        }
    }
    pub(crate) fn type_code(self) -> i32 {
        match self {
            Device::Cpu => device_type::CPU,
            Device::Cuda(_) => device_type::CUDA,
        }
    }
    pub(crate) fn index(self) -> i32 {
        match self {
            Device::Cpu => -1,
            Device::Cuda(i) => i,
        }
    }
}

/// Host memory owned by a storage (zeroed, [`HOST_ALIGN`]-aligned).
#[derive(Debug)]
pub(crate) struct HostAlloc {
    ptr: *mut u8,
    layout: Layout,
    owner: Option<Arc<stats::Counters>>,
}

// SAFETY: the allocation is plain bytes owned by this value.
unsafe impl Send for HostAlloc {}
// SAFETY: no interior mutability through &HostAlloc.
unsafe impl Sync for HostAlloc {}

impl HostAlloc {
    pub(crate) fn new(nbytes: usize) -> Result<HostAlloc> {
        let layout = Layout::from_size_align(nbytes.max(1), HOST_ALIGN)
            .map_err(|_| Error::invalid_argument(format!("host allocation of {nbytes} bytes")))?;
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::out_of_memory(format!(
                "host allocation of {nbytes} bytes failed"
            )));
        }
        let owner = stats::current();
        stats::record_for(owner.as_ref(), Event::HostAlloc(layout.size() as u64));
        Ok(HostAlloc { ptr, layout, owner })
    }

    /// The first byte.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for HostAlloc {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
        stats::record_for(
            self.owner.as_ref(),
            Event::HostFree(self.layout.size() as u64),
        );
    }
}

/// Device memory a storage owns, as the CUDA layer allocated it (`cuda::memory::DeviceAlloc`);
/// the tensor model only needs its address.
pub(crate) trait DeviceBuffer: std::fmt::Debug + Send + Sync {
    /// The device address of the first byte.
    fn device_ptr(&self) -> u64;
    /// The buffer was made during a graph capture whose graph is kept: its address stays
    /// valid across launches (see `cuda::memory::AllocKind::GraphNode`).
    fn adopt_by_graph(&self) {}
}

/// The memory behind a storage.
#[derive(Debug)]
pub(crate) enum Memory {
    /// Host memory owned by the storage.
    Host(HostAlloc),
    /// Device memory owned by the storage.
    Device(Box<dyn DeviceBuffer>),
    /// Memory someone else owns (caller buffers, constants inside the `.so`,
    /// a CUDA graph's own allocations); see [`Tensor::borrowed`].
    Borrowed(*mut c_void),
    /// No memory (zero bytes).
    Empty,
}

/// A storage shared by every view made from it.
#[derive(Debug)]
pub(crate) struct Storage {
    pub(crate) memory: Memory,
    pub(crate) nbytes: usize,
    pub(crate) device: Device,
}

// SAFETY: the raw pointers are addresses of memory whose lifetime the storage
// (or, for borrowed memory, the contract of `Tensor::borrowed`) manages; the
// storage itself is never mutated.
unsafe impl Send for Storage {}
// SAFETY: as above.
unsafe impl Sync for Storage {}

impl Storage {
    pub(crate) fn base_ptr(&self) -> *mut c_void {
        match &self.memory {
            Memory::Host(h) => h.ptr.cast(),
            Memory::Device(d) => d.device_ptr() as *mut c_void,
            Memory::Borrowed(p) => *p,
            Memory::Empty => std::ptr::null_mut(),
        }
    }
}

/// A strided view of a storage.
#[derive(Debug, Clone)]
pub(crate) struct Tensor {
    pub(crate) storage: Arc<Storage>,
    pub(crate) dtype: Code,
    pub(crate) sizes: Vec<i64>,
    pub(crate) strides: Vec<i64>,
    /// In elements.
    pub(crate) storage_offset: i64,
}

/// Contiguous (row-major) strides for `sizes`.
pub(crate) fn contiguous_strides(sizes: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; sizes.len()];
    let mut acc: i64 = 1;
    for i in (0..sizes.len()).rev() {
        strides[i] = acc;
        acc = acc.saturating_mul(sizes[i].max(1));
    }
    strides
}

/// Whether `strides` are the contiguous strides of `sizes` (dims of size 1 may have any stride).
pub(crate) fn is_contiguous(sizes: &[i64], strides: &[i64]) -> bool {
    if sizes.len() != strides.len() {
        return false;
    }
    if sizes.contains(&0) {
        return true;
    }
    let mut expected: i64 = 1;
    for i in (0..sizes.len()).rev() {
        if sizes[i] != 1 && strides[i] != expected {
            return false;
        }
        expected = expected.saturating_mul(sizes[i]);
    }
    true
}

/// Check a rank against [`MAX_RANK`].
pub(crate) fn check_rank(rank: usize) -> Result<()> {
    if rank > MAX_RANK {
        return invalid(format!("rank {rank} is above the limit of {MAX_RANK}"));
    }
    Ok(())
}

/// Number of elements, checked for negative sizes and overflow.
pub(crate) fn checked_numel(sizes: &[i64]) -> Result<i64> {
    let mut n: i64 = 1;
    for (d, &s) in sizes.iter().enumerate() {
        if s < 0 {
            return invalid(format!("size {s} of dimension {d} is negative"));
        }
        n = n
            .checked_mul(s)
            .ok_or_else(|| Error::invalid_argument(format!("sizes {sizes:?} overflow")))?;
    }
    Ok(n)
}

/// Bytes a view needs from the start of its storage: 0 for an empty view,
/// else `(offset + sum((size - 1) * stride) + 1) * element size`.
/// Rejects negative sizes, strides and offsets, and overflow.
pub(crate) fn required_bytes(
    sizes: &[i64],
    strides: &[i64],
    offset: i64,
    elem: usize,
) -> Result<usize> {
    if sizes.len() != strides.len() {
        return invalid(format!(
            "{} sizes but {} strides",
            sizes.len(),
            strides.len()
        ));
    }
    if offset < 0 {
        return invalid(format!("storage offset {offset} is negative"));
    }
    if checked_numel(sizes)? == 0 {
        return Ok(0);
    }
    let overflow = || Error::invalid_argument(format!("view {sizes:?}/{strides:?} overflows"));
    let mut last: i64 = offset;
    for (d, (&s, &st)) in sizes.iter().zip(strides).enumerate() {
        if st < 0 {
            return invalid(format!("stride {st} of dimension {d} is negative"));
        }
        last = (s - 1)
            .checked_mul(st)
            .and_then(|x| last.checked_add(x))
            .ok_or_else(overflow)?;
    }
    let elems = last.checked_add(1).ok_or_else(overflow)?;
    (elems as u64)
        .checked_mul(elem as u64)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(overflow)
}

/// Whether a view of `dtype` with `sizes`, `strides` and `storage_offset` fits a storage
/// of `nbytes` bytes: the checks of [`Tensor::view`], without making one.
pub(crate) fn check_view(
    dtype: Code,
    sizes: &[i64],
    strides: &[i64],
    storage_offset: i64,
    nbytes: usize,
) -> Result<()> {
    check_rank(sizes.len())?;
    let elem = dtype::checked_element_size(dtype)?;
    let need = required_bytes(sizes, strides, storage_offset, elem)?;
    // The elements' bytes must be addressable too (views with zero strides repeat
    // elements, so this can exceed the storage): keeps `nbytes()` from overflowing.
    let numel = checked_numel(sizes)?;
    if (numel as u64)
        .checked_mul(elem as u64)
        .is_none_or(|b| b > isize::MAX as u64)
    {
        return invalid(format!(
            "sizes {sizes:?} describe more than isize::MAX bytes"
        ));
    }
    if need > nbytes {
        return invalid(format!(
            "view sizes {sizes:?} strides {strides:?} offset {storage_offset} needs {need} bytes but the storage has {nbytes}"
        ));
    }
    Ok(())
}

impl Tensor {
    /// A view over `storage`, validated to fit inside it.
    pub(crate) fn view(
        storage: Arc<Storage>,
        dtype: Code,
        sizes: Vec<i64>,
        strides: Vec<i64>,
        storage_offset: i64,
    ) -> Result<Tensor> {
        check_view(dtype, &sizes, &strides, storage_offset, storage.nbytes)?;
        Ok(Tensor {
            storage,
            dtype,
            sizes,
            strides,
            storage_offset,
        })
    }

    /// A tensor over memory someone else owns; the storage size is what the view needs.
    ///
    /// # Safety
    /// Unless the view is empty, `data` must point to memory on `device` that
    /// is valid for reads and writes of the view's bytes (`required_bytes`
    /// from `data`, storage offset included) for as long as the returned
    /// tensor or any view made from it lives.
    pub(crate) unsafe fn borrowed(
        data: *mut c_void,
        dtype: Code,
        sizes: Vec<i64>,
        strides: Vec<i64>,
        storage_offset: i64,
        device: Device,
    ) -> Result<Tensor> {
        let elem = dtype::checked_element_size(dtype)?;
        let need = required_bytes(&sizes, &strides, storage_offset, elem)?;
        if data.is_null() && need > 0 {
            return invalid("data is null for a non-empty tensor");
        }
        let storage = Arc::new(Storage {
            memory: Memory::Borrowed(data),
            nbytes: need,
            device,
        });
        Tensor::view(storage, dtype, sizes, strides, storage_offset)
    }

    /// A tensor owning `memory` of `nbytes` on `device`, with the given view.
    pub(crate) fn from_memory(
        memory: Memory,
        nbytes: usize,
        device: Device,
        dtype: Code,
        sizes: Vec<i64>,
        strides: Vec<i64>,
    ) -> Result<Tensor> {
        let storage = Arc::new(Storage {
            memory,
            nbytes,
            device,
        });
        Tensor::view(storage, dtype, sizes, strides, 0)
    }

    /// A new tensor with fresh memory on `device`: zeroed host memory, or device memory
    /// from `device_alloc(ordinal, bytes)` (the CUDA layer's `cuda::memory::empty_strided`
    /// passes its stream-ordered allocation).
    pub(crate) fn empty_strided_with(
        sizes: Vec<i64>,
        strides: Vec<i64>,
        dtype: Code,
        device: Device,
        device_alloc: impl FnOnce(i32, usize) -> Result<Box<dyn DeviceBuffer>>,
    ) -> Result<Tensor> {
        check_rank(sizes.len())?;
        let elem = dtype::checked_element_size(dtype)?;
        let nbytes = required_bytes(&sizes, &strides, 0, elem)?;
        let memory = if nbytes == 0 {
            Memory::Empty
        } else {
            match device {
                Device::Cpu => Memory::Host(HostAlloc::new(nbytes)?),
                Device::Cuda(i) => Memory::Device(device_alloc(i, nbytes)?),
            }
        };
        Tensor::from_memory(memory, nbytes, device, dtype, sizes, strides)
    }

    pub(crate) fn device(&self) -> Device {
        self.storage.device
    }
    pub(crate) fn element_size(&self) -> usize {
        dtype::element_size(self.dtype).unwrap_or(1)
    }
    pub(crate) fn numel(&self) -> i64 {
        self.sizes.iter().product()
    }
    pub(crate) fn nbytes(&self) -> usize {
        self.numel().max(0) as usize * self.element_size()
    }
    pub(crate) fn is_contiguous(&self) -> bool {
        is_contiguous(&self.sizes, &self.strides)
    }
    /// Address of element 0 (storage base + offset), like `Tensor::data_ptr()`.
    pub(crate) fn data_ptr(&self) -> *mut c_void {
        let base = self.storage.base_ptr();
        if base.is_null() {
            return base;
        }
        let off = self.storage_offset as usize * self.element_size();
        base.cast::<u8>().wrapping_add(off).cast()
    }
    /// Byte range `[start, end)` of the storage the view touches (`(0, 0)` when empty).
    pub(crate) fn span(&self) -> Result<(usize, usize)> {
        let elem = self.element_size();
        let end = required_bytes(&self.sizes, &self.strides, self.storage_offset, elem)?;
        if end == 0 {
            return Ok((0, 0));
        }
        Ok((self.storage_offset as usize * elem, end))
    }
}

#[cfg(test)]
mod tests;
