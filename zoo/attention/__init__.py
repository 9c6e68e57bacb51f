"""Attention behind two contracts, scoring attentions and attention layers, and the registry that names both.

The package is arranged by job: :mod:`~zoo.attention.contract` (the two contracts, the context,
masks, caches), :mod:`~zoo.attention.build` (the registry, specs, the backends' choice),
:mod:`~zoo.attention.modules` (the multi-head layers and the pieces and family bases variants
are made of), :mod:`~zoo.attention.variants` (one variant or family per file),
:mod:`~zoo.attention.kernels` (tensor machinery that imports none of the others) and
:mod:`~zoo.attention.compat` (stored models of earlier versions). What a user or a plugin needs is
exported here, and only these names are the public path: the modules behind them may move.
Importing this package registers the built-in variants.
"""

import sys

from zoo.attention.contract.base import (
    Attention,
    AttentionOutput,
    Capabilities,
    IncompatibleAttentionError,
    capabilities,
)
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.layer import AttentionLayer
from zoo.attention.build.factory import (
    ATTENTION_REGISTRY,
    create_attention,
    create_scoring_attention,
    get_attention,
    list_attention,
    register_attention,
    register_attention_layer,
    require_attention,
)
from zoo.attention.contract.masking import causal_mask, lengths_to_mask, masked_softmax

# Built-in variants register themselves on import.
from zoo.attention import variants  # noqa: E402  (after the registry)
from zoo.attention.modules.recurrent import RecurrentLayer  # noqa: E402
from zoo.attention.build.spec import AttentionSpec, layer_specs  # noqa: E402
from zoo.attention.modules.headed import HeadedAttention  # noqa: E402
from zoo.attention.modules.recurrence import LowRankRecurrence, ProductRecurrence, Recurrence  # noqa: E402
from zoo.attention.modules.multi_head import CrossAttention, MultiHeadAttention, SelfAttention, self_attention_layer  # noqa: E402

# The variants' modules before they moved to zoo.attention.variants: their old paths still import.
for _module in variants.MODULES:
    sys.modules.setdefault(f"{__name__}.{_module.__name__.rsplit('.', 1)[1]}", _module)
del _module

#: each built-in variant's class, exported here under its class name: read from the registry, so
#: that a variant's file (its registration) is all that lists it
_VARIANT_CLASSES = {
    entry.obj.__name__: entry.obj
    for entry in ATTENTION_REGISTRY.entries()
    if entry.obj.__module__.startswith(f"{variants.__name__}.")
}
globals().update(_VARIANT_CLASSES)

__all__ = [
    # the contract
    "Attention",
    "AttentionLayer",
    "AttentionOutput",
    "AttentionContext",
    "IncompatibleAttentionError",
    "Capabilities",
    "capabilities",
    "causal_mask",
    "lengths_to_mask",
    "masked_softmax",
    # naming and building
    "ATTENTION_REGISTRY",
    "register_attention",
    "register_attention_layer",
    "get_attention",
    "list_attention",
    "require_attention",
    "create_attention",
    "create_scoring_attention",
    "AttentionSpec",
    "layer_specs",
    # the multi-head layers and the family bases
    "HeadedAttention",
    "MultiHeadAttention",
    "SelfAttention",
    "CrossAttention",
    "self_attention_layer",
    "RecurrentLayer",
    "Recurrence",
    "LowRankRecurrence",
    "ProductRecurrence",
    # the variants, read from the registry
    *sorted(_VARIANT_CLASSES),
]
