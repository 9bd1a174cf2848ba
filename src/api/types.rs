//! The typed values of the safe API: a CUDA [`Device`], a validated tensor description
//! ([`TensorDesc`]), and handles to memory and streams made elsewhere ([`DevicePtr`],
//! [`RawStream`]). Integers and raw pointers from the C API become these at its edge
//! (`crate::ffi`), checked once.
//!
//! The two handles are plain values: making one from any address is safe, because every
//! function that reads, writes, frees or orders work through one is `unsafe` (or checks
//! the address against what the library handed out), with a `# Safety` contract.

use crate::dtype::DType;
use crate::error::{invalid, Error, Result};
use crate::tensor;
use std::ffi::c_void;

/// A CUDA device, by ordinal. The ordinal is checked non-negative when the value is made;
/// whether this machine has that device is checked where it is used (a `NoDevice` error).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Device {
    ordinal: i32,
}

impl Device {
    /// CUDA device `ordinal`; an `InvalidArgument` error for a negative ordinal.
    pub fn cuda(ordinal: i32) -> Result<Device> {
        if ordinal < 0 {
            return invalid(format!("device index {ordinal} is negative"));
        }
        Ok(Device { ordinal })
    }
    /// The device ordinal (≥ 0).
    pub fn ordinal(self) -> i32 {
        self.ordinal
    }
}

impl TryFrom<i32> for Device {
    type Error = Error;
    /// As [`Device::cuda`].
    fn try_from(ordinal: i32) -> Result<Device> {
        Device::cuda(ordinal)
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cuda:{}", self.ordinal)
    }
}

/// An address in CUDA device memory (a `CUdeviceptr`), e.g. from
/// [`alloc_device`](super::memory::alloc_device) or [`DeviceTensor::device_ptr`](super::DeviceTensor::device_ptr).
/// A value only: the functions that use the memory behind it are `unsafe`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct DevicePtr(*mut c_void);

// SAFETY: an address, never dereferenced by safe code; CUDA device memory is not tied to a thread.
unsafe impl Send for DevicePtr {}
// SAFETY: as above; no interior mutability.
unsafe impl Sync for DevicePtr {}

impl DevicePtr {
    /// The handle of an address from elsewhere (the C API, another CUDA library).
    pub fn from_raw(ptr: *mut c_void) -> DevicePtr {
        DevicePtr(ptr)
    }
    /// The address, for interoperation.
    pub fn as_raw(self) -> *mut c_void {
        self.0
    }
    /// Whether it is the null address.
    pub fn is_null(self) -> bool {
        self.0.is_null()
    }
}

impl std::fmt::Debug for DevicePtr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DevicePtr({:p})", self.0)
    }
}

/// A CUDA stream (a `CUstream` / `cudaStream_t`); null is the legacy default stream.
/// A value only: handing one to the library to order work on is `unsafe`
/// ([`set_caller_stream`](super::memory::set_caller_stream)).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RawStream(*mut c_void);

// SAFETY: a driver handle, never dereferenced by Rust; CUDA streams may be used from any thread.
unsafe impl Send for RawStream {}
// SAFETY: as above; no interior mutability.
unsafe impl Sync for RawStream {}

impl RawStream {
    /// The legacy default stream (null).
    pub const LEGACY_DEFAULT: RawStream = RawStream(std::ptr::null_mut());

    /// The handle of a stream from elsewhere (the C API, another CUDA library).
    pub fn from_raw(stream: *mut c_void) -> RawStream {
        RawStream(stream)
    }
    /// The `CUstream`, for interoperation.
    pub fn as_raw(self) -> *mut c_void {
        self.0
    }
    /// Whether it is the legacy default stream.
    pub fn is_legacy_default(self) -> bool {
        self.0.is_null()
    }
}

impl std::fmt::Debug for RawStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RawStream({:p})", self.0)
    }
}

/// A contiguous (row-major) tensor's description, validated when made: its dtype and sizes,
/// the rank at most [`MAX_RANK`](crate::MAX_RANK), no size negative, and its element count
/// and bytes within range (`numel × element size` fits a `usize`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorDesc {
    dtype: DType,
    sizes: Vec<i64>,
    nbytes: usize,
}

impl TensorDesc {
    /// The description of a contiguous tensor of `dtype` and `sizes`, or an
    /// `InvalidArgument` error naming what is wrong.
    pub fn new(dtype: DType, sizes: &[i64]) -> Result<TensorDesc> {
        tensor::check_rank(sizes.len())?;
        let strides = tensor::contiguous_strides(sizes);
        let nbytes = tensor::required_bytes(sizes, &strides, 0, dtype.element_size())?;
        Ok(TensorDesc {
            dtype,
            sizes: sizes.to_vec(),
            nbytes,
        })
    }
    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// The sizes.
    pub fn sizes(&self) -> &[i64] {
        &self.sizes
    }
    /// Its contiguous strides, in elements.
    pub fn strides(&self) -> Vec<i64> {
        tensor::contiguous_strides(&self.sizes)
    }
    /// Bytes of the elements.
    pub fn nbytes(&self) -> usize {
        self.nbytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn message(r: Result<impl std::fmt::Debug>) -> String {
        let e = r.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        e.to_string()
    }

    #[test]
    fn devices_are_checked_when_made() {
        assert_eq!(Device::cuda(3).unwrap().ordinal(), 3);
        assert_eq!(Device::try_from(0).unwrap().to_string(), "cuda:0");
        assert!(message(Device::cuda(-1)).contains("device index -1 is negative"));
    }

    #[test]
    fn descriptions_are_checked_when_made() {
        let d = TensorDesc::new(DType::BFloat16, &[4, 0, 3]).unwrap();
        assert_eq!((d.nbytes(), d.strides()), (0, vec![3, 3, 1]));
        let d = TensorDesc::new(DType::Float32, &[2, 3]).unwrap();
        assert_eq!(
            (d.dtype(), d.sizes(), d.nbytes()),
            (DType::Float32, &[2, 3][..], 24)
        );
        assert_eq!(TensorDesc::new(DType::Int64, &[]).unwrap().nbytes(), 8);
        assert!(message(TensorDesc::new(DType::Float32, &[1; 17])).contains("rank 17"));
        assert!(message(TensorDesc::new(DType::Float32, &[2, -1])).contains("negative"));
        assert!(message(TensorDesc::new(DType::Float32, &[i64::MAX, 2])).contains("overflow"));
        let big = TensorDesc::new(DType::Complex128, &[1 << 31, 1 << 31]);
        assert!(message(big).contains("overflow"));
    }

    #[test]
    fn handles_are_values() {
        assert!(RawStream::LEGACY_DEFAULT.is_legacy_default());
        let p = DevicePtr::from_raw(0x1000 as *mut c_void);
        assert_eq!(p.as_raw() as usize, 0x1000);
        assert!(!p.is_null());
        assert!(format!("{p:?}").contains("0x1000"));
    }
}
