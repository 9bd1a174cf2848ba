//! Opening an AOTInductor `.so` from memory.
//!
//! Before the first `dlopen`: the CUDA runtime is made resolvable process-wide
//! (the `.so` imports `cudaMalloc`, `cudaSetDevice`, ... with no `DT_NEEDED`
//! entry for `libcudart`), and this library is promoted to the global scope
//! (the `.so` resolves `aoti_torch_*` from there, also when we were opened
//! `RTLD_LOCAL`, e.g. by Python's ctypes).
//!
//! Each `.so` is written to an anonymous `memfd` (no predictable path in
//! `/tmp`; a private 0700 directory is the fallback where memfd is missing)
//! and opened `RTLD_NOW | RTLD_LOCAL`, so two programs' identical symbol
//! names never collide. The generated `.so` carries libstdc++ pieces with
//! unique symbols, which makes glibc mark it no-delete: `dlclose` would
//! never unmap it. So one copy per distinct `.so` (keyed by SHA-256) is
//! kept for the life of the process and reused by later handles.

use super::elf::ElfInfo;
#[cfg(test)]
use crate::error::ErrorKind;
use crate::error::{Error, Result};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::ffi::{c_void, CStr, CString};
use std::sync::{Arc, Mutex, OnceLock};

/// An opened `.so` (never closed; see the module docs).
#[derive(Debug)]
pub(crate) struct Library {
    handle: *mut c_void,
}

// SAFETY: a dlopen handle may be used from any thread.
unsafe impl Send for Library {}
// SAFETY: as above.
unsafe impl Sync for Library {}

impl Library {
    /// Look up a symbol; `None` when absent.
    pub(crate) fn symbol(&self, name: &str) -> Option<*mut c_void> {
        let c = CString::new(name).ok()?;
        // SAFETY: a live handle and a NUL-terminated name.
        let p = unsafe { libc::dlsym(self.handle, c.as_ptr()) };
        (!p.is_null()).then_some(p)
    }
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

/// Environment variable naming the CUDA runtime library to use.
pub(crate) const CUDART_ENV: &str = "ET_CUDA_CUDART";

static RUNTIME_READY: OnceLock<std::result::Result<(), String>> = OnceLock::new();

/// Make `libcudart` and this library resolvable from the global scope (once).
pub(crate) fn prepare_process() -> Result<()> {
    RUNTIME_READY
        .get_or_init(|| {
            load_cudart()?;
            load_cxx_runtime();
            promote_self()
        })
        .clone()
        .map_err(Error::load_failed)
}

fn load_cudart() -> std::result::Result<(), String> {
    let mut tried = Vec::new();
    let mut names: Vec<String> = Vec::new();
    if let Ok(p) = std::env::var(CUDART_ENV) {
        if !p.is_empty() {
            names.push(p);
        }
    }
    names.extend(["libcudart.so.13", "libcudart.so.12", "libcudart.so"].map(String::from));
    for n in names {
        let c = CString::new(n.clone()).map_err(|_| format!("{CUDART_ENV} contains a NUL byte"))?;
        // SAFETY: NUL-terminated name; RTLD_GLOBAL so the `.so`'s cuda* imports resolve.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if !h.is_null() {
            log::info!("CUDA runtime: {n}");
            return Ok(());
        }
        tried.push(format!("{n} ({})", dlerror()));
    }
    Err(format!(
        "the CUDA runtime library is missing; the AOTInductor .so needs it. Searched: {}. Set {CUDART_ENV} to its path",
        tried.join("; ")
    ))
}

/// Put the system C++ runtime in the global scope, as it is in any C++ program.
///
/// Each AOTInductor `.so` carries its own static copy of libstdc++ and
/// exports it, including `STB_GNU_UNIQUE` objects (locale facet ids, string
/// reps). Unique symbols bind process-wide to their first definition: in a
/// process without `libstdc++.so` (a Rust or C program) the first `.so`'s
/// copy wins and the second `.so` then runs with the first one's locale
/// state and crashes (seen on the H200 loading conv_f32 after mlp_f32). With
/// the shared libstdc++ loaded first, every `.so` binds to it, as it does
/// under ExecuTorch's C++ runtime.
fn load_cxx_runtime() {
    for name in [c"libstdc++.so.6", c"libgcc_s.so.1"] {
        // SAFETY: NUL-terminated library name.
        let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if h.is_null() {
            log::warn!("could not load {:?} globally: {}", name, dlerror());
        }
    }
}

/// The shim symbol whose presence in the global scope proves the `.so` can link.
const PROBE_SYMBOL: &CStr = c"aoti_torch_empty_strided";

