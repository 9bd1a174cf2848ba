//! `et_cuda_init`'s named-data path: a fuzzed processed payload (empty, text
//! keys or `ETCUDAFQN3`) and a named-data callback serving fuzzed blobs, with
//! the mlp_f32 fixture's real `.so` served for `*_so_blob` keys when the
//! fixtures are there (`ET_CUDA_FIXTURES` or `tests/fixtures`).
//! Without a GPU every input must end in an error status, never a crash.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

#[path = "init_named_data_body.rs"]
mod body;

fn real_so() -> Option<&'static [u8]> {
    static SO: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    SO.get_or_init(|| {
        let dir = std::env::var_os("ET_CUDA_FIXTURES")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures").into());
        std::fs::read(dir.join("mlp_f32/forward_so_blob.bin")).ok()
    })
    .as_deref()
}

fuzz_target!(|data: &[u8]| {
    body::run(data, real_so());
});
