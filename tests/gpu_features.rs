//! GPU tests of the decode-loop features through the C API: CUDA graphs
//! keyed by input shape (replay equal to eager execution bit for bit, cache
//! hits, misses and eviction, fallback when a capture fails, replay after
//! destroy and reload), weights shared across methods, the caller's stream,
//! and the device allocator ExecuTorch's device memory planning uses.
//! They need a CUDA device: a plain `cargo test` reports them as ignored.
//! They set process-wide backend options: run them with `--test-threads=1`.

mod common;
use common::*;
use executorch_cuda::ffi::{
    EtCudaInitArgs, EtCudaStats, EtCudaTensor, ET_CUDA_STATUS_INVALID_ARGUMENT, ET_CUDA_STATUS_OK,
};
use std::ffi::{c_void, CString};

const COPY: i32 = 1;
const DEVICE: i32 = 2;
const IGNORE: &str =
    "needs a CUDA device: run with --include-ignored --test-threads=1 on a GPU machine";

fn set_str(key: &str, v: &str) {
    let (k, v) = (CString::new(key).unwrap(), CString::new(v).unwrap());
    assert_eq!(
        // SAFETY: NUL-terminated strings.
        unsafe { (api().set_option_str)(k.as_ptr(), v.as_ptr()) },
        ET_CUDA_STATUS_OK,
        "{}",
        last_error()
    );
}
fn set_bool(key: &str, v: bool) {
    let k = CString::new(key).unwrap();
    assert_eq!(
        // SAFETY: NUL-terminated key.
        unsafe { (api().set_option_bool)(k.as_ptr(), v) },
        ET_CUDA_STATUS_OK,
        "{}",
        last_error()
    );
}
fn set_int(key: &str, v: i64) {
    let k = CString::new(key).unwrap();
    assert_eq!(
        // SAFETY: NUL-terminated key.
        unsafe { (api().set_option_int)(k.as_ptr(), v) },
        ET_CUDA_STATUS_OK,
        "{}",
        last_error()
    );
}
fn reset_options() {
    // SAFETY: no arguments.
    assert_eq!(unsafe { (api().reset_options)() }, ET_CUDA_STATUS_OK);
}

/// Load `so`/`w` with the process-wide options (as the ExecuTorch adapter does).
fn load_with_options(so: &[u8], w: &[u8], group: u64) -> Handle {
    let name = CString::new("forward").unwrap();
    let args = EtCudaInitArgs {
        use_backend_options: true,
        share_group: group,
        ..init_args(so, w, &name)
    };
    let mut h = std::ptr::null_mut();
    // SAFETY: args point at live buffers for the duration of the call.
    let st = unsafe { (api().init)(&args, &mut h) };
    assert_eq!(st, ET_CUDA_STATUS_OK, "init: {}", last_error());
    Handle(h)
}

fn load_fixture(fx: &str, group: u64) -> Handle {
    load_with_options(
        &blob(fx, "forward_so_blob.bin"),
        &blob(fx, "forward_weights_blob.bin"),
        group,
    )
}

fn graph_count(h: &Handle) -> usize {
    let mut n = 0;
    assert_eq!(
        // SAFETY: live handle; out-pointer to a local.
        unsafe { (api().graph_count)(h.0, &mut n) },
        ET_CUDA_STATUS_OK
    );
    n
}

fn delta(a: &EtCudaStats, b: &EtCudaStats) -> (u64, u64, u64, u64) {
    (
        b.graph_captures - a.graph_captures,
        b.graph_replays - a.graph_replays,
        b.graph_fallbacks - a.graph_fallbacks,
        b.host_waits - a.host_waits,
    )
}

/// One execute of `case` with host inputs and host outputs.
fn run_host(h: &Handle, case: &Case) -> Vec<Vec<u8>> {
    run_host_raw(RawHandle(h.0), case)
}

// The tests by subject (they keep their names: `include!`, not `mod`).
include!("gpu_features/graphs.rs");
include!("gpu_features/streams_and_memory.rs");
include!("gpu_features/threads_and_reloads.rs");
