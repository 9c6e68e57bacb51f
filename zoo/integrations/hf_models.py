"""Hugging Face transformers' Qwen3-Next causal LM as the zoo's :class:`~zoo.models.gpt.GPT`, weight
for weight, and back.

Why: the single-layer maps of :mod:`zoo.integrations.hf_layers` hold each production layer equal to
transformers'; a whole model checks what they leave out (embeddings, norms, MLPs, the head, the
order of the sublayers, cached decoding across a hybrid stack) and lets a trained Qwen3-Next-shaped
checkpoint run, train or decode as a zoo GPT::

    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM
    from zoo.integrations.hf_models import gpt_from_transformers, gpt_into_transformers

    config = Qwen3NextConfig(hidden_size=64, intermediate_size=176, num_hidden_layers=4,
                             layer_types=["linear_attention"] * 3 + ["full_attention"],
                             mlp_only_layers=[0, 1, 2, 3], num_attention_heads=8, num_key_value_heads=1,
                             head_dim=16, linear_num_key_heads=4, linear_key_head_dim=16,
                             linear_num_value_heads=8, linear_value_head_dim=16, vocab_size=256)
    hf_model = Qwen3NextForCausalLM(config).eval()
    gpt = gpt_from_transformers(hf_model).eval()      # the same logits, the same greedy tokens
    gpt_into_transformers(gpt, hf_model)              # and its weights written back

Qwen3-Next's decoder layer (``Qwen3NextDecoderLayer``, ``Qwen3NextModel``)::

    h = x + mixer(norm_1(x))            mixer: Gated DeltaNet or gated attention, by layer_types
    y = h + down(silu(gate(norm_2(h))) * up(norm_2(h)))
    logits = lm_head(norm(x_L))         norms: zero-centred RMSNorm, scale 1 + w, eps rms_norm_eps

with no embedding scale and no biases outside the attention's (``attention_bias``). The GPT
states the same with ``mlp="swiglu"``, ``norm="zero_centred_rmsnorm"``, ``norm_eps``,
``tie_embeddings`` (off in Qwen3-Next), ``bias=False`` and ``position="none"``; its norms store
``w`` as transformers does, so they map by name.

Where the zoo departs: each block's layer is the one :data:`~zoo.integrations.hf_layers.FAMILIES`
builds from the config (its own rotary scheme, heads and norms' epsilon), put in place of the one
the GPT's ``attention`` list builds. A GPT's ``position`` and ``num_heads`` are the stack's,
while Qwen3-Next rotates only its attention layers (a quarter of each head) and gives its linear
layers their own head counts; so ``GPT(**arguments)`` alone does not rebuild the converted model:
convert again, or keep the transformers config beside its weights. Mixture-of-experts layers are
refused in one line (list every layer in ``mlp_only_layers``), as are other layer types and
activations; transformers' experts are out of the zoo's scope.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from zoo.errors import ConfigurationError
from zoo.integrations.hf_layers import FAMILIES
from zoo.integrations.hf_layers.state_maps import LayerPair
from zoo.models.gpt import GPT

__all__ = ["ModelMap", "gpt_from_transformers", "gpt_into_transformers"]

#: Qwen3-Next's ``layer_types``: the decoder layer's attribute holding the mixer, and the GPT's entry
MIXERS: dict[str, tuple[str, str | dict[str, Any]]] = {
    "linear_attention": ("linear_attn", "gated_deltanet"),
    "full_attention": ("self_attn", {"name": "gated_attention", "qk_norm": True}),
}


@dataclass(frozen=True)
class ModelMap:
    """A whole model's state dicts: each mixer's tensors under its prefixes through its layer's
    :class:`LayerPair` (``(transformers prefix, zoo prefix, pair)``), the rest through ``rest``;
    every tensor accounted for on both sides. ``tied``: transformers' ``lm_head.weight`` is the
    token embedding (left out going to the zoo, written from it coming back)."""

    mixers: tuple[tuple[str, str, LayerPair], ...]
    rest: LayerPair
    tied: bool

    def to_zoo(self, hf_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """The GPT's state dict from transformers'."""
        rest = {key: value for key, value in hf_state.items() if not (self.tied and key == "lm_head.weight")}
        state: dict[str, Tensor] = {}
        for hf_prefix, zoo_prefix, pair in self.mixers:
            part = {key[len(hf_prefix) :]: rest.pop(key) for key in list(rest) if key.startswith(hf_prefix)}
            state |= {zoo_prefix + key: value for key, value in pair.to_zoo(part).items()}
        return state | self.rest.to_zoo(rest)

    def from_zoo(self, zoo_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """transformers' state dict from the GPT's."""
        rest = dict(zoo_state)
        state: dict[str, Tensor] = {}
        for hf_prefix, zoo_prefix, pair in self.mixers:
            part = {key[len(zoo_prefix) :]: rest.pop(key) for key in list(rest) if key.startswith(zoo_prefix)}
            state |= {hf_prefix + key: value for key, value in pair.from_zoo(part).items()}
        state |= self.rest.from_zoo(rest)
        return state | ({"lm_head.weight": state["model.embed_tokens.weight"]} if self.tied else {})


def _mixer(decoder_layer: nn.Module, layer_type: str) -> nn.Module:
    return getattr(decoder_layer, MIXERS[layer_type][0])


def _check(model: nn.Module) -> Any:
    """``model``'s config, or one line naming what of it the zoo's GPT cannot build."""
    if type(model).__name__ != "Qwen3NextForCausalLM":
        raise ConfigurationError(
            f"gpt_from_transformers converts a Qwen3NextForCausalLM, got {type(model).__name__}; "
            "map single layers with zoo.integrations.hf_layers.from_hf_layer."
        )
    config = model.config
    problem = None
    if unknown := sorted(set(config.layer_types) - set(MIXERS)):
        problem = f"layer_types {unknown} (the zoo maps {', '.join(MIXERS)})"
    elif experts := [
        i
        for i in range(config.num_hidden_layers)
        if i not in config.mlp_only_layers and config.num_experts > 0 and (i + 1) % config.decoder_sparse_step == 0
    ]:
        problem = f"layers {experts} are mixtures of experts (the GPT's MLPs are dense: list them in mlp_only_layers)"
    elif config.hidden_act != "silu":
        problem = f"hidden_act {config.hidden_act!r} in the MLP (the GPT's gated MLP is swiglu)"
    if problem:
        raise ConfigurationError(f"Qwen3NextConfig: {problem}; the zoo's GPT has no such option.")
    return config


def _model_map(model: nn.Module) -> ModelMap:
    """The map between ``model``'s state dict and its GPT's."""
    config = model.config
    mixers, renamed = (
        [],
        [("model.embed_tokens.weight", "embedding.weight"), ("model.norm.weight", "final_norm.weight")],
    )
    for i, (layer_type, decoder_layer) in enumerate(zip(config.layer_types, model.model.layers)):
        mixer = _mixer(decoder_layer, layer_type)
        family = FAMILIES[type(mixer).__name__]
        hf, zoo = f"model.layers.{i}.", f"blocks.{i}."
        mixers.append((f"{hf}{MIXERS[layer_type][0]}.", f"{zoo}attention.", family.pair(config, **family.layer(mixer))))
        renamed += [(f"{hf}input_layernorm.weight", f"{zoo}add_norm1.norm.weight")]
        renamed += [(f"{hf}post_attention_layernorm.weight", f"{zoo}add_norm2.norm.weight")]
        renamed += [(f"{hf}mlp.{p}.weight", f"{zoo}ffn.{p}.weight") for p in ("gate_proj", "up_proj", "down_proj")]
    if not config.tie_word_embeddings:
        renamed.append(("lm_head.weight", "lm_head.weight"))
    return ModelMap(tuple(mixers), LayerPair("Qwen3NextForCausalLM", (), tuple(renamed)), config.tie_word_embeddings)


def gpt_from_transformers(model: nn.Module, **options: Any) -> GPT:
    """The zoo GPT equal to transformers' ``Qwen3NextForCausalLM`` ``model``, with its weights, on
    its device and in its dtype and training mode; ``options`` go to each mixer's zoo layer
    (``mode``, ``chunk_size``)."""
    config = _check(model)
    gpt = GPT(
        config.vocab_size, block_size=config.max_position_embeddings, d_model=config.hidden_size,
        num_heads=config.num_attention_heads, num_layers=config.num_hidden_layers, ffn_hidden=config.intermediate_size,
        bias=False, attention=[MIXERS[t][1] for t in config.layer_types], position="none", mlp="swiglu",
        norm="zero_centred_rmsnorm", norm_eps=config.rms_norm_eps, tie_embeddings=config.tie_word_embeddings,
    )  # fmt: skip
    for block, layer_type, decoder_layer in zip(gpt.blocks, config.layer_types, model.model.layers):
        mixer = _mixer(decoder_layer, layer_type)
        family = FAMILIES[type(mixer).__name__]
        block.attention = family.build(config, **family.layer(mixer), **options)
    parameter = next(model.parameters())
    gpt.to(device=parameter.device, dtype=parameter.dtype)
    gpt.load_state_dict(_model_map(model).to_zoo(model.state_dict()))
    return gpt.train(model.training)


def gpt_into_transformers(gpt: GPT, model: nn.Module) -> None:
    """Load ``gpt``'s weights (a :func:`gpt_from_transformers` of a model of the same config) into
    transformers' ``model``, strictly."""
    _check(model)
    model.load_state_dict(_model_map(model).from_zoo(gpt.state_dict()))
