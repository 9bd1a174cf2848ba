//! Finding and opening cuBLASLt, and the handful of its functions the GEMM calls.
//!
//! cudarc's own loader (`cudarc::cublaslt::sys`) panics when the library or a
//! symbol is missing, and with this crate's `cuda-12080` feature it looks for
//! `libcublasLt.so`, `libcublasLt.so.12`, ... but never `libcublasLt.so.13`,
//! which is what a CUDA 13 machine has (the pip wheel `nvidia-cublas` puts it in
//! `<site-packages>/nvidia/cu13/lib/`). Pre-loading a `.so.13` does not help:
//! `dlopen` by a bare name matches an already loaded library only when the name
//! equals its SONAME. So the library is opened here, with `dlopen`, and the
//! functions are looked up with `dlsym` into a table of function pointers
//! ([`Api`]) declared with cudarc's `cublaslt::sys` handle and struct types.
//! Status codes and enumerations cross the boundary as plain integers (a value
//! this build does not know must not become a Rust enum).
//!
//! Search order (the first that opens and has every function wins):
//! 1. `ET_CUDA_CUBLASLT=<path>` when set: that file only, nothing else;
//! 2. `libcublasLt.so.13`, `.so.12`, `.so` through the dynamic loader's search
//!    (`LD_LIBRARY_PATH`, the ld.so cache; also a library of that SONAME already
//!    loaded in the process, e.g. by torch);
//! 3. the folders of CUDA libraries already loaded in the process
//!    (`libcudart`, `libcublas`, `libnvrtc`, `libnvJitLink`: the pip wheels put
//!    cuBLASLt next to them), then `$CUDA_HOME/lib64`, `$CUDA_PATH/lib64`,
//!    `/usr/local/cuda/lib64`, `/usr/local/cuda/targets/<arch>-linux/lib`, and
//!    the pip wheels' folders (`nvidia/cu13/lib`, `nvidia/cublas/lib`) of the
//!    Python installations under `$VIRTUAL_ENV`, `$CONDA_PREFIX`, `~/.local`,
//!    `/usr/local` and `/usr` (e.g. torch's copy).
//!
//! The result, success or the error naming every name and path tried, is kept
//! for the life of the process; the library is never closed.

use crate::error::{Error, ErrorKind, Result};
use cudarc::cublaslt::sys as lt;
use std::ffi::{c_int, c_void, CStr, CString};
use std::sync::OnceLock;

/// The environment variable naming the cuBLASLt library file to use.
pub const LIB_ENV: &str = "ET_CUDA_CUBLASLT";

/// Library names tried through the dynamic loader's search, newest first.
const NAMES: [&str; 3] = ["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"];

/// Files of loaded libraries whose folder is searched for cuBLASLt too.
const NEIGHBOURS: [&str; 5] = [
    "libcudart.so",
    "libcublas.so",
    "libcublasLt.so",
    "libnvrtc.so",
    "libnvJitLink.so",
];

/// A `cublasStatus_t`, as the integer cuBLASLt returns.
pub(crate) type Status = u32;
/// `CUBLAS_STATUS_SUCCESS`.
pub(crate) const SUCCESS: Status = 0;

/// `cublasLtMatmulHeuristicResult_t` with its status as an integer (see the module docs).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeuristicResult {
    pub(crate) algo: lt::cublasLtMatmulAlgo_t,
    pub(crate) workspace_size: usize,
    pub(crate) state: Status,
    pub(crate) waves_count: f32,
    pub(crate) reserved: [c_int; 4],
}

const _: () = assert!(
    std::mem::size_of::<HeuristicResult>()
        == std::mem::size_of::<lt::cublasLtMatmulHeuristicResult_t>()
);

impl HeuristicResult {
    pub(crate) fn zeroed() -> HeuristicResult {
        HeuristicResult {
            algo: lt::cublasLtMatmulAlgo_t { data: [0; 8] },
            workspace_size: 0,
            state: SUCCESS,
            waves_count: 0.0,
            reserved: [0; 4],
        }
    }
}

type Handle = lt::cublasLtHandle_t;
type Desc = lt::cublasLtMatmulDesc_t;
type Layout = lt::cublasLtMatrixLayout_t;
type Pref = lt::cublasLtMatmulPreference_t;

