//! Limits on what a `tokenizer.json` may ask for, checked when it is loaded,
//! and the bounds that encoding and decoding run under.
//!
//! Every `tokenizer.json` is untrusted bytes. The `tokenizers` crate trusts
//! it: a padding length of 2^40 makes every encode ask for terabytes (an
//! allocation failure aborts the process; nothing can catch it), a `Replace`
//! normalizer with a long replacement that matches the empty string grows the
//! text by that length at every character, a `precompiled_charsmap` whose
//! header declares a 4 GiB trie reserves it before reading it. So a file is
//! first read for these fields alone (the model and the added tokens are
//! counted, not built), checked against the limits below, and only then built.
//!
//! Growth bounds: each normalizer, pre-tokenizer and decoder step has a
//! worst case `out <= a * in + b` (bytes; `b` is added once per piece of text,
//! and a piece holds at least one byte, so a step is taken as
//! `out <= (a + b) * in + b`). Their composition gives one bound per file,
//! for encoding and one for decoding, whose factor must be at most
//! [`MAX_GROWTH`]. Before an encode the worst case of its ids (text bytes
//! through that bound, the truncation's overflow pieces, the post-processor's
//! ids, the padding) must be at most [`MAX_ENCODE_IDS`]; before a decode the
//! worst case of its text (ids times the longest token through the decoder's
//! bound) must be at most [`MAX_DECODE_BYTES`].

use crate::{Error, Result};
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;
use std::fmt;

/// The largest `tokenizer.json` read, in bytes (the largest common ones are
/// about 35 MB).
pub const MAX_FILE_BYTES: usize = 128 << 20;
/// The most ids, added tokens included (`model.vocab` entries plus
/// `added_tokens`).
pub const MAX_VOCAB: usize = 1 << 22;
/// The most entries of `added_tokens`.
pub const MAX_ADDED_TOKENS: usize = 1 << 16;
/// The longest token (vocabulary, added tokens, the padding token), in bytes.
pub const MAX_TOKEN_BYTES: usize = 1024;
/// The largest `padding.strategy.Fixed`, `padding.pad_to_multiple_of` and
/// `truncation.max_length`; `truncation.stride` may be at most half of
/// `max_length`.
pub const MAX_SEQUENCE: usize = 1 << 17;
/// The largest growth factor (and per-piece constant) of the normalizer and
/// pre-tokenizer together, and of the decoder.
pub const MAX_GROWTH: u64 = 1024;
/// The most ids the post-processor adds to one sequence, and the most times
/// its single-sequence template repeats the sequence (4).
pub const MAX_TEMPLATE_IDS: u64 = 1024;
const MAX_TEMPLATE_REPEATS: u64 = 4;
/// The most ids one encode may make in the worst case (see the module doc).
pub const MAX_ENCODE_IDS: usize = 1 << 22;
/// The most bytes one decode may make in the worst case.
pub const MAX_DECODE_BYTES: usize = 1 << 26;

fn refuse(field: &str, what: String) -> Error {
    Error::Malformed(format!("tokenizer.json refused: {field}: {what}"))
}

/// A worst-case bound `out <= a * n + b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Affine {
    pub a: u64,
    pub b: u64,
}

impl Affine {
    const ONE: Affine = Affine { a: 1, b: 0 };

    /// A step that adds `b` bytes to each piece (a piece has at least one).
    fn step(a: u64, b: u64) -> Affine {
        Affine {
            a: a.saturating_add(b),
            b,
        }
    }

    /// This bound, then `next`.
    fn then(self, next: Affine) -> Affine {
        Affine {
            a: next.a.saturating_mul(self.a),
            b: next.a.saturating_mul(self.b).saturating_add(next.b),
        }
    }

    fn apply(self, n: u64) -> u64 {
        self.a.saturating_mul(n).saturating_add(self.b)
    }

    fn check(self, field: &str) -> Result<Affine> {
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

/// The length in bytes of a token's text, read without keeping it: a string,
/// the first element of an array (a Unigram `[piece, score]`), or the
/// `content` of an object (an added token); 0 for anything else.
struct Piece(usize);

impl<'de> Deserialize<'de> for Piece {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Piece, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Piece;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a token")
            }
            fn visit_str<E>(self, s: &str) -> std::result::Result<Piece, E> {
                Ok(Piece(s.len()))
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut s: A,
            ) -> std::result::Result<Piece, A::Error> {
                let first = s.next_element::<Piece>()?.map_or(0, |p| p.0);
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Piece(first))
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut m: A,
            ) -> std::result::Result<Piece, A::Error> {
                let mut len = 0;
                while let Some(k) = m.next_key::<KeyIs>()? {
                    if k.0 {
                        len = m.next_value::<Piece>()?.0;
                    } else {
                        m.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Piece(len))
            }
            fn visit_bool<E>(self, _: bool) -> std::result::Result<Piece, E> {
                Ok(Piece(0))
            }
            fn visit_i64<E>(self, _: i64) -> std::result::Result<Piece, E> {
                Ok(Piece(0))
            }
            fn visit_u64<E>(self, _: u64) -> std::result::Result<Piece, E> {
                Ok(Piece(0))
            }
            fn visit_f64<E>(self, _: f64) -> std::result::Result<Piece, E> {
                Ok(Piece(0))
            }
            fn visit_unit<E>(self) -> std::result::Result<Piece, E> {
                Ok(Piece(0))
            }
        }
        d.deserialize_any(V)
    }
}

