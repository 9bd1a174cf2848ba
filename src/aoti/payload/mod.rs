//! The delegate's processed payload: where a method's `.so` and weights are
//! in the program's named data. Three forms, all untrusted bytes:
//! - empty (ExecuTorch 1.2): keys `<method>_so_blob` and `<method>_weights_blob`;
//! - text `"<so_key>\n<weights_key>"` (ExecuTorch 1.3/1.4);
//! - binary `ETCUDAFQN3` (ExecuTorch 1.5): the `.so` key, then one entry per
//!   constant storage (original FQN, named-data key, byte count, dtype,
//!   device, storage offset, sizes, strides); each storage is its own named
//!   data entry, shared by every method of the program that uses it.

use crate::error::{Error, ErrorKind, Result};
use crate::tensor::{self, device_type};
use std::collections::HashSet;

/// The magic that starts a binary payload.
pub(crate) const FQN_MAGIC: &[u8] = b"ETCUDAFQN3";
/// Most entries and string bytes a payload may declare (bounds on untrusted
/// input); ranks are bounded by the tensor layer's [`tensor::MAX_RANK`].
const MAX_ENTRIES: u32 = 1 << 20;
const MAX_STRING: u32 = 1 << 16;

/// One constant storage named by a binary payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FqnEntry {
    pub(crate) fqn: String,
    pub(crate) storage_key: std::sync::Arc<str>,
    pub(crate) storage_nbytes: u64,
    pub(crate) dtype: i32,
    pub(crate) device_type: i32,
    pub(crate) storage_offset: i64,
    pub(crate) sizes: Dims,
    pub(crate) strides: Dims,
}

/// An entry's sizes or strides: held in the entry up to rank [`Dims::INLINE`] (every
/// constant of a decoder), on the heap above it. A payload has up to 2^20 entries, and two
/// heap vectors each made its load allocation-bound.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Dims {
    Inline { len: u8, dims: [i64; Dims::INLINE] },
    Heap(Vec<i64>),
}

impl Dims {
    pub(crate) const INLINE: usize = 4;

    /// `n` values, each from `next` (its first error ends the read).
    fn read(n: usize, mut next: impl FnMut() -> Result<i64>) -> Result<Dims> {
        if n > Self::INLINE {
            return (0..n)
                .map(|_| next())
                .collect::<Result<_>>()
                .map(Dims::Heap);
        }
        let mut dims = [0; Self::INLINE];
        for d in &mut dims[..n] {
            *d = next()?;
        }
        Ok(Dims::Inline { len: n as u8, dims })
    }
}

impl std::ops::Deref for Dims {
    type Target = [i64];
    fn deref(&self) -> &[i64] {
        match self {
            Dims::Inline { len, dims } => &dims[..*len as usize],
            Dims::Heap(v) => v,
        }
    }
}

impl From<Vec<i64>> for Dims {
    fn from(v: Vec<i64>) -> Dims {
        if v.len() > Self::INLINE {
            return Dims::Heap(v);
        }
        let mut dims = [0; Self::INLINE];
        dims[..v.len()].copy_from_slice(&v);
        Dims::Inline {
            len: v.len() as u8,
            dims,
        }
    }
}

impl std::fmt::Debug for Dims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl FqnEntry {
    /// What the metadata alone can tell: a device this backend places storages on,
    /// and a view that fits the declared byte count (the upload's own limits:
    /// rank, dtype, no overflow, at most `isize::MAX` bytes).
    pub(crate) fn check_metadata(&self) -> Result<()> {
        if self.device_type != device_type::CPU && self.device_type != device_type::CUDA {
            return Err(Error::invalid_program(format!(
                "constant {} (storage {}) is on device type {} (only CPU 0 and CUDA 1)",
                self.fqn, self.storage_key, self.device_type
            )));
        }
        let nbytes = usize::try_from(self.storage_nbytes)
            .ok()
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or_else(|| {
                Error::invalid_program(format!(
                    "constant {} (storage {}) declares {} bytes, more than an allocation can have",
                    self.fqn, self.storage_key, self.storage_nbytes
                ))
            })?;
        self.check_view(nbytes)
    }

    /// The storage the program holds for this entry must have the size the metadata declares.
    /// `what` names the storage in the error (made only then).
    pub(crate) fn check_storage(&self, bytes: usize, what: &dyn Fn() -> String) -> Result<()> {
        if bytes as u64 != self.storage_nbytes {
            return Err(Error::invalid_program(format!(
                "{} has {bytes} bytes but the metadata declares {}",
                what(),
                self.storage_nbytes
            )));
        }
        Ok(())
    }

