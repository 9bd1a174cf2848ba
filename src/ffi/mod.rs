//! The C API: the `et_cuda_*` functions ([`api`], [`memory`], [`options`]) and their C
//! types ([`types`]), over the public safe API. The `aoti_torch_*` shim ABI that the
//! generated code imports is its own layer beside this one ([`crate::shim`]); both go
//! through the one boundary discipline of `crate::boundary` (one guard for every
//! `extern "C"` body, null checks through one set of helpers, the thread's last error).
//! `et_cuda_*` functions report [`EtCudaStatus`] codes (the `EtCuda` kind); a success
//! clears the last error.
//!
//! Ownership rules, one per handle type:
//! - `EtCudaHandle*` (C API): a key into a process-wide table of live
//!   methods, created by `et_cuda_init`, owned by the caller, destroyed
//!   exactly once by `et_cuda_destroy` (see [`api`]).
//! - `AtenTensorHandle` (shim ABI): a boxed tensor; whoever receives a new
//!   reference owns it and releases it with `aoti_torch_delete_tensor_object`.
//!   The storage behind it is shared by views (reference counted).
//! - CUDA guard / stream guard handles (shim ABI): boxes deleted by their
//!   `aoti_torch_delete_*` function.
//! - Device memory from `et_cuda_alloc_device` / `et_cuda_device_allocate`:
//!   owned by the caller until the matching free.
//! - Pointers returned by getters (`aoti_torch_get_sizes`, `et_cuda_last_error`)
//!   are borrowed: valid while the object lives / until the next call.

pub mod api;
pub mod memory;
pub mod options;
pub mod sample;
pub mod types;

pub use types::*;

pub use crate::boundary::last_error_message;
#[cfg(feature = "test-hooks")]
pub use crate::boundary::FORCE_PANIC;
pub(crate) use crate::boundary::{
    c_str, guard, guard_value, last_error_ptr, non_null, slice_from, slice_from_mut, write_out, Abi,
};
use crate::error::Error;

/// `et_cuda_*` functions: [`EtCudaStatus`] codes.
pub(crate) struct EtCuda;
impl Abi for EtCuda {
    type Out = EtCudaStatus;
    fn success() -> EtCudaStatus {
        ET_CUDA_STATUS_OK
    }
    fn failure(e: &Error) -> EtCudaStatus {
        status_of(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::boundary::*;
    use crate::shim::{self, Aoti, AotiDelete};

    #[test]
    fn panic_becomes_internal_status_with_its_message() {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let st = guard::<EtCuda>("test_fn", || panic!("forced panic for the test"));
        let st2 = guard::<Aoti>("test_shim", || panic!("shim panic"));
        let st3 = guard::<AotiDelete>("test_delete", || panic!("delete panic"));
        std::panic::set_hook(hook);
        assert_eq!(st, ET_CUDA_STATUS_INTERNAL);
        assert_eq!(st2, shim::AOTI_TORCH_FAILURE);
        assert_eq!(st3, shim::AOTI_TORCH_SUCCESS);
        let msg = last_error_message();
        assert!(msg.contains("shim panic"), "{msg}");
        assert!(msg.contains("test_shim"), "{msg}");
    }

    #[test]
    fn error_becomes_status_and_message_and_success_clears_it() {
        let st = guard::<EtCuda>("f", || Err(Error::invalid_argument("x is bad")));
        assert_eq!(st, ET_CUDA_STATUS_INVALID_ARGUMENT);
        assert!(last_error_message().contains("x is bad"));
        assert_eq!(guard::<EtCuda>("f", || Ok(())), ET_CUDA_STATUS_OK);
        assert_eq!(last_error_message(), "");
        let st = guard::<Aoti>("g", || Err(Error::invalid_argument("y is bad")));
        assert_eq!(st, shim::AOTI_TORCH_FAILURE);
        assert!(last_error_message().contains("y is bad"));
        // Deletes neither report nor clear.
        assert_eq!(
            guard::<AotiDelete>("d", || Err(Error::internal("z"))),
            shim::AOTI_TORCH_SUCCESS
        );
        assert!(last_error_message().contains("y is bad"));
        assert_eq!(guard::<Aoti>("g", || Ok(())), shim::AOTI_TORCH_SUCCESS);
        assert_eq!(last_error_message(), "");
    }

    #[test]
    fn null_checks() {
        // SAFETY: null pointers are what is being tested.
        unsafe {
            assert!(non_null::<u8>(std::ptr::null(), "p").is_err());
            assert!(slice_from::<u8>(std::ptr::null(), 0, "p").is_ok());
            assert!(slice_from::<u8>(std::ptr::null(), 3, "p").is_err());
            assert!(c_str(std::ptr::null(), "s", true).unwrap().is_none());
            assert!(c_str(std::ptr::null(), "s", false).is_err());
            assert!(dims_from_raw(std::ptr::null(), 17, "d").is_err());
            assert!(dims_from_raw(std::ptr::null(), -1, "d").is_err());
        }
    }
}