fn promote_self() -> std::result::Result<(), String> {
    // Any address inside this library names it for dladdr.
    let probe = promote_self as *const c_void;
    // SAFETY: all-zero Dl_info is valid; dladdr fills it.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: probe is an address inside this library.
    let found = unsafe { libc::dladdr(probe, &mut info) } != 0 && !info.dli_fname.is_null();
    if found {
        // SAFETY: re-opening an already loaded object with RTLD_NOLOAD only changes its scope.
        let h = unsafe {
            libc::dlopen(
                info.dli_fname,
                libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_GLOBAL,
            )
        };
        if !h.is_null() {
            return Ok(());
        }
    }
    // Linked statically into an executable: the symbols must be exported from it.
    // SAFETY: RTLD_DEFAULT lookup of a NUL-terminated name.
    if !unsafe { libc::dlsym(libc::RTLD_DEFAULT, PROBE_SYMBOL.as_ptr()) }.is_null() {
        return Ok(());
    }
    Err("the aoti_torch_* shim symbols are not in the global scope: link libexecutorch_cuda.so, or export them from the executable (-rdynamic)".into())
}

static CACHE: Mutex<Option<HashMap<[u8; 32], Arc<Library>>>> = Mutex::new(None);

pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(bytes);
    h.finalize().into()
}

/// The SHA-256 of each part, several parts at a time on up to eight threads (a method's
/// constants: hashed for weight sharing; one 3 GB model took seconds on one thread).
pub(crate) fn sha256_many(parts: &[&[u8]]) -> Vec<[u8; 32]> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8)
        .min(parts.len().max(1));
    if threads <= 1 {
        return parts.iter().map(|p| sha256(p)).collect();
    }
    // Largest first, so that no thread is left with a big part at the end.
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(parts[i].len()));
    let next = AtomicUsize::new(0);
    let mut out = vec![[0u8; 32]; parts.len()];
    let done: Vec<Vec<(usize, [u8; 32])>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&i) = order.get(k) else { break };
                        mine.push((i, sha256(parts[i])));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_default())
            .collect()
    });
    let mut filled = 0usize;
    for (i, d) in done.into_iter().flatten() {
        out[i] = d;
        filled += 1;
    }
    if filled != parts.len() {
        // A hashing thread panicked (it cannot, short of memory): hash what is missing here.
        return parts.iter().map(|p| sha256(p)).collect();
    }
    out
}

pub(crate) fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Open the validated `.so` bytes, or reuse the copy opened earlier.
pub(crate) fn open(bytes: &[u8], digest: [u8; 32], info: &ElfInfo) -> Result<Arc<Library>> {
    prepare_process()?;
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    let map = cache.get_or_insert_with(HashMap::new);
    if let Some(l) = map.get(&digest) {
        return Ok(l.clone());
    }
    let handle = open_from_memory(bytes, &hex(&digest[..8]), info)?;
    let lib = Arc::new(Library { handle });
    map.insert(digest, lib.clone());
    Ok(lib)
}

fn dlopen_path(path: &CStr, info: &ElfInfo) -> Result<*mut c_void> {
    // SAFETY: NUL-terminated path of a file we just wrote.
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        let e = dlerror();
        let hint = if info.wants_exec_stack {
            " (the .so asks for an executable stack (PT_GNU_STACK), which some C libraries refuse)"
        } else if e.contains("GLIBC_") {
            " (the .so needs a newer C library than this machine has)"
        } else {
            ""
        };
        let missing = missing_symbol_hint(&e);
        return Err(Error::load_failed(format!(
            "dlopen of the .so failed: {e}{hint}{missing}"
        )));
    }
    Ok(h)
}

/// For an unresolved `aoti_torch_*` import: which op it is and which library
/// version lacks it (the export companion's ops are `aoti_torch_cuda_et_*`).
fn missing_symbol_hint(dlerror: &str) -> String {
    let Some(sym) = dlerror.split("undefined symbol: ").nth(1).and_then(|r| {
        r.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .next()
    }) else {
        return String::new();
    };
    let version = env!("CARGO_PKG_VERSION");
    // The shim of the op `et_cuda::et_<name>` is `aoti_torch_cuda_et_<name>` (python/executorch_cuda/ops.py).
    match sym
        .strip_prefix("aoti_torch_cuda_")
        .filter(|op| op.starts_with("et_"))
    {
        Some(op) => format!(
            " (the program calls the export companion's op et_cuda::{op}, which libexecutorch_cuda {version} does not provide: use a library that has it, or export without the companion)"
        ),
        None => format!(" ({sym} is not provided by libexecutorch_cuda {version})"),
    }
}

