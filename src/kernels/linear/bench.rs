//! `linear_bench` (ignored; GPU): the fused linear on the decoder layers of the Llama-3.2-1B
//! and Qwen3-0.6B shapes at M = 1, launched into preallocated outputs, so that the captured
//! graph is kernels only (as in a program's replay with graph-private memory) and programmatic
//! dependent launch can overlap a kernel with the one before. GPU time per layer from CUDA
//! events around replays, with PDL off and on, and each weight shape alone (back-to-back calls
//! over copies of the weight totalling >= 256 MiB, so that they come from HBM). Then decode
//! attention at the Llama shape: the short-context kernel and the split kernel it replaced.
//! Run it like the GPU tests, filtered to `kernels::linear::bench`.

use super::*;
use crate::cuda::copy::clone_contiguous;
use crate::cuda::stream::{CudaStream, StreamScope};
use crate::kernels::gemm::bench::time_graph;
use crate::kernels::gemm::gpu_tests::{require_gpu, upload, Rng};
use crate::kernels::set_pdl;

pub(super) const BF16: i32 = dtype::BFLOAT16;
pub(super) const HBM_GBS: f64 = 4800.0;

/// One linear of a layer: weight rows, K, norm before it, act, residual after it.
#[derive(Clone, Copy)]
pub(super) struct Op {
    pub n: usize,
    pub k: usize,
    norm: bool,
    act: Act,
    residual: bool,
}

/// The four linears of a decoder layer (norm+QKV, O+residual, norm+gate/up+act, down+residual).
pub(super) fn layer_ops(hidden: usize, qkv: usize, attn: usize, ffn: usize) -> [Op; 4] {
    let op = |n, k, norm, act, residual| Op {
        n,
        k,
        norm,
        act,
        residual,
    };
    [
        op(qkv, hidden, true, Act::None, false),
        op(hidden, attn, false, Act::None, true),
        op(2 * ffn, hidden, true, Act::SiluMul, false),
        op(hidden, ffn, false, Act::None, true),
    ]
}

pub(super) fn dev(rng: &mut Rng, sizes: &[usize]) -> Tensor {
    let n: usize = sizes.iter().product();
    let s: Vec<i64> = sizes.iter().map(|&v| v as i64).collect();
    let st = tensor::contiguous_strides(&s);
    upload(&rng.vec(n), BF16, &s, &st, 0)
}

/// Enqueue `op` (x, weight, norm weight, residual) into the preallocated `y`.
pub(super) fn run(op: Op, x: &Tensor, w: &Tensor, g: &Tensor, r: &Tensor, y: &Tensor) {
    let f = Fusion {
        bias: None,
        norm: op.norm.then_some(Norm {
            weight: g,
            mode: NormMode::WeightTimesRounded,
            eps: 1e-5,
            offset: 0.0,
        }),
        residual: op.residual.then_some(r),
        act: op.act,
    };
    let l = check(x, w, &f).expect("check");
    assert!(l.fused, "M = 1 takes the fused kernel");
    launch_fused(&l, x, w, &f, y).expect("launch");
}

fn model(name: &str, layers: usize, ops: [Op; 4], stream: &std::sync::Arc<CudaStream>) {
    let mut rng = Rng(3);
    let hidden = ops[1].n;
    let ws: Vec<[Tensor; 4]> = (0..layers)
        .map(|_| ops.map(|o| dev(&mut rng, &[o.n, o.k])))
        .collect();
    let g = dev(&mut rng, &[hidden]);
    let acts: Vec<Tensor> = [hidden, ops[0].n, ops[1].k, hidden, ops[2].n / 2, hidden]
        .iter()
        .map(|&n| dev(&mut rng, &[1, n]))
        .collect();
    let [h, yqkv, a, h1, ygu, h2] = [0, 1, 2, 3, 4, 5].map(|i| &acts[i]);
    let bytes: usize = ops.iter().map(|o| o.n * o.k * 2).sum();
    println!(
        "{name}: {layers} layers, M=1, {:.1} MB of weights a layer",
        bytes as f64 / 1e6
    );
    for pdl in [false, true] {
        set_pdl(pdl);
        let us = time_graph(stream, layers, &mut |i| {
            let w = &ws[i % layers];
            // h -> h1 -> h2; the next layer reads h2 (alternating would need a copy: the
            // chain's dependencies are what matter, not the values).
            run(ops[0], h, &w[0], &g, h, yqkv);
            run(ops[1], a, &w[1], &g, h, h1);
            run(ops[2], h1, &w[2], &g, h1, ygu);
            run(ops[3], ygu, &w[3], &g, h1, h2);
        });
        let gbs = bytes as f64 / us / 1e3;
        println!(
            "  pdl={}: {us:.2} us a layer, {gbs:.0} GB/s, {:.1} % of 4.8 TB/s",
            u8::from(pdl),
            gbs / HBM_GBS * 100.0
        );
    }
    set_pdl(true);
    println!("  each linear alone, back to back, weights rotating over >= 256 MiB (PDL on):");
    for (j, op) in ops.iter().enumerate() {
        let copies = (256usize << 20).div_ceil(op.n * op.k * 2).max(1);
        let w0 = &ws[0][j];
        let cs: Vec<Tensor> = std::iter::once(w0.clone())
            .chain((1..copies).map(|_| clone_contiguous(w0).expect("copy")))
            .collect();
        let x = [h, a, h1, ygu][j];
        let y = [yqkv, h1, ygu, h2][j];
        let r = if j == 1 { h } else { h1 };
        let mut line = String::new();
        for v in [None, Some(0), Some(1), Some(2)] {
            gemv::set_tuning(v).expect("variant");
            let us = time_graph(stream, (copies * 2).clamp(20, 200), &mut |i| {
                run(*op, x, &cs[i % copies], &g, r, y)
            });
            let gbs = (op.n * op.k * 2) as f64 / us / 1e3;
            match v {
                None => {
                    line += &format!(
                        "{us:>7.2} us {gbs:>5.0} GB/s {:>5.1} % (variant 0/1/2:",
                        gbs / HBM_GBS * 100.0
                    )
                }
                Some(_) => line += &format!(" {us:.2}"),
            }
        }
        gemv::set_tuning(None).expect("variant");
        println!(
            "    N={:>6} K={:>5} norm={} act={:?} res={}: {line} us)",
            op.n,
            op.k,
            u8::from(op.norm),
            op.act,
            u8::from(op.residual),
        );
    }
}

