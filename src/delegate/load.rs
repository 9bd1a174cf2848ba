//! Loading a method: check the blobs, open the `.so`, create its container
//! on the method's device and stream, hand it its weights (one packed blob,
//! or one storage per constant; shared with other methods when configured).

use super::graphs::GraphEngine;
use super::scope::RunScope;
use super::sharing::{self, SharePolicy, SharedConstants};
use super::staging::Staging;
use super::{per_fqn, CudaHandle, State};
use crate::aoti::payload::FqnEntry;
use crate::aoti::{self, Container, Library};
use crate::config::MethodConfig;
use crate::cuda::host_register::HostRegistration;
use crate::cuda::stream::{self, CudaStream};
use crate::cuda::{self, DeviceState, GatedDrop};
use crate::error::{Error, Result};
use crate::stats::{self, Counters, Event};
use std::sync::{Arc, Mutex};

/// A method's weights as the program stores them.
#[derive(Debug, Clone)]
pub(crate) enum Weights<'a> {
    /// One blob in the container's packed layout (ExecuTorch ≤ 1.4).
    Blob(&'a [u8]),
    /// One storage per constant, named by original FQN (ExecuTorch 1.5's `ETCUDAFQN3`):
    /// the payload's entries, each storage read from `source` when it is loaded.
    PerFqn {
        entries: Vec<FqnEntry>,
        source: per_fqn::Source<'a>,
    },
}

/// What `init` needs.
#[derive(Debug, Clone)]
pub(crate) struct InitParams<'a> {
    pub(crate) so: &'a [u8],
    pub(crate) weights: Weights<'a>,
    pub(crate) method_name: String,
    /// Named-data key of the `.so`; `<sha256 hex>_so_blob` is verified against the bytes.
    pub(crate) so_key: Option<String>,
    /// Named-data key of the weights; `<sha256 hex>_weights_blob` is verified too.
    pub(crate) weights_key: Option<String>,
    pub(crate) config: MethodConfig,
}

/// Check a `<sha256 hex><suffix>` key against the bytes; other keys are not hashes.
fn verify_key(key: Option<&str>, suffix: &str, bytes: &[u8], what: &str) -> Result<()> {
    let Some(k) = key else { return Ok(()) };
    let Some(hash) = k.strip_suffix(suffix) else {
        return Ok(());
    };
    if hash.len() != 64 || !hash.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Ok(());
    }
    let actual = aoti::loader::hex(&aoti::loader::sha256(bytes));
    if !hash.eq_ignore_ascii_case(&actual) {
        return Err(Error::invalid_program(format!(
            "the {what} bytes do not match their key {k}: their SHA-256 is {actual}"
        )));
    }
    Ok(())
}

/// Per-FQN storages without a release callback are held until the load ends anyway: read
/// and checked once the .so passed its checks, before any device work.
fn read_held_storages(w: &mut Weights<'_>) -> Result<()> {
    match w {
        Weights::PerFqn { entries, source } => source.read_all(entries),
        Weights::Blob(_) => Ok(()),
    }
}

impl CudaHandle {
    pub(crate) fn init(mut p: InitParams<'_>) -> Result<CudaHandle> {
        p.config.validate()?;
        if p.so.is_empty() {
            return Err(Error::invalid_program("the .so blob is empty"));
        }
        stats::timed(Event::LoadVerify, || {
            verify_key(p.so_key.as_deref(), "_so_blob", p.so, ".so")?;
            match &p.weights {
                // Hashing gigabytes of weights costs seconds (more than the rest of the load):
                // checked on request only.
                Weights::Blob(w) if verify_weights_requested() => {
                    verify_key(p.weights_key.as_deref(), "_weights_blob", w, "weights")
                }
                _ => Ok(()),
            }
        })?;
        let digest = aoti::loader::sha256(p.so);
        let elf = aoti::elf::validate(p.so)?;
        read_held_storages(&mut p.weights)?;
        let cfg = p.config;
        // The CUDA check comes before dlopen: without a driver the .so cannot run, and
        // opening it may need a newer C library than a CPU-only machine has.
        let device = cuda::device(cfg.device)?;
        // A library the program's ops need (cuBLASLt) is missing: fail now, naming it. The CUDA
        // runtime is loaded first where it can be (cuBLASLt is also looked for in its folder;
        // when it cannot, `open` below reports why).
        if !elf.companion_imports.is_empty() {
            let _ = aoti::loader::prepare_process();
        }
        crate::kernels::gemm::require_for_imports(
            elf.companion_imports.iter().map(String::as_str),
        )?;
        // The generated code's loading may use the legacy default stream: it runs holding the
        // device's legacy-stream gate, taken around those calls only (`load_weights`), never
        // while a named-data callback runs (no library lock is held during a user callback).
        let counters = Arc::new(Counters::default());
        let _ctx = RunScope::without_stream(&device, &counters)?;
        let stream = if cfg.shared_stream {
            stream::shared_stream(&device)?
        } else {
            CudaStream::new(device.clone())?
        };
        let lib = stats::timed(Event::LoadSoOpen, || {
            let _legacy = device.legacy_use();
            aoti::loader::open(p.so, digest, &elf)
        })?;
        let _run = RunScope::enter(&device, &counters, &stream)?;
        let share = cfg.weight_sharing.then_some(SharePolicy {
            mutable_buffers: cfg.share_mutable_buffers,
            group: cfg.share_group,
        });
        let (container, shared) = load_weights(&lib, &device, &stream, &p.weights, share)?;
        if !container.has_single_threaded() {
            log::warn!("the .so has no AOTInductorModelContainerRunSingleThreaded: every run will wait for the previous one");
        }
        let graphs = cfg
            .cuda_graphs
            .then(|| GraphEngine::new(cfg.graph_cache_size, cfg.graph_private_memory));
        Ok(CudaHandle {
            _kernels: crate::kernels::Lease::acquire(device.ordinal),
            method: p.method_name,
            num_inputs: container.num_inputs,
            num_outputs: container.num_outputs,
            state: Mutex::new(State {
                graphs,
                kept_outputs: Vec::new(),
                container: Some(container),
                shared,
                staging: Staging::new(device.clone()),
                caller_sync: None,
                executes: 0,
            }),
            device,
            stream,
            config: cfg,
            counters,
        })
    }
}

