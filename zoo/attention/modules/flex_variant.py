"""Scoring attentions defined by a mask on positions and a bias, run on FlexAttention where it is
exact and fast: :class:`FlexVariant`.

A variant mixes it in and says what its pattern is (:meth:`FlexVariant.flex_pattern`: a
:class:`~zoo.attention.kernels.flex.FlexMask` on positions, with causality where it applies) and
what it adds to the scores besides the context's bias scheme (:meth:`FlexVariant.flex_scores`,
``local``'s learned relative bias). Its ``attend`` asks :meth:`FlexVariant.attend_flex` first,
which runs :func:`~zoo.attention.kernels.flex.flex_attend` when the backend asked for takes flex
for this call (:mod:`zoo.attention.build.backends`) and returns None otherwise, when the variant's own
form runs.

What is built once: the pattern per variant, length and causality (it holds no data of the call);
the block mask of a pattern with the context's key padding once a forward, on the context
(:meth:`~zoo.attention.contract.context.AttentionContext.memoized`), so every layer of a stack reads one
(and a pattern without padding from the kernel's bounded cache, across forwards); a bias scheme's
table over the distances once a forward. The padding is read through the mask the context holds:
no tensor's values are copied to the host to name it.

Exactness: the patterns are the variants' own (``tests/attention/kernels/test_flex.py``), and the
bias scheme's table, ``scheme(0, j - p)``, is its bias wherever it depends on the distance alone,
as ``alibi`` and ``t5`` do and say (:func:`~zoo.attention.kernels.position_bias.is_relative`, a
scheme's ``relative``); another scheme keeps the variant's form.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from zoo.attention.build.backends import choose
from zoo.attention.contract.base import AttentionOutput
from zoo.attention.contract.context import AttentionContext
from zoo.attention.kernels import flex
from zoo.attention.kernels.position_bias import is_relative

__all__ = ["FlexVariant"]


class FlexVariant:
    """Mixin of a scoring attention that FlexAttention can run (see the module docstring)."""

    #: the variant's multiplier of the dot products (None: ``1 / sqrt(d)``), as its own form has it
    scale: float | None
    active_dropout: float
    #: the variant's pattern is not causality alone: without a bias scheme its own form is not SDPA's
    flex_needs_bias: ClassVar[bool] = False

    def flex_pattern(self, num_keys: int, is_causal: bool, device: torch.device) -> flex.FlexMask | None:
        """The pairs the variant keeps, on positions, causality included (None: every pair)."""
        raise NotImplementedError(f"{type(self).__name__} must say its pattern (flex_pattern).")

    def flex_scores(self, length: int, device: torch.device) -> list[flex.ScoreMod]:
        """What the variant adds to the scores of a grid of ``length`` keys besides the context's
        bias scheme (none here)."""
        return []

    def fused_backend(self, device: torch.device, dtype: torch.dtype) -> tuple[str, str | None]:
        """``("flex", why not)`` for a training call on ``device`` in ``dtype`` (None: it runs)."""
        return "flex", self._refusal(device, dtype, requires_grad=True, head_dim=64, context=AttentionContext())

    def attend_flex(
        self, queries: Tensor, keys: Tensor, values: Tensor, context: AttentionContext
    ) -> AttentionOutput | None:
        """The call on FlexAttention if the backend takes it, else None (the variant's own form runs)."""
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in (queries, keys, values, *self._learned()))
        runs = self._refusal(queries.device, queries.dtype, requires_grad=grad, head_dim=queries.shape[-1],
                             context=context, rank=queries.dim(), values=values)  # fmt: skip
        if not choose("flex", runs, device=queries.device):
            return None
        batch, _, num_queries, _ = queries.shape
        num_keys, device = keys.shape[-2], queries.device
        block_mask = self._block_mask(context, batch, num_queries, num_keys, device)
        scores = self.flex_scores(num_keys, device) + self._bias_scores(context, num_keys, device)
        score_mod = None if not scores else scores[0] if len(scores) == 1 else flex.chain_scores(*scores)
        output = flex.flex_attend(
            queries, keys, values, block_mask=block_mask, score_mod=score_mod, scale=self.scale,
            enable_gqa=keys.shape[-3] != queries.shape[-3],
        )  # fmt: skip
        return AttentionOutput(output, None)

    # -- what flex cannot do ---------------------------------------------------------------------

    def _refusal(
        self, device: torch.device, dtype: torch.dtype, *, requires_grad: bool, head_dim: int,
        context: AttentionContext, rank: int = 4, values: Tensor | None = None,
    ) -> str | None:  # fmt: skip
        """Why FlexAttention cannot run this call exactly, or None."""
        if not flex.flex_supported(device, dtype, requires_grad=requires_grad):
            grads = " with gradients" if requires_grad else ""
            return f"FlexAttention does not run {dtype} on {torch.device(device).type}{grads}"
        if rank != 4 or (values is not None and values.shape[-1] != head_dim):
            return "it takes heads (B, H, L, d) with values as wide as the keys (a multi-head layer's)"
        if torch.device(device).type == "cuda" and head_dim < 16:
            return f"its kernels take heads of 16 features or more, not {head_dim}"
        if context.need_weights:
            return "it returns no weights"
        if self.active_dropout:
            return "it has no dropout on the weights (training with attention dropout)"
        if context.mask is not None and (
            context.mask.dim() != 4 or context.mask.shape[-2] != 1 or context.mask.shape[1] != 1
        ):
            return "it takes key padding here, the same for every query and head"
        scheme = context.position_bias
        if scheme is not None and not is_relative(scheme):
            return f"the bias scheme {type(scheme).__name__} is no table over distances"
        if self.flex_needs_bias and scheme is None:
            return "without a bias its own form is SDPA's fused kernel already"
        return None

    def _learned(self) -> list[Tensor]:
        """The variant's parameters (a gradient through one rules the CPU's eager flex out)."""
        return list(self.parameters()) if isinstance(self, torch.nn.Module) else []

    # -- built once ----------------------------------------------------------------------------

    def _pattern(self, num_keys: int, is_causal: bool, device: torch.device) -> flex.FlexMask | None:
        """:meth:`flex_pattern`, built once per variant, length, causality and device."""
        patterns: dict[Any, flex.FlexMask | None] = self.__dict__.setdefault("_flex_patterns", {})
        key = (num_keys, is_causal, device)
        if key not in patterns:
            patterns[key] = self.flex_pattern(num_keys, is_causal, device)
        return patterns[key]

    def _block_mask(
        self, context: AttentionContext, batch: int, num_queries: int, num_keys: int, device: torch.device
    ) -> Any:
        """The block mask of the pattern with the context's key padding: once a forward."""
        pattern = self._pattern(num_keys, context.is_causal, device)
        if context.mask is None:
            return None if pattern is None else flex.block_mask_for(pattern, batch, num_queries, num_keys, device)
        keep = context.mask.reshape(context.mask.shape[0], -1)  # (B, Lk): one row per sequence
        padding = flex.FlexMask(("key_mask", id(context.mask)), lambda b, h, p, j: keep[b, j], per_batch=True)
        mask = padding if pattern is None else pattern & padding
        return context.memoized(
            ("flex_block", mask.key, batch, num_queries, num_keys, device),
            lambda: flex.build_block_mask(mask, batch, num_queries, num_keys, device),
        )

    @staticmethod
    def _bias_scores(context: AttentionContext, num_keys: int, device: torch.device) -> list[flex.ScoreMod]:
        """The context's bias scheme as a table over the distances ``j - p`` (once a forward)."""
        scheme = context.position_bias
        if scheme is None:
            return []
        distances = flex.relative_distances(num_keys, device)
        table = context.memoized(
            ("flex_bias", id(scheme), num_keys, device), lambda: scheme(distances.new_zeros(1), distances)
        )
        return [flex.bucketed_bias(table, torch.arange(distances.shape[0], device=device))]
