//! The C API (`include/etc_tokenizer.h`, generated from this file).
//!
//! Every function returns an `EtcTokStatus` (0 on success) and, where it
//! takes `err`/`err_len`, writes a one-line message there: NUL-terminated,
//! cut at a character boundary to fit, empty on success (nothing is written
//! when `err` is null or `err_len` is 0). Every body runs inside
//! `catch_unwind`: a panic becomes `ETC_TOK_INTERNAL`, never an unwind into C.
//!
//! Outputs of unknown size use one convention: the caller passes a buffer and
//! its capacity; the function stores the size it needs in `*out_len` and
//! returns `ETC_TOK_BUFFER_TOO_SMALL` (writing nothing else) when it does not
//! fit, so a second call with a large enough buffer succeeds. An empty
//! output is a success with `*out_len` = 0 whatever the buffer (null included).
//!
//! Handles (`EtcTokenizer*`, `EtcTokStream*`) are keys into one process-wide
//! table of live objects, never reused and never dereferenced: a freed,
//! double-freed or made-up handle is `ETC_TOK_INVALID_ARGUMENT`, not a
//! use-after-free.
//!
//! Limits: a `tokenizer.json` is refused at load (`ETC_TOK_MALFORMED`, the
//! message names the field) past the `ETC_TOK_MAX_*` limits below; an encode
//! or decode whose worst case passes `ETC_TOK_MAX_ENCODE_IDS` /
//! `ETC_TOK_MAX_DECODE_BYTES` is refused before any work (see `crate::limits`).

use crate::{DecodeStream, Error, Result, Tokenizer};
use std::collections::HashMap;
use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A status code: `ETC_TOK_OK` or one of the errors below.
pub type EtcTokStatus = i32;
/// Success.
pub const ETC_TOK_OK: EtcTokStatus = 0;
/// A null pointer where one is required, or text that is not UTF-8.
pub const ETC_TOK_INVALID_ARGUMENT: EtcTokStatus = 1;
/// The file could not be read.
pub const ETC_TOK_IO: EtcTokStatus = 2;
/// The file is not a tokenizer.json this library understands.
pub const ETC_TOK_MALFORMED: EtcTokStatus = 3;
/// Encoding failed.
pub const ETC_TOK_ENCODE: EtcTokStatus = 4;
/// Decoding failed.
pub const ETC_TOK_DECODE: EtcTokStatus = 5;
/// The output buffer is too small; `*out_len` holds the size needed.
pub const ETC_TOK_BUFFER_TOO_SMALL: EtcTokStatus = 6;
/// An internal error (a caught panic).
pub const ETC_TOK_INTERNAL: EtcTokStatus = 7;

/// Load limit: the largest tokenizer.json, in bytes (128 MiB).
pub const ETC_TOK_MAX_FILE_BYTES: usize = 128 << 20;
/// Load limit: the most ids, added tokens included (`model.vocab` entries plus `added_tokens`).
pub const ETC_TOK_MAX_VOCAB: usize = 1 << 22;
/// Load limit: the most entries of `added_tokens`.
pub const ETC_TOK_MAX_ADDED_TOKENS: usize = 1 << 16;
/// Load limit: the longest token (vocabulary, added tokens, `padding.pad_token`), in bytes.
pub const ETC_TOK_MAX_TOKEN_BYTES: usize = 1024;
/// Load limit: the largest `padding.strategy.Fixed`, `padding.pad_to_multiple_of` and
/// `truncation.max_length`; `truncation.stride` is at most half of `max_length`, and
/// `max_length` must exceed the ids the post-processor adds.
pub const ETC_TOK_MAX_SEQUENCE: usize = 1 << 17;
/// Load limit: the worst-case growth of the text through the normalizer and the
/// pre-tokenizer together, and through the decoder: at most this factor, and at most this
/// many bytes added to each piece (each `Replace` content, `Prepend`, precompiled charsmap
/// replacement and Metaspace replacement counts; runner/README.md, "Tokenizer limits").
pub const ETC_TOK_MAX_GROWTH: u64 = 1024;
/// Load limit: the most ids the post-processor adds to one sequence (its single template
/// may hold the sequence at most 4 times).
pub const ETC_TOK_MAX_TEMPLATE_IDS: u64 = 1024;
/// Encode bound: an encode whose worst case of ids (the text's bytes through the growth
/// bound, truncation's overflow pieces, the post-processor, the padding) passes this is
/// refused with `ETC_TOK_ENCODE` before any work.
pub const ETC_TOK_MAX_ENCODE_IDS: usize = 1 << 22;
/// Decode bound: a decode whose worst case of text (ids times the longest token through
/// the decoder's growth bound) passes this many bytes is refused with `ETC_TOK_DECODE`.
pub const ETC_TOK_MAX_DECODE_BYTES: usize = 1 << 26;

