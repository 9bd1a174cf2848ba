//! Unit tests of the payload parser (the empty, text and binary forms, and the fuzz seeds), and the entry builder other modules' tests use.

pub(crate) use super::encode;
use super::*;

pub(crate) fn entry(fqn: &str, n: u64) -> FqnEntry {
    FqnEntry {
        fqn: fqn.into(),
        storage_key: format!("cuda_fqn_weight:cuda:{fqn}").into(),
        storage_nbytes: n,
        dtype: 6,
        device_type: 1,
        storage_offset: 0,
        sizes: vec![n as i64 / 4].into(),
        strides: vec![1].into(),
    }
}

#[test]
fn the_three_forms() {
    assert_eq!(
        parse(b"", "forward").unwrap(),
        Payload::Keys {
            so_key: "forward_so_blob".into(),
            weights_key: "forward_weights_blob".into()
        }
    );
    assert!(parse(b"", "").is_err());
    assert_eq!(
        parse(b"abc_so_blob\ndef_weights_blob\0", "m").unwrap(),
        Payload::Keys {
            so_key: "abc_so_blob".into(),
            weights_key: "def_weights_blob".into()
        }
    );
    let es = vec![entry("fc1.weight", 64), entry("fc1.bias", 8)];
    let b = encode("k_so_blob", &es);
    assert_eq!(
        parse(&b, "m").unwrap(),
        Payload::PerFqn {
            so_key: "k_so_blob".into(),
            entries: es
        }
    );
}

#[test]
fn malformed_payloads_are_errors_not_panics() {
    for bad in [
        &b"only one line"[..],
        b"a\nb\nc",
        b"\xff\xfe binary",
        b"ETCUDAFQN3",
        b"ETCUDAFQN3\xff\xff\xff\xff",
    ] {
        let e = parse(bad, "m").unwrap_err().to_string();
        assert!(e.contains("payload"), "{e}");
    }
    let b = encode("k", &[entry("w", 16)]);
    for cut in 10..b.len() {
        assert!(parse(&b[..cut], "m").is_err(), "cut at {cut}");
    }
    let mut extra = b.clone();
    extra.push(7);
    assert!(parse(&extra, "m")
        .unwrap_err()
        .to_string()
        .contains("left after"));
    // Huge counts and ranks are refused before anything is allocated.
    let mut huge = FQN_MAGIC.to_vec();
    huge.extend(1u32.to_le_bytes());
    huge.push(b'k');
    huge.extend(u32::MAX.to_le_bytes());
    assert!(parse(&huge, "m")
        .unwrap_err()
        .to_string()
        .contains("entries"));
}

#[test]
fn a_carriage_return_alone_is_not_a_key() {
    for p in [&b"\r\nw"[..], b"so\n\r", b"\r\r\n\rw\n"] {
        let e = parse(p, "m").unwrap_err().to_string();
        assert!(e.contains("<so_key>"), "{p:?}: {e}");
    }
    assert_eq!(
        parse(b"a\r\nb\r\n", "m").unwrap(),
        Payload::Keys {
            so_key: "a".into(),
            weights_key: "b".into()
        }
    );
}

