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

/// What every category starts from, made in this order: the fixture's `.so` and weights, the
/// two compiled C objects (`None` without a C compiler), 100,000 pseudo-random bytes and the
/// same after an ELF magic, and the expectation of a case that needs a device, without one.
struct Inputs {
    so: Vec<u8>,
    w: Vec<u8>,
    fake: Option<Vec<u8>>,
    no_container: Option<Vec<u8>>,
    random: Vec<u8>,
    with_magic: Vec<u8>,
    nodev: (S, &'static str),
}

fn inputs() -> Inputs {
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
    Inputs {
        so,
        w,
        fake,
        no_container,
        random,
        with_magic,
        nodev,
    }
}

// One file per category (their tests keep their names: `include!`, not `mod`).
include!("bad_input/blobs.rs");
include!("bad_input/per_fqn_payloads.rs");
include!("bad_input/handles_and_arguments.rs");
include!("bad_input/options.rs");
include!("bad_input/device_init.rs");
include!("bad_input/execute_time.rs");

fn cases_of(fx: &str) -> common::Case {
    common::cases(fx, "forward").remove(0)
}
