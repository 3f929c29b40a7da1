"""A pre-norm transformer block on x[1, seq, dim]: layer_norm, q/k/v dense, multi-head attention
with softmax, output dense, residual; layer_norm, dense dim->4*dim, gelu (erf form), dense back,
residual. Every dense has a bias. bench/models/gpt2.py stacks the same block."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from bench import flops
from bench.models import numpy_ops as npo
from bench.models.model import Model, RelayWriter, load_weights, seeded

PROJECTIONS = ("q", "k", "v", "o")


def relay_name(torch_key: str) -> str:
    return torch_key.replace(".", "_")


def block_relay(r: RelayWriter, h: str, prefix: str, seq: int, dim: int, heads: int, ff: int) -> str:
    """Writes one block on `h` ([seq, dim]) with its weights as params named `prefix` + torch's
    names; returns the block's output variable."""
    p = {}
    for norm in ("ln1", "ln2"):
        p[norm] = (r.param(f"{prefix}{norm}_weight", (dim,)), r.param(f"{prefix}{norm}_bias", (dim,)))
    for name in PROJECTIONS:
        p[name] = (r.param(f"{prefix}{name}_weight", (dim, dim)), r.param(f"{prefix}{name}_bias", (dim,)))
    p["ff1"] = (r.param(f"{prefix}ff1_weight", (ff, dim)), r.param(f"{prefix}ff1_bias", (ff,)))
    p["ff2"] = (r.param(f"{prefix}ff2_weight", (dim, ff)), r.param(f"{prefix}ff2_bias", (dim,)))
    head_dim = dim // heads

    def linear(x: str, name: str) -> str:
        w, b = p[name]
        return r.let(f"nn.bias_add(nn.dense({x}, {w}, units=None), {b}, axis=-1)")

    def split_heads(x: str) -> str:
        return r.let(f"transpose(reshape({x}, newshape=[{seq}, {heads}, {head_dim}]), axes=[1, 0, 2])")

    n1 = r.let(f"nn.layer_norm({h}, {p['ln1'][0]}, {p['ln1'][1]}, axis=-1, epsilon=1e-05f)")
    q, k, v = (split_heads(linear(n1, name)) for name in "qkv")
    scores = r.let(f"nn.batch_matmul({q}, {k}, transpose_a=False, transpose_b=True)")
    probs = r.let(f"nn.softmax(multiply({scores}, {head_dim ** -0.5!r}f), axis=-1)")
    ctx = r.let(f"nn.batch_matmul({probs}, {v}, transpose_a=False, transpose_b=False)")
    ctx = r.let(f"reshape(transpose({ctx}, axes=[1, 0, 2]), newshape=[{seq}, {dim}])")
    x1 = r.let(f"add({h}, {linear(ctx, 'o')})")
    n2 = r.let(f"nn.layer_norm({x1}, {p['ln2'][0]}, {p['ln2'][1]}, axis=-1, epsilon=1e-05f)")
    f = linear(n2, "ff1")
    g = r.let(f"multiply(multiply({f}, 0.5f), add(erf(multiply({f}, 0.7071067811865476f)), 1f))")
    return r.let(f"add({x1}, {linear(g, 'ff2')})")


def relay(seq: int, dim: int, heads: int, ff: int) -> str:
    r = RelayWriter("float32")
    x = r.param("x", (1, seq, dim))
    h = r.let(f"reshape({x}, newshape=[{seq}, {dim}])")
    out = block_relay(r, h, "", seq, dim, heads, ff)
    return r.text(f"reshape({out}, newshape=[1, {seq}, {dim}])", f"transformer block on 1x{seq}x{dim}, {heads} heads")


