"""Attention behind two contracts, scoring attentions and attention layers, and the registry that names both.

Importing this package registers the built-in variants.
"""

from zoo.attention.base import Attention, AttentionOutput, IncompatibleAttentionError
from zoo.attention.context import AttentionContext
from zoo.attention.layer import AttentionLayer
from zoo.attention.factory import (
    ATTENTION_REGISTRY,
    create_attention,
    create_scoring_attention,
    get_attention,
    list_attention,
    register_attention,
    register_attention_layer,
    require_attention,
)
from zoo.attention.masking import causal_mask, lengths_to_mask, masked_softmax

# Built-in variants register themselves on import.
from zoo.attention.additive import AdditiveAttention  # noqa: E402  (after the registry)
from zoo.attention.average import AveragePooling  # noqa: E402
from zoo.attention.dot_product import DotProductAttention  # noqa: E402
from zoo.attention.gaussian_kernel import GaussianKernelAttention  # noqa: E402
from zoo.attention.linear import LinearAttention  # noqa: E402
from zoo.attention.local import LocalAttention  # noqa: E402
from zoo.attention.performer import PerformerAttention  # noqa: E402
from zoo.attention.linformer import LinformerAttention  # noqa: E402
from zoo.attention.longformer import LongformerAttention  # noqa: E402
from zoo.attention.bigbird import BigBirdAttention  # noqa: E402
from zoo.attention.sparse import FixedSparseAttention  # noqa: E402
from zoo.attention.synthesizer import SynthesizerAttention  # noqa: E402
from zoo.attention.sinkhorn import SinkhornAttention  # noqa: E402
from zoo.attention.reformer import ReformerAttention  # noqa: E402
from zoo.attention.recurrent import RecurrentLayer  # noqa: E402
from zoo.attention.retention import RetentionAttention  # noqa: E402
from zoo.attention.gla import GatedLinearAttention  # noqa: E402
from zoo.attention.deltanet import DeltaNetAttention, GatedDeltaNetAttention  # noqa: E402
from zoo.attention.mamba2 import Mamba2Attention  # noqa: E402
from zoo.attention.spec import AttentionSpec, layer_specs  # noqa: E402
from zoo.attention.headed import HeadedAttention  # noqa: E402
from zoo.attention.multi_head import CrossAttention, MultiHeadAttention, SelfAttention, self_attention_layer  # noqa: E402

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
    "DotProductAttention",
    "FixedSparseAttention",
    "GatedDeltaNetAttention",
    "GatedLinearAttention",
    "GaussianKernelAttention",
    "HeadedAttention",
    "IncompatibleAttentionError",
    "LinearAttention",
    "LinformerAttention",
    "LocalAttention",
    "LongformerAttention",
    "Mamba2Attention",
    "MultiHeadAttention",
    "PerformerAttention",
    "ReformerAttention",
    "RecurrentLayer",
    "RetentionAttention",
    "SelfAttention",
    "SinkhornAttention",
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
