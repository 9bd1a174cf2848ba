//! Gives the shared library a SONAME carrying the major version
//! (`libexecutorch_cuda.so.0`), so that programs linked against it record the
//! versioned name and a later incompatible major can be installed beside it.
//! CMake installs the file under that name plus a `libexecutorch_cuda.so`
//! symlink for linking.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" {
        let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".to_string());
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libexecutorch_cuda.so.{major}");
    }
}
