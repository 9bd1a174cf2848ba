//! What the generated code makes for one container and never releases
//! itself, released by the library when that container is deleted:
//! - the CUDA modules of its kernels: the generated code loads them per
//!   model instance with `cuModuleLoadData` (which the `.so` imports from
//!   the global scope, where this library serves it: `shim::driver`)
//!   and keeps no way to unload them, so every load/destroy cycle would leave
//!   one set behind;
//! - the handles it makes over user-managed constants
//!   (`aoti_torch_new_tensor_handle` during
//!   `UpdateUserManagedConstantBufferPairs`) and never deletes: each holds
//!   the constant's storage, so the constants' device memory would never be
//!   freed (ExecuTorch 1.5 per-FQN weights, weight sharing).
//!
//! Attribution is by a per-thread owner that [`OwnerScope`] sets around
//! every call into a container. A recorded handle that the generated code
//! does delete after all is forgotten in the delete shim, so it is never
//! deleted twice.

use super::AtenTensorHandle;
use crate::cuda::ContextGuard;
use cudarc::driver::sys;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

thread_local! {
    /// The container the calls of this thread are made for (0: none).
    static OWNER: Cell<u64> = const { Cell::new(0) };
    /// Whether the container is being handed user-managed constants.
    static ADOPTING: Cell<bool> = const { Cell::new(false) };
}

static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);
/// Modules loaded by the generated code: (owner, (module, its context)).
static MODULES: Mutex<Vec<(u64, (usize, usize))>> = Mutex::new(Vec::new());
/// Handles the generated code made over user-managed constants: (owner, handle).
static HANDLES: Mutex<Vec<(u64, usize)>> = Mutex::new(Vec::new());
/// Entries of `HANDLES` (read without the lock by the delete shim's fast path).
static HANDLE_COUNT: AtomicUsize = AtomicUsize::new(0);

fn lock<T>(m: &'static Mutex<T>) -> std::sync::MutexGuard<'static, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Take `owner`'s entries out of `list`.
fn take_owned<T>(list: &'static Mutex<Vec<(u64, T)>>, owner: u64) -> Vec<T> {
    let mut v = lock(list);
    let (mine, rest): (Vec<_>, Vec<_>) = v.drain(..).partition(|(o, _)| *o == owner);
    *v = rest;
    mine.into_iter().map(|(_, x)| x).collect()
}

/// A new owner id for a container.
pub(crate) fn new_owner() -> u64 {
    NEXT_OWNER.fetch_add(1, Ordering::Relaxed)
}

/// Attributes what the generated code makes on this thread to `owner` until dropped.
pub(crate) struct OwnerScope {
    prev: u64,
    prev_adopting: bool,
}

impl OwnerScope {
    pub(crate) fn enter(owner: u64) -> OwnerScope {
        OwnerScope {
            prev: OWNER.with(|o| o.replace(owner)),
            prev_adopting: ADOPTING.with(|a| a.replace(false)),
        }
    }

    /// Also record the tensor handles the container makes (while it takes user-managed
    /// constants).
    pub(crate) fn adopting(owner: u64) -> OwnerScope {
        let s = OwnerScope::enter(owner);
        ADOPTING.with(|a| a.set(true));
        s
    }
}

impl Drop for OwnerScope {
    fn drop(&mut self) {
        OWNER.with(|o| o.set(self.prev));
        ADOPTING.with(|a| a.set(self.prev_adopting));
    }
}

/// The generated code loaded `module` in context `ctx` on this thread.
pub(crate) fn module_loaded(module: sys::CUmodule, ctx: sys::CUcontext) {
    let owner = OWNER.with(|o| o.get());
    if owner != 0 && !module.is_null() {
        lock(&MODULES).push((owner, (module as usize, ctx as usize)));
    }
}

/// The generated code made handle `h` on this thread.
pub(crate) fn handle_made(h: AtenTensorHandle) {
    let owner = OWNER.with(|o| o.get());
    if owner != 0 && ADOPTING.with(|a| a.get()) && !h.is_null() {
        lock(&HANDLES).push((owner, h as usize));
        HANDLE_COUNT.fetch_add(1, Ordering::Release);
    }
}

/// Handle `h` is being deleted by its owner: forget it if it was recorded.
pub(crate) fn handle_deleted(h: AtenTensorHandle) {
    if HANDLE_COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut v = lock(&HANDLES);
    if let Some(i) = v.iter().position(|&(_, x)| x == h as usize) {
        v.swap_remove(i);
        HANDLE_COUNT.fetch_sub(1, Ordering::Release);
    }
}

/// Release what `owner`'s container left behind (call after deleting it): its modules
/// unloaded, its leftover handles deleted.
pub(crate) fn release(owner: u64) {
    let handles = take_owned(&HANDLES, owner);
    HANDLE_COUNT.fetch_sub(handles.len(), Ordering::Release);
    for h in handles {
        // SAFETY: a handle the generated code made with aoti_torch_new_tensor_handle (a box
        // from into_handle) and never deleted: its container is gone, so nobody uses it.
        drop(unsafe { super::from_handle(h as AtenTensorHandle) });
    }
    for (m, c) in take_owned(&MODULES, owner) {
        let _g = match ContextGuard::bind(c as sys::CUcontext) {
            Ok(g) => g,
            Err(e) => {
                log::warn!("leaving a module of the generated code loaded: {e}");
                continue;
            }
        };
        // SAFETY: a module the generated code loaded for the deleted container; its
        // functions are referenced only by that container's (deleted) model.
        let r = unsafe { sys::cuModuleUnload(m as sys::CUmodule) };
        if r != sys::CUresult::CUDA_SUCCESS {
            log::warn!("cuModuleUnload of the generated code's module failed: {r:?}");
        }
    }
}

/// Modules and handles recorded now (modules: reported by the process-wide counters).
pub(crate) fn recorded() -> (usize, usize) {
    (lock(&MODULES).len(), lock(&HANDLES).len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_recorded_only_while_adopting_and_deleted_once() {
        let owner = new_owner();
        let t = crate::cuda::memory::empty_strided(vec![2], vec![1], 6, crate::tensor::Device::Cpu)
            .unwrap();
        let a = super::super::into_handle(t.clone());
        let b = super::super::into_handle(t.clone());
        let c = super::super::into_handle(t);
        {
            let _s = OwnerScope::enter(owner);
            handle_made(a); // not adopting: not recorded
            let _t = OwnerScope::adopting(owner);
            handle_made(b);
            handle_made(c);
        }
        handle_made(a); // no owner: not recorded
        let mine = |v: &Vec<(u64, usize)>| v.iter().filter(|e| e.0 == owner).count();
        assert_eq!(mine(&lock(&HANDLES)), 2);
        // The generated code deletes c itself after all: forgotten, not deleted twice.
        handle_deleted(c);
        // SAFETY: c is live and deleted once, here.
        drop(unsafe { super::super::from_handle(c) });
        assert_eq!(mine(&lock(&HANDLES)), 1);
        release(owner); // deletes b
        assert_eq!(mine(&lock(&HANDLES)), 0);
        // SAFETY: a was never recorded; deleted once, here.
        drop(unsafe { super::super::from_handle(a) });
    }
}