    /// Whether this entry's view (dtype, sizes, strides, offset) fits `nbytes`
    /// storage bytes: the very check the upload's [`tensor::Tensor::view`] makes on a
    /// storage of that size ([`tensor::check_view`]), so a view accepted here is
    /// accepted there.
    pub(crate) fn check_view(&self, nbytes: usize) -> Result<()> {
        tensor::check_view(
            self.dtype,
            &self.sizes,
            &self.strides,
            self.storage_offset,
            nbytes,
        )
        .map_err(|e| {
            Error::invalid_program(format!(
                "constant {} (storage {}): its view (dtype {}, sizes {:?}, strides {:?}, offset {}) does not fit {nbytes} bytes: {}",
                self.fqn,
                self.storage_key,
                self.dtype,
                self.sizes,
                self.strides,
                self.storage_offset,
                inner(e)
            ))
        })
    }
}

/// An error's message without its kind (for an error that becomes part of another).
fn inner(e: Error) -> String {
    match e.kind() {
        ErrorKind::InvalidArgument | ErrorKind::InvalidProgram => e.message().to_string(),
        _ => e.to_string(),
    }
}

/// Where a method's blobs are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Payload {
    /// One weights blob in the container's packed layout.
    Keys { so_key: String, weights_key: String },
    /// One named-data entry per constant storage.
    PerFqn {
        so_key: String,
        entries: Vec<FqnEntry>,
    },
}

fn bad(what: impl Into<String>) -> Error {
    Error::invalid_program(format!(
        "the delegate payload is malformed: {}",
        what.into()
    ))
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

/// What a field is, made only when an error names it (a payload has up to 2^20 entries).
type What<'w> = &'w dyn Fn() -> String;

impl Reader<'_> {
    fn take(&mut self, n: usize, what: What<'_>) -> Result<&[u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| {
                bad(format!(
                    "{} at byte {} runs past its end ({} bytes)",
                    what(),
                    self.at,
                    self.b.len()
                ))
            })?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self, what: What<'_>) -> Result<u32> {
        let s = self.take(4, what)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self, what: What<'_>) -> Result<u64> {
        let s = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }
    fn i32(&mut self, what: What<'_>) -> Result<i32> {
        Ok(self.u32(what)? as i32)
    }
    fn i64(&mut self, what: What<'_>) -> Result<i64> {
        Ok(self.u64(what)? as i64)
    }
    fn str(&mut self, what: What<'_>) -> Result<&str> {
        let n = self.u32(what)?;
        if n > MAX_STRING {
            return Err(bad(format!("{} claims {n} bytes", what())));
        }
        let s = self.take(n as usize, what)?;
        std::str::from_utf8(s).map_err(|_| bad(format!("{} is not UTF-8", what())))
    }
    fn string(&mut self, what: What<'_>) -> Result<String> {
        self.str(what).map(str::to_string)
    }
}

/// Parse a processed payload; `method` names the method for the empty form.
pub(crate) fn parse(payload: &[u8], method: &str) -> Result<Payload> {
    let trimmed = {
        let mut p = payload;
        while let Some((&last, rest)) = p.split_last() {
            if last == 0 || last == b'\n' || last == b'\r' {
                p = rest;
            } else {
                break;
            }
        }
        p
    };
    if trimmed.is_empty() {
        if method.is_empty() {
            return Err(Error::invalid_argument(
                "no method name and an empty delegate payload: the blobs cannot be named",
            ));
        }
        return Ok(Payload::Keys {
            so_key: format!("{method}_so_blob"),
            weights_key: format!("{method}_weights_blob"),
        });
    }
    if payload.starts_with(FQN_MAGIC) {
        return parse_fqn(payload);
    }
    let text = std::str::from_utf8(trimmed).map_err(|_| {
        bad(format!(
            "{} bytes that are neither text keys nor an {} payload",
            payload.len(),
            String::from_utf8_lossy(FQN_MAGIC)
        ))
    })?;
    let mut lines = text.split('\n').map(|l| l.trim_end_matches('\r'));
    match (lines.next(), lines.next(), lines.next()) {
        (Some(so), Some(w), None) if !so.is_empty() && !w.is_empty() => Ok(Payload::Keys {
            so_key: so.to_string(),
            weights_key: w.to_string(),
        }),
        _ => Err(bad(format!(
            "{} bytes of text that are not \"<so_key>\\n<weights_key>\"",
            payload.len()
        ))),
    }
}

/// The fewest bytes of one entry: two one-byte strings with their lengths, the byte count, dtype,
/// device, offset and rank.
const MIN_ENTRY_BYTES: usize = 2 * (4 + 1) + 8 + 4 + 4 + 8 + 4;