/// Whether a key is `content`.
struct KeyIs(bool);

impl<'de> Deserialize<'de> for KeyIs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<KeyIs, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KeyIs;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E>(self, s: &str) -> std::result::Result<KeyIs, E> {
                Ok(KeyIs(s == "content"))
            }
        }
        d.deserialize_str(V)
    }
}

/// The entries of a vocabulary (an array of tokens, or an object whose keys
/// are tokens) and the longest token, read without keeping them.
#[derive(Default)]
struct Tokens {
    n: usize,
    longest: usize,
}

impl<'de> Deserialize<'de> for Tokens {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Tokens, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Tokens;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array or an object")
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut s: A,
            ) -> std::result::Result<Tokens, A::Error> {
                let mut t = Tokens::default();
                while let Some(p) = s.next_element::<Piece>()? {
                    t.n += 1;
                    t.longest = t.longest.max(p.0);
                }
                Ok(t)
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut m: A,
            ) -> std::result::Result<Tokens, A::Error> {
                let mut t = Tokens::default();
                while let Some((p, IgnoredAny)) = m.next_entry::<Piece, IgnoredAny>()? {
                    t.n += 1;
                    t.longest = t.longest.max(p.0);
                }
                Ok(t)
            }
            fn visit_unit<E>(self) -> std::result::Result<Tokens, E> {
                Ok(Tokens::default())
            }
        }
        d.deserialize_any(V)
    }
}

/// The model's fields that the limits need (the rest is skipped unread).
#[derive(Deserialize, Default)]
struct ModelHead {
    #[serde(default)]
    vocab: Option<Tokens>,
}

/// The top-level fields that the limits need.
#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    model: Option<ModelHead>,
    #[serde(default)]
    added_tokens: Option<Tokens>,
    #[serde(default)]
    normalizer: Value,
    #[serde(default)]
    pre_tokenizer: Value,
    #[serde(default)]
    post_processor: Value,
    #[serde(default)]
    decoder: Value,
    #[serde(default)]
    padding: Value,
    #[serde(default)]
    truncation: Value,
}

/// What the limits found in a file that passed them: the bounds its encodes
/// and decodes run under.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// Normalizer, then pre-tokenizer: text bytes to the bytes the model sees.
    pub encode: Affine,
    /// The single-sequence template: `a` = repeats of the sequence, `b` = ids added.
    pub template: Affine,
    /// The decoder, per token.
    pub decode: Affine,
}

/// Checks the fields of `bytes` (a `tokenizer.json`) that could make loading
/// or using it unbounded, before anything is built from them. Fields of the
/// wrong type that these checks do not read are left to the `tokenizers`
/// crate, which refuses them with its own message.
pub(crate) fn check_file(bytes: &[u8]) -> Result<Bounds> {
    if bytes.len() > MAX_FILE_BYTES {
        return Err(refuse(
            "the file",
            format!("{} bytes, at most {MAX_FILE_BYTES}", bytes.len()),
        ));
    }
    let head = serde_json::from_slice::<Head>(bytes)
        .map_err(|e| Error::Malformed(format!("not a tokenizer.json: {e}")))?;
    let vocab = head.model.unwrap_or_default().vocab.unwrap_or_default();
    if vocab.n > MAX_VOCAB {
        return Err(refuse(
            "model.vocab",
            format!("{} entries, at most {MAX_VOCAB}", vocab.n),
        ));
    }
    let added = head.added_tokens.unwrap_or_default();
    if added.n > MAX_ADDED_TOKENS {
        return Err(refuse(
            "added_tokens",
            format!("{} entries, at most {MAX_ADDED_TOKENS}", added.n),
        ));
    }
    // Before anything is built: a Unigram model's trie is as deep as its
    // longest piece, and dropping a deep one overflows the stack.
    for (field, t) in [("model.vocab", &vocab), ("added_tokens", &added)] {
        if t.longest > MAX_TOKEN_BYTES {
            return Err(refuse(
                field,
                format!("a token of {} bytes, at most {MAX_TOKEN_BYTES}", t.longest),
            ));
        }
    }
    let norm = normalizer(&head.normalizer, "normalizer")?;
    let pre = pre_tokenizer(&head.pre_tokenizer, "pre_tokenizer")?;
    let encode = norm.then(pre).check("normalizer and pre_tokenizer")?;
    let template = post_processor(&head.post_processor, "post_processor")?;
    if template.a > MAX_TEMPLATE_REPEATS || template.b > MAX_TEMPLATE_IDS {
        return Err(refuse(
            "post_processor",
            format!(
                "its single template holds the sequence {} times and adds {} ids (at most {MAX_TEMPLATE_REPEATS} and {MAX_TEMPLATE_IDS})",
                template.a, template.b
            ),
        ));
    }
    let decode = decoder(&head.decoder, "decoder")?.check("decoder")?;
    padding(&head.padding)?;
    truncation(&head.truncation, template.b)?;
    Ok(Bounds {
        encode,
        template,
        decode,
    })
}

