"""A Qwen3-Next-shaped transformers model and the zoo GPT converted from it
(``zoo.integrations.hf_models``), weight for weight.

The model is Qwen3-Next's production config (``Qwen3NextConfig()``'s defaults) shrunk in width and
depth only: hidden 64 (of 2048); Gated DeltaNet layers with 4 key heads of 16 and 8 value heads of
16 (16 of 128 and 32 of 128: keys as wide as the hidden size, two value heads per key head); gated
attention with 8 query heads of 16 and 1 key/value head (16 of 256 and 2: eight to one, heads twice
the hidden size), a quarter of each head rotated; MLPs 176 wide (5632 / 32); four layers, three
linear to one full; every layer dense through ``mlp_only_layers`` (the experts are out of scope).
Weights: transformers' initialization from a seed plus noise on every parameter, norm scales on a
grid of 2^-6 so that the attention's ``1 + w`` shift is exact both ways; float32.

The delta rule's L2 norm: transformers (as fla) divides by ``sqrt(|x|^2 + 1e-6)``, the zoo's
default by ``max(|x|, 1e-12)``; the converted layers take ``qk_norm_eps=1e-6``, transformers' form.
The logits then agree to float32's rounding (3e-6 of the largest here, 3e-7 at transformers' own
initialization, whose short queries the two forms would part on by 4e-3): ``1e-5`` of the
largest, which the first two tests hold.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from transformers import Qwen3NextConfig, Qwen3NextForCausalLM  # noqa: E402

from zoo.errors import ConfigurationError  # noqa: E402
from zoo.integrations.hf_models import gpt_from_transformers, gpt_into_transformers  # noqa: E402

#: the largest difference of the logits allowed, as a share of the largest logit
LOGITS = 1e-5
PROMPT, NEW_TOKENS = 12, 20


def small_config(**changes: object) -> Qwen3NextConfig:
    """Qwen3-Next's production config shrunk in width and depth (see the module docstring)."""
    sizes = dict(
        hidden_size=64, intermediate_size=176, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=1,
        head_dim=16, linear_num_key_heads=4, linear_key_head_dim=16, linear_num_value_heads=8,
        linear_value_head_dim=16, layer_types=["linear_attention"] * 3 + ["full_attention"],
        mlp_only_layers=[0, 1, 2, 3], vocab_size=256,
    )  # fmt: skip
    return Qwen3NextConfig(**(sizes | changes))


@pytest.fixture(scope="module")
def hf_model() -> Qwen3NextForCausalLM:
    torch.manual_seed(0)
    model = Qwen3NextForCausalLM(small_config()).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
            if "norm" in name:
                parameter.copy_((parameter * 64).round() / 64)
    return model


def batch(length: int = 48) -> torch.Tensor:
    return torch.randint(0, 256, (2, length), generator=torch.Generator().manual_seed(1))


def test_logits_of_a_batch_are_transformers(hf_model: Qwen3NextForCausalLM) -> None:
    gpt, tokens = gpt_from_transformers(hf_model), batch()
    assert not gpt.training
    with torch.no_grad():
        expected, (logits, _) = hf_model(tokens).logits, gpt(tokens)
    assert expected.abs().max() > 1  # logits of a size that a wrong map would move
    assert (logits - expected).abs().max() <= LOGITS * expected.abs().max()


def test_at_transformers_initialization_the_logits_agree_too() -> None:
    """Unperturbed weights (projections of standard deviation 0.02): queries and keys so short that
    the L2 norm's epsilon matters, which ``qk_norm_eps`` takes as transformers does."""
    torch.manual_seed(0)
    model, tokens = Qwen3NextForCausalLM(small_config()).eval(), batch()
    with torch.no_grad():
        expected, (logits, _) = model(tokens).logits, gpt_from_transformers(model)(tokens)
    assert (logits - expected).abs().max() <= LOGITS * expected.abs().max()


def test_greedy_generation_gives_transformers_tokens(hf_model: Qwen3NextForCausalLM) -> None:
    gpt, prompt = gpt_from_transformers(hf_model), batch(PROMPT)
    expected = hf_model.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS)
    generated = torch.stack(list(gpt.generate(prompt, NEW_TOKENS, temperature=0)), dim=1)
    assert expected.shape == (2, PROMPT + NEW_TOKENS)
    assert torch.equal(generated, expected[:, PROMPT:])


def test_round_trip_keeps_every_tensor(hf_model: Qwen3NextForCausalLM) -> None:
    """transformers -> zoo -> transformers, into a model whose weights were zeroed, and zoo ->
    transformers -> zoo: bit for bit, so a tensor the map leaves out fails by name."""
    hf_state = {key: value.clone() for key, value in hf_model.state_dict().items()}
    gpt = gpt_from_transformers(hf_model)
    zoo_state = {key: value.clone() for key, value in gpt.state_dict().items()}
    target = Qwen3NextForCausalLM(small_config()).eval()
    with torch.no_grad():
        for parameter in target.parameters():
            parameter.zero_()
    gpt_into_transformers(gpt, target)
    assert target.state_dict().keys() == hf_state.keys()
    for key, value in target.state_dict().items():
        assert torch.equal(value, hf_state[key]), key
    again = gpt_from_transformers(target).state_dict()
    assert again.keys() == zoo_state.keys()
    for key, value in again.items():
        assert torch.equal(value, zoo_state[key]), key


def test_experts_and_other_models_are_refused_in_one_line() -> None:
    moe = Qwen3NextForCausalLM(
        small_config(mlp_only_layers=[0, 1], num_experts=2, num_experts_per_tok=1, moe_intermediate_size=8)
    )
    with pytest.raises(ConfigurationError, match=r"layers \[2, 3\] are mixtures of experts") as error:
        gpt_from_transformers(moe)
    assert "\n" not in str(error.value)
    with pytest.raises(ConfigurationError, match="converts a Qwen3NextForCausalLM, got Linear"):
        gpt_from_transformers(torch.nn.Linear(2, 2))
