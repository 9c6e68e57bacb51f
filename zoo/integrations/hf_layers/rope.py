"""transformers' rotary parameters (``rope_parameters``: ``rope_theta``, ``partial_rotary_factor``)
as the zoo's :class:`~zoo.positions.rotary.RotaryEmbedding`, shared by the softmax families' maps.

transformers' default rotation pairs feature ``i`` with ``i + r / 2`` within the first ``r`` of a
head, at ``theta_i = rope_theta^(-2i / r)``: the zoo's ``rope`` with ``base`` and ``fraction``. A config
whose layers rotate differently (Gemma 3's local and global bases) holds one such dict per layer
type, read with ``layer_type``. Other
``rope_type``s (YaRN's, linear and dynamic scaling) change the angles and are refused in one line.
"""

from __future__ import annotations

from typing import Any

from zoo.integrations.hf_layers.state_maps import refuse
from zoo.positions.rotary import RotaryEmbedding

__all__ = ["hf_rotary"]


def hf_rotary(name: str, config: Any, head_dim: int, layer_type: str | None = None) -> RotaryEmbedding:
    """The zoo's rotary scheme for heads of ``head_dim`` under ``config``'s rotary parameters (those
    of ``layer_type``, where the config holds them per layer type)."""
    parameters = dict(config.rope_parameters or {})
    if layer_type is not None:
        parameters = dict(parameters[layer_type])
    rope_type = parameters.get("rope_type", "default")
    refuse(name, None if rope_type == "default" else f"rope_type {rope_type!r} (the zoo's rope is the default one)")
    fraction = parameters.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0))
    return RotaryEmbedding(head_dim, base=parameters["rope_theta"], fraction=fraction)
