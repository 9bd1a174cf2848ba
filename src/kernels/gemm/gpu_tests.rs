//! GPU tests of the GEMM (ignored without `--include-ignored`; they need a CUDA
//! device and cuBLASLt) and its benchmark `gemm_bench`.
//!
//! Inputs are multiples of 1/32 in [-1, 1] (exact in bf16 and fp16), so the
//! fp64 CPU reference sees what the GPU sees; the GPU differs by its fp32
//! summation order and the final rounding (and, where cuBLASLt offers no
//! algorithm that adds split-K parts in fp32, a rounding of each part). Per
//! element: `|got - ref| <= rtol * |ref| + atol * max|ref of the row|` with
//! rtol = 2^-6 (bf16) or 2^-8 (fp16), four times the output's rounding step,
//! and atol = 2^-8 or 2^-10 for the cancellation. A wrong stride, transpose or
//! bias is off by far more. Each case prints its worst error as a fraction of
//! the bound. The reference covers 16 rows of each case (the first, the last
//! and 14 spread between), every column.
//!
//! Run on the GPU machine: the library's unit-test binary, filtered:
//! `<unit-test binary> kernels::gemm::gpu_tests --include-ignored --test-threads=1 --nocapture`
//! (scripts/gpu_bundle.sh copies it to `.dev/gpu/rs/deps/lib_unit`).

use super::*;
use crate::cuda::copy::copy_tensor;
use crate::cuda::graph::Capture;
use crate::cuda::stream::{CudaStream, StreamScope};
use crate::dtype::codes as dtype;
use crate::kernels::cpu_tensor;

pub(super) const BF16: i32 = dtype::BFLOAT16;
const F16: i32 = dtype::FLOAT16;
/// The linear layers of Llama-3.2-1B (q/o, k/v, gate/up, down) as (N, K).
const LLAMA: [(usize, usize); 4] = [(2048, 2048), (512, 2048), (8192, 2048), (2048, 8192)];
/// The linear layers of Qwen3-0.6B (q, k/v, o, gate/up, down) as (N, K).
const QWEN: [(usize, usize); 5] = [
    (2048, 1024),
    (1024, 1024),
    (1024, 2048),
    (3072, 1024),
    (1024, 3072),
];

pub(crate) fn require_gpu(test: &str) {
    match crate::cuda::device_count() {
        Ok(n) if n > 0 => {}
        r => panic!("{test} needs a CUDA device: {r:?}"),
    }
    if let Err(e) = require_cublaslt() {
        panic!("{test} needs cuBLASLt: {e}");
    }
}

/// Deterministic values, multiples of 1/32 in [-1, 1].
pub(crate) struct Rng(pub(crate) u64);
impl Rng {
    pub(crate) fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                self.0 = self
                    .0
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((self.0 >> 33) % 65) as f32 / 32.0 - 1.0
            })
            .collect()
    }
}

/// f32 (exact in the target type) to bf16 or fp16 bits.
fn to_bits(v: f32, dt: i32) -> u16 {
    let b = v.to_bits();
    if dt == BF16 {
        return (b >> 16) as u16;
    }
    let sign = ((b >> 16) & 0x8000) as u16;
    if v == 0.0 {
        return sign;
    }
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    assert!((1..31).contains(&exp), "{v} is not a normal fp16");
    sign | (exp as u16) << 10 | ((b >> 13) & 0x3ff) as u16
}

/// bf16 or fp16 bits to f32.
fn from_bits(h: u16, dt: i32) -> f32 {
    if dt == BF16 {
        return f32::from_bits(u32::from(h) << 16);
    }
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let (e, m) = (i32::from((h >> 10) & 0x1f), f32::from(h & 0x3ff));
    sign * match e {
        0 => m * 2f32.powi(-24),
        31 if m == 0.0 => f32::INFINITY,
        31 => f32::NAN,
        _ => (1.0 + m / 1024.0) * 2f32.powi(e - 15),
    }
}

