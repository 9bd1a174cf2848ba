//! Worst-case growth of the text through each normalizer, pre-tokenizer,
//! decoder and post-processor step of a `tokenizer.json` (read as JSON), and
//! their composition (see the parent module's documentation).

use super::{refuse, MAX_GROWTH, MAX_TEMPLATE_IDS, MAX_TEMPLATE_REPEATS};
use crate::Result;
use serde_json::Value;

/// A worst-case bound `out <= a * n + b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Affine {
    pub a: u64,
    pub b: u64,
}

impl Affine {
    pub(super) const ONE: Affine = Affine { a: 1, b: 0 };

    /// A step that adds `b` bytes to each piece (a piece has at least one).
    pub(super) fn step(a: u64, b: u64) -> Affine {
        Affine {
            a: a.saturating_add(b),
            b,
        }
    }

    /// This bound, then `next`.
    pub(super) fn then(self, next: Affine) -> Affine {
        Affine {
            a: next.a.saturating_mul(self.a),
            b: next.a.saturating_mul(self.b).saturating_add(next.b),
        }
    }

    pub(super) fn apply(self, n: u64) -> u64 {
        self.a.saturating_mul(n).saturating_add(self.b)
    }

    pub(super) fn check(self, field: &str) -> Result<Affine> {
        if self.a > MAX_GROWTH || self.b > MAX_GROWTH {
            return Err(refuse(
                field,
                format!(
                    "its text may grow {}-fold plus {} bytes a piece (at most {MAX_GROWTH} each)",
                    self.a, self.b
                ),
            ));
        }
        Ok(self)
    }
}

fn kind(v: &Value) -> &str {
    v.get("type").and_then(Value::as_str).unwrap_or("")
}

fn text_len(v: &Value, key: &str) -> u64 {
    v.get(key)
        .and_then(Value::as_str)
        .map_or(0, |s| s.len() as u64)
}

/// The children of a `Sequence` under `key`, composed in order.
fn sequence(
    v: &Value,
    key: &str,
    field: &str,
    f: fn(&Value, &str) -> Result<Affine>,
) -> Result<Option<Affine>> {
    let Some(items) = v.get(key).and_then(Value::as_array) else {
        return Ok(None);
    };
    let mut g = Affine::ONE;
    for (i, item) in items.iter().enumerate() {
        // Checked at every step, so that a long sequence cannot overflow.
        g = g
            .then(f(item, &format!("{field}.{key}[{i}]"))?)
            .check(field)?;
    }
    Ok(Some(g))
}

/// A `Replace` (normalizer or decoder): each match of the pattern becomes
/// `content`; a pattern that may match the empty string (a regex, or "")
/// inserts it at every position.
fn replace(v: &Value) -> Affine {
    let content = text_len(v, "content");
    match v.pointer("/pattern/String").and_then(Value::as_str) {
        Some(p) if !p.is_empty() => Affine::step(content.div_ceil(p.len() as u64).max(1), 0),
        _ => Affine::step(content.saturating_add(1), content),
    }
}

pub(super) fn normalizer(v: &Value, field: &str) -> Result<Affine> {
    if v.is_null() {
        return Ok(Affine::ONE);
    }
    if let Some(g) = sequence(v, "normalizers", field, normalizer)? {
        return Ok(g);
    }
    if v.get("content").is_some() || v.get("pattern").is_some() {
        return replace(v).check(field);
    }
    if v.get("prepend").is_some() {
        return Affine::step(1, text_len(v, "prepend")).check(field);
    }
    if let Some(map) = v.get("precompiled_charsmap") {
        return precompiled(map, field);
    }
    // UAX #15: NFC and NFD grow UTF-8 at most 3-fold, NFKC and NFKD 11-fold;
    // lowercasing at most 1.5-fold; BERT's spaces around CJK characters, NFD
    // and lowercasing together under 8-fold; the byte-level alphabet 2-fold.
    let a = match kind(v) {
        "Strip" | "StripAccents" | "Nmt" => 1,
        "Lowercase" | "ByteLevel" => 2,
        "NFC" | "NFD" => 3,
        "BertNormalizer" | "Bert" => 8,
        _ => 11, // NFKC, NFKD, and anything else: the largest of the above
    };
    Ok(Affine::step(a, 0))
}

/// A SentencePiece `precompiled_charsmap` (base64): a u32 trie size, the
/// trie, then NUL-separated replacement strings. Its growth is the longest
/// replacement (each replaces at least one byte).
fn precompiled(map: &Value, field: &str) -> Result<Affine> {
    let field = format!("{field}.precompiled_charsmap");
    let Some(text) = map.as_str() else {
        return Ok(Affine::ONE); // not a string: the tokenizers crate refuses it
    };
    let Some(blob) = base64_decode(text) else {
        return Ok(Affine::ONE); // not base64: refused by the tokenizers crate
    };
    let trie = blob
        .get(..4)
        .map_or(0, |h| u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize);
    let rest = blob.len().saturating_sub(4);
    if trie > rest {
        return Err(refuse(
            &field,
            format!(
                "its trie of {trie} bytes is larger than the {rest} bytes that follow the header"
            ),
        ));
    }
    let strings = &blob[(4 + trie).min(blob.len())..];
    let longest = strings
        .split(|&b| b == 0)
        .map(<[u8]>::len)
        .max()
        .unwrap_or(0);
    Affine::step((longest as u64).max(1), 0).check(&field)
}

