//! Device and stream guards, the current stream and device.

use super::{out, AOTITorchError};
use super::{Aoti, AotiDelete};
use crate::boundary::{guard, non_null_mut};
use crate::cuda::{self, stream::StreamScope, ContextGuard};
use crate::error::Result;
use cudarc::driver::sys::CUcontext;
use std::ffi::c_void;

/// `CUDAGuardHandle`: makes a device's primary context current; deleting it
/// restores the context that was current when it was created.
pub struct CudaGuard {
    prev: Option<CUcontext>,
    device_index: i32,
}

/// `CUDAStreamGuardHandle`: the stream is this thread's current stream for its device (and the
/// device's context is current) until deleted.
pub struct CudaStreamGuard {
    _scope: StreamScope,
    _ctx: ContextGuard,
}

fn set_device(device_index: i32) -> Result<()> {
    if device_index < 0 {
        return Ok(());
    }
    cuda::set_current_device(device_index)
}

impl Drop for CudaGuard {
    fn drop(&mut self) {
        if let Err(e) = cuda::restore_context(self.prev) {
            log::warn!("CUDA guard could not restore the context: {e}");
        }
    }
}

fn device_or_current(device_index: i32) -> i32 {
    if device_index < 0 {
        cuda::current_device_ordinal()
    } else {
        device_index
    }
}

/// Make `device_index` current until the guard is deleted.
///
/// # Safety
/// `ret_guard` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_create_cuda_guard(
    device_index: i32,
    ret_guard: *mut *mut CudaGuard,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_create_cuda_guard", || {
        let prev = cuda::current_context()?;
        set_device(device_index)?;
        let g = Box::into_raw(Box::new(CudaGuard { prev, device_index }));
        // SAFETY: forwarded contract.
        unsafe { out(ret_guard, g) }.inspect_err(|_| {
            // SAFETY: the box made just above, never handed out.
            drop(unsafe { Box::from_raw(g) });
        })
    })
}

/// Switch the guard's device.
///
/// # Safety
/// `guard` must be null or a live guard from `aoti_torch_create_cuda_guard`.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_cuda_guard_set_index(
    guard_: *mut CudaGuard,
    device_index: i32,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_cuda_guard_set_index", || {
        // SAFETY: forwarded contract.
        let g = unsafe { non_null_mut(guard_, "guard")? };
        if g.device_index != device_index {
            set_device(device_index)?;
            g.device_index = device_index;
        }
        Ok(())
    })
}

/// Runs in the `.so`'s destructors: always returns success.
///
/// # Safety
/// `guard` must be null or a live guard, deleted once.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_delete_cuda_guard(guard_: *mut CudaGuard) -> AOTITorchError {
    guard::<AotiDelete>("aoti_torch_delete_cuda_guard", || {
        if !guard_.is_null() {
            // SAFETY: a box from aoti_torch_create_cuda_guard, deleted once (the contract).
            drop(unsafe { Box::from_raw(guard_) });
        }
        Ok(())
    })
}

/// Make `stream` this thread's current stream for its device until the guard is deleted.
///
/// # Safety
/// `stream` must be a live stream of that device (or null, the legacy stream) while the guard
/// lives; `ret_guard` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_create_cuda_stream_guard(
    stream: *mut c_void,
    device_index: i32,
    ret_guard: *mut *mut CudaStreamGuard,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_create_cuda_stream_guard", || {
        let dev = device_or_current(device_index);
        let d = cuda::device(dev)?;
        let ctx = ContextGuard::device(&d)?;
        let scope = StreamScope::enter(dev, stream.cast(), None);
        let g = Box::into_raw(Box::new(CudaStreamGuard {
            _scope: scope,
            _ctx: ctx,
        }));
        // SAFETY: forwarded contract.
        unsafe { out(ret_guard, g) }.inspect_err(|_| {
            // SAFETY: the box made just above, never handed out.
            drop(unsafe { Box::from_raw(g) });
        })
    })
}

/// Runs in the `.so`'s destructors: always returns success.
///
/// # Safety
/// `guard` must be null or a live stream guard, deleted once, on the thread that made it.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_delete_cuda_stream_guard(
    guard_: *mut CudaStreamGuard,
) -> AOTITorchError {
    guard::<AotiDelete>("aoti_torch_delete_cuda_stream_guard", || {
        if !guard_.is_null() {
            // SAFETY: a box from aoti_torch_create_cuda_stream_guard, deleted once (the contract).
            drop(unsafe { Box::from_raw(guard_) });
        }
        Ok(())
    })
}

/// This thread's current stream for the device (set by stream guards and by execute).
///
/// # Safety
/// `ret_stream` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_get_current_cuda_stream(
    device_index: i32,
    ret_stream: *mut *mut c_void,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_get_current_cuda_stream", || {
        let s = cuda::stream::current(device_or_current(device_index))
            .raw
            .cast();
        // SAFETY: forwarded contract.
        unsafe { out(ret_stream, s) }
    })
}

/// The device whose context is current on this thread.
///
/// # Safety
/// `ret_device_index` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_get_current_device_index(
    ret_device_index: *mut i32,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_get_current_device_index", || {
        // SAFETY: forwarded contract.
        unsafe { out(ret_device_index, cuda::current_device_ordinal()) }
    })
}

/// Device-generic guard: the same as the CUDA guard here.
///
/// # Safety
/// As for `aoti_torch_create_cuda_guard`.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_create_device_guard(
    device_index: i32,
    ret_guard: *mut *mut CudaGuard,
) -> AOTITorchError {
    // SAFETY: same contract.
    unsafe { aoti_torch_create_cuda_guard(device_index, ret_guard) }
}

/// # Safety
/// As for `aoti_torch_cuda_guard_set_index`.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_device_guard_set_index(
    guard_: *mut CudaGuard,
    device_index: i32,
) -> AOTITorchError {
    // SAFETY: same contract.
    unsafe { aoti_torch_cuda_guard_set_index(guard_, device_index) }
}

/// # Safety
/// As for `aoti_torch_delete_cuda_guard`.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_delete_device_guard(guard_: *mut CudaGuard) -> AOTITorchError {
    // SAFETY: same contract.
    unsafe { aoti_torch_delete_cuda_guard(guard_) }
}