#[test]
fn per_fqn_metadata_is_checked_at_parse() {
    let err = |es: &[FqnEntry]| {
        parse(&encode("k_so_blob", es), "m")
            .unwrap_err()
            .to_string()
    };
    // Rank: the tensor layer's limit, not the format's.
    let mut r16 = entry("w", 4);
    r16.sizes = vec![1; crate::tensor::MAX_RANK].into();
    r16.strides = vec![1; crate::tensor::MAX_RANK].into();
    assert!(parse(&encode("k", &[r16.clone()]), "m").is_ok());
    let mut r17 = r16.clone();
    r17.sizes = vec![1; crate::tensor::MAX_RANK + 1].into();
    r17.strides = vec![1; crate::tensor::MAX_RANK + 1].into();
    let e = err(&[r17]);
    assert!(
        e.contains("entry 0 (w) has rank 17, above the limit of 16"),
        "{e}"
    );
    // Sizes whose bytes overflow isize, over a storage that holds the (expanded) view.
    let mut wide = entry("w", 4);
    wide.sizes = vec![1 << 61].into();
    wide.strides = vec![0].into();
    let e = err(&[wide]);
    assert!(e.contains("entry 0") && e.contains("isize::MAX"), "{e}");
    let mut huge = entry("w", 4);
    huge.storage_nbytes = u64::MAX;
    let e = err(&[huge]);
    assert!(e.contains("declares 18446744073709551615 bytes"), "{e}");
    // A view past the declared bytes, an unknown dtype, a device that is neither CPU nor CUDA.
    let mut past = entry("w", 8);
    past.sizes = vec![3].into();
    let e = err(&[past]);
    assert!(
        e.contains("constant w") && e.contains("needs 12 bytes"),
        "{e}"
    );
    let mut dt = entry("w", 8);
    dt.dtype = 99;
    assert!(err(&[dt]).contains("unknown dtype code 99"));
    let mut dev = entry("w", 8);
    dev.device_type = 13;
    assert!(err(&[dev]).contains("device type 13"));
}

#[test]
fn duplicate_fqns_and_empty_keys_are_refused() {
    let e = parse(
        &encode(
            "k",
            &[
                entry("fc1.weight", 8),
                entry("fc1.bias", 4),
                entry("fc1.weight", 8),
            ],
        ),
        "m",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("entry 2 repeats the FQN fc1.weight"), "{e}");
    let e = parse(&encode("", &[entry("w", 8)]), "m")
        .unwrap_err()
        .to_string();
    assert!(e.contains("the .so key is empty"), "{e}");
    let e = parse(&encode("k", &[entry("", 8)]), "m")
        .unwrap_err()
        .to_string();
    assert!(e.contains("entry 0's FQN is empty"), "{e}");
    let mut nokey = entry("w", 8);
    nokey.storage_key = "".into();
    let e = parse(&encode("k", &[nokey]), "m").unwrap_err().to_string();
    assert!(e.contains("entry 0 (w) has an empty storage key"), "{e}");
    // Two constants may share one storage (tied weights): only FQNs must be unique.
    let mut tied = entry("lm_head.weight", 8);
    tied.storage_key = entry("embed.weight", 8).storage_key;
    assert!(parse(&encode("k", &[entry("embed.weight", 8), tied]), "m").is_ok());
}

/// The fuzz target's body over its seeds (so CI runs it without cargo-fuzz).
#[test]
fn fuzz_body_over_the_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/payload");
    let mut n = 0;
    for f in std::fs::read_dir(&dir).unwrap() {
        let b = std::fs::read(f.unwrap().path()).unwrap();
        fuzz_parse(&b);
        for cut in 0..b.len() {
            fuzz_parse(&b[..cut]);
        }
        n += 1;
    }
    assert!(n >= 3, "{n} seeds in {}", dir.display());
}

#[test]
fn dims_are_inline_up_to_their_limit_and_round_trip_at_every_rank() {
    for rank in 0..=crate::tensor::MAX_RANK {
        let v: Vec<i64> = (0..rank as i64).map(|d| 3 - d).collect();
        let dims = Dims::from(v.clone());
        assert_eq!(&*dims, &v[..]);
        assert_eq!(matches!(dims, Dims::Inline { .. }), rank <= Dims::INLINE);
        let mut e = entry("w", 4);
        (e.sizes, e.strides) = (vec![1; rank].into(), vec![0; rank].into());
        let Payload::PerFqn { entries, .. } = parse(&encode("k", &[e.clone()]), "m").unwrap()
        else {
            panic!("rank {rank}: not a per-FQN payload");
        };
        assert_eq!(entries, [e], "rank {rank}");
    }
}
