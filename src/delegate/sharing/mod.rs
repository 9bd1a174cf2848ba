//! Constants shared across methods (`weight_sharing_across_methods`).
//!
//! Every method loaded with sharing on records its constants (the tensors
//! the generated code makes over its weights while loading them) together
//! with their metadata and the SHA-256 of their bytes in the weights blob,
//! in a process-wide registry. A later method's constant is served from an
//! earlier method's device buffer when the two are the same tensor: equal
//! dtype, sizes, strides and storage offset, and equal bytes (whatever their
//! names — also constants without FQN metadata). Registered buffers (type
//! `Buffer`: possibly mutated in place, e.g. a KV cache) are shared only
//! when `share_mutable_buffers_across_methods` is on, only within one
//! program (the same share group), and only under the same original FQN:
//! sharing one silently would change the program's meaning.
//!
//! Mechanics: the new method is first loaded normally (container A', its
//! own weights); if anything can be shared, a second container B is created
//! without weights and given every constant as a user-managed tensor
//! (`UpdateUserManagedConstantBufferPairs`): shared ones point at the other
//! method's buffer, the others at copies the method owns; then A' is
//! deleted, freeing its weights. Peak memory while loading is one extra copy
//! of the method's weights; afterwards only the unshared constants are held.
//! The methods whose buffers are used are kept alive (their containers are
//! reference counted) until every method using them is destroyed.
//! Methods whose weights come per FQN ([`super::per_fqn`]) need no second
//! container: their constants are user-managed from the start, and the
//! registry is consulted before anything is copied to the device.

use crate::aoti::container::{constant_type, ConstantInfo, ConstantMapEntry};
use crate::aoti::{self, AtenTensorHandle, Container, Library};
use crate::cuda::{copy, memory, stream::CudaStream, DeviceState};
use crate::error::{Error, Result};
use crate::tensor::{Device, HostAlloc, Memory, Tensor};
use std::collections::HashSet;
use std::ffi::CString;
use std::sync::{Arc, LazyLock, Mutex};

/// How a method takes part in sharing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SharePolicy {
    /// Registered buffers too (same group and FQN only).
    pub(crate) mutable_buffers: bool,
    /// The program the method belongs to (0: none; buffers are then never shared).
    pub(crate) group: u64,
}

mod registry;
pub(crate) use registry::{Described, Held, Key, Registry, Settled};

static REGISTRY: LazyLock<Mutex<Registry<Container>>> = LazyLock::new(Default::default);

/// The registry of constants other methods may use (held briefly: never across a call
/// out of the library).
pub(super) fn registry() -> std::sync::MutexGuard<'static, Registry<Container>> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a method holds so that its shared and copied constants stay valid:
/// dropped after its container.
#[derive(Default)]
pub(crate) struct SharedConstants {
    /// The constants' names, one per handle.
    names: Vec<CString>,
    /// User-managed handles given to the container (deleted here).
    handles: Vec<AtenTensorHandle>,
    /// The methods whose buffers this one uses (each once: `owner_set` has their addresses).
    owners: Vec<Arc<Container>>,
    owner_set: HashSet<usize>,
}

// SAFETY: the handles are boxes only this value owns; containers are Send + Sync.
unsafe impl Send for SharedConstants {}

impl SharedConstants {
    /// Keep `owner` (whose buffers a constant uses) alive as long as this value.
    pub(super) fn keep_owner(&mut self, owner: &Arc<Container>) {
        if self.owner_set.insert(Arc::as_ptr(owner) as usize) {
            self.owners.push(owner.clone());
        }
    }

    /// Add constant `name` with tensor `t`, for [`SharedConstants::install`].
    pub(super) fn add(&mut self, name: &str, t: Tensor) -> Result<()> {
        let c = CString::new(name)
            .map_err(|_| Error::invalid_program(format!("constant name {name:?} contains NUL")))?;
        self.names.push(c);
        self.handles.push(aoti::into_handle(t));
        Ok(())
    }

