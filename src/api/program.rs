//! Where a method's blobs come from: bytes the caller has, or named data
//! that the delegate's processed payload names (empty: `<method>_so_blob` /
//! `<method>_weights_blob`; text `"<so_key>\n<weights_key>"`, ExecuTorch
//! 1.3/1.4; binary `ETCUDAFQN3`, ExecuTorch 1.5: one storage per constant).

use crate::aoti::payload::{self, Payload};
use crate::delegate::{InitParams, Source, Weights};
use crate::error::Result;
use crate::MethodConfig;
use std::collections::HashMap;

pub use crate::delegate::NamedDataLookup;

/// The blobs of one method.
pub enum Blobs<'a> {
    /// The `.so` and its weights blob; keys of the form `<sha256 hex>_so_blob` /
    /// `<sha256 hex>_weights_blob` are verified against the bytes.
    Bytes {
        so: &'a [u8],
        weights: &'a [u8],
        so_key: Option<&'a str>,
        weights_key: Option<&'a str>,
    },
    /// The delegate's processed payload, and the program's named data it refers to.
    /// With `release`, the load calls it with a key once it no longer reads that key's
    /// bytes (per-constant weights are read one storage at a time and released after
    /// their upload, so they need not all be in host memory at once); without it, every
    /// key's bytes must stay valid until the load returns.
    NamedData {
        payload: &'a [u8],
        lookup: &'a NamedDataLookup<'a>,
        release: Option<&'a dyn Fn(&str)>,
    },
}

fn fetch<'a>(
    lookup: &NamedDataLookup<'a>,
    key: &str,
    what: &dyn Fn() -> String,
) -> Result<&'a [u8]> {
    crate::delegate::fetch_named(lookup, key, what).map(|(bytes, _)| bytes)
}

/// What the delegate loads for `method` from `blobs`.
pub(crate) fn init_params<'a>(
    method: &str,
    blobs: Blobs<'a>,
    config: &MethodConfig,
) -> Result<InitParams<'a>> {
    let (so, weights, so_key, weights_key) = match blobs {
        Blobs::Bytes {
            so,
            weights,
            so_key,
            weights_key,
        } => (
            so,
            Weights::Blob(weights),
            so_key.map(str::to_string),
            weights_key.map(str::to_string),
        ),
        Blobs::NamedData {
            payload,
            lookup,
            release,
        } => match payload::parse(payload, method)? {
            Payload::Keys {
                so_key,
                weights_key,
            } => (
                fetch(lookup, &so_key, &|| "the .so".into())?,
                Weights::Blob(fetch(lookup, &weights_key, &|| "the weights".into())?),
                Some(so_key),
                Some(weights_key),
            ),
            Payload::PerFqn { so_key, entries } => {
                let so = fetch(lookup, &so_key, &|| "the .so".into())?;
                let source = Source {
                    lookup,
                    release,
                    // Read (without `release`) once the .so passed its checks: CudaHandle::init.
                    read: HashMap::new(),
                    fetch_ns: Default::default(),
                };
                (so, Weights::PerFqn { entries, source }, Some(so_key), None)
            }
        },
    };
    Ok(InitParams {
        so,
        weights,
        method_name: method.to_string(),
        so_key,
        weights_key,
        config: config.clone(),
    })
}
