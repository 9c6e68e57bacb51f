"""The block of a decoder-only Transformer (GPT): an encoder block whose self-attention is causal,
which continues a cache when decoding, and which takes Canon layers (:mod:`zoo.layers.canon`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from torch import Tensor

from zoo.attention.build.spec import AttentionSpec
from zoo.attention.contract.cache import LayerCache
from zoo.attention.contract.context import AttentionContext
from zoo.layers.block_config import BlockConfig
from zoo.layers.canon import CanonCache, canon_attention, canon_convolution, check_canon_attention, residual_conv
from zoo.layers.encoder_block import EncoderBlock

__all__ = ["CausalBlock"]


class CausalBlock(EncoderBlock):
    """Causal self-attention and an MLP, each in a residual wrapper, with a cache for decoding.

    As GPT-2 and nanoGPT build it (the config :class:`~zoo.models.gpt.GPT` gives): pre-LN,
    ``x + dropout(attention(norm(x)))`` then ``x + dropout(mlp(norm(x)))``, a GELU MLP without
    inner dropout (and, through the spec, dropout on the attention weights). :meth:`forward` runs
    whole sequences, :meth:`forward_cached` decodes, and :meth:`forward_sublayers` does either and
    returns the sublayers' outputs to a stack that forms their inputs itself (attention residuals).

    The config's ``canon`` adds Canon layers: ``canon_a`` on the attention's input and
    ``canon_c`` on the MLP's (each ``h + conv(h)``, after the norm), Canon-B in the attention
    layer (its short convolutions on the projections, residual) and Canon-D in the MLP. Decoding
    keeps A's, C's and D's last inputs in a :class:`~zoo.layers.canon.CanonCache` around the
    attention's cache (the attention's cache alone without them).
    """

    causal = True

    def __init__(self, config: BlockConfig, attention: AttentionSpec | str = "dot_product") -> None:
        spec = AttentionSpec(attention) if isinstance(attention, str) else attention
        residual = False
        if "B" in config.canon:
            spec, residual = canon_attention(spec)
        super().__init__(config, spec)
        if "B" in config.canon:
            check_canon_attention(self.attention, spec)
        if residual:
            self.attention.conv_residual = True
        self.canon_a = canon_convolution(config.d_model) if "A" in config.canon else None
        self.canon_c = canon_convolution(config.d_model) if "C" in config.canon else None

    @property
    def _canon_windows(self) -> bool:
        """Whether decoding keeps Canon windows here (A, C or D), not only the attention's cache."""
        return self.canon_a is not None or self.canon_c is not None or getattr(self.ffn, "canon_d", None) is not None

    def forward(self, x: Tensor, context: AttentionContext | None = None) -> tuple[Tensor, Tensor | None]:
        """``x``: ``(B, L, d_model)`` from a sequence's start, under the forward's causal ``context``.
        Returns the new ``x`` and, if the context asks, ``(B, H, L, L)`` weights."""
        context = self.check_context(context)
        windows: dict[str, Tensor] = {}
        attended, weights = self.attention(self._canon("A", self.add_norm1.pre(x), {}, windows), context)
        return self._mlp(self.add_norm1(x, attended), {}, windows), weights

    def forward_cached(
        self, x: Tensor, cache: LayerCache | None, context: AttentionContext | None = None
    ) -> tuple[Tensor, LayerCache]:
        """``x``: the new positions ``(B, L, d_model)`` after those in ``cache`` (None before the
        first call), under the decoding step's causal ``context``; returns the new ``x`` and the
        cache extended by them."""
        inner, previous = CanonCache.unwrap(cache, canon=self._canon_windows)
        windows: dict[str, Tensor] = {}
        query = self._canon("A", self.add_norm1.pre(x), previous, windows)
        attended, inner = self.attention.attend_cached(query, inner, self.check_context(context))
        return self._mlp(self.add_norm1(x, attended), previous, windows), CanonCache.wrap(inner, windows)

    def _canon(self, place: str, h: Tensor, previous: Mapping[str, Tensor], windows: dict[str, Tensor]) -> Tensor:
        """``h`` through the Canon layer at ``place`` (``"A"`` or ``"C"``) after its window in
        ``previous``, its new window stored in ``windows``; ``h`` itself where there is none."""
        conv = self.canon_a if place == "A" else self.canon_c
        if conv is None:
            return h
        h, windows[place] = residual_conv(conv, h, previous.get(place))
        return h

    def _mlp(self, x: Tensor, previous: Mapping[str, Tensor], windows: dict[str, Tensor]) -> Tensor:
        """The MLP sublayer with Canon-C and -D after their windows in ``previous`` (``x`` itself
        without an MLP), the new windows stored in ``windows``."""
        if self.ffn is None:
            return x
        return self.add_norm2(x, self._mlp_branch(self.add_norm2.pre(x), previous, windows))

    def _mlp_branch(self, h: Tensor, previous: Mapping[str, Tensor], windows: dict[str, Tensor]) -> Tensor:
        """The MLP of the normed input ``h`` with Canon-C and -D, before the residual's dropout."""
        output, window = self.ffn.forward_cached(self._canon("C", h, previous, windows), previous.get("D"))
        if window is not None:
            windows["D"] = window
        return output

    def forward_sublayers(
        self,
        x: Tensor,
        between: Callable[[Tensor], Tensor],
        cache: LayerCache | None,
        context: AttentionContext | None = None,
        *,
        use_cache: bool,
    ) -> tuple[Tensor, LayerCache | None]:
        """The two sublayers' outputs without their residual sums, for a stack that forms each
        sublayer's input itself (attention residuals, :mod:`zoo.layers.attention_residuals`).

        ``x``: the attention's input ``(B, L, d_model)`` (normed here, pre-LN blocks only);
        ``between`` maps the attention's output (after dropout) to the MLP's input (not called
        without an MLP). Returns the last sublayer's output (the MLP's, the attention's without an
        MLP) and, with ``use_cache``, ``cache`` extended by these positions (None without it).
        """
        if not self.add_norm1.norm_first:
            raise ValueError("CausalBlock.forward_sublayers needs pre-LN blocks (norm_first=True).")
        context = self.check_context(context)
        inner, previous = CanonCache.unwrap(cache, canon=self._canon_windows)
        windows: dict[str, Tensor] = {}
        query = self._canon("A", self.add_norm1.pre(x), previous, windows)
        if use_cache:
            output, inner = self.attention.attend_cached(query, inner, context)
        else:
            output, _ = self.attention(query, context)
        output = self.add_norm1.dropout(output)
        if self.ffn is not None:
            h = self.add_norm2.pre(between(output))
            output = self.add_norm2.dropout(self._mlp_branch(h, previous, windows))
        return output, CanonCache.wrap(inner, windows) if use_cache else None
