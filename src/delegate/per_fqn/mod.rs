//! Weights given one storage per constant (ExecuTorch 1.5's `ETCUDAFQN3`
//! payload).
//!
//! Such a `.so` has no packed weights blob to load: its container is created
//! empty and every constant it declares (folded ones aside, which it computes
//! itself) is handed over as a user-managed tensor
//! (`UpdateUserManagedConstantBufferPairs`). Each constant is matched to its
//! storage by original FQN (then by internal name), checked against the
//! payload's metadata, copied to the device (or kept in host memory when the
//! payload says CPU) and viewed with the payload's sizes, strides and offset.
//! The tensors belong to the method; with `weight_sharing_across_methods` a
//! constant equal to one another method already holds (same view, same
//! bytes; buffers under the rules of [`super::sharing`]) uses that tensor
//! instead, so prefill and decode of one program hold their weights once.

use super::sharing::{self, Settled, SharePolicy, SharedConstants, View};
use crate::aoti::container::ConstantInfo;
use crate::aoti::payload::FqnEntry;
use crate::aoti::{self, Container};
use crate::cuda::copy::StagedUpload;
use crate::cuda::{memory, stream::CudaStream, DeviceState, GatedDrop};
use crate::error::{Error, Result};
use crate::tensor::{device_type, Device, HostAlloc, Memory, Storage, Tensor};
use std::collections::HashMap;
use std::sync::Arc;

mod source;
pub use source::NamedDataLookup;
pub(crate) use source::{fetch, Source};

/// One constant of the container and the payload entry that describes its storage.
#[derive(Debug)]
pub(crate) struct Matched<'a> {
    pub(crate) info: &'a ConstantInfo,
    pub(crate) entry: &'a FqnEntry,
}

/// Pair every constant the container expects (folded ones excluded) with its payload
/// entry, checking what the payload says against the model; the bytes are checked when
/// they are read ([`check_bytes`]). A match's view is one the upload's [`Tensor::view`]
/// accepts on a storage of the declared size (both use [`FqnEntry::check_view`]).
pub(crate) fn match_entries<'a>(
    infos: &'a [ConstantInfo],
    entries: &'a [FqnEntry],
) -> Result<Vec<Matched<'a>>> {
    Ok(match_items(infos, entries, |e| e)?
        .into_iter()
        .map(|(info, entry)| Matched { info, entry })
        .collect())
}

/// [`match_entries`] over any items that carry an entry: each constant and its item (the
/// first item of that FQN; one hash-map lookup per constant).
fn match_items<'a, T>(
    infos: &'a [ConstantInfo],
    items: &'a [T],
    entry_of: fn(&T) -> &FqnEntry,
) -> Result<Vec<(&'a ConstantInfo, &'a T)>> {
    let mut by_fqn: HashMap<&str, &T> = HashMap::with_capacity(items.len());
    for item in items {
        by_fqn.entry(entry_of(item).fqn.as_str()).or_insert(item);
    }
    let mut out = Vec::with_capacity(infos.len());
    for info in infos.iter().filter(|c| !c.from_folded) {
        let found = (!info.original_fqn.is_empty())
            .then(|| by_fqn.get(info.original_fqn.as_str()))
            .flatten()
            .or_else(|| by_fqn.get(info.name.as_str()))
            .copied();
        let Some(item) = found else {
            return Err(Error::invalid_program(format!(
                "the program has no weights for constant {} (FQN {:?})",
                info.name, info.original_fqn
            )));
        };
        let entry = entry_of(item);
        let what = || format!("constant {} (storage {})", info.name, entry.storage_key);
        let declared = usize::try_from(entry.storage_nbytes).map_err(|_| {
            Error::invalid_program(format!(
                "{} declares {} bytes, more than this machine can address",
                what(),
                entry.storage_nbytes
            ))
        })?;
        if info.data_size > declared {
            return Err(Error::invalid_program(format!(
                "{} has {declared} bytes but the model expects {}",
                what(),
                info.data_size
            )));
        }
        if entry.dtype != info.dtype {
            return Err(Error::invalid_program(format!(
                "{} has dtype {} in the program but the model expects dtype {}",
                what(),
                entry.dtype,
                info.dtype
            )));
        }
        if entry.device_type != device_type::CPU && entry.device_type != device_type::CUDA {
            return Err(Error::invalid_program(format!(
                "{} is on device type {} (only CPU 0 and CUDA 1)",
                what(),
                entry.device_type
            )));
        }
        // The upload views the storage with exactly this check.
        entry.check_view(declared)?;
        out.push((info, item));
    }
    Ok(out)
}

