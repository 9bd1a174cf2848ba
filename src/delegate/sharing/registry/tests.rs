//! The registry's rules without a container: keys, one copy per share group under
//! concurrent loads, owners that are gone.

use super::*;
use crate::tensor::{Memory, Storage};
use std::sync::{Barrier, Mutex};

fn tensor() -> Tensor {
    let storage = Arc::new(Storage {
        memory: Memory::Empty,
        nbytes: 16,
        device: Device::Cpu,
    });
    Tensor::view(storage, 6, vec![4], vec![1], 0).unwrap()
}

fn key(buffer: bool, fqn: &str, digest: u8, group: u64) -> Option<Key> {
    Key::new(
        &Described {
            place: Device::Cpu,
            dtype: 6,
            sizes: &[4],
            strides: &[1],
            offset: 0,
            buffer,
            fqn,
            digest: [digest; 32],
        },
        group,
    )
}

fn held(key: Option<Key>) -> Held {
    Held {
        key,
        tensor: tensor(),
        shared: false,
    }
}

fn same(a: &Tensor, b: &Tensor) -> bool {
    Arc::ptr_eq(&a.storage, &b.storage)
}

#[test]
fn keys_follow_the_sharing_rules() {
    // A buffer is shared by program and FQN, never without either.
    assert!(key(true, "cache", 1, 0).is_none());
    assert!(key(true, "", 1, 7).is_none());
    assert_eq!(key(true, "cache", 1, 7), key(true, "cache", 2, 7));
    assert_ne!(key(true, "cache", 1, 7), key(true, "cache", 1, 8));
    // A constant by its bytes, whatever its name or program.
    assert_eq!(key(false, "a", 1, 7), key(false, "b", 1, 8));
    assert_ne!(key(false, "a", 1, 7), key(false, "a", 2, 7));
    assert!(!key(true, "cache", 1, 7).unwrap().usable(false));
    assert!(key(true, "cache", 1, 7).unwrap().usable(true));
    assert!(key(false, "a", 1, 7).unwrap().usable(false));
}

/// Two loads of one program that both looked before either registered: the second one's
/// settle finds the first one's buffer and keeps no copy of its own.
#[test]
fn a_load_that_settles_second_takes_the_first_ones_buffer() {
    let mut reg = Registry::<u32>::default();
    let (a, b) = (Arc::new(1u32), Arc::new(2u32));
    let load_a = vec![held(key(true, "kv", 0, 7)), held(key(false, "w", 1, 7))];
    let load_b = vec![held(key(true, "kv", 0, 7)), held(key(false, "w2", 2, 7))];
    // Both looked up first: nothing there.
    for h in load_a.iter().chain(&load_b) {
        assert!(reg.find(h.key.as_ref().unwrap()).is_none());
    }
    assert!(matches!(
        reg.settle(&load_a, true, &a, true),
        Settled::Registered
    ));
    let Settled::Found(found) = reg.settle(&load_b, true, &b, true) else {
        panic!("the second load registered its own buffer");
    };
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].0, 0);
    assert!(same(&found[0].1, &load_a[0].tensor));
    assert_eq!(*found[0].2, 1);
    // One buffer in the registry (A's), B's other constant registered.
    assert_eq!(reg.len(), 3);
    let (t, owner) = reg.find(load_a[0].key.as_ref().unwrap()).unwrap();
    assert!(same(&t, &load_a[0].tensor) && *owner == 1);
    let (t, _) = reg.find(load_b[1].key.as_ref().unwrap()).unwrap();
    assert!(same(&t, &load_b[1].tensor));
}

/// Without `adopt` (the packed path, which starts over), nothing is registered when
/// something was found; a load that does not share mutable buffers does not take one.
#[test]
fn settle_without_adopt_registers_nothing_when_it_finds() {
    let mut reg = Registry::<u32>::default();
    let (a, b) = (Arc::new(1u32), Arc::new(2u32));
    let load_a = vec![held(key(true, "kv", 0, 7))];
    assert!(matches!(
        reg.settle(&load_a, true, &a, false),
        Settled::Registered
    ));
    let load_b = vec![held(key(true, "kv", 0, 7)), held(key(false, "w", 1, 7))];
    assert!(matches!(reg.settle(&load_b, true, &b, false), Settled::Found(f) if f.len() == 1));
    assert_eq!(reg.len(), 1);
    // Not sharing mutable buffers: its own buffer is registered beside A's.
    assert!(matches!(
        reg.settle(&load_b, false, &b, false),
        Settled::Registered
    ));
    assert_eq!(reg.len(), 3);
}

/// Constants already served from another method are not registered again; the constants
/// of owners that are gone are neither found nor kept.
#[test]
fn shared_constants_and_dead_owners() {
    let mut reg = Registry::<u32>::default();
    let a = Arc::new(1u32);
    let mut h = held(key(false, "w", 1, 0));
    h.shared = true;
    assert!(matches!(
        reg.settle(&[h], true, &a, true),
        Settled::Registered
    ));
    assert_eq!(reg.len(), 0);
    let h = held(key(false, "w", 1, 0));
    let k = h.key.clone().unwrap();
    assert!(matches!(
        reg.settle(&[h], true, &a, true),
        Settled::Registered
    ));
    assert!(reg.find(&k).is_some());
    drop(a);
    assert!(reg.find(&k).is_none());
    reg.prune();
    assert_eq!(reg.len(), 0);
}

/// Many threads load one program at once: whatever the interleaving, every one of them
/// ends up with the same buffer.
#[test]
fn concurrent_loads_of_one_program_keep_one_buffer() {
    const LOADS: usize = 8;
    for _ in 0..20 {
        let reg = Mutex::new(Registry::<usize>::default());
        let start = Barrier::new(LOADS);
        let owners: Vec<Arc<usize>> = (0..LOADS).map(Arc::new).collect();
        let used: Vec<Tensor> = std::thread::scope(|s| {
            let hs: Vec<_> = owners
                .iter()
                .map(|owner| {
                    let (reg, start) = (&reg, &start);
                    s.spawn(move || {
                        let mine = vec![held(key(true, "kv", 0, 3))];
                        start.wait();
                        // The look-up, then (device work here in a real load) the settle.
                        let k = mine[0].key.clone().unwrap();
                        if let Some((t, _)) = reg.lock().unwrap().find(&k) {
                            return t;
                        }
                        std::thread::yield_now();
                        match reg.lock().unwrap().settle(&mine, true, owner, true) {
                            Settled::Registered => mine[0].tensor.clone(),
                            Settled::Found(f) => f[0].1.clone(),
                        }
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(
            used.iter().all(|t| same(t, &used[0])),
            "two copies of one buffer"
        );
        assert_eq!(reg.lock().unwrap().len(), 1);
    }
}
