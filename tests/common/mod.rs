//! Shared test helpers: the fixtures, the manifest, tolerances, and the C API
//! of the built `libexecutorch_cuda.so` opened with `dlopen`.
//!
//! GPU tests drive the cdylib rather than the rlib because the AOTInductor
//! `.so` resolves `aoti_torch_*` from the process's global scope, and a Rust
//! test executable does not export its symbols.
#![allow(dead_code)]
// The C API function pointers are resolved by name; their types are the fields'.
#![allow(clippy::missing_transmute_annotations)]

use executorch_cuda::ffi::EtCudaStats;
use executorch_cuda::ffi::{
    EtCudaInitArgs, EtCudaStatus, EtCudaTensor, ET_CUDA_MAX_DIMS, ET_CUDA_STATUS_OK,
};
use std::ffi::{c_char, c_void, CStr, CString};
use std::path::{Path, PathBuf};

pub fn fixtures_dir() -> PathBuf {
    std::env::var_os("ET_CUDA_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"))
}

pub const FIXTURES: [&str; 3] = ["mlp_f32", "conv_f32", "attn_bf16"];

#[derive(Debug, Clone)]
pub struct TensorFile {
    pub dtype: String,
    pub sizes: Vec<i64>,
    pub bytes: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct Case {
    pub inputs: Vec<TensorFile>,
    pub outputs: Vec<TensorFile>,
}

pub fn dtype_code(name: &str) -> i32 {
    match name {
        "float32" => 6,
        "bfloat16" => 15,
        "float16" => 5,
        "int64" => 4,
        "int32" => 3,
        "bool" => 11,
        other => panic!("unknown dtype {other}"),
    }
}

/// Cases of `method` in a fixture's manifest.
pub fn cases(fixture: &str, method: &str) -> Vec<Case> {
    let dir = fixtures_dir().join(fixture);
    let text = std::fs::read_to_string(dir.join("manifest.json")).expect("manifest.json");
    let m: serde_json::Value = serde_json::from_str(&text).expect("manifest JSON");
    let read = |v: &serde_json::Value| TensorFile {
        dtype: v["dtype"].as_str().unwrap().to_string(),
        sizes: v["sizes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap())
            .collect(),
        bytes: std::fs::read(dir.join(v["file"].as_str().unwrap())).unwrap(),
    };
    m["methods"][method]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            inputs: c["inputs"].as_array().unwrap().iter().map(read).collect(),
            outputs: c["outputs"].as_array().unwrap().iter().map(read).collect(),
        })
        .collect()
}

pub fn blob(fixture: &str, name: &str) -> Vec<u8> {
    std::fs::read(fixtures_dir().join(fixture).join(name)).expect(name)
}

fn to_f32(dtype: &str, b: &[u8]) -> Vec<f32> {
    match dtype {
        "float32" => b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        "bfloat16" => b
            .chunks_exact(2)
            .map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16))
            .collect(),
        other => panic!("compare: unsupported dtype {other}"),
    }
}

/// Max abs error and whether every element is within tolerance.
pub fn compare(dtype: &str, got: &[u8], want: &[u8]) -> (f32, bool) {
    let (atol, rtol) = if dtype == "float32" {
        (1e-4, 1e-4)
    } else {
        (2e-2, 2e-2)
    };
    assert_eq!(got.len(), want.len(), "output byte length");
    let (g, w) = (to_f32(dtype, got), to_f32(dtype, want));
    let mut max = 0f32;
    let mut ok = true;
    for (a, b) in g.iter().zip(&w) {
        let d = (a - b).abs();
        if d.is_nan() || d > atol + rtol * b.abs() {
            ok = false;
        }
        if d > max || d.is_nan() {
            max = d;
        }
    }
    (max, ok)
}

pub fn desc(dtype: &str, sizes: &[i64], data: *mut c_void, nbytes: usize) -> EtCudaTensor {
    let mut t = EtCudaTensor {
        data,
        nbytes: nbytes as u64,
        dtype: dtype_code(dtype),
        ndim: sizes.len() as i32,
        sizes: [0; ET_CUDA_MAX_DIMS],
        strides: [0; ET_CUDA_MAX_DIMS],
    };
    let mut acc = 1;
    for i in (0..sizes.len()).rev() {
        t.sizes[i] = sizes[i];
        t.strides[i] = acc;
        acc *= sizes[i];
    }
    t
}

