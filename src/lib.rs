//! executorch-cuda: ExecuTorch's CUDA backend in Rust.
//!
//! A program exported with ExecuTorch's `CudaPartitioner` carries, per
//! delegated method, an AOTInductor CUDA `.so` and a weights blob. This crate
//! loads the `.so`, serves the `aoti_torch_*` shim ABI it imports, and runs
//! it on a CUDA stream, waiting on the host only when data must reach host
//! memory.
//!
//! Layers, each importing only the ones before it:
//! - [`dtype`], `tensor`: the element types and the tensor model behind
//!   `AtenTensorHandle`;
//! - `cuda`: driver loading, primary contexts, streams, the stream-ordered
//!   memory pool, events, pinned staging, CUDA graphs, and every copy;
//! - `aoti`: validating, opening and caching the `.so`, driving its model
//!   container;
//! - `delegate`: one loaded method (init / execute / destroy), its IO
//!   policy, CUDA graphs and weight sharing;
//! - the safe Rust API ([`Method`], [`DeviceTensor`], [`Input`], typed with
//!   [`DType`], [`Device`], [`TensorDesc`], [`DevicePtr`], [`RawStream`]) and
//!   [`options`], [`logging`], [`Stats`];
//! - [`ffi`]: the C boundary, the `et_cuda_*` API and the `aoti_torch_*`
//!   shims. Only `ffi` knows C types.
//!
//! # Example
//!
//! ```
//! use executorch_cuda::{DType, ErrorKind, Input, Method, MethodConfig, TensorDesc};
//!
//! let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mlp_f32");
//! let (Ok(so), Ok(weights)) = (
//!     std::fs::read(format!("{dir}/forward_so_blob.bin")),
//!     std::fs::read(format!("{dir}/forward_weights_blob.bin")),
//! ) else {
//!     return; // the fixtures (tests/fixtures) are not in this checkout
//! };
//! let method = match Method::load("forward", &so, &weights, &MethodConfig::default()) {
//!     Ok(m) => m,
//!     // No GPU here: a clear error, never a crash.
//!     Err(e) if e.kind() == ErrorKind::NoDevice => return println!("skipped: {e}"),
//!     // The .so needs a newer C library than this machine has.
//!     Err(e) if e.kind() == ErrorKind::LoadFailed => return println!("skipped: {e}"),
//!     Err(e) => panic!("{e}"),
//! };
//! let x: Vec<u8> = (0..4 * 64).flat_map(|i| (i as f32 / 256.0).to_le_bytes()).collect();
//! let mut y = vec![0u8; 4 * 10 * 4];
//! let desc = TensorDesc::new(DType::Float32, &[4, 64]).unwrap();
//! let shapes = method
//!     .execute_to_host(&[Input::host(&desc, &x)], &mut [&mut y])
//!     .unwrap();
//! assert_eq!(shapes, vec![vec![4, 10]]);
//! ```
//!
//! Safe code cannot hand the library an arbitrary address: the C functions
//! that take pointers are `unsafe`, as is the one Rust way in for foreign
//! device memory:
//!
//! ```compile_fail,E0133
//! // Calling a C entry point with a made-up pointer needs `unsafe`.
//! let key = 0x10 as *const std::ffi::c_char;
//! executorch_cuda::ffi::options::et_cuda_set_option_str(key, key);
//! ```
//!
//! ```compile_fail,E0133
//! // So does wrapping memory the library does not own.
//! let desc = executorch_cuda::TensorDesc::new(executorch_cuda::DType::Float32, &[1]).unwrap();
//! let input = executorch_cuda::Input::device_raw(&desc, 0x10 as *const std::ffi::c_void, 4);
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, missing_docs)]
#![allow(missing_docs)] // the C boundary's constants are documented in the header's sections

pub(crate) mod aoti;
pub mod api;
mod boundary;
pub mod config;
pub(crate) mod cuda;
pub(crate) mod delegate;
pub mod dtype;
mod error;
pub mod ffi;
pub(crate) mod kernels;
pub mod logging;
pub mod options;
pub mod shim;
mod stats;
pub mod switches;
pub(crate) mod tensor;

pub use api::memory::{device_count, driver_version, global_stats, mem_info, CallerStreamGuard};
pub use api::{Blobs, DeviceTensor, Input, InputArg, Method, OutputArg, OutputInfo};
pub use api::{Device, DevicePtr, RawStream, TensorDesc};
pub use config::{MethodConfig, OutputPlacement};
pub use dtype::DType;
pub use error::{Error, ErrorKind, Result};
pub use stats::Stats;
pub use tensor::MAX_RANK;

/// Internals for the fuzz targets (`fuzz/`), behind the `fuzzing` feature.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    use crate::error::Result;

    /// ELF validation of untrusted `.so` bytes: (loadable segments, has a dynamic segment).
    pub fn elf_validate(b: &[u8]) -> Result<(usize, bool)> {
        crate::aoti::elf::validate(b).map(|i| (i.loadable_segments, i.has_dynamic))
    }
    /// `tensor::required_bytes`.
    pub fn required_bytes(
        sizes: &[i64],
        strides: &[i64],
        offset: i64,
        elem: usize,
    ) -> Result<usize> {
        crate::tensor::required_bytes(sizes, strides, offset, elem)
    }
    /// `tensor::checked_numel`.
    pub fn checked_numel(sizes: &[i64]) -> Result<i64> {
        crate::tensor::checked_numel(sizes)
    }
    /// `tensor::is_contiguous`.
    pub fn is_contiguous(sizes: &[i64], strides: &[i64]) -> bool {
        crate::tensor::is_contiguous(sizes, strides)
    }
    /// The delegate payload parser, its promises asserted (`aoti::payload::fuzz_parse`).
    pub fn payload(data: &[u8]) {
        crate::aoti::payload::fuzz_parse(data)
    }
    /// The per-FQN matcher, each match through the upload's view check
    /// (`delegate::per_fqn::fuzz_match`); returns the number of matches.
    pub fn per_fqn_match(data: &[u8]) -> usize {
        crate::delegate::per_fqn::fuzz_match(data)
    }
    /// Whether `method` leaves its outputs on the device under the current options.
    pub fn skip_copy_for(method: &str) -> bool {
        crate::MethodConfig::from_options(method, 0).is_ok_and(|c| c.outputs_on_device)
    }
}
