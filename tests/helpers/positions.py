"""Which registered attention takes which position scheme: the pairs the contract tests run."""

from __future__ import annotations

import zoo


def takes_position(name: str, position: str) -> bool:
    """Whether the registered ``name`` takes ``position``: a multi-head layer any scheme but
    cross-attention (two sequences have no common frame), a scoring attention and a layer a stack
    builds by name as their capability flags say."""
    cls, kind = zoo.get_attention(name), zoo.POSITION_REGISTRY.get(position).kind
    if issubclass(cls, zoo.AttentionLayer) and not cls.stack_layer:
        return name != "cross"
    return {"absolute": True, "rotary": cls.supports_rotary, "bias": cls.supports_position_bias}[kind]
