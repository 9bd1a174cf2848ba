//! The committed C header must equal what cbindgen generates from the sources.
//! Regenerate with `UPDATE_HEADER=1 cargo test --test header`.

#[test]
fn header_is_fresh() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let cfg = cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).expect("cbindgen.toml");
    let mut out = Vec::new();
    // The header is generated from every file of the C API (src/ffi; the aoti_torch_* shims
    // are src/shim), in this order.
    let mut b = cbindgen::Builder::new().with_config(cfg);
    let files = ["types.rs", "api.rs", "memory.rs", "sample.rs", "options.rs"];
    for f in files {
        b = b.with_src(format!("{dir}/src/ffi/{f}"));
    }
    let mut found: Vec<String> = std::fs::read_dir(format!("{dir}/src/ffi"))
        .expect("src/ffi")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".rs") && n != "mod.rs")
        .collect();
    found.sort();
    let mut listed: Vec<String> = files.iter().map(|f| f.to_string()).collect();
    listed.sort();
    assert_eq!(
        found, listed,
        "a file of src/ffi is missing from the header's list (or gone)"
    );
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
