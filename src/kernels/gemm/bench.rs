//! `gemm_bench` (ignored; GPU): GPU time per call of the GEMM on the linear
//! layers of Llama-3.2-1B and Qwen3-0.6B at prefill sizes, from CUDA events
//! around a graph of back-to-back calls, with TFLOP/s and GB/s; the decode
//! GEMV (`kernels::gemv`) at the same M for the crossover; and the host time
//! of an eager call. Run it like the GPU tests (see `gpu_tests`), filtered to
//! `kernels::gemm::bench`.

use super::gpu_tests::{require_gpu, upload, Rng, BF16};
use super::*;
use crate::cuda::copy::clone_contiguous;
use crate::cuda::graph::Capture;
use crate::cuda::stream::{CudaStream, StreamScope};
use cudarc::driver::sys;
use std::time::Instant;

/// (N, K) of the benchmarked layers: Llama-1B q/o, k/v, gate/up, down; Qwen3-0.6B gate/up, down.
const SHAPES: [(usize, usize); 6] = [
    (2048, 2048),
    (512, 2048),
    (8192, 2048),
    (2048, 8192),
    (3072, 1024),
    (1024, 3072),
];
const MS: [usize; 3] = [32, 128, 512];
/// H200: HBM3e bandwidth (GB/s) and dense bf16 tensor-core peak (TFLOP/s).
const HBM_GBS: f64 = 4800.0;
const PEAK_TFLOPS: f64 = 989.0;

#[test]
#[ignore = "needs a CUDA device and cuBLASLt: run with --include-ignored on a GPU machine"]
fn gemm_bench() {
    require_gpu("gemm_bench");
    let device = crate::cuda::device(0).expect("device 0");
    let stream = CudaStream::new(device.clone()).expect("stream");
    let _scope = StreamScope::enter(0, stream.raw(), Some(stream.clone()));
    let mut rng = Rng(5);
    println!(
        "GEMM (bf16, out = x W^T, cuBLASLt): GPU time per call from CUDA events around a graph"
    );
    println!(
        "of back-to-back calls; weights rotate over copies totalling >= 256 MiB (HBM, not L2)."
    );
    println!(
        "Each call is the output's allocation node, the kernel(s) and a free node: the gaps count."
    );
    {
        let x = upload(&rng.vec(8), BF16, &[1, 8], &[8, 1], 0);
        let w = upload(&rng.vec(64), BF16, &[8, 8], &[8, 1], 0);
        let us = time_graph(&stream, 200, &mut |_| {
            drop(gemm(&x, &w, None).expect("gemm"))
        });
        println!("floor: M=1 N=8 K=8 takes {us:.2} us per call");
    }
    println!(
        "{:>5} {:>5} {:>4} | {:>8} {:>7} {:>5} {:>6} {:>5} | {:>8} | {:>7}",
        "N", "K", "M", "gemm us", "TFLOP/s", "%peak", "GB/s", "%HBM", "gemv us", "host us"
    );
    for (n, k) in SHAPES {
        let w0 = upload(
            &rng.vec(n * k),
            BF16,
            &[n as i64, k as i64],
            &[k as i64, 1],
            0,
        );
        let copies = (256usize << 20).div_ceil(n * k * 2).max(1);
        let ws: Vec<Tensor> = std::iter::once(Ok(w0.clone()))
            .chain((1..copies).map(|_| clone_contiguous(&w0)))
            .collect::<Result<_>>()
            .expect("weight copies");
        for m in MS {
            let x = upload(
                &rng.vec(m * k),
                BF16,
                &[m as i64, k as i64],
                &[k as i64, 1],
                0,
            );
            let reps = (copies * 2).clamp(20, 200);
            let us = time_graph(&stream, reps, &mut |i| {
                drop(gemm(&x, &ws[i % copies], None).expect("gemm"))
            });
            let tflops = 2.0 * (m * n * k) as f64 / us / 1e6;
            let gbs = ((n * k + m * k + m * n) * 2) as f64 / us / 1e3;
            let gemv = if m <= 128 {
                let t = time_graph(&stream, reps, &mut |i| {
                    drop(crate::kernels::gemv::gemv(&x, &ws[i % copies], None).expect("gemv"))
                });
                format!("{t:>8.2}")
            } else {
                format!("{:>8}", "-")
            };
            let t0 = Instant::now();
            for i in 0..50 {
                drop(gemm(&x, &ws[i % copies], None).expect("gemm"));
            }
            let host = t0.elapsed().as_secs_f64() * 1e6 / 50.0;
            stream.synchronize().expect("synchronize");
            println!(
                "{n:>5} {k:>5} {m:>4} | {us:>8.2} {tflops:>7.1} {:>4.0}% {gbs:>6.0} {:>4.0}% | {gemv} | {host:>7.2}",
                tflops / PEAK_TFLOPS * 100.0,
                gbs / HBM_GBS * 100.0
            );
        }
    }
}

/// GPU time per call (µs) of `reps` calls of `f` captured into one graph on `stream`,
/// from CUDA events around replays (the first replay is a warm-up).
pub(crate) fn time_graph(
    stream: &std::sync::Arc<CudaStream>,
    reps: usize,
    f: &mut dyn FnMut(usize),
) -> f64 {
    let device = stream.device.clone();
    let _ctx = crate::cuda::ContextGuard::device(&device).expect("context");
    let capture = Capture::begin(device.clone(), stream.raw()).expect("begin capture");
    (0..reps).for_each(&mut *f);
    let exec = capture.finish().expect("capture");
    let (mut e0, mut e1) = (std::ptr::null_mut(), std::ptr::null_mut());
    let ok = |r: sys::CUresult, what: &str| assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "{what}");
    // SAFETY: out-pointers to locals; the device's context is current on this thread.
    unsafe {
        ok(sys::cuEventCreate(&mut e0, 0), "cuEventCreate");
        ok(sys::cuEventCreate(&mut e1, 0), "cuEventCreate");
    }
    let mut times = Vec::new();
    for it in 0..6 {
        // SAFETY: live events, graph and stream.
        unsafe { ok(sys::cuEventRecord(e0, stream.raw()), "cuEventRecord") };
        exec.launch(stream.raw()).expect("launch");
        // SAFETY: as above.
        unsafe {
            ok(sys::cuEventRecord(e1, stream.raw()), "cuEventRecord");
            ok(sys::cuEventSynchronize(e1), "cuEventSynchronize");
        }
        let mut ms = 0f32;
        // SAFETY: both events completed.
        ok(
            unsafe { sys::cuEventElapsedTime_v2(&mut ms, e0, e1) },
            "cuEventElapsedTime",
        );
        if it > 0 {
            times.push(f64::from(ms) * 1000.0 / reps as f64);
        }
    }
    // SAFETY: nothing uses them any more.
    unsafe {
        sys::cuEventDestroy_v2(e0);
        sys::cuEventDestroy_v2(e1);
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}
