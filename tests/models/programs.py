"""The suite's programs as Program specs (suite_lib.Program), shared by
export_suite.py (ExecuTorch 1.2) and export_et15.py (ExecuTorch 1.5.1)."""
import copy

import torch
from torch.export import Dim

import models as M
from suite_lib import Program, decoder_generate, pick_decoder_seed

BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32
GEN_STEPS = 16
PROMPT_LEN = 6
DECODE_CASES = 3


def gen(seed):
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------- quantization (torchao)


def q_int4_tile_packed(m):
    """ExecuTorch's CUDA int4 path: Int4WeightOnlyConfig(group_size=128,
    int4_packing_format="tile_packed_to_4d"); lowers to aten._weight_int4pack_mm.
    Packing runs on the module's device (CUDA)."""
    from torchao.quantization import Int4WeightOnlyConfig, quantize_

    quantize_(m, Int4WeightOnlyConfig(group_size=128, int4_packing_format="tile_packed_to_4d"))
    return m


def q_intx_int4(m):
    """ExecuTorch's "4w" without a packing format (extension/llm/export/quantize.py):
    IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32))."""
    from torchao.quantization import IntxWeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    quantize_(m, IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32)))
    return m


QUANT = {
    "int4tp": (q_int4_tile_packed, True, "Int4WeightOnlyConfig(group_size=128, int4_packing_format='tile_packed_to_4d')"),
    "int4wo": (q_intx_int4, False, "IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32))"),
}

# ----------------------------------------------------------------------------- stateless programs


def simple(name, dtype, make, cases, seed, dynamic=None, **kw):
    """One 'forward' method; make() builds the float32 module (same weights every call)."""
    return Program(
        name=name,
        dtype=dtype,
        factories={"forward": make},
        example={"forward": cases[0]},
        cases={"forward": cases},
        dynamic={"forward": dynamic} if dynamic else {},
        seed=seed,
        **kw,
    )


def frozen(build, seed):
    """A factory returning deep copies of one module built once with a fixed seed."""
    torch.manual_seed(seed)
    base = build()
    return lambda: copy.deepcopy(base)


def mlp_dyn_f32():
    make = frozen(M.MLP, 11)
    g = gen(12)
    cases = [(torch.randn(b, 64, generator=g),) for b in (4, 7, 33, 1)]
    return simple("mlp_dyn_f32", F32, make, cases, 11, dynamic=({0: Dim("b", min=1, max=64)},),
                  notes={"dynamic": "batch Dim('b', min=1, max=64)"})


def mlp_f32(name="et15_mlp_f32"):
    make = frozen(M.MLP, 13)
    g = gen(14)
    return simple(name, F32, make, [(torch.randn(4, 64, generator=g),), (torch.randn(4, 64, generator=g),)], 13)


def encdec(name="et15_encdec"):
    torch.manual_seed(15)
    enc, dec = M.Prefixed("encoder", M.Enc()).eval(), M.Prefixed("decoder", M.Dec()).eval()
    g = gen(16)
    x = torch.randn(4, 32, generator=g)
    with torch.no_grad():
        h = enc(x)
    return Program(
        name=name,
        dtype=F32,
        factories={"encoder": lambda: copy.deepcopy(enc), "decoder": lambda: copy.deepcopy(dec)},
        example={"encoder": (x,), "decoder": (h,)},
        cases={"encoder": [(x,)], "decoder": [(h,), (torch.randn(4, 64, generator=g),)]},
        seed=15,
        notes={"pipeline": "encoder output 0 -> decoder input 0 (--pipeline encoder,decoder)",
               "fqns": "encoder.l.*, decoder.l.*: distinct, as ExecuTorch 1.5.1 requires"},
    )


SDPA_TRITON_BUG = (
    "ExecuTorch 1.2's Triton SDPA kernel (the export default) does not mask key columns past Lk "
    "when there is no mask and is_causal=False, and ignores the mask's head stride: wrong output "
    "whenever Lk is not a multiple of the autotuned BLOCK_N (seen on the GPU: identical wrong "
    "numbers from upstream's C++ backend; sdpa_check.py isolates it). Workaround: "
    "CompileSpec('triton_kernel_mode', b'OFF') (the *_notriton program)"
)


