//! The crate's error type. The C boundary (`ffi`) maps each kind to a status
//! code and keeps the message as the thread's last error; nothing here knows
//! about C.

use std::cell::RefCell;

/// The crate's error type: a kind plus a message that names what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A caller-supplied argument is wrong.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// No CUDA driver, no device, or no such device.
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    /// The program's blobs are unusable.
    #[error("invalid program: {0}")]
    InvalidProgram(String),
    /// The `.so` could not be opened or its container created.
    #[error("load failed: {0}")]
    LoadFailed(String),
    /// The compiled model reported a failure while running.
    #[error("execution failed: {0}")]
    ExecutionFailed(String),
    /// Device or host memory could not be allocated.
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    /// Any other CUDA driver error.
    #[error("CUDA error: {0}")]
    Cuda(String),
    /// An internal invariant failed (a caught panic, for instance).
    #[error("internal error: {0}")]
    Internal(String),
    /// An option key this backend does not know.
    #[error("unknown option: {0}")]
    UnknownOption(String),
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
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

/// Shorthand for an `InvalidArgument` error.
pub(crate) fn invalid<T>(msg: impl Into<String>) -> Result<T> {
    Err(Error::InvalidArgument(msg.into()))
}

thread_local! {
    /// The first failure the generated code's callbacks (the shims) reported on
    /// this thread since the last [`take_callback_failure`].
    static CALLBACK_FAILURE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Remember a callback failure (the first one wins) so that the container
/// can name it when the run as a whole fails.
pub(crate) fn note_callback_failure(msg: &str) {
    CALLBACK_FAILURE.with(|f| {
        let mut f = f.borrow_mut();
        if f.is_none() {
            *f = Some(msg.to_string());
        }
    });
}

/// Take (and clear) the first callback failure recorded on this thread.
pub(crate) fn take_callback_failure() -> Option<String> {
    CALLBACK_FAILURE.with(|f| f.borrow_mut().take())
}
