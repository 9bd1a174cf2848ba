//! The AOTInductor model container of one loaded method: its C entry points
//! (`torch/csrc/inductor/aoti_runtime/interface.h`), resolved from the `.so`.

use super::owned::OwnerScope;
use super::{AtenTensorHandle, Library};
use crate::error::{Error, Result};
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::Arc;

type ContainerHandle = *mut c_void;
type CreateWithDeviceFn =
    unsafe extern "C" fn(*mut ContainerHandle, usize, *const c_char, *const c_char) -> i32;
type DeleteFn = unsafe extern "C" fn(ContainerHandle) -> i32;
type GetCountFn = unsafe extern "C" fn(ContainerHandle, *mut usize) -> i32;
type RunFn = unsafe extern "C" fn(
    ContainerHandle,
    *mut AtenTensorHandle,
    usize,
    *mut AtenTensorHandle,
    usize,
    *mut c_void,
    *mut c_void,
) -> i32;
type UpdateFromBlobFn = unsafe extern "C" fn(ContainerHandle, *const u8) -> i32;
type BlobSizeFn = unsafe extern "C" fn(ContainerHandle, *mut u64) -> i32;
type GetLastErrorFn = unsafe extern "C" fn(*mut *const c_char) -> i32;
type ConstStrFn = unsafe extern "C" fn(ContainerHandle, usize, *mut *const c_char) -> i32;
type ConstBoolFn = unsafe extern "C" fn(ContainerHandle, usize, *mut bool) -> i32;
type ConstI32Fn = unsafe extern "C" fn(ContainerHandle, usize, *mut i32) -> i32;
type ConstSizeFn = unsafe extern "C" fn(ContainerHandle, usize, *mut usize) -> i32;
type UpdatePairsFn =
    unsafe extern "C" fn(ContainerHandle, *const ConstantMapEntry, usize, bool, bool) -> i32;

/// `AOTInductorConstantMapEntry`: one (name, tensor) pair.
#[repr(C)]
pub(crate) struct ConstantMapEntry {
    pub(crate) name: *const c_char,
    pub(crate) handle: AtenTensorHandle,
}

/// Kinds of constants (`ConstantType` in AOTI's `constant_type.h`).
pub(crate) mod constant_type {
    /// A registered buffer: possibly mutated in place (a KV cache).
    pub const BUFFER: i32 = 2;
}

/// The constant-management entry points (all present in PyTorch ≥ 2.6 `.so` files).
#[derive(Debug, Clone, Copy)]
struct ConstantsApi {
    num: GetCountFn,
    name: ConstStrFn,
    original_fqn: ConstStrFn,
    from_folded: ConstBoolFn,
    kind: ConstI32Fn,
    dtype: ConstI32Fn,
    data_size: ConstSizeFn,
    update_user_managed_pairs: UpdatePairsFn,
}

/// The container's entry points, resolved from the `.so`.
#[derive(Debug, Clone, Copy)]
struct Api {
    create_with_device: CreateWithDeviceFn,
    delete: DeleteFn,
    num_inputs: GetCountFn,
    num_outputs: GetCountFn,
    run: RunFn,
    run_single_threaded: Option<RunFn>,
    update_constants_from_blob: Option<UpdateFromBlobFn>,
    constants_blob_size: Option<BlobSizeFn>,
    last_error: Option<GetLastErrorFn>,
    constants: Option<ConstantsApi>,
}

fn required(lib: &Library, name: &str) -> Result<*mut c_void> {
    lib.symbol(name).ok_or_else(|| {
        Error::invalid_program(format!(
            "the .so does not export {name}: not an AOTInductor model"
        ))
    })
}