type Fn0<R> = unsafe extern "C" fn() -> R;

/// The C API of the cdylib, resolved with dlsym.
pub struct Api {
    pub last_error: Fn0<*const c_char>,
    pub device_count: unsafe extern "C" fn(*mut i32) -> EtCudaStatus,
    pub init: unsafe extern "C" fn(*const EtCudaInitArgs, *mut *mut c_void) -> EtCudaStatus,
    pub destroy: unsafe extern "C" fn(*mut c_void) -> EtCudaStatus,
    pub execute: unsafe extern "C" fn(
        *mut c_void,
        *const EtCudaTensor,
        usize,
        *mut EtCudaTensor,
        usize,
        i32,
    ) -> EtCudaStatus,
    pub handle_stream: unsafe extern "C" fn(*const c_void, *mut *mut c_void) -> EtCudaStatus,
    pub synchronize: unsafe extern "C" fn(*const c_void) -> EtCudaStatus,
    pub memcpy:
        unsafe extern "C" fn(*const c_void, *mut c_void, *const c_void, usize) -> EtCudaStatus,
    pub stats: unsafe extern "C" fn(*const c_void, *mut EtCudaStats) -> EtCudaStatus,
    pub set_option_bool: unsafe extern "C" fn(*const c_char, bool) -> EtCudaStatus,
    pub set_option_str: unsafe extern "C" fn(*const c_char, *const c_char) -> EtCudaStatus,
    pub set_option_int: unsafe extern "C" fn(*const c_char, i64) -> EtCudaStatus,
    pub get_option_str: unsafe extern "C" fn(*const c_char, *mut c_char, usize) -> EtCudaStatus,
    pub num_inputs: unsafe extern "C" fn(*const c_void, *mut usize) -> EtCudaStatus,
    pub alloc_device: unsafe extern "C" fn(i32, usize, *mut *mut c_void) -> EtCudaStatus,
    pub free_device: unsafe extern "C" fn(*mut c_void) -> EtCudaStatus,
    pub reset_options: unsafe extern "C" fn() -> EtCudaStatus,
    pub set_log_callback: unsafe extern "C" fn(
        executorch_cuda::ffi::EtCudaLogCallback,
        *mut c_void,
        i32,
    ) -> EtCudaStatus,
    pub graph_count: unsafe extern "C" fn(*const c_void, *mut usize) -> EtCudaStatus,
    pub device_allocate: unsafe extern "C" fn(i32, usize, usize, *mut *mut c_void) -> EtCudaStatus,
    pub device_deallocate: unsafe extern "C" fn(*mut c_void) -> EtCudaStatus,
    pub device_allocations: unsafe extern "C" fn(*mut usize) -> EtCudaStatus,
    pub set_caller_stream: unsafe extern "C" fn(*mut c_void) -> EtCudaStatus,
    pub clear_caller_stream: unsafe extern "C" fn() -> EtCudaStatus,
    /// `aoti_torch_empty_strided`, resolved from the cdylib.
    pub empty_strided:
        unsafe extern "C" fn(i64, *const i64, *const i64, i32, i32, i32, *mut *mut c_void) -> i32,
    pub delete_tensor: unsafe extern "C" fn(*mut c_void) -> i32,
}

pub fn cdylib_path() -> PathBuf {
    if let Some(p) = std::env::var_os("ET_CUDA_LIB") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("libexecutorch_cuda.so")
}

