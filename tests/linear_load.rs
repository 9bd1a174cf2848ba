//! Issue 31: a per-FQN payload of 2^20 entries (the most a payload may declare) is
//! refused through `et_cuda_init` in well under 2 s, on a CPU-only machine: the payload's
//! parse and its duplicate-FQN check, the checks of the .so and the ELF check it fails are
//! linear. Its storages would be read after those checks (before any device work), so a
//! program whose .so is not loadable is refused before 2^20 named-data lookups; that read is
//! linear too (`per_fqn::tests::reading_every_storage_is_linear_and_reads_each_key_once`;
//! it used to compare each key with every key read before it: 80k entries took 34 s).
//!
//! The work runs on its own thread and the test waits for it with a deadline, so a
//! quadratic path fails the test instead of hanging it. The time asserted is the CPU time
//! of that thread (Linux's `/proc/thread-self/schedstat`; wall time where it cannot be
//! read), so other processes on a busy machine do not count; 2 s in an optimised build,
//! ten times that in an unoptimised one (`cargo test`'s default), still far below what
//! a quadratic path takes (hours: 2^39 key comparisons). The two payloads run one at a
//! time (`SERIAL`): side by side, their gigabyte of allocations slowed each other's CPU
//! time past 2 s on a busy machine.

use executorch_cuda::ffi::api::{et_cuda_init, et_cuda_last_error};
use executorch_cuda::ffi::{
    EtCudaInitArgs, EtCudaMethodConfig, EtCudaStatus, ET_CUDA_STATUS_INVALID_PROGRAM,
};
use std::ffi::{c_char, c_void, CStr};
use std::time::{Duration, Instant};

const ENTRIES: u32 = 1 << 20;
/// The target, for an optimised build.
const TARGET: Duration = Duration::from_secs(2);
/// An unoptimised build's code is about ten times slower.
const DEBUG_FACTOR: u32 = 10;
/// How long the test waits for the thread (wall time, on a machine shared with others).
const DEADLINE: Duration = Duration::from_secs(300);

/// Nanoseconds this thread has run on a CPU, where Linux says.
fn thread_cpu() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns = s.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// The documented `ETCUDAFQN3` layout: `n` entries of float32 `[1]` on CUDA, 4 bytes each,
/// entry `i` named `c<i>` in storage `s<i / per_storage>`.
fn payload(n: u32, per_storage: u32) -> Vec<u8> {
    let mut o = b"ETCUDAFQN3".to_vec();
    let s = |o: &mut Vec<u8>, v: &str| {
        o.extend((v.len() as u32).to_le_bytes());
        o.extend(v.as_bytes());
    };
    s(&mut o, "model_so_blob");
    o.extend(n.to_le_bytes());
    for i in 0..n {
        s(&mut o, &format!("c{i}"));
        s(&mut o, &format!("s{}", i / per_storage));
        o.extend(4u64.to_le_bytes()); // bytes
        o.extend(6i32.to_le_bytes()); // float32
        o.extend(1i32.to_le_bytes()); // CUDA
        o.extend(0i64.to_le_bytes()); // offset
        o.extend(1u32.to_le_bytes()); // rank
        o.extend(1i64.to_le_bytes()); // sizes
        o.extend(1i64.to_le_bytes()); // strides
    }
    o
}

static STORAGE: [u8; 4] = [0; 4];
static NOT_AN_ELF: [u8; 64] = [0x5a; 64];

/// Named data: the `.so` key gets bytes that are no ELF file, every other key 4 bytes.
///
/// # Safety
/// `key` is NUL-terminated, the out-pointers are writable.
unsafe extern "C" fn lookup(
    _user: *mut c_void,
    key: *const c_char,
    out_data: *mut *const u8,
    out_len: *mut usize,
) -> i32 {
    // SAFETY: the callback's contract.
    let k = unsafe { CStr::from_ptr(key) }.to_bytes();
    let b: &[u8] = if k == b"model_so_blob" {
        &NOT_AN_ELF
    } else {
        &STORAGE
    };
    // SAFETY: writable out-pointers (the contract).
    unsafe {
        *out_data = b.as_ptr();
        *out_len = b.len();
    }
    0
}

/// `et_cuda_init` over `payload` on a thread of its own: the status, the message and the
/// time it took, or `None` when it did not return before the deadline.
fn init_within_deadline(payload: Vec<u8>) -> Option<(EtCudaStatus, String, Duration)> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let method = c"forward";
        let args = EtCudaInitArgs {
            so_data: std::ptr::null(),
            so_len: 0,
            weights_data: std::ptr::null(),
            weights_len: 0,
            method_name: method.as_ptr(),
            so_key: std::ptr::null(),
            weights_key: std::ptr::null(),
            use_backend_options: false,
            config: EtCudaMethodConfig::from(&executorch_cuda::MethodConfig::default()),
            share_group: 0,
            payload_data: payload.as_ptr(),
            payload_len: payload.len(),
            named_data: Some(lookup),
            named_data_user: std::ptr::null_mut(),
            named_data_release: None,
        };
        let mut h = std::ptr::null_mut();
        let (t, cpu) = (Instant::now(), thread_cpu());
        // SAFETY: `args` points at live memory for the call; `lookup` follows its contract.
        let st = unsafe { et_cuda_init(&args, &mut h) };
        let took = match (cpu, thread_cpu()) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => t.elapsed(),
        };
        // SAFETY: the library returns a NUL-terminated thread-local string.
        let msg = unsafe { CStr::from_ptr(et_cuda_last_error()) }
            .to_string_lossy()
            .into_owned();
        assert!(h.is_null());
        let _ = tx.send((st, msg, took));
    });
    rx.recv_timeout(DEADLINE).ok()
}

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn check(per_storage: u32) {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let p = payload(ENTRIES, per_storage);
    let Some((st, msg, took)) = init_within_deadline(p) else {
        panic!(
            "et_cuda_init on {ENTRIES} entries ({per_storage} per storage) did not return within {DEADLINE:?}"
        );
    };
    println!("{ENTRIES} entries, {per_storage} per storage: {took:?} of CPU: {msg}");
    assert_eq!(st, ET_CUDA_STATUS_INVALID_PROGRAM, "{msg}");
    assert!(msg.contains("ELF"), "{msg}");
    let limit = if cfg!(debug_assertions) {
        TARGET * DEBUG_FACTOR
    } else {
        TARGET
    };
    assert!(
        took < limit,
        "et_cuda_init on {ENTRIES} entries ({per_storage} per storage) took {took:?}, over {limit:?}"
    );
}

#[test]
fn a_payload_of_2_20_storages_is_refused_in_linear_time() {
    check(1);
}

#[test]
fn a_payload_of_2_20_constants_over_few_storages_is_refused_in_linear_time() {
    check(1024);
}
