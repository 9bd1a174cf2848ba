/// ExecuTorch 1.5's `ETCUDAFQN3` payload (the test's own writer of the documented layout): the
/// `.so` key, then per entry FQN, storage key, byte count, dtype, device, offset, rank, sizes, strides.
struct FqnEntry {
    fqn: &'static str,
    key: &'static str,
    nbytes: u64,
    sizes: Vec<i64>,
    strides: Vec<i64>,
}

fn fqn_entry(fqn: &'static str, nbytes: u64) -> FqnEntry {
    FqnEntry {
        fqn,
        key: fqn,
        nbytes,
        sizes: vec![nbytes as i64 / 4],
        strides: vec![1],
    }
}

fn fqn_payload(so_key: &str, entries: &[FqnEntry]) -> Vec<u8> {
    let mut o = b"ETCUDAFQN3".to_vec();
    let s = |o: &mut Vec<u8>, v: &str| {
        o.extend((v.len() as u32).to_le_bytes());
        o.extend(v.as_bytes());
    };
    s(&mut o, so_key);
    o.extend((entries.len() as u32).to_le_bytes());
    for e in entries {
        s(&mut o, e.fqn);
        s(&mut o, e.key);
        o.extend(e.nbytes.to_le_bytes());
        o.extend(6i32.to_le_bytes()); // float32
        o.extend(1i32.to_le_bytes()); // CUDA
        o.extend(0i64.to_le_bytes());
        o.extend((e.sizes.len() as u32).to_le_bytes());
        for v in e.sizes.iter().chain(&e.strides) {
            o.extend(v.to_le_bytes());
        }
    }
    o
}

/// Named data for the per-FQN cases: the real `.so` for `*_so_blob`, zeros for every other key.
struct Named {
    so: Vec<u8>,
    zeros: Vec<u8>,
}

unsafe extern "C" fn named_lookup(
    user: *mut c_void,
    key: *const std::ffi::c_char,
    out_data: *mut *const u8,
    out_len: *mut usize,
) -> i32 {
    // SAFETY: `user` is the `Named` that `init_payload` keeps alive across the call; the key is
    // NUL-terminated and the out-pointers are writable (the callback's contract).
    unsafe {
        let n = &*(user as *const Named);
        let b = if std::ffi::CStr::from_ptr(key)
            .to_bytes()
            .ends_with(b"_so_blob")
        {
            &n.so
        } else {
            &n.zeros
        };
        *out_data = b.as_ptr();
        *out_len = b.len();
    }
    0
}

/// `et_cuda_init` through the named-data path with `payload`.
fn init_payload(so: Vec<u8>, payload: Vec<u8>) -> Box<dyn Fn() -> (S, String)> {
    Box::new(move || {
        let named = Named {
            so: so.clone(),
            zeros: vec![0; 64],
        };
        let name = CString::new("forward").unwrap();
        let args = executorch_cuda::ffi::EtCudaInitArgs {
            payload_data: payload.as_ptr(),
            payload_len: payload.len(),
            named_data: Some(named_lookup),
            named_data_user: &named as *const Named as *mut c_void,
            ..init_args(&[], &[], &name)
        };
        let mut h = std::ptr::null_mut();
        // SAFETY: args point at live buffers, `named` outlives the call; the out-pointer is a local.
        let st = status(unsafe { (api().init)(&args, &mut h) });
        if !h.is_null() {
            // SAFETY: a handle the init just made.
            unsafe { (api().destroy)(h) };
        }
        st
    })
}

/// ExecuTorch 1.5's per-FQN payloads: each malformed one is refused when it is parsed, before
/// any blob is used or a device is needed, so the same error comes with and without a GPU.
#[test]
fn per_fqn_payloads() {
    let so = blob("mlp_f32", "forward_so_blob.bin");
    let good = fqn_payload("k_so_blob", &[fqn_entry("fc1.weight", 16)]);
    let mut cases = malformed_payload_cases(&so, &good);
    cases.extend(empty_or_mismatched_payload_cases(&so, &good));
    run_cases("per_fqn_payloads", cases);
}

/// A case whose payload is refused with `frag`, with and without a GPU.
fn payload_case(so: &[u8], name: &'static str, frag: &'static str, payload: Vec<u8>) -> Case {
    let parse = |frag| (ET_CUDA_STATUS_INVALID_PROGRAM, frag);
    Case {
        name,
        expect_gpu: parse(frag),
        expect_cpu: parse(frag),
        run: init_payload(so.to_vec(), payload),
    }
}

/// Truncated or overlong payloads, ranks, sizes and byte counts out of range, a repeated FQN.
fn malformed_payload_cases(so: &[u8], good: &[u8]) -> Vec<Case> {
    let case = |name, frag, payload| payload_case(so, name, frag, payload);
    let mut extra = good.to_vec();
    extra.extend([0xab, 0xcd]);
    let mut r17 = fqn_entry("w", 4);
    r17.sizes = vec![1; 17];
    r17.strides = vec![1; 17];
    let mut wide = fqn_entry("w", 4);
    wide.sizes = vec![1 << 61];
    wide.strides = vec![0];
    vec![
        case(
            "truncated in the first entry",
            "runs past its end",
            good[..good.len() - 5].to_vec(),
        ),
        case(
            "truncated after the magic",
            "runs past its end",
            good[..12].to_vec(),
        ),
        case(
            "extra trailing bytes",
            "2 bytes left after 1 entries",
            extra,
        ),
        case(
            "rank 17",
            "entry 0 (w) has rank 17, above the limit of 16",
            fqn_payload("k_so_blob", &[r17]),
        ),
        case(
            "sizes whose bytes overflow isize",
            "isize::MAX",
            fqn_payload("k_so_blob", &[wide]),
        ),
        case(
            "byte count beyond any allocation",
            "declares 18446744073709551615 bytes",
            fqn_payload(
                "k_so_blob",
                &[FqnEntry {
                    nbytes: u64::MAX,
                    ..fqn_entry("w", 4)
                }],
            ),
        ),
        case(
            "duplicate FQN",
            "entry 1 repeats the FQN fc1.weight",
            fqn_payload(
                "k_so_blob",
                &[fqn_entry("fc1.weight", 16), fqn_entry("fc1.weight", 16)],
            ),
        ),
    ]
}

/// Empty keys and names, a text payload, and named data of another size than declared.
fn empty_or_mismatched_payload_cases(so: &[u8], good: &[u8]) -> Vec<Case> {
    let case = |name, frag, payload| payload_case(so, name, frag, payload);
    let mut nokey = fqn_entry("w", 4);
    nokey.key = "";
    vec![
        case(
            "empty .so key",
            "the .so key is empty",
            fqn_payload("", &[fqn_entry("w", 4)]),
        ),
        case(
            "empty FQN",
            "entry 0's FQN is empty",
            fqn_payload("k_so_blob", &[fqn_entry("", 4)]),
        ),
        case(
            "empty storage key",
            "entry 0 (w) has an empty storage key",
            fqn_payload("k_so_blob", &[nokey]),
        ),
        case(
            "text payload with an empty .so key",
            "<so_key>",
            b"\r\nw".to_vec(),
        ),
        // Well formed, but the named data (64 bytes) is not the size the metadata declares:
        // refused when fetched, before any device work.
        case(
            "storage of another size than declared",
            "has 64 bytes but the metadata declares 16",
            good.to_vec(),
        ),
    ]
}
