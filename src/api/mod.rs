//! The safe Rust API, the one front door: load a method from its blobs or
//! from a program's named data ([`Blobs`]), run it on host slices or on
//! device tensors this crate owns, read results back; device memory,
//! copies and the caller stream ([`memory`]). The C API (the `ffi` module) is a
//! translation of C types onto this module.
//!
//! Everything here is safe to call unless marked `unsafe`: memory the
//! library reads or writes is either a Rust slice or a [`DeviceTensor`] whose
//! device memory the library allocated and keeps alive. The ways to hand in
//! memory from elsewhere ([`Input::device_raw`], [`Method::execute_raw`]) are
//! `unsafe`. Values are typed ([`DType`], [`Device`], [`TensorDesc`]; device
//! memory and streams from elsewhere as [`DevicePtr`] and [`RawStream`]); raw
//! pointers appear only in the `unsafe` raw entry points.

pub mod memory;
mod program;
pub mod sample;
mod types;

pub use crate::delegate::io::{InputArg, OutputArg, OutputInfo};
pub use crate::dtype::DType;
pub use program::{Blobs, NamedDataLookup};
pub use types::{Device, DevicePtr, RawStream, TensorDesc};

use crate::config::{MethodConfig, OutputPlacement};
use crate::cuda::{self, copy, ContextGuard};
use crate::delegate::CudaHandle;
use crate::error::{invalid, Error, Result};
use crate::stats::Stats;
use crate::tensor::{self, Tensor};
use std::ffi::c_void;

/// Device memory the library owns, holding one contiguous tensor. Freed
/// (stream-ordered) when dropped.
#[derive(Debug, Clone)]
pub struct DeviceTensor {
    t: Tensor,
    desc: TensorDesc,
    device: Device,
}

impl DeviceTensor {
    /// Copy a contiguous host tensor described by `desc` to `device` (waits for the copy).
    pub fn from_host(device: Device, desc: &TensorDesc, data: &[u8]) -> Result<DeviceTensor> {
        let (n, have) = (desc.nbytes(), data.len());
        if have < n {
            return invalid(format!(
                "sizes {:?} need {n} bytes but the slice has {have}",
                desc.sizes()
            ));
        }
        let d = cuda::device(device.ordinal())?;
        let _g = ContextGuard::device(&d)?;
        let t = crate::cuda::memory::empty_strided(
            desc.sizes().to_vec(),
            desc.strides(),
            desc.dtype().code(),
            tensor::Device::Cuda(device.ordinal()),
        )?;
        // SAFETY: `data` holds n bytes (checked) and the tensor's memory n device bytes.
        unsafe { copy::copy_bytes_blocking(t.data_ptr(), data.as_ptr().cast(), n)? };
        Ok(DeviceTensor {
            t,
            desc: desc.clone(),
            device,
        })
    }

    /// A device tensor the library made (an output left on the device). Its tensor was
    /// validated when made, so a failure here is an internal error.
    pub(crate) fn from_tensor(t: Tensor) -> Result<DeviceTensor> {
        let tensor::Device::Cuda(ordinal) = t.device() else {
            return Err(Error::internal(
                "an output left on the device is in host memory",
            ));
        };
        let typed = DType::try_from(t.dtype)
            .and_then(|dtype| TensorDesc::new(dtype, &t.sizes))
            .and_then(|desc| Ok((desc, Device::cuda(ordinal)?)));
        let (desc, device) =
            typed.map_err(|e| Error::internal(format!("a device tensor's description: {e}")))?;
        Ok(DeviceTensor { t, desc, device })
    }

    /// Its dtype and sizes.
    pub fn desc(&self) -> &TensorDesc {
        &self.desc
    }
    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.desc.dtype()
    }
    /// The sizes.
    pub fn sizes(&self) -> &[i64] {
        self.desc.sizes()
    }
    /// Bytes of the elements.
    pub fn nbytes(&self) -> usize {
        self.desc.nbytes()
    }
    /// The device.
    pub fn device(&self) -> Device {
        self.device
    }
    /// The device address of element 0 (for interoperation; the memory stays owned here).
    pub fn device_ptr(&self) -> DevicePtr {
        DevicePtr::from_raw(self.t.data_ptr())
    }

    /// Copy the elements to host memory (row-major, contiguous; waits once).
    pub fn to_host(&self) -> Result<Vec<u8>> {
        let ordinal = self.device.ordinal();
        let d = cuda::device(ordinal)?;
        let _g = ContextGuard::device(&d)?;
        let _scope = cuda::stream::StreamScope::enter(ordinal, std::ptr::null_mut(), None);
        copy::gather_to_host(&self.t)
    }
}

