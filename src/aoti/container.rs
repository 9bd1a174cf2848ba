//! The AOTInductor model container of one loaded method.

use super::Library;
use crate::error::{Error, Result};
use crate::ffi::shim::AtenTensorHandle;
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::Arc;

type ContainerHandle = *mut c_void;
type CreateWithDeviceFn =
    unsafe extern "C" fn(*mut ContainerHandle, usize, *const c_char, *const c_char) -> i32;
type DeleteFn = unsafe extern "C" fn(ContainerHandle) -> i32;
type GetCountFn = unsafe extern "C" fn(ContainerHandle, *mut usize) -> i32;
pub type RunFn = unsafe extern "C" fn(
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
}

fn required(lib: &Library, name: &str) -> Result<*mut c_void> {
    lib.symbol(name).ok_or_else(|| {
        Error::InvalidProgram(format!(
            "the .so does not export {name}: not an AOTInductor model"
        ))
    })
}

impl Api {
    fn resolve(lib: &Library) -> Result<Api> {
        // SAFETY: each symbol is a function of the declared AOTInductor C signature
        // (torch/csrc/inductor/aoti_runtime/interface.h).
        unsafe {
            Ok(Api {
                create_with_device: std::mem::transmute::<*mut c_void, CreateWithDeviceFn>(
                    required(lib, "AOTInductorModelContainerCreateWithDevice")?,
                ),
                delete: std::mem::transmute::<*mut c_void, DeleteFn>(required(
                    lib,
                    "AOTInductorModelContainerDelete",
                )?),
                num_inputs: std::mem::transmute::<*mut c_void, GetCountFn>(required(
                    lib,
                    "AOTInductorModelContainerGetNumInputs",
                )?),
                num_outputs: std::mem::transmute::<*mut c_void, GetCountFn>(required(
                    lib,
                    "AOTInductorModelContainerGetNumOutputs",
                )?),
                run: std::mem::transmute::<*mut c_void, RunFn>(required(
                    lib,
                    "AOTInductorModelContainerRun",
                )?),
                run_single_threaded: lib
                    .symbol("AOTInductorModelContainerRunSingleThreaded")
                    .map(|p| std::mem::transmute::<*mut c_void, RunFn>(p)),
                update_constants_from_blob: lib
                    .symbol("AOTInductorModelUpdateConstantsFromBlob")
                    .map(|p| std::mem::transmute::<*mut c_void, UpdateFromBlobFn>(p)),
                constants_blob_size: lib
                    .symbol("AOTInductorModelContainerGetConstantsBlobSize")
                    .map(|p| std::mem::transmute::<*mut c_void, BlobSizeFn>(p)),
                last_error: lib
                    .symbol("AOTInductorGetLastError")
                    .map(|p| std::mem::transmute::<*mut c_void, GetLastErrorFn>(p)),
            })
        }
    }
}

/// One model container (one model instance) on one device.
#[derive(Debug)]
pub struct Container {
    handle: ContainerHandle,
    api: Api,
    pub num_inputs: usize,
    pub num_outputs: usize,
    _lib: Arc<Library>,
}

// SAFETY: the container is only used under the owning handle's lock.
unsafe impl Send for Container {}
// SAFETY: as above.
unsafe impl Sync for Container {}

impl Container {
    /// Create the container for `cuda:<device>` (the device's context must be current).
    pub fn create(lib: Arc<Library>, device: i32) -> Result<Container> {
        let api = Api::resolve(&lib)?;
        let dev = CString::new(format!("cuda:{device}")).unwrap_or_default();
        let mut handle: ContainerHandle = std::ptr::null_mut();
        // SAFETY: valid out-pointer and device string; the .so catches its own exceptions.
        let rc =
            unsafe { (api.create_with_device)(&mut handle, 1, dev.as_ptr(), std::ptr::null()) };
        if rc != 0 || handle.is_null() {
            return Err(Error::LoadFailed(format!(
                "AOTInductorModelContainerCreateWithDevice(cuda:{device}) failed (code {rc}){}",
                last_error_suffix(&api)
            )));
        }
        let mut c = Container {
            handle,
            api,
            num_inputs: 0,
            num_outputs: 0,
            _lib: lib,
        };
        // SAFETY: live container; out-pointers to fields.
        unsafe {
            c.num_inputs = c.count(c.api.num_inputs, "GetNumInputs")?;
            c.num_outputs = c.count(c.api.num_outputs, "GetNumOutputs")?;
        }
        Ok(c)
    }

