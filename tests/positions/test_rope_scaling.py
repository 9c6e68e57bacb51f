"""RoPE's frequency scaling (``zoo.positions.rope_scaling``) and the proportional partial rotation.

Each rule is checked against what it means, written here: linear scaling is the default rotation at
positions ``m / s``; Llama 3.1's and YaRN's rules keep the short wavelengths and divide the long ones
by the factor; YaRN multiplies every score of rotated features by its temperature squared. Where
transformers is installed, the inverse frequencies and YaRN's factor equal its ``ROPE_INIT_FUNCTIONS``
for the released configs' parameters.
"""

from __future__ import annotations

import math

import pytest
import torch

from zoo.errors import ConfigurationError
from zoo.models import GPT
from zoo.positions.rope_scaling import LinearScaling, Llama3Scaling, YarnScaling, rope_scaling, yarn_mscale
from zoo.positions.rotary import RotaryEmbedding

HEAD = 32


def default_frequencies(base: float = 10000.0, dim: int = HEAD) -> torch.Tensor:
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)


def test_linear_scaling_rotates_position_m_as_the_default_rotates_m_over_s() -> None:
    x = torch.randn(2, 3, 50, HEAD)
    positions = torch.arange(50)
    scaled = RotaryEmbedding(HEAD, scaling={"type": "linear", "factor": 4.0})(x, positions)
    angles = (positions.double()[:, None] / 4.0) * default_frequencies()
    first, second = x.double().chunk(2, -1)
    expected = torch.cat(
        [first * angles.cos() - second * angles.sin(), first * angles.sin() + second * angles.cos()], -1
    )
    torch.testing.assert_close(scaled.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "rule",
    [
        Llama3Scaling(8.0, original_max_len=512, low_freq_factor=1.0, high_freq_factor=4.0),
        YarnScaling(16.0, original_max_len=512),
    ],
)
def test_short_wavelengths_are_kept_and_long_ones_divided_by_the_factor(rule) -> None:
    """Pairs turning many times within the original context keep their frequency; pairs that never
    complete a turn in it are divided by the factor; the ones between lie between."""
    theta = default_frequencies().float()
    scaled = rule.scale(theta, 10000.0)
    turns = rule.original_max_len * theta / (2 * math.pi)  # turns of each pair within the original context
    torch.testing.assert_close(scaled[turns > 32], theta[turns > 32])
    torch.testing.assert_close(scaled[turns < 1], theta[turns < 1] / rule.factor)
    between = (turns >= 1) & (turns <= 32)
    assert between.any()
    assert bool(
        ((scaled[between] <= theta[between] * (1 + 1e-6)) & (scaled[between] >= theta[between] / rule.factor)).all()
    )


def test_yarn_multiplies_each_rotated_score_by_its_temperature_squared() -> None:
    """With the frequencies left alone (a ramp that keeps every pair), the scores of rotated
    queries and keys are the default rotation's times ``(0.1 ln s + 1)^2``."""
    keep_all = YarnScaling(64.0, original_max_len=10**9)  # every wavelength short against this context
    plain, yarn = RotaryEmbedding(HEAD), RotaryEmbedding(HEAD, scaling=keep_all)
    q, k, positions = torch.randn(1, 2, 9, HEAD), torch.randn(1, 2, 9, HEAD), torch.arange(9)
    expected = plain(q, positions) @ plain(k, positions).transpose(-1, -2) * (0.1 * math.log(64.0) + 1) ** 2
    torch.testing.assert_close(yarn(q, positions) @ yarn(k, positions).transpose(-1, -2), expected)


def test_deepseek_temperature_ratio_and_a_given_attention_factor() -> None:
    assert YarnScaling(40.0, 4096, mscale=1.0, mscale_all_dim=1.0).amplitude == 1.0
    assert YarnScaling(40.0, 4096, mscale=0.707, mscale_all_dim=1.0).amplitude == pytest.approx(
        yarn_mscale(40.0, 0.707) / yarn_mscale(40.0, 1.0)
    )
    assert YarnScaling(4.0, 4096, attention_factor=1.25).amplitude == 1.25
    assert yarn_mscale(1.0) == 1.0


