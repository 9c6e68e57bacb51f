"""Linear attention (Katharopoulos et al., 2020): a kernel feature map instead of the softmax.

With the feature map ``phi(x) = elu(x) + 1`` (positive everywhere), query ``i`` weighs key ``j``
by ``phi(q_i) . phi(k_j)``, normalized over the keys it sees::

    out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T)  /  phi(q_i)^T (sum_j phi(k_j))

The sums over keys do not depend on the query, so they are formed once: time and memory grow
linearly with the sequence length (``O(L d dv)``), where a score matrix costs ``O(L^2)``.

* Non-causal: one ``(d, dv)`` sum serves every query.
* Causal: prefix sums, in chunks. Queries are cut into chunks of ``chunk_size``; each chunk
  reads the sum over all earlier chunks (an exclusive cumulative sum of per-chunk
  ``phi(K)^T V``, ``O(L / chunk_size * d * dv)`` memory) and adds its own keys through a small
  ``(chunk_size, chunk_size)`` lower-triangular product. Alignment is bottom-right, so a decoder
  step over cached keys (``Lq = 1``) sees them all.
* The normaliser comes out of the same products: the values get a column of ones, so
  ``sum_j phi(k_j) [v_j, 1]^T`` holds both sums, read once.
* Padding: a masked key gets the row ``[v, 1] = 0``, which takes it out of both sums. A mask that
  differs per query (``valid_lens`` of shape ``(*batch, Lq)``, an ``attn_mask`` with a query
  axis) has no such form: those calls, and calls with ``need_weights=True``, run the quadratic
  formulation ``masked_softmax(log(phi(Q) phi(K)^T))``, which has the same weights.
* A query with no visible key gets a zero output.

As in the paper, queries and keys are not scaled by ``1 / sqrt(d)``: the weights are ratios of
kernel values, not a softmax, so there is no temperature to set. There is no dropout on the
weights either: outside the quadratic formulation they are never formed.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.attention.build.factory import register_attention
from zoo.attention.contract.base import Attention, AttentionOutput
from zoo.attention.contract.context import AttentionContext
from zoo.attention.kernels import rows_from, sums_before

__all__ = ["LinearAttention", "feature_map"]


def feature_map(x: Tensor) -> Tensor:
    """``elu(x) + 1``: positive, so every kernel value ``phi(q) . phi(k)`` is too."""
    return F.elu(x) + 1


@register_attention("linear", aliases=("linear_attention",))
class LinearAttention(Attention):
    """Kernelized attention whose cost is linear in the sequence length (see the module docstring).

    Args:
        chunk_size: Queries per chunk of the causal prefix sums: larger chunks make fewer,
            bigger products and a larger ``(chunk_size, chunk_size)`` block per chunk.
    """

    family = "kernelized"
    cost = "L"

    def __init__(self, chunk_size: int = 64) -> None:
        super().__init__(0.0)
        self.require_positive(chunk_size=chunk_size)
        self.chunk_size = chunk_size

    def score(self, queries: Tensor, keys: Tensor) -> Tensor:
        """``log(phi(q) . phi(k))``: its masked softmax is the normalized kernel (quadratic path)."""
        kernel = torch.matmul(
            self.features(queries, is_query=True), self.features(keys, is_query=False).transpose(-2, -1)
        )
        return kernel.log().to(queries.dtype)

    def features(self, x: Tensor, *, is_query: bool) -> Tensor:
        """``phi(x)`` of queries or keys, in float32 at least; a kernelized subclass overrides it."""
        return feature_map(x.to(torch.promote_types(x.dtype, torch.float32)))

    def attend(self, queries: Tensor, keys: Tensor, values: Tensor, context: AttentionContext) -> AttentionOutput:
        """Linear time where the mask allows (see the module docstring), else the quadratic path."""
        mask, is_causal, need_weights = context.mask, context.is_causal, context.need_weights
        if mask is not None:
            while mask.dim() < 2:
                mask = mask.unsqueeze(0)
        if need_weights or (mask is not None and mask.shape[-2] > 1):  # weights, or a mask per query: quadratic
            return super().attend(queries, keys, values, context)

        phi_q, phi_k = self.features(queries, is_query=True), self.features(keys, is_query=False)
        # a column of ones beside the values: the products that sum phi(k) v^T then also sum phi(k)
        v = F.pad(values.to(phi_k.dtype), (0, 1), value=1.0)
        if mask is not None:
            v = v * mask[..., 0, :, None]  # (*batch, Lk, 1): masked keys drop out of both sums
        summed = self._causal(phi_q, phi_k, v) if is_causal else self._global(phi_q, phi_k, v)
        return AttentionOutput(_normalize(summed[..., :-1], summed[..., -1:]).to(values.dtype), None)

    @staticmethod
    def _global(phi_q: Tensor, phi_k: Tensor, v: Tensor) -> Tensor:
        """Every query over every (unmasked) key: one sum over the keys."""
        return torch.matmul(phi_q, torch.matmul(phi_k.transpose(-2, -1), v))

    def _causal(self, phi_q: Tensor, phi_k: Tensor, v: Tensor) -> Tensor:
        """Query ``i`` over the keys up to its position ``i + Lk - Lq``: chunked prefix sums."""
        num_queries, num_keys = phi_q.shape[-2], phi_k.shape[-2]
        offset = num_keys - num_queries  # key position of query 0
        chunk = min(self.chunk_size, num_queries)
        num_chunks = math.ceil(num_queries / chunk)
        length = num_chunks * chunk
        # keys before the first query's position: seen by every query
        earlier = max(offset, 0)
        kv_start = torch.matmul(phi_k[..., :earlier, :].transpose(-2, -1), v[..., :earlier, :])  # (*batch, d, dv)
        # the keys at the queries' positions, cut into chunks aligned with the query chunks
        q_chunks = rows_from(phi_q, 0, length).unflatten(-2, (num_chunks, chunk))  # (*batch, nc, C, d)
        k_chunks = rows_from(phi_k, offset, length).unflatten(-2, (num_chunks, chunk))  # (*batch, nc, C, d)
        v_chunks = rows_from(v, offset, length).unflatten(-2, (num_chunks, chunk))  # (*batch, nc, C, dv)
        kv_before = kv_start.unsqueeze(-3) + sums_before(torch.matmul(k_chunks.transpose(-2, -1), v_chunks), dim=-3)
        within = torch.matmul(q_chunks, k_chunks.transpose(-2, -1)).tril()  # (*batch, nc, C, C): keys up to the query
        summed = torch.matmul(q_chunks, kv_before) + torch.matmul(within, v_chunks)
        return summed.flatten(-3, -2)[..., :num_queries, :]

    def extra_repr(self) -> str:
        return f"chunk_size={self.chunk_size}"


def _normalize(numerator: Tensor, denominator: Tensor) -> Tensor:
    """``numerator / denominator``; a zero denominator means no visible key (and a zero numerator)."""
    return numerator / torch.where(denominator > 0, denominator, torch.ones_like(denominator))
