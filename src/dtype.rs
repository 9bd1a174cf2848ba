//! Element types: [`DType`], the safe API's element type, and the c10
//! `ScalarType` codes it stands for (the integers the AOTI shim ABI,
//! ExecuTorch and the C API all use, and the layers below the safe API
//! keep), their sizes and names. The one dtype table of the crate.

use crate::error::{Error, Result};

/// A c10 `ScalarType` code. Any `i32` can be held; [`element_size`] tells
/// whether this backend knows it (then [`DType::try_from`] gives its [`DType`]).
pub type Code = i32;

/// c10 `ScalarType` codes.
pub mod codes {
    use super::Code;
    pub const UINT8: Code = 0;
    pub const INT8: Code = 1;
    pub const INT16: Code = 2;
    pub const INT32: Code = 3;
    pub const INT64: Code = 4;
    pub const FLOAT16: Code = 5;
    pub const FLOAT32: Code = 6;
    pub const FLOAT64: Code = 7;
    pub const COMPLEX32: Code = 8;
    pub const COMPLEX64: Code = 9;
    pub const COMPLEX128: Code = 10;
    pub const BOOL: Code = 11;
    pub const BFLOAT16: Code = 15;
    pub const FLOAT8_E5M2: Code = 23;
    pub const FLOAT8_E4M3FN: Code = 24;
    pub const FLOAT8_E5M2FNUZ: Code = 25;
    pub const FLOAT8_E4M3FNUZ: Code = 26;
    pub const UINT16: Code = 27;
    pub const UINT32: Code = 28;
    pub const UINT64: Code = 29;
}

use codes::*;

/// An element type this backend handles: every dtype of the table, and nothing else, so a
/// value of this type always has a size and a name. Its discriminant is its c10 `ScalarType`
/// code ([`DType::code`]); a code from elsewhere becomes a `DType` through
/// [`DType::try_from`], which refuses codes this backend does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum DType {
    UInt8 = UINT8,
    Int8 = INT8,
    Int16 = INT16,
    Int32 = INT32,
    Int64 = INT64,
    Float16 = FLOAT16,
    Float32 = FLOAT32,
    Float64 = FLOAT64,
    Complex32 = COMPLEX32,
    Complex64 = COMPLEX64,
    Complex128 = COMPLEX128,
    Bool = BOOL,
    BFloat16 = BFLOAT16,
    Float8E5M2 = FLOAT8_E5M2,
    Float8E4M3Fn = FLOAT8_E4M3FN,
    Float8E5M2Fnuz = FLOAT8_E5M2FNUZ,
    Float8E4M3Fnuz = FLOAT8_E4M3FNUZ,
    UInt16 = UINT16,
    UInt32 = UINT32,
    UInt64 = UINT64,
}

/// Every dtype, in code order.
const ALL: [DType; 20] = {
    use DType::*;
    [
        UInt8,
        Int8,
        Int16,
        Int32,
        Int64,
        Float16,
        Float32,
        Float64,
        Complex32,
        Complex64,
        Complex128,
        Bool,
        BFloat16,
        Float8E5M2,
        Float8E4M3Fn,
        Float8E5M2Fnuz,
        Float8E4M3Fnuz,
        UInt16,
        UInt32,
        UInt64,
    ]
};

fn find(code: Code) -> Option<DType> {
    ALL.iter().copied().find(|d| d.code() == code)
}

impl DType {
    /// Its c10 `ScalarType` code (float32 = 6, bfloat16 = 15, ...).
    pub const fn code(self) -> Code {
        self as Code
    }

    /// Bytes per element and name: the one dtype table.
    const fn info(self) -> (usize, &'static str) {
        use DType::*;
        match self {
            UInt8 => (1, "uint8"),
            Int8 => (1, "int8"),
            Int16 => (2, "int16"),
            Int32 => (4, "int32"),
            Int64 => (8, "int64"),
            Float16 => (2, "float16"),
            Float32 => (4, "float32"),
            Float64 => (8, "float64"),
            Complex32 => (4, "complex32"),
            Complex64 => (8, "complex64"),
            Complex128 => (16, "complex128"),
            Bool => (1, "bool"),
            BFloat16 => (2, "bfloat16"),
            Float8E5M2 => (1, "float8_e5m2"),
            Float8E4M3Fn => (1, "float8_e4m3fn"),
            Float8E5M2Fnuz => (1, "float8_e5m2fnuz"),
            Float8E4M3Fnuz => (1, "float8_e4m3fnuz"),
            UInt16 => (2, "uint16"),
            UInt32 => (4, "uint32"),
            UInt64 => (8, "uint64"),
        }
    }

    /// Bytes per element.
    pub const fn element_size(self) -> usize {
        self.info().0
    }
    /// Its name (`"float32"`).
    pub const fn name(self) -> &'static str {
        self.info().1
    }
    /// The dtype of a name (`"bfloat16"`), `None` for unknown names.
    pub fn from_name(name: &str) -> Option<DType> {
        ALL.iter().copied().find(|d| d.name() == name)
    }
}

impl TryFrom<Code> for DType {
    type Error = Error;
    /// The dtype of a c10 `ScalarType` code; an `InvalidArgument` error naming a code this
    /// backend does not know.
    fn try_from(code: Code) -> Result<DType> {
        find(code).ok_or_else(|| Error::invalid_argument(format!("unknown dtype code {code}")))
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Bytes per element, `None` for codes this backend does not know.
pub fn element_size(code: Code) -> Option<usize> {
    find(code).map(DType::element_size)
}

/// The dtype's name (`"float32"`), `None` for unknown codes.
pub fn name(code: Code) -> Option<&'static str> {
    find(code).map(DType::name)
}

/// The dtype's name for a message: `"float32"`, or `"dtype code N"` for unknown codes.
pub fn describe(code: Code) -> String {
    name(code).map_or_else(|| format!("dtype code {code}"), str::to_string)
}

/// The code of a dtype name, `None` for unknown names.
pub fn from_name(name: &str) -> Option<Code> {
    DType::from_name(name).map(DType::code)
}

/// Element size or an `InvalidArgument` error naming the code.
pub(crate) fn checked_element_size(code: Code) -> Result<usize> {
    DType::try_from(code).map(DType::element_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        assert_eq!(element_size(FLOAT32), Some(4));
        assert_eq!(element_size(BFLOAT16), Some(2));
        assert_eq!(element_size(FLOAT16), Some(2));
        assert_eq!(element_size(INT64), Some(8));
        assert_eq!(element_size(BOOL), Some(1));
        assert_eq!(element_size(COMPLEX128), Some(16));
        assert_eq!(element_size(UINT64), Some(8));
        assert_eq!(element_size(12), None); // qint8
        assert_eq!(element_size(-1), None);
        assert!(checked_element_size(99).is_err());
        assert_eq!(name(BFLOAT16), Some("bfloat16"));
        assert_eq!(from_name("int64"), Some(INT64));
        assert_eq!(from_name("qint8"), None);
        let mut last = -1;
        for d in ALL {
            assert!(d.code() > last, "ALL in code order, each once");
            last = d.code();
            assert_eq!(from_name(d.name()), Some(d.code()));
            assert_eq!(DType::try_from(d.code()).unwrap(), d);
            assert_eq!(element_size(d.code()), Some(d.element_size()));
            assert_eq!(d.to_string(), d.name());
        }
        assert_eq!(DType::Float32.code(), 6);
        assert_eq!(DType::BFloat16.code(), 15);
        let e = DType::try_from(12).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
        assert!(e.to_string().contains("unknown dtype code 12"), "{e}");
    }
}
