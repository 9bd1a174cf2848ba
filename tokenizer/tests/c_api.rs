//! The C API as C calls it: status codes, messages, the buffer-size
//! protocol, null and non-UTF-8 arguments, streams outliving their tokenizer.

use etc_tokenizer::ffi::*;
use std::ffi::{c_char, CStr, CString};
use std::ptr::{null, null_mut};

fn path(name: &str) -> CString {
    CString::new(format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

struct Err([c_char; 256]);
impl Err {
    fn new() -> Err {
        Err([0x55; 256])
    }
    fn text(&self) -> String {
        // SAFETY: the library NUL-terminates what it writes (every call below passes the buffer).
        unsafe { CStr::from_ptr(self.0.as_ptr()) }
            .to_str()
            .unwrap()
            .to_owned()
    }
}

fn load(name: &str) -> *mut EtcTokenizer {
    let mut tok = null_mut();
    let mut err = Err::new();
    // SAFETY: valid path, out pointer and error buffer.
    let st = unsafe { etc_tok_load(path(name).as_ptr(), &mut tok, err.0.as_mut_ptr(), 256) };
    assert_eq!(st, ETC_TOK_OK, "{}", err.text());
    assert_eq!(err.text(), "", "success leaves an empty message");
    tok
}

fn encode(tok: *const EtcTokenizer, text: &[u8]) -> (EtcTokStatus, Vec<u32>, String) {
    let mut err = Err::new();
    let mut n = 0usize;
    // SAFETY: text is text.len() readable bytes; a null id buffer of capacity 0 asks for the size.
    let st = unsafe {
        etc_tok_encode(
            tok,
            text.as_ptr().cast(),
            text.len(),
            false,
            null_mut(),
            0,
            &mut n,
            err.0.as_mut_ptr(),
            256,
        )
    };
    if st != ETC_TOK_BUFFER_TOO_SMALL {
        return (st, Vec::new(), err.text());
    }
    let mut ids = vec![0u32; n];
    // SAFETY: ids has room for n ids.
    let st = unsafe {
        etc_tok_encode(
            tok,
            text.as_ptr().cast(),
            text.len(),
            false,
            ids.as_mut_ptr(),
            n,
            &mut n,
            err.0.as_mut_ptr(),
            256,
        )
    };
    (st, ids, err.text())
}

#[test]
fn load_reports_bad_files_with_a_code_and_one_line() {
    let dir = std::env::temp_dir().join(format!("etc_tok_c_api_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("bad.json"), "{\"model\": [1, 2\n").unwrap();
    for (file, status, msg) in [
        (
            dir.join("missing.json"),
            ETC_TOK_IO,
            "cannot read: No such file",
        ),
        (
            dir.join("bad.json"),
            ETC_TOK_MALFORMED,
            "not a tokenizer.json: ",
        ),
    ] {
        let c = CString::new(file.to_str().unwrap()).unwrap();
        let mut tok = std::ptr::dangling_mut::<EtcTokenizer>();
        let mut err = Err::new();
        // SAFETY: valid arguments.
        let st = unsafe { etc_tok_load(c.as_ptr(), &mut tok, err.0.as_mut_ptr(), 256) };
        assert_eq!(st, status, "{}", err.text());
        assert!(err.text().starts_with(msg), "{}", err.text());
        assert!(!err.text().contains('\n'));
        assert_eq!(
            tok,
            std::ptr::dangling_mut::<EtcTokenizer>(),
            "out is written only on success"
        );
    }
    // A message cut to a small buffer stays NUL-terminated.
    let mut small = [0x55 as c_char; 8];
    let c = CString::new(dir.join("missing.json").to_str().unwrap()).unwrap();
    let mut tok = null_mut();
    assert_eq!(
        // SAFETY: an 8-byte error buffer.
        unsafe { etc_tok_load(c.as_ptr(), &mut tok, small.as_mut_ptr(), 8) },
        ETC_TOK_IO
    );
    assert_eq!(
        // SAFETY: NUL-terminated within 8 bytes.
        unsafe { CStr::from_ptr(small.as_ptr()) }.to_bytes(),
        b"cannot "
    );
    assert_eq!(
        // SAFETY: null arguments are refused, not dereferenced.
        unsafe { etc_tok_load(null(), &mut tok, null_mut(), 0) },
        ETC_TOK_INVALID_ARGUMENT
    );
    assert_eq!(
        // SAFETY: as above.
        unsafe { etc_tok_load(c.as_ptr(), null_mut(), null_mut(), 0) },
        ETC_TOK_INVALID_ARGUMENT
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn encode_decode_and_the_buffer_protocol() {
    let tok = load("bpe.json");
    let text = "stream-ordered memory pool 🚀";
    let (st, ids, msg) = encode(tok, text.as_bytes());
    assert_eq!(st, ETC_TOK_OK, "{msg}");
    assert!(ids.len() > 5);

    let mut len = 0usize;
    let mut err = Err::new();
    // SAFETY: ids is readable; a null text buffer asks for the size.
    let st = unsafe {
        etc_tok_decode(
            tok,
            ids.as_ptr(),
            ids.len(),
            true,
            null_mut(),
            0,
            &mut len,
            err.0.as_mut_ptr(),
            256,
        )
    };
    assert_eq!(st, ETC_TOK_BUFFER_TOO_SMALL);
    assert_eq!(len, text.len());
    assert!(
        err.text().contains(&format!("room for {}", text.len() + 1)),
        "{}",
        err.text()
    );
    // Exactly the length without room for the NUL is still too small.
    let mut buf = vec![0x55 as c_char; len + 1];
    // SAFETY: buf has len + 1 bytes; capacity len is passed.
    let st = unsafe {
        etc_tok_decode(
            tok,
            ids.as_ptr(),
            ids.len(),
            true,
            buf.as_mut_ptr(),
            len,
            &mut len,
            null_mut(),
            0,
        )
    };
    assert_eq!(st, ETC_TOK_BUFFER_TOO_SMALL);
    // SAFETY: buf has len + 1 bytes.
    let st = unsafe {
        etc_tok_decode(
            tok,
            ids.as_ptr(),
            ids.len(),
            true,
            buf.as_mut_ptr(),
            len + 1,
            &mut len,
            null_mut(),
            0,
        )
    };
    assert_eq!(st, ETC_TOK_OK);
    assert_eq!(
        // SAFETY: NUL-terminated by the library.
        unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap(),
        text
    );

    // Text that is not UTF-8, null text with a length, a null tokenizer.
    let (st, _, msg) = encode(tok, b"ab\xffcd");
    assert_eq!(st, ETC_TOK_INVALID_ARGUMENT);
    assert!(msg.starts_with("the text is not UTF-8"), "{msg}");
    let mut n = 0usize;
    // SAFETY: null pointers are refused, not dereferenced.
    unsafe {
        assert_eq!(
            etc_tok_encode(tok, null(), 3, false, null_mut(), 0, &mut n, null_mut(), 0),
            ETC_TOK_INVALID_ARGUMENT
        );
        assert_eq!(
            etc_tok_encode(
                null(),
                c"x".as_ptr(),
                1,
                false,
                null_mut(),
                0,
                &mut n,
                null_mut(),
                0
            ),
            ETC_TOK_INVALID_ARGUMENT
        );
        assert_eq!(
            etc_tok_encode(
                tok,
                c"x".as_ptr(),
                1,
                false,
                null_mut(),
                0,
                null_mut(),
                null_mut(),
                0
            ),
            ETC_TOK_INVALID_ARGUMENT
        );
        assert_eq!(
            etc_tok_decode(tok, null(), 2, false, null_mut(), 0, &mut n, null_mut(), 0),
            ETC_TOK_INVALID_ARGUMENT
        );
        assert_eq!(etc_tok_vocab_size(null()), 0);
        assert_eq!(etc_tok_vocab_size(tok), 500);
    }
    // An empty text is no error: zero ids.
    let (st, ids, _) = encode(tok, b"");
    assert_eq!((st, ids.len()), (ETC_TOK_OK, 0));
    assert_eq!(etc_tok_free(tok), ETC_TOK_OK);
    assert_eq!(etc_tok_free(null_mut()), ETC_TOK_OK);
}

#[test]
fn eos_ids_and_a_stream_that_outlives_its_tokenizer() {
    let tok = load("unigram.json");
    let mut eos = [0u32; 4];
    let mut n = 0usize;
    assert_eq!(
        // SAFETY: room for 4 ids.
        unsafe { etc_tok_eos_ids(tok, eos.as_mut_ptr(), 4, &mut n, null_mut(), 0) },
        ETC_TOK_OK
    );
    assert_eq!(n, 1);
    let (_, mut ids, _) = encode(tok, b"The runner loads a program.");
    ids.push(eos[0]);

    let mut stream = null_mut();
    assert_eq!(
        // SAFETY: valid tokenizer and out pointer.
        unsafe { etc_tok_stream_new(tok, true, &mut stream, null_mut(), 0) },
        ETC_TOK_OK
    );
    // The stream keeps the tokenizer alive.
    assert_eq!(etc_tok_free(tok), ETC_TOK_OK);
    let mut out = String::new();
    for &id in &ids {
        let mut text: *const c_char = null();
        let mut len = 0usize;
        assert_eq!(
            // SAFETY: live stream, valid out pointers.
            unsafe { etc_tok_stream_push(stream, id, &mut text, &mut len, null_mut(), 0) },
            ETC_TOK_OK
        );
        // SAFETY: text points to len bytes plus a NUL, valid until the next call.
        let piece = unsafe { CStr::from_ptr(text) }.to_str().unwrap();
        assert_eq!(piece.len(), len);
        out += piece;
    }
    let mut text: *const c_char = null();
    let mut len = 0usize;
    assert_eq!(
        // SAFETY: as above.
        unsafe { etc_tok_stream_finish(stream, &mut text, &mut len, null_mut(), 0) },
        ETC_TOK_OK
    );
    assert_eq!(len, 0);
    assert_eq!(out, "The runner loads a program.");
    // SAFETY: null outputs are refused; then freed once.
    unsafe {
        assert_eq!(
            etc_tok_stream_push(stream, 1, null_mut(), &mut len, null_mut(), 0),
            ETC_TOK_INVALID_ARGUMENT
        );
        assert_eq!(
            etc_tok_stream_push(null_mut(), 1, &mut text, &mut len, null_mut(), 0),
            ETC_TOK_INVALID_ARGUMENT
        );
    }
    assert_eq!(etc_tok_stream_free(stream), ETC_TOK_OK);
    assert_eq!(etc_tok_stream_free(null_mut()), ETC_TOK_OK);
}

/// Calls `etc_tok_encode` as C++ does with an empty `std::vector`: a null
/// buffer of capacity 0, on both calls of the size protocol.
fn encode_into_null(tok: *const EtcTokenizer, text: &[u8]) -> (EtcTokStatus, usize, String) {
    let mut err = Err::new();
    let mut n = usize::MAX;
    // SAFETY: text is readable; a null id buffer of capacity 0.
    let st = unsafe {
        etc_tok_encode(
            tok,
            text.as_ptr().cast(),
            text.len(),
            false,
            null_mut(),
            0,
            &mut n,
            err.0.as_mut_ptr(),
            256,
        )
    };
    (st, n, err.text())
}

#[test]
fn an_empty_encoding_needs_no_buffer() {
    let tok = load("bpe.json");
    // Before the fix this was BUFFER_TOO_SMALL with *out_len = 0, however
    // often it was called: "the output needs room for 0 elements".
    assert_eq!(encode_into_null(tok, b""), (ETC_TOK_OK, 0, String::new()));
    // A text with ids still asks for room.
    let (st, n, msg) = encode_into_null(tok, b"hello");
    assert_eq!(st, ETC_TOK_BUFFER_TOO_SMALL, "{msg}");
    assert!(n > 0);
    // No end-of-sequence ids (bpe.json has <|endoftext|>; wordpiece.json has none).
    let wp = load("wordpiece.json");
    let mut m = usize::MAX;
    // SAFETY: a null id buffer of capacity 0.
    let st = unsafe { etc_tok_eos_ids(wp, null_mut(), 0, &mut m, null_mut(), 0) };
    assert_eq!((st, m), (ETC_TOK_OK, 0));
    assert_eq!(etc_tok_free(tok), ETC_TOK_OK);
    assert_eq!(etc_tok_free(wp), ETC_TOK_OK);
}

#[test]
fn freed_and_made_up_handles_are_errors_not_crashes() {
    let tok = load("bpe.json");
    let mut stream = null_mut();
    // SAFETY: a live tokenizer and an out pointer.
    let st = unsafe { etc_tok_stream_new(tok, true, &mut stream, null_mut(), 0) };
    assert_eq!(st, ETC_TOK_OK);
    // The wrong kind of handle is refused and frees nothing.
    assert_eq!(etc_tok_free(stream.cast()), ETC_TOK_INVALID_ARGUMENT);
    assert_eq!(etc_tok_stream_free(tok.cast()), ETC_TOK_INVALID_ARGUMENT);
    let (st, _, msg) = encode(stream.cast(), b"x");
    assert_eq!(st, ETC_TOK_INVALID_ARGUMENT);
    assert!(msg.contains("stream handle, not a tokenizer"), "{msg}");

    assert_eq!(etc_tok_free(tok), ETC_TOK_OK);
    // Double free: a clean error (was a SIGSEGV / heap corruption).
    assert_eq!(etc_tok_free(tok), ETC_TOK_INVALID_ARGUMENT);
    // Use after free.
    let (st, _, msg) = encode(tok, b"x");
    assert_eq!(st, ETC_TOK_INVALID_ARGUMENT);
    assert!(msg.contains("is not a live handle"), "{msg}");
    assert_eq!(etc_tok_vocab_size(tok), 0);
    let mut s2 = null_mut();
    // SAFETY: a dead handle is looked up, not dereferenced.
    let st = unsafe { etc_tok_stream_new(tok, true, &mut s2, null_mut(), 0) };
    assert_eq!(st, ETC_TOK_INVALID_ARGUMENT);
    // The stream still works (it keeps the tokenizer alive), then goes.
    let mut text: *const c_char = null();
    let mut len = 0usize;
    // SAFETY: a live stream, valid out pointers.
    let st = unsafe { etc_tok_stream_push(stream, 31, &mut text, &mut len, null_mut(), 0) };
    assert_eq!(st, ETC_TOK_OK);
    assert_eq!(etc_tok_stream_free(stream), ETC_TOK_OK);
    assert_eq!(etc_tok_stream_free(stream), ETC_TOK_INVALID_ARGUMENT);
    // SAFETY: as above.
    let st = unsafe { etc_tok_stream_push(stream, 31, &mut text, &mut len, null_mut(), 0) };
    assert_eq!(st, ETC_TOK_INVALID_ARGUMENT);
    // A made-up pointer is never dereferenced.
    let fake = 0xdead_beef_usize as *mut EtcTokenizer;
    assert_eq!(etc_tok_free(fake), ETC_TOK_INVALID_ARGUMENT);
    assert_eq!(encode(fake, b"x").0, ETC_TOK_INVALID_ARGUMENT);
    // A new tokenizer never gets a freed handle back.
    let again = load("bpe.json");
    assert_ne!(again, tok);
    assert_eq!(etc_tok_free(again), ETC_TOK_OK);
}
