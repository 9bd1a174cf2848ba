//! Graph-private memory: the device blocks one CUDA graph's allocations live
//! in, so that a captured graph holds no allocation nodes.
//!
//! A capture made on the plain pool turns every stream-ordered allocation
//! into an allocation node (and every free into a free node) of the graph,
//! which the driver then services at each launch. Instead, the delegate
//! captures twice: the first capture only *traces* the sequence of
//! allocations and frees ([`Trace`]); [`Arena::plan`] replays that sequence
//! against a best-fit free list to find the blocks it needs (a block freed
//! earlier in the run is reused by a later allocation, as a caching
//! allocator on one stream would); the blocks are allocated from the pool
//! before the second capture, which takes every allocation from them in the
//! same order ([`Arena::take`]) — the graph then contains kernels and copies
//! only. An allocation the plan did not foresee is a *miss*: the arena grows
//! by a block allocated outside the graph ([`Arena::grow`]); only when that
//! fails does it become an allocation node, and the delegate keeps the first
//! capture instead.
//!
//! The blocks belong to the graph (its entry holds the arena, and every
//! allocation made from it holds it too): intermediate blocks are rewritten
//! by each replay, output blocks keep their addresses across replays, as the
//! allocation nodes of an "auto free on launch" graph did. They are not
//! shared with other graphs or with eager runs.

use crate::error::Result;
use std::any::Any;
use std::sync::Mutex;

/// Alignment of the blocks' sizes (the pool's allocation granularity for small blocks).
const ALIGN: usize = 256;

/// One step of a traced capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TraceEvent {
    /// Allocation number `id` of `bytes` bytes.
    Alloc { id: u64, bytes: usize },
    /// Allocation `id` was freed.
    Free { id: u64 },
}

/// The allocations and frees of one capture, in order.
#[derive(Debug, Default)]
pub(crate) struct Trace {
    pub(crate) events: Vec<TraceEvent>,
    next: u64,
}

impl Trace {
    /// The sequence for the log: `+bytes` an allocation, `-k` the free of allocation k.
    pub(crate) fn describe(&self) -> String {
        let ev: Vec<String> = self
            .events
            .iter()
            .map(|e| match *e {
                TraceEvent::Alloc { bytes, .. } => format!("+{bytes}"),
                TraceEvent::Free { id } => format!("-{id}"),
            })
            .collect();
        ev.join(" ")
    }

    /// Record an allocation; its id, for [`Trace::free`].
    pub(crate) fn alloc(&mut self, bytes: usize) -> u64 {
        let id = self.next;
        self.next += 1;
        self.events.push(TraceEvent::Alloc { id, bytes });
        id
    }
    pub(crate) fn free(&mut self, id: u64) {
        self.events.push(TraceEvent::Free { id });
    }
}

fn round_up(n: usize) -> usize {
    n.div_ceil(ALIGN).max(1) * ALIGN
}

/// The smallest free block of at least `bytes` (the first of equal ones), taken.
fn pick(sizes: &[usize], free: &mut [bool], bytes: usize) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, (&s, &f)) in sizes.iter().zip(free.iter()).enumerate() {
        if f && s >= bytes && best.is_none_or(|b| s < sizes[b]) {
            best = Some(i);
        }
    }
    if let Some(i) = best {
        free[i] = false;
    }
    best
}

struct ArenaState {
    free: Vec<bool>,
    misses: usize,
    /// Allocations asked for so far, and the first miss: its position, its size and the
    /// sizes of the blocks free at that moment.
    taken: usize,
    first_miss: Option<(usize, usize, Vec<usize>)>,
    /// The sizes asked for, in order (for the log).
    asked: Vec<usize>,
    /// Misses served by a block added during the capture ([`Arena::grow`]).
    grown: usize,
    blocks: Vec<Block>,
    sizes: Vec<usize>,
}

/// One block: its device address, and what keeps its memory alive (the allocation,
/// opaque here: the arena only hands out addresses).
pub(crate) struct Block {
    pub(crate) ptr: u64,
    pub(crate) _keep: Box<dyn Any + Send + Sync>,
}

/// The blocks of one graph.
pub(crate) struct Arena {
    state: Mutex<ArenaState>,
}