/// Resolve `name` as a function of type `F`.
///
/// # Safety
/// The symbol, when present, must be a function of signature `F`.
unsafe fn optional<F: Copy>(lib: &Library, name: &str) -> Option<F> {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
    // SAFETY: per the contract, the symbol is a function pointer of type F (same size checked).
    lib.symbol(name)
        .map(|p| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

/// Resolve a required function.
///
/// # Safety
/// As for [`optional`].
unsafe fn needed<F: Copy>(lib: &Library, name: &str) -> Result<F> {
    let p = required(lib, name)?;
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
    // SAFETY: per the contract (same size checked).
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

impl Api {
    fn resolve(lib: &Library) -> Result<Api> {
        // SAFETY: each name is resolved to the signature AOTInductor's interface.h declares.
        unsafe {
            let constants = (|| {
                Some(ConstantsApi {
                    num: optional(lib, "AOTInductorModelContainerGetNumConstants")?,
                    name: optional(lib, "AOTInductorModelContainerGetConstantName")?,
                    original_fqn: optional(lib, "AOTInductorModelContainerGetConstantOriginalFQN")?,
                    from_folded: optional(lib, "AOTInductorModelContainerGetConstantFromFolded")?,
                    kind: optional(lib, "AOTInductorModelContainerGetConstantType")?,
                    dtype: optional(lib, "AOTInductorModelContainerGetConstantDtype")?,
                    data_size: optional(lib, "AOTInductorModelContainerGetConstantDataSize")?,
                    update_user_managed_pairs: optional(
                        lib,
                        "AOTInductorModelContainerUpdateUserManagedConstantBufferPairs",
                    )?,
                })
            })();
            Ok(Api {
                create_with_device: needed(lib, "AOTInductorModelContainerCreateWithDevice")?,
                delete: needed(lib, "AOTInductorModelContainerDelete")?,
                num_inputs: needed(lib, "AOTInductorModelContainerGetNumInputs")?,
                num_outputs: needed(lib, "AOTInductorModelContainerGetNumOutputs")?,
                run: needed(lib, "AOTInductorModelContainerRun")?,
                run_single_threaded: optional(lib, "AOTInductorModelContainerRunSingleThreaded"),
                update_constants_from_blob: optional(
                    lib,
                    "AOTInductorModelUpdateConstantsFromBlob",
                ),
                constants_blob_size: optional(lib, "AOTInductorModelContainerGetConstantsBlobSize"),
                last_error: optional(lib, "AOTInductorGetLastError"),
                constants,
            })
        }
    }
}

/// What the container says about one of its constants.
#[derive(Debug, Clone)]
pub(crate) struct ConstantInfo {
    pub(crate) name: String,
    pub(crate) original_fqn: String,
    pub(crate) from_folded: bool,
    pub(crate) kind: i32,
    pub(crate) dtype: i32,
    pub(crate) data_size: usize,
}

thread_local! {
    /// Tensors the generated code creates over its constant blob while loading weights
    /// (see [`Container::load_weights_recording`]).
    static RECORDED: std::cell::RefCell<Option<Vec<crate::tensor::Tensor>>> =
        const { std::cell::RefCell::new(None) };
}

/// Called by the tensor-from-blob shims: while a container loads its weights with
/// recording on, every tensor it creates is one constant, in the container's order.
pub(crate) fn record_constant(t: &crate::tensor::Tensor) {
    RECORDED.with(|r| {
        if let Some(v) = r.borrow_mut().as_mut() {
            v.push(t.clone());
        }
    });
}

/// Stops recording when dropped (also on an error path).
struct Recording;

impl Recording {
    fn start() -> Recording {
        RECORDED.with(|r| *r.borrow_mut() = Some(Vec::new()));
        Recording
    }
    fn take(&self) -> Vec<crate::tensor::Tensor> {
        RECORDED.with(|r| r.borrow_mut().take().unwrap_or_default())
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        RECORDED.with(|r| *r.borrow_mut() = None);
    }
}

/// One model container (one model instance) on one device.
#[derive(Debug)]
pub(crate) struct Container {
    handle: ContainerHandle,
    api: Api,
    pub(crate) num_inputs: usize,
    pub(crate) num_outputs: usize,
    device: i32,
    /// What the generated code makes for this container is recorded under this id
    /// ([`super::owned`]) and released after the container is deleted.
    owner: u64,
    _lib: Arc<Library>,
}

// SAFETY: the container is only used under its owners' locks (one run at a time).
unsafe impl Send for Container {}
// SAFETY: as above.
unsafe impl Sync for Container {}

impl Container {
    /// Create the container for `cuda:<device>` (the device's context must be current).
    pub(crate) fn create(lib: Arc<Library>, device: i32) -> Result<Container> {
        let api = Api::resolve(&lib)?;
        let dev =
            CString::new(format!("cuda:{device}")).map_err(|_| Error::internal("device string"))?;
        let mut handle: ContainerHandle = std::ptr::null_mut();
        let owner = super::owned::new_owner();
        let scope = OwnerScope::enter(owner);
        // SAFETY: valid out-pointer and device string; the .so catches its own exceptions.
        let rc =
            unsafe { (api.create_with_device)(&mut handle, 1, dev.as_ptr(), std::ptr::null()) };
        drop(scope);
        if rc != 0 || handle.is_null() {
            super::owned::release(owner);
            return Err(Error::load_failed(format!(
                "AOTInductorModelContainerCreateWithDevice(cuda:{device}) failed (code {rc}){}",
                last_error_suffix(&api)
            )));
        }
        let mut c = Container {
            handle,
            api,
            num_inputs: 0,
            num_outputs: 0,
            device,
            owner,
            _lib: lib,
        };
        c.num_inputs = c.count(c.api.num_inputs, "GetNumInputs")?;
        c.num_outputs = c.count(c.api.num_outputs, "GetNumOutputs")?;
        Ok(c)
    }

    fn count(&self, f: GetCountFn, what: &str) -> Result<usize> {
        let mut n = 0usize;
        // SAFETY: live container and out-pointer; `f` has this signature.
        let rc = unsafe { f(self.handle, &mut n) };
        if rc != 0 {
            return Err(Error::load_failed(format!(
                "AOTInductorModelContainer{what} failed (code {rc})"
            )));
        }
        Ok(n)
    }

    /// Bytes of weights the model expects, when the `.so` can say.
    pub(crate) fn constants_blob_size(&self) -> Result<Option<u64>> {
        let Some(f) = self.api.constants_blob_size else {
            return Ok(None);
        };
        let mut n = 0u64;
        // SAFETY: live container and out-pointer.
        let rc = unsafe { f(self.handle, &mut n) };
        if rc != 0 {
            return Err(Error::load_failed(format!(
                "AOTInductorModelContainerGetConstantsBlobSize failed (code {rc})"
            )));
        }
        Ok(Some(n))
    }

    /// Load the weights. The caller checked the size against
    /// [`Container::constants_blob_size`]: the function takes no length.
    pub(crate) fn load_weights(&self, blob: &[u8]) -> Result<()> {
        let Some(f) = self.api.update_constants_from_blob else {
            if blob.is_empty() {
                return Ok(());
            }
            return Err(Error::invalid_program(
                "the .so cannot load a weights blob (no AOTInductorModelUpdateConstantsFromBlob; built with torch < 2.9?)",
            ));
        };
        let _ = crate::error::take_callback_failure();
        let _owner = OwnerScope::enter(self.owner);
        // SAFETY: live container; `blob` holds exactly the size the model declared.
        let rc = unsafe { f(self.handle, blob.as_ptr()) };
        if rc != 0 {
            return Err(Error::load_failed(format!(
                "AOTInductorModelUpdateConstantsFromBlob failed (code {rc}){}",
                last_error_suffix(&self.api)
            )));
        }
        Ok(())
    }

    /// [`Container::load_weights`], returning the tensors the generated code made over its
    /// constant blob: one per constant that is not folded, in the container's order.
    pub(crate) fn load_weights_recording(&self, blob: &[u8]) -> Result<Vec<crate::tensor::Tensor>> {
        let rec = Recording::start();
        self.load_weights(blob)?;
        Ok(rec.take())
    }

    /// Whether the constant-management entry points exist.
    pub(crate) fn has_constants_api(&self) -> bool {
        self.api.constants.is_some()
    }

    /// Every constant's metadata, in the container's order (the order of the weights blob).
    pub(crate) fn constants(&self) -> Result<Vec<ConstantInfo>> {
        let Some(c) = self.api.constants else {
            return Err(Error::load_failed(
                "the .so has no constant-management entry points",
            ));
        };
        let n = self.count(c.num, "GetNumConstants")?;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            out.push(ConstantInfo {
                name: self.const_str(c.name, i, "GetConstantName")?,
                original_fqn: self.const_str(c.original_fqn, i, "GetConstantOriginalFQN")?,
                from_folded: {
                    let mut v = false;
                    self.const_rc(
                        // SAFETY: live container, index < n, out-pointer to a local.
                        unsafe { (c.from_folded)(self.handle, i, &mut v) },
                        "GetConstantFromFolded",
                    )?;
                    v
                },
                kind: {
                    let mut v = 0i32;
                    self.const_rc(
                        // SAFETY: as above.
                        unsafe { (c.kind)(self.handle, i, &mut v) },
                        "GetConstantType",
                    )?;
                    v
                },
                dtype: {
                    let mut v = 0i32;
                    self.const_rc(
                        // SAFETY: as above.
                        unsafe { (c.dtype)(self.handle, i, &mut v) },
                        "GetConstantDtype",
                    )?;
                    v
                },
                data_size: {
                    let mut v = 0usize;
                    self.const_rc(
                        // SAFETY: as above.
                        unsafe { (c.data_size)(self.handle, i, &mut v) },
                        "GetConstantDataSize",
                    )?;
                    v
                },
            });
        }
        Ok(out)
    }

    fn const_rc(&self, rc: i32, what: &str) -> Result<()> {
        if rc != 0 {
            return Err(Error::load_failed(format!(
                "AOTInductorModelContainer{what} failed (code {rc})"
            )));
        }
        Ok(())
    }

    fn const_str(&self, f: ConstStrFn, i: usize, what: &str) -> Result<String> {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: live container, valid index, out-pointer to a local.
        self.const_rc(unsafe { f(self.handle, i, &mut p) }, what)?;
        if p.is_null() {
            return Ok(String::new());
        }
        // SAFETY: a NUL-terminated string owned by the container.
        Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }

    /// Point the container's constants at tensors the caller keeps alive
    /// (`UpdateUserManagedConstantBufferPairs` on the active buffer).
    ///
    /// # Safety
    /// Every handle must stay alive, and its memory valid, until the
    /// container is deleted or the constants are replaced.
    pub(crate) unsafe fn use_constants(&self, pairs: &[ConstantMapEntry]) -> Result<()> {
        let Some(c) = self.api.constants else {
            return Err(Error::load_failed(
                "the .so has no constant-management entry points",
            ));
        };
        // The container makes its own handles over ours and never deletes them.
        let _owner = OwnerScope::adopting(self.owner);
        // SAFETY: live container; `pairs` is a valid array whose handles outlive the container
        // (the caller's contract); use_inactive = false, validate_full_update = false.
        let rc = unsafe {
            (c.update_user_managed_pairs)(self.handle, pairs.as_ptr(), pairs.len(), false, false)
        };
        if rc != 0 {
            return Err(Error::load_failed(format!(
                "AOTInductorModelContainerUpdateUserManagedConstantBufferPairs failed (code {rc}){}",
                last_error_suffix(&self.api)
            )));
        }
        Ok(())
    }

    /// Whether the single-threaded run entry point exists.
    pub(crate) fn has_single_threaded(&self) -> bool {
        self.api.run_single_threaded.is_some()
    }

    /// Run the model (single-threaded entry point where the `.so` has one). `inputs` are
    /// stolen (the container deletes them, and the slots must not be used again); `outputs`
    /// receive new handles the caller owns.
    ///
    /// # Safety
    /// `inputs` must hold `num_inputs` live handles and `outputs` `num_outputs` slots; `stream`
    /// must be a live stream of the container's device.
    pub(crate) unsafe fn run(
        &self,
        inputs: &mut [AtenTensorHandle],
        outputs: &mut [AtenTensorHandle],
        stream: *mut c_void,
    ) -> Result<()> {
        let f = self.api.run_single_threaded.unwrap_or(self.api.run);
        let _ = crate::error::take_callback_failure();
        let _owner = OwnerScope::enter(self.owner);
        // SAFETY: forwarded contract; the .so catches its own exceptions.
        let rc = unsafe {
            f(
                self.handle,
                inputs.as_mut_ptr(),
                inputs.len(),
                outputs.as_mut_ptr(),
                outputs.len(),
                stream,
                std::ptr::null_mut(),
            )
        };
        if rc != 0 {
            return Err(Error::execution_failed(format!(
                "AOTInductorModelContainerRun failed (code {rc}){}",
                last_error_suffix(&self.api)
            )));
        }
        Ok(())
    }
}

/// The `.so`'s own last error and the first shim failure seen during the call.
fn last_error_suffix(api: &Api) -> String {
    let mut parts = Vec::new();
    if let Some(f) = api.last_error {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: out-pointer to a local; the string is thread-local in the .so.
        if unsafe { f(&mut p) } == 0 && !p.is_null() {
            // SAFETY: non-null NUL-terminated string.
            let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
            if !s.is_empty() {
                parts.push(s);
            }
        }
    }
    if let Some(shim) = crate::error::take_callback_failure() {
        parts.push(format!("first shim failure: {shim}"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(": {}", parts.join("; "))
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // The container frees its constants with the CUDA runtime, which needs the device's
        // context current on this thread.
        let _ctx = crate::cuda::device(self.device)
            .and_then(|d| crate::cuda::ContextGuard::device(&d).map(|g| (d, g)));
        let rc = {
            let _owner = OwnerScope::enter(self.owner);
            // SAFETY: the container is live and deleted once; each distinct .so stays loaded
            // for the life of the process, so its code and globals outlive every container.
            unsafe { (self.api.delete)(self.handle) }
        };
        if rc != 0 {
            log::error!("AOTInductorModelContainerDelete failed (code {rc})");
        }
        super::owned::release(self.owner);
    }
}
