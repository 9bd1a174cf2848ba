//! Untrusted `tokenizer.json` bytes through the tokenizer library's load
//! limits and the `tokenizers` crate, then encode/decode/stream when they load
//! (body: tokenizer/src/fuzz.rs). Run it with a large input limit
//! (`-max_len=1048576`) and a memory limit, so that an oversized allocation is
//! a finding: see fuzz/README.md.
//!
//! A panic inside the `tokenizers` crate is caught by the library (an error;
//! the C API's `ETC_TOK_INTERNAL`), so it is no finding here: libfuzzer-sys's
//! panic hook, which aborts before any catch, is replaced by a silent one.
//! The findings are aborts (an allocation past `-malloc_limit_mb`), stack
//! overflows, hangs (`-timeout`) and AddressSanitizer reports.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(
    init: std::panic::set_hook(Box::new(|_| {})),
    |data: &[u8]| etc_tokenizer::fuzz::load_and_use(data)
);
