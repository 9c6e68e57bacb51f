"""Reference formulations the zoo's attention is measured against (benchmarks only).

* :class:`SDPAFloor`, the floor: four ``nn.Linear`` and
  :func:`torch.nn.functional.scaled_dot_product_attention` with one boolean padding mask, and
  nothing else (no checks, no registry, no mask merging). A multi-head layer cannot do less.
* :class:`ExplicitMultiHead`, the reference notes' formulation: heads folded into the batch,
  ``bmm`` scores scaled by ``1 / sqrt(d)``, ``-1e6`` written past each valid length, softmax,
  ``bmm`` with the values. The ``(B * H, L, L)`` matrices are formed and kept for backward.
* :class:`TorchMultiHead`: ``torch.nn.MultiheadAttention`` with a key padding mask.
* :class:`BroadcastAdditive`, additive scoring straight from the formula: the whole
  ``(*batch, Lq, Lk, hidden)`` tensor, ``tanh``, a linear map to scores, masked softmax.

Layers take ``(x, valid_lens, is_causal)`` (self-attention over ``x`` of shape ``(B, L, d)``;
``valid_lens=None`` means no padding, and then the floor's causal mask is SDPA's ``is_causal=True``);
the scoring reference takes per-head ``(q, k, v, attn_mask, is_causal)`` like a zoo scoring
attention.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["BroadcastAdditive", "ExplicitMultiHead", "SDPAFloor", "TorchMultiHead"]


def _padding(valid_lens: Tensor | None, x: Tensor) -> Tensor:
    """``(B, L)``: True on real tokens of ``x`` ``(B, L, d)`` (all of them without ``valid_lens``)."""
    positions = torch.arange(x.shape[1], device=x.device)
    if valid_lens is None:
        return torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
    return positions < valid_lens.unsqueeze(-1)


def _lower_triangle(length: int, device: torch.device) -> Tensor:
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


class _FourLinear(nn.Module):
    """The projections every multi-head layer has."""

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        self.q_proj, self.k_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.v_proj, self.out_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)


class SDPAFloor(_FourLinear):
    """Four ``nn.Linear`` + ``F.scaled_dot_product_attention``: the least a layer can do."""

    def forward(self, x: Tensor, valid_lens: Tensor | None, is_causal: bool = False) -> Tensor:
        q, k, v = (
            proj(x).unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2)
            for proj in (self.q_proj, self.k_proj, self.v_proj)
        )
        if valid_lens is None:  # "4 nn.Linear + SDPA(is_causal=True)"
            heads = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
            return self.out_proj(heads.transpose(1, 2).flatten(-2))
        mask = _padding(valid_lens, x)[:, None, None, :]  # (B, 1, 1, L)
        if is_causal:
            mask = mask & _lower_triangle(x.shape[1], x.device)
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out_proj(heads.transpose(1, 2).flatten(-2))


class ExplicitMultiHead(_FourLinear):
    """The reference notes' multi-head attention: explicit scores, ``-1e6`` masking, softmax."""

    def forward(self, x: Tensor, valid_lens: Tensor | None, is_causal: bool = False) -> Tensor:
        batch, length, _ = x.shape

        def fold(t: Tensor) -> Tensor:  # (B, L, H * d) -> (B * H, L, d)
            return t.unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2).flatten(0, 1)

        q, k, v = fold(self.q_proj(x)), fold(self.k_proj(x)), fold(self.v_proj(x))
        scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(self.head_dim)  # (B * H, L, L)
        hidden = ~_padding(valid_lens, x).repeat_interleave(self.num_heads, dim=0)[:, None, :]
        if is_causal:
            hidden = hidden | ~_lower_triangle(length, x.device)
        weights = torch.softmax(scores.masked_fill(hidden, -1e6), dim=-1)
        heads = torch.bmm(weights, v).unflatten(0, (batch, self.num_heads))  # (B, H, L, d)
        return self.out_proj(heads.transpose(1, 2).flatten(-2))


