//! The bad-input corpus, through the C API of the built cdylib, one test per
//! category. Each case states the expected status and a fragment of the
//! message. The categories whose cases reach their check without a GPU run
//! everywhere (`blobs`, `handles_and_arguments`, `options`); the ones that
//! need a device to get there (`device_init`, `execute_time`) are ignored by
//! the harness on a plain `cargo test` and run on a GPU machine with
//! `--include-ignored`; after them a good program must still load and run.

mod common;
use common::*;
use executorch_cuda::ffi::{
    EtCudaStatus as S, EtCudaTensor, ET_CUDA_STATUS_EXECUTION_FAILED, ET_CUDA_STATUS_INTERNAL,
    ET_CUDA_STATUS_INVALID_ARGUMENT, ET_CUDA_STATUS_INVALID_PROGRAM, ET_CUDA_STATUS_LOAD_FAILED,
    ET_CUDA_STATUS_NO_DEVICE, ET_CUDA_STATUS_OK, ET_CUDA_STATUS_OUT_OF_MEMORY,
};
use std::ffi::{c_void, CString};

/// An execute-time case: name, expected status, message fragment, and the call on a loaded handle.
type ExecCase = (
    &'static str,
    S,
    &'static str,
    Box<dyn Fn(&Handle) -> (S, String)>,
);