fn status_of(e: &Error) -> EtcTokStatus {
    match e {
        Error::InvalidArgument(_) => ETC_TOK_INVALID_ARGUMENT,
        Error::Io(_) => ETC_TOK_IO,
        Error::Malformed(_) => ETC_TOK_MALFORMED,
        Error::Encode(_) => ETC_TOK_ENCODE,
        Error::Decode(_) => ETC_TOK_DECODE,
        Error::BufferTooSmall(_) => ETC_TOK_BUFFER_TOO_SMALL,
        Error::Internal(_) => ETC_TOK_INTERNAL,
    }
}

/// A loaded tokenizer (opaque; a key into the table of live handles, never
/// dereferenced). Free with `etc_tok_free`.
pub struct EtcTokenizer {
    _private: [u8; 0],
}

/// A streaming decoder (opaque, a handle like `EtcTokenizer`). It keeps its
/// tokenizer alive: the two may be freed in any order. Free with
/// `etc_tok_stream_free`.
pub struct EtcTokStream {
    _private: [u8; 0],
}

/// What a live stream handle names.
struct StreamState {
    tok: Arc<Tokenizer>,
    stream: DecodeStream,
    // The last piece of text, NUL-terminated; what the last call pointed at.
    text: Vec<u8>,
}

/// A live handle's object.
#[derive(Clone)]
enum Live {
    Tok(Arc<Tokenizer>),
    Stream(Arc<Mutex<StreamState>>),
}

/// The table of live handles: the address handed to C, and what it names.
static LIVE: Mutex<Option<HashMap<usize, Live>>> = Mutex::new(None);
/// Source of unique handle addresses, never reused (never dereferenced).
static NEXT_HANDLE: AtomicUsize = AtomicUsize::new(0x1000);
const HANDLE_STEP: usize = 16;

fn live() -> MutexGuard<'static, Option<HashMap<usize, Live>>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Puts `obj` in the table; its key is the handle for C.
fn register(obj: Live) -> usize {
    let key = NEXT_HANDLE.fetch_add(HANDLE_STEP, Ordering::Relaxed);
    live().get_or_insert_with(HashMap::new).insert(key, obj);
    key
}

fn dead(what: &str, key: usize) -> Error {
    invalid(&format!(
        "{what} {key:#x} is not a live handle (freed already, or never made by this library)"
    ))
}

fn lookup(key: usize, what: &str) -> Result<Live> {
    if key == 0 {
        return Err(invalid(&format!("{what} is null")));
    }
    live()
        .as_ref()
        .and_then(|m| m.get(&key).cloned())
        .ok_or_else(|| dead(what, key))
}

/// Takes `key` out of the table (a free); null is ignored.
fn remove(key: usize, what: &str, is_kind: fn(&Live) -> bool) -> Result<()> {
    if key == 0 {
        return Ok(());
    }
    let taken = {
        let mut l = live();
        let map = l.get_or_insert_with(HashMap::new);
        match map.get(&key) {
            Some(obj) if is_kind(obj) => map.remove(&key),
            _ => None,
        }
    };
    // Dropped outside the lock.
    taken.map(drop).ok_or_else(|| dead(what, key))
}

