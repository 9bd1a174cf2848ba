//! A `tokenizer.json` (HuggingFace `tokenizers`) behind a small C API, for
//! `et_cuda_run`'s text generation. Built as a static library of its own
//! (`libetc_tokenizer.a`), not part of `libexecutorch_cuda.so`.
//!
//! - [`Tokenizer::load`] reads a `tokenizer.json` (any model family the file
//!   format describes: BPE, WordPiece, Unigram, WordLevel), with its
//!   normalizer, pre-tokenizer, post-processor and decoder.
//! - [`Tokenizer::eos_ids`]: the end-of-sequence ids, by the rule of
//!   [`EOS_TOKENS`].
//! - [`DecodeStream`]: text for each new token while a sequence grows, so that
//!   a runner can print tokens as they arrive.
//!
//! The C API is in [`ffi`] (`include/etc_tokenizer.h`).

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod ffi;
#[doc(hidden)]
pub mod fuzz;
pub mod limits;

use std::any::Any;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

/// The text of a caught panic.
pub(crate) fn panic_text(p: &(dyn Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic payload".into())
}

/// An added token of `tokenizer.json` marked `"special": true` is an
/// end-of-sequence token when its text is one of these. The list covers the
/// usual model families: GPT-2 and Qwen base models (`<|endoftext|>`),
/// SentencePiece models such as Llama 2 and Mistral (`</s>`), ChatML chat
/// models such as Qwen instruct (`<|im_end|>`), Gemma (`<eos>`,
/// `<end_of_turn>`), Llama 3 (`<|end_of_text|>`, `<|eot_id|>`, `<|eom_id|>`)
/// and Phi-3 (`<|end|>`). Tokens of the base vocabulary and added tokens that
/// are not special never count. A runner stops on other text with a stop
/// string.
pub const EOS_TOKENS: &[&str] = &[
    "<|endoftext|>",
    "</s>",
    "<|im_end|>",
    "<eos>",
    "<end_of_turn>",
    "<|end_of_text|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end|>",
];

/// What went wrong, with the status code the C API returns for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A caller mistake: a null pointer, text that is not UTF-8.
    InvalidArgument(String),
    /// The file could not be read.
    Io(String),
    /// The file is not a `tokenizer.json` this library understands.
    Malformed(String),
    /// Encoding failed.
    Encode(String),
    /// Decoding failed.
    Decode(String),
    /// The caller's buffer is too small; the C API reports the size needed.
    BufferTooSmall(String),
    /// A panic was caught at the C boundary.
    Internal(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidArgument(m)
            | Error::Io(m)
            | Error::Malformed(m)
            | Error::Encode(m)
            | Error::Decode(m)
            | Error::BufferTooSmall(m)
            | Error::Internal(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}

/// The result type of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// A loaded `tokenizer.json`.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    eos: Vec<u32>,
    bounds: limits::Bounds,
    // The longest token, in bytes (for the decode bound).
    longest: usize,
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("eos", &self.eos)
            .finish()
    }
}

impl Tokenizer {
    /// Reads a `tokenizer.json`. A missing file is [`Error::Io`]; a file that
    /// is not a tokenizer (bad JSON, unknown model type, missing fields) or
    /// breaks a limit of [`limits`] is [`Error::Malformed`].
    pub fn load(path: impl AsRef<Path>) -> Result<Tokenizer> {
        use std::io::Read;
        let file = std::fs::File::open(path.as_ref())
            .map_err(|e| Error::Io(format!("cannot read: {e}")))?;
        // One byte past the limit tells a file that is too large, without reading it all.
        let mut bytes = Vec::new();
        file.take(limits::MAX_FILE_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::Io(format!("cannot read: {e}")))?;
        Tokenizer::from_bytes(&bytes)
    }

