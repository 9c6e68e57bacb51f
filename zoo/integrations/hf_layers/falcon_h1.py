"""transformers' Falcon-H1 token mixing (``models/falcon_h1/modeling_falcon_h1.py``: a
``FalconH1DecoderLayer``'s ``self_attn`` and ``mamba`` and its multipliers) and the zoo's
``parallel_hybrid`` of ``softmax`` and ``mamba2``, weight for weight.

The decoder layer computes ``attn_out * attention(attention_in * h) + ssm_out * mamba(ssm_in * h)``
on its normed input ``h`` (the mixer applies ``ssm_in_multiplier`` itself), then its MLP. The zoo's
layer is the first part only: branches ``[softmax, {name: mamba2, num_heads: mamba_n_heads, ...}]``
with the four multipliers, rotary positions on the attention branch alone (``positioned: [true,
false]``, the config's ``rope_theta``) and the config's key/value heads. :data:`FAMILIES
<zoo.integrations.hf_layers.FAMILIES>` maps one module whose state dict is the zoo layer's, so the
two branches travel in :class:`FalconH1Mixing`, a container that holds a decoder layer's
``self_attn`` and ``mamba`` (the same modules, not copies) and nothing of its MLP or norms:
``from_hf_layer(FalconH1Mixing(decoder_layer), config)``. The attention's ``q/k/v/o_proj`` are the
softmax branch's ``q/k/v/out_proj``; the mixer's fused ``in_proj`` and ``conv1d`` split as
:mod:`~zoo.integrations.hf_layers.mamba2` splits Mamba-2's.

Refused in one line, where the zoo's layers have no option for them: ``key_multiplier`` and
``ssm_multipliers`` (the muP vector on ``in_proj``'s parts) other than 1; ``mamba_rms_norm`` off
(the zoo's Mamba-2 always norms) and ``mamba_norm_before_gate`` on (the zoo's gates, then norms);
biases (``attention_bias``, ``mamba_proj_bias``, ``projectors_bias``); no convolution bias, another
activation, another norm epsilon than 1e-5, a ``time_step_limit``, a rope type other than
``default``, and an attention ``head_dim`` other than ``hidden_size / num_attention_heads``.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from zoo.attention.variants.parallel_hybrid import ParallelHybridAttention
from zoo.integrations.hf_layers.mamba2 import MAMBA2_NORM_EPS
from zoo.integrations.hf_layers.rope import hf_rotary
from zoo.integrations.hf_layers.state_maps import Fused, LayerPair, fused_conv, refuse

__all__ = ["FalconH1Mixing", "falcon_h1_layer", "falcon_h1_pair"]


class FalconH1Mixing(nn.Module):
    """A ``FalconH1DecoderLayer``'s two token-mixing branches, ``self_attn`` and ``mamba`` (the
    decoder layer's own modules), as one module whose state dict the map reads and writes."""

    def __init__(self, decoder_layer: nn.Module) -> None:
        super().__init__()
        self.self_attn, self.mamba = decoder_layer.self_attn, decoder_layer.mamba


def _inner(config: Any) -> int:
    return int(config.mamba_expand * config.hidden_size) if config.mamba_d_ssm is None else config.mamba_d_ssm


def _falcon_h1_problem(config: Any) -> str | None:
    head_dim = getattr(config, "head_dim", None)
    checks = (
        (config.key_multiplier != 1, f"key_multiplier {config.key_multiplier} scales the attention's keys"),
        (
            any(m != 1 for m in config.ssm_multipliers),
            f"ssm_multipliers {config.ssm_multipliers} scale in_proj's parts",
        ),
        (not config.mamba_rms_norm, "mamba_rms_norm=False leaves Mamba-2's output without its gated norm"),
        (config.mamba_norm_before_gate, "mamba_norm_before_gate=True norms before the gate (the zoo gates first)"),
        (config.attention_bias or config.mamba_proj_bias or config.projectors_bias, "a projection has a bias"),
        (not config.mamba_conv_bias, "mamba_conv_bias=False leaves the convolution without its bias"),
        (config.hidden_act != "silu", f"hidden_act {config.hidden_act!r} after the convolution"),
        (config.rms_norm_eps != MAMBA2_NORM_EPS, f"rms_norm_eps {config.rms_norm_eps} in the gated norm"),
        (tuple(config.time_step_limit) != (0.0, float("inf")), "time_step_limit clamps the step sizes"),
        (
            head_dim not in (None, config.hidden_size // config.num_attention_heads),
            f"head_dim {head_dim} is not hidden_size / num_attention_heads",
        ),
    )
    return next((problem for failed, problem in checks if failed), None)


def falcon_h1_layer(config: Any, **options: Any) -> ParallelHybridAttention:
    """The zoo's ``parallel_hybrid`` with a ``FalconH1Config``'s sizes and multipliers (``options``:
    the Mamba-2 branch's ``mode``, ``chunk_size``); one line for a config it cannot compute."""
    refuse("FalconH1Config", _falcon_h1_problem(config))
    hidden, heads = config.hidden_size, config.num_attention_heads
    mamba = {
        "name": "mamba2", "num_heads": config.mamba_n_heads, "expand": _inner(config) / hidden,
        "d_state": config.mamba_d_state, "ngroups": config.mamba_n_groups, "conv_size": config.mamba_d_conv, **options,
    }  # fmt: skip
    return ParallelHybridAttention(
        hidden, heads, branches=["softmax", mamba],
        input_multipliers=(config.attention_in_multiplier, config.ssm_in_multiplier),
        output_multipliers=(config.attention_out_multiplier, config.ssm_out_multiplier),
        positioned=(True, False), position=hf_rotary("FalconH1Config", config, hidden // heads),
        bias=False, num_kv_heads=config.num_key_value_heads,
    )  # fmt: skip


def falcon_h1_pair(config: Any) -> LayerPair:
    """:class:`FalconH1Mixing`'s state dict and the zoo's ``parallel_hybrid``'s."""
    inner, bc = _inner(config), config.mamba_n_groups * config.mamba_d_state
    attention = tuple((f"self_attn.{p}_proj.weight", f"branches.0.{p}_proj.weight") for p in "qkv")
    channels = (("branches.1.v_conv", inner), ("branches.1.k_conv", bc), ("branches.1.q_conv", bc))
    projections = tuple(
        (f"branches.1.{name}.weight", rows)
        for name, rows in (("gate", inner), ("v_proj", inner), ("k_proj", bc), ("q_proj", bc))
    )
    return LayerPair(
        "FalconH1Mixing",
        (Fused("mamba.in_proj.weight", (*projections, ("branches.1.decay.proj.weight", config.mamba_n_heads))),)
        + fused_conv("mamba.conv1d", channels, bias=True),
        (
            *attention, ("self_attn.o_proj.weight", "branches.0.out_proj.weight"),
            ("mamba.dt_bias", "branches.1.decay.dt_bias"), ("mamba.A_log", "branches.1.decay.A_log"),
            ("mamba.D", "branches.1.D"), ("mamba.norm.weight", "branches.1.norm_weight"),
            ("mamba.out_proj.weight", "branches.1.out_proj.weight"),
        ),
    )  # fmt: skip