def block_forward(h: np.ndarray, a: Mapping[str, np.ndarray], prefix: str, heads: int) -> np.ndarray:
    """numpy's block on h[seq, dim] with the weights `prefix` + name of `a`."""
    seq, dim = h.shape
    hd = dim // heads

    def w(name: str) -> np.ndarray:
        return a[prefix + name]

    n1 = npo.layer_norm(h, w("ln1_weight"), w("ln1_bias"))
    q, k, v = (npo.dense(n1, w(f"{n}_weight"), w(f"{n}_bias")).reshape(seq, heads, hd).transpose(1, 0, 2)
               for n in "qkv")
    probs = npo.softmax((q @ k.transpose(0, 2, 1)) * np.float32(hd**-0.5))
    ctx = (probs @ v).transpose(1, 0, 2).reshape(seq, dim)
    x1 = h + npo.dense(ctx, w("o_weight"), w("o_bias"))
    n2 = npo.layer_norm(x1, w("ln2_weight"), w("ln2_bias"))
    g = npo.gelu(npo.dense(n2, w("ff1_weight"), w("ff1_bias")))
    return x1 + npo.dense(g, w("ff2_weight"), w("ff2_bias"))


def make_forward(heads: int) -> Callable[[Mapping[str, np.ndarray]], np.ndarray]:
    def forward(a: Mapping[str, np.ndarray]) -> np.ndarray:
        _, seq, dim = a["x"].shape
        return block_forward(a["x"].reshape(seq, dim), a, "", heads).reshape(1, seq, dim)

    return forward


def block_work(seq: int, dim: int, heads: int, ff: int) -> int:
    projections = 4 * flops.dense(seq, dim, dim)
    attention = 2 * flops.batch_matmul(heads, seq, dim // heads, seq)
    return projections + attention + flops.dense(seq, dim, ff) + flops.dense(seq, ff, dim)


def block_params(draw: Callable[..., np.ndarray], prefix: str, dim: int, ff: int) -> dict[str, np.ndarray]:
    params: dict[str, np.ndarray] = {}
    for norm in ("ln1", "ln2"):
        params[f"{prefix}{norm}_weight"] = 1.0 + draw(dim, scale=0.1)
        params[f"{prefix}{norm}_bias"] = draw(dim, scale=0.1)
    for name in PROJECTIONS:
        params[f"{prefix}{name}_weight"] = draw(dim, dim, scale=dim**-0.5)
        params[f"{prefix}{name}_bias"] = draw(dim, scale=0.1)
    params[f"{prefix}ff1_weight"], params[f"{prefix}ff1_bias"] = draw(ff, dim, scale=dim**-0.5), draw(ff, scale=0.1)
    params[f"{prefix}ff2_weight"], params[f"{prefix}ff2_bias"] = draw(dim, ff, scale=ff**-0.5), draw(dim, scale=0.1)
    return params


def torch_block(dim: int, heads: int, ff: int):  # type: ignore[no-untyped-def]  # torch is optional
    """The block as a torch module whose state names are the Relay names without a prefix."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            for name in PROJECTIONS:
                setattr(self, name, nn.Linear(dim, dim))
            self.ff1, self.ff2 = nn.Linear(dim, ff), nn.Linear(ff, dim)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, d = x.shape
            n1 = self.ln1(x)
            q, k, v = (getattr(self, n)(n1).view(b, s, heads, d // heads).transpose(1, 2) for n in "qkv")
            probs = torch.softmax(q @ k.transpose(-1, -2) * (d // heads) ** -0.5, dim=-1)
            x = x + self.o((probs @ v).transpose(1, 2).reshape(b, s, d))
            return x + self.ff2(torch.nn.functional.gelu(self.ff1(self.ln2(x))))

    return Block()


def build(seq: int = 128, dim: int = 256, heads: int = 4, ff: int = 1024, seed: int = 3) -> Model:
    draw = seeded(seed)
    inputs = {"x": draw(1, seq, dim)}
    params = block_params(draw, "", dim, ff)

    def make_torch():  # type: ignore[no-untyped-def]  # torch is optional
        module = torch_block(dim, heads, ff)
        load_weights(module, params, relay_name)
        return module

    return Model("transformer", f"transformer block 1x{seq}x{dim}", "float32", relay(seq, dim, heads, ff),
                 inputs, params, block_work(seq, dim, heads, ff), make_forward(heads), make_torch)
