"""A GPT-2-sized model (124M parameters: 12 blocks of dim 768, 12 heads, MLP 3072, a 50,257-token
vocabulary whose embedding is also the output head, 1,024 positions) on 1 x seq token ids.
It is here for issue 11's build target (a GPT-2-sized model built in <= 60 s within 2 GB) as
much as for its speed. The blocks are bench/models/transformer.py's, without a causal mask."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from bench import flops
from bench.models import numpy_ops as npo
from bench.models.model import Model, RelayWriter, load_weights, seeded
from bench.models.transformer import block_forward, block_params, block_relay, block_work, relay_name, torch_block


def relay(seq: int, dim: int, heads: int, ff: int, layers: int, vocab: int, positions: int) -> str:
    r = RelayWriter("float32")
    ids = r.param("ids", (1, seq), "int64")
    wte = r.param("wte_weight", (vocab, dim))
    wpe = r.param("wpe", (positions, dim))
    tokens = r.let(f"take({wte}, reshape({ids}, newshape=[{seq}]), axis=0)")
    where = r.let(f"strided_slice({wpe}, begin=[0, 0], end=[{seq}, {dim}], strides=[1, 1], axes=None)")
    h = r.let(f"add({tokens}, {where})")
    for layer in range(layers):
        h = block_relay(r, h, f"blocks_{layer}_", seq, dim, heads, ff)
    lnf = (r.param("lnf_weight", (dim,)), r.param("lnf_bias", (dim,)))
    h = r.let(f"nn.layer_norm({h}, {lnf[0]}, {lnf[1]}, axis=-1, epsilon=1e-05f)")
    logits = r.let(f"nn.dense({h}, {wte}, units=None)")
    return r.text(f"reshape({logits}, newshape=[1, {seq}, {vocab}])",
                  f"GPT-2-sized: {layers} blocks of {dim}, {heads} heads, vocabulary {vocab}, on 1x{seq} tokens")


def build(seq: int = 32, dim: int = 768, heads: int = 12, ff: int = 3072, layers: int = 12, vocab: int = 50257,
          positions: int = 1024, seed: int = 5) -> Model:
    draw = seeded(seed)
    rng = np.random.default_rng(seed)
    inputs = {"ids": rng.integers(0, vocab, size=(1, seq), dtype=np.int64)}
    params = {"wte_weight": draw(vocab, dim, scale=0.02), "wpe": draw(positions, dim, scale=0.01)}
    for layer in range(layers):
        params.update(block_params(draw, f"blocks_{layer}_", dim, ff))
    params["lnf_weight"], params["lnf_bias"] = 1.0 + draw(dim, scale=0.1), draw(dim, scale=0.1)

    def forward(a: Mapping[str, np.ndarray]) -> np.ndarray:
        h = a["wte_weight"][a["ids"][0]] + a["wpe"][:seq]
        for layer in range(layers):
            h = block_forward(h, a, f"blocks_{layer}_", heads)
        h = npo.layer_norm(h, a["lnf_weight"], a["lnf_bias"])
        return npo.dense(h, a["wte_weight"]).reshape(1, seq, vocab)

    def make_torch():  # type: ignore[no-untyped-def]  # torch is optional
        import torch
        from torch import nn

        class GPT(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.wte = nn.Embedding(vocab, dim)
                self.wpe = nn.Parameter(torch.zeros(positions, dim))
                self.blocks = nn.ModuleList(torch_block(dim, heads, ff) for _ in range(layers))
                self.lnf = nn.LayerNorm(dim)

            def forward(self, ids: torch.Tensor) -> torch.Tensor:
                h = self.wte(ids) + self.wpe[: ids.shape[1]]
                for block in self.blocks:
                    h = block(h)
                return self.lnf(h) @ self.wte.weight.t()

        module = GPT()
        load_weights(module, params, relay_name)
        return module

    work = layers * block_work(seq, dim, heads, ff) + flops.dense(seq, dim, vocab)
    count = sum(v.size for v in params.values())
    return Model("gpt2", f"GPT-2-sized ({count / 1e6:.0f}M) 1x{seq}", "float32",
                 relay(seq, dim, heads, ff, layers, vocab, positions), inputs, params, work, forward, make_torch)
