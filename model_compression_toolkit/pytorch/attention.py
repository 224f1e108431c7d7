"""``nn.MultiheadAttention`` decomposed into layers the library quantizes.

torch.fx cannot trace into ``nn.MultiheadAttention`` (its forward branches on tensor
properties), so before tracing each one is replaced, in the reader's private copy, by an
equivalent module made of three ``nn.Linear`` projections, scaled dot-product attention and
the output projection::

    query -> q_proj -\\
    key   -> k_proj --> heads -> scaled_dot_product_attention -> merge heads -> out_proj
    value -> v_proj -/

It takes the same arguments and returns the same ``(output, weights)`` pair; with
``need_weights=True`` it computes softmax(q k^T / sqrt(d)) explicitly to return them. The
projections are named after the attention module (``encoder.layers.0.self_attention.q_proj``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import fx, nn


class DecomposedMultiheadAttention(nn.Module):
    """The computation of an ``nn.MultiheadAttention`` in eval mode, from its weights."""

    def __init__(self, mha: nn.MultiheadAttention) -> None:
        super().__init__()
        e, h = mha.embed_dim, mha.num_heads
        self.embed_dim, self.num_heads, self.head_dim = e, h, e // h
        self.batch_first = mha.batch_first
        bias = mha.in_proj_bias
        if mha._qkv_same_embed_dim:
            weights = mha.in_proj_weight.detach().chunk(3)
        else:
            weights = (mha.q_proj_weight.detach(), mha.k_proj_weight.detach(), mha.v_proj_weight.detach())
        biases = bias.detach().chunk(3) if bias is not None else (None, None, None)
        for name, w, b in zip(("q_proj", "k_proj", "v_proj"), weights, biases):
            setattr(self, name, _linear(w, b))
        self.out_proj = _linear(mha.out_proj.weight.detach(), _detached(mha.out_proj.bias))

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        need_weights: bool = True,
        attn_mask: torch.Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if not self.batch_first:  # (L, N, E) -> (N, L, E)
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        q = self._heads(self.q_proj(query))
        k = self._heads(self.k_proj(key))
        v = self._heads(self.v_proj(value))
        mask = None
        if attn_mask is not None or key_padding_mask is not None:
            mask = additive_mask(attn_mask, key_padding_mask, q)
        if need_weights:
            scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
            if mask is not None:
                scores = scores + mask
            elif is_causal:
                scores = scores + additive_mask(causal_mask(q, k), None, q)
            weights = scores.softmax(dim=-1)
            out = torch.matmul(weights, v)
            weights = weights.mean(dim=1) if average_attn_weights else weights
        else:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=is_causal and mask is None
            )
            weights = None
        out = self.out_proj(out.transpose(1, 2).flatten(2))
        return (out if self.batch_first else out.transpose(0, 1)), weights

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """(N, L, E) -> (N, heads, L, head_dim)."""
        return x.unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2)


def _detached(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach()


def _linear(weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Linear:
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta")
    layer.weight = nn.Parameter(weight.clone(), requires_grad=False)
    if bias is not None:
        layer.bias = nn.Parameter(bias.clone(), requires_grad=False)
    return layer


@fx.wrap
def causal_mask(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The boolean mask ``nn.MultiheadAttention`` means by ``is_causal``: True where masked."""
    return torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).triu(1)


@fx.wrap
def additive_mask(
    attn_mask: torch.Tensor | None, key_padding_mask: torch.Tensor | None, q: torch.Tensor
) -> torch.Tensor:
    """``nn.MultiheadAttention``'s masks (boolean: True where masked; or float, added) as one
    float mask added to the (N, heads, L, S) scores. A leaf for torch.fx: it branches on dtypes."""
    n, heads = q.shape[0], q.shape[1]
    mask = torch.zeros((), dtype=q.dtype, device=q.device)
    for m in (attn_mask, key_padding_mask):
        if m is None:
            continue
        if m is key_padding_mask:
            m = m.reshape(n, 1, 1, -1)
        elif m.dim() == 3:  # (N * heads, L, S)
            m = m.reshape(n, heads, m.shape[-2], m.shape[-1])
        mask = mask + (
            torch.zeros_like(m, dtype=q.dtype).masked_fill(m, float("-inf")) if m.dtype == torch.bool else m
        )
    return mask


def decompose(model: nn.Module) -> int:
    """Replace, in place, every ``nn.MultiheadAttention`` of ``model`` that the decomposition
    covers (no ``bias_k``/``bias_v``, no ``add_zero_attn``). Returns how many it replaced."""
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.MultiheadAttention and child.bias_k is None and not child.add_zero_attn:
                setattr(parent, name, DecomposedMultiheadAttention(child))
                replaced += 1
    return replaced