struct Case {
    name: &'static str,
    /// Expected status and message fragment with and without a GPU.
    expect_gpu: (S, &'static str),
    expect_cpu: (S, &'static str),
    run: Box<dyn Fn() -> (S, String)>,
}

fn init_bytes(
    so: Vec<u8>,
    w: Vec<u8>,
    key: Option<&'static str>,
    device: i32,
) -> Box<dyn Fn() -> (S, String)> {
    Box::new(
        move || match Handle::from_bytes(&so, &w, key, device, false) {
            Ok(h) => {
                drop(h);
                (ET_CUDA_STATUS_OK, String::new())
            }
            Err(e) => e,
        },
    )
}

fn status(st: S) -> (S, String) {
    (st, last_error())
}

fn patched(mut b: Vec<u8>, at: usize, bytes: &[u8]) -> Vec<u8> {
    b[at..at + bytes.len()].copy_from_slice(bytes);
    b
}

fn replace_all(mut b: Vec<u8>, from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut i = 0;
    while i + from.len() <= b.len() {
        if &b[i..i + from.len()] == from {
            b[i..i + to.len()].copy_from_slice(to);
        }
        i += 1;
    }
    b
}

const FAKE_AOTI: &str = include_str!("../c_tests/fake_aoti.c");
const NO_CONTAINER: &str = "int not_a_model(void) { return 42; }\n";

/// Execute on a loaded handle with one input/output descriptor pair.
fn exec_one(h: &Handle, input: EtCudaTensor, output: EtCudaTensor, placement: i32) -> (S, String) {
    let mut outs = [output];
    // SAFETY: descriptors point at live buffers (or are deliberately bad).
    status(unsafe { (api().execute)(h.0, &input, 1, outs.as_mut_ptr(), 1, placement) })
}

/// Whether this machine has a CUDA device.
fn gpu() -> bool {
    let mut n = 0;
    // SAFETY: out-pointer to a local.
    unsafe { (api().device_count)(&mut n) == ET_CUDA_STATUS_OK && n > 0 }
}

/// Run one category's cases; each must give its expected status and message fragment.
fn run_cases(category: &str, cases: Vec<Case>) {
    let gpu = gpu();
    let mut failures = Vec::new();
    for c in &cases {
        let (want, frag) = if gpu { c.expect_gpu } else { c.expect_cpu };
        let (got, msg) = (c.run)();
        let ok = got == want && msg.contains(frag);
        println!(
            "[{}] {category}: {}: {got} \"{msg}\"",
            if ok { "ok" } else { "FAIL" },
            c.name
        );
        if !ok {
            failures.push(format!(
                "{}: expected {want} with {frag:?}, got {got} {msg:?}",
                c.name
            ));
        }
    }
    println!(
        "{category}: {} bad-input cases run, {} failed",
        cases.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The status and message of an init whose configuration has `cache` graphs and device `dev`.
fn init_with_config(cache: u32, dev: i32) -> (S, String) {
    let so = blob("mlp_f32", "forward_so_blob.bin");
    let name = CString::new("forward").unwrap();
    let base = init_args(&so, &[], &name);
    let args = executorch_cuda::ffi::EtCudaInitArgs {
        weights_data: std::ptr::null(),
        config: executorch_cuda::ffi::EtCudaMethodConfig {
            graph_cache_size: cache,
            device_index: dev,
            ..base.config
        },
        ..base
    };
    let mut h = std::ptr::null_mut();
    // SAFETY: args point at live buffers; the out-pointer is a local.
    status(unsafe { (api().init)(&args, &mut h) })
}

#[test]
#[allow(unused_variables)]
fn blobs() {
    let so = blob("mlp_f32", "forward_so_blob.bin");
    let w = blob("mlp_f32", "forward_weights_blob.bin");
    let fake = c_shared_object("fake_aoti", FAKE_AOTI, "ET_CUDA_FAKE_AOTI");
    let no_container = c_shared_object("no_container", NO_CONTAINER, "ET_CUDA_NO_CONTAINER_SO");
    let mut lcg = 0x2545f4914f6cdd1du64;
    let random: Vec<u8> = (0..100_000)
        .map(|_| {
            lcg = lcg
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (lcg >> 56) as u8
        })
        .collect();
    let mut with_magic = random.clone();
    with_magic[..4].copy_from_slice(b"\x7fELF");
    let nodev = (ET_CUDA_STATUS_NO_DEVICE, "no CUDA");
    run_cases(
        "blobs",
        vec![
            Case {
                name: "empty .so",
                expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "empty"),
                expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "empty"),
                run: init_bytes(vec![], w.clone(), None, 0),
            },
            Case {
                name: "truncated to 10%",
                expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "truncated"),
                expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "truncated"),
                run: init_bytes(so[..so.len() / 10].to_vec(), w.clone(), None, 0),
            },
            Case {
                name: "truncated to 50%",
                expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "truncated"),
                expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "truncated"),
                run: init_bytes(so[..so.len() / 2].to_vec(), w.clone(), None, 0),
            },
            Case {
                name: "truncated to 90%",
                expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "truncated"),
                expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "truncated"),
                run: init_bytes(so[..so.len() * 9 / 10].to_vec(), w.clone(), None, 0),
            },
            Case {
                name: "truncated to 63 bytes",
                expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "no ELF header"),
                expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "no ELF header"),
                run: init_bytes(so[..63].to_vec(), w.clone(), None, 0),
            },
            Case {
                name: "random bytes",
                expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "no ELF header"),
                expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "no ELF header"),
                run: init_bytes(random.clone(), w.clone(), None, 0),
            },
            Case {
                name: "random bytes after an ELF magic",
                expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "not a loadable ELF"),
                expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "not a loadable ELF"),
                run: init_bytes(with_magic, w.clone(), None, 0),
            },
            Case {
                name: "32-bit ELF",
                expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "not 64-bit"),
                expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "not 64-bit"),
                run: init_bytes(patched(so.clone(), 4, &[1]), w.clone(), None, 0),
            },
            Case {
                name: "big-endian ELF",
                expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "little-endian"),
                expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "little-endian"),
                run: init_bytes(patched(so.clone(), 5, &[2]), w.clone(), None, 0),
            },
            Case {
                name: "AArch64 ELF",
                expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "ELF machine 183"),
                expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "ELF machine 183"),
                run: init_bytes(
                    patched(so.clone(), 18, &183u16.to_le_bytes()),
                    w.clone(),
                    None,
                    0,
                ),
            },
            Case {
                name: "ELF executable, not a shared object",
                expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "not a shared object"),
                expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "not a shared object"),
                run: init_bytes(
                    patched(so.clone(), 16, &2u16.to_le_bytes()),
                    w.clone(),
                    None,
                    0,
                ),
            },
            Case {
                name: "program headers past the end",
                expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "program header table"),
                expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "program header table"),
                run: init_bytes(
                    patched(so.clone(), 32, &(so.len() as u64).to_le_bytes()),
                    w.clone(),
                    None,
                    0,
                ),
            },
            Case {
                name: "SHA-256 key mismatch",
                expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "do not match"),
                expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "do not match"),
                run: init_bytes(
                    so.clone(),
                    w.clone(),
                    Some(
                        "0000000000000000000000000000000000000000000000000000000000000000_so_blob",
                    ),
                    0,
                ),
            },
        ],
    );
}

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
    let parse = |frag| (ET_CUDA_STATUS_INVALID_PROGRAM, frag);
    let case = |name, frag, payload: Vec<u8>| Case {
        name,
        expect_gpu: parse(frag),
        expect_cpu: parse(frag),
        run: init_payload(so.clone(), payload),
    };
    let mut extra = good.clone();
    extra.extend([0xab, 0xcd]);
    let mut r17 = fqn_entry("w", 4);
    r17.sizes = vec![1; 17];
    r17.strides = vec![1; 17];
    let mut wide = fqn_entry("w", 4);
    wide.sizes = vec![1 << 61];
    wide.strides = vec![0];
    let mut nokey = fqn_entry("w", 4);
    nokey.key = "";
    run_cases(
        "per_fqn_payloads",
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
                good.clone(),
            ),
        ],
    );
}