/// Number of live handles, tokenizers and streams (for tests).
pub fn live_handles() -> usize {
    live().as_ref().map_or(0, HashMap::len)
}

/// Runs a C API body: a panic becomes `Error::Internal`; the outcome becomes
/// a status code and the message (or "") goes to `err`.
fn guard(err: *mut c_char, err_len: usize, f: impl FnOnce() -> Result<()>) -> EtcTokStatus {
    let r = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let what = crate::panic_text(&*p);
        Err(Error::Internal(format!("internal error (panic: {what})")))
    });
    let (status, msg) = match &r {
        Ok(()) => (ETC_TOK_OK, String::new()),
        Err(e) => (status_of(e), e.to_string()),
    };
    write_message(err, err_len, &msg);
    status
}

/// Copies `msg` into `err[..err_len]`, NUL-terminated, cut at a character
/// boundary; a message line never holds a newline.
fn write_message(err: *mut c_char, err_len: usize, msg: &str) {
    if err.is_null() || err_len == 0 {
        return;
    }
    let msg = msg.replace(['\n', '\r'], " ");
    let mut n = msg.len().min(err_len - 1);
    while !msg.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: the caller guarantees `err` points to `err_len` writable bytes
    // (the functions' contracts); n + 1 <= err_len bytes are written.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr().cast::<c_char>(), err, n);
        *err.add(n) = 0;
    }
}

fn invalid(what: &str) -> Error {
    Error::InvalidArgument(what.to_string())
}

/// The tokenizer behind the handle `tok` (looked up, never dereferenced).
fn tokenizer(tok: *const EtcTokenizer) -> Result<Arc<Tokenizer>> {
    match lookup(tok as usize, "tok")? {
        Live::Tok(t) => Ok(t),
        Live::Stream(_) => Err(invalid("tok is a stream handle, not a tokenizer")),
    }
}

/// The stream behind the handle `s`.
fn stream(s: *const EtcTokStream) -> Result<Arc<Mutex<StreamState>>> {
    match lookup(s as usize, "stream")? {
        Live::Stream(st) => Ok(st),
        Live::Tok(_) => Err(invalid("stream is a tokenizer handle, not a stream")),
    }
}

/// The caller's `n` input values at `ptr`: empty when `n` is 0 (`ptr` may then be
/// null), an error naming `what` when `ptr` is null otherwise.
///
/// # Safety
/// `ptr` is null or points to `n` readable `T`s.
unsafe fn input<'a, T>(ptr: *const T, n: usize, what: &str) -> Result<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(invalid(&format!("{what} is null")));
    }
    // SAFETY: not null, and `n` readable values (the contract).
    Ok(unsafe { std::slice::from_raw_parts(ptr, n) })
}

/// Copies `src` into the caller's `dst[..cap]` and stores `src.len()` in
/// `*out_len`; `ETC_TOK_BUFFER_TOO_SMALL` (nothing copied) when `cap` is less
/// than `src.len() + extra` (`extra` = 1 for text: its NUL). An empty `src`
/// with no `extra` needs no buffer.
///
/// # Safety
/// `dst` is null or points to `cap` writable `T`s; `out_len` is valid for a write.
unsafe fn copy_out<T: Copy + Default>(
    src: &[T],
    extra: usize,
    dst: *mut T,
    cap: usize,
    out_len: *mut usize,
) -> Result<()> {
    if out_len.is_null() {
        return Err(invalid("out_len is null"));
    }
    // SAFETY: out_len is not null and the caller says it is valid for a write.
    unsafe { *out_len = src.len() };
    if src.is_empty() && extra == 0 {
        return Ok(()); // nothing to write: any buffer will do, null included
    }
    let need = src.len() + extra;
    if dst.is_null() || cap < need {
        return Err(Error::BufferTooSmall(format!(
            "the output needs room for {need} elements, the buffer has {}",
            if dst.is_null() { 0 } else { cap }
        )));
    }
    // SAFETY: dst holds cap >= src.len() + extra elements (checked above);
    // src is a separate Rust allocation.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len());
        if extra > 0 {
            *dst.add(src.len()) = T::default();
        }
    }
    Ok(())
}

