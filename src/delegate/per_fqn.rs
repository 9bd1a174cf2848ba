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
pub(super) struct Matched<'a> {
    pub(super) info: &'a ConstantInfo,
    pub(super) entry: &'a FqnEntry,
    pub(super) bytes: &'a [u8],
}

/// Pair every constant the container expects (folded ones excluded) with its
/// storage, checking what the payload says against the bytes and the model.
pub(super) fn match_storages<'a>(
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
        if entry.storage_nbytes != bytes.len() as u64 {
            return Err(Error::invalid_program(format!(
                "{} has {} bytes in the program but its metadata declares {}",
                what(),
                bytes.len(),
                entry.storage_nbytes
            )));
        }
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
        let elem = crate::dtype::checked_element_size(entry.dtype)?;
        let need =
            crate::tensor::required_bytes(&entry.sizes, &entry.strides, entry.storage_offset, elem)
                .map_err(|e| Error::invalid_program(format!("{}: {e}", what())))?;
        if need > bytes.len() {
            return Err(Error::invalid_program(format!(
                "{}: its view (sizes {:?}, strides {:?}, offset {}) needs {need} bytes but the storage has {}",
                what(),
                entry.sizes,
                entry.strides,
                entry.storage_offset,
                bytes.len()
            )));
        }
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
        Memory::Device(d)
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
    let digests: Vec<[u8; 32]> = match share {
        Some(_) => matched
            .iter()
            .map(|m| aoti::loader::sha256(m.bytes))
            .collect(),
        None => vec![[0u8; 32]; matched.len()],
    };
    let found: Vec<Option<(Tensor, Arc<Container>)>> = match share {
        Some(policy) => {
            let reg = sharing::registry();
            matched
                .iter()
                .zip(&digests)
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
    };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aoti::payload::tests::entry;

    fn info(name: &str, fqn: &str, n: usize, folded: bool) -> ConstantInfo {
        ConstantInfo {
            name: name.into(),
            original_fqn: fqn.into(),
            from_folded: folded,
            kind: 1,
            dtype: 6,
            data_size: n,
        }
    }

    #[test]
    fn constants_match_by_fqn_then_name_and_skip_folded() {
        let infos = vec![
            info("fc2_w", "fc2.weight", 8, false),
            info("folded", "", 4, true),
            info("fc1_w", "fc1.weight", 4, false),
            info("_tensor_constant0", "", 4, false),
        ];
        let (a, b, c) = ([1u8; 4], [2u8; 8], [3u8; 4]);
        let storages = vec![
            (entry("fc1.weight", 4), &a[..]),
            (entry("fc2.weight", 8), &b[..]),
            (entry("_tensor_constant0", 4), &c[..]),
        ];
        let m = match_storages(&infos, &storages).unwrap();
        let got: Vec<(&str, &str, u8)> = m
            .iter()
            .map(|m| (m.info.name.as_str(), m.entry.fqn.as_str(), m.bytes[0]))
            .collect();
        assert_eq!(
            got,
            [
                ("fc2_w", "fc2.weight", 2),
                ("fc1_w", "fc1.weight", 1),
                ("_tensor_constant0", "_tensor_constant0", 3)
            ]
        );
    }

    #[test]
    fn mismatched_storages_are_clear_errors() {
        let infos = vec![info("fc2_w", "fc2.weight", 8, false)];
        let err = |storages: &[(FqnEntry, &[u8])]| {
            match_storages(&infos, storages).unwrap_err().to_string()
        };
        let b = [2u8; 8];
        let e = err(&[(entry("fc1.weight", 8), &b[..])]);
        assert!(e.contains("no weights for constant fc2_w"), "{e}");
        // Bytes shorter than the metadata says.
        let e = err(&[(entry("fc2.weight", 8), &b[..7])]);
        assert!(e.contains("has 7 bytes") && e.contains("declares 8"), "{e}");
        // Shorter than the model expects.
        let e = err(&[(entry("fc2.weight", 7), &b[..7])]);
        assert!(e.contains("model expects 8"), "{e}");
        // Another dtype.
        let mut wrong = entry("fc2.weight", 8);
        wrong.dtype = 5;
        let e = err(&[(wrong, &b[..])]);
        assert!(e.contains("dtype 5"), "{e}");
        // A view past the storage.
        let mut wide = entry("fc2.weight", 8);
        wide.sizes = vec![3];
        wide.strides = vec![1];
        let e = err(&[(wide, &b[..])]);
        assert!(e.contains("needs 12 bytes"), "{e}");
        // A device type that is neither CPU nor CUDA.
        let mut dev = entry("fc2.weight", 8);
        dev.device_type = 13;
        let e = err(&[(dev, &b[..])]);
        assert!(e.contains("device type 13"), "{e}");
        // Negative strides are refused, not wrapped.
        let mut neg = entry("fc2.weight", 8);
        neg.sizes = vec![2];
        neg.strides = vec![-1];
        let e = err(&[(neg, &b[..])]);
        assert!(e.contains("negative"), "{e}");
    }
}
