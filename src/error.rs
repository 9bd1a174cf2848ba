//! Errors: one Rust error type for the whole crate, mapped to a C status
//! code at the FFI boundary, plus the per-thread "last error" message.

use std::cell::RefCell;
use std::ffi::{c_char, CString};

/// Status codes returned by every fallible `et_cuda_*` function.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtCudaStatus {
    /// Success.
    Ok = 0,
    /// A caller-supplied argument is wrong (null pointer, bad dtype, wrong count, wrong option type...).
    InvalidArgument = 1,
    /// No CUDA driver, no device, or the requested device index does not exist.
    NoDevice = 2,
    /// The program blobs are unusable (not an ELF, truncated, wrong architecture, weights size mismatch, hash mismatch).
    InvalidProgram = 3,
    /// The `.so` could not be opened or its container could not be created.
    LoadFailed = 4,
    /// The compiled model reported a failure while running.
    ExecutionFailed = 5,
    /// Device or pinned host memory could not be allocated.
    OutOfMemory = 6,
    /// Any other CUDA driver error.
    CudaError = 7,
    /// An internal invariant failed (a caught panic, for instance).
    Internal = 8,
    /// The option key is not known to this backend (`et_cuda_get_option_*` only).
    UnknownOption = 9,
}

/// The crate's error type.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    #[error("invalid program: {0}")]
    InvalidProgram(String),
    #[error("load failed: {0}")]
    LoadFailed(String),
    #[error("execution failed: {0}")]
    ExecutionFailed(String),
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    #[error("CUDA error: {0}")]
    Cuda(String),
    #[error("internal error: {0}")]
    Internal(String),
    #[error("unknown option: {0}")]
    UnknownOption(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn status(&self) -> EtCudaStatus {
        match self {
            Error::InvalidArgument(_) => EtCudaStatus::InvalidArgument,
            Error::NoDevice(_) => EtCudaStatus::NoDevice,
            Error::InvalidProgram(_) => EtCudaStatus::InvalidProgram,
            Error::LoadFailed(_) => EtCudaStatus::LoadFailed,
            Error::ExecutionFailed(_) => EtCudaStatus::ExecutionFailed,
            Error::OutOfMemory(_) => EtCudaStatus::OutOfMemory,
            Error::Cuda(_) => EtCudaStatus::CudaError,
            Error::Internal(_) => EtCudaStatus::Internal,
            Error::UnknownOption(_) => EtCudaStatus::UnknownOption,
        }
    }

    /// Prefix the message with some context, keeping the kind.
    pub fn context(self, what: &str) -> Error {
        let f = |m: String| format!("{what}: {m}");
        match self {
            Error::InvalidArgument(m) => Error::InvalidArgument(f(m)),
            Error::NoDevice(m) => Error::NoDevice(f(m)),
            Error::InvalidProgram(m) => Error::InvalidProgram(f(m)),
            Error::LoadFailed(m) => Error::LoadFailed(f(m)),
            Error::ExecutionFailed(m) => Error::ExecutionFailed(f(m)),
            Error::OutOfMemory(m) => Error::OutOfMemory(f(m)),
            Error::Cuda(m) => Error::Cuda(f(m)),
            Error::Internal(m) => Error::Internal(f(m)),
            Error::UnknownOption(m) => Error::UnknownOption(f(m)),
        }
    }
}

/// Shorthand constructors.
pub fn invalid<T>(msg: impl Into<String>) -> Result<T> {
    Err(Error::InvalidArgument(msg.into()))
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Record `msg` as this thread's last error (also logged).
pub fn set_last_error(msg: &str) {
    log::error!("{msg}");
    let c = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// Clear this thread's last error.
pub fn clear_last_error() {
    LAST_ERROR.with(|e| *e.borrow_mut() = CString::default());
}

/// This thread's last error message (empty when the last call succeeded).
pub fn last_error_message() -> String {
    LAST_ERROR.with(|e| e.borrow().to_string_lossy().into_owned())
}

/// Pointer to this thread's last error; valid until the next call on this thread.
pub fn last_error_ptr() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}
