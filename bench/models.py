"""The benchmark models, built deterministically so that bench/export.py (which
exports them) and bench/torch_bench.py (which runs them in PyTorch) get the
same weights and the same inputs without saving any state.

- deep_bf16, heavy_bf16, encdec: our models; each is built right after
  torch.manual_seed(SEEDS[name]) on the CPU.
- mlp_f32, conv_f32, attn_bf16: the test programs of tests/fixtures (exported from these
  builders by tests/fixtures/export.py): one process,
  torch.manual_seed(0) once, then for each model in this order its module and
  then its input (export does not draw from the generator). The rebuilt inputs
  match the fixtures' .bin files bit for bit (torch 2.11), which
  torch_bench.py checks on every run.

build(name) returns {method: (module, (input, ...))} with modules in eval mode
on the CPU in their final dtype.
"""
import torch

SEEDS = {"deep_bf16": 1001, "heavy_bf16": 1002, "encdec": 1003}
FIXTURE_MODELS = ("mlp_f32", "conv_f32", "attn_bf16")  # in generation order
OUR_MODELS = ("deep_bf16", "heavy_bf16", "encdec")
ALL_MODELS = OUR_MODELS + FIXTURE_MODELS
BF16 = torch.bfloat16


class LinearGeluStack(torch.nn.Module):
    """n x (Linear(d, d) -> GELU)."""

    def __init__(self, d, n):
        super().__init__()
        self.ls = torch.nn.ModuleList([torch.nn.Linear(d, d) for _ in range(n)])

    def forward(self, x):
        for layer in self.ls:
            x = torch.nn.functional.gelu(layer(x))
        return x


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(32, 64)

    def forward(self, x):
        return torch.tanh(self.l(x))


class Decoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(64, 8)

    def forward(self, h):
        return torch.softmax(self.l(h), dim=-1)


# The fixture modules: parameters are created in the same order as in
# export_fixtures.py, which is what makes the generator replay work.
class FixtureMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(64, 128)
        self.l2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


class FixtureConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)

    def forward(self, x):
        y = torch.relu(self.bn(self.c(x)))
        return torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)


class FixtureAttn(torch.nn.Module):
    def __init__(self, d=64, heads=4):
        super().__init__()
        self.h = heads
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.o = torch.nn.Linear(d, d)
        self.n = torch.nn.LayerNorm(d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n(x)).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.o(y.transpose(1, 2).reshape(b, t, d))


def _ours(name):
    torch.manual_seed(SEEDS[name])
    if name == "deep_bf16":
        m = LinearGeluStack(1024, 8).to(BF16).eval()
        return {"forward": (m, (torch.randn(1, 1024, dtype=BF16),))}
    if name == "heavy_bf16":
        m = LinearGeluStack(4096, 8).to(BF16).eval()
        return {"forward": (m, (torch.randn(4096, 4096, dtype=BF16),))}
    if name == "encdec":
        enc, dec = Encoder().eval(), Decoder().eval()
        return {"encoder": (enc, (torch.randn(4, 32),)), "decoder": (dec, (torch.randn(4, 64),))}
    raise KeyError(name)


def _fixtures():
    torch.manual_seed(0)
    out = {}
    m = FixtureMLP().eval()
    out["mlp_f32"] = {"forward": (m, (torch.randn(4, 64),))}
    m = FixtureConv().eval()
    out["conv_f32"] = {"forward": (m, (torch.randn(2, 3, 16, 16),))}
    m = FixtureAttn().to(BF16).eval()
    out["attn_bf16"] = {"forward": (m, (torch.randn(2, 16, 64, dtype=BF16),))}
    return out


def build(name):
    if name in OUR_MODELS:
        return _ours(name)
    if name in FIXTURE_MODELS:
        return _fixtures()[name]
    raise KeyError(f"unknown model {name!r} (known: {', '.join(ALL_MODELS)})")


def seed_of(name):
    return SEEDS.get(name, 0)