class TorchMultiHead(nn.Module):
    """``torch.nn.MultiheadAttention`` (batch first) with a key padding mask."""

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(d_model, num_heads, batch_first=True)

    def forward(self, x: Tensor, valid_lens: Tensor | None, is_causal: bool = False) -> Tensor:
        future = ~_lower_triangle(x.shape[1], x.device) if is_causal else None  # True = may not attend
        padding = None if valid_lens is None else ~_padding(valid_lens, x)
        output, _ = self.attention(
            x, x, x, key_padding_mask=padding, attn_mask=future, need_weights=False, is_causal=is_causal
        )
        return output


class BroadcastAdditive(nn.Module):
    """Additive scoring with the whole ``(*batch, Lq, Lk, hidden)`` tensor formed at once."""

    def __init__(self, query_size: int, key_size: int, num_hiddens: int) -> None:
        super().__init__()
        self.query_proj = nn.Linear(query_size, num_hiddens, bias=False)
        self.key_proj = nn.Linear(key_size, num_hiddens, bias=False)
        self.score_proj = nn.Linear(num_hiddens, 1, bias=False)

    def forward(
        self, queries: Tensor, keys: Tensor, values: Tensor, attn_mask: Tensor, is_causal: bool = False
    ) -> Tensor:
        features = torch.tanh(self.query_proj(queries).unsqueeze(-2) + self.key_proj(keys).unsqueeze(-3))
        scores = self.score_proj(features).squeeze(-1)  # (*batch, Lq, Lk)
        if is_causal:
            attn_mask = attn_mask & _lower_triangle(keys.shape[-2], keys.device)
        return torch.matmul(torch.softmax(scores.masked_fill(~attn_mask, -1e6), dim=-1), values)


#: the recurrent families' counterparts in flash-linear-attention's own layers (``fla.layers``,
#: the ``flash-linear-attention`` distribution), with the zoo's defaults at a width and head count:
#: (class name, its arguments beside ``hidden_size`` and ``num_heads``)
FLA_LAYERS: dict[str, tuple[str, dict[str, object]]] = {
    "retention": ("MultiScaleRetention", {"expand_k": 1.0, "expand_v": 1.0}),
    "gla": ("GatedLinearAttention", {"expand_k": 0.5, "expand_v": 1.0, "use_short_conv": True, "conv_size": 4}),
    "deltanet": ("DeltaNet", {"expand_k": 1.0, "expand_v": 1.0, "use_short_conv": True, "conv_size": 4}),
    "gated_deltanet": ("GatedDeltaNet", {"expand_v": 1.0, "use_short_conv": True, "conv_size": 4}),
    "kda": ("KimiDeltaAttention", {"expand_v": 1.0, "use_short_conv": True, "conv_size": 4}),
    "gated_deltaproduct": (
        "GatedDeltaProduct",
        {"expand_v": 1.0, "use_short_conv": True, "conv_size": 4, "num_householder": 2, "allow_neg_eigval": True},
    ),
    "rwkv7": ("RWKV7Attention", {"layer_idx": 0, "num_hidden_layers": 1}),  # the first layer: v_first is its own v
}

#: the families whose fla layer takes the head size beside the heads (the others derive it)
_HEAD_DIM = frozenset({"gated_deltanet", "kda", "gated_deltaproduct", "rwkv7"})


class FlaLayer(nn.Module):
    """flash-linear-attention's own layer for a family (:data:`FLA_LAYERS`), called as a zoo layer
    case: causal self-attention over ``x``, no padding (fla's layers take padding as packed
    sequences, which the sweep's causal cases do not use)."""

    def __init__(self, family: str, d_model: int, num_heads: int) -> None:
        super().__init__()
        import fla.layers  # the optional flash-linear-attention distribution; cases exist only where it imports

        name, options = FLA_LAYERS[family]
        extra = {"head_dim": d_model // num_heads} if family in _HEAD_DIM else {}
        self.layer = getattr(fla.layers, name)(hidden_size=d_model, num_heads=num_heads, **options, **extra)

    def forward(self, x: Tensor, valid_lens: Tensor | None, is_causal: bool = True) -> Tensor:
        if valid_lens is not None or not is_causal:
            raise ValueError("fla's layers are measured causal and unpadded (--causal --no-padding).")
        return self.layer(x)[0]