pub fn api() -> &'static Api {
    static API: std::sync::OnceLock<Api> = std::sync::OnceLock::new();
    API.get_or_init(|| {
        if std::env::var_os("ET_CUDA_LIB").is_none() {
            // `cargo test` builds the rlib, not the cdylib: build (or refresh) it.
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let release = cdylib_path()
                .parent()
                .is_some_and(|d| d.ends_with("release"));
            let mut cmd = std::process::Command::new(cargo);
            cmd.args([
                "build",
                "--lib",
                "--manifest-path",
                concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"),
            ]);
            if release {
                cmd.arg("--release");
            }
            let ok = cmd.status().map(|s| s.success()).unwrap_or(false);
            assert!(ok, "building the cdylib for {:?} failed", cdylib_path());
        }
        let path = CString::new(cdylib_path().to_string_lossy().into_owned()).unwrap();
        // SAFETY: dlopen of our own library with a NUL-terminated path.
        let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if h.is_null() {
            // SAFETY: dlerror returns a thread-local string or null.
            let e = unsafe { libc::dlerror() };
            let msg = if e.is_null() {
                String::new()
            } else {
                // SAFETY: a non-null NUL-terminated string from dlerror.
                unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
            };
            panic!("dlopen {:?} failed: {msg}", cdylib_path());
        }
        let sym = |n: &str| {
            let c = CString::new(n).unwrap();
            // SAFETY: live handle, NUL-terminated name.
            let p = unsafe { libc::dlsym(h, c.as_ptr()) };
            assert!(!p.is_null(), "missing {n}");
            p
        };
        // SAFETY: each symbol has the declared C signature (include/executorch_cuda.h).
        unsafe {
            Api {
                last_error: std::mem::transmute(sym("et_cuda_last_error")),
                device_count: std::mem::transmute(sym("et_cuda_device_count")),
                init: std::mem::transmute(sym("et_cuda_init")),
                destroy: std::mem::transmute(sym("et_cuda_destroy")),
                execute: std::mem::transmute(sym("et_cuda_execute")),
                handle_stream: std::mem::transmute(sym("et_cuda_handle_stream")),
                synchronize: std::mem::transmute(sym("et_cuda_synchronize")),
                memcpy: std::mem::transmute(sym("et_cuda_memcpy")),
                stats: std::mem::transmute(sym("et_cuda_stats")),
                set_option_bool: std::mem::transmute(sym("et_cuda_set_option_bool")),
                set_option_str: std::mem::transmute(sym("et_cuda_set_option_str")),
                set_option_int: std::mem::transmute(sym("et_cuda_set_option_int")),
                get_option_str: std::mem::transmute(sym("et_cuda_get_option_str")),
                num_inputs: std::mem::transmute(sym("et_cuda_num_inputs")),
                alloc_device: std::mem::transmute(sym("et_cuda_alloc_device")),
                free_device: std::mem::transmute(sym("et_cuda_free_device")),
                reset_options: std::mem::transmute(sym("et_cuda_reset_options")),
                set_log_callback: std::mem::transmute(sym("et_cuda_set_log_callback")),
                graph_count: std::mem::transmute(sym("et_cuda_graph_count")),
                device_allocate: std::mem::transmute(sym("et_cuda_device_allocate")),
                device_deallocate: std::mem::transmute(sym("et_cuda_device_deallocate")),
                device_allocations: std::mem::transmute(sym("et_cuda_device_allocations")),
                set_caller_stream: std::mem::transmute(sym("et_cuda_set_caller_stream")),
                clear_caller_stream: std::mem::transmute(sym("et_cuda_clear_caller_stream")),
                empty_strided: std::mem::transmute(sym("aoti_torch_empty_strided")),
                delete_tensor: std::mem::transmute(sym("aoti_torch_delete_tensor_object")),
            }
        }
    })
}

pub fn last_error() -> String {
    // SAFETY: the library returns a valid NUL-terminated string.
    unsafe { CStr::from_ptr((api().last_error)()) }
        .to_string_lossy()
        .into_owned()
}

/// Number of GPUs, or `None` (with the reason printed) when there is none.
pub fn gpus_or_skip(test: &str) -> Option<i32> {
    let mut n = 0;
    // SAFETY: out-pointer to a local.
    let st = unsafe { (api().device_count)(&mut n) };
    if st != ET_CUDA_STATUS_OK || n == 0 {
        println!("SKIPPED {test}: no CUDA device ({})", last_error());
        return None;
    }
    Some(n)
}

pub fn stats(h: *const c_void) -> EtCudaStats {
    let mut s = EtCudaStats::default();
    // SAFETY: out-pointer to a local.
    assert_eq!(unsafe { (api().stats)(h, &mut s) }, ET_CUDA_STATUS_OK);
    s
}

/// A loaded method through the C API.
pub struct Handle(pub *mut c_void);