/// Loads a `tokenizer.json` from `path` into `*out`.
///
/// Errors: `ETC_TOK_IO` (cannot read), `ETC_TOK_MALFORMED` (not a tokenizer,
/// or past a load limit `ETC_TOK_MAX_*`: the message names the field),
/// `ETC_TOK_INVALID_ARGUMENT` (null pointers, a path that is not UTF-8).
///
/// # Safety
/// `path` is a NUL-terminated string; `out` is valid for a write; `err` is
/// null or points to `err_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn etc_tok_load(
    path: *const c_char,
    out: *mut *mut EtcTokenizer,
    err: *mut c_char,
    err_len: usize,
) -> EtcTokStatus {
    guard(err, err_len, || {
        if path.is_null() || out.is_null() {
            return Err(invalid("path and out must not be null"));
        }
        // SAFETY: path is a NUL-terminated string (the contract), not null.
        let path = unsafe { CStr::from_ptr(path) };
        let path = path
            .to_str()
            .map_err(|_| invalid("the path is not UTF-8"))?;
        let tok = Tokenizer::load(path)?;
        let key = register(Live::Tok(Arc::new(tok)));
        // SAFETY: out is valid for a write (the contract), not null.
        unsafe { *out = key as *mut EtcTokenizer };
        Ok(())
    })
}

/// Frees a tokenizer from `etc_tok_load`; null is ignored (`ETC_TOK_OK`).
/// Streams made from it stay valid. A handle freed already, or not a
/// tokenizer, is `ETC_TOK_INVALID_ARGUMENT` (nothing is touched).
#[no_mangle]
pub extern "C" fn etc_tok_free(tok: *mut EtcTokenizer) -> EtcTokStatus {
    guard(std::ptr::null_mut(), 0, || {
        remove(tok as usize, "tok", |l| matches!(l, Live::Tok(_)))
    })
}

/// Encodes `text[..text_len]` (UTF-8, need not be NUL-terminated) into
/// `ids[..cap]`; `*out_len` = the number of ids. `add_special` adds what the
/// tokenizer's post-processor adds (BERT's `[CLS]`/`[SEP]`, Llama's `<s>`).
/// No ids (an empty text) is `ETC_TOK_OK` with `*out_len` = 0, whatever the
/// buffer. `ETC_TOK_ENCODE` before any work when the worst case of the ids
/// passes `ETC_TOK_MAX_ENCODE_IDS` (a text too long for this tokenizer.json).
///
/// # Safety
/// `tok` is any value (a handle that is not live is an error); `text` points
/// to `text_len` readable bytes (may be null when `text_len` is 0); `ids` is
/// null or points to `cap` writable ids; `out_len` is valid for a write;
/// `err` as in `etc_tok_load`.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // a C signature
pub unsafe extern "C" fn etc_tok_encode(
    tok: *const EtcTokenizer,
    text: *const c_char,
    text_len: usize,
    add_special: bool,
    ids: *mut u32,
    cap: usize,
    out_len: *mut usize,
    err: *mut c_char,
    err_len: usize,
) -> EtcTokStatus {
    guard(err, err_len, || {
        let t = tokenizer(tok)?;
        // SAFETY: text points to text_len readable bytes (the contract).
        let bytes = unsafe { input(text.cast::<u8>(), text_len, "text") }?;
        let text = std::str::from_utf8(bytes)
            .map_err(|e| invalid(&format!("the text is not UTF-8: {e}")))?;
        let out = t.encode(text, add_special)?;
        // SAFETY: ids/cap and out_len as the contract says.
        unsafe { copy_out(&out, 0, ids, cap, out_len) }
    })
}

