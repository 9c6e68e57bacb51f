"""Positional schemes behind one contract, and the registry that names them.

Importing this package registers the built-in schemes: ``sinusoidal`` (the default),
``learned``, ``none``, ``rope``, ``alibi`` and ``t5``. See :mod:`zoo.positions.base`.
"""

from zoo.positions.base import (
    POSITION_REGISTRY,
    PositionKind,
    PositionScheme,
    create_position,
    get_position,
    list_positions,
    register_position,
    require_position,
)

# Built-in schemes register themselves on import.
from zoo.positions.sinusoidal import PositionalEncoding, sinusoidal_table  # noqa: E402  (after the registry)
from zoo.positions.absolute import LearnedPositions, NoPositions  # noqa: E402
from zoo.positions.rotary import RotaryEmbedding  # noqa: E402
from zoo.positions.alibi import ALiBi, alibi_slopes  # noqa: E402
from zoo.positions.t5 import T5RelativeBias, t5_bucket  # noqa: E402

__all__ = [
    "ALiBi",
    "LearnedPositions",
    "NoPositions",
    "POSITION_REGISTRY",
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
    "require_position",
    "sinusoidal_table",
    "t5_bucket",
]
