"""The model suite's stateful decoders (tests/models/models.py re-exports them): the Qwen3-style
decoder and its weight recipe, the Llama-3.2-1B shape, the MoE decoder, the on-device sampling
decoder, and Gemma-3 (HF) with a static cache. The KV cache lives in registered buffers updated in
place with index_copy_ (models.py's docstring)."""
import torch
import torch.nn.functional as F
from torch import nn

from model_seed import seeded

# ----------------------------------------------------------------------------- Qwen3-style stateful decoder


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dt)


def rope_tables(max_seq, hd, theta=10000.0):
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    f = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv)
    emb = torch.cat([f, f], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    # Slices, not x.chunk: chunk lowers to aten::split_copy, which AOTInductor's CUDA
    # path has no fallback kernel for without libtorch (the export fails).
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class QwenAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.h, self.kv, self.hd = c["heads"], c["kv_heads"], c["head_dim"]
        d = c["hidden"]
        self.q_proj = nn.Linear(d, self.h * self.hd, bias=False)
        self.k_proj = nn.Linear(d, self.kv * self.hd, bias=False)
        self.v_proj = nn.Linear(d, self.kv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.h * self.hd, d, bias=False)
        # Qwen3 normalizes q and k per head; Llama does not (cfg "qk_norm": False).
        self.q_norm = RMSNorm(self.hd) if c.get("qk_norm", True) else nn.Identity()
        self.k_norm = RMSNorm(self.hd) if c.get("qk_norm", True) else nn.Identity()
        shape = (1, self.kv, c["max_seq"], self.hd)
        self.register_buffer("k_cache", torch.zeros(shape))
        self.register_buffer("v_cache", torch.zeros(shape))

    def forward(self, x, cos, sin, pos, mask):
        B, T, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, T, self.h, self.hd)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, T, self.kv, self.hd)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kv, self.hd).transpose(1, 2)
        cos, sin = cos[None, None].to(q.dtype), sin[None, None].to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        self.k_cache.index_copy_(2, pos, k)
        self.v_cache.index_copy_(2, pos, v)
        rep = self.h // self.kv
        kk = self.k_cache.repeat_interleave(rep, dim=1)
        vv = self.v_cache.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask, is_causal=False)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.h * self.hd))


class QwenBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, f = c["hidden"], c["ffn"]
        self.input_layernorm = RMSNorm(d)
        self.self_attn = QwenAttention(c)
        self.post_attention_layernorm = RMSNorm(d)
        self.gate_proj = nn.Linear(d, f, bias=False)
        self.up_proj = nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, x, cos, sin, pos, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, pos, mask)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


QWEN_CFG = dict(vocab=1000, hidden=256, layers=2, heads=4, kv_heads=2, head_dim=64, ffn=512, max_seq=64)
# Llama-3.2-1B's shapes (hidden 2048, 16 layers, 32 query / 8 KV heads of 64, SwiGLU 8192, vocab
# 128256, RoPE theta 500000, no q/k norm) with a static KV cache of 1024 positions. The head is
# its own tensor (Llama-3.2-1B ties it to the embedding; init_decoder_weights needs it separate):
# 1.50e9 parameters, 3.0 GB in bf16.
LLAMA1B_CFG = dict(vocab=128256, hidden=2048, layers=16, heads=32, kv_heads=8, head_dim=64, ffn=8192,
                   max_seq=1024, qk_norm=False, rope_theta=500000.0)


class Qwen3Decoder(nn.Module):
    """Llama/Qwen3-style decoder: RMSNorm, RoPE, GQA (repeat_interleave), SwiGLU,
    q/k RMSNorm; KV cache in buffers [1, kv_heads, max_seq, head_dim]."""

    def __init__(self, c=QWEN_CFG):
        super().__init__()
        self.cfg = dict(c)
        self.embed_tokens = nn.Embedding(c["vocab"], c["hidden"])
        self.layers = nn.ModuleList(QwenBlock(c) for _ in range(c["layers"]))
        self.norm = RMSNorm(c["hidden"])
        self.lm_head = nn.Linear(c["hidden"], c["vocab"], bias=False)
        cos, sin = rope_tables(c["max_seq"], c["head_dim"], c.get("rope_theta", 10000.0))
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.register_buffer("key_pos", torch.arange(c["max_seq"]), persistent=False)

    def forward(self, input_ids, cache_position):
        x = self.embed_tokens(input_ids)
        cos, sin = self.rope_cos[cache_position], self.rope_sin[cache_position]
        mask = (cache_position[:, None] >= self.key_pos[None, :])[None, None]
        for layer in self.layers:
            x = layer(x, cos, sin, cache_position, mask)
        return self.lm_head(self.norm(x))


