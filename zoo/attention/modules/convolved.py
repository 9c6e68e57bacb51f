"""A layer's short causal convolutions on its projections: :class:`ShortConvolved`.

The recurrent families (GLA, DeltaNet, Mamba-2, ...) put a depthwise causal convolution of a few
taps on each projection before the recurrence, as flash-linear-attention's layers and Zoology do;
the softmax-family layers (``softmax``, ``forgetting``, ``differential``, ``mla``, ``moba``,
``nsa``) take the same as an option (``conv_size``, Primer's "Multi-DConv-Head Attention"). A
layer that has them holds one ``nn.Conv1d`` per projection under the names in
:attr:`ShortConvolved.conv_names` (``q_conv``, ``k_conv``, ``v_conv`` unless it says otherwise;
None each without a convolution, so a checkpoint's keys do not change with the option's default),
and runs its projections through :meth:`ShortConvolved.convolve` (or
:meth:`ShortConvolved.convolved_projections`, which projects first), which passes them through
unchanged when the layer has none. The operations are in :mod:`zoo.attention.kernels.short_conv`;
decoding keeps each convolution's window in a :class:`~zoo.attention.contract.cache.ConvolvedCache`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import ClassVar, Literal

import torch.nn.functional as F
from torch import Tensor, nn

from zoo.attention.contract.base import Capabilities
from zoo.attention.contract.cache import CacheT, ConvolvedCache, LayerCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.kernels import convolve_projections, short_convolutions

__all__ = ["ShortConvolved"]


class ShortConvolved(nn.Module):
    """Mixin of an attention layer with short convolutions on its projections (see the module
    docstring): it calls :meth:`add_convolutions` once its projections are built."""

    #: the attributes that hold the convolutions, one per projection, in :meth:`convolve`'s order
    conv_names: ClassVar[tuple[str, ...]] = ("q_conv", "k_conv", "v_conv")
    #: each convolution adds to its projection, ``p + conv(p)`` (a Canon-B layer, :mod:`zoo.layers.canon`,
    #: whose block sets it on a layer whose convolutions have no activation)
    conv_residual: bool = False

    def add_convolutions(self, conv_size: int, widths: Sequence[int] | None = None, *, bias: bool = False) -> None:
        """One convolution of ``conv_size`` taps per projection (none when ``conv_size`` is 0),
        stored under :attr:`conv_names`; ``widths`` None: each ``<x>_conv`` as wide as the layer's
        ``<x>_proj`` outputs. With them a position's neighbours are in its projections, so a mask
        can hide positions only from every query alike: the layer then takes key padding and
        refuses a mask that differs per query."""
        if widths is None:
            widths = [proj.out_features for proj in self._projections()]
        if len(widths) != len(self.conv_names):
            raise ValueError(f"{type(self).__name__}: one width per convolution {self.conv_names}; got {widths}.")
        for name, conv in zip(self.conv_names, short_convolutions(type(self).__name__, conv_size, widths, bias=bias)):
            setattr(self, name, conv)

    @property
    def capabilities(self) -> Capabilities:
        """The class's, but key padding only once the projections convolve (see :meth:`add_convolutions`)."""
        declared = super().capabilities  # type: ignore[misc]
        return replace(declared, supports_query_mask=False) if self.convolves else declared

    @property
    def convolves(self) -> bool:
        """Whether the projections pass short convolutions."""
        return getattr(self, self.conv_names[0]) is not None

    def convolve(
        self,
        projected: Sequence[Tensor],
        windows: tuple[Tensor, ...] | None,
        context: AttentionContext,
        activations: Sequence[Literal["silu"] | None] | None = None,
    ) -> tuple[list[Tensor], tuple[Tensor, ...] | None]:
        """The projections ``(B, T, C_i)`` (in :attr:`conv_names`' order) through the convolutions
        after ``windows`` (None: a sequence's start), positions the context's key padding marks
        entering as zeros, then ``activations`` (one per projection; None: none); and the windows
        after them. Without convolutions: the projections through their activations, and None (the
        context's mask is then not read, so a mask that differs per query stays allowed)."""
        if not self.convolves:
            activations = activations or (None,) * len(projected)
            return [t if act is None else F.silu(t) for t, act in zip(projected, activations)], None
        convs = [getattr(self, name) for name in self.conv_names]
        outputs, windows = convolve_projections(projected, convs, windows, context.key_padding, activations)
        if self.conv_residual:
            outputs = [t + y for t, y in zip(projected, outputs)]
        return outputs, windows

    def convolved_projections(
        self,
        x: Tensor,
        windows: tuple[Tensor, ...] | None,
        context: AttentionContext,
        activations: Sequence[Literal["silu"] | None] | None = None,
    ) -> tuple[list[Tensor], tuple[Tensor, ...] | None]:
        """:meth:`convolve` on ``x`` ``(B, T, embed_dim)`` through each ``<x>_proj`` of the layer
        (``q_proj``, ``k_proj``, ``v_proj`` for the default :attr:`conv_names`)."""
        return self.convolve([proj(x) for proj in self._projections()], windows, context, activations)

    def _projections(self) -> list[nn.Linear]:
        """The layer's ``<x>_proj`` for each ``<x>_conv`` in :attr:`conv_names`."""
        return [getattr(self, name.removesuffix("_conv") + "_proj") for name in self.conv_names]

    def unwrap_cache(
        self, cache: LayerCache | None, expected: type[CacheT]
    ) -> tuple[CacheT | None, tuple[Tensor, ...] | None]:
        """A decoding ``cache`` as the layer's own ``expected`` cache and the convolutions' windows
        (:meth:`ConvolvedCache.unwrap <zoo.attention.contract.cache.ConvolvedCache.unwrap>` for this layer);
        the layer hands back ``ConvolvedCache.wrap(held, windows)``."""
        return ConvolvedCache.unwrap(cache, expected, convolves=self.convolves, owner=self)

    def conv_repr(self) -> str:
        """``", conv_size=K"`` to end an ``extra_repr`` when the layer convolves, else ``""``."""
        if not self.convolves:
            return ""
        return f", conv_size={getattr(self, self.conv_names[0]).kernel_size[0]}" + (
            ", residual" if self.conv_residual else ""
        )