fn uint(v: &Value, field: &str) -> Result<Option<u64>> {
    match v {
        Value::Null => Ok(None),
        _ => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| refuse(field, format!("{v} is not a length"))),
    }
}

fn at_most(n: Option<u64>, max: usize, field: &str) -> Result<()> {
    match n {
        Some(n) if n > max as u64 => Err(refuse(field, format!("{n}, at most {max}"))),
        _ => Ok(()),
    }
}

fn padding(p: &Value) -> Result<()> {
    if p.is_null() {
        return Ok(());
    }
    if let Some(fixed) = p.pointer("/strategy/Fixed") {
        at_most(
            uint(fixed, "padding.strategy.Fixed")?,
            MAX_SEQUENCE,
            "padding.strategy.Fixed",
        )?;
    }
    let multiple = p.get("pad_to_multiple_of").unwrap_or(&Value::Null);
    at_most(
        uint(multiple, "padding.pad_to_multiple_of")?,
        MAX_SEQUENCE,
        "padding.pad_to_multiple_of",
    )?;
    if let Some(Value::String(t)) = p.get("pad_token") {
        at_most(
            Some(t.len() as u64),
            MAX_TOKEN_BYTES,
            "padding.pad_token (bytes)",
        )?;
    }
    Ok(())
}

fn truncation(t: &Value, template_ids: u64) -> Result<()> {
    if t.is_null() {
        return Ok(());
    }
    let null = Value::Null;
    let max = uint(
        t.get("max_length").unwrap_or(&null),
        "truncation.max_length",
    )?;
    at_most(max, MAX_SEQUENCE, "truncation.max_length")?;
    let max = max.unwrap_or(0);
    let stride = uint(t.get("stride").unwrap_or(&null), "truncation.stride")?.unwrap_or(0);
    if stride > max / 2 {
        return Err(refuse(
            "truncation.stride",
            format!("{stride}, at most half of max_length {max}"),
        ));
    }
    if max <= template_ids {
        return Err(refuse(
            "truncation.max_length",
            format!("{max} leaves no room next to the {template_ids} ids the post_processor adds"),
        ));
    }
    Ok(())
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

fn normalizer(v: &Value, field: &str) -> Result<Affine> {
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
fn base64_decode(s: &str) -> Option<Vec<u8>> {
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

fn pre_tokenizer(v: &Value, field: &str) -> Result<Affine> {
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

fn decoder(v: &Value, field: &str) -> Result<Affine> {
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
fn post_processor(v: &Value, field: &str) -> Result<Affine> {
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

impl Bounds {
    /// The worst case of the ids of encoding `text_len` bytes.
    pub(crate) fn encode_ids(
        &self,
        text_len: usize,
        add_special: bool,
        pad: Option<&tokenizers::PaddingParams>,
        trunc: Option<&tokenizers::TruncationParams>,
    ) -> u64 {
        let n = text_len as u64;
        // Every token covers at least one byte of what the model sees, or
        // one byte of the text (an added token).
        let tokens = self.encode.apply(n).saturating_add(n);
        let t = if add_special {
            self.template
        } else {
            Affine::ONE
        };
        let (pieces, per) = match trunc {
            Some(tr) => {
                let m = (tr.max_length as u64).saturating_sub(t.b).max(1);
                let step = m.saturating_sub(tr.stride as u64).max(1);
                (tokens.div_ceil(step).saturating_add(1), t.apply(m))
            }
            None => (1, t.apply(tokens)),
        };
        let mut per = per;
        if let Some(p) = pad {
            if let tokenizers::PaddingStrategy::Fixed(f) = p.strategy {
                per = per.max(f as u64);
            }
            if let Some(k) = p.pad_to_multiple_of.filter(|&k| k > 0) {
                per = per.div_ceil(k as u64).saturating_mul(k as u64);
            }
        }
        pieces.saturating_mul(per)
    }

    /// The worst case of the bytes of decoding `n` ids whose longest token has `longest` bytes.
    pub(crate) fn decode_bytes(&self, n: usize, longest: usize) -> u64 {
        (n as u64).saturating_mul(self.decode.apply(longest as u64))
    }
}