#[test]
#[allow(unused_variables)]
fn handles_and_arguments() {
    let so = blob("mlp_f32", "forward_so_blob.bin");
    let w = blob("mlp_f32", "forward_weights_blob.bin");
    let fake = c_shared_object("fake_aoti", FAKE_AOTI, "ET_CUDA_FAKE_AOTI");
    let no_container = c_shared_object("no_container", NO_CONTAINER, "ET_CUDA_NO_CONTAINER_SO");
    let mut lcg = 0x2545f4914f6cdd1du64;
    let random: Vec<u8> = (0..100_000)
        .map(|_| {
            lcg = lcg
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (lcg >> 56) as u8
        })
        .collect();
    let mut with_magic = random.clone();
    with_magic[..4].copy_from_slice(b"\x7fELF");
    let nodev = (ET_CUDA_STATUS_NO_DEVICE, "no CUDA");
    let mut cases = vec![
        Case {
            name: "null init args",
            expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "args is null"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "args is null"),
            run: Box::new(|| {
                let mut h = std::ptr::null_mut();
                // SAFETY: null args is the case under test.
                status(unsafe { (api().init)(std::ptr::null(), &mut h) })
            }),
        },
        Case {
            name: "null out_handle",
            expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "out_handle is null"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "out_handle is null"),
            run: Box::new(|| {
                // SAFETY: null out-pointer is the case under test.
                status(unsafe { (api().init)(std::ptr::dangling(), std::ptr::null_mut()) })
            }),
        },
        Case {
            name: "execute on a null handle",
            expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "handle is null"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "handle is null"),
            run: Box::new(|| {
                // SAFETY: null handle is the case under test.
                status(unsafe {
                    (api().execute)(
                        std::ptr::null_mut(),
                        std::ptr::null(),
                        0,
                        std::ptr::null_mut(),
                        0,
                        1,
                    )
                })
            }),
        },
        Case {
            name: "made-up handle",
            expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "not a live handle"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "not a live handle"),
            run: Box::new(|| {
                let mut n = 0usize;
                // SAFETY: a pointer the library never handed out; it is only looked up.
                status(unsafe { (api().num_inputs)(0xdead_bee0usize as *const c_void, &mut n) })
            }),
        },
        Case {
            name: "destroy of a made-up handle",
            expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "not a live handle"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "not a live handle"),
            run: Box::new(|| {
                // SAFETY: as above.
                status(unsafe { (api().destroy)(0xdead_bee0usize as *mut c_void) })
            }),
        },
        Case {
            name: "num_inputs with a null out-pointer",
            expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "is null"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "is null"),
            run: Box::new(|| {
                // SAFETY: null pointers are the case under test.
                status(unsafe { (api().num_inputs)(std::ptr::null(), std::ptr::null_mut()) })
            }),
        },
        Case {
            name: "memcpy to a null destination",
            expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "dst is null"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "dst is null"),
            run: Box::new(|| {
                let x = 1u32;
                // SAFETY: null dst is the case under test.
                status(unsafe {
                    (api().memcpy)(
                        std::ptr::null(),
                        std::ptr::null_mut(),
                        (&x as *const u32).cast(),
                        4,
                    )
                })
            }),
        },
        Case {
            name: "shim empty_strided larger than the GPU",
            expect_gpu: (ET_CUDA_STATUS_INTERNAL, "cuMemAllocFromPoolAsync"),
            expect_cpu: (ET_CUDA_STATUS_INTERNAL, "no CUDA"),
            run: Box::new(|| {
                let mut h = std::ptr::null_mut();
                // SAFETY: arrays of one element; out-pointer to a local.
                let rc = unsafe {
                    (api().empty_strided)(
                        1,
                        [1i64 << 40].as_ptr(),
                        [1i64].as_ptr(),
                        6,
                        1,
                        0,
                        &mut h,
                    )
                };
                assert!(h.is_null());
                (
                    if rc == 1 {
                        ET_CUDA_STATUS_INTERNAL
                    } else {
                        ET_CUDA_STATUS_OK
                    },
                    last_error(),
                )
            }),
        },
    ];
    // Enumerations cross the boundary as integers: out-of-range values are errors.
    cases.push(Case {
        name: "execute with output placement 7",
        expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "output placement 7"),
        expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "output placement 7"),
        run: Box::new(|| {
            // SAFETY: no arrays are read; the placement is checked first.
            status(unsafe {
                (api().execute)(
                    0xdead_bee0usize as *mut c_void,
                    std::ptr::null(),
                    0,
                    std::ptr::null_mut(),
                    0,
                    7,
                )
            })
        }),
    });
    cases.push(Case {
        name: "execute with output placement -1",
        expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "output placement -1"),
        expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "output placement -1"),
        run: Box::new(|| {
            // SAFETY: as above.
            status(unsafe {
                (api().execute)(
                    0xdead_bee0usize as *mut c_void,
                    std::ptr::null(),
                    0,
                    std::ptr::null_mut(),
                    0,
                    -1,
                )
            })
        }),
    });
    cases.push(Case {
        name: "init with a graph cache of 0",
        expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "graph cache size 0"),
        expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "graph cache size 0"),
        run: Box::new(|| init_with_config(0, 0)),
    });
    cases.push(Case {
        name: "init with device -2",
        expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "device index -2"),
        expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "device index -2"),
        run: Box::new(|| init_with_config(8, -2)),
    });
    cases.push(Case {
        name: "log callback with level 9",
        expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "log level 9"),
        expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "log level 9"),
        run: Box::new(|| {
            // SAFETY: a null callback and user pointer are never called.
            status(unsafe { (api().set_log_callback)(None, std::ptr::null_mut(), 9) })
        }),
    });
    run_cases("handles_and_arguments", cases);
    // Without a device the library still answers cleanly after all of them.
    if !gpu() {
        let (st, m) = init_bytes(so.clone(), w.clone(), None, 0)();
        assert_eq!(st, ET_CUDA_STATUS_NO_DEVICE, "{m}");
    }
}

