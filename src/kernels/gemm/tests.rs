//! CPU tests of the GEMM: the argument checks, the cuBLASLt search and its
//! errors, the load-time predicate. The GPU tests are in `gpu_tests`.

use super::cublaslt::{self, LIB_ENV};
use super::matmul::{alignment, describe, Key};
use super::*;
use crate::dtype::codes as dtype;
use crate::error::ErrorKind;
use crate::kernels::cpu_tensor as t;

fn msg(r: Result<Problem>) -> String {
    r.expect_err("should be refused").to_string()
}

/// A CPU view of `sizes`/`strides` at element `offset` of a fresh storage big enough for it.
fn view(dt: i32, sizes: &[i64], strides: &[i64], offset: i64) -> Tensor {
    let need = tensor::required_bytes(sizes, strides, offset, 2).expect("valid view");
    let flat = t(dt, &[(need as i64 / 2).max(1)]);
    Tensor::view(
        flat.storage.clone(),
        dt,
        sizes.to_vec(),
        strides.to_vec(),
        offset,
    )
    .expect("view")
}

#[test]
fn shape_dtype_stride_and_device_errors_are_clear() {
    let bf = dtype::BFLOAT16;
    let x = t(bf, &[2, 64]);
    let w = t(bf, &[32, 64]);
    let has = |r: Result<Problem>, s: &str| {
        let m = msg(r);
        assert!(
            m.contains(s) && m.contains("et_cuda gemm"),
            "{m:?} lacks {s:?}"
        );
    };
    has(
        check(&t(dtype::FLOAT32, &[2, 64]), &w, None),
        "bfloat16 or float16",
    );
    has(check(&x, &t(dtype::FLOAT16, &[32, 64]), None), "one dtype");
    has(check(&x, &w, Some(&t(dtype::FLOAT16, &[32]))), "one dtype");
    has(check(&x, &t(bf, &[32, 63]), None), "disagree on K");
    has(check(&x, &t(bf, &[32, 64, 1]), None), "2-d");
    has(check(&t(bf, &[]), &w, None), "at least one dimension");
    has(check(&x, &w, Some(&t(bf, &[31]))), "contiguous [32]");
    has(
        check(&x, &w, Some(&view(bf, &[32], &[2], 0))),
        "contiguous [32]",
    );
    has(check(&t(bf, &[2, 0]), &t(bf, &[32, 0]), None), "K = 0");
    // x transposed (K stride 2), the weight transposed.
    has(
        check(&view(bf, &[2, 64], &[1, 2], 0), &w, None),
        "unit stride along K",
    );
    has(
        check(&x, &view(bf, &[32, 64], &[1, 32], 0), None),
        "unit stride along K",
    );
    // Rows closer than K.
    has(
        check(&view(bf, &[3, 64], &[32, 1], 0), &w, None),
        "at least K",
    );
    has(
        check(&x, &view(bf, &[32, 64], &[8, 1], 0), None),
        "at least K",
    );
    // Leading dimensions with a gap between them.
    has(
        check(&view(bf, &[2, 3, 64], &[1000, 64, 1], 0), &w, None),
        "collapse",
    );
    // Everything right but the device: CPU tensors are refused last.
    has(check(&x, &w, Some(&t(bf, &[32]))), "one CUDA device");
    has(check(&t(bf, &[3, 5, 64]), &w, None), "one CUDA device");
    has(check(&t(bf, &[0, 64]), &w, None), "one CUDA device");
}

#[test]
fn misaligned_elements_are_refused() {
    let bf = dtype::BFLOAT16;
    let mut bytes = vec![0u64; 64];
    let odd = bytes.as_mut_ptr().cast::<u8>().wrapping_add(1).cast();
    // SAFETY: 2 * 32 bytes from `odd` lie inside `bytes`, which outlives the tensor.
    let x = unsafe {
        Tensor::borrowed(odd, bf, vec![1, 32], vec![32, 1], 0, Device::Cpu).expect("view")
    };
    let m = msg(check(&x, &t(bf, &[4, 32]), None));
    assert!(m.contains("x is not aligned to its 2-byte elements"), "{m}");
    drop(x);
    drop(bytes);
}

#[test]
fn leading_dims_collapse_into_one_row_stride_or_are_refused() {
    // [2, 3, K] with rows of 128: one stride; size-1 dims ignored; no rows: K.
    assert_eq!(row_stride(&[3], &[72], 1, 64), Some(72));
    assert_eq!(row_stride(&[2, 3], &[3 * 128, 128], 1, 64), Some(128));
    assert_eq!(row_stride(&[1, 1], &[7, 9], 1, 64), Some(64));
    assert_eq!(row_stride(&[], &[], 1, 64), Some(64));
    // A gap between the leading dims: no single row stride.
    assert_eq!(row_stride(&[2, 3], &[1000, 64], 1, 64), None);
}