/// Create the container and give it its weights, holding the device's legacy-stream gate
/// around the generated code's work (per-FQN weights: inside [`per_fqn::load`], which
/// calls the caller's named-data functions without it).
fn load_weights(
    lib: &Arc<Library>,
    device: &Arc<DeviceState>,
    stream: &Arc<CudaStream>,
    weights: &Weights<'_>,
    share: Option<SharePolicy>,
) -> Result<(Arc<Container>, SharedConstants)> {
    let probe = stats::timed(Event::LoadContainer, || {
        let _legacy = device.legacy_use();
        Container::create(lib.clone(), device.ordinal).map(|c| GatedDrop::new(device.clone(), c))
    })?;
    let weights = match weights {
        Weights::PerFqn { entries, source } => {
            return per_fqn::load(probe.into_inner(), device, stream, entries, source, share)
        }
        Weights::Blob(w) => *w,
    };
    let _legacy = device.legacy_use();
    let probe = probe.into_inner();
    match probe.constants_blob_size()? {
        Some(n) if n != weights.len() as u64 => {
            return Err(Error::invalid_program(format!(
                "the weights blob has {} bytes but the model expects {n}",
                weights.len()
            )))
        }
        None if !weights.is_empty() => log::warn!(
            "the .so cannot report its weights size; loading {} bytes unchecked",
            weights.len()
        ),
        _ => {}
    }
    // The generated code copies each constant from the blob: from pageable memory unless
    // the blob is page-locked first (ET_CUDA_PIN_WEIGHTS_BLOB=1; measured in bench/).
    let t = std::time::Instant::now();
    let pinned = pin_blob_requested()
        .then(|| HostRegistration::new(device, weights))
        .flatten();
    let staging = if pinned.is_some() {
        weights.len() as u64
    } else {
        0
    };
    let loaded = match share {
        Some(policy) => {
            drop(probe);
            sharing::load(lib, device, stream, weights, policy)
        }
        None => probe
            .load_weights(weights)
            .map(|_| (Arc::new(probe), SharedConstants::default())),
    };
    drop(pinned);
    stats::record(Event::LoadUpload {
        ns: stats::nanos(t.elapsed()),
        bytes: weights.len() as u64,
        staging,
    });
    loaded
}

/// Whether a packed weights blob is checked against the SHA-256 in its key.
fn verify_weights_requested() -> bool {
    crate::switches::get().verify_weights
}

/// Whether packed weights blobs are page-locked while the generated code loads them.
fn pin_blob_requested() -> bool {
    crate::switches::get().pin_weights_blob
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn sha_key_verification() {
        let good = format!(
            "{}_so_blob",
            aoti::loader::hex(&aoti::loader::sha256(b"abc"))
        );
        assert!(verify_key(Some(&good), "_so_blob", b"abc", ".so").is_ok());
        let bad = format!("{}_so_blob", "0".repeat(64));
        let e = verify_key(Some(&bad), "_so_blob", b"abc", ".so").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidProgram);
        assert!(e.message().contains("do not match"), "{e}");
        assert!(verify_key(Some("forward_so_blob"), "_so_blob", b"abc", ".so").is_ok());
        assert!(verify_key(None, "_so_blob", b"abc", ".so").is_ok());
        let w = format!("{}_weights_blob", "1".repeat(64));
        let e = verify_key(Some(&w), "_weights_blob", b"w", "weights").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidProgram);
    }

    #[test]
    fn init_rejects_bad_blobs_before_touching_cuda() {
        let base = InitParams {
            so: b"",
            weights: Weights::Blob(b""),
            method_name: "forward".into(),
            so_key: None,
            weights_key: None,
            config: MethodConfig::default(),
        };
        let e = CudaHandle::init(base.clone()).err().unwrap();
        assert_eq!(e.kind(), ErrorKind::InvalidProgram);
        let garbage = vec![0x5au8; 4096];
        let e = CudaHandle::init(InitParams {
            so: &garbage,
            ..base.clone()
        })
        .err()
        .unwrap();
        assert_eq!(e.kind(), ErrorKind::InvalidProgram, "{e}");
        let e = CudaHandle::init(InitParams {
            config: MethodConfig {
                graph_cache_size: 0,
                ..MethodConfig::default()
            },
            ..base
        })
        .err()
        .unwrap();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    }
}