/// One input of [`Method::execute`].
#[derive(Debug, Clone)]
pub struct Input<'a> {
    arg: InputArg,
    _borrow: std::marker::PhantomData<&'a [u8]>,
}

impl<'a> Input<'a> {
    /// A contiguous tensor described by `desc` in host memory (copied to the device by the
    /// execute; a slice shorter than `desc.nbytes()` is an error of the execute).
    pub fn host(desc: &TensorDesc, data: &'a [u8]) -> Input<'a> {
        Input {
            arg: InputArg {
                dtype: desc.dtype().code(),
                sizes: desc.sizes().to_vec(),
                strides: desc.strides(),
                data: data.as_ptr().cast(),
                nbytes: data.len(),
            },
            _borrow: std::marker::PhantomData,
        }
    }

    /// A tensor in device memory the library owns (used in place).
    pub fn device(t: &'a DeviceTensor) -> Input<'a> {
        Input {
            arg: InputArg {
                dtype: t.dtype().code(),
                sizes: t.t.sizes.clone(),
                strides: t.t.strides.clone(),
                data: t.t.data_ptr().cast_const(),
                nbytes: t.t.nbytes(),
            },
            _borrow: std::marker::PhantomData,
        }
    }

    /// A contiguous tensor described by `desc` at a device or host address the caller
    /// owns, with `nbytes` readable there (a raw entry point).
    ///
    /// # Safety
    /// `data` must be valid for reads of `nbytes` bytes (host memory, or
    /// device memory of the method's device) until the execute's work has run
    /// on the device, and nothing may write it meanwhile.
    pub unsafe fn device_raw(
        desc: &TensorDesc,
        data: *const c_void,
        nbytes: usize,
    ) -> Input<'static> {
        Input {
            arg: InputArg {
                dtype: desc.dtype().code(),
                sizes: desc.sizes().to_vec(),
                strides: desc.strides(),
                data,
                nbytes,
            },
            _borrow: std::marker::PhantomData,
        }
    }
}

/// One loaded method (an AOTInductor `.so` and its weights, on one device).
pub struct Method {
    inner: CudaHandle,
}

impl Method {
    /// Load a method from its `.so` bytes and weights blob (both copied).
    pub fn load(name: &str, so: &[u8], weights: &[u8], config: &MethodConfig) -> Result<Method> {
        let blobs = Blobs::Bytes {
            so,
            weights,
            so_key: None,
            weights_key: None,
        };
        Method::load_from(name, blobs, config)
    }

    /// Load a method from its blobs, given as bytes or found through the program's named data.
    pub fn load_from(name: &str, blobs: Blobs<'_>, config: &MethodConfig) -> Result<Method> {
        crate::logging::install();
        let params = program::init_params(name, blobs, config)?;
        Ok(Method {
            inner: CudaHandle::init(params)?,
        })
    }

    /// The method's name.
    pub fn name(&self) -> &str {
        self.inner.method_name()
    }
    /// The configuration it was loaded with.
    pub fn config(&self) -> &MethodConfig {
        self.inner.config()
    }
    /// Number of inputs.
    pub fn num_inputs(&self) -> usize {
        self.inner.num_inputs()
    }
    /// Number of outputs.
    pub fn num_outputs(&self) -> usize {
        self.inner.num_outputs()
    }
    /// The method's counters.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }
    /// The method's CUDA stream, borrowed: valid while the method lives.
    pub fn stream(&self) -> RawStream {
        RawStream::from_raw(self.inner.stream_raw())
    }
    /// Number of CUDA graphs the method holds now.
    pub fn graph_count(&self) -> usize {
        self.inner.graph_count()
    }
    /// Wait for the method's queued work.
    pub fn synchronize(&self) -> Result<()> {
        self.inner.synchronize()
    }
    /// Delete the container and free everything the method owns, reporting a failure of the
    /// final wait (dropping does the same and logs it). Later executes fail.
    pub fn destroy(&self) -> Result<()> {
        self.inner.destroy()
    }

