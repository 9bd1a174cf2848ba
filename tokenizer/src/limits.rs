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

mod growth;
mod scan;

use crate::{Error, Result};
pub(crate) use growth::Affine;
use growth::{decoder, normalizer, post_processor, pre_tokenizer};
use scan::Head;
use serde_json::Value;

/// The largest `tokenizer.json` read, in bytes (the largest common ones are
/// about 35 MB).
pub const MAX_FILE_BYTES: usize = crate::ffi::ETC_TOK_MAX_FILE_BYTES;
/// The most ids, added tokens included (`model.vocab` entries plus
/// `added_tokens`).
pub const MAX_VOCAB: usize = crate::ffi::ETC_TOK_MAX_VOCAB;
/// The most entries of `added_tokens`.
pub const MAX_ADDED_TOKENS: usize = crate::ffi::ETC_TOK_MAX_ADDED_TOKENS;
/// The longest token (vocabulary, added tokens, the padding token), in bytes.
pub const MAX_TOKEN_BYTES: usize = crate::ffi::ETC_TOK_MAX_TOKEN_BYTES;
/// The largest `padding.strategy.Fixed`, `padding.pad_to_multiple_of` and
/// `truncation.max_length`; `truncation.stride` may be at most half of
/// `max_length`.
pub const MAX_SEQUENCE: usize = crate::ffi::ETC_TOK_MAX_SEQUENCE;
/// The largest growth factor (and per-piece constant) of the normalizer and
/// pre-tokenizer together, and of the decoder.
pub const MAX_GROWTH: u64 = crate::ffi::ETC_TOK_MAX_GROWTH;
/// The most ids the post-processor adds to one sequence, and the most times
/// its single-sequence template repeats the sequence (4).
pub const MAX_TEMPLATE_IDS: u64 = crate::ffi::ETC_TOK_MAX_TEMPLATE_IDS;
pub(super) const MAX_TEMPLATE_REPEATS: u64 = 4;
/// The most ids one encode may make in the worst case (see the module doc).
pub const MAX_ENCODE_IDS: usize = crate::ffi::ETC_TOK_MAX_ENCODE_IDS;
/// The most bytes one decode may make in the worst case.
pub const MAX_DECODE_BYTES: usize = crate::ffi::ETC_TOK_MAX_DECODE_BYTES;

pub(super) fn refuse(field: &str, what: String) -> Error {
    Error::Malformed(format!("tokenizer.json refused: {field}: {what}"))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(json: &str) -> Bounds {
        check_file(json.as_bytes()).unwrap()
    }

    #[test]
    fn growth_of_real_shapes_is_what_the_readme_says() {
        // Llama 2: a prepended "▁" (3 bytes), then spaces replaced by "▁".
        let b = bounds(
            r#"{"normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "▁"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}}"#,
        );
        assert_eq!(b.encode, Affine { a: 12, b: 9 });
        // Byte-level BPE (GPT-2, Llama 3, Qwen): the ByteLevel pre-tokenizer.
        let b = bounds(r#"{"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false}}"#);
        assert_eq!(b.encode, Affine { a: 4, b: 2 });
        // BERT's template: [CLS] $A [SEP].
        let b = bounds(
            r#"{"post_processor": {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                           {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [101], "tokens": ["[CLS]"]},
                                   "[SEP]": {"id": "[SEP]", "ids": [102], "tokens": ["[SEP]"]}}}}"#,
        );
        assert_eq!(b.template, Affine { a: 1, b: 2 });
        // The string form of a template counts the same.
        let b = bounds(
            r#"{"post_processor": {"type": "TemplateProcessing", "single": "<s> $A:0",
                "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}}"#,
        );
        assert_eq!(b.template, Affine { a: 1, b: 1 });
    }

    #[test]
    fn a_charsmap_is_measured_and_its_trie_checked() {
        // Trie size 4, a 4-byte trie, then "ab\0cdef\0".
        let mut blob = 4u32.to_le_bytes().to_vec();
        blob.extend_from_slice(&[0, 0, 0, 0]);
        blob.extend_from_slice(b"ab\0cdef\0");
        let b64 = |b: &[u8]| -> String {
            const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            b.chunks(3)
                .flat_map(|c| {
                    let n = c
                        .iter()
                        .enumerate()
                        .fold(0u32, |n, (i, &x)| n | u32::from(x) << (16 - 8 * i));
                    (0..4).map(move |i| {
                        if i <= c.len() {
                            A[(n >> (18 - 6 * i) & 63) as usize] as char
                        } else {
                            '='
                        }
                    })
                })
                .collect()
        };
        assert_eq!(
            growth::base64_decode(&b64(&blob)).as_deref(),
            Some(&blob[..])
        );
        let json = format!(
            r#"{{"normalizer": {{"type": "Precompiled", "precompiled_charsmap": "{}"}}}}"#,
            b64(&blob)
        );
        assert_eq!(bounds(&json).encode, Affine { a: 4, b: 0 });
        blob[..4].copy_from_slice(&100u32.to_le_bytes());
        let json = format!(
            r#"{{"normalizer": {{"type": "Precompiled", "precompiled_charsmap": "{}"}}}}"#,
            b64(&blob)
        );
        let e = check_file(json.as_bytes()).unwrap_err().to_string();
        assert!(
            e.contains("normalizer.precompiled_charsmap: its trie of 100 bytes"),
            "{e}"
        );
    }
}
