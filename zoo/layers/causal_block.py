"""The block of a decoder-only Transformer (GPT): causal self-attention and an MLP, pre-LN."""

from __future__ import annotations

from torch import Tensor, nn

from zoo.attention.cache import LayerCache
from zoo.attention.multi_head import SelfAttention
from zoo.attention.spec import AttentionSpec
from zoo.layers.add_norm import AddNorm
from zoo.layers.feed_forward import PositionWiseFFN

__all__ = ["CausalBlock"]


class CausalBlock(nn.Module):
    """``x + dropout(attention(norm(x)))``, then ``x + dropout(mlp(norm(x)))``, as GPT-2 and
    nanoGPT build it: the norms before the sublayers, a GELU MLP, dropout on the residual branches
    (and, through the spec, on the attention weights).

    Args:
        d_model: Feature size.
        num_heads: Attention (query) heads.
        ffn_hidden: Inner size of the MLP (GPT-2: ``4 * d_model``).
        attention: The causal self-attention's :class:`~zoo.attention.spec.AttentionSpec`, or a
            registered name.
        dropout: Dropout on the residual branches.
        bias: Biases in the linear layers and layer norms (nanoGPT's ``bias``).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        ffn_hidden: int,
        attention: AttentionSpec | str = "dot_product",
        *,
        dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.attention = SelfAttention(d_model, num_heads, attention, bias=bias)
        self.ffn = PositionWiseFFN(d_model, ffn_hidden, activation="gelu", bias=bias)
        self.add_norm1 = AddNorm(d_model, dropout, norm_first=True, bias=bias)
        self.add_norm2 = AddNorm(d_model, dropout, norm_first=True, bias=bias)

    def forward(
        self, x: Tensor, cache: LayerCache | None = None, *, use_cache: bool = False
    ) -> tuple[Tensor, LayerCache | None]:
        """``x``: the new positions ``(B, L, d_model)``, after those in ``cache``.

        Without ``use_cache`` (training, a full forward) the attention runs over ``x`` alone and
        no cache is returned; with it, the attention continues ``cache`` and returns it extended.
        """
        h = self.add_norm1.pre(x)
        if use_cache:
            attended, cache = self.attention.attend_cached(h, cache)
        else:
            attended, cache = self.attention(h, is_causal=True).output, None
        x = self.add_norm1(x, attended)
        return self.add_norm2(x, self.ffn(self.add_norm2.pre(x))), cache