    /// Parses the contents of a `tokenizer.json` (checked against
    /// [`limits`] before anything is built from it).
    pub fn from_bytes(bytes: &[u8]) -> Result<Tokenizer> {
        if bytes.is_empty() {
            return Err(Error::Malformed(
                "not a tokenizer.json: the file is empty".into(),
            ));
        }
        let bounds = limits::check_file(bytes)?;
        // The tokenizers crate panics on some malformed parts (a SentencePiece
        // charsmap it cannot parse): that is a malformed file too.
        let inner = catch_unwind(AssertUnwindSafe(|| {
            tokenizers::Tokenizer::from_bytes(bytes)
        }))
        .map_err(|p| Error::Malformed(format!("not a tokenizer.json: {}", panic_text(&*p))))?
        .map_err(|e| Error::Malformed(format!("not a tokenizer.json: {e}")))?;
        let vocab = inner.get_vocab_size(true);
        if vocab > limits::MAX_VOCAB {
            return Err(Error::Malformed(format!(
                "tokenizer.json refused: the vocabulary: {vocab} ids, at most {}",
                limits::MAX_VOCAB
            )));
        }
        let longest = longest_token(&inner)?;
        let mut eos: Vec<u32> = inner
            .get_added_tokens_decoder()
            .iter()
            .filter(|(_, t)| t.special && EOS_TOKENS.contains(&t.content.as_str()))
            .map(|(id, _)| *id)
            .collect();
        eos.sort_unstable();
        Ok(Tokenizer {
            inner,
            eos,
            bounds,
            longest,
        })
    }

    /// The ids of `text`; `add_special` adds what the post-processor adds
    /// (for example BERT's `[CLS]`/`[SEP]`, Llama's `<s>`). Refused, before
    /// any work, when the worst case of the ids passes
    /// [`limits::MAX_ENCODE_IDS`].
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        let worst = self.bounds.encode_ids(
            text.len(),
            add_special,
            self.inner.get_padding(),
            self.inner.get_truncation(),
        );
        if worst > limits::MAX_ENCODE_IDS as u64 {
            return Err(Error::Encode(format!(
                "cannot encode: a text of {} bytes may make up to {worst} ids with this tokenizer.json, more than the limit of {} (encode a shorter text)",
                text.len(),
                limits::MAX_ENCODE_IDS
            )));
        }
        // The tokenizers crate panics on some files that load (an empty match of a
        // Replace regex before a ByteLevel pre-tokenizer): an error, not a panic.
        let enc = catch_unwind(AssertUnwindSafe(|| self.inner.encode(text, add_special)))
            .map_err(|p| Error::Encode(format!("cannot encode: {}", panic_text(&*p))))?
            .map_err(|e| Error::Encode(format!("cannot encode: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of `ids`; `skip_special` leaves special tokens out. Ids the
    /// vocabulary does not have are skipped. Refused, before any work, when
    /// the worst case of the text passes [`limits::MAX_DECODE_BYTES`].
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        let worst = self.bounds.decode_bytes(ids.len(), self.longest);
        if worst > limits::MAX_DECODE_BYTES as u64 {
            return Err(Error::Decode(format!(
                "cannot decode: {} ids may make up to {worst} bytes of text with this tokenizer.json, more than the limit of {} (decode fewer ids)",
                ids.len(),
                limits::MAX_DECODE_BYTES
            )));
        }
        catch_unwind(AssertUnwindSafe(|| self.inner.decode(ids, skip_special)))
            .map_err(|p| Error::Decode(format!("cannot decode: {}", panic_text(&*p))))?
            .map_err(|e| Error::Decode(format!("cannot decode: {e}")))
    }

    /// The end-of-sequence ids (rule: [`EOS_TOKENS`]), ascending; empty when
    /// the file has none.
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos
    }

    /// The number of ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of a token's text (base vocabulary or added token).
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }
}

/// The longest token of the vocabulary (added tokens included) in bytes,
/// refused past [`limits::MAX_TOKEN_BYTES`].
fn longest_token(inner: &tokenizers::Tokenizer) -> Result<usize> {
    let longest = inner
        .get_vocab(true)
        .into_iter()
        .max_by_key(|(t, _)| t.len());
    match longest {
        Some((t, id)) if t.len() > limits::MAX_TOKEN_BYTES => Err(Error::Malformed(format!(
            "tokenizer.json refused: the vocabulary: token {id} has {} bytes, at most {}",
            t.len(),
            limits::MAX_TOKEN_BYTES
        ))),
        Some((t, _)) => Ok(t.len()),
        None => Ok(0),
    }
}

