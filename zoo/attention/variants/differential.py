"""Differential attention (Ye et al., 2024, "Differential Transformer"): the difference of two
softmax maps, which cancels the weight both put on irrelevant keys, as a differential amplifier
cancels common-mode noise.

Per head ``h`` (``H / 2`` of them), with queries and keys split in two halves of ``d`` features
and values of ``2d``:

    DiffAttn(X) = (softmax(Q1 K1^T / sqrt(d)) - lambda softmax(Q2 K2^T / sqrt(d))) V
    lambda = exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) + lambda_init
    lambda_init = 0.8 - 0.6 exp(-0.3 (l - 1))        (l = 1 .. L, the layer's depth)
    head_h = (1 - lambda_init) RMSNorm(DiffAttn_h(X))
    MultiHead(X) = Concat(head_1, ..., head_{H/2}) W_O

The ``lambda_*`` are learned vectors of ``d`` features shared by the layer's heads, drawn from
``N(0, 0.1^2)`` (the reference code's), so that ``lambda`` starts near ``lambda_init``; the
re-parameterization lets ``lambda`` leave ``(0, 1)`` and learn quickly. ``RMSNorm`` normalizes
each head's ``2d`` features with a learned scale (the reference's ``subln``, eps ``1e-5``), the
paper's GroupNorm: the sparse maps give heads very different scales.

Sizes as the paper sets them against a Transformer of ``H`` heads of ``d = embed_dim / H``
features: ``H / 2`` differential heads, each with two query and key halves of ``d`` features and
values of ``2d``, so the projections are the Transformer's (the stack's ``num_heads`` must be
even). Queries and keys are rotated per half of ``d`` features, as the reference rotates each
half, so the stack's rotary scheme fits as it is (the zoo pairs the two halves of a vector where
the reference pairs neighbours: a fixed permutation of the features).

Depth: ``lambda_init`` needs the layer's place in its stack, which the stack hands a layer
whose constructor takes ``layer_index`` (:class:`~zoo.attention.build.spec.AttentionSpec`'s field, 0
for the first layer, the paper's ``l - 1``); built alone the layer is the first.

``conv_size`` ``K`` (0 by default: the paper has none) puts the ``softmax`` layer's short causal
depthwise convolution (Primer's) on the projected queries, keys and values, before the rotation,
so a key carries its predecessors, as the recurrent families' do (``docs/results/recall.md``, the
previous-token head: what one softmax layer needs to recall on MQAR without first learning a
previous-token head); a mask must then hide a key from every query alike, and decoding keeps each
convolution's last ``K - 1`` inputs (a :class:`~zoo.attention.contract.cache.ConvolvedCache`).

Left out: the reference's grouped key/value heads (this layer takes no ``num_kv_heads``), and
dropout on the maps (the reference has none). Weights are the difference map, ``(B, H / 2, Lq,
Lk)``, which may be negative and need not sum to one (``normalized_weights`` is False); without
them each map runs in the fused kernel (queries and keys padded with zero features to the values'
width, which the CPU's flash kernel needs), the two outputs subtracted.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.contract.base import AttentionOutput, IncompatibleAttentionError
from zoo.attention.contract.cache import ConvolvedCache, KeyValueCache, LayerCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.layer import AttentionLayer
from zoo.attention.contract.masking import masked_softmax, with_causal
from zoo.attention.kernels import fused_attention
from zoo.attention.modules.convolved import ShortConvolved
from zoo.attention.modules.rotation import rotate_heads
from zoo.positions import PositionScheme

__all__ = ["DifferentialAttention", "lambda_init"]

#: the per-head norm's epsilon (the reference's ``subln``)
NORM_EPS = 1e-5
#: standard deviation of the lambda vectors' initial values (the reference's)
LAMBDA_STD = 0.1


def lambda_init(layer_index: int) -> float:
    """The paper's ``lambda_init = 0.8 - 0.6 exp(-0.3 (l - 1))`` for the layer at ``layer_index``
    (``l - 1``, from 0)."""
    return 0.8 - 0.6 * math.exp(-0.3 * layer_index)


@register_attention_layer("differential", aliases=("diff", "diff_transformer"))
class DifferentialAttention(ShortConvolved, AttentionLayer):
    """Differential attention (see the module docstring).

    Args:
        embed_dim: The block's width (the stack fills it).
        num_heads: The stack's heads ``H`` (even): ``H / 2`` differential heads of two halves.
        layer_index: The layer's place in its stack, from 0 (the stack fills it).
        conv_size: Kernel of a short causal convolution on the projected queries, keys and values
            (see the module docstring); 0, the paper's, for none.
        position: The stack's rotary scheme, or None.
        bias: Whether the projections have biases.

    Parameters: ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj`` (``embed_dim`` square),
    ``lambda_q1``, ``lambda_k1``, ``lambda_q2``, ``lambda_k2`` (``d`` each), ``norm`` (``2d``);
    ``q_conv``, ``k_conv``, ``v_conv`` with a convolution.
    """

    family = "softmax"
    cost = "L²"

    supports_rotary = True
    normalized_weights = False

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        layer_index: int = 0,
        conv_size: int = 0,
        position: PositionScheme | None = None,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.require_positive(embed_dim=embed_dim, num_heads=num_heads)
        if num_heads < 2 or num_heads % 2 or embed_dim % num_heads:
            raise ValueError(
                f"DifferentialAttention pairs the stack's heads: num_heads must be even and divide embed_dim; got "
                f"{num_heads} heads of {embed_dim} features."
            )
        if not isinstance(layer_index, int) or layer_index < 0:
            raise ValueError(f"DifferentialAttention: layer_index must be 0 or more; got {layer_index!r}.")
        if position is not None and position.kind != "rotary":
            raise IncompatibleAttentionError("DifferentialAttention takes a rotary scheme only (or none).")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.layer_index, self.lambda_init = layer_index, lambda_init(layer_index)
        self.position = position
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
            nn.Linear(embed_dim, embed_dim, bias=bias) for _ in range(4)
        )
        self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
            nn.Parameter(torch.randn(self.head_dim) * LAMBDA_STD) for _ in range(4)
        )
        self.norm = nn.RMSNorm(2 * self.head_dim, eps=NORM_EPS)
        self.add_convolutions(conv_size)

    def lambda_full(self) -> Tensor:
        """``lambda = exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) + lambda_init``."""
        return (
            torch.exp(torch.dot(self.lambda_q1, self.lambda_k1))
            - torch.exp(torch.dot(self.lambda_q2, self.lambda_k2))
            + self.lambda_init
        )

    def _halves(self, projected: Tensor, first: int, context: AttentionContext | None) -> Tensor:
        """Projected queries or keys as ``(B, H, L, d)``: head ``h``'s halves at ``2h`` and
        ``2h + 1``, rotated at positions ``first ..``."""
        heads = projected.unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2)
        return rotate_heads(self.position, heads, first, context)

    def _values(self, projected: Tensor) -> Tensor:
        """Projected values as ``(B, H / 2, L, 2d)``."""
        return projected.unflatten(-1, (self.num_heads // 2, 2 * self.head_dim)).transpose(1, 2)

    def attend(self, x: Tensor, context: AttentionContext) -> AttentionOutput:
        """``x`` ``(B, L, embed_dim)`` over itself."""
        (q, k, v), _ = self.convolved_projections(x, None, context)
        return self._attend(q, self._halves(k, context.offset, context), self._values(v), context)

    def _attend(self, queries: Tensor, k: Tensor, v: Tensor, context: AttentionContext) -> AttentionOutput:
        """Projected ``queries`` ``(B, Lq, embed_dim)`` at the last ``Lq`` of the ``Lk`` positions
        of keys ``k`` and values ``v``."""
        num_queries, num_keys = queries.shape[1], k.shape[-2]
        q = self._halves(queries, num_keys - num_queries, context)
        lam = self.lambda_full().to(q.dtype)
        scale = 1.0 / math.sqrt(self.head_dim)
        mask = context.mask
        weights = None
        if context.need_weights:
            if context.is_causal:
                mask = with_causal(mask, num_queries, num_keys, q.device)
            maps = masked_softmax(torch.matmul(q, k.transpose(-2, -1)) * scale, mask=mask)
            maps = maps.unflatten(1, (self.num_heads // 2, 2))
            weights = maps[:, :, 0] - lam * maps[:, :, 1]
            heads = torch.matmul(weights, v)
        else:  # zero features pad queries and keys to the values' width: the same scores, one width for the kernel
            q, k = F.pad(q, (0, v.shape[-1] - q.shape[-1])), F.pad(k, (0, v.shape[-1] - k.shape[-1]))
            half_masks = (mask, mask) if mask is None or mask.shape[1] == 1 else (mask[:, 0::2], mask[:, 1::2])
            first, second = (
                fused_attention(
                    q[:, i::2], k[:, i::2], v, m, is_causal=context.is_causal, bias=None, dropout_p=0.0, scale=scale
                )
                for i, m in enumerate(half_masks)
            )
            heads = first - lam * second
        heads = self.norm(heads) * (1 - self.lambda_init)
        return AttentionOutput(self.out_proj(heads.transpose(1, 2).flatten(-2)), weights)

    def attend_cached(
        self, x: Tensor, cache: LayerCache | None, context: AttentionContext | None = None
    ) -> tuple[Tensor, LayerCache]:
        """New positions after a :class:`~zoo.attention.contract.cache.KeyValueCache` of the rotated key
        halves ``(B, H, L, d)`` and values ``(B, H / 2, L, 2d)`` (in a
        :class:`~zoo.attention.contract.cache.ConvolvedCache` when the layer convolves)."""
        held, windows = self.unwrap_cache(cache, KeyValueCache)
        context = AttentionContext(is_causal=True) if context is None else context
        (q, k, v), windows = self.convolved_projections(x, windows, context)
        k, v = self._halves(k, 0 if held is None else held.length, context), self._values(v)
        held = KeyValueCache(k, v) if held is None else held.extend(k, v)
        output, _ = self._attend(q, held.keys, held.values, context)
        return output, ConvolvedCache.wrap(held, windows)

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, heads={self.num_heads // 2} (of two halves), layer_index={self.layer_index}, "
            f"lambda_init={self.lambda_init:.4f}" + self.conv_repr()
        )
