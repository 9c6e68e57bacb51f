"""The opening of a recurrent layer's ``attend_cached``: what it continues, and the request it serves.

A layer that keeps a state between calls (:class:`~zoo.attention.modules.recurrent.RecurrentLayer`,
:class:`~zoo.attention.modules.log_linear_layer.LogLinearLayer`) opens every cached call the same
way: it refuses a cache of another kind, reads a missing context as causal, keeps only the last
``Lq`` key columns of the context's mask (the state holds the earlier positions already), and
refuses what it cannot serve. One function here does it, so the layers' ``attend_cached`` bodies
say only what differs between them.
"""

from __future__ import annotations

from torch import Tensor

from zoo.attention.contract.cache import CacheT, LayerCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.layer import AttentionLayer

__all__ = ["continued_request"]


def continued_request(
    layer: AttentionLayer,
    x: Tensor,
    cache: LayerCache | None,
    expected: type[CacheT],
    context: AttentionContext | None,
) -> tuple[CacheT | None, AttentionContext]:
    """``cache`` as the ``expected`` kind (None before the first call) and the context of the new
    positions ``x`` ``(B, Lq, embed_dim)``: causal when None, its mask (over every position seen)
    cut to the last ``Lq`` key columns, checked against ``layer``'s capabilities.

    Raises:
        TypeError: ``cache`` is not an ``expected`` cache.
        IncompatibleAttentionError: ``layer`` cannot serve the context.
    """
    if cache is not None and not isinstance(cache, expected):
        raise TypeError(f"{type(layer).__name__} continues a {expected.__name__}; got a {type(cache).__name__}.")
    context = AttentionContext(is_causal=True) if context is None else context
    if context.mask is not None:
        context = context.replace(mask=context.mask[..., -x.shape[1] :])
    layer.check_request(context)
    return cache, context
