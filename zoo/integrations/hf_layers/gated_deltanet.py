"""What transformers' gated delta nets share (Qwen3-Next's ``Qwen3NextGatedDeltaNet``, Qwen3.5's
``Qwen3_5GatedDeltaNet``, Olmo's hybrid ``OlmoHybridGatedDeltaNet``): the zoo's ``gated_deltanet``
built from the config's ``linear_*`` sizes, the refusals, and the tensors that keep their shape
and only change name. The families differ in how their input projections are laid out (and Olmo's
in two settings), which each family's module states.

Both compute, per value head ``h`` reading key head ``h // (num_v_heads / num_k_heads)``: queries,
keys and values through one depthwise causal convolution and SiLU; queries and keys L2-normalized,
the queries scaled by ``dk ** -0.5``; ``b_t = sigmoid(x_t w_b)``; ``log a_t = -exp(A_log)
softplus(x_t w_a + dt_bias)``; the gated delta rule; each head's RMSNorm times ``silu(x_t W_z)``;
the output projection. That is the zoo's ``gated_deltanet`` with ``num_key_heads``, ``expand_k``
(the key width over the hidden size: 1 in Qwen3-Next, 1/2 in Qwen3.5, 3/4 in Olmo's hybrid) and
``expand_v``.

Where the zoo differs: its per-head norm takes epsilon 1e-5 where the Qwen configs' ``rms_norm_eps``
is 1e-6, so the builder sets the built layer's ``norm.eps`` to the family's (an attribute, not a
constructor argument: a zoo checkpoint does not record it). transformers (as fla) L2-normalizes
queries and keys by ``rsqrt(|x|^2 + 1e-6)``, where the zoo's default is ``1 / max(|x|, 1e-12)``
(``F.normalize``'s): the built layer takes ``qk_norm_eps=1e-6``, transformers' form, so short
queries (a model near its initialization) agree too.
Refused in one line: a key or value width that ``expand_k`` or ``expand_v`` cannot state, value
heads not a multiple of key heads, an activation other than SiLU.
"""

from __future__ import annotations

from typing import Any

from zoo.attention.variants.deltanet import GatedDeltaNetAttention
from zoo.integrations.hf_layers.state_maps import refuse

__all__ = ["HF_L2_EPS", "gated_deltanet_layer", "renamed"]

#: the epsilon under the root of transformers' ``l2norm`` (and flash-linear-attention's)
HF_L2_EPS = 1e-6


def renamed(norm: str = "norm", out: str = "out_proj") -> tuple[tuple[str, str], ...]:
    """transformers' names of the tensors the zoo's layer holds as they are, and the zoo's, given
    transformers' names of the output norm and projection."""
    return (
        ("dt_bias", "decay.dt_bias"),
        ("A_log", "decay.A_log"),
        (f"{norm}.weight", "norm.weight"),
        (f"{out}.weight", "out_proj.weight"),
    )


def _widths(config: Any) -> tuple[int, int]:
    """The key and value widths, all heads."""
    return (
        config.linear_num_key_heads * config.linear_key_head_dim,
        config.linear_num_value_heads * config.linear_value_head_dim,
    )


def _problem(config: Any) -> str | None:
    hidden = config.hidden_size
    key_width, value_width = _widths(config)
    if config.linear_num_value_heads % config.linear_num_key_heads:
        return "linear_num_value_heads not a multiple of linear_num_key_heads"
    for kind, width in (("key", key_width), ("value", value_width)):
        if int(hidden * (width / hidden)) != width:
            return f"a {kind} width of {width} that expand_{kind[0]} cannot state beside hidden_size {hidden}"
    if config.hidden_act != "silu":
        return f"hidden_act {config.hidden_act!r} after the convolution (the zoo's is silu)"
    return None


def gated_deltanet_layer(name: str, config: Any, norm_eps: float, **options: Any) -> GatedDeltaNetAttention:
    """The zoo's ``gated_deltanet`` with ``config``'s linear-attention sizes and the output norm's
    ``norm_eps`` (``name``: the config class, for the refusal; ``options``: the zoo's, such as
    ``mode``, ``chunk_size``, ``negative_eigenvalues``)."""
    refuse(name, _problem(config))
    key_width, value_width = _widths(config)
    layer = GatedDeltaNetAttention(
        config.hidden_size, config.linear_num_value_heads, expand_k=key_width / config.hidden_size,
        expand_v=value_width / config.hidden_size, num_key_heads=config.linear_num_key_heads,
        conv_size=config.linear_conv_kernel_dim, bias=False, qk_norm_eps=HF_L2_EPS, **options,
    )  # fmt: skip
    layer.norm.eps = norm_eps
    return layer