    unsafe fn count(&self, f: GetCountFn, what: &str) -> Result<usize> {
        let mut n = 0usize;
        // SAFETY: live container and out-pointer.
        let rc = unsafe { f(self.handle, &mut n) };
        if rc != 0 {
            return Err(Error::LoadFailed(format!(
                "AOTInductorModelContainer{what} failed (code {rc})"
            )));
        }
        Ok(n)
    }

    /// Bytes of weights the model expects, when the `.so` can say.
    pub fn constants_blob_size(&self) -> Result<Option<u64>> {
        let Some(f) = self.api.constants_blob_size else {
            return Ok(None);
        };
        let mut n = 0u64;
        // SAFETY: live container and out-pointer.
        let rc = unsafe { f(self.handle, &mut n) };
        if rc != 0 {
            return Err(Error::LoadFailed(format!(
                "AOTInductorModelContainerGetConstantsBlobSize failed (code {rc})"
            )));
        }
        Ok(Some(n))
    }

    /// Load the weights (the size was checked by the caller: the function takes no length).
    pub fn load_weights(&self, blob: &[u8]) -> Result<()> {
        let Some(f) = self.api.update_constants_from_blob else {
            if blob.is_empty() {
                return Ok(());
            }
            return Err(Error::InvalidProgram(
                "the .so cannot load a weights blob (no AOTInductorModelUpdateConstantsFromBlob; built with torch < 2.9?)".into(),
            ));
        };
        // SAFETY: live container; `blob` holds exactly the size the model declared.
        let rc = unsafe { f(self.handle, blob.as_ptr()) };
        if rc != 0 {
            return Err(Error::LoadFailed(format!(
                "AOTInductorModelUpdateConstantsFromBlob failed (code {rc}){}",
                last_error_suffix(&self.api)
            )));
        }
        Ok(())
    }

    /// Whether the single-threaded run entry point exists.
    pub fn has_single_threaded(&self) -> bool {
        self.api.run_single_threaded.is_some()
    }

    /// Run the model. `inputs` are stolen (the container deletes them, and the
    /// slots must not be used again); `outputs` receive new handles the caller owns.
    ///
    /// # Safety
    /// `inputs` must hold `num_inputs` live handles and `outputs` `num_outputs` slots; `stream`
    /// must be a live stream of the container's device.
    pub unsafe fn run(
        &self,
        single_threaded: bool,
        inputs: &mut [AtenTensorHandle],
        outputs: &mut [AtenTensorHandle],
        stream: *mut c_void,
    ) -> Result<()> {
        let f = match (single_threaded, self.api.run_single_threaded) {
            (true, Some(f)) => f,
            _ => self.api.run,
        };
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
            return Err(Error::ExecutionFailed(format!(
                "AOTInductorModelContainerRun failed (code {rc}){}",
                last_error_suffix(&self.api)
            )));
        }
        Ok(())
    }
}

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
    let shim = crate::error::last_error_message();
    if !shim.is_empty() {
        parts.push(format!("last shim error: {shim}"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(": {}", parts.join("; "))
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // SAFETY: the container is live and deleted once; each distinct .so stays loaded
        // for the life of the process, so its code and globals outlive every container.
        let rc = unsafe { (self.api.delete)(self.handle) };
        if rc != 0 {
            log::error!("AOTInductorModelContainerDelete failed (code {rc})");
        }
    }
}