    /// Copy `n` bytes in the order of the method's stream; waits only when `dst` is host memory.
    ///
    /// # Safety
    /// `dst` and `src` must each be valid for `n` bytes (host or device memory).
    pub unsafe fn memcpy(&self, dst: *mut c_void, src: *const c_void, n: usize) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.inner.memcpy(dst, src, n) }
    }

    /// Run the method; the outputs stay on the device (no host wait). A
    /// method replayed as a CUDA graph writes its outputs to the same device
    /// memory at every execute of that input shape: copy an output
    /// (e.g. [`DeviceTensor::to_host`]) before the next execute to keep it.
    pub fn execute(&self, inputs: &[Input<'_>]) -> Result<Vec<DeviceTensor>> {
        let ins: Vec<InputArg> = inputs.iter().map(|i| i.arg.clone()).collect();
        let outs = self.output_slots(None)?;
        // SAFETY: every input is a live slice, a DeviceTensor borrowed for the call (its memory
        // is freed stream-ordered after this execute's work), or raw memory whose validity the
        // caller promised through `Input::device_raw`; no output buffer is written (Device).
        let infos = unsafe { self.inner.execute(&ins, &outs, OutputPlacement::Device)? };
        infos
            .into_iter()
            .enumerate()
            .map(|(j, i)| {
                let t = i.tensor.ok_or_else(|| {
                    Error::internal(format!("output {j} was not left on the device"))
                })?;
                DeviceTensor::from_tensor(t)
            })
            .collect()
    }

    /// Run the method and copy output `j` into `outputs[j]` (one host wait).
    /// Returns each output's sizes.
    pub fn execute_to_host(
        &self,
        inputs: &[Input<'_>],
        outputs: &mut [&mut [u8]],
    ) -> Result<Vec<Vec<i64>>> {
        let ins: Vec<InputArg> = inputs.iter().map(|i| i.arg.clone()).collect();
        let outs = self.output_slots(Some(outputs))?;
        // SAFETY: as in `execute`; each output slot is a live mutable slice of its capacity.
        let infos = unsafe { self.inner.execute(&ins, &outs, OutputPlacement::Copy)? };
        Ok(infos.into_iter().map(|i| i.sizes).collect())
    }

    /// Run the method on raw tensor descriptions (what the C API hands in).
    /// Outputs go where `placement` says; an output slot with null `data` is
    /// left on the device.
    ///
    /// # Safety
    /// Every input's `data` must be valid for reads of its `nbytes` (host or
    /// device memory) until this call returns and, for device memory, until
    /// the work it queued has run; every output's non-null `data` must be
    /// valid for writes of its `capacity` bytes likewise.
    pub unsafe fn execute_raw(
        &self,
        inputs: &[InputArg],
        outputs: &[OutputArg],
        placement: OutputPlacement,
    ) -> Result<Vec<OutputInfo>> {
        // SAFETY: forwarded contract.
        unsafe { self.inner.execute(inputs, outputs, placement) }
    }

    fn output_slots(&self, host: Option<&mut [&mut [u8]]>) -> Result<Vec<OutputArg>> {
        let n = self.num_outputs();
        match host {
            None => Ok((0..n)
                .map(|_| OutputArg {
                    dtype: None,
                    data: std::ptr::null_mut(),
                    capacity: 0,
                })
                .collect()),
            Some(bufs) => {
                if bufs.len() != n {
                    return invalid(format!(
                        "the method has {n} outputs, got {} buffers",
                        bufs.len()
                    ));
                }
                Ok(bufs
                    .iter_mut()
                    .map(|b| OutputArg {
                        dtype: None,
                        data: b.as_mut_ptr().cast(),
                        capacity: b.len(),
                    })
                    .collect())
            }
        }
    }
}
