//! Where per-FQN storages come from: the program's named data, through the caller's lookup
//! (and release) callbacks, with no library lock held while they run.

use crate::aoti::payload::FqnEntry;
use crate::error::{Error, Result};
use std::cell::Cell;
use std::collections::hash_map::{Entry, HashMap};
use std::sync::Arc;

/// Looks up named data by key: the bytes, valid until the load releases the key (or ends).
pub type NamedDataLookup<'a> = dyn Fn(&str) -> Option<&'a [u8]> + 'a;

/// Where per-FQN storages come from: the program's named data, read one storage at a
/// time and released (`release`, when the caller gives one) as soon as it is uploaded, so
/// the weights never need to be in host memory all at once. Without `release` the bytes
/// stay valid for the whole load anyway: they are then read (and checked) before any
/// device work, into `read` (by key).
#[derive(Clone)]
pub(crate) struct Source<'a> {
    pub(crate) lookup: &'a NamedDataLookup<'a>,
    pub(crate) release: Option<&'a dyn Fn(&str)>,
    pub(crate) read: HashMap<Arc<str>, &'a [u8]>,
    /// Nanoseconds spent in `lookup` so far (the upload's time excludes them).
    pub(crate) fetch_ns: Cell<u64>,
}

/// The bytes under `key` from `lookup` (an error naming the key and `what` when there are
/// none), and the nanoseconds the lookup took (also counted as [`Event::LoadFetch`]).
///
/// [`Event::LoadFetch`]: crate::stats::Event::LoadFetch
pub(crate) fn fetch<'a>(
    lookup: &NamedDataLookup<'a>,
    key: &str,
    what: &dyn Fn() -> String,
) -> Result<(&'a [u8], u64)> {
    no_lock_held("named-data lookup")?;
    let t = std::time::Instant::now();
    let found = lookup(key);
    let ns = crate::stats::nanos(t.elapsed());
    crate::stats::record(crate::stats::Event::LoadFetch(ns));
    let bytes = found.ok_or_else(|| {
        Error::invalid_program(format!(
            "the program has no named data {key:?} ({}); was the .ptd file passed?",
            what()
        ))
    })?;
    Ok((bytes, ns))
}

/// The bytes of storage `key` from `lookup` ([`fetch`]), the lookup's time added to `fetch_ns`
/// (a [`Source`]'s fields).
fn fetch_counted<'a>(
    lookup: &NamedDataLookup<'a>,
    fetch_ns: &Cell<u64>,
    key: &str,
    what: &dyn Fn() -> String,
) -> Result<&'a [u8]> {
    let (bytes, ns) = fetch(lookup, key, what)?;
    fetch_ns.set(fetch_ns.get() + ns);
    Ok(bytes)
}

/// A user callback is about to run: this thread must hold no library lock (the callback
/// may call back into the library; see `cuda::gate`).
fn no_lock_held(what: &str) -> Result<()> {
    match crate::logging::holds() {
        0 => Ok(()),
        n => Err(Error::internal(format!(
            "a {what} callback would run while this thread holds {n} library locks"
        ))),
    }
}

impl std::fmt::Debug for Source<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source")
            .field("release", &self.release.is_some())
            .field("read", &self.read.len())
            .finish()
    }
}

impl Source<'_> {
    /// `f` over the bytes of storage `key`; the key is released when `f` returns (the
    /// bytes are not reachable after that).
    pub(crate) fn with<R>(
        &self,
        key: &str,
        what: &dyn Fn() -> String,
        f: impl FnOnce(&[u8]) -> Result<R>,
    ) -> Result<R> {
        if let Some(bytes) = self.read.get(key) {
            return f(bytes);
        }
        let r = f(fetch_counted(self.lookup, &self.fetch_ns, key, what)?);
        if let Some(release) = self.release {
            no_lock_held("named-data release")?;
            release(key);
        }
        r
    }

    /// Without `release`, every storage `entries` name, each key read and checked once (a
    /// hash map: a payload may name 2^20 storages), into `read`; with it, nothing (each
    /// storage is read when it is loaded).
    pub(crate) fn read_all(&mut self, entries: &[FqnEntry]) -> Result<()> {
        if self.release.is_some() {
            return Ok(());
        }
        self.read.reserve(entries.len());
        for e in entries {
            if let Entry::Vacant(slot) = self.read.entry(e.storage_key.clone()) {
                let what = || format!("the weights of {}", e.fqn);
                let bytes = fetch_counted(self.lookup, &self.fetch_ns, &e.storage_key, &what)?;
                e.check_storage(bytes.len(), &|| {
                    format!("{} (named data {:?})", what(), e.storage_key)
                })?;
                slot.insert(bytes);
            }
        }
        Ok(())
    }
}
