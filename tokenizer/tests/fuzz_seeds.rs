//! The `tokenizer_json` fuzz target's body (src/fuzz.rs) over its seeds
//! (fuzz/seeds/tokenizer_json) and every 97th truncation of each, as CI runs
//! the other targets' bodies: no abort, no stack overflow, no escaped panic.

#[test]
fn fuzz_body_over_the_seeds_and_their_truncations() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/seeds/tokenizer_json");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        etc_tokenizer::fuzz::load_and_use(&bytes);
        for cut in (0..bytes.len()).step_by(97) {
            etc_tokenizer::fuzz::load_and_use(&bytes[..cut]);
        }
        n += 1;
    }
    assert!(n >= 10, "{n} seeds");
}