def whisper(name, triton):
    w = M.whisper_model(1)
    enc_m, dec_m = M.WhisperEncoder(w).eval(), M.WhisperDecoder(w).eval()
    feats, ids = M.whisper_inputs(2)
    ids2 = torch.randint(3, 1000, (1, 8), generator=gen(4))
    with torch.no_grad():  # the decoder's input: the CPU fp32 encoder output on bf16-rounded weights/inputs
        enc_states = copy.deepcopy(enc_m).to(BF16).float()(feats.to(BF16).float())
    specs = {} if triton else {"triton_kernel_mode": "OFF"}
    return Program(
        name=name,
        dtype=BF16,
        factories={"encoder": lambda: copy.deepcopy(enc_m), "decoder": lambda: copy.deepcopy(dec_m)},
        example={"encoder": (feats,), "decoder": (ids, enc_states)},
        cases={"encoder": [(feats,)], "decoder": [(ids, enc_states), (ids2, enc_states)]},
        compile_specs=specs,
        seed=1,
        known_failure=SDPA_TRITON_BUG if triton else None,
        notes={
            "config": M.WHISPER_CFG,
            "attn": "HF sdpa path: encoder self-attn no mask; decoder self-attn bool mask [1,1,8,8] "
                    "(export materializes it; is_causal=False); cross-attn no mask; scale=1.0 (q pre-scaled)",
            "triton_sdpa": "ExecuTorch 1.2 default (ReplaceEdgeOpWithTritonOpPass)" if triton else "triton_kernel_mode=OFF",
        },
    )


def attn_blocks(name, triton):
    blocks = M.attn_blocks(3)
    specs = {} if triton else {"triton_kernel_mode": "OFF"}
    g = gen(30)
    cases = {}
    for m, (mod, args) in blocks.items():
        second = tuple(torch.randn(a.shape, generator=g) for a in args)
        cases[m] = [args, second]
    return Program(
        name=name,
        dtype=BF16,
        factories={m: (lambda mod=mod: copy.deepcopy(mod)) for m, (mod, _) in blocks.items()},
        example={m: args for m, (_, args) in blocks.items()},
        cases=cases,
        compile_specs=specs,
        seed=3,
        known_failure=SDPA_TRITON_BUG if triton else None,
        notes={"methods": {m: {"kind": k, "Lq": lq, "Lk": lk, "heads": 4, "head_dim": 32}
                           for m, (k, lq, lk) in M.ATTN_METHODS.items()}},
    )


def dinov2(name, dtype):
    make = frozen(lambda: M.dinov2(5), 5)
    g = gen(50)
    cases = [(torch.randn(1, 3, 56, 56, generator=g),), (torch.randn(1, 3, 56, 56, generator=g),)]
    return simple(name, dtype, make, cases, 5, triton_retry_off=True,
                  notes={"config": "Dinov2 hidden 128, 2 layers, 4 heads, image 56, patch 14 (17 tokens)"})


def resnet18(name, dtype):
    make = frozen(lambda: M.resnet18(6), 6)
    g = gen(60)
    cases = [(torch.randn(2, 3, 64, 64, generator=g),), (torch.randn(2, 3, 64, 64, generator=g),)]
    return simple(name, dtype, make, cases, 6, notes={"config": f"torchvision ResNet-18 topology (BasicBlock, [2,2,2,2], num_classes=10) at width "
                                       f"{M.RESNET_WIDTH} (1/4): the full width is 43 MB in float32"})


def conformer():
    make = frozen(lambda: M.conformer(7), 7)
    g = gen(70)
    cases = [(torch.randn(1, 80, 128, generator=g),), (torch.randn(1, 80, 128, generator=g),)]
    return simple("conformer_bf16", BF16, make, cases, 7,
                  notes={"config": "conv subsampling x4, d 128, 4 heads, 2 blocks, conv kernel 15 -> [1,32,128]"})