fn problem(m: i64, n: i64, out_sizes: Vec<i64>) -> Problem {
    Problem {
        m,
        n,
        k: 64,
        dtype: dtype::BFLOAT16,
        ldx: 64,
        ldw: 64,
        has_bias: false,
        out_sizes,
        device: 0,
    }
}

#[test]
fn programs_need_cublaslt_for_the_linear_ops_only() {
    assert!(needs_cublaslt("aoti_torch_cuda_et_linear"));
    assert!(needs_cublaslt("aoti_torch_cuda_et_linear_bias"));
    assert!(!needs_cublaslt("aoti_torch_cuda_et_gemv"));
    assert!(!needs_cublaslt("aoti_torch_cuda_et_gemv_bias"));
    assert!(!needs_cublaslt("aoti_torch_cuda_et_decode_attention"));
    assert!(!needs_cublaslt("aoti_torch_empty_strided"));
    // No import that needs it: nothing is loaded, nothing fails.
    require_for_imports(["aoti_torch_cuda_et_decode_attention", "aoti_torch_mm_out"])
        .expect("no cuBLASLt needed");
    require_for_imports(std::iter::empty()).expect("no imports");
    // One that needs it: the process's cuBLASLt decides, and a failure names the op.
    let r = require_for_imports([
        "aoti_torch_cuda_et_decode_attention",
        "aoti_torch_cuda_et_linear",
    ]);
    match (require_cublaslt(), r) {
        (Ok(()), Ok(())) => {}
        (Err(_), Err(e)) => {
            assert_eq!(e.kind(), ErrorKind::LoadFailed);
            let m = e.to_string();
            assert!(
                m.contains("aoti_torch_cuda_et_linear") && m.contains("libcublasLt"),
                "{m}"
            );
        }
        (a, b) => panic!("require_cublaslt {a:?} but require_for_imports {b:?}"),
    }
}

#[test]
fn a_forced_path_that_does_not_load_is_named() {
    let e = cublaslt::load(Some("/nonexistent/dir/libcublasLt.so.13")).expect_err("no such file");
    assert!(
        e.contains("ET_CUDA_CUBLASLT=/nonexistent/dir/libcublasLt.so.13"),
        "{e}"
    );
    assert!(e.contains("not found") && e.contains("cuBLASLt"), "{e}");
    // Not a library at all: the loader's reason is kept.
    let toml = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let e = cublaslt::load(Some(toml)).expect_err("not an ELF file");
    assert!(e.contains(toml) && e.contains("ELF"), "{e}");
    // A library without cuBLASLt's functions (the C library itself).
    let libc_path = loaded_library_of(libc::malloc as *const std::ffi::c_void);
    let e = cublaslt::load(Some(&libc_path)).expect_err("libc is not cuBLASLt");
    assert!(
        e.contains(&libc_path) && e.contains("lacks cublasLtGetVersion"),
        "{e}"
    );
}

