"""Attention in PyTorch models: nn.MultiheadAttention decomposed, matmul/bmm/einsum and
scaled dot-product attention quantized like their inputs' producers, masks left float."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import model_compression_toolkit as mct
from model_compression_toolkit.core.graph import OpKind
from model_compression_toolkit.pytorch.attention import DecomposedMultiheadAttention, decompose
from model_compression_toolkit.pytorch.backend import PytorchBackend

BACKEND = PytorchBackend()
NO_SIMILARITY = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))


def _batches(*shapes, n=2, seed=0):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(n)]


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("mask", [None, "key_padding", "bool_attn", "float_attn", "causal"])
def test_decomposed_multihead_attention_computes_what_the_module_does(batch_first, need_weights, mask):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=batch_first).eval()
    q = torch.randn(3, 5, 16) if batch_first else torch.randn(5, 3, 16)
    kv = torch.randn(3, 7, 16) if batch_first else torch.randn(7, 3, 16)
    kwargs = {}
    if mask == "key_padding":
        kwargs["key_padding_mask"] = torch.zeros(3, 7, dtype=torch.bool).index_fill_(
            1, torch.tensor([5, 6]), True
        )
    elif mask == "bool_attn":
        kwargs["attn_mask"] = torch.rand(5, 7) > 0.7
        kwargs["attn_mask"][:, 0] = False  # every query sees one key
    elif mask == "float_attn":
        kwargs["attn_mask"] = torch.randn(5, 7)
    elif mask == "causal":
        kv = q
        kwargs["attn_mask"] = nn.Transformer.generate_square_subsequent_mask(5)
        kwargs["is_causal"] = True
    with torch.no_grad():
        want = mha(q, kv, kv, need_weights=need_weights, **kwargs)
        got = DecomposedMultiheadAttention(mha)(q, kv, kv, need_weights=need_weights, **kwargs)
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-5)
    if need_weights:
        torch.testing.assert_close(got[1], want[1], atol=1e-6, rtol=1e-5)
    else:
        assert got[1] is None and want[1] is None


def test_multihead_attention_with_its_own_key_and_value_sizes_is_decomposed_too():
    torch.manual_seed(0)
    holder = nn.Sequential(nn.MultiheadAttention(16, 2, kdim=8, vdim=12, batch_first=True)).eval()
    q, k, v = torch.randn(2, 4, 16), torch.randn(2, 6, 8), torch.randn(2, 6, 12)
    want = holder[0](q, k, v)[0]
    assert decompose(holder) == 1 and isinstance(holder[0], DecomposedMultiheadAttention)
    torch.testing.assert_close(holder[0](q, k, v)[0], want, atol=1e-5, rtol=1e-5)


class Encoder(nn.Module):
    """A transformer encoder layer made of nn.MultiheadAttention, as torchvision's ViT is."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        y = self.norm(x)
        y, _ = self.attn(y, y, y, need_weights=False)
        return self.fc(x + y)


def test_a_model_with_multihead_attention_quantizes_its_projections_and_attention():
    torch.manual_seed(0)
    model = Encoder().eval()
    batches = _batches((4, 6, 16))
    q_model, info = mct.ptq.pytorch_post_training_quantization(model, lambda: iter(batches), NO_SIMILARITY)
    assert info.unsupported_layers == []
    for proj in ("attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.out_proj"):
        assert info.layers[proj].weights["kernel"]["n_bits"] == 8, proj
        assert info.layers[proj].activation is not None, proj
    (attention,) = [n for n, layer in info.layers.items() if layer.kind == OpKind.ATTENTION.value]
    assert info.layers[attention].activation is not None
    x = torch.as_tensor(batches[0][0])
    with torch.no_grad():
        f, q = model(x), q_model(x)
    assert torch.nn.functional.cosine_similarity(f.flatten(), q.flatten(), dim=0) > 0.999


class Products(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x, mask):
        q, k, v = self.q(x), self.k(x), self.v(x)
        scores = (q @ k.transpose(1, 2)) / 8**0.5
        mixed = torch.bmm(scores.softmax(-1), v)
        summed = torch.einsum("bld,bmd->blm", mixed, v)
        keep = mask[:, None, :] > 0  # a boolean mask from integer ids
        attended = F.scaled_dot_product_attention(q, k, summed @ v, attn_mask=keep)
        return attended


def test_matmul_bmm_einsum_and_attention_are_quantized_and_masks_stay_float():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    mask = np.ones((4, 6), np.int64)
    mask[:, -2:] = 0
    batches = [[rng.standard_normal((4, 6, 8)).astype(np.float32), mask] for _ in range(2)]
    model = Products().eval()
    # every product on a grid, the attention that gives the model's output too
    config = dataclasses.replace(NO_SIMILARITY, quantize_outputs=True)
    q_model, info = mct.ptq.pytorch_post_training_quantization(model, lambda: iter(batches), config)
    assert info.unsupported_layers == []
    kinds = {n: layer.kind for n, layer in info.layers.items()}
    products = [n for n, k in kinds.items() if k in (OpKind.MATMUL.value, OpKind.ATTENTION.value)]
    assert len(products) == 5  # @ twice, bmm, einsum, scaled_dot_product_attention
    for name in products:
        assert info.layers[name].activation is not None, name
    masks = [n for n, k in kinds.items() if k == OpKind.SHAPE.value]
    assert masks and all(info.layers[n].activation is None for n in masks)
    x, m = (torch.as_tensor(a) for a in batches[0])
    with torch.no_grad():
        f, q = model(x, m), q_model(x, m)
    assert F.cosine_similarity(f.flatten(), q.flatten(), dim=0) > 0.99


def test_a_float_mask_built_on_the_way_to_attention_is_not_quantized():
    """``(1 - mask) * finfo.min`` on an 8-bit grid would let padded tokens through."""

    class Masked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, x, mask):
            additive = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
            h = self.proj(x)[:, None]
            return F.scaled_dot_product_attention(h, h, h, attn_mask=additive)

    rng = np.random.default_rng(0)
    mask = np.ones((2, 5), np.int64)
    mask[0, 3:] = 0
    graph, warnings = BACKEND.read(Masked().eval(), [rng.standard_normal((2, 5, 8)).astype(np.float32), mask])
    assert not warnings
    on_the_way = [n for n in graph.nodes() if n.layer_type in ("sub", "mul", "rsub", "float")]
    assert on_the_way and all(n.kind == OpKind.SHAPE for n in on_the_way)
