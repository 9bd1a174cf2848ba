//! GPU test helpers: device buffers, a case's device inputs, copies back, a spin kernel.

use super::{api, desc, gpus_or_skip, last_error, Case};
use executorch_cuda::ffi::{EtCudaTensor, ET_CUDA_STATUS_OK};
use std::ffi::c_void;

/// Device memory for a test (through the library's C API), freed on drop.
pub struct DevBuf(*mut c_void);
impl DevBuf {
    pub fn from_host(bytes: &[u8]) -> DevBuf {
        let mut p = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        let st = unsafe { (api().alloc_device)(0, bytes.len().max(1), &mut p) };
        assert_eq!(st, ET_CUDA_STATUS_OK, "{}", last_error());
        // SAFETY: `p` has bytes.len() device bytes; a null handle makes a blocking copy.
        let st = unsafe { (api().memcpy)(std::ptr::null(), p, bytes.as_ptr().cast(), bytes.len()) };
        assert_eq!(st, ET_CUDA_STATUS_OK, "{}", last_error());
        DevBuf(p)
    }
    pub fn ptr(&self) -> *mut c_void {
        self.0
    }
}
impl Drop for DevBuf {
    fn drop(&mut self) {
        // SAFETY: allocated by et_cuda_alloc_device above, freed once.
        let st = unsafe { (api().free_device)(self.0) };
        assert_eq!(st, ET_CUDA_STATUS_OK, "{}", last_error());
    }
}

/// Panic with a clear message when an ignored GPU test runs without a GPU.
pub fn require_gpu(test: &str) {
    assert!(gpus_or_skip(test).is_some(), "{test} needs a CUDA device");
}

/// The case's inputs copied to device memory (kept alive by the returned buffers), their
/// descriptors, and output descriptors for device placement.
pub fn device_io(case: &Case) -> (Vec<DevBuf>, Vec<EtCudaTensor>, Vec<EtCudaTensor>) {
    let dev_in: Vec<DevBuf> = case
        .inputs
        .iter()
        .map(|t| DevBuf::from_host(&t.bytes))
        .collect();
    let ins = case
        .inputs
        .iter()
        .zip(&dev_in)
        .map(|(t, d)| desc(&t.dtype, &t.sizes, d.ptr(), t.bytes.len()))
        .collect();
    let outs = case
        .outputs
        .iter()
        .map(|t| desc(&t.dtype, &t.sizes, std::ptr::null_mut(), 0))
        .collect();
    (dev_in, ins, outs)
}

pub fn to_host(dev: *const c_void, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    // SAFETY: n bytes at both; null handle = blocking copy.
    let st = unsafe { (api().memcpy)(std::ptr::null(), v.as_mut_ptr().cast(), dev, n) };
    assert_eq!(st, ET_CUDA_STATUS_OK, "{}", last_error());
    v
}

/// A kernel that spins for `ns` nanoseconds (PTX, JIT-compiled by the driver).
pub const SPIN_PTX: &str = r#"
.version 7.0
.target sm_50
.address_size 64
.visible .entry spin(.param .u64 ns)
{
  .reg .u64 %t0, %t1, %d, %lim;
  .reg .pred %p;
  ld.param.u64 %lim, [ns];
  mov.u64 %t0, %globaltimer;
LOOP:
  mov.u64 %t1, %globaltimer;
  sub.u64 %d, %t1, %t0;
  setp.lt.u64 %p, %d, %lim;
  @%p bra LOOP;
  ret;
}
"#;