    /// Give `container` every constant added so far, as user-managed tensors.
    ///
    /// # Safety
    /// `self` must be kept until after `container` is deleted (the container keeps the handles).
    pub(super) unsafe fn install(&self, container: &Container) -> Result<()> {
        let pairs: Vec<ConstantMapEntry> = self
            .names
            .iter()
            .zip(&self.handles)
            .map(|(n, &h)| ConstantMapEntry {
                name: n.as_ptr(),
                handle: h,
            })
            .collect();
        // SAFETY: the handles are live boxes owned by `self`, which outlives the container
        // (this function's contract); their memory is owned by the tensors themselves.
        unsafe { container.use_constants(&pairs) }
    }
}

impl Drop for SharedConstants {
    fn drop(&mut self) {
        for h in self.handles.drain(..) {
            // SAFETY: handles made by aoti::into_handle for this value, deleted once, after the
            // container that used them is gone (the caller drops the container first).
            drop(unsafe { aoti::from_handle(h) });
        }
    }
}

/// One constant of the method being loaded.
struct Constant<'a> {
    info: &'a ConstantInfo,
    tensor: Tensor,
    digest: [u8; 32],
}

/// What identifies a constant's value for sharing: its view and the SHA-256 of its bytes.
pub(super) struct View<'a> {
    pub(super) sizes: &'a [i64],
    pub(super) strides: &'a [i64],
    pub(super) offset: i64,
    pub(super) digest: [u8; 32],
}

impl Constant<'_> {
    fn view(&self) -> View<'_> {
        View {
            sizes: &self.tensor.sizes,
            strides: &self.tensor.strides,
            offset: self.tensor.storage_offset,
            digest: self.digest,
        }
    }
}

/// Pair every non-folded constant with the tensor the container made for it
/// and the SHA-256 of its bytes in the weights blob (packed in container order).
fn describe<'a>(
    infos: &'a [ConstantInfo],
    tensors: Vec<Tensor>,
    weights: &[u8],
) -> Result<Vec<Constant<'a>>> {
    let live: Vec<&ConstantInfo> = infos.iter().filter(|i| !i.from_folded).collect();
    if live.len() != tensors.len() {
        return Err(Error::load_failed(format!(
            "the container made {} constant tensors for {} constants",
            tensors.len(),
            live.len()
        )));
    }
    let mut offset = 0usize;
    let mut parts: Vec<&[u8]> = Vec::with_capacity(live.len());
    for info in &live {
        let end = offset
            .checked_add(info.data_size)
            .filter(|e| *e <= weights.len())
            .ok_or_else(|| {
                Error::invalid_program(format!(
                    "constant {} ({} bytes at {offset}) lies outside the {}-byte weights blob",
                    info.name,
                    info.data_size,
                    weights.len()
                ))
            })?;
        parts.push(&weights[offset..end]);
        offset = end;
    }
    let digests = aoti::loader::sha256_many(&parts);
    Ok(live
        .into_iter()
        .zip(tensors)
        .zip(digests)
        .map(|((info, tensor), digest)| Constant {
            info,
            tensor,
            digest,
        })
        .collect())
}

/// The registry key of constant `info` with `view` on `place`, in `policy`'s share group.
pub(super) fn key_of(
    info: &ConstantInfo,
    view: &View<'_>,
    place: Device,
    policy: SharePolicy,
) -> Option<Key> {
    Key::new(
        &Described {
            place,
            dtype: info.dtype,
            sizes: view.sizes,
            strides: view.strides,
            offset: view.offset,
            buffer: info.kind == constant_type::BUFFER,
            fqn: &info.original_fqn,
            digest: view.digest,
        },
        policy.group,
    )
}

/// The registered tensor a constant can use instead of its own copy, if any: same device,
/// dtype and view, and the same bytes (or, for a registered buffer, the same program and
/// FQN, and only with `policy.mutable_buffers`).
pub(super) fn find(
    reg: &Registry<Container>,
    info: &ConstantInfo,
    view: &View<'_>,
    place: Device,
    policy: SharePolicy,
) -> Option<(Tensor, Arc<Container>)> {
    let key = key_of(info, view, place, policy)?;
    if !key.usable(policy.mutable_buffers) {
        return None;
    }
    reg.find(&key)
}

/// The [`Held`] of each constant of a load: its key and tensor.
pub(super) fn held_of(
    constants: &[(&ConstantInfo, Tensor, [u8; 32])],
    policy: SharePolicy,
    shared: &[bool],
) -> Vec<Held> {
    constants
        .iter()
        .zip(shared)
        .map(|((info, t, digest), &shared)| {
            let view = View {
                sizes: &t.sizes,
                strides: &t.strides,
                offset: t.storage_offset,
                digest: *digest,
            };
            Held {
                key: key_of(info, &view, t.device(), policy),
                tensor: t.clone(),
                shared,
            }
        })
        .collect()
}