fn loaded_library_of(addr: *const std::ffi::c_void) -> String {
    // SAFETY: all-zero Dl_info is valid; dladdr fills it for an address of a loaded library.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    assert_ne!(unsafe { libc::dladdr(addr, &mut info) }, 0);
    // SAFETY: dladdr succeeded: a NUL-terminated path owned by the loader.
    unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn the_search_tries_the_names_then_the_cuda_folders() {
    assert_eq!(
        cublaslt::candidates(Some("/x/libcublasLt.so")),
        ["/x/libcublasLt.so"]
    );
    let c = cublaslt::candidates(None);
    assert_eq!(
        &c[..3],
        ["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"]
    );
    assert!(
        c.iter()
            .any(|p| p == "/usr/local/cuda/lib64/libcublasLt.so.13"),
        "{c:?}"
    );
    let dir = cublaslt::cuda_dir_of;
    assert_eq!(
        dir("/site/nvidia/cu13/lib/libcudart.so.13"),
        Some("/site/nvidia/cu13/lib")
    );
    assert_eq!(dir("/usr/lib/libnvrtc.so.12.8"), Some("/usr/lib"));
    assert_eq!(dir("/usr/lib/libc.so.6"), None);
    assert_eq!(dir("libcudart.so.13"), None);
    let distinct: std::collections::HashSet<&String> = c.iter().collect();
    assert_eq!(distinct.len(), c.len(), "{c:?}");
    // Without the variable: found, or an error that names what was tried and the variable.
    match cublaslt::load(None) {
        Ok(api) => {
            println!("found cuBLASLt {} at {}", api.version, api.path);
            assert!(api.path.contains("libcublasLt"), "{}", api.path);
        }
        Err(e) => {
            println!("not found: {e}");
            for s in [
                "libcublasLt.so.13",
                "/usr/local/cuda/lib64/libcublasLt.so.12",
                LIB_ENV,
            ] {
                assert!(e.contains(s), "{e:?} lacks {s}");
            }
        }
    }
}

/// With a real cuBLASLt (the one `ET_CUDA_CUBLASLT` names, else the one the search finds, e.g.
/// a CUDA toolkit's or the pip wheel's under `$VIRTUAL_ENV`): it opens without a GPU, every
/// function resolves, the version is sane, and the descriptors are accepted.
#[test]
fn a_real_cublaslt_resolves_every_function() {
    let env = std::env::var(LIB_ENV).ok().filter(|p| !p.is_empty());
    let api = match (env, cublaslt::load(None)) {
        (Some(path), _) => cublaslt::load(Some(&path)).unwrap_or_else(|e| panic!("{e}")),
        (None, Ok(api)) => api,
        (None, Err(_)) => {
            println!("skipped: no cuBLASLt here (set {LIB_ENV} to test one)");
            return;
        }
    };
    println!("cuBLASLt {} from {}", api.version, api.path);
    assert!(api.version >= 11_000, "{}", api.version);
    assert!(api.path.contains("libcublasLt"), "{}", api.path);
    // Now loaded in this process: its folder is among the places searched.
    let (dir, _) = api.path.rsplit_once('/').expect("a path");
    let c = cublaslt::candidates(None);
    assert!(c.contains(&format!("{dir}/libcublasLt.so.12")), "{c:?}");
    // The descriptors and the preference need no device: every attribute's id and size is
    // one this library accepts (a wrong one is CUBLAS_STATUS_INVALID_VALUE).
    for (dt, bias) in [(dtype::BFLOAT16, Some(0x1000u64)), (dtype::FLOAT16, None)] {
        let mut p = problem(33, 2048, vec![33, 2048]);
        p.dtype = dt;
        super::matmul::descriptors(&api, &p, bias).unwrap_or_else(|e| panic!("{e}"));
    }
    let key = Key {
        device: 0,
        dtype: dtype::BFLOAT16,
        m: 33,
        n: 2048,
        k: 64,
        ldx: 64,
        ldw: 64,
        bias: false,
        align: [2, 16, 256],
    };
    super::matmul::preference(&api, &key).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn statuses_become_errors_naming_the_call() {
    cublaslt::check(0, || unreachable!()).expect("success");
    let e = cublaslt::check(15, || "cublasLtMatmul (M=1)".into()).expect_err("failure");
    assert_eq!(e.kind(), ErrorKind::Cuda);
    assert_eq!(
        e.message(),
        "cublasLtMatmul (M=1) failed: CUBLAS_STATUS_NOT_SUPPORTED (15)"
    );
    let e = cublaslt::check(3, || "x".into()).expect_err("failure");
    assert_eq!(e.kind(), ErrorKind::OutOfMemory);
    assert_eq!(cublaslt::status_name(99), "cuBLAS status 99");
}

#[test]
fn alignments_and_descriptions() {
    assert_eq!(alignment(0), 256);
    assert_eq!(alignment(0x1000), 256);
    assert_eq!(alignment(0x1010), 16);
    assert_eq!(alignment(0x1006), 2);
    let k = Key {
        device: 0,
        dtype: dtype::FLOAT16,
        m: 128,
        n: 2048,
        k: 8192,
        ldx: 8200,
        ldw: 8192,
        bias: true,
        align: [16, 256, 256],
    };
    assert_eq!(
        describe(&k),
        "M=128 N=2048 K=8192 fp16, x row stride 8200, W row stride 8192, bias, alignments x/W/out [16, 256, 256] bytes"
    );
}

/// `ET_CUDA_CUBLASLT` as the process reads it: this test runs itself in a child process with
/// the variable naming a file that does not exist; there `require_cublaslt` must fail with a
/// `LoadFailed` error naming it (the parent's cuBLASLt state is untouched).
#[test]
fn the_variable_is_what_the_process_loads() {
    const CHILD: &str = "ET_CUDA_TEST_CUBLASLT_CHILD";
    const BOGUS: &str = "/nonexistent/et-cuda-test/libcublasLt.so.13";
    if std::env::var_os(CHILD).is_some() {
        let e = require_cublaslt().expect_err("the variable names no library");
        assert_eq!(e.kind(), ErrorKind::LoadFailed);
        let m = e.to_string();
        assert!(m.contains(&format!("{LIB_ENV}={BOGUS}")), "{m}");
        // Asked again: the same answer, from the process's cache.
        assert_eq!(require_cublaslt().expect_err("cached"), e);
        println!("child saw: {m}");
        return;
    }
    let exe = std::env::current_exe().expect("test binary");
    let name = "kernels::gemm::tests::the_variable_is_what_the_process_loads";
    let out = std::process::Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(LIB_ENV, BOGUS)
        .env(CHILD, "1")
        .output()
        .expect("run the child");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("1 passed") && text.contains("child saw"),
        "{text}"
    );
}