/// The cuBLASLt functions the GEMM uses, resolved from one opened library.
#[derive(Debug)]
pub(crate) struct Api {
    /// The file the functions come from (as the dynamic loader reports it).
    pub(crate) path: String,
    /// `cublasLtGetVersion()`, e.g. 130100 for 13.1.0.
    pub(crate) version: usize,
    pub(crate) create: unsafe extern "C" fn(*mut Handle) -> Status,
    pub(crate) desc_create: unsafe extern "C" fn(*mut Desc, u32, u32) -> Status,
    pub(crate) desc_destroy: unsafe extern "C" fn(Desc) -> Status,
    pub(crate) desc_set: unsafe extern "C" fn(Desc, u32, *const c_void, usize) -> Status,
    pub(crate) layout_create: unsafe extern "C" fn(*mut Layout, u32, u64, u64, i64) -> Status,
    pub(crate) layout_destroy: unsafe extern "C" fn(Layout) -> Status,
    pub(crate) pref_create: unsafe extern "C" fn(*mut Pref) -> Status,
    pub(crate) pref_destroy: unsafe extern "C" fn(Pref) -> Status,
    pub(crate) pref_set: unsafe extern "C" fn(Pref, u32, *const c_void, usize) -> Status,
    pub(crate) algo_get: unsafe extern "C" fn(
        *const lt::cublasLtMatmulAlgo_t,
        u32,
        *mut c_void,
        usize,
        *mut usize,
    ) -> Status,
    #[allow(clippy::type_complexity)]
    pub(crate) heuristic: unsafe extern "C" fn(
        Handle,
        Desc,
        Layout,
        Layout,
        Layout,
        Layout,
        Pref,
        c_int,
        *mut HeuristicResult,
        *mut c_int,
    ) -> Status,
    #[allow(clippy::type_complexity)]
    pub(crate) matmul: unsafe extern "C" fn(
        Handle,
        Desc,
        *const c_void,
        *const c_void,
        Layout,
        *const c_void,
        Layout,
        *const c_void,
        *const c_void,
        Layout,
        *mut c_void,
        Layout,
        *const lt::cublasLtMatmulAlgo_t,
        *mut c_void,
        usize,
        *mut c_void,
    ) -> Status,
}

static API: OnceLock<std::result::Result<Api, String>> = OnceLock::new();

/// The process's cuBLASLt, opened on first use (see the module docs); a
/// `LoadFailed` error naming the library and everything tried when it is missing.
pub(crate) fn api() -> Result<&'static Api> {
    API.get_or_init(|| {
        let env = std::env::var(LIB_ENV).ok();
        let r = load(env.as_deref());
        match &r {
            Ok(a) => log::info!("cuBLASLt {} from {}", a.version, a.path),
            Err(e) => log::warn!("{e}"),
        }
        r
    })
    .as_ref()
    .map_err(|e| Error::load_failed(e.clone()))
}

/// Open cuBLASLt as the module docs say, with `env` standing for `ET_CUDA_CUBLASLT`
/// (uncached: [`api`] keeps the process's result).
pub(crate) fn load(env: Option<&str>) -> std::result::Result<Api, String> {
    let forced = env.filter(|p| !p.is_empty());
    let mut tried = Vec::new();
    for c in candidates(forced) {
        match open(&c) {
            Ok(api) => return Ok(api),
            Err(why) => tried.push(format!("{c} ({why})")),
        }
    }
    Err(match forced {
        Some(p) => format!(
            "cuBLASLt (libcublasLt) could not be loaded from {LIB_ENV}={p}: {}. The export companion's linear ops need it for their tensor-core GEMM: point {LIB_ENV} at libcublasLt.so.13 or .so.12, or unset it to search the usual places",
            tried.join("; ")
        ),
        None => format!(
            "cuBLASLt (libcublasLt) is missing; the export companion's linear ops need it for their tensor-core GEMM. Tried: {} (pip's nvidia/cu13/lib and nvidia/cublas/lib under $VIRTUAL_ENV, $CONDA_PREFIX, ~/.local, /usr/local and /usr are tried where they exist). Install cuBLAS (the CUDA toolkit, or pip nvidia-cublas) or set {LIB_ENV} to the library's path, e.g. <site-packages>/nvidia/cu13/lib/libcublasLt.so.13",
            tried.join("; ")
        ),
    })
}