/// Decodes `ids[..n]` into `text[..cap]` (UTF-8, NUL-terminated); `*out_len`
/// = the text's length in bytes without the NUL (the buffer needs one more).
/// `skip_special` leaves special tokens out. Ids outside the vocabulary are
/// skipped. `ETC_TOK_DECODE` before any work when the worst case of the text
/// passes `ETC_TOK_MAX_DECODE_BYTES`.
///
/// # Safety
/// `tok` is any value (a handle that is not live is an error); `ids` points
/// to `n` ids (may be null when `n` is 0); `text` is null or points to `cap`
/// writable bytes; `out_len` is valid for a write; `err` as in `etc_tok_load`.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // a C signature
pub unsafe extern "C" fn etc_tok_decode(
    tok: *const EtcTokenizer,
    ids: *const u32,
    n: usize,
    skip_special: bool,
    text: *mut c_char,
    cap: usize,
    out_len: *mut usize,
    err: *mut c_char,
    err_len: usize,
) -> EtcTokStatus {
    guard(err, err_len, || {
        let t = tokenizer(tok)?;
        // SAFETY: ids points to n readable ids (the contract).
        let ids = unsafe { input(ids, n, "ids") }?;
        let s = t.decode(ids, skip_special)?;
        // SAFETY: text/cap and out_len as the contract says.
        unsafe { copy_out(s.as_bytes(), 1, text.cast::<u8>(), cap, out_len) }
    })
}

/// The end-of-sequence ids into `ids[..cap]`, ascending; `*out_len` = their
/// number (0 when the file has none). Rule: an added token marked special
/// whose text is `<|endoftext|>`, `</s>`, `<|im_end|>`, `<eos>`,
/// `<end_of_turn>`, `<|end_of_text|>`, `<|eot_id|>`, `<|eom_id|>` or `<|end|>`.
///
/// # Safety
/// `tok` is any value (a handle that is not live is an error); `ids` is null
/// or points to `cap` writable ids; `out_len` is valid for a write; `err` as
/// in `etc_tok_load`.
#[no_mangle]
pub unsafe extern "C" fn etc_tok_eos_ids(
    tok: *const EtcTokenizer,
    ids: *mut u32,
    cap: usize,
    out_len: *mut usize,
    err: *mut c_char,
    err_len: usize,
) -> EtcTokStatus {
    guard(err, err_len, || {
        let t = tokenizer(tok)?;
        // SAFETY: ids/cap and out_len as the contract says.
        unsafe { copy_out(t.eos_ids(), 0, ids, cap, out_len) }
    })
}

/// The number of ids, added tokens included (0 for a handle that is not a
/// live tokenizer, null included).
#[no_mangle]
pub extern "C" fn etc_tok_vocab_size(tok: *const EtcTokenizer) -> usize {
    let mut size = 0;
    let _ = guard(std::ptr::null_mut(), 0, || {
        size = tokenizer(tok)?.vocab_size();
        Ok(())
    });
    size
}

/// A streaming decoder on `tok` into `*out`: feed it the generated ids one at
/// a time with `etc_tok_stream_push`, which gives the text each one completes;
/// `etc_tok_stream_finish` at the end gives what was held back. The pieces
/// together equal `etc_tok_decode` of all the ids (see README: the exception).
///
/// # Safety
/// `tok` is any value (a handle that is not live is an error); `out` is valid
/// for a write; `err` as in `etc_tok_load`.
#[no_mangle]
pub unsafe extern "C" fn etc_tok_stream_new(
    tok: *const EtcTokenizer,
    skip_special: bool,
    out: *mut *mut EtcTokStream,
    err: *mut c_char,
    err_len: usize,
) -> EtcTokStatus {
    guard(err, err_len, || {
        let t = tokenizer(tok)?;
        if out.is_null() {
            return Err(invalid("out is null"));
        }
        let key = register(Live::Stream(Arc::new(Mutex::new(StreamState {
            tok: t,
            stream: DecodeStream::new(skip_special),
            text: vec![0],
        }))));
        // SAFETY: out is valid for a write (the contract), not null.
        unsafe { *out = key as *mut EtcTokStream };
        Ok(())
    })
}

