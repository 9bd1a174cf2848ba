//! The process-wide registry of constants other methods may use: a hash map from
//! what identifies a constant's value ([`Key`]) to the tensors registered under it,
//! so a lookup costs one hash of the key whatever the number of constants loaded
//! (a program may declare 2^20), and a load's last look-up and its registration
//! happen under one hold of the lock ([`Registry::settle`]): two concurrent loads
//! of one program cannot each keep their own copy of a buffer (a KV cache).
//!
//! Generic over the owner type (the container, in the library) so the rules are
//! tested without one.

use crate::tensor::{Device, Tensor};
use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// What a constant is shared by: where it is, its dtype and view, and its identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    place: Device,
    dtype: i32,
    sizes: Vec<i64>,
    strides: Vec<i64>,
    offset: i64,
    of: Identity,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Identity {
    /// A constant the program never writes: the SHA-256 of its bytes.
    Bytes([u8; 32]),
    /// A registered buffer (possibly written in place, e.g. a KV cache): its program
    /// (share group) and original FQN.
    Buffer { group: u64, fqn: String },
}

/// What [`Key::new`] needs of a constant.
pub(crate) struct Described<'a> {
    pub(crate) place: Device,
    pub(crate) dtype: i32,
    pub(crate) sizes: &'a [i64],
    pub(crate) strides: &'a [i64],
    pub(crate) offset: i64,
    /// A registered buffer (shared only by program and FQN), else a constant (by bytes).
    pub(crate) buffer: bool,
    pub(crate) fqn: &'a str,
    pub(crate) digest: [u8; 32],
}

impl Key {
    /// The key of a constant of share group `group`; `None` for a buffer that cannot be
    /// shared (no group, or no original FQN).
    pub(crate) fn new(c: &Described<'_>, group: u64) -> Option<Key> {
        let of = if c.buffer {
            if group == 0 || c.fqn.is_empty() {
                return None;
            }
            Identity::Buffer {
                group,
                fqn: c.fqn.to_string(),
            }
        } else {
            Identity::Bytes(c.digest)
        };
        Some(Key {
            place: c.place,
            dtype: c.dtype,
            sizes: c.sizes.to_vec(),
            strides: c.strides.to_vec(),
            offset: c.offset,
            of,
        })
    }

    /// Whether a method may use another's tensor under this key: buffers only when it
    /// shares mutable buffers.
    pub(crate) fn usable(&self, mutable_buffers: bool) -> bool {
        mutable_buffers || matches!(self.of, Identity::Bytes(_))
    }
}

/// The registered tensors by key, each with the owner that keeps it valid (weakly: a
/// method that is gone no longer offers its constants).
pub(crate) struct Registry<O> {
    map: HashMap<Key, Vec<(Tensor, Weak<O>)>>,
}

impl<O> Default for Registry<O> {
    fn default() -> Self {
        Registry {
            map: HashMap::new(),
        }
    }
}

/// One constant of a load at [`Registry::settle`]: its key (`None`: never shared) and
/// the tensor the load holds for it.
pub(crate) struct Held {
    pub(crate) key: Option<Key>,
    pub(crate) tensor: Tensor,
    /// Already served from another method (not registered again).
    pub(crate) shared: bool,
}

/// What [`Registry::settle`] did.
pub(crate) enum Settled<O> {
    /// The load's own constants are registered.
    Registered,
    /// Constants registered by another load since this one looked (index, tensor, owner);
    /// with `adopt` the load uses them and its other constants are registered, without
    /// it nothing is registered.
    Found(Vec<(usize, Tensor, Arc<O>)>),
}

impl<O> Registry<O> {
    /// A live tensor registered under `key`, and its owner.
    pub(crate) fn find(&self, key: &Key) -> Option<(Tensor, Arc<O>)> {
        self.map
            .get(key)?
            .iter()
            .find_map(|(t, o)| o.upgrade().map(|o| (t.clone(), o)))
    }

    /// The end of a load, under one hold of the lock: each constant not `shared` is looked
    /// up again (`mutable_buffers`: the load's policy); the ones another load registered
    /// since are returned. Without any, or with `adopt` (the load then uses the ones found),
    /// the load's other constants are registered under `owner`.
    pub(crate) fn settle(
        &mut self,
        held: &[Held],
        mutable_buffers: bool,
        owner: &Arc<O>,
        adopt: bool,
    ) -> Settled<O> {
        self.prune();
        let found: Vec<(usize, Tensor, Arc<O>)> = held
            .iter()
            .enumerate()
            .filter(|(_, h)| !h.shared)
            .filter_map(|(i, h)| {
                let k = h.key.as_ref().filter(|k| k.usable(mutable_buffers))?;
                self.find(k).map(|(t, o)| (i, t, o))
            })
            .collect();
        if !found.is_empty() && !adopt {
            return Settled::Found(found);
        }
        let taken: std::collections::HashSet<usize> = found.iter().map(|f| f.0).collect();
        for (i, h) in held.iter().enumerate() {
            if h.shared || taken.contains(&i) {
                continue;
            }
            if let Some(k) = &h.key {
                self.map
                    .entry(k.clone())
                    .or_default()
                    .push((h.tensor.clone(), Arc::downgrade(owner)));
            }
        }
        if found.is_empty() {
            Settled::Registered
        } else {
            Settled::Found(found)
        }
    }

    /// Forget the tensors of owners that are gone.
    pub(crate) fn prune(&mut self) {
        self.map.retain(|_, v| {
            v.retain(|(_, o)| o.strong_count() > 0);
            !v.is_empty()
        });
    }

    /// Number of registered tensors (tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests;