/// The names and paths to try, in order (see the module docs).
pub(crate) fn candidates(forced: Option<&str>) -> Vec<String> {
    if let Some(p) = forced {
        return vec![p.to_string()];
    }
    let mut out: Vec<String> = NAMES.iter().map(|n| n.to_string()).collect();
    let mut dirs = loaded_cuda_dirs();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(d) = std::env::var_os(var) {
            dirs.push(format!("{}/lib64", d.to_string_lossy()));
        }
    }
    dirs.push("/usr/local/cuda/lib64".into());
    dirs.push(format!(
        "/usr/local/cuda/targets/{}-linux/lib",
        std::env::consts::ARCH
    ));
    dirs.extend(python_dirs());
    let mut seen = std::collections::HashSet::new();
    for d in dirs {
        if !seen.insert(d.clone()) {
            continue;
        }
        for n in &NAMES[..2] {
            out.push(format!("{d}/{n}"));
        }
    }
    out
}

/// The folders of the CUDA libraries loaded in this process ([`NEIGHBOURS`]).
fn loaded_cuda_dirs() -> Vec<String> {
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> c_int {
        // SAFETY: `data` is the `Vec` passed below, alive for the whole iteration; glibc
        // hands a valid `info` whose name is null or a NUL-terminated path.
        let (dirs, name) = unsafe { (&mut *data.cast::<Vec<String>>(), (*info).dlpi_name) };
        if name.is_null() {
            return 0;
        }
        // SAFETY: non-null NUL-terminated string owned by the loader.
        let path = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        // Nothing here panics short of running out of memory; a panic must not cross into C.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if let Some(dir) = cuda_dir_of(&path) {
                if !dirs.iter().any(|d| d == dir) {
                    dirs.push(dir.to_string());
                }
            }
        }));
        0
    }
    let mut dirs: Vec<String> = Vec::new();
    // SAFETY: the callback only reads what glibc passes and appends to `dirs`.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut dirs as *mut Vec<String>).cast()) };
    dirs
}

/// The folders where pip's CUDA wheels put cuBLASLt (`nvidia/cu13/lib`, `nvidia/cublas/lib`)
/// in the Python installations found under the usual prefixes (`$VIRTUAL_ENV`,
/// `$CONDA_PREFIX`, `~/.local`, `/usr/local`, `/usr`); only folders that exist.
fn python_dirs() -> Vec<String> {
    let mut prefixes: Vec<String> = ["VIRTUAL_ENV", "CONDA_PREFIX"]
        .iter()
        .filter_map(std::env::var_os)
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if let Some(h) = std::env::var_os("HOME") {
        prefixes.push(format!("{}/.local", h.to_string_lossy()));
    }
    prefixes.extend(["/usr/local".to_string(), "/usr".to_string()]);
    let mut out = Vec::new();
    for prefix in prefixes {
        let Ok(entries) = std::fs::read_dir(format!("{prefix}/lib")) else {
            continue;
        };
        let mut pythons: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("python3"))
            .collect();
        pythons.sort();
        for py in pythons.iter().rev() {
            for site in ["site-packages", "dist-packages"] {
                for sub in ["nvidia/cu13/lib", "nvidia/cublas/lib"] {
                    let d = format!("{prefix}/lib/{py}/{site}/{sub}");
                    if std::path::Path::new(&d).is_dir() {
                        out.push(d);
                    }
                }
            }
        }
    }
    out
}

/// The folder of `path` when it is one of the CUDA libraries in [`NEIGHBOURS`].
pub(crate) fn cuda_dir_of(path: &str) -> Option<&str> {
    let (dir, file) = path.rsplit_once('/')?;
    (!dir.is_empty() && NEIGHBOURS.iter().any(|n| file.starts_with(n))).then_some(dir)
}

fn dlerror() -> String {
    // SAFETY: dlerror returns a thread-local string or null.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        return "unknown dlopen error".into();
    }
    // SAFETY: non-null NUL-terminated string owned by libc.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Open one candidate and resolve every function; the reason when it does not do.
fn open(candidate: &str) -> std::result::Result<Api, String> {
    let c = CString::new(candidate).map_err(|_| "the name contains a NUL byte".to_string())?;
    // SAFETY: NUL-terminated name; local scope, resolved now.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        let e = dlerror();
        return Err(if e.contains("No such file") {
            "not found".into()
        } else {
            e
        });
    }
    // SAFETY: `h` is the live handle just opened.
    let r = unsafe { resolve(h) };
    if r.is_err() {
        // SAFETY: nothing of the library is in use: none of its functions was called.
        unsafe { libc::dlclose(h) };
    }
    r
}