def test_proportional_rotation_turns_the_leading_pairs_of_the_whole_head() -> None:
    """Gemma 4's layout: pairs ``i, i + d/2`` for ``i < f d / 2`` turn at ``base^(-2i/d)``; the other
    features pass unchanged."""
    rotary = RotaryEmbedding(HEAD, fraction=0.25, partial="proportional")
    x, positions = torch.randn(1, 1, 7, HEAD), torch.arange(7)
    out = rotary(x, positions)
    pairs = HEAD // 8  # a quarter of the head's 16 pairs
    angles = positions.double()[:, None] * default_frequencies()[:pairs]
    first, second = x[..., :pairs].double(), x[..., HEAD // 2 : HEAD // 2 + pairs].double()
    # the layer rotates in float32: float32's tolerance, not float64's default (which failed once)
    close = {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(out[..., :pairs].double(), first * angles.cos() - second * angles.sin(), **close)
    torch.testing.assert_close(
        out[..., HEAD // 2 : HEAD // 2 + pairs].double(), first * angles.sin() + second * angles.cos(), **close
    )
    untouched = torch.ones(HEAD, dtype=torch.bool)
    untouched[:pairs] = untouched[HEAD // 2 : HEAD // 2 + pairs] = False
    torch.testing.assert_close(out[..., untouched], x[..., untouched])


def test_a_narrower_head_keeps_the_rule() -> None:
    rule = YarnScaling(8.0, 256)
    narrow = RotaryEmbedding(HEAD, scaling=rule, fraction=0.5).for_head_dim(16)
    assert narrow.scaling is rule and narrow.fraction == 0.5


def test_a_gpt_takes_the_rule_from_its_position_keywords() -> None:
    model = GPT(vocab_size=11, block_size=16, d_model=32, num_heads=2, num_layers=1, position="rope",
                position_kwargs={"scaling": {"type": "yarn", "factor": 4.0, "original_max_len": 8}})  # fmt: skip
    schemes = [module for module in model.modules() if isinstance(module, RotaryEmbedding)]
    assert schemes and all(scheme.scaling == YarnScaling(4.0, 8) for scheme in schemes)
    logits = model(torch.randint(0, 11, (1, 16)))
    logits = logits if isinstance(logits, torch.Tensor) else logits[0]
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"type": "yran", "factor": 2.0}, "did you mean 'yarn'"),
        ({"type": "yarn", "factr": 2.0, "original_max_len": 8}, "did you mean 'factor'"),
        ({"type": "yarn", "factor": 2.0}, "original_max_len"),
        ({"type": "linear", "factor": 0.5}, "factor of 1 or more"),
    ],
)
def test_a_bad_rule_is_one_line_naming_the_fix(spec: dict, named: str) -> None:
    with pytest.raises(ConfigurationError, match=named) as caught:
        rope_scaling(spec)
    assert "\n" not in str(caught.value)


def test_proportional_rotation_takes_linear_scaling_only() -> None:
    assert RotaryEmbedding(HEAD, fraction=0.5, partial="proportional", scaling=LinearScaling(2.0)).scaling.factor == 2.0
    with pytest.raises(ValueError, match="linear scaling only"):
        RotaryEmbedding(HEAD, fraction=0.5, partial="proportional", scaling=YarnScaling(2.0, 8))


#: rope_parameters as the released configs write them, at their head sizes
GPT_OSS = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0}
DEEPSEEK_V3 = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0}
LLAMA3_1 = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
}
TRANSFORMERS_CASES = {
    "gpt_oss_yarn": (GPT_OSS | {"truncate": False, "original_max_position_embeddings": 4096}, 64),
    "deepseek_v3_yarn": (DEEPSEEK_V3 | {"beta_fast": 32, "beta_slow": 1, "original_max_position_embeddings": 4096}, 64),
    "qwen3_yarn": (
        {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0, "original_max_position_embeddings": 32768},
        128,
    ),
    "llama3_1": (LLAMA3_1 | {"original_max_position_embeddings": 8192}, 128),
    "gemma3_linear": ({"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0}, 128),
    "gemma4_proportional": ({"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": 0.25}, 256),
    "partial_yarn": (
        {
            "rope_type": "yarn",
            "rope_theta": 1e4,
            "factor": 8.0,
            "original_max_position_embeddings": 2048,
            "partial_rotary_factor": 0.5,
        },
        64,
    ),
}


@pytest.mark.parametrize("case", list(TRANSFORMERS_CASES))
def test_frequencies_and_factor_are_transformers(case: str) -> None:
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from zoo.integrations.hf_layers.rope import hf_rotary

    parameters, head_dim = TRANSFORMERS_CASES[case]
    config = LlamaConfig(hidden_size=head_dim * 2, num_attention_heads=2, head_dim=head_dim, rope_parameters=parameters,
                         max_position_embeddings=131072)  # fmt: skip
    expected, factor = ROPE_INIT_FUNCTIONS[parameters["rope_type"]](config, "cpu")
    rotary = hf_rotary("LlamaConfig", config, head_dim)
    torch.testing.assert_close(rotary.inverse_frequency(), expected.float(), rtol=1e-6, atol=0.0)
    assert (rotary.scaling.amplitude if rotary.scaling else 1.0) == pytest.approx(factor)
