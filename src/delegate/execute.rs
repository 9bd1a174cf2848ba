//! One execute of a method: check the call, order it after a caller's
//! stream, run (eagerly or through the graph wing), deliver the outputs.

use super::io::{CopyCtx, InputArg, OutputArg, OutputInfo};
use super::outputs::{self, Placement};
use super::run::Runner;
use super::scope::RunScope;
use super::{CudaHandle, State};
use crate::config::OutputPlacement;
use crate::cuda::event::Event;
use crate::cuda::stream::{self, CallerStream};
use crate::error::{invalid, Result};
use crate::stats::{self, Event as StatEvent};
use std::time::Instant;

impl CudaHandle {
    /// Run the method. See the module docs for the IO policy.
    ///
    /// # Safety
    /// Every input's `data` must be valid for reads of its `nbytes` (host or
    /// device memory) until this call returns and, for device memory, until
    /// the work it queued has run; every output's `data` used for copying
    /// must be valid for writes of its `capacity` bytes likewise.
    pub(crate) unsafe fn execute(
        &self,
        inputs: &[InputArg],
        outputs: &[OutputArg],
        placement: OutputPlacement,
    ) -> Result<Vec<OutputInfo>> {
        let t0 = Instant::now();
        let mut guard = self.lock();
        let st = &mut *guard;
        let Some(container) = st.container.clone() else {
            return invalid("the method was destroyed");
        };
        self.check_counts(inputs.len(), outputs.len())?;
        let placement = self.placement(placement);
        // Lock order: the method, then its stream (shared streams serialize their methods).
        let _work = self.stream.lock_work();
        let _run = RunScope::enter(&self.device, &self.counters, &self.stream)?;
        let caller = self.caller_stream_begin(st)?;
        st.executes += 1;
        // The previous execute's device outputs stay alive until this execute's work is
        // queued: one of them may be an input of this run (freed after it, in stream order).
        let previous = std::mem::take(&mut st.kept_outputs);
        let runner = Runner {
            container: &container,
            device: &self.device,
            stream: &self.stream,
            method: &self.method,
            num_outputs: self.num_outputs,
        };
        let mut ctx = CopyCtx {
            device: self.device.ordinal,
            stream: self.stream.raw(),
            staging: &mut st.staging,
            exec: st.executes,
        };
        let tr = Instant::now();
        let outs = match st.graphs.as_mut() {
            // SAFETY: forwarded contract.
            Some(g) => unsafe { g.execute(&runner, inputs, &mut ctx)? },
            // SAFETY: forwarded contract.
            None => unsafe { runner.eager(inputs, &mut ctx)? },
        };
        let run_ns = stats::nanos(tr.elapsed());
        // SAFETY: forwarded contract for the output buffers.
        let infos = unsafe {
            outputs::deliver(
                outs,
                outputs,
                placement,
                self.stream.raw(),
                &mut st.staging,
                &mut st.kept_outputs,
            )?
        };
        drop(previous);
        self.caller_stream_end(st, caller)?;
        stats::record(StatEvent::Execute);
        stats::record(StatEvent::Timing {
            execute_ns: stats::nanos(t0.elapsed()),
            run_ns,
        });
        Ok(infos)
    }

    fn check_counts(&self, inputs: usize, outputs: usize) -> Result<()> {
        if inputs != self.num_inputs || outputs != self.num_outputs {
            return invalid(format!(
                "method {:?} takes {} inputs and {} outputs, got {inputs} and {outputs}",
                self.method, self.num_inputs, self.num_outputs
            ));
        }
        Ok(())
    }

    /// Where this execute's outputs go: as asked, or as the configuration says.
    fn placement(&self, asked: OutputPlacement) -> Placement {
        match asked {
            OutputPlacement::FromConfig if self.config.outputs_on_device => Placement::Device,
            OutputPlacement::FromConfig | OutputPlacement::Copy => Placement::Copy,
            OutputPlacement::Device => Placement::Device,
        }
    }

    /// With a caller stream set on this thread: check it and make the method's
    /// stream wait for the caller's queued work.
    fn caller_stream_begin(&self, st: &mut State) -> Result<Option<CallerStream>> {
        let Some(cs) = stream::caller_stream() else {
            return Ok(None);
        };
        if cs.0 == self.stream.raw() {
            return Ok(None);
        }
        let ctx = stream::stream_context(cs.0)?;
        if ctx != self.device.ctx {
            return invalid(format!(
                "the caller stream belongs to another CUDA context than cuda:{} (the method's device)",
                self.device.ordinal
            ));
        }
        if st.caller_sync.is_none() {
            st.caller_sync = Some((
                Event::new(self.device.clone())?,
                Event::new(self.device.clone())?,
            ));
        }
        if let Some((before, _)) = &st.caller_sync {
            before.record(cs.0)?;
            before.wait_on(self.stream.raw())?;
        }
        Ok(Some(cs))
    }

    /// Make the caller's stream wait for the execute's work.
    fn caller_stream_end(&self, st: &mut State, cs: Option<CallerStream>) -> Result<()> {
        if let (Some(cs), Some((_, after))) = (cs, &st.caller_sync) {
            after.record(self.stream.raw())?;
            after.wait_on(cs.0)?;
        }
        Ok(())
    }
}
