"""Hugging Face transformers' production recurrent layers and the zoo's, weight for weight.

Why: a model trained with transformers (a Mamba-2 checkpoint, Qwen3-Next's linear layers) can run
as the zoo's layer with the same weights, and a zoo layer can be written back into transformers'
module, so each side checks the other (``tests/integrations/test_hf_layer_equality.py`` holds the
full forward and token-by-token decoding equal). For each pair this module gives the zoo layer
built from the transformers config (:func:`mamba2_layer`, :func:`qwen3_next_gated_deltanet_layer`),
the map between the two state dicts in both directions (a :class:`LayerPair`: ``to_zoo`` and
``from_zoo``, every tensor accounted for), and :func:`from_hf_layer` / :func:`into_hf_layer`, which
do both for a built module::

    layer = from_hf_layer(hf_mixer, config)        # the zoo's Mamba-2, equal to the Mamba2Mixer
    into_hf_layer(layer, hf_mixer, config)          # and back

It reads configs by attribute and state dicts by key, so it does not import transformers.

The pairs:

* ``Mamba2Mixer`` (``models/mamba2/modeling_mamba2.py``, its ``torch_forward``) and ``mamba2``:
  transformers fuses the gate ``z``, ``x``, ``B``, ``C`` and the step sizes into one ``in_proj``
  and ``x``, ``B``, ``C`` into one ``conv1d``; the zoo keeps one projection each (``gate``,
  ``v_proj``, ``k_proj``, ``q_proj``, ``decay.proj``) and one convolution each. ``A_log``,
  ``dt_bias``, ``D``, the gated norm's scale (per feature, groups of ``inner / n_groups``) and
  ``out_proj`` are the same tensors.
* ``Qwen3NextGatedDeltaNet`` (``models/qwen3_next/modeling_qwen3_next.py``) and ``gated_deltanet``
  with ``num_key_heads``: transformers' ``in_proj_qkvz`` holds, per key head, its query, its key,
  then the values and output gates of its ``num_v_heads / num_k_heads`` value heads; its
  ``in_proj_ba`` per key head the write strengths then the decays' inputs of those value heads. The
  zoo's ``q_proj``, ``k_proj``, ``v_proj``, ``gate``, ``beta``, ``decay.proj`` are those rows
  regrouped by kind, value heads in the same order (head ``h`` reads key head ``h // group``).

Where the zoo differs, and what the builders do about it:

* Norm epsilons. The zoo's Mamba-2 fixes its gated norm's at 1e-5 (transformers' default): a
  config with another is refused. The zoo's per-head norm takes 1e-5 where Qwen3-Next's
  ``rms_norm_eps`` is 1e-6: the builder sets the built layer's ``norm.eps`` to the config's (an
  attribute, not a constructor argument: a zoo checkpoint does not record it).
* L2 normalization. transformers (as fla) normalizes queries and keys by ``rsqrt(|x|^2 + 1e-6)``,
  the zoo by ``1 / max(|x|, 1e-12)``: a relative difference of ``5e-7 / |x|^2``, of the order of
  float32's rounding at the norms the convolved projections have.
* Padding. transformers zeroes a padded token's input (``attention_mask`` ``(B, T)``; Mamba-2 its
  convolved ``x``, ``B``, ``C`` too), but at a padded step its state still decays by
  ``exp(-softplus(dt_bias) A)`` (and Qwen3-Next's writes what the convolution carries over from
  the real tokens before it); the zoo's padded steps neither write nor decay. The outputs at real
  tokens agree under left and right padding (before a row's first real token every state is
  zero); the state after a right-padded prompt differs.
* What the zoo has no option for is refused in one line (:class:`~zoo.errors.ConfigurationError`):
  Mamba-2's ``time_step_limit`` other than ``(0, inf)``, ``use_bias`` (a bias on the fused
  projection, whose gate and step-size rows the zoo's projections have no bias for), no
  convolution bias, an activation other than SiLU; Qwen3-Next's key width other than its hidden
  size (the zoo's gated delta net keys are ``embed_dim`` wide), a value width that ``expand_v``
  (a multiple of the hidden size) cannot state.
* Left out, for want of zoo options (each a change to its variant, not to this map):
  Kimi Linear's KDA (``models/kimi_linear``, ``KimiLinearDeltaAttention``): its key and value
  width, ``linear_num_heads * linear_head_dim`` (4096), is not its hidden size (2304), where the
  zoo's ``kda`` keys are ``embed_dim`` wide (its output gate's second map has no bias where the
  zoo's has one: a zero bias would map). Qwen3-Next's gated softmax attention
  (``Qwen3NextAttention``) against ``gated_attention`` with ``qk_norm``: its heads are wider than
  ``hidden_size / num_attention_heads`` (16 heads of 256 beside 2048), where the zoo's softmax
  heads split ``embed_dim``; it rotates a quarter of each head (``partial_rotary_factor`` 0.25),
  which the zoo's rotary scheme does not; its QK-norm scales are zero-centred (``1 + w``), which
  maps to the zoo's ``w`` up to rounding, not bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from zoo.attention.modules.recurrent import RecurrentLayer
from zoo.attention.variants.deltanet import GatedDeltaNetAttention
from zoo.attention.variants.mamba2 import Mamba2Attention
from zoo.errors import ConfigurationError

__all__ = [
    "FAMILIES",
    "Fused",
    "HFFamily",
    "LayerPair",
    "from_hf_layer",
    "into_hf_layer",
    "mamba2_layer",
    "mamba2_pair",
    "qwen3_next_gated_deltanet_layer",
    "qwen3_next_gated_deltanet_pair",
]

#: the gated norm's epsilon the zoo's Mamba-2 computes with
MAMBA2_NORM_EPS = 1e-5


@dataclass(frozen=True)
class Fused:
    """One transformers tensor holding several of the zoo's along its first axis: ``groups`` blocks,
    each the ``parts`` side by side (``(zoo name, rows per block)``); a zoo tensor is its rows of
    every block, in block order."""

    hf: str
    parts: tuple[tuple[str, int], ...]
    groups: int = 1

    def split(self, tensor: Tensor) -> dict[str, Tensor]:
        """The zoo's tensors from transformers' ``tensor``."""
        pieces = tensor.unflatten(0, (self.groups, -1)).split([rows for _, rows in self.parts], dim=1)
        return {name: piece.flatten(0, 1) for (name, _), piece in zip(self.parts, pieces)}

    def join(self, state: Mapping[str, Tensor]) -> Tensor:
        """transformers' tensor from the zoo's in ``state``."""
        return torch.cat([state[name].unflatten(0, (self.groups, -1)) for name, _ in self.parts], 1).flatten(0, 1)


@dataclass(frozen=True)
class LayerPair:
    """The map between a transformers layer's state dict and the zoo layer's: ``fused`` tensors
    split and joined, the others ``renamed`` (``(transformers name, zoo name)``)."""

    name: str
    fused: tuple[Fused, ...]
    renamed: tuple[tuple[str, str], ...]

    def to_zoo(self, hf_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """The zoo layer's state dict from transformers'."""
        self._check(hf_state, [f.hf for f in self.fused] + [hf for hf, _ in self.renamed], "transformers")
        state = {zoo: hf_state[hf] for hf, zoo in self.renamed}
        for fused in self.fused:
            state.update(fused.split(hf_state[fused.hf]))
        return state

    def from_zoo(self, zoo_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """transformers' state dict from the zoo layer's."""
        zoo_names = [name for f in self.fused for name, _ in f.parts] + [zoo for _, zoo in self.renamed]
        self._check(zoo_state, zoo_names, "zoo")
        state = {hf: zoo_state[zoo] for hf, zoo in self.renamed}
        state.update({fused.hf: fused.join(zoo_state) for fused in self.fused})
        return state

    def _check(self, state: Mapping[str, Tensor], expected: list[str], side: str) -> None:
        """Every key mapped and no other, or one line naming the difference."""
        missing, extra = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
        if missing or extra:
            raise ConfigurationError(
                f"{self.name}: the {side} state dict lacks {missing} and has unmapped {extra}; "
                f"pass the state dict of the layer built from the same config."
            )


def _refuse(name: str, problem: str | None) -> None:
    """One line naming what of the config the zoo cannot compute, if anything."""
    if problem:
        raise ConfigurationError(
            f"{name}: {problem}; the zoo's layer has no such option (run transformers' layer for it)."
        )


def _conv(prefix: str, parts: tuple[tuple[str, int], ...], bias: bool) -> tuple[Fused, ...]:
    """transformers' one ``conv1d`` over the channels ``parts`` as the zoo's per-projection convolutions."""
    suffixes = ("weight", "bias") if bias else ("weight",)
    return tuple(Fused(f"{prefix}.{s}", tuple((f"{zoo}.{s}", rows) for zoo, rows in parts)) for s in suffixes)


# -- Mamba-2 -----------------------------------------------------------------------------------------


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
    _refuse("Mamba2Config", _mamba2_problem(config))
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
        + _conv("conv1d", channels, bias=True),
        (
            ("dt_bias", "decay.dt_bias"), ("A_log", "decay.A_log"), ("D", "D"), ("norm.weight", "norm_weight"),
            ("out_proj.weight", "out_proj.weight"),
        ),
    )  # fmt: skip


# -- Qwen3-Next's gated delta net ------------------------------------------------------------------------


def _qwen3_next_problem(config: Any) -> str | None:
    key_width = config.linear_num_key_heads * config.linear_key_head_dim
    value_width = config.linear_num_value_heads * config.linear_value_head_dim
    if key_width != config.hidden_size:
        return f"a key width of {key_width} beside hidden_size {config.hidden_size} (the zoo's keys are as wide)"
    if config.linear_num_value_heads % config.linear_num_key_heads:
        return "linear_num_value_heads not a multiple of linear_num_key_heads"
    if int(config.hidden_size * (value_width / config.hidden_size)) != value_width:
        return f"a value width of {value_width} that expand_v cannot state"
    if config.hidden_act != "silu":
        return f"hidden_act {config.hidden_act!r} after the convolution (the zoo's is silu)"
    return None


def qwen3_next_gated_deltanet_layer(config: Any, **options: Any) -> GatedDeltaNetAttention:
    """The zoo's ``gated_deltanet`` with a ``Qwen3NextConfig``'s linear-attention sizes and its norm's
    epsilon (see the module docstring; ``options``: the zoo's ``mode``, ``chunk_size``)."""
    _refuse("Qwen3NextConfig", _qwen3_next_problem(config))
    value_width = config.linear_num_value_heads * config.linear_value_head_dim
    layer = GatedDeltaNetAttention(
        config.hidden_size, config.linear_num_value_heads, expand_v=value_width / config.hidden_size,
        num_key_heads=config.linear_num_key_heads, conv_size=config.linear_conv_kernel_dim, bias=False, **options,
    )  # fmt: skip
    layer.norm.eps = config.rms_norm_eps
    return layer


def qwen3_next_gated_deltanet_pair(config: Any) -> LayerPair:
    """``Qwen3NextGatedDeltaNet``'s state dict and the zoo's ``gated_deltanet``'s (with ``num_key_heads``)."""
    heads, key_dim = config.linear_num_key_heads, config.linear_key_head_dim
    group = config.linear_num_value_heads // heads
    group_values = group * config.linear_value_head_dim
    value_width = heads * group_values
    qkvz = (("q_proj.weight", key_dim), ("k_proj.weight", key_dim), ("v_proj.weight", group_values))
    channels = (("q_conv", heads * key_dim), ("k_conv", heads * key_dim), ("v_conv", value_width))
    return LayerPair(
        "Qwen3NextGatedDeltaNet",
        (
            Fused("in_proj_qkvz.weight", (*qkvz, ("gate.weight", group_values)), groups=heads),
            Fused("in_proj_ba.weight", (("beta.weight", group), ("decay.proj.weight", group)), groups=heads),
        )
        + _conv("conv1d", channels, bias=False),
        (
            ("dt_bias", "decay.dt_bias"), ("A_log", "decay.A_log"), ("norm.weight", "norm.weight"),
            ("out_proj.weight", "out_proj.weight"),
        ),
    )  # fmt: skip


# -- by module ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HFFamily:
    """A transformers layer class's zoo layer builder and state-dict map, each from its config."""

    build: Callable[..., RecurrentLayer]
    pair: Callable[[Any], LayerPair]


#: the transformers layer classes the zoo computes, by class name
FAMILIES: dict[str, HFFamily] = {
    "Mamba2Mixer": HFFamily(mamba2_layer, mamba2_pair),
    "Qwen3NextGatedDeltaNet": HFFamily(qwen3_next_gated_deltanet_layer, qwen3_next_gated_deltanet_pair),
}


def _family(module: nn.Module) -> HFFamily:
    name = type(module).__name__
    if name not in FAMILIES:
        raise ConfigurationError(f"no zoo layer maps {name}; the layers that do: {', '.join(FAMILIES)}.")
    return FAMILIES[name]


def from_hf_layer(module: nn.Module, config: Any, **options: Any) -> RecurrentLayer:
    """The zoo's layer equal to transformers' ``module`` (built from ``config``), with its weights,
    on its device and in its dtype; ``options`` go to the zoo layer (``mode``, ``chunk_size``)."""
    family = _family(module)
    layer = family.build(config, **options)
    parameter = next(module.parameters())
    layer.to(device=parameter.device, dtype=parameter.dtype)
    layer.load_state_dict(family.pair(config).to_zoo(module.state_dict()))
    return layer


def into_hf_layer(layer: nn.Module, module: nn.Module, config: Any) -> None:
    """Load the zoo ``layer``'s weights into transformers' ``module`` (both built from ``config``), strictly."""
    module.load_state_dict(_family(module).pair(config).from_zoo(layer.state_dict()))
