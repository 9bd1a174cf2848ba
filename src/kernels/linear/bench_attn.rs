//! `linear_attention_bench` (ignored; GPU): `linear_bench`'s decoder layers with their
//! attention: the four fused linears of each layer and, between QKV and O,
//! `et_attention_rope` (RoPE, the KV-cache write and the short-context decode attention of the
//! token at positions 80 and 400, its keys over 1, 2, 4 or 8 blocks and as the built-in choice
//! splits them; Qwen3 and Gemma-3 with their q/k norms), all into graph-private memory
//! (no allocation nodes), as a program's replay runs them. Gemma-3 is its shape only: SiLU and
//! the norms of Llama's rounding, no add-norms. GPU time per layer from CUDA events around
//! replays, without the attention (the layer chain of `bench.rs`) and with it, PDL on: the
//! difference is what the attention step costs a layer.
use super::bench::{dev, layer_ops, run, Op, BF16, HBM_GBS};
use super::Tensor;
use crate::cuda::arena::Arena;
use crate::cuda::memory::{set_capture_memory, CaptureMemory};
use crate::cuda::stream::CudaStream;
use crate::dtype::codes as dtype;
use crate::kernels::attention::{
    attention_rope, set_decode_rows, set_decode_splits, split_packed, HeadNorm, Layout, Packed,
    Positions, Rope,
};
use crate::kernels::cpu_tensor;
use crate::kernels::gemm::bench::time_graph;
use crate::kernels::gemm::gpu_tests::Rng;
use std::sync::Arc;

/// A decoder shape: hidden size, query heads, KV heads, head size, MLP width, layers, q/k norms.
struct Shape {
    name: &'static str,
    hidden: usize,
    hq: usize,
    hkv: usize,
    d: usize,
    ffn: usize,
    layers: usize,
    qk_norm: bool,
}

/// The shapes of the HF benchmark's three models (`bench/hf_scale.sh`).
const SHAPES: [Shape; 3] = [
    Shape {
        name: "Llama-3.2-1B",
        hidden: 2048,
        hq: 32,
        hkv: 8,
        d: 64,
        ffn: 8192,
        layers: 16,
        qk_norm: false,
    },
    Shape {
        name: "Qwen3-0.6B",
        hidden: 1024,
        hq: 16,
        hkv: 8,
        d: 128,
        ffn: 3072,
        layers: 28,
        qk_norm: true,
    },
    Shape {
        name: "Gemma-3-1B",
        hidden: 1152,
        hq: 4,
        hkv: 1,
        d: 256,
        ffn: 6912,
        layers: 26,
        qk_norm: true,
    },
];

/// A device int64 `[1]` holding `v`.
fn position(v: i64) -> Tensor {
    let host = cpu_tensor(dtype::INT64, &[1]);
    // SAFETY: the host tensor holds one 8-byte element.
    unsafe { std::ptr::write_unaligned(host.data_ptr().cast::<i64>(), v) };
    let d = crate::cuda::memory::empty_strided(
        vec![1],
        vec![1],
        dtype::INT64,
        crate::tensor::Device::Cuda(0),
    )
    .expect("alloc");
    crate::cuda::copy::copy_tensor(&d, &host).expect("upload");
    d
}

/// `[1, n]` (or `[1, 1, n]`) over the start of `t`'s storage.
fn row(t: &Tensor, n: usize, three: bool) -> Tensor {
    let n = n as i64;
    let (sizes, strides) = if three {
        (vec![1, 1, n], vec![n, n, 1])
    } else {
        (vec![1, n], vec![n, 1])
    };
    Tensor::view(t.storage.clone(), BF16, sizes, strides, 0).expect("view")
}

/// One layer's weights and caches, the shared tensors, and the activations of the chain.
struct Model {
    ops: [Op; 4],
    layers: Vec<([Tensor; 4], Tensor, Tensor)>,
    g: Tensor,
    qk_norm: Option<[Tensor; 2]>,
    cos_sin: [Tensor; 2],
    pos: Tensor,
    acts: Vec<Tensor>,
    at: Packed,
}

fn model(s: &Shape) -> Model {
    let mut rng = Rng(11);
    let (qd, kvd) = (s.hq * s.d, s.hkv * s.d);
    let ops = layer_ops(s.hidden, qd + 2 * kvd, qd, s.ffn);
    let cache = |rng: &mut Rng| dev(rng, &[1, s.hkv, 512, s.d]);
    let layers = (0..s.layers)
        .map(|_| {
            let w = ops.map(|o| dev(&mut rng, &[o.n, o.k]));
            (w, cache(&mut rng), cache(&mut rng))
        })
        .collect();
    let g = dev(&mut rng, &[s.hidden]);
    let qk_norm = s.qk_norm.then(|| [0, 1].map(|_| dev(&mut rng, &[s.d])));
    let cos_sin = [0, 1].map(|_| dev(&mut rng, &[1, 1, 1, s.d]));
    let acts = [s.hidden, ops[0].n, s.hidden, ops[2].n / 2, s.hidden]
        .iter()
        .map(|&n| dev(&mut rng, &[1, n]))
        .collect();
    let at = Packed {
        heads: s.hq as i64,
        q_off: 0,
        k_off: qd as i64,
        v_off: (qd + kvd) as i64,
    };
    Model {
        ops,
        layers,
        g,
        qk_norm,
        cos_sin,
        pos: position(80),
        acts,
        at,
    }
}

