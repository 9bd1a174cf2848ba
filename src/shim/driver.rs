//! The one CUDA driver function this library serves to the generated code:
//! `cuModuleLoadData`. The `.so` imports it from the global scope, where
//! this library comes before `libcuda` (which the `.so` only names as its own
//! dependency), so its kernel loads come here. Each load is passed to the
//! driver unchanged and recorded for the container it was made for
//! (`crate::aoti::owned`), which unloads the module when that container is
//! deleted: the generated code loads its kernels once per model instance and
//! never unloads them. Loads made outside a container's calls (any other
//! library in the process that binds this symbol) are only passed through.

use crate::boundary::guard_value;
use cudarc::driver::sys;
use std::ffi::c_void;

/// `cuModuleLoadData`, passed through to the driver and recorded (see the module docs).
///
/// # Safety
/// As for the driver's `cuModuleLoadData`: `module` valid for a write, `image` a module image.
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(
    module: *mut sys::CUmodule,
    image: *const c_void,
) -> sys::CUresult {
    guard_value(
        "cuModuleLoadData",
        sys::CUresult::CUDA_ERROR_UNKNOWN,
        || {
            if crate::cuda::driver().is_err() {
                return sys::CUresult::CUDA_ERROR_NOT_INITIALIZED;
            }
            // SAFETY: forwarded contract (cudarc calls the driver's own function).
            let r = unsafe { sys::cuModuleLoadData(module, image) };
            if r == sys::CUresult::CUDA_SUCCESS && !module.is_null() {
                let mut ctx: sys::CUcontext = std::ptr::null_mut();
                // SAFETY: out-pointer to a local.
                let _ = unsafe { sys::cuCtxGetCurrent(&mut ctx) };
                // SAFETY: the driver wrote the new module through the caller's pointer.
                crate::aoti::owned::module_loaded(unsafe { *module }, ctx);
            }
            r
        },
    )
}