/// The bytes read for a matched constant's storage agree with what its entry declares
/// (the size [`match_entries`] checked the view and the model against).
pub(crate) fn check_bytes(m: &Matched<'_>, bytes: &[u8]) -> Result<()> {
    m.entry.check_storage(bytes.len(), &|| {
        format!("constant {} (storage {})", m.info.name, m.entry.storage_key)
    })
}

/// [`match_entries`] and [`check_bytes`] over storages given as bytes (tests, fuzzing).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn match_storages<'a>(
    infos: &'a [ConstantInfo],
    storages: &'a [(FqnEntry, &'a [u8])],
) -> Result<Vec<(Matched<'a>, &'a [u8])>> {
    let mut out = Vec::new();
    for (info, (entry, bytes)) in match_items(infos, storages, |(e, _)| e)? {
        let m = Matched { info, entry };
        check_bytes(&m, bytes)?;
        out.push((m, *bytes));
    }
    Ok(out)
}

/// Where a matched constant lives.
fn place(m: &Matched<'_>, ordinal: i32) -> Device {
    if m.entry.device_type == device_type::CPU {
        Device::Cpu
    } else {
        Device::Cuda(ordinal)
    }
}

/// A storage holding `bytes` where `at` says: device memory the method owns (the upload
/// queued on `up`'s stream; `bytes` have been read when this returns), or host memory.
fn store(
    bytes: &[u8],
    at: Device,
    device: &Arc<DeviceState>,
    stream: &Arc<CudaStream>,
    up: &mut StagedUpload,
) -> Result<Arc<Storage>> {
    let n = bytes.len();
    let memory = if n == 0 {
        Memory::Empty
    } else if at == Device::Cpu {
        let h = HostAlloc::new(n)?;
        // SAFETY: the host allocation has n bytes and does not overlap the source.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), h.ptr().cast::<u8>(), n) };
        Memory::Host(h)
    } else {
        let d = memory::alloc_on_stream(device.clone(), n, stream.raw(), Some(stream.clone()))?;
        // SAFETY: `d` is a fresh device allocation of n bytes, kept by the storage (and the
        // load waits for the stream before returning).
        unsafe { up.upload(d.ptr(), bytes)? };
        Memory::Device(Box::new(d))
    };
    Ok(Arc::new(Storage {
        memory,
        nbytes: n,
        device: at,
    }))
}

/// One storage to read: its key, where it goes, and the matched constants that view it.
struct Group<'m> {
    key: &'m str,
    at: Device,
    members: Vec<usize>,
}