/// A copy of constant `t` in memory the method owns (the bytes of its storage span), on the
/// device the constant is on: device memory copied on `stream`, host memory copied at once.
fn own_copy(t: &Tensor, device: &Arc<DeviceState>, stream: &Arc<CudaStream>) -> Result<Tensor> {
    let n = t.storage.nbytes;
    let at = t.storage.device;
    if at == Device::Cpu {
        return host_copy(t);
    }
    let memory = if n == 0 {
        Memory::Empty
    } else {
        let m = memory::alloc_on_stream(device.clone(), n, stream.raw(), Some(stream.clone()))?;
        // SAFETY: both ranges are device memory of n bytes (the source storage's span).
        unsafe { copy::copy_dtod_async(m.ptr(), t.storage.base_ptr() as u64, n, stream.raw())? };
        Memory::Device(Box::new(m))
    };
    same_view(t, memory, at)
}

/// The view `t` has, over a new storage of `t`'s span size in `memory` on `at`.
fn same_view(t: &Tensor, memory: Memory, at: Device) -> Result<Tensor> {
    let storage = Arc::new(crate::tensor::Storage {
        memory,
        nbytes: t.storage.nbytes,
        device: at,
    });
    Tensor::view(
        storage,
        t.dtype,
        t.sizes.clone(),
        t.strides.clone(),
        t.storage_offset,
    )
}

/// A copy of a host-resident constant `t` in host memory the method owns.
fn host_copy(t: &Tensor) -> Result<Tensor> {
    let n = t.storage.nbytes;
    let memory = if n == 0 {
        Memory::Empty
    } else {
        let h = HostAlloc::new(n)?;
        // SAFETY: both ranges are host memory of n bytes (the source storage's span and a fresh
        // allocation), not overlapping.
        unsafe {
            std::ptr::copy_nonoverlapping(
                t.storage.base_ptr().cast::<u8>().cast_const(),
                h.ptr(),
                n,
            )
        };
        Memory::Host(h)
    };
    same_view(t, memory, Device::Cpu)
}

/// What each constant of a load can use instead of its own copy (the registry looked up
/// once, under one hold of its lock).
type Found = Vec<Option<(Tensor, Arc<Container>)>>;

/// Most times a load looks again when other loads of the program registered constants it
/// could use between its look-up and its registration.
const SETTLE_TRIES: usize = 64;

/// Load `weights` into a container of `lib`, sharing what can be shared.
/// Returns the container to run and what keeps its constants alive.
pub(crate) fn load(
    lib: &Arc<Library>,
    device: &Arc<DeviceState>,
    stream: &Arc<CudaStream>,
    weights: &[u8],
    policy: SharePolicy,
) -> Result<(Arc<Container>, SharedConstants)> {
    let first = Arc::new(Container::create(lib.clone(), device.ordinal)?);
    if !first.has_constants_api() {
        log::warn!("weight sharing: the .so has no constant-management entry points; loading its own weights");
        first.load_weights(weights)?;
        return Ok((first, SharedConstants::default()));
    }
    let infos = first.constants()?;
    let tensors = first.load_weights_recording(weights)?;
    let constants = describe(&infos, tensors, weights)?;
    let mut found: Found = {
        let reg = registry();
        constants
            .iter()
            .map(|c| {
                // Each constant where the container put it: AOTInductor can keep some on the CPU.
                find(&reg, c.info, &c.view(), c.tensor.device(), policy)
            })
            .collect()
    };
    // The registration is the look-up's last step, under one hold of the lock: a load of the
    // same program that registered since makes this one start over with what it offers.
    for _ in 0..SETTLE_TRIES {
        let flags: Vec<bool> = found.iter().map(Option::is_some).collect();
        if !flags.iter().any(|&s| s) {
            let own: Vec<_> = constants
                .iter()
                .map(|c| (c.info, c.tensor.clone(), c.digest))
                .collect();
            let held = held_of(&own, policy, &flags);
            let settled = registry().settle(&held, policy.mutable_buffers, &first, false);
            match settled {
                Settled::Registered => return Ok((first, SharedConstants::default())),
                Settled::Found(more) => merge(&mut found, more),
            }
            continue;
        }
        let (second, held, own, shared_bytes) =
            with_shared(lib, device, stream, &constants, &found)?;
        let registered: Vec<_> = constants
            .iter()
            .zip(own)
            .map(|(c, t)| (c.info, t, c.digest))
            .collect();
        let mine = held_of(&registered, policy, &flags);
        let settled = registry().settle(&mine, policy.mutable_buffers, &second, false);
        match settled {
            Settled::Registered => {
                drop(first);
                crate::stats::record(crate::stats::Event::SharedConstants(shared_bytes));
                log::info!(
                    "weight sharing: {} of {} constants ({shared_bytes} bytes) served from other methods",
                    flags.iter().filter(|&&s| s).count(),
                    constants.len()
                );
                return Ok((second, held));
            }
            Settled::Found(more) => {
                // The container goes before the constants it was given.
                drop(second);
                drop(held);
                merge(&mut found, more);
            }
        }
    }
    Err(Error::load_failed(format!(
        "weight sharing: other loads of share group {} kept registering constants this method could use ({SETTLE_TRIES} tries)",
        policy.group
    )))
}

