//! `aoti_torch_cuda__weight_int4pack_mm` without a GPU: every argument check
//! through the C signature (a failure code and a message, never a crash).
//! (The committed device code is checked against its recorded hashes by the
//! unit tests in src/kernels/mod.rs.)

use executorch_cuda::ffi::last_error_message;
use executorch_cuda::shim::*;
use std::ffi::c_void;
use std::ptr::null_mut;

const OK: i32 = AOTI_TORCH_SUCCESS;
const FAIL: i32 = AOTI_TORCH_FAILURE;
const BF16: i32 = 15;
const F32: i32 = 6;
const I32: i32 = 3;
const U8: i32 = 0;
const CPU: i32 = 0;
const CUDA: i32 = 1;

// ------------------------------------------------------------ the artifacts

// ---------------------------------------------------------------- tensors

/// A CPU tensor of `sizes` (contiguous unless `strides` is given).
fn cpu(sizes: &[i64], dt: i32) -> AtenTensorHandle {
    let mut h = null_mut();
    // SAFETY: arrays of sizes.len() elements; out-pointer to a local.
    let st = unsafe {
        aoti_torch_empty_strided(
            sizes.len() as i64,
            sizes.as_ptr(),
            std::ptr::null(),
            dt,
            CPU,
            0,
            &mut h,
        )
    };
    assert_eq!(st, OK, "{}", last_error_message());
    h
}

/// A tensor claiming to be on `cuda:dev` over host memory that is never
/// dereferenced here: the checks run before anything touches a GPU.
fn fake_cuda(
    buf: &mut [u8],
    offset_bytes: usize,
    sizes: &[i64],
    strides: Option<&[i64]>,
    dt: i32,
    dev: i32,
) -> AtenTensorHandle {
    let mut h = null_mut();
    // SAFETY: sizes/strides arrays of sizes.len() elements; `buf` outlives the handle and is
    // large enough for every view made here (checked by the shim against the storage it builds).
    let st = unsafe {
        aoti_torch_create_tensor_from_blob(
            buf.as_mut_ptr().add(offset_bytes).cast::<c_void>(),
            sizes.len() as i64,
            sizes.as_ptr(),
            strides.map_or(std::ptr::null(), |s| s.as_ptr()),
            0,
            dt,
            CUDA,
            dev,
            &mut h,
        )
    };
    assert_eq!(st, OK, "{}", last_error_message());
    h
}

fn del(h: AtenTensorHandle) {
    if !h.is_null() {
        // SAFETY: a handle from this test, deleted once.
        assert_eq!(unsafe { aoti_torch_delete_tensor_object(h) }, OK);
    }
}

/// Call the op; it must fail with a message containing `want` and leave `ret0` alone.
fn expect_failure(
    x: AtenTensorHandle,
    w: AtenTensorHandle,
    g: i64,
    s: AtenTensorHandle,
    want: &str,
) {
    let sentinel = 0x5151 as AtenTensorHandle;
    let mut out = sentinel;
    // SAFETY: live handles (or null, which is what some cases test); out-pointer to a local.
    let st = unsafe { aoti_torch_cuda__weight_int4pack_mm(x, w, g, s, &mut out) };
    let msg = last_error_message();
    assert_eq!(st, FAIL, "expected a failure mentioning {want:?}");
    assert!(
        msg.contains("aoti_torch_cuda__weight_int4pack_mm") && msg.contains(want),
        "message {msg:?} does not mention {want:?}"
    );
    assert_eq!(out, sentinel, "ret0 written on failure");
}

/// Valid sizes for (M, N, K, group, innerKTiles).
fn sizes(m: i64, n: i64, k: i64, g: i64, ikt: i64) -> ([i64; 2], [i64; 4], [i64; 3]) {
    ([m, k], [n / 8, k / (ikt * 16), 32, ikt / 2], [k / g, n, 2])
}

