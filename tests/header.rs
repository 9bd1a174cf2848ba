//! The committed C header must equal what cbindgen generates from the sources.
//! Regenerate with `UPDATE_HEADER=1 cargo test --test header`.

#[test]
fn header_is_fresh() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let cfg = cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).expect("cbindgen.toml");
    let mut out = Vec::new();
    // The header is generated from the C API's files only (not the aoti_torch_* shims).
    let mut b = cbindgen::Builder::new().with_config(cfg);
    for f in ["types.rs", "api.rs", "memory.rs", "options.rs"] {
        b = b.with_src(format!("{dir}/src/ffi/{f}"));
    }
    b.generate().expect("cbindgen").write(&mut out);
    let path = format!("{dir}/include/executorch_cuda.h");
    if std::env::var_os("UPDATE_HEADER").is_some() {
        std::fs::write(&path, &out).unwrap();
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == out,
        "include/executorch_cuda.h is stale: run `UPDATE_HEADER=1 cargo test --test header` and commit it"
    );
}
