"""Native Sparse Attention (NSA; Yuan et al., 2025, DeepSeek-AI, "Native Sparse Attention:
Hardware-Aligned and Natively Trainable Sparse Attention"): three attention branches over the past,
mixed by gates from the layer's input.

For a query ``q_t`` (the paper's section 3, its notation; ``l`` the compression block, ``d`` its
stride, ``l'`` the selection block, ``n`` the selected blocks, ``w`` the window)::

    o*_t = sum_{c in {cmp, slc, win}} g^c_t Attn(q_t, K~^c_t, V~^c_t),      g^c_t = sigmoid(x_t W_g)

* compression: ``K~^cmp_t = { phi(k_{id+1 .. id+l}) : 0 <= i <= (t - l) / d }``, a learned MLP ``phi``
  (with a position embedding inside the block) mapping each block of ``l`` keys, taken every ``d``
  positions, to one key (and another ``phi`` for values); a query sees the blocks that end at or
  before it;
* selection: the compressed attention's probabilities ``p^cmp_t`` are summed onto selection blocks
  of ``l'`` keys by their overlap (equation 9), over the query heads of a group (equation 10), and
  the top ``n`` blocks are attended to in full, the first block and the two local ones (the
  query's own and the one before) always among them, as the paper's ``n = 16`` includes;
* sliding window: the last ``w`` keys.

Each branch has its own keys and values, as the paper gives them so that no branch learns a
shortcut through another's (``shared_kv=True`` shares one pair, as flash-linear-attention's
``fla/layers/nsa.py`` does). Queries are the layer's, ``num_heads`` of ``embed_dim // num_heads``; keys and values have
``kv_heads`` heads (grouped-query attention, which the paper uses so that a group shares one
selection; ``None``: one per query head). A rotary scheme rotates queries and every branch's keys
before compression and caching.

What follows the paper and what differs: the three branches, the gates, the overlap-weighted
selection scores, the forced initial and local blocks and the per-branch keys and values are the
paper's. The paper leaves ``phi``'s shape open: here it is two linear maps with a SiLU between
(``l * head_dim -> head_dim -> head_dim``) after a learned position embedding per place in the
block; fla and the fla-org/native-sparse-attention repository mean-pool instead. The defaults
(``l = 8``, ``d = 4``, ``l' = 8``, ``n = 4``, ``w = 16``) are sized for the zoo's contexts of tens to
thousands of tokens; the paper's are ``l = 32``, ``d = 16``, ``l' = 64``, ``n = 16``, ``w = 512``
(``--model.attention_kwargs '{"compress_block": 32, "compress_stride": 16, "select_block": 64,
"select_count": 16, "window": 512}'``). ``d`` must divide ``l`` and ``l'``.

Cost (the direct PyTorch form, :mod:`zoo.attention.kernels.selection`; the paper's is a Triton
kernel that loads each group's selected blocks once): ``O(L^2 / d * d_h)`` for the compressed
branch, ``O(L * n * l' * d_h)`` for the selection and ``O(L * w * d_h)`` for the window (the zoo's
``local``), in time and memory. Decoding keeps every branch's keys and values in a
:class:`~zoo.attention.contract.cache.KeyValueCache` (heads ``branches * kv_heads``) and compresses the
cached keys again each step.

Masks: key padding (a compressed block holding a padded key is never attended to or selected by;
padded keys are zeroed before compression), causal only. Weights (``need_weights``): a heatmap of
the three branches together, each branch's attention weights (the compressed branch's spread
evenly over the keys of each block it summarizes) mixed by the query's gates, normalized over the
branches that see a key, so each row sums to one: the selected blocks stand out as blocks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.contract.base import AttentionOutput
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.masking import masked_softmax
from zoo.attention.kernels.selection import GATHERED_KEYS, overlap_sums, selected_block_attention, top_blocks
from zoo.attention.modules.block_selection import BlockSelectionLayer
from zoo.attention.variants.local import LocalAttention
from zoo.positions import PositionScheme

__all__ = ["BlockCompression", "NativeSparseAttention"]

#: the branches, in the order of the gates and of the keys and values
BRANCHES = ("compressed", "selected", "window")


class BlockCompression(nn.Module):
    """NSA's ``phi``: each block of ``length`` vectors, taken every ``stride`` positions, to one
    vector: a learned embedding added at each place in the block, then two linear maps with a
    SiLU between (``length * dim -> dim -> dim``).

    Args:
        length: Vectors per block (``l``).
        stride: Positions between the starts of two blocks (``d``).
        dim: The vectors' size (a head's).
    """

    def __init__(self, length: int, stride: int, dim: int) -> None:
        super().__init__()
        self.length, self.stride = length, stride
        self.position = nn.Parameter(torch.zeros(length, dim))
        self.mlp = nn.Sequential(nn.Linear(length * dim, dim), nn.SiLU(), nn.Linear(dim, dim))

    def count(self, positions: int) -> int:
        """Blocks that ``positions`` vectors fill."""
        return max(0, (positions - self.length) // self.stride + 1)

    def forward(self, x: Tensor) -> Tensor:
        """``(..., L, dim)`` -> ``(..., C, dim)``, block ``i`` from positions ``i * stride ..``."""
        if self.count(x.shape[-2]) == 0:
            return x.new_zeros(*x.shape[:-2], 0, x.shape[-1])
        blocks = x.unfold(-2, self.length, self.stride).transpose(-1, -2) + self.position.to(x.dtype)
        return self.mlp(blocks.flatten(-2))


@register_attention_layer("nsa", aliases=("native_sparse_attention",))
class NativeSparseAttention(BlockSelectionLayer):
    """Native Sparse Attention (see the module docstring).

    Args:
        embed_dim: The block's width.
        num_heads: Query heads.
        kv_heads: Key and value heads, each shared (with its selection) by ``num_heads / kv_heads``
            query heads; None: ``num_heads``.
        compress_block: Keys per compressed block (``l``).
        compress_stride: Positions between compressed blocks (``d``); must divide ``compress_block``
            and ``select_block``.
        select_block: Keys per selection block (``l'``).
        select_count: Blocks each query group attends to in full (``n``), at least 3 (the first
            and the two local blocks are always among them).
        window: Keys of the sliding window (``w``), the query's own included.
        shared_kv: One key and value projection for the three branches (fla's) instead of one each.
        conv_size: Kernel of a short causal convolution on the projected queries, keys and values
            (:mod:`~zoo.attention.modules.block_selection`); 0, the paper's, for none.
        position: The stack's rotary scheme, or None.
        bias: Biases in the query, key, value and output projections (the stack's ``bias``).

    Parameters: ``q_proj``; ``k_proj`` and ``v_proj`` (``embed_dim -> branches * kv_heads *
    head_dim``, the compressed, selected and window branches' heads in turn); ``compress_keys`` and
    ``compress_values`` (:class:`BlockCompression`); ``gate`` (``embed_dim -> 3 * num_heads``, no
    bias); ``out_proj``.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        kv_heads: int | None = None,
        compress_block: int = 8,
        compress_stride: int = 4,
        select_block: int = 8,
        select_count: int = 4,
        window: int = 16,
        shared_kv: bool = False,
        conv_size: int = 0,
        position: PositionScheme | None = None,
        bias: bool = True,
    ) -> None:
        kv_heads = num_heads if kv_heads is None else kv_heads
        super().__init__(
            embed_dim, num_heads, position, kv_heads=kv_heads, compress_block=compress_block,
            compress_stride=compress_stride, select_block=select_block, window=window,
        )  # fmt: skip
        name = type(self).__name__
        if num_heads % kv_heads:
            raise ValueError(f"{name}: kv_heads ({kv_heads}) must divide num_heads ({num_heads}).")
        if compress_block % compress_stride or select_block % compress_stride:
            raise ValueError(
                f"{name}: compress_stride ({compress_stride}) must divide compress_block ({compress_block}) and "
                f"select_block ({select_block}), as the paper's selection scores need."
            )
        if not isinstance(select_count, int) or select_count < 3:
            raise ValueError(
                f"{name}: select_count must be at least 3 (the first block and the two local ones are always "
                f"selected); got {select_count!r}."
            )
        self.kv_heads = kv_heads
        self.select_block, self.select_count = select_block, select_count
        self.branches = 1 if shared_kv else len(BRANCHES)
        kv_width = self.branches * kv_heads * self.head_dim
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, kv_width, bias=bias)
        self.v_proj = nn.Linear(embed_dim, kv_width, bias=bias)
        self.add_convolutions(conv_size)
        self.compress_keys = BlockCompression(compress_block, compress_stride, self.head_dim)
        self.compress_values = BlockCompression(compress_block, compress_stride, self.head_dim)
        self.gate = nn.Linear(embed_dim, len(BRANCHES) * num_heads, bias=False)
        self.window = LocalAttention(window=window)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def _compressed(self, k: Tensor, v: Tensor, padding: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """The compressed keys and values ``(B, G, C, d)``, each block's last position ``(C,)``, and
        whether each block holds real keys only ``(B, G or 1, C)`` (None without padding)."""
        if padding is not None:
            zero = k.new_zeros(())
            k, v = (torch.where(padding.unsqueeze(-1), t, zero) for t in (k, v))
        blocks = self.compress_keys
        ends = torch.arange(blocks.count(k.shape[-2]), device=k.device) * blocks.stride + blocks.length - 1
        real = None
        if padding is not None and len(ends):
            real = padding.unfold(-1, blocks.length, blocks.stride).all(-1)
        return self.compress_keys(k), self.compress_values(v), ends, real

    def select_attend(self, x: Tensor, q: Tensor, k: Tensor, v: Tensor, context: AttentionContext) -> AttentionOutput:
        """New queries ``q`` (of the inputs ``x``) over every key and value seen: the output and the weights."""
        padding, need = context.key_padding, context.need_weights
        num_queries, num_keys = q.shape[-2], k.shape[-2]
        branch_k, branch_v = (t.chunk(self.branches, dim=1) * (len(BRANCHES) // self.branches) for t in (k, v))
        cmp_k, cmp_v, ends, complete = self._compressed(branch_k[0], branch_v[0], padding)
        positions = torch.arange(num_queries, device=q.device) + num_keys - num_queries
        chunk = max(1, GATHERED_KEYS // max(cmp_k.shape[-2], self.select_count * self.select_block))
        parts = [
            self._sparse(
                q[..., first : first + chunk, :],
                positions[first : first + chunk],
                cmp_k,
                cmp_v,
                ends,
                complete,
                branch_k[1],
                branch_v[1],
                padding,
                need,
            )  # fmt: skip
            for first in range(0, num_queries, chunk)
        ]
        compressed, selected, probabilities, selected_weights = (
            None if part[0] is None else torch.cat(part, dim=-2) for part in zip(*parts)
        )
        window, window_weights = self.window(
            q, branch_k[2], branch_v[2], context=AttentionContext(mask=context.mask, is_causal=True, need_weights=need)
        )
        gates = self.gate(x).sigmoid().unflatten(-1, (len(BRANCHES), self.num_heads)).permute(2, 0, 3, 1).unsqueeze(-1)
        output = gates[0] * compressed + gates[1] * selected + gates[2] * window  # (B, H, Lq, d)
        weights = None
        if need:
            spread = self._spread(probabilities, num_keys)
            weights = self._mixed(gates.squeeze(-1), (spread, selected_weights, window_weights))
        return AttentionOutput(self.out_proj(output.transpose(1, 2).flatten(-2)), weights)

    def _sparse(
        self, q: Tensor, positions: Tensor, cmp_k: Tensor, cmp_v: Tensor, ends: Tensor, complete: Tensor | None,
        slc_k: Tensor, slc_v: Tensor, padding: Tensor | None, need_weights: bool,
    ) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:  # fmt: skip
        """The compressed and selected branches for queries ``q`` ``(B, H, c, d)`` at ``positions``:
        their outputs ``(B, H, c, d)`` and, with ``need_weights``, the compressed attention
        ``(B, H, c, C)`` and the selected branch's weights ``(B, H, c, Lk)``."""
        scale = self.head_dim**-0.5
        groups = q.unflatten(1, (self.kv_heads, -1))  # (B, G, R, c, d)
        sees = ends <= positions.unsqueeze(-1)  # (c, C): blocks that end at or before the query
        sees = sees if complete is None else sees & complete.unsqueeze(-2)
        scores = torch.einsum("bgrqd,bgcd->bgrqc", groups, cmp_k) * scale
        probabilities = masked_softmax(scores, mask=sees.unsqueeze(-3))
        compressed = torch.einsum("bgrqc,bgcd->bgrqd", probabilities, cmp_v).flatten(1, 2)
        blocks = self._select(probabilities.detach(), positions, slc_k.shape[-2], padding)
        selected, selected_weights = selected_block_attention(
            q, slc_k, slc_v, blocks, block_size=self.select_block, key_padding=padding, scale=scale,
            need_weights=need_weights,
        )  # fmt: skip
        return compressed, selected, probabilities.flatten(1, 2) if need_weights else None, selected_weights

    @torch.no_grad()
    def _select(self, probabilities: Tensor, positions: Tensor, num_keys: int, padding: Tensor | None) -> Tensor:
        """Each query group's ``select_count`` blocks ``(B, G, Lq, n)``: the first and the local
        blocks, then the best by the compressed attention summed onto the blocks (equations 9 and 10)."""
        num_blocks = -(-num_keys // self.select_block)
        blocks = self.compress_keys
        if probabilities.shape[-1]:
            scores = overlap_sums(probabilities.sum(2), blocks.length, blocks.stride, self.select_block, num_blocks)
        else:
            scores = probabilities.new_zeros(*probabilities.shape[:2], probabilities.shape[-2], num_blocks)
        index = torch.arange(num_blocks, device=positions.device)
        own = (positions // self.select_block).unsqueeze(-1)  # (Lq, 1)
        allowed = index <= own
        if padding is not None:  # a block of padding only is never picked
            filled = F.pad(padding, (0, -num_keys % self.select_block)).unflatten(-1, (num_blocks, -1)).any(-1)
            allowed = allowed & filled.unsqueeze(-2)
        scores = torch.where(allowed, scores, float("-inf"))
        scores = torch.where((index == 0) | (index == own) | (index == own - 1), float("inf"), scores)
        return top_blocks(scores, self.select_count)

    def _spread(self, probabilities: Tensor, num_keys: int) -> Tensor:
        """The compressed attention ``(B, H, Lq, C)`` over the keys ``(B, H, Lq, Lk)``: each block's
        probability shared evenly by its ``l`` keys."""
        blocks = self.compress_keys
        starts = torch.arange(probabilities.shape[-1], device=probabilities.device) * blocks.stride
        keys = torch.arange(num_keys, device=probabilities.device)
        covers = (keys >= starts.unsqueeze(-1)) & (keys < starts.unsqueeze(-1) + blocks.length)  # (C, Lk)
        return probabilities @ (covers.to(probabilities.dtype) / blocks.length)

    @staticmethod
    def _mixed(gates: Tensor, weights: tuple[Tensor, ...]) -> Tensor:
        """The branches' weights ``(B, H, Lq, Lk)`` mixed by the gates ``(3, B, H, Lq)``, normalized
        over the branches that see a key (all zero where none does)."""
        seen = [w.ne(0).any(-1).to(w.dtype) for w in weights]
        total = sum(g * s for g, s in zip(gates, seen))
        mixed = sum(g.unsqueeze(-1) * w for g, w in zip(gates, weights))
        return mixed / torch.where(total > 0, total, 1.0).unsqueeze(-1)

    def extra_repr(self) -> str:
        blocks = self.compress_keys
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, kv_heads={self.kv_heads}, "
            f"compress_block={blocks.length}, compress_stride={blocks.stride}, select_block={self.select_block}, "
            f"select_count={self.select_count}, window={self.window.window}, shared_kv={self.branches == 1}"
            + self.conv_repr()
        )
