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

use super::sharing::{self, SharePolicy, SharedConstants, View};
use crate::aoti::container::ConstantInfo;
use crate::aoti::payload::FqnEntry;
use crate::aoti::{self, Container};
use crate::cuda::{copy, memory, stream::CudaStream, DeviceState};
use crate::error::{Error, Result};
use crate::tensor::{device_type, Device, HostAlloc, Memory, Storage, Tensor};
use std::sync::Arc;

/// One constant of the container and the storage that backs it.
#[derive(Debug)]
pub(crate) struct Matched<'a> {
    pub(crate) info: &'a ConstantInfo,
    pub(crate) entry: &'a FqnEntry,
    pub(crate) bytes: &'a [u8],
}

/// Pair every constant the container expects (folded ones excluded) with its
/// storage, checking what the payload says against the bytes and the model.
/// A match's view is one the upload's [`Tensor::view`] accepts (both use
/// [`FqnEntry::check_view`]'s check on the storage's byte count).
pub(crate) fn match_storages<'a>(
    infos: &'a [ConstantInfo],
    storages: &'a [(FqnEntry, &'a [u8])],
) -> Result<Vec<Matched<'a>>> {
    let mut out = Vec::with_capacity(infos.len());
    for info in infos.iter().filter(|c| !c.from_folded) {
        let found = storages
            .iter()
            .find(|(e, _)| !info.original_fqn.is_empty() && e.fqn == info.original_fqn)
            .or_else(|| storages.iter().find(|(e, _)| e.fqn == info.name));
        let Some((entry, bytes)) = found else {
            return Err(Error::invalid_program(format!(
                "the program has no weights for constant {} (FQN {:?})",
                info.name, info.original_fqn
            )));
        };
        let what = || format!("constant {} (storage {})", info.name, entry.storage_key);
        entry.check_storage(bytes.len(), &what())?;
        if info.data_size > bytes.len() {
            return Err(Error::invalid_program(format!(
                "{} has {} bytes but the model expects {}",
                what(),
                bytes.len(),
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
        entry.check_view(bytes.len())?;
        out.push(Matched { info, entry, bytes });
    }
    Ok(out)
}

/// Where a matched constant lives.
fn place(m: &Matched<'_>, device: &DeviceState) -> Device {
    if m.entry.device_type == device_type::CPU {
        Device::Cpu
    } else {
        Device::Cuda(device.ordinal)
    }
}

/// The constant's tensor in memory the method owns (queued on `stream` for the device).
fn upload(m: &Matched<'_>, device: &Arc<DeviceState>, stream: &Arc<CudaStream>) -> Result<Tensor> {
    let n = m.bytes.len();
    let at = place(m, device);
    let memory = if n == 0 {
        Memory::Empty
    } else if at == Device::Cpu {
        let h = HostAlloc::new(n)?;
        Memory::Host(h)
    } else {
        let d = memory::alloc_on_stream(device.clone(), n, stream.raw(), Some(stream.clone()))?;
        // SAFETY: `d` is a fresh device allocation of n bytes and the source slice has n bytes;
        // the caller waits for the stream before the slice may go away.
        unsafe { copy::copy_htod_async(d.ptr(), m.bytes.as_ptr().cast(), n, stream.raw())? };
        Memory::Device(Box::new(d))
    };
    let storage = Storage {
        memory,
        nbytes: n,
        device: at,
    };
    if let Memory::Host(_) = storage.memory {
        // SAFETY: the storage's host allocation has n bytes and does not overlap the slice.
        unsafe {
            std::ptr::copy_nonoverlapping(m.bytes.as_ptr(), storage.base_ptr().cast::<u8>(), n)
        };
    }
    Tensor::view(
        Arc::new(storage),
        m.entry.dtype,
        m.entry.sizes.clone(),
        m.entry.strides.clone(),
        m.entry.storage_offset,
    )
}

/// Give `container` its constants from per-FQN `storages`, sharing with other
/// methods under `share`. Returns the container and what keeps its constants alive.
pub(super) fn load(
    container: Container,
    device: &Arc<DeviceState>,
    stream: &Arc<CudaStream>,
    storages: &[(FqnEntry, &[u8])],
    share: Option<SharePolicy>,
) -> Result<(Arc<Container>, SharedConstants)> {
    if !container.has_constants_api() {
        return Err(Error::invalid_program(
            "the program stores its weights per FQN but the .so has no constant-management entry points (AOTInductorModelContainerGetNumConstants...)",
        ));
    }
    let infos = container.constants()?;
    let matched = match_storages(&infos, storages)?;
    let digests = digests(&matched, share);
    let found = find_shared(&matched, &digests, share, device);
    // Declared first, dropped last: on an error path the container goes before the
    // tensors it may have been given.
    let mut held = SharedConstants::default();
    let container = Arc::new(container);
    let mut tensors = Vec::with_capacity(matched.len());
    let mut shared_bytes = 0u64;
    let mut loaded = 0u64;
    for (m, f) in matched.iter().zip(found.iter()) {
        let t = match f {
            Some((t, owner)) => {
                shared_bytes += m.bytes.len() as u64;
                held.keep_owner(owner);
                t.clone()
            }
            None => {
                loaded += m.bytes.len() as u64;
                upload(m, device, stream)?
            }
        };
        tensors.push(t.clone());
        held.add(&m.info.name, t)?;
    }
    // The uploads read the caller's bytes, which may go away after init.
    stream.synchronize()?;
    // SAFETY: `held` goes to the caller, which keeps it until after the container is deleted.
    unsafe { held.install(&container)? };
    if let Some(policy) = share {
        let shared: Vec<bool> = found.iter().map(Option::is_some).collect();
        let entries: Vec<_> = matched
            .iter()
            .zip(tensors)
            .zip(digests)
            .map(|((m, t), d)| (m.info, t, d))
            .collect();
        sharing::register(&entries, policy, &container, &shared);
        crate::stats::record(crate::stats::Event::SharedConstants(shared_bytes));
        log::info!(
            "weight sharing: {} of {} constants ({shared_bytes} bytes) served from other methods",
            shared.iter().filter(|&&s| s).count(),
            matched.len()
        );
    }
    log::debug!(
        "per-FQN weights: {} constants, {loaded} bytes loaded, {shared_bytes} shared",
        matched.len()
    );
    Ok((container, held))
}

/// Each matched constant's SHA-256 when weights are shared (zeros otherwise).
fn digests(matched: &[Matched<'_>], share: Option<SharePolicy>) -> Vec<[u8; 32]> {
    match share {
        Some(_) => matched
            .iter()
            .map(|m| aoti::loader::sha256(m.bytes))
            .collect(),
        None => vec![[0u8; 32]; matched.len()],
    }
}

/// For each matched constant, the equal tensor another method already holds (and its container), under `share`.
fn find_shared(
    matched: &[Matched<'_>],
    digests: &[[u8; 32]],
    share: Option<SharePolicy>,
    device: &DeviceState,
) -> Vec<Option<(Tensor, Arc<Container>)>> {
    match share {
        Some(policy) => {
            let reg = sharing::registry();
            matched
                .iter()
                .zip(digests)
                .map(|(m, d)| {
                    let view = View {
                        sizes: &m.entry.sizes,
                        strides: &m.entry.strides,
                        offset: m.entry.storage_offset,
                        digest: *d,
                    };
                    sharing::find(&reg, m.info, &view, place(m, device), policy)
                })
                .collect()
        }
        None => matched.iter().map(|_| None).collect(),
    }
}

/// Fuzz body (`fuzz/fuzz_targets/per_fqn_match.rs`, and a test over
/// `fuzz/seeds/per_fqn_match`): constants and storages described by `data`
/// through the matcher; every match must be a view the upload's
/// [`Tensor::view`] accepts on a storage of the matched bytes. Returns the
/// number of matches.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn fuzz_match(data: &[u8]) -> usize {
    use crate::tensor::{HostAlloc, Memory, Storage};
    let mut it = data.iter().copied();
    let mut next = move || it.next().unwrap_or(0);
    let blob = [0u8; 256];
    let storages = fuzz_storages(&mut next, &blob);
    let infos = fuzz_infos(&mut next, &storages);
    let Ok(matched) = match_storages(&infos, &storages) else {
        return 0;
    };
    for m in &matched {
        let n = m.bytes.len();
        let memory = if n == 0 {
            Memory::Empty
        } else {
            match HostAlloc::new(n) {
                Ok(h) => Memory::Host(h),
                Err(_) => return 0,
            }
        };
        let storage = Storage {
            memory,
            nbytes: n,
            device: crate::tensor::Device::Cpu,
        };
        if let Err(e) = Tensor::view(
            Arc::new(storage),
            m.entry.dtype,
            m.entry.sizes.clone(),
            m.entry.strides.clone(),
            m.entry.storage_offset,
        ) {
            panic!(
                "the matcher accepted {:?} but the upload's view refuses it: {e}",
                m.entry
            );
        }
    }
    matched.len()
}

/// The fuzz body's storages: up to 4 entries drawn from `next`, each on a slice of `blob`.
#[cfg(any(test, feature = "fuzzing"))]
fn fuzz_storages<'b>(next: &mut impl FnMut() -> u8, blob: &'b [u8]) -> Vec<(FqnEntry, &'b [u8])> {
    // Mostly small values, sometimes the extremes.
    let val = |b: u8| -> i64 {
        match b {
            255 => i64::MAX,
            254 => i64::MAX / 3,
            253 => 1 << 40,
            252 => 1 << 61,
            251 => -1,
            x => (x % 8) as i64,
        }
    };
    let n = (next() % 5) as usize;
    let mut storages = Vec::with_capacity(n);
    for _ in 0..n {
        let rank = (next() % 18) as usize;
        let sizes: Vec<i64> = (0..rank).map(|_| val(next())).collect();
        let strides: Vec<i64> = (0..rank).map(|_| val(next())).collect();
        let e = FqnEntry {
            fqn: format!("c{}", next() % 4),
            storage_key: format!("s{}", next() % 4),
            storage_nbytes: match next() {
                255 => u64::MAX,
                254 => 1 << 62,
                b => b as u64,
            },
            dtype: [6, 15, 4, 11, 99, 12][(next() % 6) as usize],
            device_type: [1, 0, 13][(next() % 3) as usize],
            storage_offset: val(next()),
            sizes,
            strides,
        };
        let len = if next() & 1 == 0 {
            (e.storage_nbytes.min(255)) as usize
        } else {
            next() as usize
        };
        storages.push((e, &blob[..len]));
    }
    storages
}

/// The fuzz body's constants: up to 4 drawn from `next`, some named like `storages`.
#[cfg(any(test, feature = "fuzzing"))]
fn fuzz_infos(next: &mut impl FnMut() -> u8, storages: &[(FqnEntry, &[u8])]) -> Vec<ConstantInfo> {
    (0..(next() % 5) as usize)
        .map(|i| {
            let like = storages.get(i).map(|(e, _)| e);
            ConstantInfo {
                name: format!("c{}", next() % 5),
                original_fqn: match (next() % 3, like) {
                    (0, Some(e)) => e.fqn.clone(),
                    (1, _) => String::new(),
                    _ => format!("c{}", next() % 5),
                },
                from_folded: next() % 8 == 0,
                kind: 1,
                dtype: match (next() % 4, like) {
                    (0, _) => 15,
                    (_, Some(e)) => e.dtype,
                    _ => 6,
                },
                data_size: (next() % 8) as usize,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
