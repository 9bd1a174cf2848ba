"""Model builders of the model suite (tests/models/README.md).

Every builder is deterministic (its own seed) and downloads nothing: the weights
are random. Modules are built in float32 on the CPU and converted by the caller
(models are small: every program stays well under 10 MB).

The stateful decoders (Qwen3-style, Gemma-3) keep their KV cache in registered
buffers updated in place with index_copy_, the pattern of ExecuTorch's CUDA
examples: forward(input_ids int64 [1,T], cache_position int64 [T]) -> logits
[1,T,V], with a boolean mask [1,1,T,S] built from cache_position.
"""
import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from model_seed import seeded
# The stateful decoders (Qwen3-style, Llama-3.2-1B shape, MoE, sampler, Gemma-3): models_decoders.py,
# here under models.* as before.
from models_decoders import (  # noqa: F401
    GEMMA_CFG, GEMMA_MAX_SEQ, LLAMA1B_CFG, MOE_CFG, QWEN_CFG, SAMPLER_CFG, SAMPLES, TEMPERATURE, GemmaStateful,
    MoEBlock, MoEDecoder, MoEFFN, Qwen3Decoder, QwenAttention, QwenBlock, RMSNorm, SamplerDecoder, gemma3,
    init_decoder_weights, llama1b, moe, qwen3, rope_tables, rotate_half, sampler)

# ----------------------------------------------------------------------------- small helpers




class MLP(nn.Module):
    """The shared fixtures' MLP: Linear(64,128) -> ReLU -> Linear(128,10)."""

    def __init__(self, i=64, h=128, o=10):
        super().__init__()
        self.l1 = nn.Linear(i, h)
        self.l2 = nn.Linear(h, o)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


