//! Unit tests of the per-FQN matcher: matching by FQN then name, clear errors, the fuzz body over its seeds.

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
        .map(|(m, bytes)| (m.info.name.as_str(), m.entry.fqn.as_str(), bytes[0]))
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
    let err =
        |storages: &[(FqnEntry, &[u8])]| match_storages(&infos, storages).unwrap_err().to_string();
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
    wide.sizes = vec![3].into();
    wide.strides = vec![1].into();
    let e = err(&[(wide, &b[..])]);
    assert!(e.contains("needs 12 bytes"), "{e}");
    // A device type that is neither CPU nor CUDA.
    let mut dev = entry("fc2.weight", 8);
    dev.device_type = 13;
    let e = err(&[(dev, &b[..])]);
    assert!(e.contains("device type 13"), "{e}");
    // Negative strides are refused, not wrapped.
    let mut neg = entry("fc2.weight", 8);
    neg.sizes = vec![2].into();
    neg.strides = vec![-1].into();
    let e = err(&[(neg, &b[..])]);
    assert!(e.contains("negative"), "{e}");
}

/// The fuzz target's body over its seeds and a fixed pseudo-random sweep
/// (so CI runs it without cargo-fuzz).
#[test]
fn fuzz_body_over_seeds_and_a_sweep() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/per_fqn_match");
    let mut n = 0;
    for f in std::fs::read_dir(&dir).unwrap() {
        fuzz_match(&std::fs::read(f.unwrap().path()).unwrap());
        n += 1;
    }
    assert!(n >= 2, "{n} seeds in {}", dir.display());
    assert_eq!(
        fuzz_match(&std::fs::read(dir.join("one_match")).unwrap()),
        1
    );
    let mut matches = 0;
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..10_000 {
        let b: Vec<u8> = (0..96)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        matches += fuzz_match(&b);
    }
    // The sweep reaches the view check, not only the matcher's early refusals.
    assert!(matches > 30, "{matches} matches");
}

#[test]
fn the_matcher_uses_the_uploads_view_check() {
    // Rank 17 and sizes past isize::MAX bytes: refused by the matcher, as by the upload.
    let infos = vec![info("w", "w", 4, false)];
    let b = [0u8; 4];
    let mut r17 = entry("w", 4);
    r17.sizes = vec![1; 17].into();
    r17.strides = vec![1; 17].into();
    let e = match_storages(&infos, &[(r17, &b[..])])
        .unwrap_err()
        .to_string();
    assert!(e.contains("rank 17 is above the limit of 16"), "{e}");
    let mut wide = entry("w", 4);
    wide.sizes = vec![1 << 61].into();
    wide.strides = vec![0].into();
    let e = match_storages(&infos, &[(wide, &b[..])])
        .unwrap_err()
        .to_string();
    assert!(e.contains("isize::MAX"), "{e}");
}

#[test]
fn source_releases_each_lookup_after_use_and_never_read_bytes() {
    use std::cell::RefCell;
    let (a, b) = ([1u8; 4], [2u8; 8]);
    let lookups = RefCell::new(Vec::new());
    let released = RefCell::new(Vec::new());
    let lookup = |k: &str| -> Option<&[u8]> {
        lookups.borrow_mut().push(k.to_string());
        match k {
            "a" => Some(&a[..]),
            "b" => Some(&b[..]),
            _ => None,
        }
    };
    let release = |k: &str| released.borrow_mut().push(k.to_string());
    let streamed = Source {
        lookup: &lookup,
        release: Some(&release),
        read: HashMap::new(),
        fetch_ns: Default::default(),
    };
    // The key is released after `f`, whatever `f` returns.
    let n = streamed
        .with("a", &|| "the weights of x".into(), |bytes| {
            assert!(released.borrow().is_empty(), "released before use");
            Ok(bytes.len())
        })
        .unwrap();
    assert_eq!(n, 4);
    let e = streamed
        .with("b", &|| "the weights of y".into(), |_| -> Result<()> {
            Err(Error::invalid_program("bad"))
        })
        .unwrap_err();
    assert!(e.to_string().contains("bad"), "{e}");
    assert_eq!(*released.borrow(), ["a", "b"]);
    // A missing key: a clear error, nothing to release.
    let e = streamed
        .with("c", &|| "the weights of z".into(), |_| Ok(()))
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("no named data \"c\" (the weights of z)"),
        "{e}"
    );
    assert_eq!(released.borrow().len(), 2);
    // Bytes read before the load (no release given) are used without another lookup.
    let held = Source {
        lookup: &lookup,
        release: None,
        read: HashMap::from([("b".into(), &b[..])]),
        fetch_ns: Default::default(),
    };
    let before = lookups.borrow().len();
    held.with("b", &|| "w".into(), |bytes| {
        assert_eq!(bytes, &b[..]);
        Ok(())
    })
    .unwrap();
    assert_eq!(lookups.borrow().len(), before);
}

/// With two items of one FQN (the fuzz body makes such), the first one is matched; a
/// constant without FQN metadata is matched by name.
#[test]
fn the_first_item_of_an_fqn_is_matched() {
    let infos = vec![info("w", "w", 4, false), info("n", "", 4, false)];
    let (a, b, c) = ([1u8; 4], [2u8; 4], [3u8; 4]);
    let storages = vec![
        (entry("w", 4), &a[..]),
        (entry("w", 4), &b[..]),
        (entry("n", 4), &c[..]),
    ];
    let m = match_storages(&infos, &storages).unwrap();
    assert_eq!(m[0].1[0], 1);
    assert_eq!(m[1].1[0], 3);
}

