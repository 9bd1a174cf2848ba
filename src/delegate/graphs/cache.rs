//! The bookkeeping of one method's graphs: which input shapes were warmed
//! up, captured, failed or seen with moving device inputs, and the least
//! recently used eviction of at most `capacity` graphs. Generic over the
//! entry so the tests need no GPU.

use super::ShapeKey;

/// What to do with an execute of a given shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Replay the cached graph.
    Replay,
    /// Run eagerly (first sight of the shape, or its capture failed before).
    Eager,
    /// Capture a graph now.
    Capture,
}

struct Slot<E> {
    key: ShapeKey,
    entry: E,
    last_use: u64,
}

/// The graphs of one method (`E` is [`super::GraphEntry`]; generic for the tests).
pub(crate) struct GraphCache<E> {
    capacity: usize,
    entries: Vec<Slot<E>>,
    /// Shapes run eagerly once (the next execute of one captures).
    warmed: Vec<ShapeKey>,
    /// Shapes whose capture failed (always eager).
    failed: Vec<ShapeKey>,
    /// Shapes whose device inputs came at other addresses than at capture: their
    /// graphs copy the inputs into buffers of their own.
    moving: Vec<ShapeKey>,
    clock: u64,
}

/// Most shapes remembered as warmed up or failed (a bound on host memory).
const MAX_REMEMBERED_SHAPES: usize = 256;

impl<E> GraphCache<E> {
    pub(crate) fn new(capacity: usize) -> GraphCache<E> {
        GraphCache {
            capacity: capacity.max(1),
            entries: Vec::new(),
            warmed: Vec::new(),
            failed: Vec::new(),
            moving: Vec::new(),
            clock: 0,
        }
    }

    /// Decide how to run `key`, updating the warm-up bookkeeping.
    pub(crate) fn plan(&mut self, key: &ShapeKey) -> Plan {
        if self.entries.iter().any(|s| &s.key == key) {
            return Plan::Replay;
        }
        if self.failed.contains(key) {
            return Plan::Eager;
        }
        if let Some(i) = self.warmed.iter().position(|k| k == key) {
            self.warmed.swap_remove(i);
            return Plan::Capture;
        }
        if self.warmed.len() >= MAX_REMEMBERED_SHAPES {
            self.warmed.remove(0);
        }
        self.warmed.push(key.clone());
        Plan::Eager
    }

    /// The entry of `key` (marked as just used).
    pub(crate) fn get(&mut self, key: &ShapeKey) -> Option<&mut E> {
        self.clock += 1;
        let now = self.clock;
        self.entries.iter_mut().find(|s| &s.key == key).map(|s| {
            s.last_use = now;
            &mut s.entry
        })
    }

    /// Keep a new graph; returns the least recently used one when the cache was full.
    pub(crate) fn insert(&mut self, key: ShapeKey, entry: E) -> Option<E> {
        self.clock += 1;
        let evicted = if self.entries.len() >= self.capacity {
            self.entries
                .iter()
                .enumerate()
                .min_by_key(|(_, s)| s.last_use)
                .map(|(i, _)| i)
                .map(|i| {
                    let slot = self.entries.swap_remove(i);
                    // Its kernels are loaded already: capture it again at its next execute.
                    self.warmed.push(slot.key);
                    slot.entry
                })
        } else {
            None
        };
        self.entries.push(Slot {
            key,
            entry,
            last_use: self.clock,
        });
        evicted
    }

    /// Take the graph of `key` out of the cache.
    pub(crate) fn remove(&mut self, key: &ShapeKey) -> Option<E> {
        let i = self.entries.iter().position(|s| &s.key == key)?;
        Some(self.entries.swap_remove(i).entry)
    }

    /// Remember that `key`'s device inputs do not stay at one address.
    pub(crate) fn mark_moving(&mut self, key: &ShapeKey) {
        if self.moving.contains(key) {
            return;
        }
        if self.moving.len() >= MAX_REMEMBERED_SHAPES {
            self.moving.remove(0);
        }
        self.moving.push(key.clone());
    }

    /// Whether `key`'s device inputs were seen at changing addresses.
    pub(crate) fn is_moving(&self, key: &ShapeKey) -> bool {
        self.moving.contains(key)
    }

    /// Remember that capturing `key` failed.
    pub(crate) fn mark_failed(&mut self, key: ShapeKey) {
        if self.failed.len() >= MAX_REMEMBERED_SHAPES {
            self.failed.remove(0);
        }
        self.failed.push(key);
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Drop every graph (the caller makes sure their launches are done or ordered before frees).
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.warmed.clear();
        self.failed.clear();
        self.moving.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: i64) -> ShapeKey {
        vec![(6, vec![1, n], vec![n, 1])]
    }

    #[test]
    fn warm_up_then_capture_then_failure_is_eager() {
        let mut c: GraphCache<u32> = GraphCache::new(2);
        assert_eq!(c.plan(&key(1)), Plan::Eager);
        assert_eq!(c.plan(&key(1)), Plan::Capture);
        c.mark_failed(key(1));
        assert_eq!(c.plan(&key(1)), Plan::Eager);
        assert_eq!(c.plan(&key(1)), Plan::Eager);
        assert_eq!(c.plan(&key(2)), Plan::Eager);
        assert_eq!(c.plan(&key(3)), Plan::Eager);
        assert_eq!(c.plan(&key(2)), Plan::Capture);
    }

    #[test]
    fn removed_and_moving_shapes() {
        let mut c: GraphCache<u32> = GraphCache::new(4);
        assert_eq!(c.plan(&key(1)), Plan::Eager);
        assert_eq!(c.plan(&key(1)), Plan::Capture);
        assert!(c.insert(key(1), 7).is_none());
        assert_eq!(c.plan(&key(1)), Plan::Replay);
        assert!(!c.is_moving(&key(1)));
        c.mark_moving(&key(1));
        c.mark_moving(&key(1));
        assert!(c.is_moving(&key(1)) && !c.is_moving(&key(2)));
        assert_eq!(c.remove(&key(1)), Some(7));
        assert_eq!(c.remove(&key(1)), None);
        assert_eq!(c.len(), 0);
        c.clear();
        assert!(!c.is_moving(&key(1)));
    }

    #[test]
    fn least_recently_used_is_evicted() {
        let mut c: GraphCache<u32> = GraphCache::new(2);
        assert!(c.insert(key(1), 1).is_none());
        assert!(c.insert(key(2), 2).is_none());
        assert_eq!(c.plan(&key(1)), Plan::Replay);
        assert_eq!(c.get(&key(1)).copied(), Some(1)); // 1 is now the most recent
        assert_eq!(c.insert(key(3), 3), Some(2));
        assert_eq!(c.len(), 2);
        assert!(c.get(&key(2)).is_none());
        assert_eq!(c.get(&key(3)).copied(), Some(3));
        assert_eq!(
            c.plan(&key(2)),
            Plan::Capture,
            "an evicted shape is captured at once"
        );
        assert_eq!(c.insert(key(4), 4), Some(1));
        c.clear();
        assert_eq!(c.len(), 0);
        assert_eq!(c.plan(&key(3)), Plan::Eager);
    }
}