def linear_int4(name, kind):
    qfn, needs_cuda, desc = QUANT[kind]
    make = frozen(M.LinearStack, 80)
    g = gen(81)
    cases = [(torch.randn(4, 1024, generator=g),), (torch.randn(4, 1024, generator=g),)]
    return simple(name, BF16, make, cases, 80, quantize=qfn, quant_needs_cuda=needs_cuda,
                  notes={"quantization": desc, "config": "3 x Linear(1024,1024) + Linear(1024,512), SiLU"})


# ----------------------------------------------------------------------------- decoders


def decoder_program(name, make, base_seed, prompt_seed, dtype=BF16, quant=None, split=False, max_seq=64, vocab=1000,
                    seed_tries=40):
    """Stateful decoder: forward(input_ids [1,T], cache_position [T]) -> logits.
    split=False: one method 'forward' (T dynamic 1..max_seq); cases: prefill of the
    prompt, then DECODE_CASES single-token steps feeding the greedy tokens.
    split=True: 'prefill' (T dynamic 2..max_seq; cases: a chunked prefill, 4 then
    2 tokens) and 'decode' (T = 1; cases: the prompt's first 4 tokens one at a time
    from position 0), both exported from ONE module instance; each method's cases
    start from the exported (zero) cache."""
    qfn = QUANT[quant][0] if quant else None
    prompt = torch.randint(3, vocab, (1, PROMPT_LEN), generator=gen(prompt_seed))
    qdev = "cuda" if torch.cuda.is_available() else "cpu"
    seed, cpu_margin = pick_decoder_seed(make, base_seed, prompt, GEN_STEPS, dtype, quantize=qfn, qdev=qdev,
                                         tries=seed_tries)
    toks, info = decoder_generate(make, seed, prompt, GEN_STEPS, dtype, quantize=qfn)
    info["seed_search_min_margin"] = cpu_margin
    fac = lambda: make(seed)  # noqa: E731
    T = PROMPT_LEN
    notes = {"greedy_steps": GEN_STEPS, "prompt_len": T, "max_seq": max_seq}
    if quant:
        notes["quantization"] = QUANT[quant][2]
    if not split:
        cases = [(prompt, torch.arange(T))]
        cases += [(torch.tensor([[toks[i]]]), torch.tensor([T + i])) for i in range(DECODE_CASES)]
        p = Program(
            name=name, dtype=dtype,
            factories={"forward": fac},
            example={"forward": (prompt, torch.arange(T))},
            cases={"forward": cases},
            dynamic={"forward": ({1: Dim("T", min=1, max=max_seq)}, {0: Dim("T", min=1, max=max_seq)})},
            stateful=True, seed=seed, notes=notes,
            quantize=qfn, quant_needs_cuda=bool(quant and QUANT[quant][1]),
        )
        meth = ("forward", "forward")
    else:
        pre = [(prompt[:, :4], torch.arange(4)), (prompt[:, 4:], torch.arange(4, T))]
        dec = [(prompt[:, i:i + 1], torch.tensor([i])) for i in range(4)]
        Tp = Dim("T", min=2, max=max_seq)
        p = Program(
            name=name, dtype=dtype,
            factories={"prefill": fac, "decode": fac},
            example={"prefill": (prompt, torch.arange(T)), "decode": (prompt[:, :1], torch.tensor([0]))},
            cases={"prefill": pre, "decode": dec},
            dynamic={"prefill": ({1: Tp}, {0: Tp})},
            stateful=True, shared_module=True, seed=seed, notes=notes,
            quantize=qfn, quant_needs_cuda=bool(quant and QUANT[quant][1]),
        )
        notes["generate_needs_shared_state"] = (
            "prefill and decode are separate delegates, each with its own copy of the KV-cache buffers "
            "(same FQNs); --generate with prefill->decode matches only if the backend shares them")
        meth = ("prefill", "decode")
    p.generate = {
        "prefill_method": meth[0],
        "decode_method": meth[1],
        "prompt_ids": [int(x) for x in prompt[0]],
        "tokens": toks,
        "max_seq_len": max_seq,
        "_info": info,
    }
    return p


