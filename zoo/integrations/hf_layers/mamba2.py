"""transformers' ``Mamba2Mixer`` (``models/mamba2/modeling_mamba2.py``, its ``torch_forward``) and the
zoo's ``mamba2``, weight for weight.

transformers fuses the gate ``z``, ``x``, ``B``, ``C`` and the step sizes into one ``in_proj`` and
``x``, ``B``, ``C`` into one ``conv1d``; the zoo keeps one projection each (``gate``, ``v_proj``,
``k_proj``, ``q_proj``, ``decay.proj``) and one convolution each. ``A_log``, ``dt_bias``, ``D``, the
gated norm's scale (per feature, groups of ``inner / n_groups``) and ``out_proj`` are the same
tensors. The zoo's gated norm takes epsilon 1e-5 (transformers' default): a config with another is
refused, as are ``time_step_limit`` other than ``(0, inf)``, ``use_bias`` (a bias on the fused
projection's gate and step-size rows, which the zoo's projections lack), no convolution bias and an
activation other than SiLU. transformers zeroes a padded token's convolved inputs but still decays
the state there; the zoo's padded steps neither write nor decay: outputs at real tokens agree under
left and right padding, the state after a right-padded prompt differs.
"""

from __future__ import annotations

from typing import Any

from zoo.attention.variants.mamba2 import Mamba2Attention
from zoo.integrations.hf_layers.state_maps import Fused, LayerPair, fused_conv, refuse

__all__ = ["mamba2_layer", "mamba2_pair"]

#: the gated norm's epsilon the zoo's Mamba-2 computes with
MAMBA2_NORM_EPS = 1e-5


def _mamba2_problem(config: Any) -> str | None:
    if tuple(config.time_step_limit) != (0.0, float("inf")):
        return f"time_step_limit {tuple(config.time_step_limit)} clamps the step sizes"
    if config.use_bias:
        return "use_bias puts a bias on the gate's and step sizes' rows of in_proj"
    if not config.use_conv_bias:
        return "use_conv_bias=False leaves the convolution without its bias"
    if config.hidden_act != "silu":
        return f"hidden_act {config.hidden_act!r} after the convolution (the zoo's is silu)"
    if config.layer_norm_epsilon != MAMBA2_NORM_EPS:
        return f"layer_norm_epsilon {config.layer_norm_epsilon} (the zoo's gated norm takes {MAMBA2_NORM_EPS})"
    return None


def mamba2_layer(config: Any, **options: Any) -> Mamba2Attention:
    """The zoo's ``mamba2`` with a ``Mamba2Config``'s sizes (``options``: the zoo's ``mode``,
    ``chunk_size``); one line for a config it cannot compute."""
    refuse("Mamba2Config", _mamba2_problem(config))
    return Mamba2Attention(
        config.hidden_size, config.num_heads, expand=config.expand, d_state=config.state_size,
        ngroups=config.n_groups, conv_size=config.conv_kernel, bias=False, **options,
    )  # fmt: skip


def mamba2_pair(config: Any) -> LayerPair:
    """``Mamba2Mixer``'s state dict and the zoo's ``mamba2``'s."""
    inner, bc = int(config.expand * config.hidden_size), config.n_groups * config.state_size
    channels = (("v_conv", inner), ("k_conv", bc), ("q_conv", bc))
    projections = (("gate.weight", inner), ("v_proj.weight", inner), ("k_proj.weight", bc), ("q_proj.weight", bc))
    return LayerPair(
        "Mamba2Mixer",
        (Fused("in_proj.weight", (*projections, ("decay.proj.weight", config.num_heads))),)
        + fused_conv("conv1d", channels, bias=True),
        (
            ("dt_bias", "decay.dt_bias"), ("A_log", "decay.A_log"), ("D", "D"), ("norm.weight", "norm_weight"),
            ("out_proj.weight", "out_proj.weight"),
        ),
    )  # fmt: skip
