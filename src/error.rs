//! The crate's error type: a kind, a message that names what was wrong, and
//! the CUDA driver's result code where one caused it. The C boundary (`ffi`)
//! maps each kind to a status code and keeps the message as the thread's last
//! error; nothing here knows about C.

use std::cell::RefCell;
use std::fmt;

/// What went wrong, in the categories callers act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A caller-supplied argument is wrong.
    InvalidArgument,
    /// No CUDA driver, no device, or no such device.
    NoDevice,
    /// The program's blobs are unusable.
    InvalidProgram,
    /// The `.so` could not be opened or its container created.
    LoadFailed,
    /// The compiled model reported a failure while running.
    ExecutionFailed,
    /// Device or host memory could not be allocated.
    OutOfMemory,
    /// Any other CUDA driver error.
    Cuda,
    /// An internal invariant failed (a caught panic, for instance).
    Internal,
    /// An option key this backend does not know.
    UnknownOption,
}

impl ErrorKind {
    /// The prefix of messages of this kind.
    pub fn describe(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::NoDevice => "no CUDA device",
            ErrorKind::InvalidProgram => "invalid program",
            ErrorKind::LoadFailed => "load failed",
            ErrorKind::ExecutionFailed => "execution failed",
            ErrorKind::OutOfMemory => "out of memory",
            ErrorKind::Cuda => "CUDA error",
            ErrorKind::Internal => "internal error",
            ErrorKind::UnknownOption => "unknown option",
        }
    }
}

/// The crate's error: a kind, a message and, when a driver call failed, its
/// `CUresult` code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    cuda_code: Option<i32>,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.describe(), self.message)
    }
}

impl std::error::Error for Error {}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;

macro_rules! constructors {
    ($($(#[$m:meta])* $name:ident => $kind:ident;)*) => {
        impl Error {
            $(
                $(#[$m])*
                pub fn $name(message: impl Into<String>) -> Error {
                    Error::new(ErrorKind::$kind, message)
                }
            )*
        }
    };
}

constructors! {
    /// An [`ErrorKind::InvalidArgument`] error.
    invalid_argument => InvalidArgument;
    /// An [`ErrorKind::NoDevice`] error.
    no_device => NoDevice;
    /// An [`ErrorKind::InvalidProgram`] error.
    invalid_program => InvalidProgram;
    /// An [`ErrorKind::LoadFailed`] error.
    load_failed => LoadFailed;
    /// An [`ErrorKind::ExecutionFailed`] error.
    execution_failed => ExecutionFailed;
    /// An [`ErrorKind::OutOfMemory`] error.
    out_of_memory => OutOfMemory;
    /// An [`ErrorKind::Cuda`] error.
    cuda => Cuda;
    /// An [`ErrorKind::Internal`] error.
    internal => Internal;
    /// An [`ErrorKind::UnknownOption`] error.
    unknown_option => UnknownOption;
}

impl Error {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            cuda_code: None,
        }
    }

    /// An error caused by the CUDA driver returning `code`.
    pub fn from_cuda(kind: ErrorKind, code: i32, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            cuda_code: Some(code),
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without the kind's prefix.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The driver's `CUresult` when a driver call caused the error.
    pub fn cuda_code(&self) -> Option<i32> {
        self.cuda_code
    }

    /// Prefix the message with some context, keeping the kind and the code.
    pub fn context(mut self, what: &str) -> Error {
        self.message = format!("{what}: {}", self.message);
        self
    }

    /// Append to the message, keeping the kind and the code.
    pub fn with_suffix(mut self, more: &str) -> Error {
        self.message.push_str(more);
        self
    }
}

/// Shorthand for an `InvalidArgument` error.
pub(crate) fn invalid<T>(msg: impl Into<String>) -> Result<T> {
    Err(Error::invalid_argument(msg))
}

impl From<std::ffi::NulError> for Error {
    fn from(e: std::ffi::NulError) -> Error {
        Error::invalid_argument(format!(
            "string contains a NUL byte at {}",
            e.nul_position()
        ))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_message_code_and_context() {
        let e = Error::from_cuda(ErrorKind::OutOfMemory, 2, "cuMemAlloc failed");
        assert_eq!(e.kind(), ErrorKind::OutOfMemory);
        assert_eq!(e.cuda_code(), Some(2));
        let e = e.context("input 0");
        assert_eq!(e.kind(), ErrorKind::OutOfMemory);
        assert_eq!(e.cuda_code(), Some(2));
        assert_eq!(e.message(), "input 0: cuMemAlloc failed");
        assert_eq!(e.to_string(), "out of memory: input 0: cuMemAlloc failed");
        assert_eq!(Error::invalid_argument("x").cuda_code(), None);
    }
}