/// `et_cuda_init` arguments for the `.so` bytes `so` and weights `w` of method `name`, every
/// other field at its plain value: no backend options, the default method configuration,
/// no keys, payload, share group or named data. The slices and `name` must outlive the call.
pub fn init_args(so: &[u8], w: &[u8], name: &CStr) -> EtCudaInitArgs {
    EtCudaInitArgs {
        so_data: so.as_ptr(),
        so_len: so.len(),
        weights_data: w.as_ptr(),
        weights_len: w.len(),
        method_name: name.as_ptr(),
        so_key: std::ptr::null(),
        weights_key: std::ptr::null(),
        use_backend_options: false,
        config: executorch_cuda::ffi::EtCudaMethodConfig::from(
            &executorch_cuda::MethodConfig::default(),
        ),
        share_group: 0,
        payload_data: std::ptr::null(),
        payload_len: 0,
        named_data: None,
        named_data_user: std::ptr::null_mut(),
        named_data_release: None,
    }
}

impl Handle {
    pub fn load(
        fixture: &str,
        device: i32,
        shared_stream: bool,
    ) -> Result<Handle, (EtCudaStatus, String)> {
        let so = blob(fixture, "forward_so_blob.bin");
        let w = blob(fixture, "forward_weights_blob.bin");
        Handle::from_bytes(&so, &w, None, device, shared_stream)
    }

    pub fn from_bytes(
        so: &[u8],
        w: &[u8],
        so_key: Option<&str>,
        device: i32,
        shared_stream: bool,
    ) -> Result<Handle, (EtCudaStatus, String)> {
        let name = CString::new("forward").unwrap();
        let key = so_key.map(|k| CString::new(k).unwrap());
        let base = init_args(so, w, &name);
        let args = EtCudaInitArgs {
            so_key: key.as_ref().map_or(std::ptr::null(), |k| k.as_ptr()),
            config: executorch_cuda::ffi::EtCudaMethodConfig {
                device_index: device,
                use_shared_stream: shared_stream,
                ..base.config
            },
            ..base
        };
        let mut h = std::ptr::null_mut();
        // SAFETY: args point at live buffers for the duration of the call.
        let st = unsafe { (api().init)(&args, &mut h) };
        if st != ET_CUDA_STATUS_OK {
            return Err((st, last_error()));
        }
        Ok(Handle(h))
    }

    pub fn execute(
        &self,
        ins: &[EtCudaTensor],
        outs: &mut [EtCudaTensor],
        placement: i32,
    ) -> Result<(), String> {
        // SAFETY: descriptors point at live buffers.
        let st = unsafe {
            (api().execute)(
                self.0,
                ins.as_ptr(),
                ins.len(),
                outs.as_mut_ptr(),
                outs.len(),
                placement,
            )
        };
        if st != ET_CUDA_STATUS_OK {
            return Err(format!("{st:?}: {}", last_error()));
        }
        Ok(())
    }

    pub fn stream(&self) -> *mut c_void {
        let mut s = std::ptr::null_mut();
        assert_eq!(
            // SAFETY: live handle, out-pointer to a local.
            unsafe { (api().handle_stream)(self.0, &mut s) },
            ET_CUDA_STATUS_OK
        );
        s
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: a handle from et_cuda_init, destroyed once.
        let st = unsafe { (api().destroy)(self.0) };
        assert_eq!(st, ET_CUDA_STATUS_OK, "destroy: {}", last_error());
    }
}

/// Resident set size of this process in bytes.
pub fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|x| x.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Compile a C source into a shared object with the system C compiler (or read
/// it from the file `$env_var` names) and return its bytes. `None` when no
/// compiler is available.
pub fn c_shared_object(name: &str, source: &str, env_var: &str) -> Option<Vec<u8>> {
    if let Some(p) = std::env::var_os(env_var) {
        return std::fs::read(p).ok();
    }
    // One folder per call: tests of one binary compile in parallel.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir =
        std::env::temp_dir().join(format!("et-cuda-test-{}-{call}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let src = dir.join(format!("{name}.c"));
    let out = dir.join(format!("{name}.so"));
    std::fs::write(&src, source).ok()?;
    let ok = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    let bytes = if ok { std::fs::read(&out).ok() } else { None };
    let _ = std::fs::remove_dir_all(&dir);
    bytes
}

// GPU test helpers (tests/common/gpu.rs); a test that needs none leaves them unused.
mod gpu;
#[allow(unused_imports)]
pub use gpu::*;