/// Text for each new token of a growing sequence.
///
/// Decoding one token alone is wrong for most tokenizers: byte-level BPE
/// splits a character's UTF-8 bytes over several tokens, and decoders treat
/// the first token of a sequence differently (SentencePiece drops its leading
/// space, WordPiece joins `##` pieces). So the stream decodes a short window of
/// the sequence, the ids since the text it last emitted, twice: without and
/// with the new ids, and emits what the second text adds to the first.
/// While the window's text ends in U+FFFD (an incomplete UTF-8 sequence) it
/// emits nothing and waits for the next token; [`DecodeStream::finish`] emits
/// whatever is left. The concatenated pieces equal the decode of the whole
/// sequence whenever the decoder does not rewrite earlier text because of a
/// later token; where it does, the stream emits the new text from the first
/// character that differs (text already printed cannot be taken back).
#[derive(Debug)]
pub struct DecodeStream {
    ids: Vec<u32>,
    // The window is ids[start..]; ids[start..emitted] is text already emitted.
    start: usize,
    emitted: usize,
    skip_special: bool,
}

impl DecodeStream {
    /// A stream for a sequence that starts empty (the prompt is not part of it).
    pub fn new(skip_special: bool) -> DecodeStream {
        DecodeStream {
            ids: Vec::new(),
            start: 0,
            emitted: 0,
            skip_special,
        }
    }

    /// Appends `id` and returns the text it completes (possibly empty).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<String> {
        self.ids.push(id);
        self.step(tok, false)
    }

    /// The text still held back (an incomplete UTF-8 sequence at the end, as
    /// the full decode writes it); call once at the end.
    pub fn finish(&mut self, tok: &Tokenizer) -> Result<String> {
        self.step(tok, true)
    }

    /// All ids pushed so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    fn step(&mut self, tok: &Tokenizer, last: bool) -> Result<String> {
        if self.emitted == self.ids.len() {
            return Ok(String::new());
        }
        let before = tok.decode(&self.ids[self.start..self.emitted], self.skip_special)?;
        let after = tok.decode(&self.ids[self.start..], self.skip_special)?;
        if !last && after.ends_with('\u{FFFD}') {
            return Ok(String::new());
        }
        let new = match after.strip_prefix(before.as_str()) {
            Some(rest) => rest.to_owned(),
            None => after[common_prefix(&before, &after)..].to_owned(),
        };
        if new.is_empty() && !last {
            // Nothing visible yet (a skipped special token, a piece that
            // only prefixes the next one): keep the window.
            return Ok(new);
        }
        self.start = self.emitted;
        self.emitted = self.ids.len();
        Ok(new)
    }
}

/// The byte length of the longest common prefix of `a` and `b` that ends on a
/// character boundary.
fn common_prefix(a: &str, b: &str) -> usize {
    a.char_indices()
        .zip(b.chars())
        .find(|((_, ca), cb)| ca != cb)
        .map_or_else(|| a.len().min(b.len()), |((i, _), _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_prefix_ends_on_a_character() {
        assert_eq!(common_prefix("abc", "abd"), 2);
        assert_eq!(common_prefix("ab", "abcd"), 2);
        assert_eq!(common_prefix("", "x"), 0);
        // 'é' and 'è' share their first UTF-8 byte: the prefix stops before both.
        assert_eq!(common_prefix("aé", "aè"), 1);
    }

    #[test]
    fn malformed_inputs_are_errors_not_panics() {
        for bad in [
            &b""[..],
            b"{",
            b"[]",
            b"{\"model\": 3}",
            b"\xff\xfe",
            b"{\"version\":\"1.0\"}",
        ] {
            let e = Tokenizer::from_bytes(bad).unwrap_err();
            assert!(matches!(e, Error::Malformed(_)), "{bad:?}: {e:?}");
            assert!(e.to_string().starts_with("not a tokenizer.json"), "{e}");
        }
    }

    #[test]
    fn a_missing_file_is_an_io_error() {
        let e = Tokenizer::load("/nonexistent/tokenizer.json").unwrap_err();
        assert!(matches!(e, Error::Io(_)), "{e:?}");
    }
}