/// The bits of a storage holding `vals` (in row-major order) at the view `sizes`, `strides`,
/// element `offset`; zero elsewhere.
fn scatter(vals: &[f32], dt: i32, sizes: &[i64], strides: &[i64], offset: i64) -> Vec<u16> {
    let len = tensor::required_bytes(sizes, strides, offset, 2).expect("view") / 2;
    let mut flat = vec![0u16; len.max(1)];
    let mut idx = vec![0i64; sizes.len()];
    for &v in vals {
        let at: i64 = offset + idx.iter().zip(strides).map(|(i, s)| i * s).sum::<i64>();
        flat[at as usize] = to_bits(v, dt);
        for d in (0..sizes.len()).rev() {
            idx[d] += 1;
            if idx[d] < sizes[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    flat
}

/// A device tensor view (`sizes`, `strides`, element `offset`) whose elements are `vals`
/// (in the view's row-major order); the rest of its storage is zero.
pub(crate) fn upload(vals: &[f32], dt: i32, sizes: &[i64], strides: &[i64], offset: i64) -> Tensor {
    let flat = scatter(vals, dt, sizes, strides, offset);
    let host = cpu_tensor(dt, &[flat.len() as i64]);
    // SAFETY: the host tensor holds flat.len() 2-byte elements.
    unsafe { std::ptr::copy_nonoverlapping(flat.as_ptr(), host.data_ptr().cast(), flat.len()) };
    let dev = crate::cuda::memory::empty_strided(host.sizes.clone(), vec![1], dt, Device::Cuda(0))
        .expect("device alloc");
    copy_tensor(&dev, &host).expect("upload");
    Tensor::view(
        dev.storage.clone(),
        dt,
        sizes.to_vec(),
        strides.to_vec(),
        offset,
    )
    .expect("view")
}

#[test]
fn test_helpers_encode_exactly_and_place_elements_by_stride() {
    for dt in [BF16, F16] {
        for j in -32..=32 {
            let v = j as f32 / 32.0;
            assert_eq!(from_bits(to_bits(v, dt), dt), v, "{v} dtype {dt}");
        }
    }
    assert_eq!(to_bits(1.0, F16), 0x3c00);
    assert_eq!(to_bits(-0.5, F16), 0xb800);
    assert_eq!(to_bits(1.0 / 32.0, F16), 0x2800);
    assert_eq!(to_bits(1.0, BF16), 0x3f80);
    assert_eq!(from_bits(0x7c00, F16), f32::INFINITY);
    assert_eq!(from_bits(0x0001, F16), 2f32.powi(-24));
    assert_eq!(from_bits(0x3555, F16), 0.333_251_95);
    let v = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0].map(|x| x / 8.0);
    let flat = scatter(&v, BF16, &[2, 3], &[4, 1], 1);
    let want = [0.0, 1.0, 2.0, 3.0, 0.0, 4.0, 5.0, 6.0].map(|x: f32| to_bits(x / 8.0, BF16));
    assert_eq!(flat, want);
    assert_eq!(scatter(&[], BF16, &[0, 4], &[4, 1], 0), [0]);
}

/// A contiguous device tensor's elements as f32 (waits for the current stream).
pub(crate) fn download(t: &Tensor) -> Vec<f32> {
    let host = cpu_tensor(t.dtype, &t.sizes);
    copy_tensor(&host, t).expect("download");
    let n = host.numel() as usize;
    // SAFETY: the host tensor holds n 2-byte elements.
    let bits = unsafe { std::slice::from_raw_parts(host.data_ptr().cast::<u16>(), n) };
    bits.iter().map(|&h| from_bits(h, t.dtype)).collect()
}

/// One correctness case.
#[derive(Debug, Clone, Copy)]
struct Case {
    dt: i32,
    m: usize,
    n: usize,
    k: usize,
    bias: bool,
    /// Extra elements between rows of x (0: contiguous).
    pad: usize,
    /// Elements the bias starts after a 256-byte boundary (1: misaligned, copied first).
    bias_offset: i64,
}

/// Run one case against the CPU reference; returns the largest error relative to the bound.
fn run_case(c: Case, rng: &mut Rng) -> f64 {
    let Case { dt, m, n, k, .. } = c;
    let (x, w, b) = (rng.vec(m * k), rng.vec(n * k), rng.vec(n));
    let ldx = (k + c.pad) as i64;
    let xd = upload(&x, dt, &[m as i64, k as i64], &[ldx, 1], 0);
    let wd = upload(&w, dt, &[n as i64, k as i64], &[k as i64, 1], 0);
    let bd = c
        .bias
        .then(|| upload(&b, dt, &[n as i64], &[1], c.bias_offset));
    let out = gemm(&xd, &wd, bd.as_ref()).unwrap_or_else(|e| panic!("{c:?}: {e}"));
    assert_eq!(out.sizes, [m as i64, n as i64]);
    let got = download(&out);
    let (rtol, atol) = if dt == BF16 {
        (2f64.powi(-6), 2f64.powi(-8))
    } else {
        (2f64.powi(-8), 2f64.powi(-10))
    };
    let rows: Vec<usize> = if m <= 16 {
        (0..m).collect()
    } else {
        (0..16).map(|i| i * (m - 1) / 15).collect()
    };
    let mut worst = 0f64;
    for r in rows {
        let want: Vec<f64> = (0..n)
            .map(|j| {
                let dot: f64 = (0..k)
                    .map(|i| f64::from(x[r * k + i]) * f64::from(w[j * k + i]))
                    .sum();
                dot + if c.bias { f64::from(b[j]) } else { 0.0 }
            })
            .collect();
        let peak = want.iter().fold(0f64, |a, v| a.max(v.abs()));
        for (j, &v) in want.iter().enumerate() {
            let g = f64::from(got[r * n + j]);
            let bound = rtol * v.abs() + atol * peak;
            assert!(
                (g - v).abs() <= bound,
                "{c:?}: out[{r}][{j}] = {g}, reference {v} (bound {bound})"
            );
            worst = worst.max((g - v).abs() / bound.max(f64::MIN_POSITIVE));
        }
    }
    worst
}

#[test]
#[ignore = "needs a CUDA device and cuBLASLt: run with --include-ignored on a GPU machine"]
fn gemm_matches_cpu_reference_on_model_shapes() {
    require_gpu("gemm_matches_cpu_reference_on_model_shapes");
    let ms = [17usize, 64, 100, 128, 333, 512];
    let mut rng = Rng(7);
    let mut n_cases = 0;
    for (i, &(n, k)) in LLAMA.iter().chain(&QWEN).enumerate() {
        for (j, dt) in [BF16, F16].into_iter().enumerate() {
            let s = 2 * i + j;
            let c = Case {
                dt,
                m: ms[s % ms.len()],
                n,
                k,
                bias: s % 2 == 0,
                pad: [0, 8, 3][s % 3],
                bias_offset: if s % 4 == 0 { 1 } else { 0 },
            };
            let worst = run_case(c, &mut rng);
            println!("{c:?}: worst error {:.2} of the bound", worst);
            n_cases += 1;
        }
    }
    // Small and odd shapes: one row, rows of 8, N and K not multiples of 8.
    for c in [
        Case {
            dt: BF16,
            m: 1,
            n: 2048,
            k: 2048,
            bias: true,
            pad: 0,
            bias_offset: 0,
        },
        Case {
            dt: F16,
            m: 8,
            n: 1000,
            k: 999,
            bias: true,
            pad: 1,
            bias_offset: 1,
        },
        Case {
            dt: BF16,
            m: 129,
            n: 7,
            k: 13,
            bias: false,
            pad: 0,
            bias_offset: 0,
        },
        Case {
            dt: F16,
            m: 31,
            n: 1,
            k: 1,
            bias: true,
            pad: 0,
            bias_offset: 0,
        },
    ] {
        println!(
            "{c:?}: worst error {:.2} of the bound",
            run_case(c, &mut rng)
        );
        n_cases += 1;
    }
    let plans = super::matmul::plans_summary();
    println!("{n_cases} cases, {} algorithm choices:", plans.len());
    plans.iter().for_each(|p| println!("  {p}"));
    assert!(
        plans.len() >= n_cases - 2,
        "one choice per distinct problem"
    );
}

#[test]
#[ignore = "needs a CUDA device and cuBLASLt: run with --include-ignored on a GPU machine"]
fn gemm_takes_leading_dims_into_and_empty_rows() {
    require_gpu("gemm_takes_leading_dims_into_and_empty_rows");
    let mut rng = Rng(11);
    let (n, k) = (256usize, 512usize);
    let x = rng.vec(2 * 33 * k);
    let w = rng.vec(n * k);
    let xd = upload(
        &x,
        BF16,
        &[2, 33, k as i64],
        &[33 * k as i64, k as i64, 1],
        0,
    );
    let x2 = upload(&x, BF16, &[66, k as i64], &[k as i64, 1], 0);
    let wd = upload(&w, BF16, &[n as i64, k as i64], &[k as i64, 1], 0);
    let a = gemm(&xd, &wd, None).expect("3-d x");
    assert_eq!(a.sizes, [2, 33, n as i64]);
    let b = gemm(&x2, &wd, None).expect("[66, K] x");
    assert_eq!(
        download(&a),
        download(&b),
        "[2, 33, K] and [66, K] give the same rows"
    );
    // No rows: an empty result, nothing enqueued.
    let e = gemm(
        &upload(&[], BF16, &[0, k as i64], &[k as i64, 1], 0),
        &wd,
        None,
    )
    .expect("M = 0");
    assert_eq!(e.sizes, [0, n as i64]);
}

#[test]
#[ignore = "needs a CUDA device and cuBLASLt: run with --include-ignored on a GPU machine"]
fn gemm_in_a_cuda_graph_replays_like_eager() {
    require_gpu("gemm_in_a_cuda_graph_replays_like_eager");
    let device = crate::cuda::device(0).expect("device 0");
    let stream = CudaStream::new(device.clone()).expect("stream");
    let _scope = StreamScope::enter(0, stream.raw(), Some(stream.clone()));
    let mut rng = Rng(3);
    // M = 77 is used nowhere else: its algorithm is chosen inside the capture.
    for (m, n, k) in [(77usize, 2048usize, 8192usize), (32, 2048, 2048)] {
        let xd = upload(
            &rng.vec(m * k),
            BF16,
            &[m as i64, k as i64],
            &[k as i64, 1],
            0,
        );
        let wd = upload(
            &rng.vec(n * k),
            BF16,
            &[n as i64, k as i64],
            &[k as i64, 1],
            0,
        );
        let bd = upload(&rng.vec(n), BF16, &[n as i64], &[1], 0);
        let capture = Capture::begin(device.clone(), stream.raw()).expect("begin capture");
        let captured = gemm(&xd, &wd, Some(&bd));
        let exec = capture.finish().expect("the GEMM is capturable");
        let out = captured.expect("gemm while capturing");
        if let crate::tensor::Memory::Device(d) = &out.storage.memory {
            d.adopt_by_graph();
        }
        let eager = gemm(&xd, &wd, Some(&bd)).expect("eager");
        for _ in 0..3 {
            exec.launch(stream.raw()).expect("launch");
        }
        let (g, e) = (download(&out), download(&eager));
        assert!(
            g.iter().zip(&e).all(|(a, b)| a.to_bits() == b.to_bits()),
            "M={m}: replay differs from eager"
        );
        println!("M={m} N={n} K={k}: graph replay equals eager bit for bit");
    }
}

#[test]
#[ignore = "needs a CUDA device and cuBLASLt: run with --include-ignored on a GPU machine"]
fn cublaslt_is_found_on_the_gpu_machine() {
    require_gpu("cublaslt_is_found_on_the_gpu_machine");
    let api = super::cublaslt::api().expect("cuBLASLt");
    println!("cuBLASLt {} from {}", api.version, api.path);
}

/// The load-time check: a program whose `.so` names `aoti_torch_cuda_et_linear` passes it when
/// cuBLASLt is there (and then fails later: the tiny `.so` cannot open), and fails with
/// cuBLASLt's error, naming the op, when it is not: this test runs itself again in a child
/// process with `ET_CUDA_CUBLASLT` naming no library.
#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn loading_a_program_with_the_linear_ops_checks_for_cublaslt() {
    const CHILD: &str = "ET_CUDA_TEST_CUBLASLT_LOAD_CHILD";
    const BOGUS: &str = "/nonexistent/et-cuda-test/libcublasLt.so.13";
    assert!(
        crate::cuda::device_count().is_ok_and(|n| n > 0),
        "needs a CUDA device"
    );
    let so = crate::aoti::elf::tests_support::tiny_so_with_strings(b"aoti_torch_cuda_et_linear\0");
    let p = crate::delegate::InitParams {
        so: &so,
        weights: crate::delegate::Weights::Blob(&[]),
        method_name: "forward".into(),
        so_key: None,
        weights_key: None,
        config: crate::MethodConfig::default(),
    };
    let e = match crate::delegate::CudaHandle::init(p) {
        Ok(_) => panic!("the tiny .so cannot load"),
        Err(e) => e,
    };
    let m = e.to_string();
    if std::env::var_os(CHILD).is_some() {
        assert_eq!(e.kind(), crate::ErrorKind::LoadFailed, "{m}");
        for s in ["aoti_torch_cuda_et_linear", "libcublasLt", BOGUS] {
            assert!(m.contains(s), "{m:?} lacks {s}");
        }
        println!("child saw: {m}");
        return;
    }
    match require_cublaslt() {
        Ok(()) => assert!(!m.contains("cuBLASLt"), "{m}"),
        Err(_) => assert!(
            m.contains("aoti_torch_cuda_et_linear") && m.contains("libcublasLt"),
            "{m}"
        ),
    }
    println!("with this process's cuBLASLt: {m}");
    let exe = std::env::current_exe().expect("test binary");
    let name =
        "kernels::gemm::gpu_tests::loading_a_program_with_the_linear_ops_checks_for_cublaslt";
    let out = std::process::Command::new(exe)
        .args([
            name,
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(super::cublaslt::LIB_ENV, BOGUS)
        .env(CHILD, "1")
        .output()
        .expect("run the child");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("1 passed") && text.contains("child saw"),
        "{text}"
    );
}
