//! [`Runner`]: one run of a method's container on its stream — eagerly on
//! fresh input handles, or on handles a graph capture prepared.

use super::io::{self, CopyCtx, InputArg};
use crate::aoti::{self, AtenTensorHandle, Container};
use crate::cuda::stream::CudaStream;
use crate::cuda::DeviceState;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use std::sync::Arc;

/// What a run of the container needs from its method.
pub(crate) struct Runner<'a> {
    pub(crate) container: &'a Container,
    pub(crate) device: &'a Arc<DeviceState>,
    pub(crate) stream: &'a Arc<CudaStream>,
    pub(crate) method: &'a str,
    pub(crate) num_outputs: usize,
}

impl Runner<'_> {
    /// Run the container once on fresh input handles: device inputs in place,
    /// host inputs copied into new device buffers.
    ///
    /// # Safety
    /// Every input's `data` must be valid for reads of its `nbytes` until the
    /// run's work on the stream has finished.
    pub(crate) unsafe fn eager(
        &self,
        inputs: &[InputArg],
        ctx: &mut CopyCtx<'_>,
    ) -> Result<Vec<Tensor>> {
        let mut handles: Vec<AtenTensorHandle> = Vec::with_capacity(inputs.len());
        for (i, input) in inputs.iter().enumerate() {
            // SAFETY: forwarded contract.
            match unsafe { io::eager_input(input, self.device, self.stream, ctx) } {
                Ok(t) => handles.push(aoti::into_handle(t)),
                Err(e) => {
                    for h in handles {
                        // SAFETY: handles made just above, not handed to the container.
                        drop(unsafe { aoti::from_handle(h) });
                    }
                    return Err(e.context(&format!("input {i}")));
                }
            }
        }
        // The generated code may use the legacy default stream: not during another
        // thread's capture.
        let _legacy = self.device.legacy_use();
        // SAFETY: fresh input handles (stolen by the call).
        unsafe { self.run(&mut handles) }
    }

    /// Run the container on `handles` (stolen) and take its outputs.
    ///
    /// `AOTInductorModelContainerRun` with one model instance blocks the host
    /// on the previous run's completion event; `RunSingleThreaded` skips that
    /// bookkeeping and is safe here because the container never gets `Run` or
    /// `RunConstantFolding` (they would empty the model list whose first entry
    /// it uses), every call uses the method's one stream, and the method's
    /// lock serializes host code (the stream orders GPU work). Its first call
    /// may fold constants and wait once.
    ///
    /// # Safety
    /// `handles` must be fresh handles for the method's inputs.
    pub(crate) unsafe fn run(&self, handles: &mut [AtenTensorHandle]) -> Result<Vec<Tensor>> {
        let mut out: Vec<AtenTensorHandle> = vec![std::ptr::null_mut(); self.num_outputs];
        // SAFETY: forwarded contract; the output slots are null.
        let run = unsafe {
            self.container
                .run(handles, &mut out, self.stream.raw().cast())
        };
        let outs: Vec<Option<Tensor>> = out
            .iter()
            // SAFETY: non-null slots are new handles we now own.
            .map(|&h| (!h.is_null()).then(|| unsafe { aoti::from_handle(h) }))
            .collect();
        run?;
        outs.into_iter()
            .enumerate()
            .map(|(i, o)| {
                o.ok_or_else(|| {
                    Error::execution_failed(format!("the model returned no tensor for output {i}"))
                })
            })
            .collect()
    }
}
