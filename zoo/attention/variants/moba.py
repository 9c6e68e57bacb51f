"""MoBA, mixture of block attention (Lu et al., 2025, Moonshot AI, "MoBA: Mixture of Block Attention
for Long-Context LLMs"): each query attends to the few key blocks a parameter-free gate picks for
it, as a mixture of experts routes tokens.

Keys are cut into blocks of ``block_size`` positions from the first. For a query ``q_t`` in block
``c(t) = t // block_size``, each earlier block ``i < c(t)`` is scored by the query's dot product
with its mean-pooled key, and the query attends, by softmax, over the keys of its own block
(causally: up to ``t``) and of the ``top_k - 1`` best earlier blocks::

    s_i = q_t . mean(K[i])                                     (i < c(t))
    I_t = {c(t)} + top_{top_k - 1}{ s_i : i < c(t) }
    o_t = softmax(q_t K[I_t]^T / sqrt(d), causal) V[I_t]

as in MoonshotAI/MoBA's ``moba_naive.py``, whose top-k counts the current block (its gate is set
to ``+inf``) and never a later one (``-inf``). The gate has no parameters and no gradient: the
selection is trained through the queries and keys it is computed from, as in the paper.

The layer owns query, key, value and output projections (``num_heads`` heads of
``embed_dim // num_heads``), takes the stack's rotary scheme (queries and keys rotated before the
gate and the cache, as the paper's Llama-based models do), and decodes from a
:class:`~zoo.attention.contract.cache.KeyValueCache` of every position's keys and values: a new token's
gate reads the earlier blocks' means from it.

Cost (the direct PyTorch form here, :mod:`zoo.attention.kernels.selection`): ``O(L^2 / block_size
* d)`` for the gate and ``O(L * top_k * block_size * d)`` for the attention, in time and memory;
MoBA's kernel computes the same with FlashAttention over the selected blocks. Weights
(``need_weights``): each query's softmax over its selected keys, in a dense ``(B, H, L, L)``
matrix whose blocks show the selection.

Masks: key padding (right or left; a block's mean is over its real keys, a block of padding only
is never picked); causal only (MoBA's gate is defined causally). Where the zoo differs: the
defaults, ``block_size=16`` and ``top_k=3``, are sized for its contexts of tens to thousands of
tokens (the paper uses blocks of 512 to 4096 with ``top_k`` 3 to 12); MoBA's hybrid schedule
(full attention in the last layers, or for the last tokens of training) is a hybrid stack here
(``[moba, moba, dot_product]``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.contract.base import AttentionOutput
from zoo.attention.contract.context import AttentionContext
from zoo.attention.kernels.selection import GATHERED_KEYS, block_means, selected_block_attention, top_blocks
from zoo.attention.modules.block_selection import BlockSelectionLayer
from zoo.positions import PositionScheme

__all__ = ["MoBAAttention", "moba_blocks"]


@torch.no_grad()
def moba_blocks(q: Tensor, k: Tensor, block_size: int, top_k: int, key_padding: Tensor | None) -> Tensor:
    """Each query's blocks ``(B, H, Lq, top_k)`` (``-1``: none): its own block and the ``top_k - 1``
    earlier blocks with real keys whose mean key it scores highest; queries ``(B, H, Lq, d)`` at
    positions ``Lk - Lq ..`` over keys ``(B, H, Lk, d)``."""
    means, filled = block_means(k, block_size, key_padding)  # (B, H, N, d), (B, H, N)
    num_queries, num_blocks = q.shape[-2], means.shape[-2]
    first = k.shape[-2] - num_queries
    chunk = max(1, GATHERED_KEYS // num_blocks)
    picked = []
    for start in range(0, num_queries, chunk):
        queries = q[..., start : start + chunk, :]
        own = (torch.arange(queries.shape[-2], device=q.device) + first + start) // block_size  # (c,)
        gate = (queries @ means.mT).float()  # (B, H, c, N)
        index = torch.arange(num_blocks, device=q.device)
        earlier = (index < own.unsqueeze(-1)) & filled.unsqueeze(-2)
        gate = torch.where(earlier, gate, float("-inf"))
        gate = torch.where(index == own.unsqueeze(-1), float("inf"), gate)
        picked.append(top_blocks(gate, top_k))
    return torch.cat(picked, dim=-2)


@register_attention_layer("moba", aliases=("mixture_of_block_attention",))
class MoBAAttention(BlockSelectionLayer):
    """Mixture of block attention (see the module docstring).

    Args:
        embed_dim: The block's width.
        num_heads: Heads; each selects its own blocks.
        block_size: Positions per key block.
        top_k: Blocks each query attends to, its own included.
        conv_size: Kernel of a short causal convolution on the projected queries, keys and values
            (:mod:`~zoo.attention.modules.block_selection`); 0, the paper's, for none.
        position: The stack's rotary scheme, or None.
        bias: Biases in the projections (the stack's ``bias``).

    Causal, key padding only, decoded from a key-value cache: see
    :class:`~zoo.attention.modules.block_selection.BlockSelectionLayer`.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        block_size: int = 16,
        top_k: int = 3,
        conv_size: int = 0,
        position: PositionScheme | None = None,
        bias: bool = True,
    ) -> None:
        super().__init__(embed_dim, num_heads, position, block_size=block_size, top_k=top_k)
        self.block_size, self.top_k = block_size, top_k
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
            nn.Linear(embed_dim, embed_dim, bias=bias) for _ in range(4)
        )
        self.add_convolutions(conv_size)

    def select_attend(self, x: Tensor, q: Tensor, k: Tensor, v: Tensor, context: AttentionContext) -> AttentionOutput:
        """New queries over every key and value seen: the output ``(B, Lq, embed_dim)`` and the weights."""
        padding = context.key_padding
        blocks = moba_blocks(q, k, self.block_size, self.top_k, padding)
        heads, weights = selected_block_attention(
            q, k, v, blocks, block_size=self.block_size, key_padding=padding, scale=self.head_dim**-0.5,
            need_weights=context.need_weights,
        )  # fmt: skip
        return AttentionOutput(self.out_proj(heads.transpose(1, 2).flatten(-2)), weights)

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, block_size={self.block_size}, top_k={self.top_k}"
            + self.conv_repr()
        )
