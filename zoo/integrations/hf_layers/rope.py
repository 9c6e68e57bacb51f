"""transformers' rotary parameters (``rope_parameters``: ``rope_type``, ``rope_theta``,
``partial_rotary_factor`` and the scaling fields) as the zoo's
:class:`~zoo.positions.rotary.RotaryEmbedding`, shared by the softmax families' maps.

transformers' default rotation pairs feature ``i`` with ``i + r / 2`` within the first ``r`` of a
head, at ``theta_i = rope_theta^(-2i / r)``: the zoo's ``rope`` with ``base`` and ``fraction``. Its
``"linear"``, ``"llama3"`` and ``"yarn"`` types change those frequencies (and YaRN the cosines' and
sines' size) as the zoo's scaling rules of the same names do (:mod:`zoo.positions.rope_scaling`);
``"proportional"`` (Gemma 4) is the zoo's ``partial="proportional"``. A config whose layers rotate
differently (Gemma 3's local and global bases) holds one such dict per layer type, read with
``layer_type``. ``"dynamic"`` and ``"longrope"`` change the frequencies with the length being read
and are refused in one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo.integrations.hf_layers.state_maps import refuse
from zoo.positions.rope_scaling import LinearScaling, Llama3Scaling, RopeScaling, YarnScaling
from zoo.positions.rotary import RotaryEmbedding

__all__ = ["hf_rope_parameters", "hf_rope_scaling", "hf_rotary"]


def hf_rope_parameters(config: Any, layer_type: str | None = None) -> dict[str, Any]:
    """``config``'s rotary parameters (those of ``layer_type``, where it holds them per layer type)."""
    parameters = dict(config.rope_parameters or {})
    return dict(parameters[layer_type]) if layer_type is not None else parameters


def hf_rope_scaling(name: str, config: Any, parameters: Mapping[str, Any]) -> RopeScaling | None:
    """The zoo's scaling rule for a ``rope_type`` of ``parameters`` (None for ``"default"`` and
    ``"proportional"`` without a factor); one line naming what the zoo cannot compute."""
    rope_type = parameters.get("rope_type", "default")
    factor = parameters.get("factor")
    if rope_type == "default" or (rope_type == "proportional" and factor in (None, 1.0)):
        return None
    if rope_type in ("linear", "proportional"):
        return LinearScaling(factor)
    original = parameters.get("original_max_position_embeddings")
    if rope_type == "llama3":
        return Llama3Scaling(
            factor,
            original,
            low_freq_factor=parameters["low_freq_factor"],
            high_freq_factor=parameters["high_freq_factor"],
        )
    if rope_type == "yarn":
        return YarnScaling(
            factor if factor is not None else config.max_position_embeddings / original,
            original,
            beta_fast=parameters.get("beta_fast") or 32.0,
            beta_slow=parameters.get("beta_slow") or 1.0,
            mscale=parameters.get("mscale"),
            mscale_all_dim=parameters.get("mscale_all_dim"),
            truncate=dict(config.rope_parameters).get("truncate", True),
            attention_factor=parameters.get("attention_factor"),
        )
    refuse(
        name, f"rope_type {rope_type!r} (its frequencies change with the length read; the zoo's rope has fixed ones)"
    )
    return None


def hf_rotary(name: str, config: Any, head_dim: int, layer_type: str | None = None) -> RotaryEmbedding:
    """The zoo's rotary scheme for heads of ``head_dim`` under ``config``'s rotary parameters (those
    of ``layer_type``, where the config holds them per layer type)."""
    parameters = hf_rope_parameters(config, layer_type)
    fraction = parameters.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0))
    partial = "proportional" if parameters.get("rope_type") == "proportional" else "leading"
    return RotaryEmbedding(
        head_dim,
        base=parameters["rope_theta"],
        fraction=fraction,
        partial=partial,
        scaling=hf_rope_scaling(name, config, parameters),
    )
