//! The body of the `tokenizer_json` fuzz target (fuzz/fuzz_targets/tokenizer_json.rs),
//! here so that `cargo test` runs it over the seeds too (tests/fuzz_seeds.rs).

use crate::{DecodeStream, Tokenizer};
use std::panic::{catch_unwind, AssertUnwindSafe};

const TEXTS: [&str; 4] = [
    "",
    "Hello world, the runner loads a program 1234",
    "Grüße 世界 🚀 ﷺ İ\u{0}\t\n",
    "<|endoftext|></s>[CLS]<s><unk>",
];

/// Loads `bytes` as a `tokenizer.json`; when it loads, encodes a few texts and
/// decodes and streams their ids. Either outcome is fine; what must not happen
/// is an abort (a huge allocation), a stack overflow or a hang, which the
/// fuzzer reports. A panic is caught, as the C API's guard catches it (it
/// becomes `ETC_TOK_INTERNAL` there).
pub fn load_and_use(bytes: &[u8]) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let Ok(tok) = Tokenizer::from_bytes(bytes) else {
            return;
        };
        let _ = tok.vocab_size();
        for text in TEXTS {
            let Ok(ids) = tok.encode(text, true) else {
                continue;
            };
            let _ = tok.decode(&ids[..ids.len().min(4096)], false);
            let mut s = DecodeStream::new(true);
            for &id in ids.iter().take(32) {
                let _ = s.push(&tok, id);
            }
            let _ = s.finish(&tok);
        }
        let _ = tok.decode(&[0, 1, 2, u32::MAX], true);
    }));
}