/// `f` on a thread of its own, waited for with a deadline (wall time, generous: a busy
/// machine), so that a quadratic path fails its test instead of hanging it.
fn within_deadline<R: Send + 'static>(what: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(120))
        .unwrap_or_else(|_| panic!("{what} did not finish in 120 s"))
}

/// Issue 31: 2^18 constants, listed in the opposite order of their entries, are matched
/// and grouped by storage in linear time (the matcher used to scan the entries for each
/// constant, and the grouping its groups for each match: 2^35 comparisons), within a
/// deadline.
#[test]
fn matching_and_grouping_are_linear() {
    const N: usize = 1 << 18;
    let (matched, groups, sizes) = within_deadline("matching 2^18 constants", || {
        let bytes = [0u8; 4];
        let mut storages = Vec::with_capacity(N);
        for i in 0..N {
            let mut e = entry(&format!("c{i}"), 4);
            e.storage_key = format!("s{}", i / 4).into();
            e.device_type = if i % 8 < 4 { 1 } else { 0 };
            storages.push((e, &bytes[..]));
        }
        let infos: Vec<ConstantInfo> = (0..N)
            .rev()
            .map(|i| info(&format!("k{i}"), &format!("c{i}"), 4, false))
            .collect();
        let m = match_storages(&infos, &storages).unwrap();
        let matched: Vec<Matched<'_>> = m.into_iter().map(|(m, _)| m).collect();
        let groups = storage_groups(&matched, 0);
        let sizes: Vec<usize> = groups.iter().map(|g| g.members.len()).collect();
        (matched.len(), groups.len(), sizes)
    });
    assert_eq!(matched, N);
    // Four constants per storage key, all on one side (CPU or CUDA).
    assert_eq!(groups, N / 4);
    assert!(sizes.iter().all(|&s| s == 4));
}

/// Issue 31: without a release callback every storage is read before any device work, each
/// key once (2^17 entries over 2^16 keys here, small enough for the Valgrind pass: the read
/// used to compare each key with every key read before it, 2^31 comparisons), and a missing
/// storage is refused naming its entry; within a deadline.
#[test]
fn reading_every_storage_is_linear_and_reads_each_key_once() {
    const N: usize = 1 << 17;
    let (read, looked_up, missing) = within_deadline("reading 2^17 storages", || {
        let bytes = [0u8; 4];
        let entries: Vec<FqnEntry> = (0..N)
            .map(|i| {
                let mut e = entry(&format!("c{i}"), 4);
                e.storage_key = format!("s{}", i / 2).into();
                e
            })
            .collect();
        let calls = std::cell::Cell::new(0usize);
        let lookup = |k: &str| -> Option<&[u8]> {
            calls.set(calls.get() + 1);
            (k != "s7").then_some(&bytes[..])
        };
        let mut s = Source {
            lookup: &lookup,
            release: None,
            read: HashMap::new(),
            fetch_ns: Default::default(),
        };
        s.read_all(&entries[16..]).unwrap();
        let (read, looked_up) = (s.read.len(), calls.get());
        // Entry 14 names storage s7, which the program lacks.
        let missing = s.read_all(&entries).unwrap_err().to_string();
        (read, looked_up, missing)
    });
    assert_eq!((read, looked_up), ((N - 16) / 2, (N - 16) / 2));
    assert!(
        missing.contains("no named data \"s7\" (the weights of c14)"),
        "{missing}"
    );
}

/// One storage key read for constants on the CPU and on the device is two groups.
#[test]
fn a_storage_on_both_sides_is_two_groups() {
    let infos = vec![
        info("a", "a", 4, false),
        info("b", "b", 4, false),
        info("c", "c", 4, false),
    ];
    let bytes = [0u8; 4];
    let mut storages = Vec::new();
    for (fqn, dev) in [("a", 1), ("b", 0), ("c", 1)] {
        let mut e = entry(fqn, 4);
        e.storage_key = "s".into();
        e.device_type = dev;
        storages.push((e, &bytes[..]));
    }
    let m = match_storages(&infos, &storages).unwrap();
    let matched: Vec<Matched<'_>> = m.into_iter().map(|(m, _)| m).collect();
    let groups = storage_groups(&matched, 3);
    let got: Vec<(Device, Vec<usize>)> = groups.iter().map(|g| (g.at, g.members.clone())).collect();
    assert_eq!(got, [(Device::Cuda(3), vec![0, 2]), (Device::Cpu, vec![1])]);
}

/// Issue 31: the caller's named-data functions run with no library lock held on the
/// thread (each one records how many it saw); a lookup or a release that would run
/// under one is refused with an error instead.
#[test]
fn named_data_callbacks_run_without_a_library_lock() {
    let a = [1u8; 4];
    let seen = std::cell::RefCell::new(Vec::new());
    let lookup = |_: &str| -> Option<&[u8]> {
        seen.borrow_mut().push(crate::logging::holds());
        Some(&a[..])
    };
    let release = |_: &str| seen.borrow_mut().push(crate::logging::holds());
    let source = Source {
        lookup: &lookup,
        release: Some(&release),
        read: HashMap::new(),
        fetch_ns: Default::default(),
    };
    source.with("a", &|| "w".into(), |_| Ok(())).unwrap();
    assert_eq!(*seen.borrow(), [0, 0]);
    // Under a lock (what the load used to do: the legacy-stream gate held throughout).
    let _locked = crate::logging::Hold::new();
    let e = source.with("a", &|| "w".into(), |_| Ok(())).unwrap_err();
    assert!(e.to_string().contains("library locks"), "{e}");
    assert_eq!(seen.borrow().len(), 2, "a callback ran under the lock");
}