/// Look up `name` in `h` as a function pointer of type `F`.
///
/// # Safety
/// `h` is a live `dlopen` handle and `F` is a function pointer type matching the symbol's C
/// signature.
unsafe fn sym<F: Copy>(h: *mut c_void, name: &CStr) -> std::result::Result<F, String> {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
    // SAFETY: live handle, NUL-terminated name.
    let p = unsafe { libc::dlsym(h, name.as_ptr()) };
    if p.is_null() {
        return Err(format!(
            "it lacks {} (too old a cuBLASLt?)",
            name.to_string_lossy()
        ));
    }
    // SAFETY: non-null address of the function; `F` is a pointer-sized fn type per the contract.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

/// Every function of [`Api`] from `h`.
///
/// # Safety
/// `h` is a live `dlopen` handle of a cuBLASLt library (the types below are its C signatures).
unsafe fn resolve(h: *mut c_void) -> std::result::Result<Api, String> {
    // SAFETY: live handle; each type below is the C signature of the function named.
    let (get_version, mut api) = unsafe {
        let get_version: unsafe extern "C" fn() -> usize = sym(h, c"cublasLtGetVersion")?;
        let api = Api {
            path: String::new(),
            version: 0,
            create: sym(h, c"cublasLtCreate")?,
            desc_create: sym(h, c"cublasLtMatmulDescCreate")?,
            desc_destroy: sym(h, c"cublasLtMatmulDescDestroy")?,
            desc_set: sym(h, c"cublasLtMatmulDescSetAttribute")?,
            layout_create: sym(h, c"cublasLtMatrixLayoutCreate")?,
            layout_destroy: sym(h, c"cublasLtMatrixLayoutDestroy")?,
            pref_create: sym(h, c"cublasLtMatmulPreferenceCreate")?,
            pref_destroy: sym(h, c"cublasLtMatmulPreferenceDestroy")?,
            pref_set: sym(h, c"cublasLtMatmulPreferenceSetAttribute")?,
            algo_get: sym(h, c"cublasLtMatmulAlgoConfigGetAttribute")?,
            heuristic: sym(h, c"cublasLtMatmulAlgoGetHeuristic")?,
            matmul: sym(h, c"cublasLtMatmul")?,
        };
        (get_version, api)
    };
    // SAFETY: takes no arguments and touches no device.
    api.version = unsafe { get_version() };
    if api.version < 11_000 {
        return Err(format!(
            "its version {} is older than 11.0, the first with bfloat16 GEMMs",
            api.version
        ));
    }
    api.path = loaded_path(api.create as *const c_void).unwrap_or_else(|| "?".into());
    Ok(api)
}

/// The file of the loaded library holding `addr`.
fn loaded_path(addr: *const c_void) -> Option<String> {
    // SAFETY: all-zero Dl_info is valid; dladdr fills it.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: any address may be asked about.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: non-null NUL-terminated string owned by the loader.
    Some(
        unsafe { CStr::from_ptr(info.dli_fname) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// The name of a `cublasStatus_t`.
pub(crate) fn status_name(s: Status) -> String {
    let name = match s {
        0 => "CUBLAS_STATUS_SUCCESS",
        1 => "CUBLAS_STATUS_NOT_INITIALIZED",
        3 => "CUBLAS_STATUS_ALLOC_FAILED",
        7 => "CUBLAS_STATUS_INVALID_VALUE",
        8 => "CUBLAS_STATUS_ARCH_MISMATCH",
        11 => "CUBLAS_STATUS_MAPPING_ERROR",
        13 => "CUBLAS_STATUS_EXECUTION_FAILED",
        14 => "CUBLAS_STATUS_INTERNAL_ERROR",
        15 => "CUBLAS_STATUS_NOT_SUPPORTED",
        16 => "CUBLAS_STATUS_LICENSE_ERROR",
        _ => return format!("cuBLAS status {s}"),
    };
    name.into()
}

/// A cuBLASLt status as the crate's error: `what` names the call and the problem.
pub(crate) fn check(s: Status, what: impl FnOnce() -> String) -> Result<()> {
    if s == SUCCESS {
        return Ok(());
    }
    let kind = if s == 3 {
        ErrorKind::OutOfMemory
    } else {
        ErrorKind::Cuda
    };
    Err(Error::new(
        kind,
        format!("{} failed: {} ({s})", what(), status_name(s)),
    ))
}
