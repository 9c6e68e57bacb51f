"""Positional schemes behind one contract, and the registry that names them.

Importing this package registers the built-in schemes: ``sinusoidal`` (the default),
``learned``, ``none``, ``rope``, ``alibi`` and ``t5`` (each module registers its scheme).
See :mod:`zoo.positions.base`.
"""

from zoo.positions.absolute import LearnedPositions, NoPositions
from zoo.positions.alibi import ALiBi, alibi_slopes
from zoo.positions.base import (
    POSITION_REGISTRY,
    PositionKind,
    PositionScheme,
    create_position,
    get_position,
    list_positions,
    register_position,
)
from zoo.positions.rotary import RotaryEmbedding
from zoo.positions.sinusoidal import PositionalEncoding, sinusoidal_table
from zoo.positions.t5 import T5RelativeBias, t5_bucket

__all__ = [
    "POSITION_REGISTRY",
    "ALiBi",
    "LearnedPositions",
    "NoPositions",
    "PositionKind",
    "PositionScheme",
    "PositionalEncoding",
    "RotaryEmbedding",
    "T5RelativeBias",
    "alibi_slopes",
    "create_position",
    "get_position",
    "list_positions",
    "register_position",
    "sinusoidal_table",
    "t5_bucket",
]