struct Args {
    x: AtenTensorHandle,
    w: AtenTensorHandle,
    s: AtenTensorHandle,
}

impl Args {
    fn cpu(m: i64, n: i64, k: i64, g: i64, ikt: i64) -> Args {
        let (xs, ws, ss) = sizes(m, n, k, g, ikt);
        Args {
            x: cpu(&xs, BF16),
            w: cpu(&ws, I32),
            s: cpu(&ss, BF16),
        }
    }
}

impl Drop for Args {
    fn drop(&mut self) {
        del(self.x);
        del(self.w);
        del(self.s);
    }
}

// ------------------------------------------------------------ the checks

#[test]
fn null_handles_and_null_ret0() {
    let a = Args::cpu(2, 64, 256, 128, 8);
    expect_failure(null_mut(), a.w, 128, a.s, "self is null");
    expect_failure(a.x, null_mut(), 128, a.s, "mat2 is null");
    expect_failure(a.x, a.w, 128, null_mut(), "qScaleAndZeros is null");
    // SAFETY: live handles; a null ret0 is the case under test.
    let st = unsafe { aoti_torch_cuda__weight_int4pack_mm(a.x, a.w, 128, a.s, null_mut()) };
    assert_eq!(st, FAIL);
    assert!(
        last_error_message().contains("ret0 is null"),
        "{}",
        last_error_message()
    );
}

#[test]
fn wrong_dtypes() {
    let (xs, ws, ss) = sizes(2, 64, 256, 128, 8);
    let a = Args::cpu(2, 64, 256, 128, 8);
    let x32 = cpu(&xs, F32);
    expect_failure(
        x32,
        a.w,
        128,
        a.s,
        "self (activations) must be bfloat16 but is float32",
    );
    let wu8 = cpu(&ws, U8);
    expect_failure(
        a.x,
        wu8,
        128,
        a.s,
        "mat2 (packed int4 weights) must be int32 but is uint8",
    );
    let s32 = cpu(&ss, F32);
    expect_failure(
        a.x,
        a.w,
        128,
        s32,
        "qScaleAndZeros must be bfloat16 but is float32",
    );
    for h in [x32, wu8, s32] {
        del(h);
    }
}

#[test]
fn wrong_ranks() {
    let a = Args::cpu(2, 64, 256, 128, 8);
    let x3 = cpu(&[1, 2, 256], BF16);
    expect_failure(x3, a.w, 128, a.s, "self (activations) must be 2-d");
    let w2 = cpu(&[8, 1024], I32);
    expect_failure(a.x, w2, 128, a.s, "mat2 (packed int4 weights) must be 4-d");
    let s2 = cpu(&[2, 128], BF16);
    expect_failure(a.x, a.w, 128, s2, "qScaleAndZeros must be 3-d");
    for h in [x3, w2, s2] {
        del(h);
    }
}

#[test]
fn group_sizes_other_than_32_64_128_256() {
    let a = Args::cpu(2, 64, 256, 128, 8);
    for g in [0, -32, 16, 48, 96, 512, i64::MAX, i64::MIN] {
        expect_failure(a.x, a.w, g, a.s, "qGroupSize must be 32, 64, 128 or 256");
    }
}

#[test]
fn packed_weight_shapes() {
    let a = Args::cpu(2, 64, 256, 128, 8);
    // Lane dimension not 32, innerKTiles/2 not 1, 2 or 4.
    for ws in [[8, 2, 16, 4], [8, 2, 32, 3], [8, 2, 32, 8], [8, 2, 32, 0]] {
        let w = cpu(&ws, I32);
        expect_failure(a.x, w, 128, a.s, "mat2 must have sizes");
        del(w);
    }
    // K-tiles dimension not K/(innerKTiles*16).
    let w = cpu(&[8, 3, 32, 4], I32);
    expect_failure(a.x, w, 128, a.s, "do not match K = 256");
    del(w);
    // No n-tiles.
    let w = cpu(&[0, 2, 32, 4], I32);
    expect_failure(a.x, w, 128, a.s, "no n-tiles");
    del(w);
}

