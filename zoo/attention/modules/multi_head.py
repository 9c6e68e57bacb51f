"""The registered multi-head attention layers, three ways of feeding :class:`HeadedAttention`, and
the one function blocks build their self-attention layer with.

:class:`MultiHeadAttention` (``multi_head``) takes queries, keys and values;
:class:`SelfAttention` (``self``) attends over one sequence, with an optional positional scheme;
:class:`CrossAttention` (``cross``) attends from one sequence over another (a decoder over its
encoder's memory). Projections, heads, masks, grouped key/value heads and positions are
:mod:`zoo.attention.modules.headed`'s. :func:`self_attention_layer` builds a block's layer from its
:class:`~zoo.attention.build.spec.AttentionSpec`: a ``self`` layer over a scoring attention, or the
attention layer the spec names.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from zoo.arguments import accepted_keywords
from zoo.attention.build.factory import register_attention
from zoo.attention.build.spec import AttentionSpec
from zoo.attention.contract.base import AttentionOutput
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.layer import AttentionLayer
from zoo.attention.modules.headed import HeadedAttention

__all__ = ["CrossAttention", "MultiHeadAttention", "SelfAttention", "self_attention_layer"]


def self_attention_layer(
    attention: AttentionSpec | str, embed_dim: int, num_heads: int, *, bias: bool = True
) -> AttentionLayer:
    """A block's self-attention layer of width ``embed_dim`` and ``num_heads`` heads: a
    :class:`SelfAttention` running the spec's scoring attention per head, or the attention layer
    the spec names, built with the spec's arguments, the stack's position scheme and ``bias``
    (where its constructor takes them), and the spec's ``num_kv_heads``, ``dropout`` and
    ``layer_index`` where its constructor names them (a layer with a ``**kwargs`` catch-all is
    not handed those: they were not the stack's before). The layer keeps the spec as ``spec``."""
    spec = AttentionSpec(attention) if isinstance(attention, str) else attention
    if not spec.is_layer:
        return SelfAttention(embed_dim, num_heads, spec, bias=bias)
    accepted = accepted_keywords(spec.variant)  # None: a constructor that takes any keyword
    stack = {"position": spec.position, "bias": bias}
    given = {key: value for key, value in stack.items() if value is not None and (accepted is None or key in accepted)}
    named = {"num_kv_heads": spec.num_kv_heads, "dropout": spec.dropout, "layer_index": spec.layer_index}
    given |= {key: value for key, value in named.items() if value is not None and key in (accepted or ())}
    layer = spec.variant(embed_dim=embed_dim, num_heads=num_heads, **given, **dict(spec.kwargs))  # checked by the spec
    layer.spec = spec  # what it was built from, as a SelfAttention keeps it: summaries show its arguments
    return layer


@register_attention("multi_head", aliases=("multihead",))
class MultiHeadAttention(HeadedAttention):
    """Multi-head attention over separate queries, keys and values, called as
    :class:`torch.nn.MultiheadAttention` is: with raw masks, validated and merged once a call.

    Parameter layout matches :class:`torch.nn.MultiheadAttention` (with ``batch_first=True``)
    split into ``q_proj``/``k_proj``/``v_proj``, so weights can be copied between the two.
    """

    def forward(  # type: ignore[override]  (queries, keys and values, as torch's layer takes them)
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        valid_lens: Tensor | None = None,
        *,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
    ) -> AttentionOutput:
        """Project, attend per head, merge heads and project back.

        Queries ``(B, Lq, embed_dim)``, keys ``(B, Lk, kdim)``, values ``(B, Lk, vdim)``;
        ``valid_lens`` ``(B,)`` or ``(B, Lq)``; ``attn_mask`` broadcasts to ``(B, Lq, Lk)`` or is
        per head, ``(B, H, Lq, Lk)``. Returns the output ``(B, Lq, embed_dim)`` and, if asked,
        weights ``(B, H, Lq, Lk)``.
        """
        self._check(queries, keys, values)
        context = AttentionContext.build(
            queries.shape[0], queries.shape[1], keys.shape[1], valid_lens=valid_lens, attn_mask=attn_mask,
            is_causal=is_causal, need_weights=need_weights, num_heads=self.num_heads, owner=type(self).__name__,
        )  # fmt: skip
        self.check_request(context)
        k, v = self.project_kv(keys, values, context=context)
        return self.attend_projected(queries, k, v, context)

    @torch.no_grad()
    def load_from_torch(self, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy the weights of a ``torch.nn.MultiheadAttention`` of the same sizes into this layer."""
        if (module.embed_dim, module.num_heads, module.kdim, module.vdim) != (
            self.embed_dim,
            self.num_heads,
            self.kdim,
            self.vdim,
        ):
            raise ValueError("load_from_torch: the two layers differ in embed_dim, num_heads, kdim or vdim.")
        if self.num_kv_heads != self.num_heads:
            raise ValueError(
                "load_from_torch: torch.nn.MultiheadAttention has no grouped key/value heads; use num_kv_heads=None."
            )
        if self.q_proj is None or self.k_proj is None:
            raise ValueError(
                f"load_from_torch: {self.attention_name!r} reads no queries or no keys, so this layer lacks their "
                "projection; load into a layer over an attention that reads both, such as 'dot_product'."
            )
        if module._qkv_same_embed_dim:
            weights = module.in_proj_weight.chunk(3)
        else:
            weights = (module.q_proj_weight, module.k_proj_weight, module.v_proj_weight)
        biases = module.in_proj_bias.chunk(3) if module.in_proj_bias is not None else (None, None, None)
        for proj, weight, bias in zip((self.q_proj, self.k_proj, self.v_proj), weights, biases):
            proj.weight.copy_(weight)
            if proj.bias is not None and bias is not None:
                proj.bias.copy_(bias)
        self.out_proj.weight.copy_(module.out_proj.weight)
        if self.out_proj.bias is not None and module.out_proj.bias is not None:
            self.out_proj.bias.copy_(module.out_proj.bias)
        return self


@register_attention("self", aliases=("self_attention",))
class SelfAttention(HeadedAttention):
    """Multi-head self-attention: every position of ``x`` attends over ``x``.

    Arguments as :class:`HeadedAttention`'s (keys and values are ``x``, of size ``embed_dim``);
    the spec may hold a rotary or bias scheme (``rope``, ``alibi``, ``t5``).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        attention: AttentionSpec | str = "dot_product",
        *,
        bias: bool = True,
        head_dim: int | None = None,
        v_head_dim: int | None = None,
    ) -> None:
        super().__init__(embed_dim, num_heads, attention, bias=bias, head_dim=head_dim, v_head_dim=v_head_dim)

    def attend(self, x: Tensor, context: AttentionContext) -> AttentionOutput:
        """``x`` ``(B, L, embed_dim)`` over itself under the forward's ``context``."""
        k, v = self.project_kv(x, x, offset=context.offset, context=context)
        return self.attend_projected(x, k, v, context)


@register_attention("cross", aliases=("cross_attention", "encoder_decoder"))
class CrossAttention(HeadedAttention):
    """Multi-head attention of ``x`` over ``memory`` (keys and values both come from ``memory``).

    Arguments as :class:`HeadedAttention`'s, with ``memory_dim`` (default ``embed_dim``) the
    feature size of ``memory``; the scoring attention must work across two sequences. It takes
    no positions: those of two different sequences have no common frame.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        attention: AttentionSpec | str = "dot_product",
        *,
        memory_dim: int | None = None,
        bias: bool = True,
    ) -> None:
        spec = AttentionSpec(attention) if isinstance(attention, str) else attention
        spec.require(cross=True, bidirectional=True, role="cross-attention (queries and keys from two sequences)")
        if spec.position is not None:
            raise ValueError(
                "cross-attention takes no positions (those of two sequences have no common frame); "
                "give it a spec without a position scheme."
            )
        super().__init__(embed_dim, num_heads, spec, kdim=memory_dim, vdim=memory_dim, bias=bias)

    def forward(  # type: ignore[override]  (a second sequence, the memory)
        self, x: Tensor, memory: Tensor, context: AttentionContext | None = None
    ) -> AttentionOutput:
        """``x``: ``(B, Lq, embed_dim)``; ``memory``: ``(B, Lk, memory_dim)``; the context's mask
        (the memory's padding, :meth:`AttentionContext.for_keys
        <zoo.attention.contract.context.AttentionContext.for_keys>`) broadcasts to ``(B, 1 or H, Lq, Lk)``."""
        context = AttentionContext() if context is None else context
        self._check(x, memory, memory)
        self.check_request(context)
        k, v = self.project_kv(memory, memory)
        return self.attend_projected(x, k, v, context)