# The seed search starts at a seed that passed it on the development machine (CPU fp32);
# it moves on by itself if that seed's margin is below the threshold elsewhere.
def qwen3(name="qwen3_bf16", quant=None, split=False):
    return decoder_program(name, M.qwen3, 110, 1110, quant=quant, split=split)


def gemma3(name="gemma3_bf16"):
    return decoder_program(name, M.gemma3, 214, 1214, max_seq=M.GEMMA_MAX_SEQ)


def llama1b(name="llama1b_bf16"):
    """Llama-3.2-1B-shaped (models.LLAMA1B_CFG): T dynamic 1..1024, static KV cache of 1024.
    One seed is tried (each try builds 1.5e9 parameters on the CPU); its greedy margin is recorded
    in the manifest whatever it is."""
    return decoder_program(name, M.llama1b, 310, 1310, max_seq=M.LLAMA1B_CFG["max_seq"],
                           vocab=M.LLAMA1B_CFG["vocab"], seed_tries=1)

# ----------------------------------------------------------------------------- issue 23: sort and random fallback ops
# ExecuTorch 1.5.1's CudaBackend lists aten.sort.stable and aoti_torch_cuda_randint_low_out
# as supported fallback kernels (not aoti_torch_cuda_rand): see export_et15.py.


def moe(name="et15_moe_bf16"):
    """MoE decoder (8 experts, top-2, capacity 2 per call): the .so must import
    aoti_torch_cuda_sort_stable (checked after export); greedy tokens vs eager."""
    p = decoder_program(name, M.moe, 230, 1230, max_seq=M.MOE_CFG["max_seq"])
    p.expect_imports = ["aoti_torch_cuda_sort_stable"]
    p.notes["config"] = {k: v for k, v in M.MOE_CFG.items()}
    p.notes["moe"] = ("routing: stable descending sort of the router logits over 8 experts, top 2; dispatch: "
                      "stable sort of the N*2 token-expert assignments by expert (N dynamic up to 320, so up "
                      "to 640 elements: an Inductor fallback), capacity 2 per expert and call in that order")
    return p


def sampler(name, fallback_random=False):
    """Decoder sampling on the device (Gumbel-max with torch.rand): random outputs checked
    statistically (hist -> softmax(last logits / T), moments -> 1/2, 1/3) within the suite's
    tolerance. Default Inductor lowering: Triton Philox with seeds from
    aoti_torch_cuda_randint_low_out; fallback_random=True: aoti_torch_cuda_rand."""
    make = frozen(lambda: M.sampler(240), 240)
    prompt = torch.randint(3, M.SAMPLER_CFG["vocab"], (1, PROMPT_LEN), generator=gen(1240))
    T = PROMPT_LEN
    cases = [(prompt, torch.arange(T))] + [(torch.tensor([[7 + i]]), torch.tensor([T + i])) for i in range(2)]
    Td = Dim("T", min=1, max=M.SAMPLER_CFG["max_seq"])
    p = Program(
        name=name, dtype=BF16,
        factories={"forward": make},
        example={"forward": cases[0]},
        cases={"forward": cases},
        dynamic={"forward": ({1: Td}, {0: Td})},
        stateful=True, seed=240,
        notes={"samples": M.SAMPLES, "temperature": M.TEMPERATURE,
               "random_outputs": "outputs 1 (hist) and 2 (moments) are random: eager's own draws are the "
                                 "reference, the tolerance (3x the GPU-vs-CPU eager spread) makes it a "
                                 "statistical check; each process starts from the library's default seed, "
                                 "so two runs of one mode give the same numbers (determinism)"},
    )
    if fallback_random:
        p.inductor_config = {"fallback_random": True}
        # Not in ExecuTorch 1.5.1's list (it has randint_low_out only): this library implements it.
        p.extra_fallback_kernels = ["aoti_torch_cuda_rand", "at::_ops::rand::call"]
        p.expect_imports = ["aoti_torch_cuda_rand"]
    else:
        p.expect_imports = ["aoti_torch_cuda_randint_low_out"]
    return p
