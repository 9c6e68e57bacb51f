"""Which registered attention takes which position scheme, and with which arguments: the cases the
contract tests run."""

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


#: what a built-in needs to be exercised whole at the kit's short lengths (4 to 9 tokens): NSA's
#: compression and selection blocks of 2, so that its checks see blocks compressed and selected
KIT_OPTIONS = {"nsa": {"compress_block": 2, "compress_stride": 1, "select_block": 2, "select_count": 3, "window": 2}}