/// Add what a later look-up found to `found`.
fn merge(found: &mut Found, more: Vec<(usize, Tensor, Arc<Container>)>) {
    for (i, t, o) in more {
        found[i] = Some((t, o));
    }
}

/// A second container of `lib` given every constant as a user-managed tensor: the ones
/// `found` from other methods, copies the method owns of the others (read from the first
/// container's, finished when this returns). Returns it, what keeps its constants alive,
/// each constant's tensor, and the bytes served from other methods.
fn with_shared(
    lib: &Arc<Library>,
    device: &Arc<DeviceState>,
    stream: &Arc<CudaStream>,
    constants: &[Constant<'_>],
    found: &Found,
) -> Result<(Arc<Container>, SharedConstants, Vec<Tensor>, u64)> {
    // `held` is declared first, so dropped last: on an error path the container goes before
    // the tensors it may have been given.
    let mut held = SharedConstants::default();
    let second = Arc::new(Container::create(lib.clone(), device.ordinal)?);
    let mut own: Vec<Tensor> = Vec::with_capacity(constants.len());
    let mut shared_bytes = 0u64;
    for (c, f) in constants.iter().zip(found) {
        let t = match f {
            Some((t, owner)) => {
                shared_bytes += c.info.data_size as u64;
                held.keep_owner(owner);
                t.clone()
            }
            None => own_copy(&c.tensor, device, stream)?,
        };
        own.push(t.clone());
        held.add(&c.info.name, t)?;
    }
    // SAFETY: `held` goes to the caller, which keeps it until after the container is deleted;
    // the shared tensors' memory stays alive through them and the containers in `held.owners`.
    unsafe { held.install(&second)? };
    // The copies read the first container's weights: let them finish before it is deleted.
    stream.synchronize()?;
    Ok((second, held, own, shared_bytes))
}

/// Forget the constants of methods that are gone (called after a destroy), so
/// the registry holds no memory of its own.
pub(crate) fn prune() {
    registry().prune();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_constants_are_copied_on_the_host() {
        let h = HostAlloc::new(8).unwrap();
        // SAFETY: a fresh 8-byte host allocation.
        unsafe { std::ptr::copy_nonoverlapping([1u8, 2, 3, 4, 5, 6, 7, 8].as_ptr(), h.ptr(), 8) };
        let storage = Arc::new(crate::tensor::Storage {
            memory: Memory::Host(h),
            nbytes: 8,
            device: Device::Cpu,
        });
        let t = Tensor::view(storage, 6, vec![2], vec![1], 0).unwrap();
        let c = host_copy(&t).unwrap();
        assert_eq!(c.device(), Device::Cpu);
        assert_ne!(c.storage.base_ptr(), t.storage.base_ptr());
        // SAFETY: both storages hold 8 host bytes.
        let (a, b) = unsafe {
            (
                std::slice::from_raw_parts(t.storage.base_ptr().cast::<u8>(), 8),
                std::slice::from_raw_parts(c.storage.base_ptr().cast::<u8>(), 8),
            )
        };
        assert_eq!(a, b);
    }
}
