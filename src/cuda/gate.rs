//! The device's legacy-stream gate and what holds it.
//!
//! Work that may use the legacy default stream (the library's external allocations
//! and ordered copies; the generated code's loads, eager runs and deletes, which call
//! `cudaMemcpy`/`cudaFree`) holds the gate shared; a stream capture holds it
//! exclusively: the library's streams are blocking streams, so legacy-stream work on
//! another thread during a capture would invalidate it
//! (`CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`).
//!
//! No user callback runs while a thread holds it: a [`Gate`] keeps the thread's log
//! records until it is released ([`crate::logging::Hold`]), and the load calls the
//! caller's named-data functions without it (`delegate::per_fqn`). With std's
//! writer-preferring `RwLock`, a callback taking the gate again while another thread
//! waits to start a capture would otherwise deadlock.

use super::DeviceState;
use crate::logging::Hold;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The lock itself (one per device).
#[derive(Debug, Default)]
pub(crate) struct LegacyGate {
    lock: RwLock<()>,
}

impl LegacyGate {
    /// Shared use; none taken when `capturing` (the thread holds the gate exclusively).
    pub(crate) fn shared(&self, capturing: bool) -> Gate<RwLockReadGuard<'_, ()>> {
        let logs = Hold::new();
        Gate {
            _guard: (!capturing).then(|| self.lock.read().unwrap_or_else(|p| p.into_inner())),
            _logs: logs,
        }
    }

    /// Exclusive use (one stream capture).
    pub(crate) fn exclusive(&self) -> Gate<RwLockWriteGuard<'_, ()>> {
        let logs = Hold::new();
        Gate {
            _guard: Some(self.lock.write().unwrap_or_else(|p| p.into_inner())),
            _logs: logs,
        }
    }
}

/// A hold of a library lock (the legacy-stream gate, a stream's work lock). Field order
/// is drop order: the lock is released before the log records kept meanwhile go to the
/// log sink.
#[must_use]
pub(crate) struct Gate<G> {
    pub(super) _guard: Option<G>,
    pub(super) _logs: Hold,
}

/// A value dropped while its device's legacy-stream gate is held (a container, whose
/// delete may use the legacy default stream), whatever path drops it;
/// [`GatedDrop::into_inner`] takes it out on the path that keeps it.
pub(crate) struct GatedDrop<T> {
    value: std::mem::ManuallyDrop<T>,
    device: Arc<DeviceState>,
}

impl<T> GatedDrop<T> {
    pub(crate) fn new(device: Arc<DeviceState>, value: T) -> GatedDrop<T> {
        GatedDrop {
            value: std::mem::ManuallyDrop::new(value),
            device,
        }
    }

    /// The value, no longer dropped here.
    pub(crate) fn into_inner(self) -> T {
        let mut me = std::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never dropped, so its fields are read out exactly once each.
        unsafe {
            drop(std::ptr::read(&me.device));
            std::mem::ManuallyDrop::take(&mut me.value)
        }
    }
}

impl<T> std::ops::Deref for GatedDrop<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> std::ops::DerefMut for GatedDrop<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T> Drop for GatedDrop<T> {
    fn drop(&mut self) {
        let _legacy = self.device.legacy_use();
        // SAFETY: dropped once, here (`into_inner` consumes `self` without running this).
        unsafe { std::mem::ManuallyDrop::drop(&mut self.value) };
    }
}

#[cfg(test)]
mod tests;
