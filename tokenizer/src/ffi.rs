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
//! fit, so a second call with a large enough buffer succeeds.

use crate::{DecodeStream, Error, Result, Tokenizer};
use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

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

/// A loaded tokenizer (opaque). Free with `etc_tok_free`.
pub struct EtcTokenizer {
    tok: Arc<Tokenizer>,
}

/// A streaming decoder (opaque). It keeps its tokenizer alive: the two may be
/// freed in any order. Free with `etc_tok_stream_free`.
pub struct EtcTokStream {
    tok: Arc<Tokenizer>,
    stream: DecodeStream,
    // The last piece of text, NUL-terminated; what the last call pointed at.
    text: Vec<u8>,
}

/// Runs a C API body: a panic becomes `Error::Internal`; the outcome becomes
/// a status code and the message (or "") goes to `err`.
fn guard(err: *mut c_char, err_len: usize, f: impl FnOnce() -> Result<()>) -> EtcTokStatus {
    let r = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let what = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown payload".into());
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

/// The tokenizer behind `tok`.
///
/// # Safety
/// `tok` is null or a pointer from `etc_tok_load` not freed yet.
unsafe fn tokenizer<'a>(tok: *const EtcTokenizer) -> Result<&'a EtcTokenizer> {
    // SAFETY: the caller's contract: null or a live EtcTokenizer.
    unsafe { tok.as_ref() }.ok_or_else(|| invalid("tok is null"))
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
/// than `src.len() + extra` (`extra` = 1 for text: its NUL).
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
/// Errors: `ETC_TOK_IO` (cannot read), `ETC_TOK_MALFORMED` (not a tokenizer),
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
        let boxed = Box::new(EtcTokenizer { tok: Arc::new(tok) });
        // SAFETY: out is valid for a write (the contract), not null.
        unsafe { *out = Box::into_raw(boxed) };
        Ok(())
    })
}

/// Frees a tokenizer from `etc_tok_load`; null is ignored. Streams made from
/// it stay valid.
///
/// # Safety
/// `tok` is null or from `etc_tok_load`, not freed before.
#[no_mangle]
pub unsafe extern "C" fn etc_tok_free(tok: *mut EtcTokenizer) {
    let _ = guard(std::ptr::null_mut(), 0, || {
        if !tok.is_null() {
            // SAFETY: tok came from Box::into_raw in etc_tok_load and is freed once (the contract).
            drop(unsafe { Box::from_raw(tok) });
        }
        Ok(())
    });
}

/// Encodes `text[..text_len]` (UTF-8, need not be NUL-terminated) into
/// `ids[..cap]`; `*out_len` = the number of ids. `add_special` adds what the
/// tokenizer's post-processor adds (BERT's `[CLS]`/`[SEP]`, Llama's `<s>`).
///
/// # Safety
/// `tok` is from `etc_tok_load`; `text` points to `text_len` readable bytes
/// (may be null when `text_len` is 0); `ids` is null or points to `cap`
/// writable ids; `out_len` is valid for a write; `err` as in `etc_tok_load`.
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
        // SAFETY: the contract: tok is from etc_tok_load.
        let t = unsafe { tokenizer(tok) }?;
        // SAFETY: text points to text_len readable bytes (the contract).
        let bytes = unsafe { input(text.cast::<u8>(), text_len, "text") }?;
        let text = std::str::from_utf8(bytes)
            .map_err(|e| invalid(&format!("the text is not UTF-8: {e}")))?;
        let out = t.tok.encode(text, add_special)?;
        // SAFETY: ids/cap and out_len as the contract says.
        unsafe { copy_out(&out, 0, ids, cap, out_len) }
    })
}

/// Decodes `ids[..n]` into `text[..cap]` (UTF-8, NUL-terminated); `*out_len`
/// = the text's length in bytes without the NUL (the buffer needs one more).
/// `skip_special` leaves special tokens out. Ids outside the vocabulary are
/// skipped.
///
/// # Safety
/// `tok` is from `etc_tok_load`; `ids` points to `n` ids (may be null when
/// `n` is 0); `text` is null or points to `cap` writable bytes; `out_len` is
/// valid for a write; `err` as in `etc_tok_load`.
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
        // SAFETY: the contract: tok is from etc_tok_load.
        let t = unsafe { tokenizer(tok) }?;
        // SAFETY: ids points to n readable ids (the contract).
        let ids = unsafe { input(ids, n, "ids") }?;
        let s = t.tok.decode(ids, skip_special)?;
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
/// `tok` is from `etc_tok_load`; `ids` is null or points to `cap` writable
/// ids; `out_len` is valid for a write; `err` as in `etc_tok_load`.
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
        // SAFETY: the contract: tok is from etc_tok_load.
        let t = unsafe { tokenizer(tok) }?;
        // SAFETY: ids/cap and out_len as the contract says.
        unsafe { copy_out(t.tok.eos_ids(), 0, ids, cap, out_len) }
    })
}

/// The number of ids, added tokens included (0 for a null `tok`).
///
/// # Safety
/// `tok` is null or from `etc_tok_load`.
#[no_mangle]
pub unsafe extern "C" fn etc_tok_vocab_size(tok: *const EtcTokenizer) -> usize {
    let mut size = 0;
    let _ = guard(std::ptr::null_mut(), 0, || {
        // SAFETY: the contract: tok is null or from etc_tok_load.
        size = unsafe { tokenizer(tok) }?.tok.vocab_size();
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
/// `tok` is from `etc_tok_load`; `out` is valid for a write; `err` as in
/// `etc_tok_load`.
#[no_mangle]
pub unsafe extern "C" fn etc_tok_stream_new(
    tok: *const EtcTokenizer,
    skip_special: bool,
    out: *mut *mut EtcTokStream,
    err: *mut c_char,
    err_len: usize,
) -> EtcTokStatus {
    guard(err, err_len, || {
        // SAFETY: the contract: tok is from etc_tok_load.
        let t = unsafe { tokenizer(tok) }?;
        if out.is_null() {
            return Err(invalid("out is null"));
        }
        let s = Box::new(EtcTokStream {
            tok: Arc::clone(&t.tok),
            stream: DecodeStream::new(skip_special),
            text: vec![0],
        });
        // SAFETY: out is valid for a write (the contract), not null.
        unsafe { *out = Box::into_raw(s) };
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
    // SAFETY: the callers' contract: s is null or a live stream used by one thread.
    let s = unsafe { s.as_mut() }.ok_or_else(|| invalid("stream is null"))?;
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
/// `stream` is from `etc_tok_stream_new`, not used by another thread at the
/// same time; `text` and `out_len` are valid for writes; `err` as in
/// `etc_tok_load`.
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

/// Frees a stream; null is ignored.
///
/// # Safety
/// `stream` is null or from `etc_tok_stream_new`, not freed before.
#[no_mangle]
pub unsafe extern "C" fn etc_tok_stream_free(stream: *mut EtcTokStream) {
    let _ = guard(std::ptr::null_mut(), 0, || {
        if !stream.is_null() {
            // SAFETY: stream came from Box::into_raw in etc_tok_stream_new and is freed once.
            drop(unsafe { Box::from_raw(stream) });
        }
        Ok(())
    });
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
