//! The committed C header must equal what cbindgen generates from src/ffi.rs.
//! Regenerate with `UPDATE_HEADER=1 cargo test -p executorch-cuda-tokenizer --test header`.

#[test]
fn header_is_fresh() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let cfg = cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).expect("cbindgen.toml");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_config(cfg)
        .with_src(format!("{dir}/src/ffi.rs"))
        .generate()
        .expect("cbindgen")
        .write(&mut out);
    let path = format!("{dir}/include/etc_tokenizer.h");
    if std::env::var_os("UPDATE_HEADER").is_some() {
        std::fs::write(&path, &out).unwrap();
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == out,
        "tokenizer/include/etc_tokenizer.h is stale: run `UPDATE_HEADER=1 cargo test -p executorch-cuda-tokenizer --test header` and commit it"
    );
}