#[test]
fn k_must_fit_the_packing_and_the_groups() {
    // K = 100 is no multiple of innerKTiles*16.
    let a = Args::cpu(2, 64, 256, 128, 8);
    let x = cpu(&[2, 100], BF16);
    expect_failure(
        x,
        a.w,
        128,
        a.s,
        "must be a positive multiple of innerKTiles*16 = 128",
    );
    del(x);
    // K = 0.
    let x = cpu(&[2, 0], BF16);
    expect_failure(x, a.w, 128, a.s, "positive multiple");
    del(x);
    // K = 32 (legal for innerKTiles 2) but group 64.
    let b = Args::cpu(1, 8, 32, 32, 2);
    let s = cpu(&[0, 8, 2], BF16);
    expect_failure(b.x, b.w, 64, s, "K = 32 is not a multiple of qGroupSize 64");
    del(s);
}

#[test]
fn scale_and_zero_shapes() {
    let a = Args::cpu(2, 64, 256, 128, 8);
    for ss in [[2, 64, 3], [3, 64, 2], [2, 32, 2], [1, 64, 2], [2, 64, 1]] {
        let s = cpu(&ss, BF16);
        expect_failure(
            a.x,
            a.w,
            128,
            s,
            "qScaleAndZeros must have sizes [2, 64, 2]",
        );
        del(s);
    }
    // The same scales with another group size: K/32 = 8 groups expected.
    expect_failure(
        a.x,
        a.w,
        32,
        a.s,
        "qScaleAndZeros must have sizes [8, 64, 2]",
    );
}

#[test]
fn cpu_tensors_are_refused_after_every_shape_check() {
    for (m, n, k, g, ikt) in [
        (1, 8, 32, 32, 2),
        (0, 64, 256, 64, 4),
        (17, 4096, 4096, 128, 8),
        (3, 24, 512, 256, 8),
    ] {
        let a = Args::cpu(m, n, k, g, ikt);
        expect_failure(a.x, a.w, g, a.s, "must be on one CUDA device");
    }
}

#[test]
fn non_contiguous_and_misaligned_inputs() {
    let (m, n, k, g, ikt) = (2i64, 64i64, 256i64, 128i64, 8i64);
    let (xs, ws, ss) = sizes(m, n, k, g, ikt);
    let mut xb = vec![0u8; 64 + (m * k * 2 * 2) as usize];
    let mut wb = vec![0u8; 64 + (n * k / 2) as usize];
    let mut sb = vec![0u8; 64 + (k / g * n * 2 * 2) as usize];
    // Aligned base offsets into the buffers (their own alignment is unknown).
    let al = |b: &[u8]| (16 - b.as_ptr() as usize % 16) % 16;
    let (xo, wo, so) = (al(&xb), al(&wb), al(&sb));
    let w = fake_cuda(&mut wb, wo, &ws, None, I32, 0);
    let s = fake_cuda(&mut sb, so, &ss, None, BF16, 0);
    // Rows with a stride of 2K: not contiguous.
    let x = fake_cuda(&mut xb, xo, &xs, Some(&[2 * k, 1]), BF16, 0);
    expect_failure(x, w, g, s, "self (activations) must be contiguous");
    del(x);
    // Contiguous but 2 bytes off a 16-byte boundary.
    let x = fake_cuda(&mut xb, xo + 2, &xs, None, BF16, 0);
    expect_failure(x, w, g, s, "is not 16-byte aligned");
    del(x);
    let x = fake_cuda(&mut xb, xo, &xs, None, BF16, 0);
    let w_off = fake_cuda(&mut wb, wo + 4, &ws, None, I32, 0);
    expect_failure(x, w_off, g, s, "mat2 (packed int4 weights)'s data pointer");
    del(w_off);
    // Scales transposed: [K/G, 2, N] viewed as [K/G, N, 2] with swapped strides.
    let s_t = fake_cuda(&mut sb, so, &ss, Some(&[2 * n, 1, n]), BF16, 0);
    expect_failure(x, w, g, s_t, "qScaleAndZeros must be contiguous");
    del(s_t);
    // Tensors on two devices.
    let w1 = fake_cuda(&mut wb, wo, &ws, None, I32, 1);
    expect_failure(x, w1, g, s, "must be on one CUDA device");
    del(w1);
    // Mixed CPU and CUDA.
    let s_cpu = cpu(&ss, BF16);
    expect_failure(x, w, g, s_cpu, "must be on one CUDA device");
    del(s_cpu);
    for h in [x, w, s] {
        del(h);
    }
}

