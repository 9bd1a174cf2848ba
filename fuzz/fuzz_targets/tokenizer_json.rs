//! Untrusted `tokenizer.json` bytes through the tokenizer library's load
//! limits and the `tokenizers` crate, then encode/decode/stream when they load
//! (body: tokenizer/src/fuzz.rs). Run it with a large input limit
//! (`-max_len=1048576`) and a memory limit, so that an oversized allocation is
//! a finding: see fuzz/README.md.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| etc_tokenizer::fuzz::load_and_use(data));
