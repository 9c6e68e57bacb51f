"""Building blocks shared by the architectures."""

from zoo.layers.add_norm import AddNorm
from zoo.layers.block_config import BlockConfig
from zoo.layers.causal_block import CausalBlock
from zoo.layers.decoder_block import DecoderBlock, KeyValue
from zoo.layers.embedding import ScaledEmbedding, scaled_embedding
from zoo.layers.encoder_block import EncoderBlock
from zoo.layers.feed_forward import PositionWiseFFN
from zoo.layers.gated_feed_forward import GatedFFN
from zoo.layers.norms import ZeroCentredRMSNorm
from zoo.layers.stack import Stack, StackConfig, StackPlan, build_stacks
from zoo.positions import PositionalEncoding, sinusoidal_table

__all__ = [
    "AddNorm",
    "BlockConfig",
    "CausalBlock",
    "DecoderBlock",
    "KeyValue",
    "EncoderBlock",
    "GatedFFN",
    "PositionWiseFFN",
    "PositionalEncoding",
    "ScaledEmbedding",
    "scaled_embedding",
    "sinusoidal_table",
    "Stack",
    "StackConfig",
    "StackPlan",
    "build_stacks",
    "ZeroCentredRMSNorm",
]
