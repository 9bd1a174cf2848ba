//! The delegate's processed payload: where a method's `.so` and weights are
//! in the program's named data. Three forms, all untrusted bytes:
//! - empty (ExecuTorch 1.2): keys `<method>_so_blob` and `<method>_weights_blob`;
//! - text `"<so_key>\n<weights_key>"` (ExecuTorch 1.3/1.4);
//! - binary `ETCUDAFQN3` (ExecuTorch 1.5): the `.so` key, then one entry per
//!   constant storage (original FQN, named-data key, byte count, dtype,
//!   device, storage offset, sizes, strides); each storage is its own named
//!   data entry, shared by every method of the program that uses it.

use crate::error::{Error, Result};

/// The magic that starts a binary payload.
pub(crate) const FQN_MAGIC: &[u8] = b"ETCUDAFQN3";
/// Most entries and dimensions a payload may declare (bounds on untrusted input).
const MAX_ENTRIES: u32 = 1 << 20;
const MAX_NDIM: u32 = 64;
const MAX_STRING: u32 = 1 << 16;

/// One constant storage named by a binary payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FqnEntry {
    pub(crate) fqn: String,
    pub(crate) storage_key: String,
    pub(crate) storage_nbytes: u64,
    pub(crate) dtype: i32,
    pub(crate) device_type: i32,
    pub(crate) storage_offset: i64,
    pub(crate) sizes: Vec<i64>,
    pub(crate) strides: Vec<i64>,
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

impl Reader<'_> {
    fn take(&mut self, n: usize, what: &str) -> Result<&[u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| {
                bad(format!(
                    "{what} at byte {} runs past its end ({} bytes)",
                    self.at,
                    self.b.len()
                ))
            })?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        let s = self.take(4, what)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        let s = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }
    fn i32(&mut self, what: &str) -> Result<i32> {
        Ok(self.u32(what)? as i32)
    }
    fn i64(&mut self, what: &str) -> Result<i64> {
        Ok(self.u64(what)? as i64)
    }
    fn string(&mut self, what: &str) -> Result<String> {
        let n = self.u32(what)?;
        if n > MAX_STRING {
            return Err(bad(format!("{what} claims {n} bytes")));
        }
        let s = self.take(n as usize, what)?;
        String::from_utf8(s.to_vec()).map_err(|_| bad(format!("{what} is not UTF-8")))
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
    let mut lines = text.split('\n');
    match (lines.next(), lines.next(), lines.next()) {
        (Some(so), Some(w), None) if !so.is_empty() && !w.is_empty() => Ok(Payload::Keys {
            so_key: so.trim_end_matches('\r').to_string(),
            weights_key: w.trim_end_matches('\r').to_string(),
        }),
        _ => Err(bad(format!(
            "{} bytes of text that are not \"<so_key>\\n<weights_key>\"",
            payload.len()
        ))),
    }
}

fn parse_fqn(payload: &[u8]) -> Result<Payload> {
    let mut r = Reader {
        b: payload,
        at: FQN_MAGIC.len(),
    };
    let so_key = r.string("the .so key")?;
    let n = r.u32("the entry count")?;
    if n > MAX_ENTRIES {
        return Err(bad(format!("{n} entries")));
    }
    let mut entries = Vec::new();
    for i in 0..n {
        let what = |f: &str| format!("entry {i}'s {f}");
        let fqn = r.string(&what("FQN"))?;
        let storage_key = r.string(&what("storage key"))?;
        let storage_nbytes = r.u64(&what("byte count"))?;
        let dtype = r.i32(&what("dtype"))?;
        let device_type = r.i32(&what("device"))?;
        let storage_offset = r.i64(&what("storage offset"))?;
        let ndim = r.u32(&what("rank"))?;
        if ndim > MAX_NDIM {
            return Err(bad(format!("entry {i} ({fqn}) has rank {ndim}")));
        }
        let sizes = (0..ndim)
            .map(|_| r.i64(&what("sizes")))
            .collect::<Result<Vec<_>>>()?;
        let strides = (0..ndim)
            .map(|_| r.i64(&what("strides")))
            .collect::<Result<Vec<_>>>()?;
        entries.push(FqnEntry {
            fqn,
            storage_key,
            storage_nbytes,
            dtype,
            device_type,
            storage_offset,
            sizes,
            strides,
        });
    }
    if r.at != payload.len() {
        return Err(bad(format!(
            "{} bytes left after {n} entries",
            payload.len() - r.at
        )));
    }
    Ok(Payload::PerFqn { so_key, entries })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Encode a binary payload (the test's own writer of the documented layout).
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
            for v in &e.sizes {
                o.extend(v.to_le_bytes());
            }
            for v in &e.strides {
                o.extend(v.to_le_bytes());
            }
        }
        o
    }

    pub(crate) fn entry(fqn: &str, n: u64) -> FqnEntry {
        FqnEntry {
            fqn: fqn.into(),
            storage_key: format!("cuda_fqn_weight:cuda:{fqn}"),
            storage_nbytes: n,
            dtype: 6,
            device_type: 1,
            storage_offset: 0,
            sizes: vec![n as i64 / 4],
            strides: vec![1],
        }
    }

    #[test]
    fn the_three_forms() {
        assert_eq!(
            parse(b"", "forward").unwrap(),
            Payload::Keys {
                so_key: "forward_so_blob".into(),
                weights_key: "forward_weights_blob".into()
            }
        );
        assert!(parse(b"", "").is_err());
        assert_eq!(
            parse(b"abc_so_blob\ndef_weights_blob\0", "m").unwrap(),
            Payload::Keys {
                so_key: "abc_so_blob".into(),
                weights_key: "def_weights_blob".into()
            }
        );
        let es = vec![entry("fc1.weight", 64), entry("fc1.bias", 8)];
        let b = encode("k_so_blob", &es);
        assert_eq!(
            parse(&b, "m").unwrap(),
            Payload::PerFqn {
                so_key: "k_so_blob".into(),
                entries: es
            }
        );
    }

    #[test]
    fn malformed_payloads_are_errors_not_panics() {
        for bad in [
            &b"only one line"[..],
            b"a\nb\nc",
            b"\xff\xfe binary",
            b"ETCUDAFQN3",
            b"ETCUDAFQN3\xff\xff\xff\xff",
        ] {
            let e = parse(bad, "m").unwrap_err().to_string();
            assert!(e.contains("payload"), "{e}");
        }
        let b = encode("k", &[entry("w", 16)]);
        for cut in 10..b.len() {
            assert!(parse(&b[..cut], "m").is_err(), "cut at {cut}");
        }
        let mut extra = b.clone();
        extra.push(7);
        assert!(parse(&extra, "m")
            .unwrap_err()
            .to_string()
            .contains("left after"));
        // Huge counts and ranks are refused before anything is allocated.
        let mut huge = FQN_MAGIC.to_vec();
        huge.extend(1u32.to_le_bytes());
        huge.push(b'k');
        huge.extend(u32::MAX.to_le_bytes());
        assert!(parse(&huge, "m")
            .unwrap_err()
            .to_string()
            .contains("entries"));
    }
}