#[test]
#[allow(unused_variables)]
fn options() {
    let so = blob("mlp_f32", "forward_so_blob.bin");
    let w = blob("mlp_f32", "forward_weights_blob.bin");
    let fake = c_shared_object("fake_aoti", FAKE_AOTI, "ET_CUDA_FAKE_AOTI");
    let no_container = c_shared_object("no_container", NO_CONTAINER, "ET_CUDA_NO_CONTAINER_SO");
    let mut lcg = 0x2545f4914f6cdd1du64;
    let random: Vec<u8> = (0..100_000)
        .map(|_| {
            lcg = lcg
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (lcg >> 56) as u8
        })
        .collect();
    let mut with_magic = random.clone();
    with_magic[..4].copy_from_slice(b"\x7fELF");
    let nodev = (ET_CUDA_STATUS_NO_DEVICE, "no CUDA");
    run_cases(
        "options",
        vec![
            Case {
                name: "option of the wrong type (bool as int)",
                expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "must be a bool"),
                expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "must be a bool"),
                run: Box::new(|| {
                    let k = CString::new("use_shared_cuda_stream").unwrap();
                    // SAFETY: NUL-terminated key.
                    status(unsafe { (api().set_option_int)(k.as_ptr(), 1) })
                }),
            },
            Case {
                name: "option of the wrong type (string as bool)",
                expect_gpu: (
                    ET_CUDA_STATUS_INVALID_ARGUMENT,
                    "must be a method name string",
                ),
                expect_cpu: (
                    ET_CUDA_STATUS_INVALID_ARGUMENT,
                    "must be a method name string",
                ),
                run: Box::new(|| {
                    let k = CString::new("skip_copy_output_to_cpu_for_method").unwrap();
                    // SAFETY: NUL-terminated key.
                    status(unsafe { (api().set_option_bool)(k.as_ptr(), true) })
                }),
            },
            Case {
                name: "method list over 255 bytes",
                expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "at most 255"),
                expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "at most 255"),
                run: Box::new(|| {
                    let (k, v) = (
                        CString::new("enable_cuda_graph_for_method").unwrap(),
                        CString::new("x".repeat(300)).unwrap(),
                    );
                    // SAFETY: NUL-terminated strings.
                    status(unsafe { (api().set_option_str)(k.as_ptr(), v.as_ptr()) })
                }),
            },
            Case {
                name: "negative device_index option",
                expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "not a valid device index"),
                expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "not a valid device index"),
                run: Box::new(|| {
                    let k = CString::new("device_index").unwrap();
                    // SAFETY: NUL-terminated key.
                    status(unsafe { (api().set_option_int)(k.as_ptr(), -3) })
                }),
            },
            Case {
                name: "option string too long",
                expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "at most 255"),
                expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "at most 255"),
                run: Box::new(|| {
                    let (k, v) = (
                        CString::new("skip_copy_output_to_cpu_for_method").unwrap(),
                        CString::new("m".repeat(400)).unwrap(),
                    );
                    // SAFETY: NUL-terminated strings.
                    status(unsafe { (api().set_option_str)(k.as_ptr(), v.as_ptr()) })
                }),
            },
            Case {
                name: "get_option_str into a zero-length buffer",
                expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "buf_len is 0"),
                expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "buf_len is 0"),
                run: Box::new(|| {
                    let k = CString::new("enable_cuda_graph_for_method").unwrap();
                    let mut b = [0 as std::ffi::c_char; 1];
                    // SAFETY: NUL-terminated key; a zero length is the case under test.
                    status(unsafe { (api().get_option_str)(k.as_ptr(), b.as_mut_ptr(), 0) })
                }),
            },
        ],
    );
    // SAFETY: no arguments.
    unsafe { (api().reset_options)() };
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
#[allow(unused_variables)]
fn device_init() {
    require_gpu("device_init");
    let so = blob("mlp_f32", "forward_so_blob.bin");
    let w = blob("mlp_f32", "forward_weights_blob.bin");
    let fake = c_shared_object("fake_aoti", FAKE_AOTI, "ET_CUDA_FAKE_AOTI");
    let no_container = c_shared_object("no_container", NO_CONTAINER, "ET_CUDA_NO_CONTAINER_SO");
    let mut lcg = 0x2545f4914f6cdd1du64;
    let random: Vec<u8> = (0..100_000)
        .map(|_| {
            lcg = lcg
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (lcg >> 56) as u8
        })
        .collect();
    let mut with_magic = random.clone();
    with_magic[..4].copy_from_slice(b"\x7fELF");
    let nodev = (ET_CUDA_STATUS_NO_DEVICE, "no CUDA");
    let mut cases = vec![
        Case {
            name: "device index beyond the machine",
            expect_gpu: (ET_CUDA_STATUS_NO_DEVICE, "device(s)"),
            expect_cpu: nodev,
            run: init_bytes(so.clone(), w.clone(), None, 7),
        },
        Case {
            name: "negative device index",
            expect_gpu: (
                ET_CUDA_STATUS_INVALID_ARGUMENT,
                "device index -1 is negative",
            ),
            expect_cpu: (
                ET_CUDA_STATUS_INVALID_ARGUMENT,
                "device index -1 is negative",
            ),
            run: init_bytes(so.clone(), w.clone(), None, -1),
        },
        Case {
            name: "weights blob too short",
            expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "the model expects 38440"),
            expect_cpu: nodev,
            run: init_bytes(so.clone(), w[..100].to_vec(), None, 0),
        },
        Case {
            name: "weights blob too long",
            expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "the model expects 38440"),
            expect_cpu: nodev,
            run: init_bytes(so.clone(), [w.clone(), vec![0; 8]].concat(), None, 0),
        },
        Case {
            name: "needs a newer glibc",
            expect_gpu: (ET_CUDA_STATUS_LOAD_FAILED, "GLIBC_2.99"),
            expect_cpu: nodev,
            run: init_bytes(
                replace_all(so.clone(), b"GLIBC_2.38", b"GLIBC_2.99"),
                w.clone(),
                None,
                0,
            ),
        },
        Case {
            name: "device allocation larger than the GPU",
            expect_gpu: (ET_CUDA_STATUS_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"),
            expect_cpu: nodev,
            run: Box::new(|| {
                let mut p = std::ptr::null_mut();
                // SAFETY: out-pointer to a local.
                status(unsafe { (api().alloc_device)(0, 1 << 42, &mut p) })
            }),
        },
    ];
    if let Some(nc) = no_container {
        cases.push(Case {
            name: "ELF without container symbols",
            expect_gpu: (
                ET_CUDA_STATUS_INVALID_PROGRAM,
                "does not export AOTInductorModelContainerCreateWithDevice",
            ),
            expect_cpu: nodev,
            run: init_bytes(nc, vec![], None, 0),
        });
    }
    if let Some(f) = fake.clone() {
        std::env::set_var("FAKE_AOTI_BLOB_SIZE", "16");
        cases.push(Case {
            name: "fake model: weights of the wrong size",
            expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "expects 16"),
            expect_cpu: nodev,
            run: init_bytes(f.clone(), vec![0; 15], None, 0),
        });
        let f2 = f.clone();
        cases.push(Case {
            name: "fake model: container creation throws",
            expect_gpu: (
                ET_CUDA_STATUS_LOAD_FAILED,
                "CreateWithDevice(cuda:0) failed",
            ),
            expect_cpu: nodev,
            run: Box::new(move || {
                std::env::set_var("FAKE_AOTI_CREATE_FAILS", "1");
                let r = init_bytes(f2.clone(), vec![0; 16], None, 0)();
                std::env::remove_var("FAKE_AOTI_CREATE_FAILS");
                r
            }),
        });
    }
    run_cases("device_init", cases);
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
#[allow(unused_variables)]
fn execute_time() {
    require_gpu("execute_time");
    let gpu = true;
    let so = blob("mlp_f32", "forward_so_blob.bin");
    let w = blob("mlp_f32", "forward_weights_blob.bin");
    let fake = c_shared_object("fake_aoti", FAKE_AOTI, "ET_CUDA_FAKE_AOTI");
    let no_container = c_shared_object("no_container", NO_CONTAINER, "ET_CUDA_NO_CONTAINER_SO");
    let mut lcg = 0x2545f4914f6cdd1du64;
    let random: Vec<u8> = (0..100_000)
        .map(|_| {
            lcg = lcg
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (lcg >> 56) as u8
        })
        .collect();
    let mut with_magic = random.clone();
    with_magic[..4].copy_from_slice(b"\x7fELF");
    let nodev = (ET_CUDA_STATUS_NO_DEVICE, "no CUDA");
    // Execute-time cases on a real model (GPU only).
    let mut exec_cases: Vec<ExecCase> = Vec::new();
    let case = cases_of("mlp_f32");
    let good_in = case.inputs[0].bytes.clone();
    let o = case.outputs[0].clone();
    let mk_in = move |dt: &str, sizes: &[i64], bytes: &[u8]| {
        desc(dt, sizes, bytes.as_ptr() as *mut c_void, bytes.len())
    };
    {
        let (gi, o2) = (good_in.clone(), o.clone());
        exec_cases.push((
            "wrong number of inputs",
            ET_CUDA_STATUS_INVALID_ARGUMENT,
            "takes 1 inputs and 1 outputs, got 2",
            Box::new(move |h| {
                let ins = [
                    mk_in("float32", &[4, 64], &gi),
                    mk_in("float32", &[4, 64], &gi),
                ];
                let mut out = vec![0u8; o2.bytes.len()];
                let mut outs = [desc(
                    "float32",
                    &o2.sizes,
                    out.as_mut_ptr().cast(),
                    out.len(),
                )];
                // SAFETY: descriptors of live buffers.
                status(unsafe { (api().execute)(h.0, ins.as_ptr(), 2, outs.as_mut_ptr(), 1, 1) })
            }),
        ));
    }
    {
        let gi = good_in.clone();
        exec_cases.push((
            "wrong number of outputs",
            ET_CUDA_STATUS_INVALID_ARGUMENT,
            "got 1 and 0",
            Box::new(move |h| {
                let ins = [mk_in("float32", &[4, 64], &gi)];
                // SAFETY: descriptors of live buffers.
                status(unsafe { (api().execute)(h.0, ins.as_ptr(), 1, std::ptr::null_mut(), 0, 1) })
            }),
        ));
    }
    let out_desc = {
        let o = o.clone();
        move |buf: &mut Vec<u8>| desc(&o.dtype, &o.sizes, buf.as_mut_ptr().cast(), buf.len())
    };
    macro_rules! exec_case {
        ($name:expr, $st:expr, $frag:expr, |$gi:ident, $out:ident| $body:block) => {{
            let $gi = good_in.clone();
            let od = out_desc.clone();
            exec_cases.push((
                $name,
                $st,
                $frag,
                Box::new(move |h| {
                    let mut buf = vec![0u8; 160];
                    let $out = od(&mut buf);
                    let input: EtCudaTensor = $body;
                    exec_one(h, input, $out, 1)
                }),
            ));
        }};
    }
    exec_case!(
        "input rank above 16",
        ET_CUDA_STATUS_INVALID_ARGUMENT,
        "ndim 17 out of range",
        |gi, _o| {
            let mut d = mk_in("float32", &[4, 64], &gi);
            d.ndim = 17;
            d
        }
    );
    exec_case!(
        "negative input size",
        ET_CUDA_STATUS_INVALID_ARGUMENT,
        "negative",
        |gi, _o| {
            let mut d = mk_in("float32", &[4, 64], &gi);
            d.sizes[0] = -4;
            d
        }
    );
    exec_case!(
        "non-contiguous input strides",
        ET_CUDA_STATUS_INVALID_ARGUMENT,
        "non-contiguous strides",
        |gi, _o| {
            let mut d = mk_in("float32", &[4, 64], &gi);
            d.strides[0] = 1;
            d.strides[1] = 4;
            d
        }
    );
    exec_case!(
        "input buffer smaller than its sizes",
        ET_CUDA_STATUS_INVALID_ARGUMENT,
        "needs 1024 bytes but the buffer has 1000",
        |gi, _o| {
            let mut d = mk_in("float32", &[4, 64], &gi);
            d.nbytes = 1000;
            d
        }
    );
    exec_case!(
        "null input data",
        ET_CUDA_STATUS_INVALID_ARGUMENT,
        "data is null",
        |gi, _o| {
            let mut d = mk_in("float32", &[4, 64], &gi);
            d.data = std::ptr::null_mut();
            d
        }
    );
    exec_case!(
        "unknown input dtype",
        ET_CUDA_STATUS_INVALID_ARGUMENT,
        "unknown dtype code 99",
        |gi, _o| {
            let mut d = mk_in("float32", &[4, 64], &gi);
            d.dtype = 99;
            d
        }
    );
    {
        let gi = good_in.clone();
        let o2 = o.clone();
        exec_cases.push((
            "output dtype differs from the model's",
            ET_CUDA_STATUS_INVALID_ARGUMENT,
            "the caller expects dtype 15 but the model returns dtype 6",
            Box::new(move |h| {
                let mut buf = vec![0u8; 160];
                let mut od = desc(&o2.dtype, &o2.sizes, buf.as_mut_ptr().cast(), buf.len());
                od.dtype = 15;
                exec_one(h, mk_in("float32", &[4, 64], &gi), od, 1)
            }),
        ));
        let gi = good_in.clone();
        let o3 = o.clone();
        exec_cases.push((
            "output buffer too small",
            ET_CUDA_STATUS_INVALID_ARGUMENT,
            "output 0 needs 160 bytes but its buffer has 100",
            Box::new(move |h| {
                let mut buf = vec![0u8; 160];
                let mut od = desc(&o3.dtype, &o3.sizes, buf.as_mut_ptr().cast(), 100);
                od.nbytes = 100;
                exec_one(h, mk_in("float32", &[4, 64], &gi), od, 1)
            }),
        ));
    }

    let mut ran = 0;
    let mut failures: Vec<String> = Vec::new();
    if gpu {
        let h = Handle::load("mlp_f32", 0, false).unwrap();
        for (name, want, frag, f) in &exec_cases {
            let (got, msg) = f(&h);
            ran += 1;
            let ok = got == *want && msg.contains(frag);
            println!(
                "[{}] {name}: {got:?} \"{msg}\"",
                if ok { "ok" } else { "FAIL" }
            );
            if !ok {
                failures.push(format!(
                    "{name}: expected {want:?} with {frag:?}, got {got:?} {msg:?}"
                ));
            }
            // The same handle still runs a good case after every bad one.
            let mut input = good_in.clone();
            let mut out = vec![0u8; o.bytes.len()];
            let (st, m) = exec_one(
                &h,
                desc("float32", &[4, 64], input.as_mut_ptr().cast(), input.len()),
                desc(&o.dtype, &o.sizes, out.as_mut_ptr().cast(), out.len()),
                1,
            );
            assert_eq!(st, ET_CUDA_STATUS_OK, "good execute after {name}: {m}");
            assert!(compare("float32", &out, &o.bytes).1, "after {name}");
        }
        if let Some(f) = fake {
            // The fake model: a failing run, and an out-of-memory inside the run; the next run works.
            let h = Handle::from_bytes(&f, &[0; 16], None, 0, false).unwrap();
            for (name, dt, want, frag) in [
                (
                    "model run fails",
                    "int32",
                    ET_CUDA_STATUS_EXECUTION_FAILED,
                    "AOTInductorModelContainerRun failed",
                ),
                (
                    "allocation larger than the GPU inside a run",
                    "int64",
                    ET_CUDA_STATUS_EXECUTION_FAILED,
                    "CUDA_ERROR_OUT_OF_MEMORY",
                ),
            ] {
                let src = [1u8; 64];
                let mut dst = vec![0u8; 64];
                let (got, msg) = exec_one(
                    &h,
                    desc(
                        dt,
                        &[16 / if dt == "int64" { 2 } else { 1 }],
                        src.as_ptr() as *mut c_void,
                        64,
                    ),
                    desc(
                        dt,
                        &[16 / if dt == "int64" { 2 } else { 1 }],
                        dst.as_mut_ptr().cast(),
                        64,
                    ),
                    1,
                );
                ran += 1;
                let ok = got == want && msg.contains(frag);
                println!(
                    "[{}] fake model: {name}: {got:?} \"{msg}\"",
                    if ok { "ok" } else { "FAIL" }
                );
                if !ok {
                    failures.push(format!("fake {name}: got {got:?} {msg:?}"));
                }
                let src: Vec<u8> = (0..64).collect();
                let mut dst = vec![0u8; 64];
                let (st, m) = exec_one(
                    &h,
                    desc("float32", &[16], src.as_ptr() as *mut c_void, 64),
                    desc("float32", &[16], dst.as_mut_ptr().cast(), 64),
                    1,
                );
                assert_eq!(st, ET_CUDA_STATUS_OK, "fake model after {name}: {m}");
                assert_eq!(src, dst, "the fake model copies its input");
            }
        }
        // A destroyed handle: execute, a second destroy and stats are errors, not use-after-free.
        let dead = Handle::load("mlp_f32", 0, false).unwrap();
        let p = dead.0;
        std::mem::forget(dead);
        // SAFETY: a live handle, destroyed once here.
        assert_eq!(unsafe { (api().destroy)(p) }, ET_CUDA_STATUS_OK);
        let mut input = good_in.clone();
        let mut out = vec![0u8; o.bytes.len()];
        for (name, (got, msg)) in [
            (
                "execute after destroy",
                exec_one(
                    &std::mem::ManuallyDrop::new(Handle(p)),
                    desc("float32", &[4, 64], input.as_mut_ptr().cast(), input.len()),
                    desc(&o.dtype, &o.sizes, out.as_mut_ptr().cast(), out.len()),
                    1,
                ),
            ),
            // SAFETY: the destroyed handle is only looked up.
            ("double destroy", status(unsafe { (api().destroy)(p) })),
        ] {
            ran += 1;
            let ok = got == ET_CUDA_STATUS_INVALID_ARGUMENT && msg.contains("not a live handle");
            println!(
                "[{}] {name}: {got:?} \"{msg}\"",
                if ok { "ok" } else { "FAIL" }
            );
            if !ok {
                failures.push(format!("{name}: got {got:?} {msg:?}"));
            }
        }
        // After all of it, a good program still loads and runs.
        let h = Handle::load("mlp_f32", 0, false).unwrap();
        let mut input = good_in.clone();
        let mut out = vec![0u8; o.bytes.len()];
        let (st, m) = exec_one(
            &h,
            desc("float32", &[4, 64], input.as_mut_ptr().cast(), input.len()),
            desc(&o.dtype, &o.sizes, out.as_mut_ptr().cast(), out.len()),
            1,
        );
        assert_eq!(st, ET_CUDA_STATUS_OK, "{m}");
        assert!(compare("float32", &out, &o.bytes).1);
    }
    println!(
        "execute_time: {ran} bad-input cases run, {} failed",
        failures.len()
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

fn cases_of(fx: &str) -> common::Case {
    common::cases(fx, "forward").remove(0)
}