/// Vocabulary heads (tied embeddings), plain and with the final norm folded in.
fn heads(stream: &std::sync::Arc<CudaStream>) {
    let mut rng = Rng(5);
    println!("vocabulary heads, M=1, 4 back-to-back calls over 2 copies (PDL on):");
    for (n, k) in [(128256usize, 2048usize), (151936, 1024)] {
        let ws = [dev(&mut rng, &[n, k]), dev(&mut rng, &[n, k])];
        let (x, g, y) = (
            dev(&mut rng, &[1, k]),
            dev(&mut rng, &[k]),
            dev(&mut rng, &[1, n]),
        );
        for norm in [false, true] {
            if norm && n as i64 > MAX_NORM_FUSED_COLS {
                // The final norm is a kernel of its own there (`composite`).
                println!(
                    "  N={n:>6} K={k:>5} norm=1: not fused (over {MAX_NORM_FUSED_COLS} columns)"
                );
                continue;
            }
            let op = Op {
                n,
                k,
                norm,
                act: Act::None,
                residual: false,
            };
            let us = time_graph(stream, 4, &mut |i| run(op, &x, &ws[i % 2], &g, &y, &y));
            let gbs = (n * k * 2) as f64 / us / 1e3;
            println!(
                "  N={n:>6} K={k:>5} norm={}: {us:>7.2} us {gbs:>5.0} GB/s {:>5.1} %",
                u8::from(norm),
                gbs / HBM_GBS * 100.0
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn linear_bench() {
    require_gpu("linear_bench");
    let device = crate::cuda::device(0).expect("device 0");
    let stream = CudaStream::new(device).expect("stream");
    let _scope = StreamScope::enter(0, stream.raw(), Some(stream.clone()));
    model(
        "Llama-3.2-1B layer",
        16,
        layer_ops(2048, 3072, 2048, 8192),
        &stream,
    );
    model(
        "Qwen3-0.6B layer",
        28,
        layer_ops(1024, 4096, 2048, 3072),
        &stream,
    );
    set_pdl(true);

    heads(&stream);

    // Attention at the Llama-1B decode shape, 96 of 512 positions filled.
    let mut rng = Rng(9);
    let q = dev(&mut rng, &[1, 32, 1, 64]);
    let kc = dev(&mut rng, &[1, 8, 512, 64]);
    let vc = dev(&mut rng, &[1, 8, 512, 64]);
    println!("decode attention, Hq=32 Hkv=8 D=64, cache 512 (allocation nodes between calls):");
    for fill in [96i64, 512] {
        for short in [false, true] {
            crate::kernels::attention::set_decode_kernel(Some(short));
            let us = time_graph(&stream, 100, &mut |_| {
                let o = crate::kernels::attention::decode_attention(
                    &q,
                    &kc,
                    &vc,
                    crate::kernels::attention::Positions::ValidLen(fill),
                    0.125,
                    0,
                    crate::kernels::attention::Layout::Bthd,
                )
                .expect("attention");
                drop(o);
            });
            println!(
                "  {} positions, {} kernel: {us:.2} us a call",
                fill,
                if short { "short-context" } else { "split" }
            );
        }
    }
    crate::kernels::attention::set_decode_kernel(None);
}