class Enc(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(32, 64)

    def forward(self, x):
        return torch.tanh(self.l(x))


class Dec(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(64, 8)

    def forward(self, h):
        return torch.softmax(self.l(h), dim=-1)


class Prefixed(nn.Module):
    """Holds a module under a given attribute name, so its parameters' FQNs start
    with that name (ExecuTorch 1.5.1 keys CUDA weights by FQN across all methods:
    two methods with different tensors under one FQN cannot be exported)."""

    def __init__(self, name, module):
        super().__init__()
        self._inner = name
        self.add_module(name, module)

    def forward(self, *args):
        return getattr(self, self._inner)(*args)


class LinearStack(nn.Module):
    """Linear(1024,1024) x3 -> Linear(1024,512), SiLU between: the int4 tests."""

    def __init__(self, d=1024, n=3, out=512):
        super().__init__()
        self.ls = nn.ModuleList(nn.Linear(d, d, bias=False) for _ in range(n))
        self.out = nn.Linear(d, out, bias=False)
        for lin in list(self.ls) + [self.out]:  # O(1) activations all the way (the default init shrinks them)
            nn.init.normal_(lin.weight, std=1.7 / d**0.5)

    def forward(self, x):
        for lin in self.ls:
            x = F.silu(lin(x))
        return self.out(x)


# ----------------------------------------------------------------------------- Whisper (HF)

WHISPER_CFG = dict(
    vocab_size=1000,
    num_mel_bins=80,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    d_model=128,
    encoder_ffn_dim=256,
    decoder_ffn_dim=256,
    max_source_positions=64,
    max_target_positions=64,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    decoder_start_token_id=1,
    # Larger than HF's 0.02 so that attention is far from uniform (a wrong
    # softmax shows), still small enough for stable activations.
    init_std=0.1,
)


def whisper_model(seed=1):
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    seeded(seed)
    cfg = WhisperConfig(**WHISPER_CFG)
    cfg._attn_implementation = "sdpa"
    model = WhisperForConditionalGeneration(cfg).eval()
    return model


class WhisperEncoder(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.encoder = model.model.encoder

    def forward(self, input_features):
        return self.encoder(input_features=input_features).last_hidden_state


class WhisperDecoder(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.decoder = model.model.decoder
        self.proj_out = model.proj_out

    def forward(self, input_ids, encoder_states):
        h = self.decoder(input_ids=input_ids, encoder_hidden_states=encoder_states, use_cache=False).last_hidden_state
        return self.proj_out(h)


def whisper_inputs(seed=2):
    g = seeded(seed)
    feats = torch.randn(1, 80, 128, generator=g)
    ids = torch.randint(3, 1000, (1, 8), generator=g)
    return feats, ids


# ----------------------------------------------------------------------------- attention blocks (Whisper's shapes)


class AttnBlock(nn.Module):
    """One attention layer as HF Whisper's sdpa path runs it: q = q_proj(x) * d**-0.5,
    q/k/v viewed [B,L,H,D] -> transpose(1,2).contiguous(), then
    F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=1.0),
    out_proj. kind: "self" (non-causal), "causal" (is_causal=True, no mask),
    "causal_mask" (a boolean [1,1,L,L] lower-triangular mask, is_causal=False),
    "cross" (queries from x, keys/values from a second input)."""

    def __init__(self, kind, d=128, heads=4):
        super().__init__()
        self.kind, self.h, self.hd = kind, heads, d // heads
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        for lin in (self.q, self.k, self.v, self.o):
            nn.init.normal_(lin.weight, std=0.1)

    def forward(self, x, kv=None):
        B, L, D = x.shape
        src = kv if kv is not None else x
        q = (self.q(x) * self.hd**-0.5).view(B, L, self.h, self.hd).transpose(1, 2).contiguous()
        k = self.k(src).view(B, -1, self.h, self.hd).transpose(1, 2).contiguous()
        v = self.v(src).view(B, -1, self.h, self.hd).transpose(1, 2).contiguous()
        mask, causal = None, False
        if self.kind == "causal":
            causal = True
        elif self.kind == "causal_mask":
            pos = torch.arange(L, device=x.device)
            mask = (pos[:, None] >= pos[None, :])[None, None]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=1.0)
        return self.o(y.transpose(1, 2).reshape(B, L, D))


ATTN_METHODS = {
    # method: (kind, query length, key length)
    "self64": ("self", 64, 64),
    "causal8": ("causal", 8, 8),
    "causal8_mask": ("causal_mask", 8, 8),
    "cross8x64": ("cross", 8, 64),
}


def attn_blocks(seed=3):
    g = seeded(seed)
    out = {}
    for name, (kind, lq, lk) in ATTN_METHODS.items():
        m = AttnBlock(kind).eval()
        x = torch.randn(1, lq, 128, generator=g)
        args = (x, torch.randn(1, lk, 128, generator=g)) if kind == "cross" else (x,)
        out[name] = (m, args)
    return out


# ----------------------------------------------------------------------------- vision


def dinov2(seed=5):
    from transformers import Dinov2Config, Dinov2Model

    seeded(seed)
    cfg = Dinov2Config(
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        mlp_ratio=2,
        image_size=56,
        patch_size=14,
        initializer_range=0.1,
    )
    cfg._attn_implementation = "sdpa"
    return Dinov2Wrap(Dinov2Model(cfg).eval()).eval()


class Dinov2Wrap(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, pixel_values):
        out = self.m(pixel_values=pixel_values)
        return out.last_hidden_state, out.pooler_output


RESNET_WIDTH = 16


def resnet18(seed=6, width=RESNET_WIDTH):
    """torchvision's ResNet-18 (ResNet, BasicBlock, [2,2,2,2], num_classes=10) rebuilt with its
    _make_layer at 1/4 width (16-32-64-128 channels instead of 64-...-512): the full-width
    model has 11.2M parameters (43 MB in float32), over the suite's 10 MB per program."""
    from torchvision.models.resnet import BasicBlock, ResNet

    seeded(seed)
    m = ResNet(BasicBlock, [2, 2, 2, 2], num_classes=10)
    m.inplanes = width
    m.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
    m.bn1 = nn.BatchNorm2d(width)
    m.layer1 = m._make_layer(BasicBlock, width, 2)
    m.layer2 = m._make_layer(BasicBlock, 2 * width, 2, stride=2)
    m.layer3 = m._make_layer(BasicBlock, 4 * width, 2, stride=2)
    m.layer4 = m._make_layer(BasicBlock, 8 * width, 2, stride=2)
    m.fc = nn.Linear(8 * width, 10)
    for mod in m.modules():
        if isinstance(mod, nn.Conv2d):
            nn.init.kaiming_normal_(mod.weight, mode="fan_out", nonlinearity="relu")
    m.eval()
    g = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():  # non-trivial BatchNorm statistics
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.copy_(0.1 * torch.randn(mod.num_features, generator=g))
                mod.running_var.copy_(0.5 + torch.rand(mod.num_features, generator=g))
                mod.weight.copy_(0.5 + 0.5 * torch.rand(mod.num_features, generator=g))
                mod.bias.copy_(0.1 * torch.randn(mod.num_features, generator=g))
        m.fc.weight.mul_(10.0)  # logits O(1) rather than O(0.1), so the 16-bit floors mean something
    return m


# ----------------------------------------------------------------------------- Conformer encoder


class ConvSubsampling(nn.Module):
    def __init__(self, mel=80, ch=64, d=128):
        super().__init__()
        self.c1 = nn.Conv2d(1, ch, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(ch, ch, 3, stride=2, padding=1)
        self.out = nn.Linear(ch * ((mel + 3) // 4), d)

    def forward(self, mel):  # [B, mel, T]
        x = mel.transpose(1, 2).unsqueeze(1)  # [B,1,T,mel]
        x = F.relu(self.c2(F.relu(self.c1(x))))  # [B,ch,T/4,mel/4]
        B, C, T, M = x.shape
        return self.out(x.permute(0, 2, 1, 3).reshape(B, T, C * M))


class FeedForward(nn.Module):
    def __init__(self, d, mult=4):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.l1 = nn.Linear(d, d * mult)
        self.l2 = nn.Linear(d * mult, d)

    def forward(self, x):
        return self.l2(F.silu(self.l1(self.ln(x))))


class MHSA(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.h = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln(x)).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.o(y.transpose(1, 2).reshape(B, T, D))


class ConvModule(nn.Module):
    def __init__(self, d, kernel=15):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.pw1 = nn.Conv1d(d, 2 * d, 1)
        self.dw = nn.Conv1d(d, d, kernel, padding=kernel // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pw2 = nn.Conv1d(d, d, 1)

    def forward(self, x):
        y = self.ln(x).transpose(1, 2)
        y = F.glu(self.pw1(y), dim=1)
        y = F.silu(self.bn(self.dw(y)))
        return self.pw2(y).transpose(1, 2)


class ConformerBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ff1 = FeedForward(d)
        self.attn = MHSA(d, heads)
        self.conv = ConvModule(d)
        self.ff2 = FeedForward(d)
        self.ln = nn.LayerNorm(d)

    def forward(self, x):
        x = x + 0.5 * self.ff1(x)
        x = x + self.attn(x)
        x = x + self.conv(x)
        x = x + 0.5 * self.ff2(x)
        return self.ln(x)


class Conformer(nn.Module):
    """Parakeet/Sortformer-style encoder: 4x conv subsampling, then blocks of
    FF/2, MHSA (absolute sinusoidal positions), conv module (pointwise -> GLU ->
    depthwise -> BatchNorm -> SiLU -> pointwise), FF/2, LayerNorm."""

    def __init__(self, mel=80, d=128, heads=4, blocks=2, frames=128):
        super().__init__()
        self.sub = ConvSubsampling(mel, 64, d)
        self.blocks = nn.ModuleList(ConformerBlock(d, heads) for _ in range(blocks))
        t = (frames + 3) // 4
        pos = torch.arange(t, dtype=torch.float32)[:, None]
        div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
        pe = torch.zeros(t, d)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
        self.register_buffer("pe", pe, persistent=False)

    def forward(self, mel):
        x = self.sub(mel)
        x = x + self.pe[: x.shape[1]]
        for b in self.blocks:
            x = b(x)
        return x


def conformer(seed=7):
    seeded(seed)
    m = Conformer().eval()
    g = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm1d):
                mod.running_mean.copy_(0.1 * torch.randn(mod.num_features, generator=g))
                mod.running_var.copy_(0.5 + torch.rand(mod.num_features, generator=g))
    return m


def clone(m):
    return copy.deepcopy(m)