fn stream_text(
    s: *mut EtcTokStream,
    text: *mut *const c_char,
    out_len: *mut usize,
    f: impl FnOnce(&mut DecodeStream, &Tokenizer) -> Result<String>,
) -> Result<()> {
    if text.is_null() || out_len.is_null() {
        return Err(invalid("text and out_len must not be null"));
    }
    let st = stream(s)?;
    let mut guard = st.lock().unwrap_or_else(|p| p.into_inner());
    let s = &mut *guard;
    let piece = f(&mut s.stream, &s.tok)?;
    s.text.clear();
    s.text.extend_from_slice(piece.as_bytes());
    s.text.push(0);
    // SAFETY: text and out_len are valid for writes (the callers' contract), not null.
    unsafe {
        *text = s.text.as_ptr().cast();
        *out_len = piece.len();
    }
    Ok(())
}

/// Appends `id`; `*text` points to the text it completes (`*out_len` bytes,
/// NUL-terminated, often empty), owned by the stream and valid until its next
/// call or `etc_tok_stream_free`.
///
/// # Safety
/// `stream` is any value (a handle that is not live is an error; calls on
/// one stream from several threads are serialized, but `*text` is only
/// valid until the stream's next call); `text` and `out_len` are valid for
/// writes; `err` as in `etc_tok_load`.
#[no_mangle]
pub unsafe extern "C" fn etc_tok_stream_push(
    stream: *mut EtcTokStream,
    id: u32,
    text: *mut *const c_char,
    out_len: *mut usize,
    err: *mut c_char,
    err_len: usize,
) -> EtcTokStatus {
    guard(err, err_len, || {
        stream_text(stream, text, out_len, |s, t| s.push(t, id))
    })
}

/// The text held back at the end (an incomplete UTF-8 sequence, written as
/// the full decode writes it: U+FFFD); same outputs as `etc_tok_stream_push`.
///
/// # Safety
/// As `etc_tok_stream_push`.
#[no_mangle]
pub unsafe extern "C" fn etc_tok_stream_finish(
    stream: *mut EtcTokStream,
    text: *mut *const c_char,
    out_len: *mut usize,
    err: *mut c_char,
    err_len: usize,
) -> EtcTokStatus {
    guard(err, err_len, || {
        stream_text(stream, text, out_len, |s, t| s.finish(t))
    })
}

/// Frees a stream; null is ignored (`ETC_TOK_OK`). A handle freed already,
/// or not a stream, is `ETC_TOK_INVALID_ARGUMENT` (nothing is touched).
#[no_mangle]
pub extern "C" fn etc_tok_stream_free(stream: *mut EtcTokStream) -> EtcTokStatus {
    guard(std::ptr::null_mut(), 0, || {
        remove(stream as usize, "stream", |l| matches!(l, Live::Stream(_)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_internal_with_its_message() {
        let mut buf = [0 as c_char; 64];
        let st = guard(buf.as_mut_ptr(), buf.len(), || panic!("boom"));
        assert_eq!(st, ETC_TOK_INTERNAL);
        // SAFETY: write_message NUL-terminated the buffer.
        let msg = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap();
        assert_eq!(msg, "internal error (panic: boom)");
    }

    #[test]
    fn messages_are_cut_at_a_character_boundary_and_kept_on_one_line() {
        let mut buf = [0x55 as c_char; 6];
        write_message(buf.as_mut_ptr(), buf.len(), "ab\ncdéf");
        // SAFETY: NUL-terminated by write_message.
        let msg = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_bytes();
        // 5 bytes fit; "ab cd" then 'é' (2 bytes) would not.
        assert_eq!(msg, b"ab cd");
        let mut tiny = [0x55 as c_char; 1];
        write_message(tiny.as_mut_ptr(), 1, "anything");
        assert_eq!(tiny[0], 0);
    }
}