/// Enqueue layer `i` of `m`: QKV, the attention (or none: O reads QKV's first columns), O,
/// gate/up, down.
fn layer(m: &Model, s: &Shape, i: usize, attn: bool) {
    let (w, kc, vc) = &m.layers[i % s.layers];
    let [h, yqkv, h1, ygu, h2] = [0, 1, 2, 3, 4].map(|j| &m.acts[j]);
    let (ops, g, qd) = (m.ops, &m.g, s.hq * s.d);
    run(ops[0], h, &w[0], g, h, yqkv);
    let a = if attn {
        let [q, k, v] = split_packed(&row(yqkv, ops[0].n, true), kc, m.at).expect("views");
        let norm = m.qk_norm.as_ref().map(|[qn, kn]| HeadNorm {
            q_weight: qn,
            k_weight: kn,
            mode: 1,
            eps: 1e-6,
            offset: 0.0,
        });
        let [cos, sin] = &m.cos_sin;
        let r = Rope {
            k_new: &k,
            v_new: &v,
            cos,
            sin,
            norm,
        };
        let opts = (0.125, 0, Layout::Bthd);
        let o = attention_rope(&q, kc, vc, Positions::Device(&m.pos), opts, &r).expect("attention");
        row(&o, qd, false)
    } else {
        row(yqkv, qd, false)
    };
    run(ops[1], &a, &w[1], g, h, h1);
    run(ops[2], h1, &w[2], g, h1, ygu);
    run(ops[3], ygu, &w[3], g, h1, h2);
}

/// The decode attention's (key splits, rows a block) the bench runs (`set_decode_splits`,
/// `set_decode_rows`; `None`: the built-in choice).
const CONFIGS: [(Option<u32>, Option<u32>); 9] = [
    (Some(1), None),
    (Some(2), None),
    (Some(4), None),
    (Some(8), None),
    (None, None),
    (Some(1), Some(1)),
    (None, Some(1)),
    (Some(1), Some(2)),
    (None, Some(2)),
];

fn layers_with_attention(s: &Shape, stream: &Arc<CudaStream>) {
    let mut m = model(s);
    let bytes: usize = m.ops.iter().map(|o| o.n * o.k * 2).sum();
    println!(
        "{}: {} layers with attention (Hq={} Hkv={} D={}), {:.1} MB of weights a layer (PDL on):",
        s.name,
        s.layers,
        s.hq,
        s.hkv,
        s.d,
        bytes as f64 / 1e6
    );
    let time = |m: &Model, label: &str, attn: bool| {
        let arena = Arc::new(Arena::new(Vec::new(), Vec::new()).expect("arena"));
        let before = set_capture_memory(CaptureMemory::Arena(arena));
        let us = time_graph(stream, s.layers, &mut |i| layer(m, s, i, attn));
        set_capture_memory(before);
        let gbs = bytes as f64 / us / 1e3;
        println!(
            "  {label}: {us:.2} us a layer, {gbs:.0} GB/s of weights, {:.1} % of 4.8 TB/s",
            gbs / HBM_GBS * 100.0
        );
    };
    time(&m, "no attention", false);
    // The token at position 80 (81 keys) and 400 (401 keys) of the 512-position cache.
    for at in [80, 400] {
        m.pos = position(at);
        for (splits, rows) in CONFIGS {
            set_decode_splits(splits).expect("splits");
            set_decode_rows(rows).expect("rows");
            let keys = match splits {
                Some(n) => format!("keys over {n} block(s)"),
                None => "built-in splits".to_string(),
            };
            let rows = match rows {
                Some(n) => format!(", at most {n} row(s) a block"),
                None => String::new(),
            };
            time(&m, &format!("attention at {at}, {keys}{rows}"), true);
        }
    }
    set_decode_splits(None).expect("splits");
    set_decode_rows(None).expect("rows");
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn linear_attention_bench() {
    crate::kernels::gemm::gpu_tests::require_gpu("linear_attention_bench");
    let device = crate::cuda::device(0).expect("device 0");
    let stream = CudaStream::new(device).expect("stream");
    let _scope = crate::cuda::stream::StreamScope::enter(0, stream.raw(), Some(stream.clone()));
    crate::kernels::set_pdl(true);
    // BENCH_ATTN_SHAPE=<part of a name> runs only the shapes it names (under ncu).
    let only = std::env::var("BENCH_ATTN_SHAPE").unwrap_or_default();
    for s in SHAPES.iter().filter(|s| s.name.contains(only.as_str())) {
        layers_with_attention(s, &stream);
    }
}
