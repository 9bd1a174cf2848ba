//! executorch-cuda: ExecuTorch's CUDA backend in Rust.
//!
//! Layers, one module per concern:
//! - [`tensor`]: the tensor model behind `AtenTensorHandle`.
//! - [`cuda`]: driver loading, primary contexts, streams, the stream-ordered
//!   allocator, events and pinned staging buffers (on cudarc's `result` level).
//! - [`aoti`]: validating, opening and caching the AOTInductor `.so` and
//!   driving its model container.
//! - [`delegate`]: `CudaHandle`: init / execute / destroy and the IO policy.
//! - [`ffi`]: the C boundary: the `aoti_torch_*` shim ABI and the `et_cuda_*` API.
//! - [`options`], [`stats`], [`error`]: backend options, counters, errors.

// Raw CUDA handles (streams, contexts, events) are opaque values passed to the
// driver, not memory this crate dereferences, and the `extern "C"` entry
// points must take raw pointers: their checks go through `ffi::non_null` and
// friends. Functions that read or write caller memory are `unsafe fn`.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

/// cbindgen:ignore
pub mod aoti;
/// cbindgen:ignore
pub mod cuda;
/// cbindgen:ignore
pub mod delegate;
pub mod error;
pub mod ffi;
/// cbindgen:ignore
pub mod kernels;
/// cbindgen:ignore
pub mod options;
pub mod stats;
/// cbindgen:ignore
pub mod tensor;

pub use delegate::{CudaHandle, ExecMode, InitParams, OutputPlacement};
pub use error::{Error, EtCudaStatus, Result};