#[test]
fn sizes_beyond_the_kernels_indexing_are_refused() {
    // K = N = 2^20 (views over a small buffer: nothing is read before the checks fail).
    let (m, n, k, g, ikt) = (1i64, 1i64 << 20, 1i64 << 20, 128i64, 8i64);
    let (xs, ws, ss) = sizes(m, n, k, g, ikt);
    let mut buf = vec![0u8; 64];
    let x = fake_cuda(&mut buf, 0, &xs, Some(&[0, 0]), BF16, 0);
    let w = fake_cuda(&mut buf, 0, &ws, Some(&[0, 0, 0, 0]), I32, 0);
    let s = fake_cuda(&mut buf, 0, &ss, Some(&[0, 0, 0]), BF16, 0);
    expect_failure(x, w, g, s, "are too large");
    for h in [x, w, s] {
        del(h);
    }
}

#[test]
fn valid_arguments_without_a_gpu_fail_cleanly() {
    if executorch_cuda::device_count().is_ok_and(|n| n > 0) {
        eprintln!("SKIPPED valid_arguments_without_a_gpu_fail_cleanly: this machine has a GPU");
        return;
    }
    let (m, n, k, g, ikt) = (4i64, 64i64, 256i64, 64i64, 4i64);
    let (xs, ws, ss) = sizes(m, n, k, g, ikt);
    let mut xb = vec![0u8; 16 + (m * k * 2) as usize];
    let mut wb = vec![0u8; 16 + (n * k / 2) as usize];
    let mut sb = vec![0u8; 16 + (k / g * n * 2 * 2) as usize];
    let al = |b: &[u8]| (16 - b.as_ptr() as usize % 16) % 16;
    let (xo, wo, so) = (al(&xb), al(&wb), al(&sb));
    let x = fake_cuda(&mut xb, xo, &xs, None, BF16, 0);
    let w = fake_cuda(&mut wb, wo, &ws, None, I32, 0);
    let s = fake_cuda(&mut sb, so, &ss, None, BF16, 0);
    // Every check passes; allocating the output needs the driver, which is not here.
    expect_failure(x, w, g, s, "no CUDA");
    for h in [x, w, s] {
        del(h);
    }
}

#[test]
fn tuning_hook_checks_its_arguments() {
    assert_eq!(et_cuda_debug_int4mm_tuning(3, 0, 0, 0), FAIL);
    assert!(last_error_message().contains("tuning kind 3"));
    assert_eq!(et_cuda_debug_int4mm_tuning(1, 12, 2, 8), FAIL);
    assert!(last_error_message().contains("not a built kernel configuration"));
    assert_eq!(et_cuda_debug_int4mm_tuning(2, 4, 3, 0), FAIL);
    assert_eq!(et_cuda_debug_int4mm_tuning(1, 8, 4, 16), OK);
    assert_eq!(et_cuda_debug_int4mm_tuning(2, 4, 2, 0), OK);
    assert_eq!(et_cuda_debug_int4mm_tuning(0, 0, 0, 0), OK);
}