/// The storages of `matched` in first-use order (one per key and placement).
fn storage_groups<'m>(matched: &'m [Matched<'m>], ordinal: i32) -> Vec<Group<'m>> {
    let mut groups: Vec<Group<'m>> = Vec::new();
    let mut index: HashMap<(&'m str, bool), usize> = HashMap::with_capacity(matched.len());
    for (i, m) in matched.iter().enumerate() {
        let at = place(m, ordinal);
        let key = &*m.entry.storage_key;
        // One device per load: the placement is the CPU or that device.
        let g = *index.entry((key, at == Device::Cpu)).or_insert_with(|| {
            groups.push(Group {
                key,
                at,
                members: Vec::new(),
            });
            groups.len() - 1
        });
        groups[g].members.push(i);
    }
    groups
}

/// What reading the storages gave, per matched constant.
struct Loaded {
    tensors: Vec<Option<Tensor>>,
    digests: Vec<[u8; 32]>,
    shared: Vec<bool>,
    shared_bytes: u64,
    loaded: u64,
}

/// Read each storage of `groups` from `source` (released once read), serve its constants
/// from other methods where `share` allows (keeping their owners in `held`), else upload it
/// once through `up` and view it for each of its constants.
#[allow(clippy::too_many_arguments)]
fn read_storages(
    matched: &[Matched<'_>],
    groups: &[Group<'_>],
    source: &Source<'_>,
    share: Option<SharePolicy>,
    device: &Arc<DeviceState>,
    stream: &Arc<CudaStream>,
    up: &mut StagedUpload,
    held: &mut SharedConstants,
) -> Result<Loaded> {
    let n = matched.len();
    let mut l = Loaded {
        tensors: vec![None; n],
        digests: vec![[0u8; 32]; n],
        shared: vec![false; n],
        shared_bytes: 0,
        loaded: 0,
    };
    for g in groups {
        let what = || format!("the weights of {}", matched[g.members[0]].entry.fqn);
        source.with(g.key, &what, |bytes| {
            let mut storage: Option<Arc<Storage>> = None;
            let digest = share.map(|_| aoti::loader::sha256(bytes));
            for &i in &g.members {
                let m = &matched[i];
                check_bytes(m, bytes)?;
                if let (Some(policy), Some(d)) = (share, digest) {
                    l.digests[i] = d;
                    let view = View {
                        sizes: &m.entry.sizes,
                        strides: &m.entry.strides,
                        offset: m.entry.storage_offset,
                        digest: d,
                    };
                    let found = sharing::find(&sharing::registry(), m.info, &view, g.at, policy);
                    if let Some((t, owner)) = found {
                        l.shared_bytes += bytes.len() as u64;
                        held.keep_owner(&owner);
                        l.shared[i] = true;
                        l.tensors[i] = Some(t);
                        continue;
                    }
                }
                let st = match &storage {
                    Some(st) => st.clone(),
                    None => {
                        l.loaded += bytes.len() as u64;
                        let st = store(bytes, g.at, device, stream, up)?;
                        storage = Some(st.clone());
                        st
                    }
                };
                l.tensors[i] = Some(Tensor::view(
                    st,
                    m.entry.dtype,
                    m.entry.sizes.to_vec(),
                    m.entry.strides.to_vec(),
                    m.entry.storage_offset,
                )?);
            }
            Ok(())
        })?;
    }
    Ok(l)
}

/// Register the load's own constants for later methods, under one hold of the registry
/// with a last look-up: a constant another load of the program registered since this one
/// looked (a concurrent load of the same share group) is taken from it instead, so the
/// program keeps one copy of each shared buffer.
fn settle(
    matched: &[Matched<'_>],
    l: &mut Loaded,
    policy: SharePolicy,
    container: &Arc<Container>,
    held: &mut SharedConstants,
) -> Result<()> {
    let mut own = Vec::with_capacity(matched.len());
    for ((m, t), d) in matched.iter().zip(&l.tensors).zip(&l.digests) {
        let t = t
            .clone()
            .ok_or_else(|| Error::internal("a matched constant got no tensor"))?;
        own.push((m.info, t, *d));
    }
    let mine = sharing::held_of(&own, policy, &l.shared);
    let settled = sharing::registry().settle(&mine, policy.mutable_buffers, container, true);
    if let Settled::Found(found) = settled {
        for (i, t, owner) in found {
            held.keep_owner(&owner);
            l.shared_bytes += matched[i].entry.storage_nbytes;
            l.shared[i] = true;
            l.tensors[i] = Some(t);
        }
    }
    Ok(())
}

/// Give `container` its constants from the per-FQN `entries`, reading each storage from
/// `source` once (constants that view one storage share its upload), and sharing with
/// other methods under `share`. Returns the container and what keeps its constants alive.
///
/// The device's legacy-stream gate is held only around the generated code's calls (and
/// the drops of containers on error paths), never while `source` calls the caller's
/// named-data functions: a callback may call back into the library, and a capture on
/// another thread may be waiting for the gate.
pub(super) fn load(
    container: Container,
    device: &Arc<DeviceState>,
    stream: &Arc<CudaStream>,
    entries: &[FqnEntry],
    source: &Source<'_>,
    share: Option<SharePolicy>,
) -> Result<(Arc<Container>, SharedConstants)> {
    // Declared first, dropped last: on an error path the container goes before the
    // tensors it may have been given (and the other methods' containers kept for them).
    let mut held = GatedDrop::new(device.clone(), SharedConstants::default());
    let container = GatedDrop::new(device.clone(), Arc::new(container));
    if !container.has_constants_api() {
        return Err(Error::invalid_program(
            "the program stores its weights per FQN but the .so has no constant-management entry points (AOTInductorModelContainerGetNumConstants...)",
        ));
    }
    let infos = {
        let _legacy = device.legacy_use();
        container.constants()?
    };
    let matched = match_entries(&infos, entries)?;
    let groups = storage_groups(&matched, device.ordinal);
    // Only sizes the staging (declared sizes are checked against the bytes as they are read).
    let total = groups.iter().fold(0usize, |t, g| {
        t.saturating_add(
            usize::try_from(matched[g.members[0]].entry.storage_nbytes).unwrap_or(usize::MAX),
        )
    });
    let mut up = StagedUpload::new(device.clone(), stream.raw(), total)?;
    let fetch_before = source.fetch_ns.get();
    let mut l = read_storages(
        &matched, &groups, source, share, device, stream, &mut up, &mut held,
    )?;
    let report = up.finish()?;
    // The upload's own time: the named-data reads between the uploads are the fetch phase.
    let fetch = source.fetch_ns.get() - fetch_before;
    let upload_ns = crate::stats::nanos(report.elapsed).saturating_sub(fetch);
    crate::stats::record(crate::stats::Event::LoadUpload {
        ns: upload_ns,
        bytes: report.bytes,
        staging: report.staging_bytes,
    });
    if let Some(policy) = share {
        settle(&matched, &mut l, policy, &container, &mut held)?;
    }
    for (m, t) in matched.iter().zip(&l.tensors) {
        let t = t
            .clone()
            .ok_or_else(|| Error::internal("a matched constant got no tensor"))?;
        held.add(&m.info.name, t)?;
    }
    {
        let _legacy = device.legacy_use();
        // SAFETY: `held` goes to the caller, which keeps it until after the container is
        // deleted.
        unsafe { held.install(&container)? };
    }
    if share.is_some() {
        crate::stats::record(crate::stats::Event::SharedConstants(l.shared_bytes));
        log::info!(
            "weight sharing: {} of {} constants ({} bytes) served from other methods",
            l.shared.iter().filter(|&&s| s).count(),
            matched.len(),
            l.shared_bytes
        );
    }
    log::debug!(
        "per-FQN weights: {} constants in {} storages, {} bytes loaded ({:.2} GB/s through {} bytes of pinned staging), {} shared",
        matched.len(),
        groups.len(),
        l.loaded,
        report.bytes as f64 / (upload_ns as f64).max(1.0),
        report.staging_bytes,
        l.shared_bytes
    );
    Ok((container.into_inner(), held.into_inner()))
}

#[cfg(any(test, feature = "fuzzing"))]
mod fuzz;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use fuzz::fuzz_match;

#[cfg(test)]
mod tests;
