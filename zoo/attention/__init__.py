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

from zoo.attention.contract.base import Attention, AttentionOutput, IncompatibleAttentionError
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
from zoo.attention.variants.additive import AdditiveAttention  # noqa: E402
from zoo.attention.variants.average import AveragePooling  # noqa: E402
from zoo.attention.variants.dot_product import DotProductAttention  # noqa: E402
from zoo.attention.variants.gaussian_kernel import GaussianKernelAttention  # noqa: E402
from zoo.attention.variants.linear import LinearAttention  # noqa: E402
from zoo.attention.variants.local import LocalAttention  # noqa: E402
from zoo.attention.variants.performer import PerformerAttention  # noqa: E402
from zoo.attention.variants.linformer import LinformerAttention  # noqa: E402
from zoo.attention.variants.longformer import LongformerAttention  # noqa: E402
from zoo.attention.variants.bigbird import BigBirdAttention  # noqa: E402
from zoo.attention.variants.sparse import FixedSparseAttention  # noqa: E402
from zoo.attention.variants.synthesizer import SynthesizerAttention  # noqa: E402
from zoo.attention.variants.sinkhorn import SinkhornAttention  # noqa: E402
from zoo.attention.variants.reformer import ReformerAttention  # noqa: E402
from zoo.attention.modules.recurrent import RecurrentLayer  # noqa: E402
from zoo.attention.variants.retention import RetentionAttention  # noqa: E402
from zoo.attention.variants.gla import GatedLinearAttention  # noqa: E402
from zoo.attention.variants.deltanet import DeltaNetAttention, GatedDeltaNetAttention  # noqa: E402
from zoo.attention.variants.mamba2 import Mamba2Attention  # noqa: E402
from zoo.attention.variants.kda import KimiDeltaAttention  # noqa: E402
from zoo.attention.variants.rwkv7 import RWKV7Attention  # noqa: E402
from zoo.attention.variants.gated_deltaproduct import GatedDeltaProductAttention  # noqa: E402
from zoo.attention.variants.mla import MultiHeadLatentAttention  # noqa: E402
from zoo.attention.variants.moba import MoBAAttention  # noqa: E402
from zoo.attention.variants.nsa import NativeSparseAttention  # noqa: E402
from zoo.attention.variants.softmax import SoftmaxAttention  # noqa: E402
from zoo.attention.variants.softmax_recipes import (  # noqa: E402
    GatedAttention,
    QKNormAttention,
    SinkAttention,
    StreamingAttention,
)
from zoo.attention.variants.sigmoid import SigmoidAttention  # noqa: E402
from zoo.attention.variants.softpick import SoftpickAttention  # noqa: E402
from zoo.attention.variants.stick_breaking import StickBreakingAttention  # noqa: E402
from zoo.attention.variants.differential import DifferentialAttention  # noqa: E402
from zoo.attention.variants.forgetting import ForgettingAttention  # noqa: E402
from zoo.attention.build.spec import AttentionSpec, layer_specs  # noqa: E402
from zoo.attention.modules.headed import HeadedAttention  # noqa: E402
from zoo.attention.modules.recurrence import LowRankRecurrence, ProductRecurrence, Recurrence  # noqa: E402
from zoo.attention.modules.multi_head import CrossAttention, MultiHeadAttention, SelfAttention, self_attention_layer  # noqa: E402

# The variants' modules before they moved to zoo.attention.variants: their old paths still import.
for _module in variants.MODULES:
    sys.modules.setdefault(f"{__name__}.{_module.__name__.rsplit('.', 1)[1]}", _module)
del _module

__all__ = [
    "ATTENTION_REGISTRY",
    "AdditiveAttention",
    "AveragePooling",
    "Attention",
    "AttentionContext",
    "AttentionLayer",
    "AttentionOutput",
    "AttentionSpec",
    "BigBirdAttention",
    "CrossAttention",
    "DeltaNetAttention",
    "DifferentialAttention",
    "DotProductAttention",
    "FixedSparseAttention",
    "ForgettingAttention",
    "GatedAttention",
    "GatedDeltaNetAttention",
    "GatedDeltaProductAttention",
    "GatedLinearAttention",
    "GaussianKernelAttention",
    "HeadedAttention",
    "IncompatibleAttentionError",
    "KimiDeltaAttention",
    "LowRankRecurrence",
    "LinearAttention",
    "LinformerAttention",
    "LocalAttention",
    "LongformerAttention",
    "Mamba2Attention",
    "MoBAAttention",
    "MultiHeadAttention",
    "MultiHeadLatentAttention",
    "NativeSparseAttention",
    "PerformerAttention",
    "ProductRecurrence",
    "RWKV7Attention",
    "QKNormAttention",
    "ReformerAttention",
    "Recurrence",
    "RecurrentLayer",
    "RetentionAttention",
    "SelfAttention",
    "SigmoidAttention",
    "SinkAttention",
    "SinkhornAttention",
    "SoftmaxAttention",
    "SoftpickAttention",
    "StickBreakingAttention",
    "StreamingAttention",
    "SynthesizerAttention",
    "causal_mask",
    "create_attention",
    "create_scoring_attention",
    "get_attention",
    "layer_specs",
    "lengths_to_mask",
    "list_attention",
    "masked_softmax",
    "register_attention",
    "register_attention_layer",
    "require_attention",
    "self_attention_layer",
]
