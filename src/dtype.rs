//! Element types: c10 `ScalarType` codes (the integers the AOTI shim ABI,
//! ExecuTorch and the C API all use), their sizes and names. The one dtype
//! table of the crate.

/// A c10 `ScalarType` code. Any `i32` can be held; [`element_size`] tells
/// whether this backend knows it.
pub type DType = i32;

/// c10 `ScalarType` codes.
pub mod codes {
    use super::DType;
    pub const UINT8: DType = 0;
    pub const INT8: DType = 1;
    pub const INT16: DType = 2;
    pub const INT32: DType = 3;
    pub const INT64: DType = 4;
    pub const FLOAT16: DType = 5;
    pub const FLOAT32: DType = 6;
    pub const FLOAT64: DType = 7;
    pub const COMPLEX32: DType = 8;
    pub const COMPLEX64: DType = 9;
    pub const COMPLEX128: DType = 10;
    pub const BOOL: DType = 11;
    pub const BFLOAT16: DType = 15;
    pub const FLOAT8_E5M2: DType = 23;
    pub const FLOAT8_E4M3FN: DType = 24;
    pub const FLOAT8_E5M2FNUZ: DType = 25;
    pub const FLOAT8_E4M3FNUZ: DType = 26;
    pub const UINT16: DType = 27;
    pub const UINT32: DType = 28;
    pub const UINT64: DType = 29;
}

use codes::*;

/// (code, bytes per element, name) of every dtype this backend handles.
const TABLE: &[(DType, usize, &str)] = &[
    (UINT8, 1, "uint8"),
    (INT8, 1, "int8"),
    (INT16, 2, "int16"),
    (INT32, 4, "int32"),
    (INT64, 8, "int64"),
    (FLOAT16, 2, "float16"),
    (FLOAT32, 4, "float32"),
    (FLOAT64, 8, "float64"),
    (COMPLEX32, 4, "complex32"),
    (COMPLEX64, 8, "complex64"),
    (COMPLEX128, 16, "complex128"),
    (BOOL, 1, "bool"),
    (BFLOAT16, 2, "bfloat16"),
    (FLOAT8_E5M2, 1, "float8_e5m2"),
    (FLOAT8_E4M3FN, 1, "float8_e4m3fn"),
    (FLOAT8_E5M2FNUZ, 1, "float8_e5m2fnuz"),
    (FLOAT8_E4M3FNUZ, 1, "float8_e4m3fnuz"),
    (UINT16, 2, "uint16"),
    (UINT32, 4, "uint32"),
    (UINT64, 8, "uint64"),
];

/// Bytes per element, `None` for codes this backend does not know.
pub fn element_size(code: DType) -> Option<usize> {
    TABLE.iter().find(|e| e.0 == code).map(|e| e.1)
}

/// The dtype's name (`"float32"`), `None` for unknown codes.
pub fn name(code: DType) -> Option<&'static str> {
    TABLE.iter().find(|e| e.0 == code).map(|e| e.2)
}

/// The dtype's name for a message: `"float32"`, or `"dtype code N"` for unknown codes.
pub fn describe(code: DType) -> String {
    name(code).map_or_else(|| format!("dtype code {code}"), str::to_string)
}

/// The code of a dtype name, `None` for unknown names.
pub fn from_name(name: &str) -> Option<DType> {
    TABLE.iter().find(|e| e.2 == name).map(|e| e.0)
}

/// Element size or an `InvalidArgument` error naming the code.
pub(crate) fn checked_element_size(code: DType) -> crate::Result<usize> {
    element_size(code)
        .ok_or_else(|| crate::Error::invalid_argument(format!("unknown dtype code {code}")))
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
        for (c, _, n) in TABLE {
            assert_eq!(from_name(n), Some(*c));
        }
    }
}