def init_decoder_weights(model, g, std=0.08, a=0.5, noise=0.5, embed="embed_tokens.weight", head="lm_head.weight"):
    """Random weights; the lm_head is a*E[perm]*4/sqrt(d) + noise*N(0,1) (E: the
    token embedding, perm: a random permutation), so that the next token leans on
    the current one: greedy decoding then walks through varied tokens, and a seed
    with a clear top-1/top-2 margin at every step is easy to find."""
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, p in params.items():
            if name == head:
                continue
            if name == embed:
                p.copy_(torch.randn(p.shape, generator=g))
            elif "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * std)
        E = params[embed]
        perm = torch.randperm(E.shape[0], generator=g)
        params[head].copy_(a * E[perm] * 4 / E.shape[1] ** 0.5 + noise * torch.randn(E.shape, generator=g))


def qwen3(seed):
    g = seeded(seed)
    m = Qwen3Decoder().eval()
    init_decoder_weights(m, g)
    return m


def llama1b(seed):
    """The Llama-3.2-1B-shaped decoder (LLAMA1B_CFG), random weights, float32 like every builder
    here (6 GB; the program holds it in bfloat16)."""
    g = seeded(seed)
    m = Qwen3Decoder(LLAMA1B_CFG).eval()
    init_decoder_weights(m, g, std=0.02)
    return m



# ----------------------------------------------------------------------------- MoE decoder and on-device sampling
# (issue 23: programs whose AOTInductor .so imports aoti_torch_cuda_sort_stable,
# aoti_torch_cuda_randint_low_out or aoti_torch_cuda_rand)

MOE_CFG = dict(vocab=1000, hidden=128, layers=2, heads=4, kv_heads=2, head_dim=32, ffn=128,
               experts=8, top_k=2, capacity=2, router_scale=8.0, max_seq=320)


class MoEFFN(nn.Module):
    """Top-k MoE feed-forward with per-call expert capacity (Switch-style token dropping).

    Routing: torch.sort(router logits, descending, stable) over the experts, the first k.
    Dispatch: the token-expert assignments sorted by expert with a STABLE sort, so that
    inside an expert the earlier token comes first; an assignment past the expert's
    capacity in that order is dropped (weight 0). Whether a token is dropped therefore
    depends on the sort being correct and stable. The dispatch sort runs over N*k
    elements with N (tokens) dynamic up to max_seq = 320, i.e. up to 640 > 512:
    Inductor keeps it as a fallback (aten.sort.stable -> aoti_torch_cuda_sort_stable)
    instead of its persistent Triton sort (<= 512 elements). The inverse permutation is
    a second stable sort (argsort of the permutation). Experts are computed densely for
    every token (tiny) and the chosen ones gathered: no data-dependent shapes."""

    def __init__(self, c):
        super().__init__()
        d, f, E = c["hidden"], c["ffn"], c["experts"]
        self.E, self.k, self.capacity, self.scale = E, c["top_k"], c["capacity"], c["router_scale"]
        self.router = nn.Linear(d, E, bias=False)
        self.w_gate = nn.Parameter(torch.zeros(E, d, f))
        self.w_up = nn.Parameter(torch.zeros(E, d, f))
        self.w_down = nn.Parameter(torch.zeros(E, f, d))

    def forward(self, h):
        B, T, d = h.shape
        N, k = B * T, self.k
        x = h.reshape(N, d)
        logits = self.router(x).float() * self.scale
        vals, idx = torch.sort(logits, dim=-1, descending=True, stable=True)
        top_v, top_i = vals[:, :k], idx[:, :k]
        w = torch.softmax(top_v, dim=-1)
        flat_e = top_i.reshape(N * k)
        order = torch.sort(flat_e, stable=True).indices  # assignments grouped by expert, token order kept
        inv = torch.sort(order, stable=True).indices  # inverse permutation
        counts = (flat_e[:, None] == torch.arange(self.E, device=h.device)[None, :]).sum(0)
        starts = torch.cumsum(counts, 0) - counts
        pos_sorted = torch.arange(N * k, device=h.device) - starts[flat_e[order]]
        pos = pos_sorted[inv].reshape(N, k)  # rank of each assignment inside its expert
        w = w * (pos < self.capacity).float()
        g = torch.einsum("nd,edf->enf", x, self.w_gate)
        u = torch.einsum("nd,edf->enf", x, self.w_up)
        y_all = torch.einsum("enf,efd->end", F.silu(g) * u, self.w_down)  # [E, N, d]
        y = y_all[top_i, torch.arange(N, device=h.device)[:, None]]  # [N, k, d]
        out = (y * w[..., None].to(y.dtype)).sum(1)
        return out.reshape(B, T, d)


class MoEBlock(QwenBlock):
    def __init__(self, c):
        super().__init__(c)
        del self.gate_proj, self.up_proj, self.down_proj
        self.moe = MoEFFN(c)

    def forward(self, x, cos, sin, pos, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, pos, mask)
        return x + self.moe(self.post_attention_layernorm(x))


class MoEDecoder(Qwen3Decoder):
    """Qwen3-style decoder (KV cache, GQA, RoPE) with MoE feed-forward blocks."""

    def __init__(self, c=MOE_CFG):
        super().__init__(c)
        self.layers = nn.ModuleList(MoEBlock(c) for _ in range(c["layers"]))


