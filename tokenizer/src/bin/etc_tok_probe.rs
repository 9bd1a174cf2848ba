//! `etc_tok_probe FILE...`: loads each `tokenizer.json` through the C API and,
//! when it loads, encodes a few texts (empty, ASCII, mixed scripts, 10 KB),
//! decodes and streams the ids back, then frees every handle twice (the
//! second free must be refused). Prints one line a file: `LOADED <name>` or
//! `REFUSED <name>: <status> <message>`; exits 1 when a refusal has no
//! message or a call breaks the API's contract. The hostile-file test
//! (tests/hostile.rs) runs it in a child process per file, so that an abort
//! or a hang is seen, and counted, instead of ending the test run.

use etc_tokenizer::ffi::*;
use std::ffi::{c_char, CStr, CString};
use std::ptr::{null, null_mut};

const TEXTS: [&str; 4] = [
    "",
    "hello world, the runner loads a program",
    "Grüße, 世界! 🚀 ÅΩ ﷺ ㌀ İ",
    "<|endoftext|></s>[CLS]<s> \u{0}\u{FFFD}\t\r\n  ",
];

struct Msg([c_char; 512]);

impl Msg {
    fn text(&self) -> String {
        // SAFETY: every call below that gets this buffer NUL-terminates it.
        unsafe { CStr::from_ptr(self.0.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }
}

fn fail(what: String) -> ! {
    println!("CONTRACT {what}");
    std::process::exit(1)
}

/// Encodes with the two-call size protocol (a null buffer first, as C++ does
/// with an empty vector); `Err` with the message on a refusal.
fn encode(tok: *const EtcTokenizer, text: &str) -> Result<Vec<u32>, String> {
    let mut msg = Msg([0; 512]);
    let mut n = 0usize;
    // SAFETY: text is text.len() readable bytes; a null buffer of capacity 0.
    let st = unsafe {
        etc_tok_encode(
            tok,
            text.as_ptr().cast(),
            text.len(),
            true,
            null_mut(),
            0,
            &mut n,
            msg.0.as_mut_ptr(),
            512,
        )
    };
    match st {
        ETC_TOK_OK if n == 0 => return Ok(Vec::new()),
        ETC_TOK_OK => fail(format!("encode: OK into a null buffer with {n} ids")),
        ETC_TOK_BUFFER_TOO_SMALL => {}
        _ => return Err(format!("{st} {}", msg.text())),
    }
    let mut ids = vec![0u32; n];
    // SAFETY: ids has room for n ids.
    let st = unsafe {
        etc_tok_encode(
            tok,
            text.as_ptr().cast(),
            text.len(),
            true,
            ids.as_mut_ptr(),
            n,
            &mut n,
            msg.0.as_mut_ptr(),
            512,
        )
    };
    if st != ETC_TOK_OK {
        fail(format!(
            "encode: the second call failed: {st} {}",
            msg.text()
        ));
    }
    ids.truncate(n);
    Ok(ids)
}

fn decode(tok: *const EtcTokenizer, ids: &[u32]) -> Result<(), String> {
    let mut msg = Msg([0; 512]);
    let mut n = 0usize;
    // SAFETY: ids is readable; a null text buffer asks for the size.
    let st = unsafe {
        etc_tok_decode(
            tok,
            ids.as_ptr(),
            ids.len(),
            false,
            null_mut(),
            0,
            &mut n,
            msg.0.as_mut_ptr(),
            512,
        )
    };
    if st != ETC_TOK_BUFFER_TOO_SMALL {
        return Err(format!("{st} {}", msg.text()));
    }
    let mut buf = vec![0 as c_char; n + 1];
    // SAFETY: buf has n + 1 bytes.
    let st = unsafe {
        etc_tok_decode(
            tok,
            ids.as_ptr(),
            ids.len(),
            false,
            buf.as_mut_ptr(),
            n + 1,
            &mut n,
            msg.0.as_mut_ptr(),
            512,
        )
    };
    if st != ETC_TOK_OK {
        fail(format!(
            "decode: the second call failed: {st} {}",
            msg.text()
        ));
    }
    Ok(())
}

fn stream(tok: *const EtcTokenizer, ids: &[u32]) {
    let mut s = null_mut();
    // SAFETY: a live tokenizer and an out pointer.
    if unsafe { etc_tok_stream_new(tok, true, &mut s, null_mut(), 0) } != ETC_TOK_OK {
        fail("stream_new failed on a live tokenizer".into());
    }
    let (mut text, mut len): (*const c_char, usize) = (null(), 0);
    for &id in ids.iter().take(64) {
        // SAFETY: a live stream and valid out pointers; a refusal is fine.
        let _ = unsafe { etc_tok_stream_push(s, id, &mut text, &mut len, null_mut(), 0) };
    }
    // SAFETY: as above.
    let _ = unsafe { etc_tok_stream_finish(s, &mut text, &mut len, null_mut(), 0) };
    if etc_tok_stream_free(s) != ETC_TOK_OK || etc_tok_stream_free(s) != ETC_TOK_INVALID_ARGUMENT {
        fail("stream: free, then a second free, did not give OK then INVALID_ARGUMENT".into());
    }
}

fn probe(path: &str) {
    let c = CString::new(path).unwrap_or_else(|_| fail("a path with a NUL".into()));
    let mut tok = null_mut();
    let mut msg = Msg([0x55; 512]);
    // SAFETY: a NUL-terminated path, an out pointer, a 512-byte message buffer.
    let st = unsafe { etc_tok_load(c.as_ptr(), &mut tok, msg.0.as_mut_ptr(), 512) };
    let name = path.rsplit('/').next().unwrap_or(path);
    if st != ETC_TOK_OK {
        let m = msg.text();
        if m.is_empty() {
            fail(format!("{name}: refused ({st}) with no message"));
        }
        println!("REFUSED {name}: {st} {m}");
        return;
    }
    let long = "The quick brown fox, 1234 jumps; ünïcödé ☃ ".repeat(250);
    let _ = etc_tok_vocab_size(tok);
    for text in TEXTS.iter().copied().chain([long.as_str()]) {
        match encode(tok, text) {
            Ok(ids) => {
                // (A padded encoding may hold 2^17 ids: a few decode.)
                let _ = decode(tok, &ids[..ids.len().min(4096)]);
                stream(tok, &ids);
            }
            Err(m) if m.len() > 2 => {}
            Err(m) => fail(format!("{name}: encode refused with no message: {m}")),
        }
    }
    // Ids the vocabulary may not have.
    let _ = decode(tok, &[0, 1, 2, u32::MAX, 1 << 31]);
    if etc_tok_free(tok) != ETC_TOK_OK || etc_tok_free(tok) != ETC_TOK_INVALID_ARGUMENT {
        fail(format!(
            "{name}: free, then a second free, did not give OK then INVALID_ARGUMENT"
        ));
    }
    println!("LOADED {name}");
}

fn main() {
    // A panic inside the library is caught there (ETC_TOK_INTERNAL with its
    // message); the default hook would also print it.
    std::panic::set_hook(Box::new(|_| {}));
    for path in std::env::args().skip(1) {
        probe(&path);
    }
}
