//! The safe Rust API: load a method from its blobs, run it on host slices or
//! on device tensors this crate owns, read results back.
//!
//! Everything here is safe to call: memory the library reads or writes is
//! either a Rust slice or a [`DeviceTensor`] whose device memory the library
//! allocated and keeps alive. The one way to hand in device memory from
//! elsewhere, [`Input::device_raw`], is `unsafe`.

use crate::cuda::{self, copy, ContextGuard};
use crate::delegate::io::{InputArg, OutputArg};
use crate::delegate::sharing::SharePolicy;
use crate::delegate::{CudaHandle, InitParams, MethodConfig};
use crate::dtype::{self, DType};
use crate::error::{invalid, Error, Result};
use crate::options::{ExecMode, OutputPlacement};
use crate::stats::Stats;
use crate::tensor::{self, Device, Tensor};
use std::ffi::c_void;

/// How to load a method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodOptions {
    /// CUDA device ordinal.
    pub device: i32,
    /// Share one stream (per device) with every other method that asks for it.
    pub shared_stream: bool,
    /// Replay CUDA graphs keyed by the input shapes.
    pub cuda_graphs: bool,
    /// Most graphs kept (least recently used evicted).
    pub graph_cache_size: usize,
    /// Graphs keep their memory in blocks of their own (default), not allocation nodes.
    pub graph_private_memory: bool,
    /// Hold constants identical to those of methods loaded earlier only once.
    pub weight_sharing: bool,
    /// With `weight_sharing`: registered buffers of the same `share_group` and FQN too.
    pub share_mutable_buffers: bool,
    /// The program this method belongs to (any number the caller picks; 0 for none).
    pub share_group: u64,
    /// Execution mode (baselines for benchmarks).
    pub mode: ExecMode,
}

impl Default for MethodOptions {
    fn default() -> MethodOptions {
        MethodOptions {
            device: 0,
            shared_stream: false,
            cuda_graphs: false,
            graph_cache_size: crate::options::DEFAULT_GRAPH_CACHE_SIZE,
            graph_private_memory: true,
            weight_sharing: false,
            share_mutable_buffers: false,
            share_group: 0,
            mode: ExecMode::Default,
        }
    }
}

impl MethodOptions {
    pub(crate) fn config(&self) -> MethodConfig {
        MethodConfig {
            device_index: self.device,
            shared_stream: self.shared_stream,
            mode: self.mode,
            cuda_graphs: self.cuda_graphs,
            graph_cache_size: self.graph_cache_size,
            graph_private_memory: self.graph_private_memory,
            share_weights: self.weight_sharing.then_some(SharePolicy {
                mutable_buffers: self.share_mutable_buffers,
                group: self.share_group,
            }),
        }
    }
}

/// Device memory the library owns, holding one contiguous tensor. Freed
/// (stream-ordered) when dropped.
#[derive(Debug, Clone)]
pub struct DeviceTensor {
    t: Tensor,
}

impl DeviceTensor {
    /// Copy a contiguous host tensor to device `device` (waits for the copy).
    pub fn from_host(
        device: i32,
        dtype: DType,
        sizes: &[i64],
        data: &[u8],
    ) -> Result<DeviceTensor> {
        let n = host_nbytes(dtype, sizes, data.len())?;
        let d = cuda::device(device)?;
        let _g = ContextGuard::device(&d)?;
        let t = Tensor::empty_strided(
            sizes.to_vec(),
            tensor::contiguous_strides(sizes),
            dtype,
            Device::Cuda(device),
        )?;
        // SAFETY: `data` holds n bytes (checked) and the tensor's memory n device bytes.
        unsafe { copy::copy_bytes_blocking(t.data_ptr(), data.as_ptr().cast(), n)? };
        Ok(DeviceTensor { t })
    }

    pub(crate) fn from_tensor(t: Tensor) -> DeviceTensor {
        DeviceTensor { t }
    }

    /// The dtype code.
    pub fn dtype(&self) -> DType {
        self.t.dtype
    }
    /// The sizes.
    pub fn sizes(&self) -> &[i64] {
        &self.t.sizes
    }
    /// Bytes of the elements.
    pub fn nbytes(&self) -> usize {
        self.t.nbytes()
    }
    /// The device ordinal.
    pub fn device(&self) -> i32 {
        self.t.device().index()
    }
    /// The device address of element 0 (for interoperation; the memory stays owned here).
    pub fn device_ptr(&self) -> *const c_void {
        self.t.data_ptr().cast_const()
    }

