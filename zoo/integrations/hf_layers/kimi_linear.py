"""transformers' ``KimiLinearDeltaAttention`` (``models/kimi_linear/modeling_kimi_linear.py``) and the
zoo's ``kda`` with ``head_dim`` and ``gate_bias=False``, weight for weight.

Kimi Linear's KDA layers are ``linear_num_heads * linear_head_dim`` wide (32 heads of 128: 4096) in a
block of ``hidden_size`` (2304): the zoo's ``head_dim`` sets that width. The projections map one to
one: ``q_proj``, ``k_proj``, ``v_proj``, ``b_proj`` (the zoo's ``beta``), ``forget_gate.f_a_proj`` and
``f_b_proj`` (``decay.proj``), ``g_a_proj`` and ``g_b_proj`` (``gate``), ``o_norm`` (``norm``) and
``o_proj`` (``out_proj``); transformers' one ``conv1d`` over ``q``, ``k``, ``v`` is split in three.
``forget_gate.A_log`` is stored ``(1, 1, H, 1)`` there and ``(H,)`` here; ``dt_bias`` is the same.

What both compute, checked term by term: the gate ``log alpha = -exp(A_log) * softplus(x W_1 W_2 +
dt_bias)`` per key dimension, both ranks ``linear_head_dim`` (the zoo's ``gate_rank`` default, the
value head size, when values are as wide as keys); ``beta = sigmoid(x w_b)``, no bias; the
convolution without a bias, then SiLU on queries, keys and values; queries and keys L2-normalized
per head, queries scaled by ``head_dim ** -0.5``; the per-head RMSNorm times ``sigmoid`` of the
low-rank output gate, then ``o_proj``, no biases.

Where the two differ: transformers' output gate has no bias on its second map, where fla's (and the
zoo's default) has one: the builder sets ``gate_bias=False`` (an option whose default keeps the
zoo's layer and its state dict as they were). transformers' norm epsilon is ``rms_norm_eps`` (1e-5
in ``KimiLinearConfig``, the zoo's too), set on the built layer's ``norm.eps`` (an attribute, not
a constructor argument: a zoo checkpoint does not record it). transformers (as fla) L2-normalizes
by ``1 / sqrt(|x|^2 + 1e-6)``, the zoo by ``1 / max(|x|, 1e-12)``: a relative difference of
``5e-7 / |x|^2``, float32's rounding at the norms the convolved projections have. transformers
runs its recurrence and its output norm in float32 whatever the module's dtype. Refused in one
line: an activation other than SiLU. The bounded gate (fla's ``lower_bound``) is not in
transformers' layer, so the builder leaves the zoo's ``decay_lower_bound`` off.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from zoo.attention.variants.kda import KimiDeltaAttention
from zoo.integrations.hf_layers.state_maps import LayerPair, fused_conv, refuse

__all__ = ["KimiLinearPair", "kimi_linear_kda_layer", "kimi_linear_kda_pair"]

#: transformers' name and the zoo's of the decay's per-head ``A_log`` (shaped ``(1, 1, H, 1)`` there)
A_LOG = ("forget_gate.A_log", "decay.A_log")


def kimi_linear_kda_layer(config: Any, **options: Any) -> KimiDeltaAttention:
    """The zoo's ``kda`` with a ``KimiLinearConfig``'s linear-attention sizes, no output gate bias and
    its norm's epsilon (see the module docstring; ``options``: the zoo's ``mode``, ``chunk_size``)."""
    refuse("KimiLinearConfig", None if config.hidden_act == "silu" else f"hidden_act {config.hidden_act!r}")
    layer = KimiDeltaAttention(
        config.hidden_size, config.linear_num_heads, head_dim=config.linear_head_dim,
        conv_size=config.linear_conv_kernel_dim, bias=False, gate_bias=False, **options,
    )  # fmt: skip
    layer.norm.eps = config.rms_norm_eps
    return layer


@dataclass(frozen=True)
class KimiLinearPair(LayerPair):
    """:class:`~zoo.integrations.hf_layers.state_maps.LayerPair` and ``A_log``'s two shapes:
    ``(1, 1, H, 1)`` in transformers, ``(H,)`` in the zoo."""

    def to_zoo(self, hf_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        state = super().to_zoo(hf_state)
        state[A_LOG[1]] = state[A_LOG[1]].reshape(-1)
        return state

    def from_zoo(self, zoo_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        state = super().from_zoo(zoo_state)
        state[A_LOG[0]] = state[A_LOG[0]].reshape(1, 1, -1, 1)
        return state


def kimi_linear_kda_pair(config: Any) -> KimiLinearPair:
    """``KimiLinearDeltaAttention``'s state dict and the zoo's ``kda``'s (``head_dim``, ``gate_bias=False``)."""
    width = config.linear_num_heads * config.linear_head_dim
    channels = (("q_conv", width), ("k_conv", width), ("v_conv", width))
    return KimiLinearPair(
        "KimiLinearDeltaAttention",
        fused_conv("conv1d", channels, bias=False),
        (
            ("q_proj.weight", "q_proj.weight"), ("k_proj.weight", "k_proj.weight"), ("v_proj.weight", "v_proj.weight"),
            ("b_proj.weight", "beta.weight"), ("forget_gate.f_a_proj.weight", "decay.proj.0.weight"),
            ("forget_gate.f_b_proj.weight", "decay.proj.1.weight"), ("forget_gate.dt_bias", "decay.dt_bias"), A_LOG,
            ("g_a_proj.weight", "gate.0.weight"), ("g_b_proj.weight", "gate.1.weight"),
            ("o_norm.weight", "norm.weight"), ("o_proj.weight", "out_proj.weight"),
        ),
    )  # fmt: skip