def moe(seed):
    g = seeded(seed)
    m = MoEDecoder().eval()
    init_decoder_weights(m, g)
    return m


SAMPLER_CFG = dict(vocab=1000, hidden=128, layers=1, heads=4, kv_heads=2, head_dim=32, ffn=256, max_seq=64)
SAMPLES = 8192
TEMPERATURE = 0.7


class SamplerDecoder(nn.Module):
    """A Qwen3-style decoder that samples on the device: Gumbel-max over SAMPLES draws
    from softmax(last logits / TEMPERATURE), with torch.rand. forward(input_ids [1,T],
    cache_position [T]) -> (logits [1,T,V], hist [V], moments [2]): hist is the
    empirical distribution of the samples (-> softmax(last / TEMPERATURE)), moments the
    mean of u and of u^2 over all SAMPLES * V uniforms (-> 1/2, 1/3). Random outputs:
    the references are eager's own draws, so the suite's tolerance (3x the GPU-vs-CPU
    eager spread) makes the check statistical. Inductor's default lowering draws its
    Triton Philox seeds with aten.randint.low_out (aoti_torch_cuda_randint_low_out);
    with fallback_random=True it calls aten.rand (aoti_torch_cuda_rand)."""

    def __init__(self, base):
        super().__init__()
        self.base = base

    def forward(self, input_ids, cache_position):
        logits = self.base(input_ids, cache_position)
        last = logits[0, -1].float() / TEMPERATURE
        V = last.shape[0]
        u = torch.rand(SAMPLES, V, device=last.device, dtype=torch.float32)
        gumbel = -torch.log(-torch.log(u.clamp(min=1e-12, max=1.0 - 1e-7)))
        samples = torch.argmax(last[None, :] + gumbel, dim=-1)
        hist = (samples[:, None] == torch.arange(V, device=last.device)[None, :]).float().mean(0)
        moments = torch.stack([u.mean(), (u * u).mean()])
        return logits, hist.to(logits.dtype), moments.to(logits.dtype)


def sampler(seed):
    g = seeded(seed)
    base = Qwen3Decoder(SAMPLER_CFG).eval()
    init_decoder_weights(base, g)
    return SamplerDecoder(base).eval()


# ----------------------------------------------------------------------------- Gemma-3 (HF) with a static cache

GEMMA_CFG = dict(
    vocab_size=1000,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=128,
    sliding_window=8,
    layer_types=["sliding_attention", "sliding_attention", "full_attention"],
    query_pre_attn_scalar=32,
    final_logit_softcapping=30.0,
)
GEMMA_MAX_SEQ = 64


class GemmaStateful(nn.Module):
    """Gemma3ForCausalLM with HF's StaticCache (every layer a StaticLayer of
    max_seq; the sliding-window layers still get the sliding mask), cache tensors
    registered as buffers. forward(input_ids [1,T], cache_position [T])."""

    def __init__(self, model, max_seq=GEMMA_MAX_SEQ):
        super().__init__()
        from transformers.cache_utils import StaticCache, StaticLayer

        self.model = model
        cfg = model.config
        self.cache = StaticCache(config=cfg, max_cache_len=max_seq)
        for i in range(len(self.cache.layers)):
            self.cache.layers[i] = StaticLayer(max_seq)
        dtype = next(model.parameters()).dtype
        self.cache.early_initialization(1, cfg.num_key_value_heads, cfg.head_dim, dtype, torch.device("cpu"))
        for i, layer in enumerate(self.cache.layers):
            self.register_buffer(f"key_cache_{i}", layer.keys, persistent=False)
            self.register_buffer(f"value_cache_{i}", layer.values, persistent=False)
            self.register_buffer(f"cumulative_length_{i}", layer.cumulative_length, persistent=False)

    def _apply(self, fn, recurse=True):
        # .to()/.cuda() replace the buffers: keep the cache layers pointing at them.
        super()._apply(fn, recurse)
        for i, layer in enumerate(self.cache.layers):
            layer.keys = getattr(self, f"key_cache_{i}")
            layer.values = getattr(self, f"value_cache_{i}")
            layer.cumulative_length = getattr(self, f"cumulative_length_{i}")
            layer.device = layer.keys.device
            layer.dtype = layer.keys.dtype
        return self

    def forward(self, input_ids, cache_position):
        for layer in self.cache.layers:
            layer.cumulative_length.copy_(cache_position[0])
        out = self.model(
            input_ids=input_ids,
            position_ids=cache_position[None],
            past_key_values=self.cache,
            use_cache=True,
        )
        return out.logits


def gemma3(seed):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    g = seeded(seed)
    cfg = Gemma3TextConfig(**GEMMA_CFG, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    model = Gemma3ForCausalLM(cfg).eval()
    init_decoder_weights(model, g, embed="model.embed_tokens.weight", head="lm_head.weight")
    with torch.no_grad():  # Gemma's RMSNorm scales by (1 + w)
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
    return GemmaStateful(model).eval()