    /// Copy the elements to host memory (row-major, contiguous; waits once).
    pub fn to_host(&self) -> Result<Vec<u8>> {
        let d = cuda::device(self.device())?;
        let _g = ContextGuard::device(&d)?;
        let _scope = cuda::stream::StreamScope::enter(self.device(), std::ptr::null_mut(), None);
        copy::gather_to_host(&self.t)
    }
}

fn host_nbytes(dtype: DType, sizes: &[i64], have: usize) -> Result<usize> {
    tensor::check_rank(sizes.len())?;
    let elem = dtype::checked_element_size(dtype)?;
    let n = tensor::required_bytes(sizes, &tensor::contiguous_strides(sizes), 0, elem)?;
    if have < n {
        return invalid(format!(
            "sizes {sizes:?} need {n} bytes but the slice has {have}"
        ));
    }
    Ok(n)
}

/// One input of [`Method::execute`].
#[derive(Debug, Clone)]
pub struct Input<'a> {
    arg: InputArg,
    _borrow: std::marker::PhantomData<&'a [u8]>,
}

impl<'a> Input<'a> {
    /// A contiguous tensor in host memory (copied to the device by the execute).
    pub fn host(dtype: DType, sizes: &[i64], data: &'a [u8]) -> Input<'a> {
        Input {
            arg: InputArg {
                dtype,
                sizes: sizes.to_vec(),
                strides: tensor::contiguous_strides(sizes),
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
                dtype: t.t.dtype,
                sizes: t.t.sizes.clone(),
                strides: t.t.strides.clone(),
                data: t.t.data_ptr().cast_const(),
                nbytes: t.t.nbytes(),
            },
            _borrow: std::marker::PhantomData,
        }
    }

    /// A contiguous tensor at a device or host address the caller owns.
    ///
    /// # Safety
    /// `data` must be valid for reads of `nbytes` bytes (host memory, or
    /// device memory of the method's device) until the execute's work has run
    /// on the device, and nothing may write it meanwhile.
    pub unsafe fn device_raw(
        dtype: DType,
        sizes: &[i64],
        data: *const c_void,
        nbytes: usize,
    ) -> Input<'static> {
        Input {
            arg: InputArg {
                dtype,
                sizes: sizes.to_vec(),
                strides: tensor::contiguous_strides(sizes),
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
    pub fn load(name: &str, so: &[u8], weights: &[u8], options: &MethodOptions) -> Result<Method> {
        crate::logging::install();
        let inner = CudaHandle::init(InitParams {
            so,
            weights: crate::delegate::Weights::Blob(weights),
            method_name: name.to_string(),
            so_key: None,
            weights_key: None,
            config: options.config(),
        })?;
        Ok(Method { inner })
    }

    /// The method's name.
    pub fn name(&self) -> &str {
        self.inner.method_name()
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
    /// Wait for the method's queued work.
    pub fn synchronize(&self) -> Result<()> {
        self.inner.synchronize()
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
                i.tensor.map(DeviceTensor::from_tensor).ok_or_else(|| {
                    Error::internal(format!("output {j} was not left on the device"))
                })
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

/// Number of CUDA devices (a `NoDevice` error without a driver).
pub fn device_count() -> Result<i32> {
    cuda::device_count()
}

/// The CUDA driver's version (e.g. 13000).
pub fn driver_version() -> Result<i32> {
    cuda::driver_version()
}

/// Free and total memory of a device, from the driver.
pub fn mem_info(device: i32) -> Result<(usize, usize)> {
    cuda::mem_info(device)
}

/// Process-wide counters.
pub fn global_stats() -> Stats {
    crate::stats::global().snapshot()
}

/// Orders the executes of this thread on a stream the caller owns, until dropped.
pub struct CallerStreamGuard {
    prev: Option<cuda::stream::CallerStream>,
}

impl CallerStreamGuard {
    /// Use `stream` (a `CUstream`/`cudaStream_t`; null is the legacy default stream).
    ///
    /// # Safety
    /// `stream` must be a live CUDA stream (or null) for as long as the guard lives.
    pub unsafe fn new(stream: *mut c_void) -> CallerStreamGuard {
        CallerStreamGuard {
            prev: cuda::stream::set_caller_stream(Some(cuda::stream::CallerStream(stream.cast()))),
        }
    }
}

impl Drop for CallerStreamGuard {
    fn drop(&mut self) {
        cuda::stream::set_caller_stream(self.prev);
    }
}