/// Standard base64 (padding optional); `None` on any other byte.
pub(super) fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() / 4 * 3 + 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes().take_while(|&c| c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

pub(super) fn pre_tokenizer(v: &Value, field: &str) -> Result<Affine> {
    if v.is_null() {
        return Ok(Affine::ONE);
    }
    if let Some(g) = sequence(v, "pretokenizers", field, pre_tokenizer)? {
        return Ok(g);
    }
    if v.get("replacement").is_some() {
        // Metaspace: each space becomes the replacement, which may also be
        // put before each piece.
        let r = text_len(v, "replacement").max(1);
        return Affine::step(r, r).check(field);
    }
    match kind(v) {
        "BertPreTokenizer" | "Delimiter" | "CharDelimiterSplit" | "Whitespace" | "Split"
        | "Punctuation" | "WhitespaceSplit" | "Digits" | "UnicodeScripts" | "FixedLength" => {
            Ok(Affine::ONE)
        }
        // ByteLevel (each byte becomes a character of up to 2 bytes, and a
        // space may go before each piece), and anything else.
        _ => Ok(Affine::step(2, 2)),
    }
}

pub(super) fn decoder(v: &Value, field: &str) -> Result<Affine> {
    if v.is_null() {
        return Ok(Affine::step(1, 1)); // tokens joined with spaces
    }
    if let Some(g) = sequence(v, "decoders", field, decoder)? {
        return Ok(g);
    }
    if v.get("content").is_some() && v.get("pattern").is_some() {
        return replace(v).check(field);
    }
    if let Some(Value::String(s)) = v.get("suffix") {
        // BPEDecoder: the suffix becomes a space.
        return Ok(if s.is_empty() {
            Affine::step(2, 1)
        } else {
            Affine::step(1, 1)
        });
    }
    // The others (ByteLevel, WordPiece, Metaspace, CTC, Fuse, Strip,
    // ByteFallback) shrink a token, or add a space to it at most.
    Ok(Affine::step(1, 1))
}

/// The single-sequence template: `a` = how often it holds the sequence,
/// `b` = the ids it adds.
pub(super) fn post_processor(v: &Value, field: &str) -> Result<Affine> {
    if v.is_null() {
        return Ok(Affine::ONE);
    }
    if let Some(items) = v.get("processors").and_then(Value::as_array) {
        let mut g = Affine::ONE;
        for (i, item) in items.iter().enumerate() {
            g = g.then(post_processor(item, &format!("{field}.processors[{i}]"))?);
            if g.a > MAX_TEMPLATE_REPEATS || g.b > MAX_TEMPLATE_IDS {
                break; // refused by the caller
            }
        }
        return Ok(g);
    }
    if let Some(single) = v.get("single") {
        return template(single, v.get("special_tokens"), field);
    }
    if v.get("sep").is_some() || v.get("cls").is_some() {
        return Ok(Affine { a: 1, b: 2 }); // BERT / RoBERTa: [CLS] A [SEP]
    }
    Ok(Affine::ONE)
}

fn template(single: &Value, specials: Option<&Value>, field: &str) -> Result<Affine> {
    // A special token the template names must be in `special_tokens` (the
    // tokenizers crate looks it up with a panic otherwise).
    let ids_of = |name: &str| -> Result<u64> {
        specials
            .and_then(|s| s.get(name))
            .map(|t| {
                t.get("ids")
                    .and_then(Value::as_array)
                    .map_or(0, |ids| ids.len() as u64)
            })
            .ok_or_else(|| {
                refuse(
                    &format!("{field}.single"),
                    format!("special token {name:?} is not in special_tokens"),
                )
            })
    };
    let mut g = Affine { a: 0, b: 0 };
    let pieces: Vec<&Value> = match single {
        Value::Array(items) => items.iter().collect(),
        _ => vec![single],
    };
    let mut add = |seq: u64, special: u64| {
        g.a = g.a.saturating_add(seq);
        g.b = g.b.saturating_add(special);
    };
    for piece in pieces {
        match piece {
            Value::String(s) => {
                for w in s.split_whitespace() {
                    if w.starts_with('$') {
                        add(1, 0);
                    } else {
                        add(0, ids_of(w.split(':').next().unwrap_or(w))?);
                    }
                }
            }
            Value::Object(o) if o.contains_key("Sequence") => add(1, 0),
            Value::Object(o) => {
                let name = o
                    .get("SpecialToken")
                    .and_then(|s| s.get("id"))
                    .and_then(Value::as_str);
                if let Some(name) = name {
                    add(0, ids_of(name)?);
                }
            }
            _ => {}
        }
    }
    Ok(g)
}