fn write_all(fd: i32, bytes: &[u8]) -> Result<()> {
    let mut off = 0;
    while off < bytes.len() {
        // SAFETY: writing from a valid slice to an fd we own.
        let n = unsafe { libc::write(fd, bytes[off..].as_ptr().cast(), bytes.len() - off) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::load_failed(format!("writing the .so failed: {e}")));
        }
        off += n as usize;
    }
    Ok(())
}

fn open_from_memory(bytes: &[u8], tag: &str, info: &ElfInfo) -> Result<*mut c_void> {
    let name = CString::new(format!("aoti-{tag}.so"))
        .map_err(|_| Error::load_failed("memfd name contains NUL"))?;
    // SAFETY: NUL-terminated name; flags are constants.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd >= 0 {
        let r = write_all(fd, bytes).and_then(|_| {
            let path = CString::new(format!("/proc/self/fd/{fd}"))
                .map_err(|_| Error::load_failed("fd path contains NUL"))?;
            dlopen_path(&path, info)
        });
        // The fd stays open for the life of the process (like the library itself): glibc
        // recognises loaded objects by path, and a closed fd number would be reused for the
        // next .so, whose dlopen("/proc/self/fd/N") would then return the earlier library.
        if r.is_err() {
            // SAFETY: our fd, not used by any loaded object.
            unsafe { libc::close(fd) };
        }
        return r;
    }
    open_from_private_dir(bytes, tag, info)
}

/// Fallback without memfd: a fresh 0700 directory from `mkdtemp`, removed right after `dlopen`.
fn open_from_private_dir(bytes: &[u8], tag: &str, info: &ElfInfo) -> Result<*mut c_void> {
    let base = std::env::temp_dir().join("et-cuda-XXXXXX");
    let mut tmpl = CString::new(base.to_string_lossy().into_owned())
        .map_err(|_| Error::load_failed("temporary directory path contains NUL"))?
        .into_bytes_with_nul();
    // SAFETY: a writable NUL-terminated template.
    let dir = unsafe { libc::mkdtemp(tmpl.as_mut_ptr().cast()) };
    if dir.is_null() {
        return Err(Error::load_failed(format!(
            "mkdtemp failed: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: mkdtemp returned the template, NUL-terminated.
    let dir = unsafe { CStr::from_ptr(dir) }
        .to_string_lossy()
        .into_owned();
    let path = format!("{dir}/aoti-{tag}.so");
    let r = std::fs::write(&path, bytes)
        .map_err(|e| Error::load_failed(format!("writing {path} failed: {e}")))
        .and_then(|_| {
            let c = CString::new(path.clone())
                .map_err(|_| Error::load_failed("temporary path contains NUL"))?;
            dlopen_path(&c, info)
        });
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir(&dir);
    r
}

#[cfg(test)]
mod tests {
    #[test]
    fn missing_companion_op_is_named_with_the_version() {
        let e = "/proc/self/fd/7: undefined symbol: aoti_torch_cuda_et_decode_attention";
        let h = super::missing_symbol_hint(e);
        assert!(h.contains("op et_cuda::et_decode_attention,"), "{h}");
        assert!(h.contains(env!("CARGO_PKG_VERSION")), "{h}");
        let h =
            super::missing_symbol_hint("x.so: undefined symbol: aoti_torch_cuda_foo, version X");
        assert!(
            h.contains("aoti_torch_cuda_foo is not provided by libexecutorch_cuda"),
            "{h}"
        );
        assert_eq!(super::missing_symbol_hint("cannot open shared object"), "");
    }

    use super::*;

    #[test]
    fn sha256_many_matches_one_at_a_time() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let parts: Vec<&[u8]> = vec![
            &data[..0],
            &data[..1],
            &data[5..200_000],
            &data[3..],
            b"abc",
        ];
        let want: Vec<[u8; 32]> = parts.iter().map(|p| sha256(p)).collect();
        assert_eq!(sha256_many(&parts), want);
        assert!(sha256_many(&[]).is_empty());
    }

    #[test]
    fn sha256_known_value() {
        assert_eq!(
            hex(&sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn memfd_open_reports_dlopen_errors() {
        // Valid-looking headers but nothing a loader can map: a clean error, no crash.
        let so = crate::aoti::elf::tests_support::tiny_so();
        let info = crate::aoti::elf::validate(&so).unwrap();
        let e = open_from_memory(&so, "test", &info).unwrap_err();
        assert!(e.kind() == ErrorKind::LoadFailed, "{e}");
        assert!(e.to_string().contains("dlopen"), "{e}");
    }
}