impl std::fmt::Debug for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (blocks, bytes) = {
            let st = self.state();
            (st.sizes.len(), st.sizes.iter().sum::<usize>())
        };
        f.debug_struct("Arena")
            .field("blocks", &blocks)
            .field("bytes", &bytes)
            .finish()
    }
}

impl Arena {
    /// The block sizes a capture with this trace needs.
    pub(crate) fn plan(trace: &Trace) -> Vec<usize> {
        let mut sizes = Vec::new();
        let mut free = Vec::new();
        let mut live: Vec<(u64, usize)> = Vec::new();
        for ev in &trace.events {
            match *ev {
                TraceEvent::Alloc { id, bytes } => {
                    let i = match pick(&sizes, &mut free, bytes) {
                        Some(i) => i,
                        None => {
                            sizes.push(round_up(bytes));
                            free.push(false);
                            sizes.len() - 1
                        }
                    };
                    live.push((id, i));
                }
                TraceEvent::Free { id } => {
                    if let Some(k) = live.iter().position(|&(l, _)| l == id) {
                        let (_, i) = live.swap_remove(k);
                        free[i] = true;
                    }
                }
            }
        }
        sizes
    }

    /// An arena over `blocks` (allocated by the caller with the planned `sizes`).
    pub(crate) fn new(blocks: Vec<Block>, sizes: Vec<usize>) -> Result<Arena> {
        if blocks.len() != sizes.len() {
            return Err(crate::error::Error::internal(format!(
                "arena: {} blocks for {} planned sizes",
                blocks.len(),
                sizes.len()
            )));
        }
        Ok(Arena {
            state: Mutex::new(ArenaState {
                free: vec![true; sizes.len()],
                misses: 0,
                taken: 0,
                first_miss: None,
                asked: Vec::new(),
                grown: 0,
                blocks,
                sizes,
            }),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ArenaState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A free block for `bytes` (same choice as [`Arena::plan`]): its index and address;
    /// `None` is a miss (counted).
    pub(crate) fn take(&self, bytes: usize) -> Option<(usize, u64)> {
        let mut st = self.state();
        st.taken += 1;
        st.asked.push(bytes);
        let st = &mut *st;
        match pick(&st.sizes, &mut st.free, bytes) {
            Some(i) => Some((i, st.blocks[i].ptr)),
            None => {
                st.misses += 1;
                if st.first_miss.is_none() {
                    let free: Vec<usize> = st
                        .sizes
                        .iter()
                        .zip(&st.free)
                        .filter(|(_, &f)| f)
                        .map(|(&n, _)| n)
                        .collect();
                    st.first_miss = Some((st.taken, bytes, free));
                }
                None
            }
        }
    }

    /// Block `i` is free again (its allocation was dropped).
    pub(crate) fn give_back(&self, i: usize) {
        if let Some(f) = self.state().free.get_mut(i) {
            *f = true;
        }
    }

    /// Serve a miss of `bytes` with a new block from `make` (given the block size), taken at
    /// once: the capture goes on without an allocation node. Its index and address.
    pub(crate) fn grow(
        &self,
        bytes: usize,
        make: impl FnOnce(usize) -> Result<Block>,
    ) -> Result<(usize, u64)> {
        let n = round_up(bytes);
        let block = make(n)?;
        let mut st = self.state();
        let ptr = block.ptr;
        st.blocks.push(block);
        st.sizes.push(n);
        st.free.push(false);
        st.grown += 1;
        Ok((st.sizes.len() - 1, ptr))
    }

    /// Allocations the plan did not foresee.
    #[cfg(test)]
    fn misses(&self) -> usize {
        self.state().misses
    }

    /// Misses that got no block (they became allocation nodes).
    pub(crate) fn unserved(&self) -> usize {
        let st = self.state();
        st.misses - st.grown
    }

    /// For the log: allocations asked for, blocks planned, and the first miss (its
    /// position among the allocations, its size).
    pub(crate) fn describe(&self) -> String {
        let st = self.state();
        let miss = st
            .first_miss
            .as_ref()
            .map_or_else(String::new, |(n, b, free)| {
                format!("; first miss: allocation {n}, {b} bytes, free blocks then {free:?}")
            });
        format!(
            "{} allocations asked for {:?}, {} blocks {:?} ({} added during the capture){miss}",
            st.taken,
            st.asked,
            st.sizes.len(),
            st.sizes,
            st.grown
        )
    }

    /// Device bytes the arena holds.
    pub(crate) fn bytes(&self) -> usize {
        self.state().sizes.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(ev: &[(char, u64, usize)]) -> Trace {
        let mut t = Trace::default();
        let mut ids = std::collections::HashMap::new();
        for &(k, key, bytes) in ev {
            if k == 'a' {
                ids.insert(key, t.alloc(bytes));
            } else {
                t.free(ids[&key]);
            }
        }
        t
    }

    #[test]
    fn freed_blocks_are_reused_best_fit() {
        // a(1000) b(5000) free a; c(900) reuses a's block; free b; d(4000) reuses b's.
        let t = trace(&[
            ('a', 1, 1000),
            ('a', 2, 5000),
            ('f', 1, 0),
            ('a', 3, 900),
            ('f', 2, 0),
            ('a', 4, 4000),
        ]);
        assert_eq!(Arena::plan(&t), vec![1024, 5120]);
    }

    #[test]
    fn live_allocations_get_their_own_blocks() {
        let t = trace(&[('a', 1, 10), ('a', 2, 10), ('a', 3, 300)]);
        assert_eq!(Arena::plan(&t), vec![256, 256, 512]);
    }

    #[test]
    fn smallest_fitting_block_wins() {
        // Two free blocks (2048, 512): a 300-byte allocation takes the 512 one.
        let t = trace(&[
            ('a', 1, 2048),
            ('a', 2, 512),
            ('f', 1, 0),
            ('f', 2, 0),
            ('a', 3, 300),
            ('a', 4, 2000),
        ]);
        assert_eq!(Arena::plan(&t), vec![2048, 512]);
        let mut free = vec![true, true];
        assert_eq!(pick(&[2048, 512], &mut free, 300), Some(1));
        assert_eq!(pick(&[2048, 512], &mut free, 300), Some(0));
        assert_eq!(pick(&[2048, 512], &mut free, 1), None);
    }

    #[test]
    fn misses_are_recorded() {
        // The trace saw one 1000-byte allocation; the capture then asks for 1000 and 3000.
        let t = trace(&[('a', 1, 1000), ('f', 1, 0)]);
        let arena = |sizes: Vec<usize>| {
            let blocks = sizes
                .iter()
                .enumerate()
                .map(|(i, _)| Block {
                    ptr: 0x1000 * (i as u64 + 1),
                    _keep: Box::new(()),
                })
                .collect();
            Arena::new(blocks, sizes).unwrap()
        };
        let a = arena(Arena::plan(&t));
        assert!(a.take(1000).is_some());
        assert!(a.take(3000).is_none());
        assert_eq!((a.misses(), a.unserved()), (1, 1));
        assert!(
            a.describe()
                .contains("first miss: allocation 2, 3000 bytes"),
            "{}",
            a.describe()
        );
    }

    #[test]
    fn a_miss_served_by_a_grown_block_is_not_unserved() {
        let t = trace(&[('a', 1, 1000), ('f', 1, 0)]);
        let a = Arena::new(
            vec![Block {
                ptr: 0x1000,
                _keep: Box::new(()),
            }],
            Arena::plan(&t),
        )
        .unwrap();
        assert_eq!(a.take(1000), Some((0, 0x1000)));
        assert_eq!(a.take(3000), None);
        let (i, p) = a
            .grow(3000, |n| {
                assert_eq!(n, 3072);
                Ok(Block {
                    ptr: 0x9000,
                    _keep: Box::new(()),
                })
            })
            .unwrap();
        assert_eq!((i, p), (1, 0x9000));
        assert_eq!((a.misses(), a.unserved()), (1, 0));
        // The grown block is reused once given back.
        a.give_back(1);
        assert_eq!(a.take(2000), Some((1, 0x9000)));
        assert_eq!(a.bytes(), 1024 + 3072);
        assert!(format!("{a:?}").contains("blocks: 2"));
        // A failed grow leaves the miss unserved.
        assert_eq!(a.take(5000), None);
        assert!(a
            .grow(5000, |_| Err(crate::error::Error::cuda("no memory")))
            .is_err());
        assert_eq!((a.misses(), a.unserved()), (2, 1));
    }
}