fn parse_fqn(payload: &[u8]) -> Result<Payload> {
    let mut r = Reader {
        b: payload,
        at: FQN_MAGIC.len(),
    };
    let so_key = r.string(&|| "the .so key".into())?;
    if so_key.is_empty() {
        return Err(bad("the .so key is empty"));
    }
    let n = r.u32(&|| "the entry count".into())?;
    if n > MAX_ENTRIES {
        return Err(bad(format!("{n} entries")));
    }
    // Reserved up front (growth copies every entry), bounded by what the bytes left can hold:
    // an entry takes at least MIN_ENTRY_BYTES.
    let mut entries =
        Vec::with_capacity((n as usize).min(payload.len().saturating_sub(r.at) / MIN_ENTRY_BYTES));
    for i in 0..n {
        let fqn = r.string(&|| format!("entry {i}'s FQN"))?;
        let storage_key: std::sync::Arc<str> =
            r.str(&|| format!("entry {i}'s storage key"))?.into();
        let storage_nbytes = r.u64(&|| format!("entry {i}'s byte count"))?;
        let dtype = r.i32(&|| format!("entry {i}'s dtype"))?;
        let device_type = r.i32(&|| format!("entry {i}'s device"))?;
        let storage_offset = r.i64(&|| format!("entry {i}'s storage offset"))?;
        if fqn.is_empty() {
            return Err(bad(format!("entry {i}'s FQN is empty")));
        }
        if storage_key.is_empty() {
            return Err(bad(format!("entry {i} ({fqn}) has an empty storage key")));
        }
        let ndim = r.u32(&|| format!("entry {i}'s rank"))?;
        if ndim as usize > tensor::MAX_RANK {
            return Err(bad(format!(
                "entry {i} ({fqn}) has rank {ndim}, above the limit of {}",
                tensor::MAX_RANK
            )));
        }
        let sizes = Dims::read(ndim as usize, || r.i64(&|| format!("entry {i}'s sizes")))?;
        let strides = Dims::read(ndim as usize, || r.i64(&|| format!("entry {i}'s strides")))?;
        let e = FqnEntry {
            fqn,
            storage_key,
            storage_nbytes,
            dtype,
            device_type,
            storage_offset,
            sizes,
            strides,
        };
        e.check_metadata()
            .map_err(|err| bad(format!("entry {i}: {}", inner(err))))?;
        entries.push(e);
    }
    if r.at != payload.len() {
        return Err(bad(format!(
            "{} bytes left after {n} entries",
            payload.len() - r.at
        )));
    }
    let mut seen = HashSet::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        if !seen.insert(e.fqn.as_str()) {
            return Err(bad(format!("entry {i} repeats the FQN {}", e.fqn)));
        }
    }
    Ok(Payload::PerFqn { so_key, entries })
}

/// Encode a binary payload: the tests' and the fuzz bodies' own writer of the
/// documented layout (the library only reads payloads).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn encode(so_key: &str, entries: &[FqnEntry]) -> Vec<u8> {
    let mut o = FQN_MAGIC.to_vec();
    let s = |o: &mut Vec<u8>, v: &str| {
        o.extend((v.len() as u32).to_le_bytes());
        o.extend(v.as_bytes());
    };
    s(&mut o, so_key);
    o.extend((entries.len() as u32).to_le_bytes());
    for e in entries {
        s(&mut o, &e.fqn);
        s(&mut o, &e.storage_key);
        o.extend(e.storage_nbytes.to_le_bytes());
        o.extend(e.dtype.to_le_bytes());
        o.extend(e.device_type.to_le_bytes());
        o.extend(e.storage_offset.to_le_bytes());
        o.extend((e.sizes.len() as u32).to_le_bytes());
        for v in e.sizes.iter() {
            o.extend(v.to_le_bytes());
        }
        for v in e.strides.iter() {
            o.extend(v.to_le_bytes());
        }
    }
    o
}

/// Fuzz body (`fuzz/fuzz_targets/payload.rs`, and a test over `fuzz/seeds/payload`):
/// any bytes parse or fail with a clean error, and what parses keeps the
/// parser's promises (non-empty keys, unique FQNs, views that fit, exact layout).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn fuzz_parse(data: &[u8]) {
    for method in ["forward", ""] {
        match parse(data, method) {
            Ok(Payload::Keys {
                so_key,
                weights_key,
            }) => {
                for k in [&so_key, &weights_key] {
                    assert!(
                        !k.is_empty() && !k.contains('\n') && !k.ends_with('\r'),
                        "{k:?}"
                    );
                }
            }
            Ok(Payload::PerFqn { so_key, entries }) => {
                assert!(!so_key.is_empty());
                let mut seen = HashSet::new();
                for e in &entries {
                    assert!(!e.fqn.is_empty() && !e.storage_key.is_empty(), "{e:?}");
                    assert!(seen.insert(e.fqn.as_str()), "duplicate {}", e.fqn);
                    assert!(e.sizes.len() <= tensor::MAX_RANK);
                    if let Err(err) = e.check_view(e.storage_nbytes as usize) {
                        panic!("parsed an entry whose view the upload refuses: {err}");
                    }
                }
                assert_eq!(encode(&so_key, &entries), data, "not an exact parse");
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::InvalidProgram | ErrorKind::InvalidArgument
                ) => {}
            Err(e) => panic!("unexpected error kind: {e:?}"),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
